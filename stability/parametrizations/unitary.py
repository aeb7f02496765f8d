"""The restricted-capacity unitary matrix of the uRNN (Arjovsky, Shah & Bengio 2016,
§3; restated in the KRU paper, appendix C, eq. 21)::

    W = D3 R2 F^-1 D2 Pi R1 F D1

* ``D_k = diag(exp(i theta_k))``  diagonal unitary, N trainable phases each;
* ``R_k = I - 2 v_k v_k^H / ||v_k||^2``  complex Householder reflections, v_k in C^N;
* ``F``  the unitary DFT, F_jk = exp(-2 pi i jk / N) / sqrt(N) (``torch.fft``, norm="ortho");
* ``Pi`` a fixed random permutation, (Pi x)_i = x_perm[i].

Every factor is unitary, so W is unitary for any value of the 7N free real
numbers (3N phases, 2 x 2N reflection components).  The factors live in one
real (7, N) tensor, rows ``[theta_1, theta_2, theta_3, Re v_1, Im v_1, Re v_2, Im v_2]``,
so that ``cell.double()`` converts them and a parameter count reads 7N.

The dense W is built by applying the chain once to the identity: two FFTs of
an N x N matrix and two rank-one updates, O(N^2 log N), cheap next to a
forward pass.  There is no ``right_inverse``: a unitary matrix generally has
no such factorisation (the family is a 7N-dimensional subset of U(N)).

Initialisation (uRNN paper §4, "Initialization"): theta ~ U[-pi, pi], so each D_jj is uniform
on the unit circle; reflection vectors coordinate-wise U[-1, 1] (the
reflection does not depend on their scale).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

FACTOR_ROWS = 7  # 3 phase vectors + Re/Im of 2 reflection vectors


def reflect(matrix: Tensor, v: Tensor) -> Tensor:
    """(I - 2 v v^H / ||v||^2) @ matrix for a complex vector v (N,) and matrix (N, M)."""
    coefficient = 2.0 / (v.real.square().sum() + v.imag.square().sum())
    return matrix - coefficient * torch.outer(v, v.conj() @ matrix)


def initial_factors(hidden_size: int, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """The uRNN paper's initialisation of the (7, N) free parameters."""
    factors = torch.empty(FACTOR_ROWS, hidden_size, dtype=dtype)
    factors[:3].uniform_(-math.pi, math.pi)
    factors[3:].uniform_(-1.0, 1.0)
    return factors


class RestrictedUnitary(nn.Module):
    """Parametrization (7, N) real factors -> the uRNN's complex unitary W (N, N).

    Register with ``unsafe=True`` (shape and dtype change)::

        cell.weight_hh = nn.Parameter(initial_factors(N))
        register_parametrization(cell, "weight_hh", RestrictedUnitary(torch.randperm(N)), unsafe=True)
    """

    def __init__(self, permutation: Tensor):
        super().__init__()
        self.register_buffer("permutation", permutation.clone())

    def forward(self, factors: Tensor) -> Tensor:
        theta, v_re, v_im = factors[:3], factors[3::2], factors[4::2]  # (3, N), (2, N), (2, N)
        d1, d2, d3 = torch.complex(torch.cos(theta), torch.sin(theta))  # e^{i theta}, (N,) each
        v1, v2 = torch.complex(v_re, v_im)
        w = torch.diag_embed(d1)
        w = torch.fft.fft(w, dim=0, norm="ortho")
        w = reflect(w, v1)
        w = w[self.permutation]
        w = d2[:, None] * w
        w = torch.fft.ifft(w, dim=0, norm="ortho")
        w = reflect(w, v2)
        return d3[:, None] * w
