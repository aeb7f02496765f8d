"""Fused time loop for Elman-type recurrences.

Every real cell whose hidden state is updated by

    a_t = u_t + W h_{t-1}                       u_t = W_in x_t + b (all t in one matmul)
    h_t = alpha * f(a_t) + beta * h_{t-1}

runs through :func:`elman_scan`.  Plain Elman cells (``rnn``, ``irnn``,
``spectral``, ``orthogonal``, ``vprnn``, ``exponential``; KRU paper eq. 1,
spectral paper §4) are the case ``alpha = 1, beta = 0``; FastRNN and SGORNN
(SGORNN paper eq. 1) pass their scalar gates.

``f`` is tanh, relu, leaky_relu, or the real modReLU of expRNN,

    modrelu(a) = sign(a) relu(|a| + c)          c in R^H trainable, one per unit

(Lezcano-Casado & Martínez-Rubio 2019; github Lezcano/expRNN, ``orthogonal.py``,
class ``modrelu``), the real case of the uRNN's complex modReLU
(:mod:`stability.cells.modrelu`).  sign(0) = 0, so modrelu(0) = 0.

Note [Why a hand-written backward]
----------------------------------
Autograd over a Python time loop records several nodes per step, and its
backward accumulates dL/dW as T small (B, H) x (B, H) products.  Here the
forward is two kernels per step (one ``addmm`` into a preallocated buffer,
one in-place activation) and the backward is two kernels per step (a
multiply by the saved activation derivative and one ``addmm``).  Everything
that does not depend on the recursion is done once, outside the loop:
``f'`` for all steps from the saved states, dL/dW as a single
(H, T*B) x (T*B, H) GEMM, dL/dalpha and dL/dbeta as two reductions.
The derivative of tanh, relu and leaky_relu can be read off their outputs,
so nothing but the states themselves (plus f(a_t) when gated) is saved.

Note [modReLU from its output]
------------------------------
With s = modrelu(a) = sign(a) relu(|a| + c), a unit is active where
a != 0 and |a| + c > 0, which is exactly where s != 0; there s = a + c sign(a), so

    ds/da = 1[s != 0],        ds/dc = sign(s)

(both 0 where inactive, as autograd gives them for sign(a) * relu(|a| + c),
with sign'= 0 and relu'(0) = 0).  So modReLU joins the scan like relu: f'
comes from the saved outputs, and dL/dc = sum over t and batch of
sign(s_t) * alpha * dL/dh_t * 1[s_t != 0] = sum sign(s_t) * delta_t — one
more reduction after the loop, with sign(s) written over the dL/dh_t buffer
once that is spent, so the backward allocates no more than for relu.
The forward step is five in-place elementwise kernels instead of one.

Note [Gates stay on the device]
-------------------------------
The gated update's alpha and beta are 0-d tensors that the cell computes on
the device (sigmoids of its parameters).  Turning them into Python numbers
(``float(alpha)``) would make the host wait for the GPU at every forward and
every backward, in the middle of a step that otherwise only queues kernels.
So they stay tensors: ``h_t = beta h_{t-1}`` is ``torch.mul(h, beta)`` and
``+ alpha s_t`` an ``addcmul_`` by the 0-d tensor, as in the backward the
``alpha f'`` and ``+ beta dL/dh_t`` terms.  On the CPU ``addcmul_`` rounds
exactly as ``add_(s, alpha=a)`` did (one fused multiply-add), so the numbers
there are the same to the bit as with the Python numbers.  The ungated path
(alpha = 1, beta = 0) skips those kernels, as before.

Layout: ``u`` and the returned states are time-major, (T, B, H), so that each
step reads and writes one contiguous (B, H) block.
"""
from __future__ import annotations

import torch
from torch import Tensor

ACTIVATIONS = ("tanh", "relu", "leaky_relu", "modrelu")


def apply_activation(a: Tensor, activation: str, negative_slope: float, bias: Tensor | None = None) -> Tensor:
    """f(a) out of place (used by the reference loops); ``bias`` is modReLU's c."""
    if activation == "tanh":
        return torch.tanh(a)
    if activation == "relu":
        return torch.relu(a)
    if activation == "modrelu":
        return torch.sign(a) * torch.relu(a.abs() + bias)
    return torch.nn.functional.leaky_relu(a, negative_slope)


def _activate_(a: Tensor, activation: str, negative_slope: float, bias: Tensor | None,
               scratch: Tensor | None) -> None:
    if activation == "tanh":
        a.tanh_()
    elif activation == "relu":
        a.relu_()
    elif activation == "modrelu":
        torch.sign(a, out=scratch)
        a.abs_().add_(bias).relu_().mul_(scratch)
    else:
        torch.nn.functional.leaky_relu_(a, negative_slope)


def _derivative_from_output(s: Tensor, activation: str, negative_slope: float) -> Tensor:
    """f'(a) written in terms of s = f(a), for all steps at once."""
    if activation == "tanh":
        return 1.0 - s * s
    if activation == "relu":
        return (s > 0).to(s.dtype)
    one = torch.ones((), dtype=s.dtype, device=s.device)
    return torch.where(s > 0, one, one * negative_slope)


