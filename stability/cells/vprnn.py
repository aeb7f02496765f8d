"""VPRNN: an Elman RNN whose recurrent matrix is a product of plane rotations
and fixed permutations (Taylor-Melanson et al., 2021).

    h_t = f(W_in x_t + b + W h_{t-1}),    W = R_1 Q_1 ... R_k Q_k      (SGORNN paper §2, eq. 2)

``W`` is orthogonal by construction (:mod:`stability.parametrizations.rotations`),
so ``||W h|| = ||h||`` for every state and the linear part of the recursion
can neither blow up nor shrink gradients.

``k`` defaults to ``2 ceil(log2 n)`` rotational sublayers for hidden size
``n`` (:func:`~stability.parametrizations.rotations.rotation_sublayers`), the
VPRNN reference code's default and the SGORNN paper's rule (App. A.3):
14 at ``n = 128`` (§3.1, §3.2, "the maximum number allowed" by the VPRNN
construction), 16 at ``n = 256`` (§3.3).  The SGORNN paper's VPRNN uses ReLU
(§3) and has no parameters besides the angles, ``W_in`` and ``b`` (1,409 on
the addition problem, Table 1).
"""
from __future__ import annotations

from ..parametrizations.rotations import register_plane_rotations, rotation_sublayers
from .base import check_nonnegative, check_positive_int
from .elman import ElmanCell


def check_even_hidden_size(hidden_size: int) -> None:
    if hidden_size % 2:
        raise ValueError(f"hidden_size must be even for the VPRNN rotations, which turn coordinate pairs; "
                         f"got {hidden_size} (use {hidden_size + 1})")


MAX_SUBLAYERS = 1000  # 2⌈log₂ n⌉ is 26 at n = 8192; more sublayers only cost time and memory


def resolve_sublayers(k: int | None, hidden_size: int) -> int:
    """``k`` itself when given (a positive integer), else the VPRNN rule ``2 ceil(log2 hidden_size)``."""
    if k is None:
        return rotation_sublayers(hidden_size)
    return check_positive_int("k", k, maximum=MAX_SUBLAYERS)


class VPRNN(ElmanCell):
    """``vprnn``: ``W = R_1 Q_1 ... R_k Q_k`` with ``k * hidden_size / 2`` trainable angles.

    Options:
        k: rotational sublayers; None (default) for ``2 ceil(log2 hidden_size)``
            (SGORNN paper App. A.3; 14 at hidden size 128, §3.1).
        angle_init: angles start uniform in ``[-angle_init, angle_init]``.  The
            default 0.05 is the range of the reference VPNN/VPRNN Keras code
            ("uniform" initializer), which starts ``W`` near a random
            permutation matrix; ``angle_init = pi`` starts it well mixed.
        nonlinearity: ReLU by default, as in all SGORNN paper experiments (§3).
    """

    summary = "VPRNN: W = R1 Q1 ... Rk Qk, plane rotations and permutations (SGORNN paper eq. 2)"
    equations = (r"h_t = \phi(W h_{t-1} + U x_t + b)", r"W = R_1 Q_1 \cdots R_k Q_k")
    paper = "Taylor-Melanson et al. 2021; SGORNN paper §2, eq. (2): plane rotations R_i, permutations Q_i"
    option_help = {
        "k": "rotational sublayers R_i Q_i; empty: 2⌈log₂ n⌉, 14 at n = 128 (SGORNN paper App. A.3)",
        "angle_init": "rotation angles start uniform in [-angle_init, angle_init]; 0.05 starts W near a "
                      "permutation (the reference code), pi well mixed",
    }
    option_ranges = {"k": (1, MAX_SUBLAYERS), "angle_init": (0.0, None)}

    def __init__(self, input_size: int, hidden_size: int, *, k: int | None = None, angle_init: float = 0.05,
                 nonlinearity: str = "relu", negative_slope: float = 0.01, h0: str = "zero",
                 h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, nonlinearity=nonlinearity,
                         negative_slope=negative_slope, h0=h0, h0_noise_std=h0_noise_std)
        check_even_hidden_size(hidden_size)
        self.k = resolve_sublayers(k, hidden_size)
        self.angle_init = check_nonnegative("angle_init", angle_init)
        register_plane_rotations(self, "weight_hh", hidden_size, self.k, self.angle_init)

    def recurrent_parameter_count(self) -> int:
        return self.k * self.hidden_size // 2

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, k={self.k}"
