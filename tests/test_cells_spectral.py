"""Spectral-RNN and oRNN cells (spectral paper §3-4, §7; Mhammedi et al. 2017)."""
from __future__ import annotations

import pytest
import torch

from stability import cells
from stability.cells.spectral import SpectralRNN

F64 = torch.float64
CELLS = [("spectral", {"m1": 3, "m2": 4}), ("orthogonal", {"m": 3})]


def build(name, input_size=3, hidden_size=6, seed=0, **options):
    torch.manual_seed(seed)
    return cells.build(name, input_size, hidden_size, **options)


def fit(cell, target, iterations=200):
    """Minimise ||W - target||_F with L-BFGS; return the final relative error."""
    optimizer = torch.optim.LBFGS(cell.parameters(), max_iter=iterations, line_search_fn="strong_wolfe",
                                  tolerance_grad=1e-12, tolerance_change=1e-15, history_size=50)

    def closure():
        optimizer.zero_grad()
        loss = (cell.recurrent_matrix() - target).pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        return ((cell.recurrent_matrix() - target).norm() / target.norm()).item()


def train_at_large_learning_rate(cell, target, steps=150, lr=1.0):
    optimizer = torch.optim.Adam(cell.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        (cell.recurrent_matrix() - target).pow(2).sum().backward()
        optimizer.step()


# ------------------------------------------------------------------ both cells
@pytest.mark.parametrize("name, options", CELLS)
def test_shapes(name, options):
    cell = build(name, **options)
    outputs, h_last = cell(torch.randn(4, 7, 3))
    assert outputs.shape == (4, 7, 6) and h_last.shape == (4, 6)
    assert cell.recurrent_matrix().shape == (6, 6)
    assert cell.gate_values() == {}


@pytest.mark.parametrize("name, options", CELLS)
def test_gradients_reach_every_parameter_and_h0(name, options):
    cell = build(name, **options)
    h0 = torch.randn(2, 6, requires_grad=True)
    outputs, _ = cell(torch.randn(2, 5, 3), h0)
    outputs.pow(2).sum().backward()
    assert h0.grad.abs().sum() > 0
    for parameter_name, parameter in cell.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, parameter_name


@pytest.mark.parametrize("name, options", CELLS)
def test_float64_and_same_seed_same_output(name, options):
    x = torch.randn(2, 5, 3, dtype=F64)
    first, second = build(name, **options).double(), build(name, **options).double()
    outputs, _ = first(x)
    assert outputs.dtype == F64
    assert first.recurrent_matrix().dtype == F64
    torch.testing.assert_close(outputs, second(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize("name, options", CELLS)
@pytest.mark.parametrize("nonlinearity", ["leaky_relu", "relu", "tanh"])
def test_fused_scan_matches_reference_loop_in_float64(name, options, nonlinearity):
    cell = build(name, nonlinearity=nonlinearity, negative_slope=0.1, **options).double()
    x = torch.randn(3, 8, 3, dtype=F64)
    results = {}
    for impl in ("scan", "loop"):
        cell.impl = impl
        cell.zero_grad()
        h0 = torch.randn(3, 6, dtype=F64, generator=torch.Generator().manual_seed(1)).requires_grad_()
        outputs, h_last = cell(x, h0)
        (outputs.sin().sum() + h_last.pow(2).sum()).backward()
        grads = [p.grad.clone() for p in cell.parameters()] + [h0.grad]
        results[impl] = (outputs.detach(), grads)
    torch.testing.assert_close(results["scan"][0], results["loop"][0], rtol=0, atol=1e-10)
    for fused, loop in zip(results["scan"][1], results["loop"][1]):
        torch.testing.assert_close(fused, loop, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name, options", [("spectral", {"m1": 2, "m2": 4, "r": 0.5}), ("orthogonal", {"m": 3})])
def test_gradcheck_through_all_parameters(name, options, gradcheck_through_parameters):
    cell = build(name, input_size=2, hidden_size=4, nonlinearity="tanh", **options).double()
    x = torch.randn(2, 3, 2, dtype=F64, requires_grad=True)
    h0 = torch.randn(2, 4, dtype=F64, requires_grad=True)
    assert gradcheck_through_parameters(cell, x, h0)


@pytest.mark.parametrize("name", ["spectral", "orthogonal"])
def test_long_sequences_stay_finite(name):
    cell = build(name, input_size=2, hidden_size=16)
    outputs, _ = cell(torch.randn(2, 1000, 2))
    outputs[:, -1].sum().backward()
    assert torch.isfinite(outputs).all()
    assert all(torch.isfinite(p.grad).all() for p in cell.parameters())


def test_registry_defaults():
    assert cells.options("spectral") == {
        "m1": 16, "m2": 16, "r": 0.01, "sigma_star": 1.0, "renormalize": True, "nonlinearity": "leaky_relu",
        "negative_slope": 0.01, "h0": "zero", "h0_noise_std": 0.1}
    assert cells.options("orthogonal") == {
        "m": 16, "renormalize": True, "nonlinearity": "leaky_relu", "negative_slope": 0.01, "h0": "zero",
        "h0_noise_std": 0.1}


@pytest.mark.parametrize("name, options, message", [
    ("spectral", {"m1": 0}, "m1"),
    ("spectral", {"m2": 2.5}, "m2"),
    ("spectral", {"r": -0.1}, "r"),
    ("spectral", {"sigma_star": "one"}, "sigma_star"),
    ("spectral", {"r": 2.0, "sigma_star": 1.0}, "r must be <= sigma_star"),
    ("spectral", {"nonlinearity": "sigmoid"}, "nonlinearity"),
    ("spectral", {"h0": "random"}, "h0"),
    ("spectral", {"m": 4}, "unknown option m"),
    ("spectral", {"renormalize": 1}, "renormalize must be True or False"),
    ("orthogonal", {"renormalize": "yes"}, "renormalize must be True or False"),
    ("orthogonal", {"m": 0}, "m must be"),
    ("orthogonal", {"m": True}, "m must be"),
    ("orthogonal", {"nonlinearity": "gelu"}, "nonlinearity"),
    ("orthogonal", {"m1": 4}, "unknown option m1"),
])
def test_bad_options_raise_value_error(name, options, message):
    with pytest.raises(ValueError, match=message):
        build(name, **options)


# ---------------------------------------------- renormalising the reflectors after each step
# Both authors' codes put every reflector back to unit length after each optimizer
# update (zhangjiong724/spectral-RNN code/rnn.py, zmhammedi/Orthogonal_RNN sgd.py).
N = 6
RENORM_CELLS = [("spectral", {"m1": 3, "m2": N, "r": 0.3}), ("orthogonal", {"m": 4}), ("orthogonal", {"m": N})]


def stored_reflectors(cell):
    """The stored reflectors, split by the lengths n, n-1, ... (u's then v's), and sigma_hat (or None)."""
    flat = cell.parametrizations.weight_hh.original.detach().clone()
    if isinstance(cell, SpectralRNN):
        counts = [cell.m1, cell.m2]
    else:
        counts = [cell.m]
    lengths = [N - j for m in counts for j in range(m)]
    pieces = list(flat[:sum(lengths)].split(lengths))
    rest = flat[sum(lengths):]
    return pieces, (rest if rest.numel() else None)


def norms(cell):
    return torch.stack([torch.sqrt((u ** 2).sum()) for u in stored_reflectors(cell)[0]])


def adam_steps(cell, steps, lr=0.05, seed=0, renormalize=True):
    """Adam on a fixed regression loss, calling after_optimizer_step as the trainer does."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 5, 3, dtype=F64, generator=generator)
    target = torch.randn(8, 5, N, dtype=F64, generator=generator)
    optimizer = torch.optim.Adam(cell.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        (cell(x)[0] - target).pow(2).mean().backward()
        optimizer.step()
        with torch.no_grad():
            cell.after_optimizer_step()


@pytest.mark.parametrize("name, options", RENORM_CELLS)
def test_after_optimizer_step_puts_every_reflector_back_to_unit_length(name, options):
    cell = build(name, hidden_size=N, renormalize=False, **options).double()
    adam_steps(cell, 5)  # lengths drift
    assert (norms(cell) - 1).abs().max() > 1e-3
    w_before = cell.recurrent_matrix().detach().clone()
    _, sigma_hat_before = stored_reflectors(cell)
    cell.renormalize = True
    with torch.no_grad():
        cell.after_optimizer_step()
    torch.testing.assert_close(norms(cell), torch.ones(len(norms(cell)), dtype=F64), rtol=0, atol=1e-14)
    torch.testing.assert_close(cell.recurrent_matrix().detach(), w_before, rtol=0, atol=1e-12)
    _, sigma_hat_after = stored_reflectors(cell)
    if sigma_hat_before is not None:
        assert torch.equal(sigma_hat_after, sigma_hat_before)


@pytest.mark.parametrize("name, options", RENORM_CELLS)
def test_renormalize_true_keeps_unit_reflectors_through_training(name, options):
    cell = build(name, hidden_size=N, **options).double()
    assert cell.renormalize
    adam_steps(cell, 10)
    torch.testing.assert_close(norms(cell), torch.ones(len(norms(cell)), dtype=F64), rtol=0, atol=1e-14)


@pytest.mark.parametrize("name, options", RENORM_CELLS)
def test_without_renormalize_the_step_hook_does_nothing_and_the_lengths_drift(name, options):
    cell = build(name, hidden_size=N, renormalize=False, **options).double()
    adam_steps(cell, 10)
    stored = cell.parametrizations.weight_hh.original.detach().clone()
    with torch.no_grad():
        cell.after_optimizer_step()
    assert torch.equal(cell.parametrizations.weight_hh.original, stored)
    lengths = norms(cell)
    assert (lengths - 1).abs().max() > 1e-2, lengths


@pytest.mark.parametrize("name, options", RENORM_CELLS)
def test_renormalizing_changes_the_training_path_not_the_first_step(name, options):
    def w_after(steps, renormalize):
        cell = build(name, hidden_size=N, seed=3, renormalize=renormalize, **options).double()
        adam_steps(cell, steps)
        return cell.recurrent_matrix().detach()

    # from the same unit start, one step gives the same W either way
    torch.testing.assert_close(w_after(1, True), w_after(1, False), rtol=0, atol=1e-12)
    assert (w_after(20, True) - w_after(20, False)).abs().max() > 1e-3


@pytest.mark.parametrize("name, options", RENORM_CELLS[:2])
def test_a_zero_reflector_stays_zero(name, options):
    cell = build(name, hidden_size=N, **options).double()
    with torch.no_grad():
        cell.parametrizations.weight_hh.original[N:2 * N - 1] = 0.0  # the second reflector, length n - 1
    w_before = cell.recurrent_matrix().detach().clone()
    with torch.no_grad():
        cell.after_optimizer_step()
    pieces, _ = stored_reflectors(cell)
    assert (pieces[1] == 0).all() and torch.isfinite(cell.parametrizations.weight_hh.original).all()
    torch.testing.assert_close(cell.recurrent_matrix().detach(), w_before, rtol=0, atol=1e-12)


def test_after_optimizer_step_works_outside_no_grad():
    cell = build("spectral", hidden_size=N, m1=2, m2=2)
    with torch.no_grad():
        cell.parametrizations.weight_hh.original.mul_(3.0)
    cell.after_optimizer_step()
    assert cell.parametrizations.weight_hh.original.requires_grad
    torch.testing.assert_close(norms(cell), torch.ones(4), rtol=0, atol=1e-6)


# -------------------------------------------------------------------- spectral
@pytest.mark.parametrize("scale", [3.0, 0.1])
def test_spectral_singular_values_stay_in_range_after_large_learning_rate_steps(scale):
    cell = build("spectral", hidden_size=8, m1=4, m2=4)  # r = 0.01, sigma_star = 1
    target = scale * torch.randn(8, 8)  # singular values far outside [0.99, 1.01]
    train_at_large_learning_rate(cell, target, steps=60)
    values = torch.linalg.svdvals(cell.recurrent_matrix().detach())
    assert values.min() >= 0.99 - 1e-6 and values.max() <= 1.01 + 1e-6
    # the loss did push them to the edge
    assert values.max() > 1.009 if scale > 1 else values.min() < 0.991


def test_spectral_singular_values_method_matches_svdvals():
    cell = build("spectral", hidden_size=7, m1=3, m2=5, r=0.5, sigma_star=2.0).double()
    torch.testing.assert_close(cell.singular_values().detach(), torch.full((7,), 2.0, dtype=F64))  # sigma_hat = 0
    with torch.no_grad():
        cell.parametrizations.weight_hh.original[-7:].normal_(0, 3)
    expected = torch.linalg.svdvals(cell.recurrent_matrix()).detach()
    torch.testing.assert_close(cell.singular_values().detach().sort(descending=True).values, expected,
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("m1, m2", [(1, 5), (3, 3), (6, 6), (2, 1)])
def test_spectral_with_unit_sigma_is_orthogonal(m1, m2):
    cell = build("spectral", m1=m1, m2=m2, r=0.0, sigma_star=1.0).double()
    w = cell.recurrent_matrix().detach()
    torch.testing.assert_close(w.t() @ w, torch.eye(6, dtype=F64), rtol=0, atol=1e-12)


def test_spectral_with_unit_sigma_and_m1_plus_m2_equal_n_reaches_a_random_rotation():
    # Thm. 3: k1 + k2 <= n + 2 covers O(n).  Nonzero reflectors each have det -1,
    # so gradient descent stays where det W = (-1)^(m1 + m2); pick the target there.
    n, m1, m2 = 4, 2, 2
    target, _ = torch.linalg.qr(torch.randn(n, n, dtype=F64))
    if torch.linalg.det(target) * (-1) ** (m1 + m2) < 0:
        target[0] = -target[0]
    cell = build("spectral", hidden_size=n, m1=m1, m2=m2, r=0.0, sigma_star=1.0).double()
    assert fit(cell, target) < 1e-6


def random_target(seed, n=4):
    """A Gaussian n x n matrix with det > 0 (the sign gradient descent can reach, see above)."""
    target = torch.randn(n, n, dtype=F64, generator=torch.Generator().manual_seed(seed))
    if torch.linalg.det(target) < 0:
        target[0] = -target[0]
    return target, torch.linalg.svdvals(target)[0].item()


@pytest.mark.parametrize("seed", [1, 2])
def test_spectral_with_all_reflectors_fits_an_arbitrary_matrix(seed):
    # Thm. 2: M_{1,1} reaches every matrix; a wide sigma range (0, 2 s_max) holds its spectrum.
    # With 2n nonzero reflectors det W > 0, so the target has det > 0.  Thm. 2 is
    # about reach, not optimisation: about one random start in five stalls in a
    # local minimum, so the best of three starts must fit.
    target, top = random_target(seed)
    errors = []
    for start in range(3):
        cell = build("spectral", hidden_size=4, seed=start, m1=4, m2=4, r=top, sigma_star=top).double()
        errors.append(fit(cell, target))
        if errors[-1] < 1e-6:
            break
    assert min(errors) < 1e-6, errors


def test_spectral_with_one_reflector_a_side_cannot_fit_an_arbitrary_matrix():
    target, top = random_target(1)  # 10 parameters for 16 numbers
    cell = build("spectral", hidden_size=4, m1=1, m2=1, r=top, sigma_star=top).double()
    assert fit(cell, target, iterations=50) > 0.05


@pytest.mark.parametrize("n, m1, m2, n_i, n_y", [(128, 16, 16, 2, 10), (10, 3, 7, 4, 1), (5, 5, 5, 1, 1)])
def test_spectral_parameter_count_is_the_papers(n, m1, m2, n_i, n_y):
    cell = cells.build("spectral", n_i, n, m1=m1, m2=m2)
    reflector_lengths = sum(range(n - m1 + 1, n + 1)) + sum(range(n - m2 + 1, n + 1))
    assert cell.recurrent_parameter_count() == reflector_lengths + n
    assert cell.parametrizations.weight_hh.original.numel() == reflector_lengths + n
    # §4: (n_y + n_i + m1 + m2 + 2) n - (m1^2 + m2^2 - m1 - m2) / 2, with an n_y x n readout
    total = sum(p.numel() for p in cell.parameters()) + n_y * n
    assert total == (n_y + n_i + m1 + m2 + 2) * n - (m1 ** 2 + m2 ** 2 - m1 - m2) // 2


def test_spectral_caps_reflectors_at_hidden_size():
    cell = build("spectral", m1=100, m2=7)
    assert (cell.m1, cell.m2) == (6, 6)
    assert cell.recurrent_parameter_count() == 2 * sum(range(1, 7)) + 6


# ------------------------------------------------------------------ orthogonal
def test_orthogonal_stays_orthogonal_after_large_learning_rate_steps():
    cell = build("orthogonal", hidden_size=32, m=16)
    start = cell.recurrent_matrix().detach().clone()
    train_at_large_learning_rate(cell, 3 * torch.randn(32, 32), steps=100)
    w = cell.recurrent_matrix().detach()
    assert (w - start).abs().max() > 0.1
    torch.testing.assert_close(w.t() @ w, torch.eye(32), rtol=0, atol=1e-5)


def test_orthogonal_moves_at_most_m_directions():
    # W = H_n ... H_{n-m+1}: W - I has rank m (each reflector is a rank-1 update of I).
    cell = build("orthogonal", hidden_size=10, m=3).double()
    assert torch.linalg.matrix_rank(cell.recurrent_matrix().detach() - torch.eye(10, dtype=F64)) == 3


def test_orthogonal_parameter_count_and_capping():
    cell = build("orthogonal", hidden_size=10, m=4)
    assert cell.recurrent_parameter_count() == 10 + 9 + 8 + 7
    assert cell.parametrizations.weight_hh.original.numel() == 34
    cell = build("orthogonal", hidden_size=5, m=16)
    assert cell.m == 5 and cell.recurrent_parameter_count() == 15


def dense_reflector(u, n):
    """I - 2 u u^T / ||u||^2 on the last len(u) of n coordinates (spectral paper eq. 1)."""
    hat = torch.cat([torch.zeros(n - len(u), dtype=u.dtype), u])
    return torch.eye(n, dtype=u.dtype) - 2 * torch.outer(hat, hat) / hat.dot(hat)


def orthogonal_rnn_code_matrix(vectors, n):
    """W of zmhammedi/Orthogonal_RNN with m = n, for reflectors u_n, ..., u_1 (u_k of length k).

    Its columns are renormalised after every update (sgd.py); a step multiplies the
    last entry of h by the stored U[n-1, n-1] and then applies the other n - 1
    reflectors, the shortest first (RNN_models.py, C_fun.c):
    W = H(u_n) ... H(u_2) diag(1, ..., 1, U[n-1, n-1]).
    """
    units = [u / u.norm() for u in vectors]
    last = torch.eye(n, dtype=F64)
    last[-1, -1] = units[-1][0]
    result = torch.eye(n, dtype=F64)
    for u in units[:-1]:
        result = result @ dense_reflector(u, n)
    return result @ last


@pytest.mark.parametrize("u1", [0.4, -1.7])
def test_orthogonal_with_m_equal_n_is_the_orthogonal_rnn_codes_matrix(u1):
    n = 5
    generator = torch.Generator().manual_seed(11)
    vectors = [torch.randn(k, dtype=F64, generator=generator) * (0.5 + k) for k in range(n, 1, -1)]
    vectors.append(torch.tensor([u1], dtype=F64))
    cell = build("orthogonal", hidden_size=n, m=n).double()
    with torch.no_grad():
        cell.parametrizations.weight_hh.original.copy_(torch.cat(vectors))
    w = cell.recurrent_matrix().detach()
    torch.testing.assert_close(w, orthogonal_rnn_code_matrix(vectors, n), rtol=0, atol=1e-12)
    expected_det = (-1.0) ** (n - 1) * (1.0 if u1 > 0 else -1.0)
    assert torch.linalg.det(w).item() == pytest.approx(expected_det, abs=1e-12)


def test_orthogonal_with_m_equal_n_keeps_the_sign_of_its_last_factor_through_training():
    cell = build("orthogonal", hidden_size=N, m=N, seed=2).double()
    first = cell.parametrizations.weight_hh.original[-1].item()
    assert abs(first) == pytest.approx(1.0)  # a random unit vector of length 1
    det_before = torch.linalg.det(cell.recurrent_matrix()).item()
    adam_steps(cell, 20, lr=0.2)
    assert cell.parametrizations.weight_hh.original[-1].item() == first
    assert torch.linalg.det(cell.recurrent_matrix()).item() == pytest.approx(det_before, abs=1e-12)


def test_spectral_with_all_reflectors_keeps_eq1_for_the_length_one_reflector():
    # Spectral-RNN's code computes 2 / ||u||^2 for every row: H_1(u) = -1 for u != 0, as eq. 1.
    n = 4
    cell = build("spectral", hidden_size=n, m1=n, m2=n, r=0.0, sigma_star=1.0).double()
    generator = torch.Generator().manual_seed(12)
    u = [torch.randn(k, dtype=F64, generator=generator) for k in range(n, 0, -1)]
    v = [torch.randn(k, dtype=F64, generator=generator) for k in range(n, 0, -1)]
    u[-1], v[-1] = torch.tensor([0.8], dtype=F64), torch.tensor([2.0], dtype=F64)
    with torch.no_grad():
        cell.parametrizations.weight_hh.original.copy_(torch.cat(u + v + [torch.zeros(n, dtype=F64)]))
    left = torch.eye(n, dtype=F64)
    for x in u:
        left = left @ dense_reflector(x, n)
    right = torch.eye(n, dtype=F64)
    for x in reversed(v):
        right = right @ dense_reflector(x, n)
    torch.testing.assert_close(cell.recurrent_matrix().detach(), left @ right, rtol=0, atol=1e-12)