class _ElmanScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, weight, h0, alpha, beta, bias, activation, negative_slope):
        gated = alpha is not None
        states = torch.empty_like(u)  # (T, B, H)
        scratch = torch.empty_like(h0) if activation == "modrelu" else None  # sign(a_t)
        weight_t = weight.t()
        h = h0
        if not gated:
            for u_t, h_t in zip(u.unbind(0), states.unbind(0)):
                torch.addmm(u_t, h, weight_t, out=h_t)
                _activate_(h_t, activation, negative_slope, bias, scratch)
                h = h_t
            ctx.save_for_backward(states, weight, h0)
        else:  # alpha and beta stay 0-d tensors: Note [Gates stay on the device]
            squashed = torch.empty_like(u)  # f(a_t), needed for f' and dL/dalpha
            for u_t, s_t, h_t in zip(u.unbind(0), squashed.unbind(0), states.unbind(0)):
                torch.addmm(u_t, h, weight_t, out=s_t)
                _activate_(s_t, activation, negative_slope, bias, scratch)
                torch.mul(h, beta, out=h_t)
                h_t.addcmul_(s_t, alpha)
                h = h_t
            ctx.save_for_backward(states, weight, h0, squashed, alpha, beta)
        ctx.gated = gated
        ctx.activation = activation
        ctx.negative_slope = negative_slope
        return states

    @staticmethod
    def backward(ctx, grad_states):
        if ctx.gated:
            states, weight, h0, squashed, alpha, beta = ctx.saved_tensors
        else:
            states, weight, h0 = ctx.saved_tensors
            squashed, alpha, beta = states, None, None
        grad_states = grad_states.contiguous()
        # delta_t = dL/da_t = alpha * f'(a_t) * dL/dh_t; start from alpha * f'.
        if ctx.activation == "modrelu":  # Note [modReLU from its output]: f' = |sign(s)|
            delta = torch.sign(squashed).abs_()
        else:
            delta = _derivative_from_output(squashed, ctx.activation, ctx.negative_slope)
        if ctx.gated:
            delta.mul_(alpha)
        grad_h = torch.empty_like(grad_states)  # total dL/dh_t
        g, dh, d = grad_states.unbind(0), grad_h.unbind(0), delta.unbind(0)
        dh[-1].copy_(g[-1])
        for t in range(len(g) - 1, 0, -1):
            d[t].mul_(dh[t])
            torch.addmm(g[t - 1], d[t], weight, out=dh[t - 1])
            if ctx.gated:
                dh[t - 1].addcmul_(dh[t], beta)
        d[0].mul_(dh[0])
        grad_h0 = d[0] @ weight
        if ctx.gated:
            grad_h0.addcmul_(dh[0], beta)

        grad_weight = grad_alpha = grad_beta = grad_bias = None
        hidden = weight.shape[0]
        if ctx.needs_input_grad[1]:
            grad_weight = d[0].t() @ h0
            if len(d) > 1:
                grad_weight.addmm_(delta[1:].reshape(-1, hidden).t(), states[:-1].reshape(-1, hidden))
        if ctx.gated and ctx.needs_input_grad[3]:
            grad_alpha = (grad_h * squashed).sum().reshape(alpha.shape)
        if ctx.gated and ctx.needs_input_grad[4]:
            grad_beta = ((grad_h[1:] * states[:-1]).sum() + (grad_h[0] * h0).sum()).reshape(beta.shape)
        if ctx.needs_input_grad[5]:  # modReLU's c: Note [modReLU from its output]
            signs = torch.sign(squashed, out=grad_h)  # grad_h is not needed any more
            grad_bias = signs.mul_(delta).reshape(-1, hidden).sum(0)
        return delta, grad_weight, grad_h0, grad_alpha, grad_beta, grad_bias, None, None


def elman_scan(
    u: Tensor,
    weight: Tensor,
    h0: Tensor,
    activation: str = "tanh",
    negative_slope: float = 0.01,
    alpha: Tensor | None = None,
    beta: Tensor | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """Run ``h_t = alpha f(u_t + W h_{t-1}) + beta h_{t-1}`` over all steps.

    Args:
        u: projected inputs, time-major (T, B, H).
        weight: the recurrent matrix W (H, H), acting on column vectors.
        h0: initial state (B, H).
        activation: one of :data:`ACTIVATIONS`.
        alpha, beta: 0-dim tensors for the scalar-gated update, or both None
            for the plain Elman update.
        bias: modReLU's c (H,); required for ``"modrelu"``, None otherwise.

    Returns:
        All states h_1..h_T, time-major (T, B, H).
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}; got {activation!r}")
    if (alpha is None) != (beta is None):
        raise ValueError("alpha and beta must be given together")
    if (activation == "modrelu") != (bias is not None):
        raise ValueError("bias (modReLU's c, one per unit) is given with activation='modrelu' and only then; "
                         f"got activation={activation!r}, bias={'None' if bias is None else 'a tensor'}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"bias must have shape ({weight.shape[0]},); got {tuple(bias.shape)}")
    return _ElmanScan.apply(u.contiguous(), weight, h0, alpha, beta, bias, activation, float(negative_slope))
