"""Strictly unitary / orthogonal baselines of the KRU paper (§1, §4; appendix C).

``urnn`` — the restricted-capacity unitary RNN (Arjovsky, Shah & Bengio 2016)::

    h_t = modReLU(W h_{t-1} + V x_t),     h_t in C^N
    W   = D3 R2 F^-1 D2 Pi R1 F D1          (KRU paper eq. 21; 7N real parameters)
    modReLU(z) = relu(|z| + b) z / |z|      (b in R^N trainable, one per unit)

The state is complex; the per-step outputs are the real features
[Re h_t, Im h_t] (B, T, 2N), which the uRNN feeds to its real readout
o_t = U [Re h_t; Im h_t] + b_o.  ``V`` is a real ``nn.Linear`` to 2N features
read as [Re(V x) | Im(V x)], without bias (the uRNN's only hidden bias is b).

``exponential`` — expRNN (Lezcano-Casado & Martínez-Rubio 2019)::

    h_t = f(W_in x_t + b + W h_{t-1}),    W = exp(A - A^T) in SO(N)

an Elman cell whose W is behind :class:`~stability.parametrizations.exponential.SkewExponential`.

Note [uRNN fused scan]
----------------------
The uRNN paper (§4, "Complex hidden units") runs the complex recurrence on
real numbers: with h = x + i y and W = A + i B, the state s = [x, y] and

    [Re(W h); Im(W h)] = M s,    M = [[A, -B], [B, A]]  (2N x 2N, real)

so one step is one real ``addmm`` with M^T plus modReLU on the (x, y) pairs.
:func:`modrelu_scan` runs all steps with a hand-written backward, like
:mod:`stability.cells.scan`.  With a = (x, y) one unit's pre-activation,
e = a / |a| and s = relu(|a| + b) e, modReLU's Jacobian is the symmetric
2 x 2 block

    J = g I + c e e^T,   g = relu(|a| + b) / |a|,   c = 1[|a| + b > 0] - g

(the tangential part is scaled by g, the radial part passed or stopped);
where a = 0 it is e = 0, g = relu(b), the same choice as :func:`modrelu`.
The forward saves e, relu(|a| + b) and |a| per step; the backward builds
all J at once, then each step is one multiply, two ``addcmul`` and one
``addmm``; dL/dM is one (2N, T B) x (T B, 2N) GEMM and dL/db one reduction.
Autograd carries dL/dM back to W and its factors.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from ..parametrizations.exponential import SKEW_INITS, SkewExponential, skew_block_init
from ..parametrizations.unitary import RestrictedUnitary, initial_factors
from .base import RecurrentCell, check_choice
from .elman import ElmanCell


def modrelu(z: Tensor, bias: Tensor) -> Tensor:
    """relu(|z| + b) z / |z| for complex z, 0 where |z| = 0 (uRNN paper §4).

    The phase z / |z| is taken as 0 at z = 0 (where the output is 0 whatever
    the phase), which keeps values and gradients finite there.
    """
    magnitude = z.abs()
    phase = z / torch.where(magnitude > 0, magnitude, torch.ones_like(magnitude))
    return torch.relu(magnitude + bias) * phase


class _ModReLUScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, weight, s0, bias):
        steps, batch, width = u.shape
        n = width // 2
        states = torch.empty_like(u)  # (T, B, 2N): s_t = [Re h_t, Im h_t]
        unit = torch.empty_like(u)  # (T, B, 2N): a_t / |a_t| per unit, 0 where |a_t| = 0
        magnitude = u.new_empty(steps, batch, n)  # relu(|a_t| + b)
        radius = u.new_empty(steps, batch, n)  # |a_t|, with 0 -> 1
        a = u.new_empty(batch, width)  # a_t = u_t + M s_{t-1}
        r = u.new_empty(batch, n)
        weight_t = weight.t()
        one = torch.ones((), dtype=u.dtype, device=u.device)
        s = s0
        for t in range(steps):
            torch.addmm(u[t], s, weight_t, out=a)
            torch.hypot(a[:, :n], a[:, n:], out=r)
            torch.where(r > 0, r, one, out=radius[t])
            torch.add(r, bias, out=magnitude[t]).relu_()
            unit_t = unit[t].view(batch, 2, n)
            torch.div(a.view(batch, 2, n), radius[t].unsqueeze(1), out=unit_t)
            torch.mul(unit_t, magnitude[t].unsqueeze(1), out=states[t].view(batch, 2, n))
            s = states[t]
        ctx.save_for_backward(states, unit, magnitude, radius, weight, s0)
        return states

    @staticmethod
    def backward(ctx, grad_states):
        states, unit, magnitude, radius, weight, s0 = ctx.saved_tensors
        steps, batch, width = states.shape
        n = width // 2
        # J = g I + c e e^T with e = a / |a|, g = relu(|a| + b) / |a|, c = 1[|a| + b > 0] - g;
        # where a = 0: e = 0 and g = relu(b), as in modrelu().
        gain = magnitude / radius  # (T, B, N)
        coupling = (magnitude > 0).to(gain.dtype).sub_(gain)
        pairs = unit.view(steps, batch, 2, n)
        diagonal = pairs.square().mul_(coupling.unsqueeze(2)).add_(gain.unsqueeze(2)).view(steps, batch, width)
        off_diagonal = (pairs[:, :, 0] * pairs[:, :, 1]).mul_(coupling)  # (T, B, N)
        grad_states = grad_states.contiguous()
        grad_s = torch.empty_like(grad_states)  # total dL/ds_t
        delta = diagonal  # becomes dL/da_t = J_t dL/ds_t, in place
        grad_s[-1].copy_(grad_states[-1])
        for t in range(steps - 1, -1, -1):
            d, g = delta[t], grad_s[t]
            d.mul_(g)
            d[:, :n].addcmul_(off_diagonal[t], g[:, n:])
            d[:, n:].addcmul_(off_diagonal[t], g[:, :n])
            if t > 0:
                torch.addmm(grad_states[t - 1], d, weight, out=grad_s[t - 1])
        grad_s0 = delta[0] @ weight
        grad_weight = delta[0].t() @ s0
        if steps > 1:
            grad_weight.addmm_(delta[1:].reshape(-1, width).t(), states[:-1].reshape(-1, width))
        radial = (pairs * grad_s.view(steps, batch, 2, n)).sum(dim=2)  # e . dL/ds_t
        grad_bias = radial.masked_fill_(magnitude == 0, 0.0).sum(dim=(0, 1))
        return delta, grad_weight, grad_s0, grad_bias


def modrelu_scan(u: Tensor, weight: Tensor, s0: Tensor, bias: Tensor) -> Tensor:
    """Run s_t = modReLU(u_t + M s_{t-1}) on the real form of complex states.

    Args:
        u: projected inputs [Re | Im], time-major (T, B, 2N).
        weight: M = [[A, -B], [B, A]] (2N, 2N) for W = A + i B.
        s0: initial state [Re h0, Im h0] (B, 2N).
        bias: modReLU bias b (N,).

    Returns:
        All states [Re h_t, Im h_t], time-major (T, B, 2N).
    """
    return _ModReLUScan.apply(u.contiguous(), weight, s0, bias)


def real_block_form(w: Tensor) -> Tensor:
    """M = [[Re W, -Im W], [Im W, Re W]] (2N, 2N): M [x; y] = [Re(W h); Im(W h)]."""
    return torch.cat([torch.cat([w.real, -w.imag], dim=1), torch.cat([w.imag, w.real], dim=1)], dim=0)


class URNN(RecurrentCell):
    """``urnn``: restricted-capacity unitary RNN with modReLU (Arjovsky et al. 2016).

    Initialisation (uRNN paper §4, "Initialization"): phases U[-pi, pi],
    reflection vectors U[-1, 1], modReLU bias 0 (so the cell starts as a
    linear unitary map plus input), V Glorot-uniform
    U[-sqrt(6 / (n_in + N)), +sqrt(6 / (n_in + N))] for each of Re V and Im V.
    The permutation Pi is drawn once at construction and kept as a buffer.

    ``h0``, like every state, is complex (B, N); ``outputs`` are real (B, T, 2N).
    """

    complex_state = True

    def __init__(self, input_size: int, hidden_size: int, *, h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, h0=h0, h0_noise_std=h0_noise_std)
        self.output_size = 2 * hidden_size
        self.input_proj = nn.Linear(input_size, 2 * hidden_size, bias=False)
        bound = math.sqrt(6.0 / (input_size + hidden_size))
        nn.init.uniform_(self.input_proj.weight, -bound, bound)
        self.modrelu_bias = nn.Parameter(torch.zeros(hidden_size))
        self.weight_hh = nn.Parameter(initial_factors(hidden_size))
        parametrize.register_parametrization(
            self, "weight_hh", RestrictedUnitary(torch.randperm(hidden_size)), unsafe=True)
        self._init_initial_state()

    def _forward_fast(self, x: Tensor, h0: Tensor, impl: str):
        if impl == "native":
            raise ValueError("impl='native' is not available for urnn (no PyTorch kernel for "
                             "modReLU); use 'auto', 'scan' or 'loop'")
        n = self.hidden_size
        u = self.input_proj(x.transpose(0, 1))  # (T, B, 2N)
        s0 = torch.cat([h0.real, h0.imag], dim=-1)  # (B, 2N)
        states = modrelu_scan(u, real_block_form(self.weight_hh), s0, self.modrelu_bias)
        return states.transpose(0, 1), torch.complex(states[-1, :, :n], states[-1, :, n:])

    def _prepare(self, x: Tensor) -> dict:
        u = self.input_proj(x.transpose(0, 1))  # (T, B, 2N)
        n = self.hidden_size
        return {"inputs": torch.complex(u[..., :n], u[..., n:]),  # (T, B, N) complex
                "weight_t": self.weight_hh.transpose(0, 1)}

    def _step(self, u_t: Tensor, h: Tensor, context: dict) -> Tensor:
        return modrelu(torch.addmm(u_t, h, context["weight_t"]), self.modrelu_bias)

    def _emit(self, h: Tensor) -> Tensor:
        return torch.cat([h.real, h.imag], dim=-1)  # (B, 2N)

    def recurrent_matrix(self) -> Tensor:
        return self.weight_hh

    def recurrent_parameter_count(self) -> int:
        return self.parametrizations.weight_hh.original.numel()  # 7N


class ExponentialRNN(ElmanCell):
    """``exponential``: Elman cell with W = exp(A - A^T) orthogonal (expRNN).

    Options:
        init: ``"henaff"`` (default, expRNN's default) or ``"cayley"``; see
            :mod:`stability.parametrizations.exponential`.
        nonlinearity: ``"relu"`` by default.  expRNN uses a real modReLU,
            sign(z) relu(|z| + b); the fused scan and the native kernels run
            tanh, relu and leaky_relu only, and relu is the modReLU's magnitude
            rule, so relu stands in for it (leaky_relu and tanh are available).

    W_in is He-normal (fan-in, ReLU gain) as in expRNN; its bias starts at 0.
    """

    def __init__(self, input_size: int, hidden_size: int, *, nonlinearity: str = "relu",
                 negative_slope: float = 0.01, init: str = "henaff",
                 h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, nonlinearity=nonlinearity,
                         negative_slope=negative_slope, h0=h0, h0_noise_std=h0_noise_std)
        self.init = check_choice("init", init, SKEW_INITS)
        nn.init.kaiming_normal_(self.input_proj.weight, nonlinearity="relu")
        self.weight_hh = nn.Parameter(skew_block_init(hidden_size, init))
        parametrize.register_parametrization(self, "weight_hh", SkewExponential())

    def recurrent_parameter_count(self) -> int:
        return self.hidden_size * (self.hidden_size - 1) // 2

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, init={self.init!r}"
