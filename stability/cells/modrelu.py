"""modReLU recurrences on the real form of complex states (KRU ``kru``, ``urnn``).

    h_t = modReLU(W h_{t-1} + u_t),    modReLU(z) = relu(|z| + c) z / |z|

modReLU is the complex rectified unit of Arjovsky et al. (2016), used by the
uRNN and by KRU (KRU paper §4).  At z = 0 both its value and its derivative
are taken as 0.

Note [modReLU fused scan]
---------------------
With h = x + i y and W = A + i B, the state s = [x, y] (2N real) obeys

    [Re(W h); Im(W h)] = M s,     M = [[A, -B], [B, A]]

so a step is one real ``addmm`` with Mᵀ and modReLU on the (x, y) pairs:
a_t = u_t + M s_{t-1}, m = |a_t| per unit, s_t = g a_t with the gain
g = relu(1 + c / m) (0 where m = 0).  For an active unit (m > 0, m + c > 0)
modReLU keeps the direction û = a / m = s / |s| and sets the length to
m + c, so its 2 x 2 Jacobian is

    J = g (I − û ûᵀ) + û ûᵀ  =  g I − (g − 1) û ûᵀ,

the identity along û and g across it; J = 0 for an inactive unit.  J is
symmetric, so dL/da_t = J dL/ds_t needs only g, m (saved by the forward,
|s| = g m) and s_t: per step a handful of (B, N) elementwise ops and one
``addmm``, with no (T, B, N)-sized temporaries.  dL/dM is one
(2N, T B) x (T B, 2N) GEMM and dL/dc a running sum,

    dL/dc = Σ_{t, batch} û · dL/ds_t     (over active units; û = 0 elsewhere).

Autograd carries dL/dM back through the block form and the Kronecker
product to the factors.

Note [Two-factor step]
----------------------
A dense step costs 4 N² multiplies per sequence, four times a real RNN of
the same N.  The Kronecker structure makes it cheaper (§3: O(N log N) for
2 x 2 factors): group the factors as W = P ⊗ Q, P = W_0 ⊗ … ⊗ W_{k-1}
(p x p), Q the rest (q x q), and read a state as s[c, i, j] (c = Re/Im,
unit i q + j); then (W h)[i, j] = Σ P[i, i'] Q[j, j'] h[i', j'] is

    Z'[c, i, c', j] = Σ_j' s[c, i, j'] Q_c'[j, j']          one GEMM, (B 2p, q) x (q, 2q)
    a[c'', i'', j]  = u + Σ_{c, i, c'} K[c'' i'', c i c'] Z'[c, i, c', j]
                                                           one batched GEMM, B x (2p, 4p) x (4p, q)

with Q_0 = Re Q, Q_1 = Im Q and K holding ±Re P, ±Im P so that the
complex products Re/Im(P Z) with Z = h Qᵀ come out directly in the [Re | Im]
layout: 4 N q + 8 N p multiplies.  For N = 128 in 2 x 2 factors the best cut
(p, q) = (8, 16) does a quarter of the dense work, and measured on 2 CPU
threads at batch 64 takes ~25 µs per step against ~52 µs for the dense
``addmm``.  The backward step is the transpose, a batched GEMM with Kᵀ then
one with Rᵀ.  Only the time loop uses the factors; dL/dM is still the one
dense GEMM above, so gradients reach the factors exactly as in the dense path.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .base import RecurrentCell, project_time_major

def modrelu(z: Tensor, bias: Tensor) -> Tensor:
    """relu(|z| + c) z / |z| for complex z, 0 (value and derivative) where z = 0."""
    magnitude = z.abs()
    nonzero = magnitude > 0
    safe = torch.where(nonzero, magnitude, torch.ones_like(magnitude))
    gain = torch.where(nonzero, torch.relu(magnitude + bias) / safe, torch.zeros_like(magnitude))
    return gain * z


def real_block_form(weight: Tensor) -> Tensor:
    """M = [[Re W, -Im W], [Im W, Re W]] (2N, 2N), so that M [x; y] = [Re(W h); Im(W h)]."""
    return torch.cat([torch.cat([weight.real, -weight.imag], dim=1),
                      torch.cat([weight.imag, weight.real], dim=1)], dim=0)


class _RecurrentMap:
    """s -> M s for a batch of row states (B, 2N), dense or Kronecker-structured.

    See Note [Two-factor step]; ``forward_into`` computes u + M s and
    ``transpose_into`` computes g + Mᵀ d, each into a preallocated (B, 2N).
    """

    def __init__(self, weight: Tensor, left: Tensor | None, right: Tensor | None, batch: int):
        self.weight, self.weight_t = weight, weight.t()
        self.structured = left is not None
        if self.structured:
            p2, q = left.shape[0], right.shape[0]  # 2p, q
            self.rows, self.q = batch * p2, q
            self.left = left.expand(batch, p2, 2 * p2)  # K, (B, 2p, 4p)
            self.left_t = left.t().expand(batch, 2 * p2, p2)
            self.right, self.right_t = right, right.t()  # (q, 2q), (2q, q)
            self.inner = weight.new_empty(batch, 2 * p2, q)  # Z', (B, 4p, q)

    def forward_into(self, out: Tensor, u: Tensor, s: Tensor) -> None:
        if not self.structured:
            torch.addmm(u, s, self.weight_t, out=out)
            return
        torch.mm(s.view(self.rows, self.q), self.right, out=self.inner.view(self.rows, 2 * self.q))
        batch, p2 = self.left.shape[:2]
        torch.baddbmm(u.view(batch, p2, self.q), self.left, self.inner, out=out.view(batch, p2, self.q))

    def transpose_into(self, out: Tensor, g: Tensor, d: Tensor) -> None:
        if not self.structured:
            torch.addmm(g, d, self.weight, out=out)
            return
        batch, p2 = self.left.shape[:2]
        torch.bmm(self.left_t, d.view(batch, p2, self.q), out=self.inner)
        torch.mm(self.inner.view(self.rows, 2 * self.q), self.right_t, out=out.view(self.rows, self.q))
        out.add_(g)


class _ModReLUScan(torch.autograd.Function):
    """See Note [KRU fused scan].  Per-step views are made once, outside the loops."""

    @staticmethod
    def forward(ctx, u, weight, s0, bias, left, right):
        steps, batch, width = u.shape
        n = width // 2
        recurrent = _RecurrentMap(weight, left, right, batch)
        states = torch.empty_like(u)  # (T, B, 2N): s_t = [Re h_t, Im h_t]
        moduli = u.new_empty(steps, batch, n)  # (T, B, N): m_t = |a_t|
        gains = u.new_empty(steps, batch, n)  # (T, B, N): g_t
        pre = u.new_empty(batch, 2, n)  # a_t as (x, y) pairs, reused every step
        pre_x, pre_y, pre_flat = pre[:, 0], pre[:, 1], pre.view(batch, width)
        one = torch.ones((), dtype=u.dtype, device=u.device)
        s = s0
        for u_t, m_t, g_t, g_pair, s_t, s_pair in zip(
                u.unbind(0), moduli.unbind(0), gains.unbind(0), gains.unsqueeze(2).unbind(0),
                states.unbind(0), states.view(steps, batch, 2, n).unbind(0)):
            recurrent.forward_into(pre_flat, u_t, s)
            torch.hypot(pre_x, pre_y, out=m_t)
            torch.addcdiv(one, bias, m_t, out=g_t)  # 1 + c / m: ±inf or nan where m = 0
            g_t.nan_to_num_(0.0, 0.0, 0.0).relu_()
            torch.mul(pre, g_pair, out=s_pair)
            s = s_t
        ctx.save_for_backward(states, moduli, gains, weight, s0, bias, left, right)
        return states

    @staticmethod
    def backward(ctx, grad_states):
        states, moduli, gains, weight, s0, bias, left, right = ctx.saved_tensors
        steps, batch, width = states.shape
        n = width // 2
        recurrent = _RecurrentMap(weight, left, right, batch)
        tiny = torch.finfo(states.dtype).tiny
        delta = torch.empty_like(states)  # (T, B, 2N): dL/da_t
        grad_s = grad_states[-1].clone(memory_format=torch.contiguous_format)  # total dL/ds_t, (B, 2N)
        grad_s_prev = torch.empty_like(grad_s)
        rho, dot, radial = (states.new_empty(batch, n) for _ in range(3))
        radial_pair = radial.unsqueeze(1)
        product = states.new_empty(batch, width)
        product_x, product_y = product[:, :n], product[:, n:]
        grad_bias = states.new_zeros(batch, n)
        grad_in = [None] + list(grad_states[:-1].unbind(0))  # dL/ds_{t-1} from the outputs
        for t, s_t, s_pair, g_t, g_pair, m_t, d_t, d_pair in reversed(list(zip(
                range(steps), states.unbind(0), states.view(steps, batch, 2, n).unbind(0), gains.unbind(0),
                gains.unsqueeze(2).unbind(0), moduli.unbind(0), delta.unbind(0),
                delta.view(steps, batch, 2, n).unbind(0)))):
            # rho = 1 / |s_t| (huge but finite where s_t = 0, which zeroes dot)
            torch.mul(g_t, m_t, out=rho).clamp_min_(tiny).reciprocal_()
            torch.mul(s_t, grad_s, out=product)
            torch.add(product_x, product_y, out=dot).mul_(rho)  # û · dL/ds_t
            grad_bias.add_(dot)
            torch.sub(g_t, 1.0, out=radial).mul_(rho).mul_(dot)  # (g - 1) (û · dL/ds_t) / |s_t|
            torch.mul(grad_s.view(batch, 2, n), g_pair, out=d_pair)
            d_pair.addcmul_(s_pair, radial_pair, value=-1.0)
            if t > 0:
                recurrent.transpose_into(grad_s_prev, grad_in[t], d_t)
                grad_s, grad_s_prev = grad_s_prev, grad_s

        grad_s0 = delta[0] @ weight if ctx.needs_input_grad[2] else None
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = delta[0].t() @ s0
            if steps > 1:
                grad_weight.addmm_(delta[1:].reshape(-1, width).t(), states[:-1].reshape(-1, width))
        grad_bias = grad_bias.sum(0) if ctx.needs_input_grad[3] else None
        return delta, grad_weight, grad_s0, grad_bias, None, None


def kronecker_step_operands(left_factor: Tensor, right_factor: Tensor) -> tuple[Tensor, Tensor]:
    """K (2p, 4p) and R (q, 2q) of Note [Two-factor step] for W = P ⊗ Q (complex P, Q)."""
    pr, pi = left_factor.real, left_factor.imag
    p = pr.shape[0]
    # K[c_out, i_out, c, i, c_q]: rows (c_out, i_out), columns (c, i, c_q) of Z'
    k = pr.new_empty(2, p, 2, p, 2)
    k[0, :, 0, :, 0], k[0, :, 0, :, 1], k[0, :, 1, :, 0], k[0, :, 1, :, 1] = pr, -pi, -pi, -pr
    k[1, :, 0, :, 0], k[1, :, 0, :, 1], k[1, :, 1, :, 0], k[1, :, 1, :, 1] = pi, pr, pr, -pi
    right = torch.cat([right_factor.real.t(), right_factor.imag.t()], dim=1)  # [Re Qᵀ | Im Qᵀ]
    return k.reshape(2 * p, 4 * p), right


def modrelu_scan(u: Tensor, weight: Tensor, s0: Tensor, bias: Tensor,
                 two_factors: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Run s_t = modReLU(u_t + M s_{t-1}) on the real form s = [Re h, Im h] of complex states.

    Args:
        u: projected inputs [Re | Im], time-major (T, B, 2N).
        weight: M = :func:`real_block_form` (W), (2N, 2N).
        s0: initial state [Re h0, Im h0], (B, 2N).
        bias: modReLU bias c, (N,).
        two_factors: optionally (P, Q) with W = P ⊗ Q (complex, p x p and q x q):
            each step then multiplies by the two small factors instead of M
            (Note [Two-factor step]).  Gradients flow to ``weight`` only.

    Returns:
        All states [Re h_t, Im h_t], time-major (T, B, 2N).
    """
    left = right = None
    if two_factors is not None:
        with torch.no_grad():
            left, right = kronecker_step_operands(*two_factors)
    return _ModReLUScan.apply(u.contiguous(), weight, s0.contiguous(), bias, left, right)


