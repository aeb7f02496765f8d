"""FastRNN and SGORNN: h_t = alpha f(W x_t + U h_{t-1} + b) + beta h_{t-1}
(SGORNN paper eq. 1); SGORNN with U orthogonal (eq. 2) and beta <= 1 - 2 alpha (eq. 3)."""
import math

import pytest
import torch

from stability import cells
from stability.cells.fastrnn import clip_beta


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def set_gates(cell, alpha_logit, beta_logit):
    with torch.no_grad():
        cell.alpha_logit.fill_(alpha_logit)
        cell.beta_logit.fill_(beta_logit)


def test_initial_gates_and_defaults():
    fast = cells.build("fastrnn", 2, 128)
    assert fast.nonlinearity == "relu"
    assert fast.gate_values() == pytest.approx({"alpha": sigmoid(-3.0), "beta": sigmoid(3.0)}, rel=1e-6)
    assert fast.recurrent_parameter_count() == 128 ** 2
    assert 0.095 < fast.weight_hh.std().item() < 0.105  # EdgeML's U ~ N(0, 0.1^2)
    sgo = cells.build("sgornn", 2, 128)
    assert sgo.nonlinearity == "relu" and sgo.k == 2 * math.ceil(math.log2(128)) == 14 and sgo.clip_beta
    # alpha_init = -3.75 starts beta just inside the constraint: the clip is inactive at first.
    assert sgo.gate_values() == pytest.approx(
        {"alpha": sigmoid(-3.75), "beta": sigmoid(3.0), "beta_raw": sigmoid(3.0)}, rel=1e-6)
    assert sigmoid(3.0) < 1 - 2 * sigmoid(-3.75)
    assert sgo.recurrent_parameter_count() == 14 * 64
    # Table 1 (addition problem, 128 -> 1 readout): FastRNN 16,899, SGORNN 1,411 parameters.
    assert sum(p.numel() for p in fast.parameters()) + 129 == 16899
    assert sum(p.numel() for p in sgo.parameters()) + 129 == 1411


@pytest.mark.parametrize("name", ["fastrnn", "sgornn"])
def test_update_equation_one_step(name):
    cell = cells.build(name, 3, 6, nonlinearity="tanh").double()
    set_gates(cell, -1.0, 0.5)
    x = torch.randn(2, 1, 3, dtype=torch.float64)
    h0 = torch.randn(2, 6, dtype=torch.float64)
    _, h1 = cell(x, h0)
    alpha = sigmoid(-1.0)
    beta = sigmoid(0.5) if name == "fastrnn" else reference_clip(sigmoid(0.5), alpha)
    pre = x[:, 0] @ cell.input_proj.weight.t() + cell.input_proj.bias + h0 @ cell.recurrent_matrix().t()
    torch.testing.assert_close(h1, alpha * torch.tanh(pre) + beta * h0, rtol=0, atol=1e-12)


def reference_clip(beta, alpha):
    """tf.clip_by_value(beta, 0, 1 - 2 alpha) as the SGORNN code runs it: maximum(minimum(beta, hi), lo)."""
    return max(min(beta, 1 - 2 * alpha), 0.0)


