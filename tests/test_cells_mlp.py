"""stability/cells/mlp.py and the rectangular SVD of stability/parametrizations/householder.py.

The maths against independent computations: reflectors multiplied out one by one,
``torch.linalg.svdvals``, and an explicit dense forward written here.
"""
import dataclasses
import gzip

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from stability import cells
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.parametrizations.householder import HouseholderSVD, RectangularHouseholderSVD
from stability.tasks import build as build_task
from stability.tasks import mnist
from stability.tasks.download import md5sum
from stability.execution.lifecycle import train_run

SHAPES = [(5, 9), (9, 5), (6, 6), (1, 4)]


# ------------------------------------------------------------------ independent references
def explicit_product(flat: torch.Tensor, size: int, count: int) -> torch.Tensor:
    """H(u_n) H(u_{n-1}) ... multiplied out one reflector at a time (spectral paper eq. 1-2)."""
    product, start = torch.eye(size, dtype=flat.dtype), 0
    for j in range(count):
        u = torch.zeros(size, dtype=flat.dtype)
        u[j:] = flat[start:start + size - j]  # u_{n-j}, acting on the last n - j coordinates
        start += size - j
        product = product @ (torch.eye(size, dtype=flat.dtype) - 2 * torch.outer(u, u) / (u @ u))
    return product


def explicit_svd(svd: RectangularHouseholderSVD, theta: torch.Tensor, m1: int, m2: int, r: float, sigma_star: float):
    """U, V and U Sigma_hat V^T of eq. 8 for one layer's flat theta, Sigma_hat the (rows, cols) diagonal."""
    rows, cols, p = svd.rows, svd.cols, min(svd.rows, svd.cols)
    left = sum(rows - j for j in range(m1))
    right = sum(cols - j for j in range(m2))
    u, v, sigma_hat = theta[:left], theta[left:left + right], theta[left + right:]
    U, V = explicit_product(u, rows, m1), explicit_product(v, cols, m2)
    sigma = sigma_star + 2 * r * (torch.sigmoid(sigma_hat) - 0.5)
    sigma_full = torch.zeros(rows, cols, dtype=theta.dtype)
    sigma_full[range(p), range(p)] = sigma
    return U, V, U @ sigma_full @ V.T


def random_theta(svd, *stack, spread=4.0):
    theta = svd.sample(*stack, dtype=torch.float64)
    theta[..., -svd.rank:] = torch.randn(*stack, svd.rank, dtype=torch.float64) * spread  # sigma far from sigma*
    return theta


# --------------------------------------------------------------------- the parametrization
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_rectangular_svd_is_eq_8_and_its_singular_values_stay_in_the_band(rows, cols):
    p = min(rows, cols)
    r, sigma_star = 0.3, 1.0
    for m1, m2 in ((p, p), (1, max(1, p - 1))):
        svd = RectangularHouseholderSVD(rows, cols, m1, m2, r, sigma_star)
        theta = random_theta(svd, 2)
        weights = svd(theta)
        assert weights.shape == (2, rows, cols)
        for layer in range(2):
            U, V, reference = explicit_svd(svd, theta[layer], m1, m2, r, sigma_star)
            torch.testing.assert_close(U.T @ U, torch.eye(rows, dtype=torch.float64))
            torch.testing.assert_close(V.T @ V, torch.eye(cols, dtype=torch.float64))
            torch.testing.assert_close(weights[layer], reference, rtol=1e-10, atol=1e-12)
            values = torch.linalg.svdvals(weights[layer])
            assert len(values) == p
            assert values.min() >= sigma_star - r - 1e-12 and values.max() <= sigma_star + r + 1e-12
            torch.testing.assert_close(values, svd.singular_values(theta[layer]).sort(descending=True).values)
        assert (values - sigma_star).abs().max() > 0.1  # sigma reached into the band, not just its centre


def test_with_sigma_star_and_no_band_the_layer_has_orthonormal_rows_or_columns():
    for rows, cols in ((4, 11), (11, 4)):
        svd = RectangularHouseholderSVD(rows, cols, min(rows, cols), min(rows, cols), 0.0, 1.0)
        w = svd(random_theta(svd))
        gram = w @ w.T if rows < cols else w.T @ w
        torch.testing.assert_close(gram, torch.eye(min(rows, cols), dtype=torch.float64))


