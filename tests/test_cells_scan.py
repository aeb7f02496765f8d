"""The fused Elman scan against autograd: gradcheck and the step-by-step loop."""
import math

import pytest
import torch

from reference_loops import elman_loop
from stability.cells.scan import elman_scan


ACTIVATIONS = ["tanh", "relu", "leaky_relu", "modrelu"]


def inputs(T=6, B=3, H=5, gated=False, scale=0.6, modrelu=False):
    """(u, W, h0, alpha, beta, c) with alpha, beta None unless gated and c (modReLU's bias) None unless modrelu."""
    u = torch.randn(T, B, H, dtype=torch.float64, requires_grad=True)
    weight = (torch.randn(H, H, dtype=torch.float64) * scale).requires_grad_()
    h0 = torch.randn(B, H, dtype=torch.float64, requires_grad=True)
    alpha = beta = bias = None
    if gated:
        alpha = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
        beta = torch.tensor(0.6, dtype=torch.float64, requires_grad=True)
    if modrelu:
        # Both signs, and some units switched off where |a| < -c.
        bias = torch.linspace(-0.8, 0.4, H, dtype=torch.float64).requires_grad_()
    return u, weight, h0, alpha, beta, bias


def leaves(args):
    return [a for a in args if a is not None]


def run_with(function, args, activation, negative_slope):
    """function(u, W, h0, activation, slope, alpha, beta, bias) from the tuple of ``inputs``."""
    u, weight, h0, alpha, beta, bias = args
    return function(u, weight, h0, activation, negative_slope, alpha, beta, bias)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("gated", [False, True])
def test_gradcheck(activation, gated):
    args = inputs(gated=gated, modrelu=activation == "modrelu")
    present = [i for i, a in enumerate(args) if a is not None]

    def scan(*values):
        full = list(args)
        for i, value in zip(present, values):
            full[i] = value
        return run_with(elman_scan, full, activation, 0.2)

    assert torch.autograd.gradcheck(scan, tuple(leaves(args)))


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("gated", [False, True])
def test_matches_autograd_loop(activation, gated):
    args = inputs(T=40, B=4, H=16, gated=gated, modrelu=activation == "modrelu")
    weights = torch.randn(40, 4, 16, dtype=torch.float64)
    grads = []
    for run in (elman_scan, elman_loop):
        for a in leaves(args):
            a.grad = None
        states = run_with(run, args, activation, 0.05)
        (states * weights).sum().backward()
        grads.append((states.detach(), [a.grad.clone() for a in leaves(args)]))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-12, atol=1e-12)
    for fused, loop in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(fused, loop, rtol=1e-10, atol=1e-12)
    if activation == "modrelu":
        assert grads[0][1][-1].abs().min() > 0  # every unit's c gets a gradient
        if not gated:  # the states are modReLU's outputs: units on and off, both signs
            states = grads[0][0]
            assert (states == 0).any() and (states > 0).any() and (states < 0).any()


def modrelu_by_hand(a, c):
    """sign(a) relu(|a| + c), one number at a time (expRNN's real modReLU)."""
    out = torch.zeros_like(a)
    for index in torch.cartesian_prod(*[torch.arange(n) for n in a.shape]):
        i, j = index.tolist()
        value, bias = a[i, j].item(), c[j].item()
        magnitude = max(abs(value) + bias, 0.0)
        out[i, j] = 0.0 if value == 0 else math.copysign(magnitude, value)
    return out


@pytest.mark.parametrize("gated", [False, True])
def test_modrelu_steps_by_hand(gated):
    u, weight, h0, alpha, beta, bias = (a.detach() if a is not None else None
                                        for a in inputs(T=2, B=3, H=5, gated=gated, modrelu=True))
    states = elman_scan(u, weight, h0, "modrelu", 0.0, alpha, beta, bias)
    h = h0
    for t in range(2):
        s = modrelu_by_hand(u[t] + h @ weight.T, bias)
        h = s if alpha is None else alpha * s + beta * h
        torch.testing.assert_close(states[t], h, rtol=0, atol=1e-14)


def test_modrelu_is_zero_at_zero_even_with_a_positive_bias():
    """sign(0) = 0 (expRNN's modrelu uses torch.sign): a zero pre-activation stays 0 and passes no
    gradient, to a, to W or to c, in the scan as in the loop."""
    H = 4
    u = torch.zeros(3, 2, H, dtype=torch.float64)
    u[1:] = torch.randn(2, 2, H, dtype=torch.float64)
    weight = torch.randn(H, H, dtype=torch.float64, requires_grad=True)
    h0 = torch.zeros(2, H, dtype=torch.float64, requires_grad=True)
    bias = torch.full((H,), 0.5, dtype=torch.float64, requires_grad=True)
    results = []
    for run in (elman_scan, elman_loop):
        u_leaf = u.clone().requires_grad_()
        for a in (weight, h0, bias):
            a.grad = None
        states = run(u_leaf, weight, h0, "modrelu", 0.0, None, None, bias)
        states.pow(2).sum().backward()
        results.append((states.detach(), u_leaf.grad[0].clone(), h0.grad.clone(), bias.grad.clone()))
    for fused, loop in zip(*results):
        torch.testing.assert_close(fused, loop, rtol=1e-12, atol=1e-14)
    assert (results[0][0][0] == 0).all()  # a_1 = 0 -> h_1 = 0 although c = 0.5 > 0
    assert (results[0][1] == 0).all() and (results[0][2] == 0).all()


def test_single_step_and_float32():
    u, weight, h0 = (a.detach().float().requires_grad_() for a in inputs(T=1)[:3])
    states = elman_scan(u, weight, h0, "relu")
    expected = torch.relu(u[0] + h0 @ weight.t())
    torch.testing.assert_close(states[0], expected)
    states.sum().backward()
    assert weight.grad is not None and h0.grad is not None


def test_vanishing_gradient_survives_in_float64():
    """A contracting ReLU RNN at T = 784: float64 keeps a tiny but nonzero
    dL/dh0 where float32 underflows to exactly zero."""
    torch.manual_seed(1)
    H, T = 16, 784
    weight = torch.eye(H) * 0.5
    u = torch.rand(T, 2, H) + 0.1  # positive drive keeps every unit active
    finite = {}
    for dtype in (torch.float32, torch.float64):
        h0 = torch.ones(2, H, dtype=dtype, requires_grad=True)
        states = elman_scan(u.to(dtype), weight.to(dtype), h0, "relu")
        states[-1].sum().backward()
        finite[dtype] = h0.grad.abs().max().item()
    assert finite[torch.float32] == 0.0
    assert 0.0 < finite[torch.float64] < 1e-200


def test_bad_arguments():
    u, weight, h0 = inputs()[:3]
    with pytest.raises(ValueError, match="activation must be one of"):
        elman_scan(u, weight, h0, "sigmoid")
    with pytest.raises(ValueError, match="together"):
        elman_scan(u, weight, h0, "tanh", alpha=torch.tensor(0.5))
    with pytest.raises(ValueError, match="modrelu"):
        elman_scan(u, weight, h0, "modrelu")
    with pytest.raises(ValueError, match="modrelu"):
        elman_scan(u, weight, h0, "relu", bias=torch.zeros(5, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"bias must have shape \(5,\)"):
        elman_scan(u, weight, h0, "modrelu", bias=torch.zeros(4, dtype=torch.float64))
