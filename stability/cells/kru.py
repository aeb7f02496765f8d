"""Kronecker Recurrent Units (Jose, Cissé & Fleuret, KRU paper).

``kru`` — the complex Elman recurrence of eq. 1 with a Kronecker-factored
recurrent matrix (§3, eq. 4)::

    h_t = modReLU(W h_{t-1} + U x_t + b),     h_t in C^N
    W   = W_0 ⊗ W_1 ⊗ … ⊗ W_{F-1},            W_f in C^{n_f x n_f}
    modReLU(z) = relu(|z| + c) z / |z|         (c in R^N trainable; 0 at z = 0)

modReLU is the complex rectified unit of Arjovsky et al. (2016) that the paper
uses for KRU (§4, "complex rectified linear units").  ``U x_t + b`` is a real
``nn.Linear`` to 2N features read as [Re | Im]: for a real input x that is
exactly a complex U and complex b.  The outputs are the real features
[Re h_t, Im h_t] (B, T, 2N), for a real readout as in eq. 2; the final state
is complex.  ``penalty()`` is the soft unitary constraint of §3.1, eq. 7:
``penalty_strength · Σ_f ‖W_fᴴ W_f − I‖²_F``.

``kru_lstm`` — an LSTM (appendix B, eq. 15–20) whose four recurrent matrices
W_i, W_f, W_c, W_o are Kronecker products (§1, §4.4–4.5)::

    i, f, o = sigmoid(W_* h_{t-1} + U_* x_t + b_*),   ĉ = tanh(W_c h_{t-1} + U_c x_t + b_c)
    c_t = f ⊙ c_{t-1} + i ⊙ ĉ,                        h_t = o ⊙ tanh(c_t)

Note [Real factors for KRU-LSTM]
--------------------------------
The paper runs "KRU variants of real space RNN and LSTM" (§1) with tanh (§4)
and does not say the LSTM's factors are complex.  Table 3's parameter counts
say they are real: that table counts two real numbers per complex entry for
KRU (N = 411 = 3 · 137: 2 (3² + 137²) ≈ 38K; N = 993 = 3 · 331: ≈ 220K), and
its KRU-LSTM with N = 500 has ≈ 250K = 4 gates × (2² + 250²) real numbers for
factors 2 · 250 (complex factors would make it ≈ 500K).  Table 4 does not
settle it: it counts one number per entry even for the complex KRU (N = 100,
factors 2 · 2 · 5 · 5: 58), so its KRU-LSTM's 172 = 4 × (3² + 3² + 5²) for
N = 45 fits real or complex factors alike.
So ``kru_lstm`` is a real LSTM with real factors, four independent
Kronecker products (one per gate) in PyTorch's gate order (i, f, g, o), and
its penalty is off by default: "in case of LSTMs we do not need to
explicitly enforce the approximate orthogonality constraints as the gating
mechanism is designed to prevent vanishing and exploding gradients" (§1).

The time loop is :func:`stability.cells.modrelu.modrelu_scan` (Note [modReLU
fused scan] and Note [Two-factor step] there).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..parametrizations.kronecker import (check_factor_sizes, factor_parameter_count, kron_chain, kronecker,
                                          kronecker_factors, unitarity_penalty)
from .base import check_nonnegative
from .gated import LSTM
from .modrelu import ModReLUCell

# ----------------------------------------------------------------------- KRU

# Below this many complex units one dense (2N, 2N) GEMM per step beats two small ones.
TWO_FACTOR_MIN_SIZE = 128


def two_factor_split(factor_sizes: tuple[int, ...]) -> int | None:
    """Where to cut the factors into W = P ⊗ Q for the two-factor step, or None for dense steps.

    Minimises the step's multiply count, 4 N q + 8 N p for P (p x p) and
    Q (q x q) (Note [Two-factor step]), against 4 N² for the dense step; the
    cut is used when N >= ``TWO_FACTOR_MIN_SIZE`` and it does at most a
    quarter of the dense work.
    """
    size = math.prod(factor_sizes)
    best = None
    for cut in range(1, len(factor_sizes)):
        p = math.prod(factor_sizes[:cut])
        cost = 4 * (size // p) + 8 * p
        if best is None or cost < best[0]:
            best = (cost, cut)
    if best is None or size < TWO_FACTOR_MIN_SIZE or best[0] > size:
        return None
    return best[1]


class KroneckerFactored:
    """What ``kru`` and ``kru_lstm`` share: ``weight_hh`` is a Kronecker parametrization
    with ``factor_sizes``, softly pulled towards unitary by ``penalty_strength`` (eq. 7)."""

    def penalty(self) -> Tensor:
        if self.penalty_strength == 0.0:
            return super().penalty()
        return self.penalty_strength * unitarity_penalty(self.factors())

    def recurrent_parameter_count(self) -> int:
        return factor_parameter_count(self, "weight_hh")

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, factor_sizes={self.factor_sizes}, "
                f"penalty_strength={self.penalty_strength:g}")


class KRU(KroneckerFactored, ModReLUCell):
    """``kru``: complex modReLU RNN with W = W_0 ⊗ … ⊗ W_{F-1} (KRU paper §3).

    Options:
        factor_sizes: sizes n_f of the square complex factors, product N.
            Default: all 2 (F = log2 N, 8 log2 N real recurrent parameters,
            the paper's main setting, §3 and §4.1–4.3), which needs N a power
            of two.  ``(N,)`` is a free complex recurrent matrix.
        penalty_strength: weight of the soft unitary penalty (eq. 7).  The
            paper cross-validates it over 1e-7 … 1e-1 and finds its best
            values between 1e-5 (TIMIT) and 1e-1 (Piano-midi) (§4.7); the
            default 1e-3 is the middle of that range on a log scale.

    Initialisation: every factor Haar-random unitary, so W starts unitary
    (§4.1: "We initialize it by random unitary matrix"); modReLU bias 0, so
    the cell starts as a linear unitary recurrence; U as ``nn.Linear``, b = 0.

    ``kronecker_split`` (an attribute, not an option) is where the fused path
    cuts the factors for its two-factor step, None for dense steps; see
    :func:`two_factor_split` and Note [Two-factor step].
    """

    summary = "Kronecker Recurrent Unit: complex W = W_0 (x) ... (x) W_F-1, soft unitary penalty (KRU paper §3)"
    equations = (r"h_t = \operatorname{modReLU}(W h_{t-1} + U x_t + b)", r"W = W_0 \otimes \cdots \otimes W_{F-1}",
                 r"\text{penalty } \lambda \textstyle\sum_f \lVert W_f^H W_f - I \rVert^2")
    paper = "Jose et al. 2018 (KRU paper) §3, eqs. (4), (7)"
    option_help = {
        "factor_sizes": "sizes n_f of the square complex factors, product hidden_size; default all 2 "
                        "(hidden_size a power of two)",
        "penalty_strength": "lambda of the soft unitary penalty (eq. 7); the paper's best lie in 1e-5 ... 1e-1",
    }
    option_ranges = {"penalty_strength": (0.0, None)}

    def __init__(self, input_size: int, hidden_size: int, *, factor_sizes: tuple[int, ...] | None = None,
                 penalty_strength: float = 1e-3, h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, input_bias=True, h0=h0, h0_noise_std=h0_noise_std)
        self.factor_sizes = check_factor_sizes(factor_sizes, hidden_size)
        self.penalty_strength = check_nonnegative("penalty_strength", penalty_strength)
        nn.init.zeros_(self.input_proj.bias)
        kronecker(self, "weight_hh", self.factor_sizes, complex=True)
        self.kronecker_split = two_factor_split(self.factor_sizes)
        self._init_initial_state()

    def two_factors(self) -> tuple[Tensor, Tensor] | None:
        if self.kronecker_split is None:
            return None
        with torch.no_grad():
            factors, cut = self.factors(), self.kronecker_split
            return kron_chain(factors[:cut]), kron_chain(factors[cut:])

    def factors(self) -> list[Tensor]:
        """The complex Kronecker factors W_0, …, W_{F-1}, each (n_f, n_f)."""
        return [f[0] for f in kronecker_factors(self, "weight_hh")]

    def recurrent_matrix(self) -> Tensor:
        return self.weight_hh


# ------------------------------------------------------------------ KRU-LSTM


class KRULSTM(KroneckerFactored, LSTM):
    """``kru_lstm``: LSTM with four real Kronecker-factored recurrent matrices (KRU paper §4.4–4.5).

    The ``lstm`` cell (state [h, c] of size 2H, outputs h, PyTorch's kernel
    for training, gate statistics on demand) with its stacked recurrent
    matrix [W_i; W_f; W_c; W_o] behind a Kronecker parametrization.

    Options:
        factor_sizes: sizes of the square real factors of each of W_i, W_f,
            W_c, W_o; default all 2 (H a power of two).
        penalty_strength: weight of Σ_gates Σ_f ‖W_fᵀ W_f − I‖²_F; default 0,
            see Note [Real factors for KRU-LSTM].
        forget_bias: as in the ``lstm`` cell.

    Initialisation: every factor Haar-random orthogonal (each recurrent
    matrix starts orthogonal, as KRU's starts unitary); input weights and
    biases as in ``lstm``.  ``recurrent_matrix()`` is W_c, as for ``lstm``.
    """

    summary = "LSTM with Kronecker-factored recurrent matrices (KRU paper §4.4)"
    equations = (r"c_t = f_t \odot c_{t-1} + i_t \odot g_t", r"h_t = o_t \odot \tanh(c_t)",
                 r"W_{i,f,g,o} = W^{(0)} \otimes \cdots \otimes W^{(F-1)}")
    paper = "Jose et al. 2018 (KRU paper) §4.4-4.5"
    option_help = {
        "factor_sizes": "sizes of the square real factors of each gate's W; default all 2 "
                        "(hidden_size a power of two)",
        "penalty_strength": "weight of the orthogonality penalty on the factors (default 0)",
    }
    option_ranges = {"penalty_strength": (0.0, None)}

    def __init__(self, input_size: int, hidden_size: int, *, factor_sizes: tuple[int, ...] | None = None,
                 penalty_strength: float = 0.0, forget_bias: float = 1.0, h0: str = "zero",
                 h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, forget_bias=forget_bias, h0=h0, h0_noise_std=h0_noise_std)
        self.factor_sizes = check_factor_sizes(factor_sizes, hidden_size)
        self.penalty_strength = check_nonnegative("penalty_strength", penalty_strength)
        del self.weight_hh
        kronecker(self, "weight_hh", self.factor_sizes, complex=False, count=4)  # (4H, H)

    def factors(self) -> list[Tensor]:
        """The real factors of W_i, W_f, W_c, W_o: one (4, n_f, n_f) tensor per position f."""
        return kronecker_factors(self, "weight_hh")

