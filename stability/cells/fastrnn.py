"""FastRNN and SGORNN: Elman updates with a scalar-gated residual connection.

    h_t = alpha f(W x_t + U h_{t-1} + b) + beta h_{t-1}            (SGORNN paper §2, eq. 1)

with ``alpha = sigmoid(a)`` and ``beta = sigmoid(c)`` for two trainable
scalars ``a, c`` (FastRNN, Kusupati et al. 2019).  Starting at ``a = -3``,
``c = 3`` (alpha ~ 0.047, beta ~ 0.953, the FastRNN reference code's
``alphaInit``/``betaInit``) each step mostly keeps the old state.  SGORNN
starts at ``a = -3.75`` (alpha ~ 0.023), the SGORNN authors' default, so
that ``beta ~ 0.953 < 1 - 2 alpha ~ 0.954`` starts inside the constraint
below and both gates get gradients from the first step.

* ``fastrnn`` — ``U`` is a free matrix.  FastRNN's generalisation and
  gradient guarantees need ``alpha`` of order 1/T and a bound on ``||U||``
  that nothing enforces in training; the SGORNN paper reports it exploding
  on the addition problem for T >= 1000 (§3.1, Table 1).
* ``sgornn`` — ``U = phi(Theta)`` orthogonal through the VPRNN map (eq. 2),
  and ``beta`` clipped into ``(0, 1 - 2 alpha]`` (eq. 3) after the sigmoid,
  which gives the generalisation bound of Thm. 1 independent of ``U`` and T,
  and gradients growing at most like ``(alpha T)^2`` (Thm. 2, Cor. 1).
  ``clip_beta=False`` drops the clip, to show what it buys.

Both default to ReLU, the activation of every model in the SGORNN paper's
experiments (§3) and of its theorems; the FastRNN reference code defaults to
tanh (``nonlinearity="tanh"``).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..parametrizations.rotations import register_plane_rotations
from .base import check_nonnegative, check_positive_int
from .elman import ElmanCell
from .vprnn import check_even_hidden_size


def _check_float(option: str, value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{option} must be a finite number; got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{option} must be a finite number; got {value!r}")
    return number


class _ScalarGatedCell(ElmanCell):
    """The gates shared by FastRNN and SGORNN; subclasses provide ``weight_hh``."""

    def __init__(self, input_size: int, hidden_size: int, *, alpha_init: float, beta_init: float,
                 nonlinearity: str, negative_slope: float, h0: str, h0_noise_std: float):
        super().__init__(input_size, hidden_size, nonlinearity=nonlinearity,
                         negative_slope=negative_slope, h0=h0, h0_noise_std=h0_noise_std)
        # Pre-sigmoid values: alpha = sigmoid(alpha_logit), beta = sigmoid(beta_logit).
        self.alpha_logit = nn.Parameter(torch.tensor(_check_float("alpha_init", alpha_init)))
        self.beta_logit = nn.Parameter(torch.tensor(_check_float("beta_init", beta_init)))

    def scalar_gates(self) -> tuple[Tensor, Tensor]:
        return torch.sigmoid(self.alpha_logit), torch.sigmoid(self.beta_logit)

    def gate_values(self) -> dict[str, float]:
        with torch.no_grad():
            alpha, beta = self.scalar_gates()
        return {"alpha": alpha.item(), "beta": beta.item()}


class FastRNN(_ScalarGatedCell):
    """``fastrnn``: eq. 1 with a free ``U``, initialised ``U_ij ~ N(0, 0.1^2)``
    as in the FastRNN reference code (EdgeML).

    Options:
        alpha_init, beta_init: the pre-sigmoid starting values (-3, 3).
        nonlinearity: ``f``; ReLU as in the SGORNN paper's experiments (§3).
    """

    def __init__(self, input_size: int, hidden_size: int, *, alpha_init: float = -3.0,
                 beta_init: float = 3.0, nonlinearity: str = "relu", negative_slope: float = 0.01,
                 h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, alpha_init=alpha_init, beta_init=beta_init,
                         nonlinearity=nonlinearity, negative_slope=negative_slope, h0=h0,
                         h0_noise_std=h0_noise_std)
        self.weight_hh = nn.Parameter(torch.randn(hidden_size, hidden_size) * 0.1)

    def recurrent_parameter_count(self) -> int:
        return self.hidden_size ** 2


class SGORNN(_ScalarGatedCell):
    """``sgornn``: eq. 1 with ``U = R_1 Q_1 ... R_k Q_k`` (eq. 2) and ``beta <= 1 - 2 alpha`` (eq. 3).

    The clip ``beta <- min(beta, 1 - 2 alpha)`` is applied where the gates are
    read, every forward pass, so it holds whatever the optimizer does and
    autograd differentiates through it (while clipped, the gradient of beta
    flows to alpha).  When ``alpha > 1/2`` the interval ``(0, 1 - 2 alpha]``
    is empty and the clipped beta is negative; the paper assumes alpha << 1.

    Options:
        k, angle_init: the VPRNN map, as for ``vprnn`` (k = 14 at hidden 128, §3.1).
        clip_beta: enforce eq. 3 (default, as in all the paper's experiments).
        alpha_init: -3.75, so that the clip starts inactive (see the module docstring).
        beta_init, nonlinearity: as for ``fastrnn``.
    """

    def __init__(self, input_size: int, hidden_size: int, *, k: int = 14, angle_init: float = 0.05,
                 clip_beta: bool = True, alpha_init: float = -3.75, beta_init: float = 3.0,
                 nonlinearity: str = "relu", negative_slope: float = 0.01, h0: str = "zero",
                 h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, alpha_init=alpha_init, beta_init=beta_init,
                         nonlinearity=nonlinearity, negative_slope=negative_slope, h0=h0,
                         h0_noise_std=h0_noise_std)
        check_even_hidden_size(hidden_size)
        if not isinstance(clip_beta, bool):
            raise ValueError(f"clip_beta must be True or False; got {clip_beta!r}")
        self.k = check_positive_int("k", k)
        self.angle_init = check_nonnegative("angle_init", angle_init)
        self.clip_beta = clip_beta
        register_plane_rotations(self, "weight_hh", hidden_size, self.k, self.angle_init)

    def scalar_gates(self) -> tuple[Tensor, Tensor]:
        alpha, beta = super().scalar_gates()
        if self.clip_beta:
            beta = torch.minimum(beta, 1.0 - 2.0 * alpha)
        return alpha, beta

    def recurrent_parameter_count(self) -> int:
        return self.k * self.hidden_size // 2

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, k={self.k}, clip_beta={self.clip_beta}"
