"""The fused Elman scan against autograd: gradcheck and the step-by-step loop."""
import pytest
import torch

from stability.cells.scan import elman_loop, elman_scan


def inputs(T=6, B=3, H=5, gated=False, scale=0.6):
    u = torch.randn(T, B, H, dtype=torch.float64, requires_grad=True)
    weight = (torch.randn(H, H, dtype=torch.float64) * scale).requires_grad_()
    h0 = torch.randn(B, H, dtype=torch.float64, requires_grad=True)
    gates = ()
    if gated:
        gates = (torch.tensor(0.3, dtype=torch.float64, requires_grad=True),
                 torch.tensor(0.6, dtype=torch.float64, requires_grad=True))
    return (u, weight, h0) + gates


@pytest.mark.parametrize("activation", ["tanh", "relu", "leaky_relu"])
@pytest.mark.parametrize("gated", [False, True])
def test_gradcheck(activation, gated):
    args = inputs(gated=gated)
    assert torch.autograd.gradcheck(lambda *a: elman_scan(a[0], a[1], a[2], activation, 0.2, *a[3:]), args)


@pytest.mark.parametrize("activation", ["tanh", "relu", "leaky_relu"])
@pytest.mark.parametrize("gated", [False, True])
def test_matches_autograd_loop(activation, gated):
    args = inputs(T=40, B=4, H=16, gated=gated)
    weights = torch.randn(40, 4, 16, dtype=torch.float64)
    grads = []
    for run in (elman_scan, elman_loop):
        for a in args:
            a.grad = None
        states = run(args[0], args[1], args[2], activation, 0.05, *args[3:])
        (states * weights).sum().backward()
        grads.append((states.detach(), [a.grad.clone() for a in args]))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-12, atol=1e-12)
    for fused, loop in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(fused, loop, rtol=1e-10, atol=1e-12)


def test_single_step_and_float32():
    u, weight, h0 = (a.detach().float().requires_grad_() for a in inputs(T=1))
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
    u, weight, h0 = inputs()
    with pytest.raises(ValueError, match="activation must be one of"):
        elman_scan(u, weight, h0, "sigmoid")
    with pytest.raises(ValueError, match="together"):
        elman_scan(u, weight, h0, "tanh", alpha=torch.tensor(0.5))
