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
  and ``beta <= 1 - 2 alpha`` (eq. 3) enforced by clipping beta after the
  sigmoid (§2; Note [Clipping beta]), which gives the generalisation bound
  of Thm. 1 independent of ``U`` and T, and gradients growing at most like
  ``(alpha T)^2`` (Thm. 2, Cor. 1).  ``clip_beta=False`` drops the clip, to
  show what it buys.

Both default to ReLU, the activation of every model in the SGORNN paper's
experiments (§3) and of its theorems; the FastRNN reference code defaults to
tanh (``nonlinearity="tanh"``).

Note [Clipping beta]
--------------------
The paper asks for ``0 < beta <= 1 - 2 alpha`` (§2, eq. 3: "beta is clipped
after applying the sigmoid function, so that it lies in the half-open
interval (0, 1 - 2 alpha]").  The authors' code clips into the closed
interval, ``K.clip(sigmoid(beta), 0, 1 - 2 sigmoid(alpha))`` (github
wtaylor17/sgornn-nn-supplementary, ``sgornn/layers.py``, ``FastRNNCell``),
which with their Keras 2.3.1 / TensorFlow 1.15 is ``tf.clip_by_value``:
``maximum(minimum(beta, 1 - 2 alpha), 0)``, the upper bound first.
:func:`clip_beta` does the same with two ``torch.clamp`` calls in that order:

* ``beta <= 1 - 2 alpha`` (the usual case): beta unchanged, its gradient
  goes to the logit ``c`` and none to alpha;
* ``0 <= 1 - 2 alpha < beta``: beta = 1 - 2 alpha, so the gradient of beta
  reaches alpha (times -2) and ``c`` gets none;
* ``1 - 2 alpha < 0``, i.e. alpha > 1/2: the interval is empty and beta = 0
  — never negative — with no gradient to either logit through beta (alpha
  still trains through ``alpha f(.)``).  Eq. 3 cannot hold there (2 alpha > 1),
  so Thm. 1 does not apply; the paper assumes alpha << 1 and the reference
  does not clip alpha, so neither do we.

At the ties the gradient goes to beta itself, as TensorFlow's ``Minimum`` and
``Maximum`` gradients (and ``torch.clamp``'s) send it to their first
argument.  A single ``torch.clamp(beta, 0, 1 - 2 alpha)`` would differ when
alpha > 1/2: with min > max it returns max, a negative beta.
``gate_values()`` reports ``beta_raw = sigmoid(c)`` beside the clipped
``beta``, so the trainer's ``gate/beta_raw`` shows the clip at work.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..parametrizations.rotations import register_plane_rotations
from .base import check_bool, check_nonnegative
from .elman import ElmanCell
from .vprnn import MAX_SUBLAYERS, check_even_hidden_size, resolve_sublayers


def _check_float(option: str, value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{option} must be a finite number; got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{option} must be a finite number; got {value!r}")
    return number


def clip_beta(beta: Tensor, alpha: Tensor) -> Tensor:
    """``beta`` clipped into ``[0, 1 - 2 alpha]``, 0 when that interval is empty (Note [Clipping beta])."""
    return torch.clamp(beta, max=1.0 - 2.0 * alpha).clamp(min=0.0)


class _ScalarGatedCell(ElmanCell):
    """The gates shared by FastRNN and SGORNN; subclasses provide ``weight_hh``."""

    option_help = {
        "alpha_init": "alpha = sigmoid(alpha_init) at the start: the weight of the new update",
        "beta_init": "beta = sigmoid(beta_init) at the start: the weight of h_{t-1}",
    }

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

    summary = "FastRNN: h = alpha f(Wx + Uh + b) + beta h (SGORNN paper eq. 1)"
    equations = (r"h_t = \alpha \, \phi(z_t) + \beta \, h_{t-1}", r"z_t = U x_t + W h_{t-1} + b")
    paper = "Kusupati et al. 2018; SGORNN paper eq. (1)"

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

    beta is clipped into ``[0, 1 - 2 alpha]`` where the gates are read, every
    forward pass, so the constraint holds whatever the optimizer does and
    autograd differentiates through the clip (Note [Clipping beta]).

    Options:
        k: rotational sublayers of the VPRNN map, as for ``vprnn``: None
            (default) for ``2 ceil(log2 hidden_size)``, 14 at hidden size 128 (§3.1).
        angle_init: as for ``vprnn``.
        clip_beta: enforce eq. 3 (default, as in all the paper's experiments).
        alpha_init: -3.75, so that the clip starts inactive (see the module docstring).
        beta_init, nonlinearity: as for ``fastrnn``.
    """

    summary = "SGORNN: FastRNN with orthogonal U and beta <= 1 - 2 alpha (SGORNN paper eq. 3)"
    equations = (r"h_t = \alpha \, \phi(z_t) + \beta \, h_{t-1}", r"z_t = U x_t + W h_{t-1} + b",
                 r"W = R_1 Q_1 \cdots R_k Q_k", r"\beta \le 1 - 2\alpha")
    paper = "SGORNN paper eqs. (1)-(3)"
    option_help = {
        "k": "rotational sublayers R_i Q_i; empty: 2⌈log₂ n⌉, 14 at n = 128 (SGORNN paper App. A.3)",
        "angle_init": "rotation angles start uniform in [-angle_init, angle_init]; 0.05 starts W near a "
                      "permutation (the reference code), pi well mixed",
        "clip_beta": "keep beta in [0, 1 - 2 alpha] (eq. 3), as in all the paper's experiments",
        "alpha_init": "alpha = sigmoid(alpha_init) at the start; -3.75 starts the beta clip inactive",
    }
    option_ranges = {"k": (1, MAX_SUBLAYERS), "angle_init": (0.0, None)}

    def __init__(self, input_size: int, hidden_size: int, *, k: int | None = None, angle_init: float = 0.05,
                 clip_beta: bool = True, alpha_init: float = -3.75, beta_init: float = 3.0,
                 nonlinearity: str = "relu", negative_slope: float = 0.01, h0: str = "zero",
                 h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, alpha_init=alpha_init, beta_init=beta_init,
                         nonlinearity=nonlinearity, negative_slope=negative_slope, h0=h0,
                         h0_noise_std=h0_noise_std)
        check_even_hidden_size(hidden_size)
        check_bool("clip_beta", clip_beta)
        self.k = resolve_sublayers(k, hidden_size)
        self.angle_init = check_nonnegative("angle_init", angle_init)
        self.clip_beta = clip_beta
        register_plane_rotations(self, "weight_hh", hidden_size, self.k, self.angle_init)

    def scalar_gates(self) -> tuple[Tensor, Tensor]:
        alpha, beta = super().scalar_gates()
        if self.clip_beta:
            beta = clip_beta(beta, alpha)
        return alpha, beta

    def gate_values(self) -> dict[str, float]:
        """alpha, the clipped beta, and ``beta_raw = sigmoid(c)`` before the clip."""
        values = super().gate_values()
        with torch.no_grad():
            values["beta_raw"] = torch.sigmoid(self.beta_logit).item()
        return values

    def recurrent_parameter_count(self) -> int:
        return self.k * self.hidden_size // 2

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, k={self.k}, clip_beta={self.clip_beta}"
