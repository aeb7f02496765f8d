"""gradient_flow and the trainer's float64 probe against analytic values, explicit Jacobians
and a step-by-step log-space recomputation (tests/reference_gradients.py)."""
import math

import numpy as np
import pytest
import torch

from stability import cells
from stability.training import probes as diagnostics


@pytest.mark.parametrize("gain", [0.5, 1.0, 1.1])
def test_linear_orthogonal_cell_has_exact_geometric_flow(gain):
    # leaky_relu with slope 1 is the identity: h_t = g Q h_{t-1} + u_t, so dh_T/dh_t = (g Q)^(T-t)
    # and every |J^T v| for a unit v is exactly g^(T-t); the bound ||W||^(T-t) is attained.
    cell = cells.build("rnn", 1, 16, nonlinearity="leaky_relu", negative_slope=1.0).double()
    with torch.no_grad():  # exactly orthogonal in float64 (a float32 init is only so to 1e-7)
        q, _ = torch.linalg.qr(torch.randn(16, 16, dtype=torch.float64))
        cell.weight_hh.copy_(gain * q)
    flow = diagnostics.gradient_flow(cell, seq_len=40)
    expected = gain ** flow.per_step["steps_back"].to_numpy(dtype=float)
    np.testing.assert_allclose(flow.per_step["grad_norm"], expected, rtol=1e-9)
    np.testing.assert_allclose(flow.per_step["bound"], expected, rtol=1e-9)
    np.testing.assert_allclose(flow.singular_values, gain, rtol=1e-6)
    assert flow.margin == pytest.approx(abs(gain - 1), abs=1e-6)


def test_matches_explicit_jacobians():
    cell = cells.build("rnn", 1, 4, nonlinearity="tanh", init_gain=1.3).double()
    T, B, seed = 6, 8, 3
    flow = diagnostics.gradient_flow(cell, seq_len=T, batch_size=B, seed=seed)
    # Re-draw the same inputs and directions, then differentiate h_T w.r.t. each h_t explicitly.
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, 1, generator=generator, dtype=torch.float64)
    h = torch.zeros(B, 4, dtype=torch.float64)
    direction = torch.randn(B, 4, generator=generator, dtype=torch.float64)
    direction = direction / direction.norm(dim=1, keepdim=True)
    with torch.no_grad():
        states = [h] + list(cell(x, h)[0].unbind(1))
    for t in range(T + 1):
        def to_last(h_t):
            return cell(x[:, t:], h_t)[1] if t < T else h_t
        jacobian = torch.autograd.functional.jacobian(to_last, states[t])  # (B, H, B, H)
        blocks = torch.stack([jacobian[b, :, b, :] for b in range(B)])  # (B, H, H)
        per_example = torch.einsum("bij,bi->bj", blocks, direction).norm(dim=1)
        assert flow.per_step["grad_norm"].iloc[t] == pytest.approx(per_example.pow(2).mean().sqrt().item(),
                                                                    rel=1e-9)


def test_vanishing_stays_visible_in_float64():
    cell = cells.build("rnn", 1, 32, nonlinearity="tanh", init="orthogonal", init_gain=0.5)
    flow = diagnostics.gradient_flow(cell, seq_len=400)
    first = flow.per_step["grad_norm"].iloc[0]
    assert 0 < first < 1e-100  # float32 would hold exactly 0 here


@pytest.mark.parametrize("name", ["spectral", "orthogonal", "sgornn", "kru", "lstm"])
def test_every_kind_of_cell_and_leaves_the_cell_alone(name):
    cell = cells.build(name, 1, 16)
    before = {k: v.clone() for k, v in cell.state_dict().items()}
    flow = diagnostics.gradient_flow(cell, seq_len=50)
    assert len(flow.per_step) == 51
    assert np.all(np.isfinite(flow.per_step["grad_norm"])) and flow.per_step["grad_norm"].iloc[-1] > 0
    assert flow.per_step["grad_norm"].iloc[-1] == pytest.approx(1.0)  # dh_T/dh_T = I on a unit vector
    assert next(cell.parameters()).dtype == torch.float32 and cell.training
    assert all(torch.equal(before[k], v) for k, v in cell.state_dict().items())
    matrix = cell.recurrent_matrix().detach().to(torch.complex128)
    np.testing.assert_allclose(flow.singular_values, torch.linalg.svdvals(matrix).numpy(), rtol=1e-6)


def test_spectral_margin_respects_r():
    flow = diagnostics.gradient_flow(cells.build("spectral", 1, 32, r=0.05), seq_len=20)
    assert flow.margin <= 0.05 + 1e-6


# ---------------------------------------------------------------- readings that never underflow
from reference_gradients import log10_state_gradient_norms  # noqa: E402

from stability import tasks  # noqa: E402
from stability.models.sequence import SequenceModel  # noqa: E402


@pytest.mark.parametrize("dtype, scale", [(torch.float32, 1e-30), (torch.float64, 1e-200),
                                          (torch.float64, 1e200), (torch.complex128, 1e-250)])