@pytest.mark.parametrize("hidden", [2, 6, 10, 32, 100, 256])
def test_default_k_is_twice_ceil_log2_of_the_hidden_size(hidden):
    cell = cells.build("sgornn", 2, hidden)
    expected = 2 * math.ceil(math.log2(hidden))
    assert cell.k == expected
    assert cell.parametrizations.weight_hh.original.shape == (expected, hidden // 2)
    assert cell.recurrent_parameter_count() == expected * hidden // 2
    assert cells.build("sgornn", 2, hidden, k=5).k == 5


@pytest.mark.parametrize("alpha_logit", [-4.0, -2.0, -0.5, 0.0, 0.3, 1.0, 3.0])
@pytest.mark.parametrize("beta_logit", [-3.0, 0.0, 0.5, 4.0])
def test_beta_is_clipped_into_zero_one_minus_two_alpha_and_beta_raw_is_reported(alpha_logit, beta_logit):
    cell = cells.build("sgornn", 2, 4)
    set_gates(cell, alpha_logit, beta_logit)
    alpha, raw = sigmoid(alpha_logit), sigmoid(beta_logit)
    values = cell.gate_values()
    assert values["alpha"] == pytest.approx(alpha, rel=1e-6)
    assert values["beta_raw"] == pytest.approx(raw, rel=1e-6)
    assert values["beta"] == pytest.approx(reference_clip(raw, alpha), rel=1e-6, abs=1e-7)
    assert values["beta"] >= 0.0  # never negative, also when alpha > 1/2 empties the interval
    if alpha > 0.5:
        assert values["beta"] == 0.0
    else:
        assert values["beta"] <= 1 - 2 * alpha + 1e-7
    _, beta = cell.scalar_gates()
    assert beta.item() == values["beta"]


def test_sgornn_step_by_hand_with_the_interval_empty():
    """alpha > 1/2: beta = 0, so h_1 = alpha relu(a) exactly; beta's logit gets no gradient
    and alpha's only the one through alpha relu(a)."""
    cell = cells.build("sgornn", 3, 6, k=2, angle_init=math.pi).double()
    set_gates(cell, 1.0, 2.0)  # alpha = 0.731, 1 - 2 alpha = -0.46 < 0
    x = torch.randn(2, 1, 3, dtype=torch.float64)
    h0 = torch.randn(2, 6, dtype=torch.float64)
    for impl in ("scan", "loop"):
        cell.impl = impl
        cell.zero_grad()
        _, h1 = cell(x, h0)
        u = x[:, 0] @ cell.input_proj.weight.detach().t() + cell.input_proj.bias.detach()
        pre = u + h0 @ cell.recurrent_matrix().detach().t()
        alpha = sigmoid(1.0)
        torch.testing.assert_close(h1.detach(), alpha * torch.relu(pre), rtol=0, atol=1e-12)
        h1.sum().backward()
        assert cell.beta_logit.grad.item() == 0.0
        expected = alpha * (1 - alpha) * torch.relu(pre).sum().item()  # d sigmoid = s (1 - s)
        assert cell.alpha_logit.grad.item() == pytest.approx(expected, rel=1e-12)
    assert cell.gate_values() == pytest.approx({"alpha": alpha, "beta": 0.0, "beta_raw": sigmoid(2.0)})


@pytest.mark.parametrize("beta,alpha,value,d_beta,d_alpha", [
    (0.3, 0.1, 0.3, 1.0, 0.0),    # inside: beta unchanged, trains itself
    (0.9, 0.1, 0.8, 0.0, -2.0),   # above 1 - 2 alpha: the gradient goes to alpha, times -2
    (0.5, 0.25, 0.5, 1.0, 0.0),   # tie beta = 1 - 2 alpha: TF's Minimum sends it to beta
    (0.3, 0.5, 0.0, 0.0, -2.0),   # 1 - 2 alpha = 0: minimum picks it, Maximum's tie keeps it
    (0.3, 0.7, 0.0, 0.0, 0.0),    # empty interval: beta = 0, a constant
])
def test_clip_gradients_follow_tensorflow_clip_by_value(beta, alpha, value, d_beta, d_alpha):
    """The reference's K.clip is tf.clip_by_value = maximum(minimum(beta, 1 - 2 alpha), 0), whose
    Minimum/Maximum gradients go to the first argument where x <= y / x >= y (ties included)."""
    beta_t = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    alpha_t = torch.tensor(alpha, dtype=torch.float64, requires_grad=True)
    clipped = clip_beta(beta_t, alpha_t)
    clipped.backward()
    assert clipped.item() == pytest.approx(value, abs=1e-15)
    assert beta_t.grad.item() == d_beta
    assert alpha_t.grad.item() == d_alpha


def test_clip_sets_beta_to_one_minus_two_alpha_and_can_be_switched_off():
    clipped = cells.build("sgornn", 2, 4)
    free = cells.build("sgornn", 2, 4, clip_beta=False)
    for cell in (clipped, free):
        set_gates(cell, -2.0, 4.0)
    assert clipped.gate_values()["beta"] == pytest.approx(1 - 2 * sigmoid(-2.0), rel=1e-6)
    assert free.gate_values()["beta"] == pytest.approx(sigmoid(4.0), rel=1e-6)
    assert clipped.gate_values()["beta_raw"] == free.gate_values()["beta_raw"] == pytest.approx(sigmoid(4.0))
    assert clipped.gate_values()["alpha"] == free.gate_values()["alpha"] == pytest.approx(sigmoid(-2.0))
    set_gates(free, 1.0, 4.0)  # unclipped, alpha > 1/2 does not touch beta
    assert free.gate_values()["beta"] == pytest.approx(sigmoid(4.0), rel=1e-6)


def test_beta_respects_the_constraint_after_large_learning_rate_steps():
    cell = cells.build("sgornn", 3, 16)
    optimizer = torch.optim.Adam(cell.parameters(), lr=1.0)
    x = torch.randn(8, 30, 3)
    clip_was_active = False
    for _ in range(25):
        optimizer.zero_grad()
        outputs, _ = cell(x)
        (outputs[:, -1] - 5.0).pow(2).mean().backward()  # a large target pulls beta up
        optimizer.step()
        alpha, beta = cell.scalar_gates()
        assert beta <= 1 - 2 * alpha
        values = cell.gate_values()
        assert values["beta"] <= 1 - 2 * values["alpha"] + 1e-6
        clip_was_active |= torch.sigmoid(cell.beta_logit).item() > 1 - 2 * alpha.item()
    assert clip_was_active


def test_sgornn_recurrent_matrix_stays_orthogonal_after_optimizer_steps():
    cell = cells.build("sgornn", 3, 32, angle_init=math.pi)
    optimizer = torch.optim.RMSprop(cell.parameters(), lr=0.1)  # the paper's optimizer (§3)
    x, y = torch.randn(8, 20, 3), torch.randn(8, 32)
    for _ in range(10):
        optimizer.zero_grad()
        outputs, _ = cell(x)
        (outputs[:, -1] - y).pow(2).mean().backward()
        optimizer.step()
    w = cell.recurrent_matrix().detach()
    assert (w.t() @ w - torch.eye(32)).abs().max() < 1e-5


def test_clip_bounds_the_state_at_t_1000_and_without_it_the_state_blows_up():
    """With U orthogonal, |f(a)| <= |a| and beta <= 1 - 2 alpha:
    ||h_t|| <= alpha ||u_t|| + (alpha + beta) ||h_{t-1}|| <= max(||h_0||, max_s ||u_s||)."""
    torch.manual_seed(0)
    x = torch.rand(4, 1000, 2)
    states = {}
    for clip in (True, False):
        torch.manual_seed(1)
        cell = cells.build("sgornn", 2, 16, clip_beta=clip, angle_init=0.0)  # U a permutation
        set_gates(cell, -1.0, 3.0)  # alpha + beta = 1.22 before the clip
        with torch.no_grad():
            cell.input_proj.weight.abs_()
            cell.input_proj.bias.fill_(0.5)  # u_t > 0, so ReLU never cuts and nothing cancels
            outputs, _ = cell(x)
            bound = cell.input_proj(x).norm(dim=-1).max()
        states[clip] = outputs
    assert torch.isfinite(states[True]).all()
    assert states[True].norm(dim=-1).max() <= bound * (1 + 1e-5)
    assert not torch.isfinite(states[False]).all()  # grows like 1.22^t


@pytest.mark.parametrize("angle_init", [0.05, math.pi])
def test_sgornn_loss_and_gradients_are_finite_at_t_1000(angle_init):
    torch.manual_seed(0)
    cell = cells.build("sgornn", 2, 16, angle_init=angle_init)
    optimizer = torch.optim.RMSprop(cell.parameters(), lr=1e-2)
    x, y = torch.rand(4, 1000, 2), torch.rand(4, 16)
    for _ in range(3):
        optimizer.zero_grad()
        outputs, _ = cell(x)
        loss = (outputs[:, -1] - y).pow(2).mean()
        loss.backward()
        assert torch.isfinite(loss)
        for name, p in cell.named_parameters():
            assert torch.isfinite(p.grad).all(), name
        optimizer.step()


def scan_and_loop(cell):
    """Outputs and every parameter gradient from the fused scan and the autograd loop, checked equal."""
    x = torch.randn(3, 9, 3, dtype=torch.float64)
    h0 = torch.randn(3, 8, dtype=torch.float64)
    results = {}
    for impl in ("scan", "loop"):
        cell.impl = impl
        cell.zero_grad()
        outputs, _ = cell(x, h0)
        outputs.sin().sum().backward()
        results[impl] = outputs.detach(), {n: p.grad.clone() for n, p in cell.named_parameters()}
    torch.testing.assert_close(results["scan"][0], results["loop"][0], rtol=1e-10, atol=1e-12)
    for n, grad in results["loop"][1].items():
        torch.testing.assert_close(results["scan"][1][n], grad, rtol=1e-9, atol=1e-11, msg=n)
    return results


@pytest.mark.parametrize("name,alpha_logit,beta_logit", [("fastrnn", -1.0, 1.0), ("sgornn", -1.0, -1.0),
                                                         ("sgornn", -2.0, 4.0), ("sgornn", 1.0, 2.0)])
def test_fused_path_matches_loop_with_the_clip_active_or_not(name, alpha_logit, beta_logit):
    cell = cells.build(name, 3, 8, nonlinearity="tanh").double()
    set_gates(cell, alpha_logit, beta_logit)
    results = scan_and_loop(cell)
    clipped = name == "sgornn" and (beta_logit == 4.0 or alpha_logit > 0)
    assert (results["scan"][1]["beta_logit"].abs() == 0) == clipped  # a clipped beta does not train c


@pytest.mark.parametrize("name", ["fastrnn", "sgornn"])
def test_gated_modrelu_fused_path_matches_loop(name):
    """modReLU (the Elman cells' fourth nonlinearity) through the gated scan, c's gradient included."""
    cell = cells.build(name, 3, 8, nonlinearity="modrelu").double()
    set_gates(cell, -1.0, 1.0)
    with torch.no_grad():
        cell.modrelu_bias.uniform_(-0.5, 0.5)
    results = scan_and_loop(cell)
    assert "modrelu_bias" in results["scan"][1] and cell.input_proj.bias is None


@pytest.mark.parametrize("name,alpha_logit,beta_logit", [("fastrnn", -1.5, 1.0), ("sgornn", -1.5, -1.0),
                                                         ("sgornn", -1.5, 4.0), ("sgornn", 1.0, 2.0)])
def test_gradcheck_fused_path(name, alpha_logit, beta_logit, gradcheck_through_parameters):
    cell = cells.build(name, 2, 4, k=3, angle_init=math.pi) if name == "sgornn" else cells.build(name, 2, 4)
    cell = cell.double()
    set_gates(cell, alpha_logit, beta_logit)
    cell.impl = "scan"
    x = torch.randn(2, 5, 2, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    assert gradcheck_through_parameters(cell, x, h0)


def test_odd_hidden_size_is_a_clear_error_for_sgornn_only():
    with pytest.raises(ValueError, match="hidden_size must be even"):
        cells.build("sgornn", 2, 9)
    assert cells.build("fastrnn", 2, 9)(torch.randn(1, 3, 2))[0].shape == (1, 3, 9)


@pytest.mark.parametrize("name,option,value", [
    ("sgornn", "clip_beta", "yes"), ("sgornn", "k", 0), ("sgornn", "angle_init", -0.1),
    ("fastrnn", "alpha_init", "high"), ("fastrnn", "beta_init", float("nan")),
    ("sgornn", "alpha_init", float("inf")), ("fastrnn", "nonlinearity", "sigmoid")])
def test_bad_options_name_themselves(name, option, value):
    with pytest.raises(ValueError, match=option):
        cells.build(name, 2, 8, **{option: value})