def test_a_square_rectangular_svd_is_the_spectral_rnn_map():
    square = HouseholderSVD(7, 5, 3, 0.2, 1.0)
    theta = square.sample(torch.float64)
    theta[-7:] = torch.randn(7, dtype=torch.float64)
    torch.testing.assert_close(RectangularHouseholderSVD(7, 7, 5, 3, 0.2, 1.0)(theta), square(theta))


def test_normalized_keeps_every_layer_and_gives_unit_reflectors():
    svd = RectangularHouseholderSVD(4, 6, 4, 3, 0.1, 1.0)
    theta = random_theta(svd, 2) * torch.linspace(0.5, 3.0, svd.parameter_count, dtype=torch.float64)
    unit = svd.normalized(theta)
    torch.testing.assert_close(svd(unit), svd(theta))
    left = svd.left.parameter_count
    first = unit[0, :4]  # u_4, the first reflector of U
    assert first.norm().item() == pytest.approx(1.0)
    assert torch.equal(unit[..., left + svd.right.parameter_count:], theta[..., -svd.rank:])


def test_too_many_reflectors_for_the_shape_is_one_line():
    with pytest.raises(ValueError, match=r"m2 must be between 1 and min\(rows, cols\) = 3"):
        RectangularHouseholderSVD(3, 8, 3, 4, 0.1, 1.0)


# ------------------------------------------------------------------------------ the cell
def make(**options):
    torch.manual_seed(0)
    return cells.build("mlp", 6, 5, **options).double()


