"""gradient_flow against analytic values and explicit Jacobians."""
import numpy as np
import pytest
import torch

from stability import cells, diagnostics


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
