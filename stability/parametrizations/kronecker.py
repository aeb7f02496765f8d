"""Kronecker-factored recurrent matrices (KRU paper §3, eq. 4–7).

    W = W_0 ⊗ W_1 ⊗ … ⊗ W_{F-1},     W_f an n_f × n_f matrix,  n_0 n_1 … n_{F-1} = N     (eq. 4)

Entry by entry, with row i = (i_0, …, i_{F-1}) and column j = (j_0, …, j_{F-1})
written in mixed radix (n_0, …, n_{F-1}), most significant digit first::

    W[i, j] = W_0[i_0, j_0] · W_1[i_1, j_1] · … · W_{F-1}[i_{F-1}, j_{F-1}]      (eq. 5–6)

With 2 × 2 factors, F = log2 N and W has 4 log2 N entries to learn — 8 log2 N
real numbers when the factors are complex (§3); with one N × N factor it is a
free matrix.  The paper lets factors be rectangular (P_f × Q_f); here they
are square, which is what a square recurrent matrix built from equal row and
column radices needs.

Soft unitary constraint (§3.1, eq. 7): the penalty is

    Σ_f ‖W_fᴴ W_f − I‖²_F

on the small factors, which costs O(Σ n_f³) instead of O(N³): if every factor
is unitary so is W (Van Loan 2000; paper appendix F), and nearly unitary
factors give a nearly unitary W.

Storage: the factors at position f of ``count`` stacked matrices live in one
real tensor of shape (count, n_f, n_f) — or (count, n_f, n_f, 2), the real and
imaginary parts, for complex factors — so that ``module.double()`` converts
them and a parameter count reads real numbers.  ``count > 1`` stacks matrices
vertically into a (count · N, N) weight, the layout of an LSTM's four
recurrent matrices.

Note [Nearest Kronecker product]
--------------------------------
``right_inverse`` factors a dense matrix (Van Loan & Pitsianis 1993): writing
W = A ⊗ R with A (n_0 × n_0), the rearrangement

    R(W)[(i_0, j_0), (k, l)] = W[i_0 r + k, j_0 r + l],     r = N / n_0

is rank one exactly when W is such a product, R(W) = vec(A) vec(R)ᵀ, and
its leading singular pair gives the nearest one in Frobenius norm.  Peeling
factors off left to right recovers every factor of an exact Kronecker
product (each up to a scalar; a greedy approximation otherwise).  The scalars
are then balanced so that every factor has the same Frobenius norm relative
to a unitary matrix of its size, ‖W_f‖_F / √n_f: that leaves W unchanged and
returns unitary factors, penalty 0, for a product of unitary ones.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize


def check_factor_sizes(factor_sizes: Sequence[int] | None, size: int) -> tuple[int, ...]:
    """The factor sizes for an N × N matrix, N = ``size``; all 2s when None.

    Raises ValueError when the sizes are not positive integers multiplying to
    N, or, for the default, when N is not a power of two.
    """
    if factor_sizes is None:
        if size < 2 or size & (size - 1):
            raise ValueError(f"the default 2x2 Kronecker factors need a hidden size that is a power "
                             f"of two (2, 4, 8, ...); got {size}. Pass factor_sizes, positive integers "
                             f"whose product is {size}")
        return (2,) * (size.bit_length() - 1)
    try:
        sizes = tuple(factor_sizes)
    except TypeError:
        raise ValueError(f"factor_sizes must be a sequence of positive integers; got {factor_sizes!r}") from None
    if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"factor_sizes must be a non-empty sequence of positive integers; got {factor_sizes!r}")
    if math.prod(sizes) != size:
        raise ValueError(f"factor_sizes must multiply to the hidden size {size}; "
                         f"got {sizes} (product {math.prod(sizes)})")
    return sizes


def kron(a: Tensor, b: Tensor) -> Tensor:
    """A ⊗ B for (..., r, c) and (..., r', c'), batched over (broadcast) leading dimensions."""
    outer = a[..., :, None, :, None] * b[..., None, :, None, :]  # (..., r, r', c, c')
    return outer.reshape(*outer.shape[:-4], a.shape[-2] * b.shape[-2], a.shape[-1] * b.shape[-1])


def kron_chain(factors: Sequence[Tensor]) -> Tensor:
    """W_0 ⊗ W_1 ⊗ … ⊗ W_{F-1} for factors (..., n_f, n_f), batched over leading dimensions.

    Multiplied pairwise as a balanced tree (associativity of ⊗): the same
    F − 1 products as a left-to-right chain, but most of them on small
    matrices, which roughly halves the cost of forward plus backward.
    """
    level = list(factors)
    while len(level) > 1:
        level = [kron(*level[i:i + 2]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    return level[0]


def unitarity_penalty(factors: Sequence[Tensor]) -> Tensor:
    """Σ_f ‖W_fᴴ W_f − I‖²_F over all factors (and all stacked matrices), KRU paper eq. 7.

    Factors of equal size are stacked and handled in one batched product.
    """
    by_size: dict[int, list[Tensor]] = {}
    for factor in factors:
        by_size.setdefault(factor.shape[-1], []).append(factor)
    total = factors[0].real.new_zeros(())
    for size, group in by_size.items():
        stacked = torch.stack(group)  # (G, ..., n, n)
        gram = stacked.mH @ stacked
        eye = torch.eye(size, dtype=gram.dtype, device=gram.device)
        residual = gram - eye
        if residual.is_complex():
            residual = torch.view_as_real(residual)
        total = total + residual.square().sum()
    return total


def haar_factors(count: int, size: int, *, complex: bool, dtype: torch.dtype = torch.float32) -> Tensor:
    """``count`` Haar-random unitary (or orthogonal) size × size matrices, (count, size, size).

    QR of a Gaussian matrix with the phases of diag(R) moved into Q
    (Mezzadri 2007), so that Q is exactly Haar distributed.
    """
    if complex:
        dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    gaussian = torch.randn(count, size, size, dtype=dtype)
    q, r = torch.linalg.qr(gaussian)
    diagonal = r.diagonal(dim1=-2, dim2=-1)
    phases = diagonal / diagonal.abs().clamp_min(torch.finfo(diagonal.real.dtype).tiny)
    return q * phases.unsqueeze(-2)


class KroneckerProduct(nn.Module):
    """Parametrization: factors -> the (count · N, N) stack of Kronecker products W_0 ⊗ … ⊗ W_{F-1}.

    Args:
        factor_sizes: (n_0, …, n_{F-1}), n_0 ⋯ n_{F-1} = N.
        complex: complex factors (stored as real (…, 2) tensors) or real ones.
        count: how many matrices are stacked vertically (4 for an LSTM).
    """

    def __init__(self, factor_sizes: Sequence[int], *, complex: bool = True, count: int = 1):
        super().__init__()
        self.factor_sizes = tuple(factor_sizes)
        self.size = math.prod(self.factor_sizes)
        self.complex = complex
        self.count = count

    def factors(self, *stored: Tensor) -> list[Tensor]:
        """The factor matrices (count, n_f, n_f), complex where ``complex``, from their storage."""
        return [torch.view_as_complex(s) if self.complex else s for s in stored]

    def forward(self, *stored: Tensor) -> Tensor:
        product = kron_chain(self.factors(*stored))  # (count, N, N)
        return product.reshape(self.count * self.size, self.size)

    def right_inverse(self, matrix: Tensor) -> tuple[Tensor, ...]:
        """Nearest Kronecker factors of ``matrix`` (count · N, N); see Note [Nearest Kronecker product]."""
        if matrix.shape != (self.count * self.size, self.size):
            raise ValueError(f"expected a ({self.count * self.size}, {self.size}) matrix; got {tuple(matrix.shape)}")
        if matrix.is_complex() != self.complex:
            raise ValueError(f"expected a {'complex' if self.complex else 'real'} matrix; got {matrix.dtype}")
        rest = matrix.reshape(self.count, self.size, self.size)
        factors = []
        for n in self.factor_sizes[:-1]:
            r = rest.shape[-1] // n
            rearranged = rest.reshape(self.count, n, r, n, r).transpose(2, 3).reshape(self.count, n * n, r * r)
            u, s, vh = torch.linalg.svd(rearranged, full_matrices=False)
            factors.append((u[..., 0] * s[..., :1]).reshape(self.count, n, n))
            rest = vh[..., 0, :].reshape(self.count, r, r)
        factors.append(rest)
        factors = _balance(factors)
        return tuple(torch.view_as_real(f).clone() if self.complex else f.clone() for f in factors)

    def extra_repr(self) -> str:
        return f"factor_sizes={self.factor_sizes}, complex={self.complex}, count={self.count}"


def _balance(factors: list[Tensor]) -> list[Tensor]:
    """Rescale factors (count, n_f, n_f) so that ‖W_f‖_F / √n_f is the same for every f."""
    relative = torch.stack([f.flatten(1).norm(dim=1) / math.sqrt(f.shape[-1]) for f in factors])  # (F, count)
    common = relative.prod(dim=0).pow(1.0 / len(factors))  # (count,)
    scales = torch.where(relative > 0, common / torch.where(relative > 0, relative, 1.0), 0.0)
    return [f * scale[:, None, None] for f, scale in zip(factors, scales)]


def kronecker(module: nn.Module, name: str, factor_sizes: Sequence[int], *, complex: bool = True,
              count: int = 1) -> KroneckerProduct:
    """Make ``module.<name>`` a stack of ``count`` Kronecker products of Haar-random unitary factors.

    ``module`` must not have a ``<name>`` yet; the factors become the
    parameters ``module.parametrizations.<name>.original0 … original{F-1}``.
    """
    parametrization = KroneckerProduct(factor_sizes, complex=complex, count=count)
    factors = [haar_factors(count, n, complex=complex) for n in factor_sizes]
    with torch.no_grad():
        initial = parametrization(*(torch.view_as_real(f) if complex else f for f in factors))
    module.register_parameter(name, nn.Parameter(initial))
    parametrize.register_parametrization(module, name, parametrization)
    return parametrization


def kronecker_factors(module: nn.Module, name: str) -> list[Tensor]:
    """The factor matrices (count, n_f, n_f) behind ``module.<name>``, as the autograd sees them."""
    parametrizations = module.parametrizations[name]
    stored = [getattr(parametrizations, f"original{i}") for i in range(len(parametrizations[0].factor_sizes))]
    return parametrizations[0].factors(*stored)


def factor_parameter_count(module: nn.Module, name: str) -> int:
    """Real numbers in the factors behind ``module.<name>``."""
    return sum(f.numel() * (2 if f.is_complex() else 1) for f in kronecker_factors(module, name))