def test_stable_norm_does_not_underflow_or_overflow(dtype, scale):
    values = torch.randn(5, 7, dtype=torch.float64)
    expected = torch.linalg.vector_norm(values).item() * scale  # |c v| = |c| |v|, in Python floats
    tensor = (values * scale).to(dtype)
    assert diagnostics.stable_norm(tensor).item() == pytest.approx(expected, rel=1e-6)
    per_row = diagnostics.stable_norm(tensor, dim=1)
    np.testing.assert_allclose(per_row.numpy(), torch.linalg.vector_norm(values, dim=1).numpy() * scale, rtol=1e-6)
    if scale < 1:  # the naive norm squares first: this is the false zero the readings used to show
        assert torch.linalg.vector_norm(tensor).item() == 0.0


def test_stable_norm_of_zeros_is_zero():
    assert diagnostics.stable_norm(torch.zeros(3, 4)).item() == 0.0
    assert diagnostics.stable_norm(torch.zeros(3, 4), dim=(0, 1)).item() == 0.0


def probe_setup(name, seq_len, hidden=16, batch=8, **options):
    torch.manual_seed(0)
    task = tasks.build("adding", seed=0, seq_len=seq_len)
    model = SequenceModel(cells.build(name, task.input_size, hidden, **options), task.output_size, task.target_mode)
    x, y = next(iter(task.batches("val", batch)))
    return model, task, x, y


@pytest.mark.parametrize("name, options", [("rnn", {"nonlinearity": "tanh"}), ("lstm", {}),
                                           ("rnn", {"nonlinearity": "relu", "init": "orthogonal", "init_gain": 0.9})])
def test_h0_norm_at_t_1000_matches_a_step_by_step_log_space_computation(name, options):
    model, task, x, y = probe_setup(name, 1000, **options)
    probe = diagnostics.ProbeBatch(model, task.loss, x, y)
    reading = probe.h0_norm()
    reference = log10_state_gradient_norms(probe.shadow, task.loss, x, y)[0]
    assert -300 < reference < -40  # far below float32's range, inside float64's
    assert math.log10(reading) == pytest.approx(reference, abs=1e-9)
    # The float32 model on the same batch: what the training batch held before.
    h0 = torch.zeros(x.shape[0], model.cell.state_size, requires_grad=True)
    (grad,) = torch.autograd.grad(task.loss(model(x, h0)[0], y), h0)
    assert torch.linalg.vector_norm(grad).item() == 0.0


@pytest.mark.parametrize("name", ["rnn", "lstm", "gru", "spectral", "sgornn", "kru", "exponential"])
def test_h0_norm_is_the_first_entry_of_the_gradient_through_time(name):
    model, task, x, y = probe_setup(name, 40)
    probe = diagnostics.ProbeBatch(model, task.loss, x, y)
    through_time = probe.through_time()
    assert len(through_time) == 41
    assert probe.h0_norm() == pytest.approx(through_time[0], rel=1e-9)
    if not model.cell.complex_state:  # the reference walks real states
        reference = log10_state_gradient_norms(probe.shadow, task.loss, x, y)
        np.testing.assert_allclose(np.log10(through_time), reference, atol=1e-9)


def test_probe_follows_the_training_model_only_when_synced():
    model, task, x, y = probe_setup("rnn", 20)
    probe = diagnostics.ProbeBatch(model, task.loss, x, y)
    before = probe.h0_norm()
    with torch.no_grad():
        model.cell.weight_hh.mul_(2.0)
    assert probe.h0_norm() == before
    probe.sync()
    assert probe.h0_norm() != pytest.approx(before)
    assert next(model.parameters()).dtype == torch.float32 and model.training


@pytest.mark.parametrize("outputs", [1, 3])
def test_output_h0_norm_of_a_linear_cell_is_the_dense_product(outputs):
    # leaky_relu with slope 1 is the identity: h_T = W^T h0 + (input terms), z = R h_T + c,
    # so A_h = dz/dh0 = R W^T for every example (MASO §5.1).
    torch.manual_seed(1)
    cell = cells.build("rnn", 2, 6, nonlinearity="leaky_relu", negative_slope=1.0, init_gain=0.9)
    model = SequenceModel(cell, outputs, "last")
    x, y = torch.randn(5, 7, 2), torch.randn(5, outputs)
    probe = diagnostics.ProbeBatch(model, lambda p, t: (p - t).pow(2).mean(), x, y)
    weight = cell.weight_hh.detach().double()
    expected = model.readout.weight.detach().double() @ torch.linalg.matrix_power(weight, 7)
    assert probe.output_h0_norm() == pytest.approx(torch.linalg.matrix_norm(expected).item(), rel=1e-10)


def test_output_h0_norm_estimate_for_many_outputs_is_unbiased():
    torch.manual_seed(2)
    cell = cells.build("rnn", 2, 6, nonlinearity="leaky_relu", negative_slope=1.0)
    model = SequenceModel(cell, 40, "last")
    x, y = torch.randn(4, 5, 2), torch.randn(4, 40)
    exact = diagnostics.ProbeBatch(model, lambda p, t: p.sum(), x, y, max_output_directions=40).output_h0_norm()
    probe = diagnostics.ProbeBatch(model, lambda p, t: p.sum(), x, y, max_output_directions=8)
    squares = [probe.output_h0_norm(seed=seed) ** 2 for seed in range(200)]
    assert np.mean(squares) == pytest.approx(exact ** 2, rel=0.1)
    assert np.std(squares) > 0  # it is an estimate, not the exact value
