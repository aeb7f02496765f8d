"""Products of plane rotations and fixed permutations: the VPRNN map.

    W = phi(Theta) = R_1 Q_1 R_2 Q_2 ... R_k Q_k          (SGORNN paper §2, eq. 2)

Each rotational sublayer ``R_j`` turns the ``n/2`` disjoint coordinate pairs
``(2i, 2i+1)`` by its own trainable angles ``theta_{j,i}``::

    (R_j x)_{2i}   = cos(theta_{j,i}) x_{2i} - sin(theta_{j,i}) x_{2i+1}
    (R_j x)_{2i+1} = sin(theta_{j,i}) x_{2i} + cos(theta_{j,i}) x_{2i+1}

and each ``Q_j`` is a fixed random permutation, ``(Q_j x)_i = x_{pi_j(i)}``.
Because the ``Q_j`` are random, pairing adjacent coordinates loses nothing:
``R_j Q_j`` rotates the random pairs ``(pi_j(2i), pi_j(2i+1))``, as in the
volume-preserving networks of MacDonald et al. (2021) and their recurrent
form, VPRNN (Taylor-Melanson et al., 2021).  ``W`` is orthogonal for every
``Theta``, with ``k n / 2`` real parameters.

How many sublayers: :func:`rotation_sublayers`, ``k = 2 ceil(log2 n)`` — 2 at
``n = 2``, 6 at ``n = 6``, 14 at ``n = 128``, 16 at ``n = 256``.  The SGORNN
paper uses 14 at hidden size 128 (§3.1, §3.2) and 16 at 256 (§3.3), and
states the rule with the VPRNN Lipschitz bound (App. A.3, eq. 34).  The
reference code counts the same way: the VPRNN cell's ``n_rotations``
defaults to ``ceil(log2(units))`` (github wtaylor17/VPRNN, ``vprnn/layers.py``)
and its recurrent VPNN layer stacks ``n_rotations`` rotation sublayers on
each side of an optional diagonal (off in VPRNN), each with its own fixed
random permutation (github wtaylor17/keras-vpnn, ``vpnn/layers/__init__.py``,
``vpnn/layers/rotation.py``): 2 ceil(log2 n) rotation-permutation pairs.

Register with :func:`register_plane_rotations`; the free parameter is the
angle matrix ``Theta`` of shape (k, n/2) (row ``j`` is the paper's column ``j``).

Note [Building W cheaply]
-------------------------
``W`` is built from the right, ``M <- R_j Q_j M`` for ``j = k, ..., 1``
starting from ``M = I``; no n x n product is ever formed.  We carry the
transpose ``N = M^T``: left-multiplying ``M`` by ``Q_j`` gathers the columns
of ``N`` (``N[:, pi_j]``), and by ``R_j`` turns each adjacent column pair
``(2i, 2i+1)`` as one complex number ``N[:, 2i] + i N[:, 2i+1]`` multiplied by
``exp(i theta_{j,i})``.  So each sublayer is one gather and one complex
multiply over n^2 numbers, and autograd differentiates both.

On a device without complex numbers (MPS before macOS 14:
``stability.core.devices``) the same product is taken in real arithmetic,
``(a + ib)(c + is) = (ac - bs) + i(as + bc)`` on the column pairs: the same
numbers (up to rounding), 1.5-2.5x slower on a CPU, so used only there.

Note [No right_inverse]
-----------------------
Not every orthogonal matrix is ``phi(Theta)`` for the fixed permutations, so
there is no meaningful matrix -> angles map.  The registered tensor holds the
angles from the start (:func:`register_plane_rotations` puts them there), and
``module.weight = A`` is not supported.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from ..core.devices import device_facts


class PlaneRotations(nn.Module):
    """``forward(Theta) = R_1 Q_1 ... R_k Q_k``, an (n, n) orthogonal matrix.

    The permutations are drawn from torch's global RNG at construction and
    kept in the buffer ``permutations`` (k, n), so they are saved and restored
    with the state dict.
    """

    def __init__(self, size: int, k: int):
        super().__init__()
        if size % 2:
            raise ValueError(f"plane rotations turn coordinate pairs, so the size must be even; got {size}")
        self.size = size
        self.k = k
        self.register_buffer("permutations", torch.stack([torch.randperm(size) for _ in range(k)]))

    def forward(self, angles: Tensor) -> Tensor:
        if angles.shape != (self.k, self.size // 2):
            raise ValueError(f"expected angles of shape ({self.k}, {self.size // 2}); got {tuple(angles.shape)}")
        if not device_facts(angles.device).has(torch.complex64):
            return self.real_forward(angles)
        turns = torch.polar(torch.ones_like(angles), angles)  # (k, n/2) complex, exp(i theta)
        n = self.size
        transposed = torch.eye(n, dtype=angles.dtype, device=angles.device)  # N = M^T
        for j in reversed(range(self.k)):
            gathered = transposed.index_select(1, self.permutations[j])  # N Q_j^T
            pairs = torch.view_as_complex(gathered.view(n, n // 2, 2))  # (n, n/2)
            transposed = torch.view_as_real(pairs * turns[j]).view(n, n)  # N Q_j^T R_j^T
        return transposed.t()

    def real_forward(self, angles: Tensor) -> Tensor:
        """:meth:`forward` in real arithmetic (the module docstring): each pair (a, b) of columns
        becomes (a cos - b sin, a sin + b cos)."""
        n = self.size
        cos = torch.stack((angles.cos(), angles.cos()), dim=-1)  # (k, n/2, 2)
        sin = torch.stack((-angles.sin(), angles.sin()), dim=-1)
        transposed = torch.eye(n, dtype=angles.dtype, device=angles.device)
        for j in reversed(range(self.k)):
            pairs = transposed.index_select(1, self.permutations[j]).view(n, n // 2, 2)  # (a, b) of N Q_j^T
            transposed = torch.addcmul(pairs * cos[j], pairs.flip(-1), sin[j]).view(n, n)  # (b, a) * (-sin, sin)
        return transposed.t()

    def extra_repr(self) -> str:
        return f"size={self.size}, k={self.k}"


def rotation_sublayers(size: int) -> int:
    """``2 ceil(log2 size)``, the VPRNN number of rotation-permutation pairs for ``size`` units.

    Exact integer arithmetic: ``ceil(log2 n) = (n - 1).bit_length()`` for ``n >= 1``.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 2:
        raise ValueError(f"size must be an integer >= 2; got {size!r}")
    return 2 * (size - 1).bit_length()


def register_plane_rotations(module: nn.Module, tensor_name: str, size: int, k: int,
                             angle_init: float) -> PlaneRotations:
    """Make ``module.<tensor_name>`` the (size, size) matrix ``R_1 Q_1 ... R_k Q_k``.

    The angles start i.i.d. uniform in ``[-angle_init, angle_init]`` and live
    in ``module.parametrizations.<tensor_name>.original``, shape (k, size/2).
    ``module`` must not already have ``tensor_name``.
    """
    rotations = PlaneRotations(size, k)
    angles = torch.empty(k, size // 2).uniform_(-angle_init, angle_init)
    module.register_parameter(tensor_name, nn.Parameter(angles))
    parametrize.register_parametrization(module, tensor_name, rotations, unsafe=True)
    return rotations