def explicit_forward(cell, x, h0):
    """The stack written out with the cell's dense matrices: a_0, ..., a_L of one step (x: (B, in))."""
    slope = cell.negative_slope
    weights = cell.weight_hh  # (L, n, n), dense or built from reflectors
    a = F.leaky_relu(x @ cell.input_proj.weight.T + cell.input_proj.bias, slope) + h0
    states = [a]
    for index in range(cell.layers):
        new = F.leaky_relu(a @ weights[index].T + cell.bias_hh[index], slope)
        if cell.residual and (index % 2 == 1 or index == cell.layers - 1):
            new = new + states[2 * (index // 2)]  # the block's input a_{l-2} (a_{l-1} for a last odd layer)
        a = new
        states.append(a)
    return states


@pytest.mark.parametrize("options", [{"layer": "dense"}, {"layer": "spectral", "r": 0.2},
                                     {"layer": "dense", "residual": True},
                                     {"layer": "spectral", "residual": True, "m1": 2, "m2": 3}])
def test_probe_gives_first_and_last_layer_gradients_of_an_explicit_forward(options):
    cell = make(layers=5, **options)
    with torch.no_grad():
        cell.bias_hh.normal_(0, 0.3)
    x = torch.randn(3, 1, 6, dtype=torch.float64)
    h0 = (torch.randn(3, 5, dtype=torch.float64) * 0.3).requires_grad_()
    probe = torch.zeros(3, 1, 5, dtype=torch.float64, requires_grad=True)
    target = torch.randn(3, 5, dtype=torch.float64)
    outputs, h_last = cell(x, h0, state_probe=probe)
    ((outputs[:, -1] - target) ** 2).sum().backward()

    reference_h0 = h0.detach().clone().requires_grad_()
    states = explicit_forward(cell, x[:, 0], reference_h0)
    for state in states:
        state.retain_grad()
    ((states[-1] - target) ** 2).sum().backward()
    torch.testing.assert_close(outputs[:, 0], states[-1])
    torch.testing.assert_close(h0.grad, states[0].grad)         # dL/da_0: the first-layer gradient
    torch.testing.assert_close(probe.grad[:, 0], states[-1].grad)  # dL/da_L
    assert states[0].grad.abs().sum() > 0


@pytest.mark.parametrize("options", [{"layer": "dense"}, {"layer": "spectral", "r": 0.2},
                                     {"layer": "dense", "residual": True}])
def test_the_layer_probe_gives_every_layers_gradient_of_an_explicit_forward(options):
    cell = make(layers=5, **options)
    with torch.no_grad():
        cell.bias_hh.normal_(0, 0.3)
    x = torch.randn(3, 1, 6, dtype=torch.float64)
    h0 = torch.randn(3, 5, dtype=torch.float64) * 0.3
    target = torch.randn(3, 5, dtype=torch.float64)
    probe = torch.zeros(6, 3, 5, dtype=torch.float64, requires_grad=True)
    with cell.probing_layers(probe):
        outputs, _ = cell(x, h0)
    ((outputs[:, -1] - target) ** 2).sum().backward()
    assert cell._layer_probe is None  # closed: the next forward is the plain one

    states = explicit_forward(cell, x[:, 0], h0)
    for state in states:
        state.retain_grad()
    ((states[-1] - target) ** 2).sum().backward()
    for layer, state in enumerate(states):  # dL/da_l for l = 0..L
        torch.testing.assert_close(probe.grad[layer], state.grad)
    with pytest.raises(ValueError, match="probe of shape"):
        with cell.probing_layers(torch.zeros(5, 3, 5)):
            pass


@pytest.mark.parametrize("options", [{"layer": "dense"}, {"layer": "dense", "residual": True},
                                     {"layer": "dense", "residual": True, "layers": 3},
                                     {"layer": "spectral", "r": 0.3}])
def test_the_gradient_flow_bound_holds_for_the_step_jacobian_and_the_measured_flow(options):
    from stability.training.probes import gradient_flow

    cell = make(**{"layers": 4, **options})
    with torch.no_grad():
        if cell.layer == "dense":
            cell.weight_hh.mul_(3.0)  # norms well above 1: the bound is not trivially loose at 1
    s = torch.linalg.svdvals(cell.weight_hh.detach()).max().item()  # the largest of any hidden layer
    gain = cell.step_gain_bound(s)
    x = torch.randn(1, 1, 6, dtype=torch.float64)
    jacobian = torch.autograd.functional.jacobian(lambda h: cell(x, h)[1], torch.randn(1, 5, dtype=torch.float64))
    assert torch.linalg.matrix_norm(jacobian.reshape(5, 5), ord=2).item() <= gain * (1 + 1e-9)
    flow = gradient_flow(cell, seq_len=6)
    assert flow.per_step["bound"].iloc[-2] == pytest.approx(gain)  # one step back
    assert (flow.per_step["grad_norm"] <= flow.per_step["bound"] * (1 + 1e-9)).all()


def test_each_step_runs_the_whole_stack_from_the_previous_state():
    cell = make(layers=3, layer="spectral", r=0.1)
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    outputs, _ = cell(x)
    h = torch.zeros(2, 5, dtype=torch.float64)
    for t in range(3):
        h = explicit_forward(cell, x[:, t], h)[-1]
        torch.testing.assert_close(outputs[:, t], h)


@pytest.mark.parametrize("layer", ["dense", "spectral"])
def test_recurrent_matrix_is_spread_over_every_hidden_layers_singular_values(layer):
    cell = make(layers=4, layer=layer, r=0.3)
    if layer == "spectral":
        with torch.no_grad():
            cell.parametrizations.weight_hh.original[:, -5:].normal_(0, 3)
    pooled = torch.linalg.svdvals(cell.weight_hh.detach()).flatten().sort(descending=True).values  # (20,)
    summary = torch.diagonal(cell.recurrent_matrix())
    assert summary.shape == (5,)
    torch.testing.assert_close(summary[0], pooled[0])
    torch.testing.assert_close(summary[-1], pooled[-1])
    assert all(torch.isclose(value, pooled).any() for value in summary)  # every entry is some layer's σ
    assert torch.all(summary[:-1] >= summary[1:])
    if layer == "dense":  # an in-place update (what an optimizer step does) is seen at once
        with torch.no_grad():
            cell.weight_hh.mul_(2)
        torch.testing.assert_close(torch.diagonal(cell.recurrent_matrix()), 2 * summary)


def test_spectral_layers_keep_their_band_while_training_hard():
    cell = make(layers=3, layer="spectral", r=0.05, sigma_star=1.0)
    optimizer = torch.optim.Adam(cell.parameters(), lr=0.5)
    x = torch.randn(16, 1, 6, dtype=torch.float64)
    for _ in range(8):
        optimizer.zero_grad()
        outputs, _ = cell(x)
        (-(outputs ** 2).sum()).backward()  # pushes every gain up, against the band
        optimizer.step()
        cell.after_optimizer_step()
    for matrix in (cell.input_proj.weight, *cell.weight_hh):  # (5, 6) non-square, then (5, 5)
        values = torch.linalg.svdvals(matrix.detach())
        assert values.max() <= 1.05 + 1e-9 and values.min() >= 0.95 - 1e-9
    assert torch.linalg.svdvals(cell.weight_hh.detach()).max() > 1.04  # training did push to the edge
    reflectors = cell.parametrizations.weight_hh.original[:, :5]  # every layer's first reflector of U
    torch.testing.assert_close(reflectors.norm(dim=1), torch.ones(3, dtype=torch.float64))


def test_dense_layers_start_glorot_and_count_their_parameters():
    cell = cells.build("mlp", 300, 200, layers=2)
    assert cell.input_proj.weight.std().item() == pytest.approx((2 / 500) ** 0.5, rel=0.05)
    assert cell.recurrent_parameter_count() == 2 * 200 * 200
    spectral = cells.build("mlp", 7, 4, layers=3, layer="spectral", m1=2)
    per_layer = (4 + 3) + (4 + 3 + 2 + 1) + 4  # m1 = 2 reflectors in U, all 4 in V, 4 sigma_hat
    assert spectral.recurrent_parameter_count() == 3 * per_layer
    assert {id(p) for p in spectral.recurrent_parameters()} == {id(spectral.parametrizations.weight_hh.original)}


@pytest.mark.parametrize("options,expected", [
    ({"layers": 0}, "layers must be a positive integer"),
    ({"layer": "conv"}, "layer must be one of 'dense', 'spectral'"),
    ({"r": 2.0}, "r must be <= sigma_star"),
    ({"m1": 0, "layer": "spectral"}, "m1 must be a positive integer"),
    ({"nonlinearity": "modrelu"}, "nonlinearity must be one of"),
])
def test_bad_options_are_one_line(options, expected):
    with pytest.raises(ValueError, match=expected) as error:
        cells.build("mlp", 4, 4, **options)
    assert "\n" not in str(error.value)


# ------------------------------------------------------------------ through the real trainer
def idx_bytes(array):
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(n.to_bytes(4, "big") for n in array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def tiny_mnist(tmp_path, monkeypatch):
    """Tiny MNIST IDX files in the real format, their checksums trusted (the check still runs); no network."""
    monkeypatch.setenv("STABILITY_OFFLINE", "1")
    folder = tmp_path / "mnist"
    folder.mkdir()
    generator = np.random.default_rng(0)
    for key, (filename, _) in mnist.FILES.items():
        count = 96 if key.startswith("train") else 32
        array = generator.integers(0, 256, (count, 28, 28)) if key.endswith("images") else np.arange(count) % 10
        (folder / filename).write_bytes(idx_bytes(array))
    remotes = {key: dataclasses.replace(remote, md5=md5sum(folder / remote.filename))
               for key, remote in mnist.REMOTES.items()}
    monkeypatch.setattr(mnist, "REMOTES", remotes)
    return tmp_path


def test_a_spectral_mlp_trains_on_mnist_through_the_trainer(tiny_mnist, store):
    r = 0.05
    config = RunConfig(
        cell=CellConfig("mlp", 8, {"layers": 6, "layer": "spectral", "r": r}),
        task=TaskConfig("mnist", {"pixels_per_step": 784, "val_size": 16, "data_dir": str(tiny_mnist)}),
        train=TrainConfig(steps=4, batch_size=8, log_every=1, eval_every=2, probe_every=2, eval_examples=16,
                          probe_examples=4, lr=0.05))
    run_id = store.create_run(config.to_dict())
    assert train_run(config, store, run_id).status == "completed"
    rows = store.metrics(run_id)
    values = {name: group["value"].to_numpy() for name, group in rows.groupby("name")}
    assert np.all(values["grad/h0_norm"] > 0)  # the first hidden layer's gradient, every probe
    assert values["sv/max"].max() <= 1 + r + 1e-6 and values["sv/min"].min() >= 1 - r - 1e-6
    assert values["sv/margin"].max() <= r + 1e-6
    through = store.series(run_id, "grad/h_t_norm")
    assert set(through["index"]) == {0, 1}  # a_0 (first hidden layer) and a_L (last)
    depth = store.series(run_id, "grad/layer_norm")  # ‖∂L/∂a_l‖, l = 0..L, at every probe
    assert set(depth["index"]) == set(range(7)) and set(depth["step"]) == set(through["step"])
    for step, layers in depth.groupby("step"):
        ends = through[through["step"] == step].sort_values("index")["value"].to_numpy()
        per_layer = layers.sort_values("index")["value"].to_numpy()
        np.testing.assert_allclose(per_layer[[0, -1]], ends, rtol=1e-9)  # the first and the last layer, two ways
    assert "test/accuracy" in values
