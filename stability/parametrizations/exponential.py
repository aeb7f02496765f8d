"""The exponential parametrization of the special orthogonal group (expRNN;
Lezcano-Casado & Martínez-Rubio 2019, "Cheap orthogonal constraints in neural
networks", ICML 2019)::

    W = exp(A - A^T),    A = strictly upper-triangular part of a free N x N matrix

A - A^T is skew-symmetric, so W^T W = exp(-(A - A^T)) exp(A - A^T) = I and
det W = exp(tr(A - A^T)) = 1: W ranges over all of SO(N) (the exponential
is onto for a compact connected group).  The free parameters are the
N (N - 1) / 2 entries above the diagonal; the rest of the stored matrix is
ignored and receives zero gradient.  ``torch.linalg.matrix_exp`` computes the
exponential and its derivative; on a device without a kernel for it (MPS,
``stability.core.devices.run_with_kernel``) it runs on a CPU copy, as torch's own
MPS fallback would, and autograd carries the gradient back across.

There is no ``right_inverse``: inverting needs a matrix logarithm, which
torch does not provide; initialise the free matrix directly instead.

Initialisations (expRNN's, taken from Henaff et al. 2016 and Helfrich et al.
2018), both block-diagonal with 2 x 2 blocks [[0, a_k], [-a_k, 0]] (a last
zero row and column when N is odd), so W starts as a block-diagonal of plane
rotations:

* ``"henaff"`` — a_k = theta_k ~ U[-pi, pi]: rotation angles uniform on the circle;
* ``"cayley"`` — a_k = -sqrt((1 - cos theta_k) / (1 + cos theta_k)) = -tan(theta_k / 2),
  theta_k ~ U[0, pi/2].
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..core.devices import run_with_kernel

SKEW_INITS = ("henaff", "cayley")


def skew_block_init(hidden_size: int, init: str = "henaff", *, dtype: torch.dtype = torch.float32) -> Tensor:
    """An N x N free matrix whose only non-zeros are a_k at (2k, 2k+1), k < N // 2."""
    blocks = hidden_size // 2
    if init == "henaff":
        values = torch.empty(blocks, dtype=dtype).uniform_(-math.pi, math.pi)
    elif init == "cayley":
        theta = torch.empty(blocks, dtype=dtype).uniform_(0.0, math.pi / 2)
        values = -torch.sqrt((1.0 - torch.cos(theta)) / (1.0 + torch.cos(theta)))
    else:
        raise ValueError(f"init must be one of {', '.join(repr(i) for i in SKEW_INITS)}; got {init!r}")
    free = torch.zeros(hidden_size, hidden_size, dtype=dtype)
    rows = torch.arange(blocks) * 2
    free[rows, rows + 1] = values
    return free


class SkewExponential(nn.Module):
    """Parametrization free (N, N) -> exp(A - A^T) in SO(N), A = triu(free, 1)."""

    def forward(self, free: Tensor) -> Tensor:
        upper = free.triu(1)
        return run_with_kernel("matrix_exp", torch.linalg.matrix_exp, upper - upper.transpose(-2, -1))