class ModReLUCell(RecurrentCell):
    """Shared machinery of the complex modReLU cells (``kru``, ``urnn``); not registered.

    The state h is complex (B, N); ``outputs`` are the real features
    [Re h_t, Im h_t] (B, T, 2N) for a real readout.  The input map is a real
    ``nn.Linear`` to 2N features read as [Re | Im]: for a real x that is
    exactly a complex U x (+ b).  Subclasses make ``weight_hh`` the complex
    (N, N) recurrent matrix and may override :meth:`two_factors`.
    """

    complex_state = True
    device_needs = {"complex64": "its complex W and state (view_as_complex, complex products)"}

    def __init__(self, input_size: int, hidden_size: int, *, input_bias: bool, h0: str, h0_noise_std: float):
        super().__init__(input_size, hidden_size, h0=h0, h0_noise_std=h0_noise_std)
        self.output_size = 2 * hidden_size
        self.input_proj = nn.Linear(input_size, 2 * hidden_size, bias=input_bias)
        self.modrelu_bias = nn.Parameter(torch.zeros(hidden_size))

    def two_factors(self) -> tuple[Tensor, Tensor] | None:
        """(P, Q) with W = P ⊗ Q for the two-factor step, or None for dense steps."""
        return None

    def _forward_fast(self, x: Tensor, h0: Tensor, impl: str):
        if impl == "native":
            raise ValueError(f"impl='native' is not available for {type(self).__name__} (PyTorch has "
                             "no complex modReLU kernel); use 'auto', 'scan' or 'loop'")
        n = self.hidden_size
        u = project_time_major(x, self.input_proj)  # (T, B, 2N)
        s0 = torch.cat([h0.real, h0.imag], dim=-1)  # (B, 2N)
        states = modrelu_scan(u, real_block_form(self.weight_hh), s0, self.modrelu_bias, self.two_factors())
        return states.transpose(0, 1), torch.complex(states[-1, :, :n], states[-1, :, n:])

    def _prepare(self, x: Tensor) -> dict:
        n = self.hidden_size
        u = project_time_major(x, self.input_proj)  # (T, B, 2N)
        return {"inputs": torch.complex(u[..., :n], u[..., n:]),  # (T, B, N) complex
                "weight_t": self.weight_hh.transpose(0, 1)}

    def _step(self, u_t: Tensor, h: Tensor, context: dict) -> Tensor:
        return modrelu(torch.addmm(u_t, h, context["weight_t"]), self.modrelu_bias)

    def _emit(self, h: Tensor) -> Tensor:
        return torch.cat([h.real, h.imag], dim=-1)  # (B, 2N)

    def recurrent_matrix(self) -> Tensor:
        return self.weight_hh
