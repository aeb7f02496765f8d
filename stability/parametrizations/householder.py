"""Products of Householder reflectors, and the SVD parametrization built on them.

A reflector acts on the last ``k`` of ``n`` coordinates only (spectral paper
§3, eq. 1)::

    H_k(u) = diag(I_{n-k}, I_k - 2 u u^T / ||u||^2),   u in R^k;   H_k(0) = I_n.

A product of the ``m`` longest ones (eq. 2, with ``k = n - m + 1``)::

    M_k(u_k, ..., u_n) = H_n(u_n) H_{n-1}(u_{n-1}) ... H_k(u_k)

is orthogonal; with all ``n`` of them it reaches every orthogonal matrix
(Thm. 1).  This is the oRNN transition of Mhammedi et al. (2017).  The SVD
parametrization of Spectral-RNN (§3, §4) puts one such product on each side
of a diagonal::

    W = H_n(u_n) ... H_{k1}(u_{k1}) diag(sigma) H_{k2}(v_{k2}) ... H_n(v_n)
      = U diag(sigma) V^T,     k1 = n - m1 + 1,  k2 = n - m2 + 1,
    sigma_i = 2 r (sigmoid(sigma_hat_i) - 0.5) + sigma_star       (eq. 4)

so every singular value of ``W`` lies in ``[sigma_star - r, sigma_star + r]``
whatever the free parameters are, and with ``m1 = m2 = n`` (and a wide enough
range) ``W`` can be any matrix (Thm. 2).

Storage: reflector ``j`` of a product (``j = 0 .. m-1``) is ``u_{n-j}``, padded
with ``j`` leading zeros to length ``n``; stacked, they fill the upper
trapezoid of an (m, n) matrix, and only those entries are stored (flat, row
by row), so the free parameters number exactly ``sum_j (n - j)``::

    j = 0   [ x x x x x x ]   u_n       acts on all n coordinates
    j = 1   [ 0 x x x x x ]   u_{n-1}
    j = 2   [ 0 0 x x x x ]   u_{n-2}
            ...                          product = H(row 0) H(row 1) ... H(row m-1)

The rows' lengths do not change the matrix but do change how it trains; see
Note [Reflector length].

A weight matrix of any shape (rows, cols) takes the same form (§5, eqs. 7-8),
with ``p = min(rows, cols)`` singular values and a product on each side:
:class:`RectangularHouseholderSVD`, see Note [Rectangular SVD].

Note [Compact WY form]
----------------------
The dense product is built in one go, never reflector by reflector: for the
rows ``y_1..y_m`` of the padded matrix ``Y`` (m, n),

    H(y_1) H(y_2) ... H(y_m) = I - Y^T S^{-1} Y,
    S = strict_upper(Y Y^T) + diag(||y_i||^2 / 2)

(the "UT transform" of Joffrain et al., 2006; Schreiber & Van Loan's compact
WY representation).  That is one (m, m) Gram matrix, one triangular solve
with n right-hand sides and one (n, m) x (m, n) product: O(n^2 m) flops and a
handful of autograd nodes, which differentiate through the solve.  A zero
row (``H(0) = I``, eq. 1) has a zero row and column in the strict upper part
of ``S``; giving it pivot 1 instead of 0 keeps ``S`` invertible and leaves the
other rows' terms unchanged, while its own term ``y_i (.) y_i^T`` is zero.

Note [Reflector length]
-----------------------
``H(c u) = H(u)`` for every ``c != 0`` (spectral paper §3), so ``W`` does not
depend on the reflectors' lengths, and rescaling them leaves ``W`` exactly as
it was.  The optimisation does depend on them: the gradient with respect to
``u`` is orthogonal to ``u`` and scales as ``1 / ||u||``, so a long vector
turns slowly and a short one fast, and Adam's per-coordinate steps change the
lengths as they go.  Both authors' codes put every reflector back to unit
length after every optimizer update: Spectral-RNN's
(zhangjiong724/spectral-RNN, ``code/rnn.py``: each row of the upper-triangular
``Householder_U_full`` and ``Householder_V_full`` divided by its norm after
each Adam step; ``p``, eq. 4's ``sigma_hat``, untouched) and oRNN's
(zmhammedi/Orthogonal_RNN, ``sgd.py``: each column of the lower-triangular
``U`` divided by its norm after each Adam step).  Between updates both
differentiate the normalised reflector, as autograd does here (oRNN's
hand-written backward, ``C_fun.c``, assumes unit columns and gives the same
gradient at them).  :meth:`HouseholderProduct.normalized`
and :meth:`HouseholderSVD.normalized` compute that projection; the cells
apply it in ``after_optimizer_step`` unless told not to.  A zero vector
(``H(0) = I``, eq. 1) stays zero: each vector is divided by
``max(||u||, 1e-6)``, what Spectral-RNN's ``tf.nn.l2_normalize`` does with its
default epsilon (oRNN's plain division would give NaN there).

Note [The length-1 reflector]
-----------------------------
With ``m = n`` the last reflector acts on one coordinate only.  Eq. 1 makes it
``1 - 2 u^2 / u^2 = -1`` for every ``u != 0`` and ``+1`` for ``u = 0``
(``H_1(u_1) = +-1``, proof of Prop. 1); Spectral-RNN's kernels compute the same
(``2 / ||u||^2`` for every row, ``code/magma_svd_ops/``).  oRNN's code instead
multiplies the last coordinate by the stored number itself, before the
other ``n - 1`` reflectors (``RNN_models.py``: ``h[-1] * U[-1, -1]`` when
``n == m``), and that number is +-1 because every column is renormalised, so
there the factor is ``diag(I_{n-1}, sign(u_1))``: the same set of matrices,
but ``+1`` where eq. 1 gives ``-1`` for a positive ``u_1``.
``HouseholderProduct(..., length_one="sign")`` follows oRNN's code (with
``sign(0) = +1``, i.e. ``H(0) = I`` again); the default ``"reflector"`` follows
eq. 1.  Either way the factor here is piecewise constant in ``u_1``, so no
gradient reaches ``u_1`` and the factor keeps the sign it starts with.  (In
oRNN's code the loss does reach ``U[-1, -1]``, but each renormalisation puts
it back to +-1; only an update longer than 1 could flip it.)

Note [Rectangular SVD]
----------------------
For ``W`` of shape (rows, cols) the spectral paper's §5 (eqs. 7-8) writes

    W = U Sigma_hat V^T,   U = H_rows(u_rows) ... (rows x rows),   V = H_cols(v_cols) ... (cols x cols),
    Sigma_hat = (diag(sigma) | 0) if rows < cols, its transpose if rows > cols, diag(sigma) if equal,

with ``sigma`` in R^p, ``p = min(rows, cols)``, from eq. 4.  Only the first
``p`` columns of ``U`` and of ``V`` meet a nonzero ``sigma_i``, so
``W = U[:, :p] diag(sigma) V[:, :p]^T``: ``p`` singular values, the rest of
each orthogonal factor never matters.  A reflector of length ``k`` leaves
columns ``1 .. n - k`` of its product unchanged (Lemma 1), so of each side's
reflectors only the ``p`` longest reach those columns: Thm. 4 gets every
(rows, cols) matrix from ``2 p`` reflectors, ``p`` per side, and more would be
parameters without a gradient.  Hence ``1 <= m1, m2 <= p`` here.  Built with
the compact WY form on each side, never a full (cols, cols) ``V``:

    U[:, :p] = I[:, :p] - Y_u^T (S_u^{-1} Y_u)[:, :p]
    W        = (U[:, :p] diag(sigma)) I[:p, :] - (U[:, :p] diag(sigma) (S_v^{-1} Y_v)[:, :p]^T) Y_v

Every leading dimension of ``theta`` is a stack of independent layers (the
hidden layers of a deep MLP, :mod:`stability.cells.mlp`): (L, P) -> (L, rows,
cols) in one batched pass.  For a square matrix this is the map of
:class:`HouseholderSVD`, parameter for parameter.

Note [No right_inverse]
-----------------------
Neither map has one, so ``module.weight = A`` is not supported and the
``register_*`` functions put the free parameters in place from the start.
For a product of ``m < n`` reflectors the image is a thin subset of O(n); for
the SVD form, the SVD factors of a matrix (defined only up to column signs
and order) need not be products of ``m1``/``m2`` reflectors.  Even where an
inverse exists (``m = n``), Householder QR with positive pivots (Prop. 1)
is ill-conditioned: a reflector nearly orthogonal to ``e_j`` is fixed by
column ``j`` only up to ``eps / ||x - e_j||``, and the errors compound.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

LENGTH_ONE = ("reflector", "sign")  # see Note [The length-1 reflector]
NORM_FLOOR = 1e-6  # see Note [Reflector length]


def compact_wy(vectors: Tensor, columns: int | None = None) -> Tensor:
    """``S^{-1} Y`` (m, n) for the rows ``Y`` = ``vectors`` (m, n), so that
    ``H(y_1) ... H(y_m) = I - Y^T S^{-1} Y``; see Note [Compact WY form].
    Leading dimensions are a batch: (..., m, n) -> (..., m, n), one product each.
    ``columns = k`` solves for the first k columns only, (..., m, k): all a product's
    first k columns need (Note [Rectangular SVD])."""
    gram = vectors @ vectors.mT  # (..., m, m)
    half_norms = gram.diagonal(dim1=-2, dim2=-1) / 2
    pivots = torch.where(half_norms > 0, half_norms, torch.ones_like(half_norms))
    index = torch.arange(gram.shape[-1], device=gram.device)
    s = torch.where(index[:, None] < index[None, :], gram, torch.diag_embed(pivots))
    return torch.linalg.solve_triangular(s, vectors if columns is None else vectors[..., :columns], upper=True)


def band(sigma_hat: Tensor, r: float, sigma_star: float) -> Tensor:
    """``sigma_i = 2 r (sigmoid(sigma_hat_i) - 0.5) + sigma_star`` (spectral paper eq. 4): every
    singular value in ``[sigma_star - r, sigma_star + r]``."""
    return 2 * r * (torch.sigmoid(sigma_hat) - 0.5) + sigma_star


def householder_product(vectors: Tensor) -> Tensor:
    """``H(y_1) ... H(y_m)`` for the rows ``y_i`` of ``vectors`` (m, n), as a dense (n, n) matrix.

    ``H(y) = I - 2 y y^T / ||y||^2`` and ``H(0) = I`` (eq. 1).
    """
    eye = torch.eye(vectors.shape[1], dtype=vectors.dtype, device=vectors.device)
    return eye - vectors.t() @ compact_wy(vectors)


class HouseholderProduct(nn.Module):
    """``forward(vectors) = H_n(u_n) ... H_{n-m+1}(u_{n-m+1})``, (n, n) orthogonal (eqs. 1-2).

    ``vectors`` is the flat concatenation ``(u_n, u_{n-1}, ..., u_{n-m+1})`` of
    ``sum_{k=n-m+1}^{n} k`` numbers (see the module docstring for the layout).
    ``length_one`` says what the length-1 reflector ``u_1`` is when ``m = n``:
    ``"reflector"`` (eq. 1) or ``"sign"`` (oRNN's code); see Note [The length-1
    reflector].  No ``right_inverse``: see Note [No right_inverse].
    """

    def __init__(self, size: int, reflectors: int, *, length_one: str = "reflector"):
        super().__init__()
        if not 1 <= reflectors <= size:
            raise ValueError(f"the number of reflectors must be between 1 and the size {size}; got {reflectors}")
        if length_one not in LENGTH_ONE:
            raise ValueError(f"length_one must be one of {', '.join(map(repr, LENGTH_ONE))}; got {length_one!r}")
        self.size = size
        self.reflectors = reflectors
        self.length_one = length_one
        self.register_buffer("mask", torch.ones(reflectors, size, dtype=torch.bool).triu(), persistent=False)
        # The mask's entries as flat positions, row by row: moving entries by these indices instead of
        # by the boolean mask never asks the GPU how many entries there are (a mask's nonzero waits
        # for it at every step; benchmarks/gpu_syncs.py).
        self.register_buffer("positions", self.mask.flatten().nonzero().squeeze(1), persistent=False)

    @property
    def parameter_count(self) -> int:
        """``n + (n-1) + ... + (n-m+1)``: the reflector lengths."""
        return self.reflectors * self.size - self.reflectors * (self.reflectors - 1) // 2

    def pad(self, vectors: Tensor) -> Tensor:
        """Flat reflectors (..., P) -> the zero-padded (..., m, n) matrices of rows ``(0_j, u_{n-j})``;
        leading dimensions are a stack of independent products."""
        if vectors.dim() == 0 or vectors.shape[-1] != self.parameter_count:
            raise ValueError(f"expected {self.parameter_count} reflector entries; got shape {tuple(vectors.shape)}")
        flat = vectors.new_zeros((*vectors.shape[:-1], self.reflectors * self.size))
        return flat.index_copy(-1, self.positions, vectors).unflatten(-1, (self.reflectors, self.size))

    def entries(self, rows: Tensor) -> Tensor:
        """The inverse of :meth:`pad`: (..., m, n) rows -> their (..., P) flat reflector entries."""
        return rows.flatten(-2).index_select(-1, self.positions)

    def forward(self, vectors: Tensor) -> Tensor:
        rows = self.pad(vectors)
        if self.length_one == "reflector" or self.reflectors < self.size:
            return householder_product(rows)
        # m = n, oRNN's convention: H(row 0) ... H(row n-2) diag(1, ..., 1, sign(u_1)).
        last = rows[-1, -1:]
        sign = torch.where(last < 0, -torch.ones_like(last), torch.ones_like(last))
        scale = torch.cat([torch.ones_like(rows[-1, :-1]), sign])  # (n,), constant: no gradient to u_1
        return householder_product(rows[:-1]) * scale

    def normalized(self, vectors: Tensor) -> Tensor:
        """Every reflector scaled to unit length, the zero one left at zero (Note [Reflector length]).

        Same flat layout as ``vectors``; the matrix :meth:`forward` builds is unchanged.
        """
        rows = self.pad(vectors)
        return self.entries(rows / rows.norm(dim=-1, keepdim=True).clamp_min(NORM_FLOOR))

    def sample(self, dtype: torch.dtype | None = None) -> Tensor:
        """Random flat reflectors: each ``u_k`` of unit length, direction uniform on the sphere."""
        rows = torch.randn(self.reflectors, self.size, dtype=dtype) * self.mask
        return (rows / rows.norm(dim=1, keepdim=True))[self.mask]

    def extra_repr(self) -> str:
        extra = f", length_one={self.length_one!r}" if self.length_one != "reflector" else ""
        return f"size={self.size}, reflectors={self.reflectors}{extra}"


class HouseholderSVD(nn.Module):
    """``forward(theta) = U diag(sigma) V^T`` of Spectral-RNN (spectral paper §4, eq. 4).

    ``U = H_n(u_n) ... H_{k1}(u_{k1})`` with ``m1`` reflectors, ``V`` the same
    with ``m2``, ``sigma`` from eq. 4.  ``theta`` is the flat concatenation
    ``(u, v, sigma_hat)`` of :attr:`parameter_count` numbers, exactly the
    recurrent parameters the paper counts (§4).  No ``right_inverse``: see
    Note [No right_inverse].
    """

    def __init__(self, size: int, m1: int, m2: int, r: float, sigma_star: float):
        super().__init__()
        self.size = size
        self.left = HouseholderProduct(size, m1)
        self.right = HouseholderProduct(size, m2)
        self.r = float(r)
        self.sigma_star = float(sigma_star)

    @property
    def parameter_count(self) -> int:
        """``sum_{k=k1}^n k + sum_{k=k2}^n k + n`` (spectral paper §4)."""
        return self.left.parameter_count + self.right.parameter_count + self.size

    def split(self, theta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``theta`` -> ``(u, v, sigma_hat)``, flat reflectors of ``U`` and ``V`` and eq. 4's ``sigma_hat``."""
        if theta.shape != (self.parameter_count,):
            raise ValueError(f"expected {self.parameter_count} parameters; got shape {tuple(theta.shape)}")
        return theta.split([self.left.parameter_count, self.right.parameter_count, self.size])

    def singular_values(self, theta: Tensor) -> Tensor:
        """``sigma`` of eq. 4 (:func:`band`), in the diagonal's order."""
        return band(self.split(theta)[2], self.r, self.sigma_star)

    def forward(self, theta: Tensor) -> Tensor:
        u, v, _ = self.split(theta)
        scaled_left = self.left(u) * self.singular_values(theta)  # U diag(sigma)
        # V^T = I - (S^{-1} Y)^T Y for V's padded reflectors Y: two thin products, no n^3 one.
        right = self.right.pad(v)
        return torch.addmm(scaled_left, scaled_left @ compact_wy(right).t(), right, alpha=-1)

    def normalized(self, theta: Tensor) -> Tensor:
        """``theta`` with every reflector of ``U`` and ``V`` scaled to unit length and ``sigma_hat``
        untouched, as Spectral-RNN's code does after each update (Note [Reflector length])."""
        u, v, sigma_hat = self.split(theta)
        return torch.cat([self.left.normalized(u), self.right.normalized(v), sigma_hat])

    def sample(self, dtype: torch.dtype | None = None) -> Tensor:
        """Random unit reflectors on both sides and ``sigma_hat = 0``, i.e. ``sigma = sigma_star``."""
        sigma_hat = torch.zeros(self.size, dtype=dtype)
        return torch.cat([self.left.sample(dtype), self.right.sample(dtype), sigma_hat])

    def extra_repr(self) -> str:
        return (f"size={self.size}, m1={self.left.reflectors}, m2={self.right.reflectors}, "
                f"r={self.r}, sigma_star={self.sigma_star}")


class RectangularHouseholderSVD(nn.Module):
    """``forward(theta) = U Sigma_hat V^T`` of shape (rows, cols), spectral paper §5, eqs. 7-8.

    ``m1`` reflectors in ``U`` (on R^rows), ``m2`` in ``V`` (on R^cols), each at
    most ``p = min(rows, cols)``, and ``sigma`` in R^p from eq. 4, so every
    singular value lies in ``[sigma_star - r, sigma_star + r]``; see Note
    [Rectangular SVD].  ``theta`` (..., :attr:`parameter_count`) is the flat
    ``(u, v, sigma_hat)`` of each layer, with any leading (stack) dimensions;
    the result is (..., rows, cols).  No ``right_inverse`` (Note [No right_inverse]).
    """

    def __init__(self, rows: int, cols: int, m1: int, m2: int, r: float, sigma_star: float):
        super().__init__()
        self.rows, self.cols = rows, cols
        self.rank = min(rows, cols)
        for name, count in (("m1", m1), ("m2", m2)):
            if not 1 <= count <= self.rank:
                raise ValueError(f"{name} must be between 1 and min(rows, cols) = {self.rank} for a "
                                 f"({rows}, {cols}) matrix (Thm. 4: p reflectors per side reach every "
                                 f"matrix); got {count}")
        self.left = HouseholderProduct(rows, m1)
        self.right = HouseholderProduct(cols, m2)
        self.r = float(r)
        self.sigma_star = float(sigma_star)

    @property
    def parameter_count(self) -> int:
        """Reflector entries of ``U`` and ``V`` plus the ``p`` entries of ``sigma_hat``, per layer."""
        return self.left.parameter_count + self.right.parameter_count + self.rank

    def split(self, theta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``theta`` (..., P) -> ``(u, v, sigma_hat)``, each with the same leading dimensions."""
        if theta.dim() == 0 or theta.shape[-1] != self.parameter_count:
            raise ValueError(f"expected (..., {self.parameter_count}) parameters; got shape {tuple(theta.shape)}")
        return theta.split([self.left.parameter_count, self.right.parameter_count, self.rank], dim=-1)

    def singular_values(self, theta: Tensor) -> Tensor:
        """``sigma`` of eq. 4, (..., p), in the diagonal's order (not sorted)."""
        return band(self.split(theta)[2], self.r, self.sigma_star)

    def forward(self, theta: Tensor) -> Tensor:
        u, v, _ = self.split(theta)
        p = self.rank
        left, right = self.left.pad(u), self.right.pad(v)  # (..., m1, rows), (..., m2, cols)
        eye = torch.eye(self.rows, p, dtype=theta.dtype, device=theta.device)
        u_columns = eye - left.mT @ compact_wy(left, p)  # U[:, :p], (..., rows, p)
        scaled = u_columns * self.singular_values(theta).unsqueeze(-2)  # U[:, :p] diag(sigma)
        padded = nn.functional.pad(scaled, (0, self.cols - p))  # (..., rows, cols)
        return padded - (scaled @ compact_wy(right, p).mT) @ right

    def normalized(self, theta: Tensor) -> Tensor:
        """Every reflector of every layer scaled to unit length, ``sigma_hat`` untouched
        (Note [Reflector length]); the matrices :meth:`forward` builds are unchanged."""
        u, v, sigma_hat = self.split(theta)
        parts = []
        for product, vectors in ((self.left, u), (self.right, v)):
            rows = product.pad(vectors)
            parts.append(product.entries(rows / rows.norm(dim=-1, keepdim=True).clamp_min(NORM_FLOOR)))
        return torch.cat([*parts, sigma_hat], dim=-1)

    def sample(self, *stack: int, dtype: torch.dtype | None = None) -> Tensor:
        """Random parameters, shape (*stack, P): unit reflectors uniform on their spheres and
        ``sigma_hat = 0``, i.e. every ``sigma = sigma_star``."""
        layers = [torch.cat([self.left.sample(dtype), self.right.sample(dtype), torch.zeros(self.rank, dtype=dtype)])
                  for _ in range(math.prod(stack))]
        return torch.stack(layers).reshape(*stack, self.parameter_count)

    def extra_repr(self) -> str:
        return (f"rows={self.rows}, cols={self.cols}, m1={self.left.reflectors}, m2={self.right.reflectors}, "
                f"r={self.r}, sigma_star={self.sigma_star}")


def register_householder_product(module: nn.Module, tensor_name: str, size: int,
                                 reflectors: int, *, length_one: str = "reflector") -> HouseholderProduct:
    """Make ``module.<tensor_name>`` the orthogonal (size, size) ``H_n(u_n) ... H_{n-m+1}(u_{n-m+1})``.

    The reflectors start as :meth:`HouseholderProduct.sample` (random unit
    vectors) and live, flat, in ``module.parametrizations.<tensor_name>.original``.
    ``module`` must not already have ``tensor_name``.  ``length_one``: see
    Note [The length-1 reflector].
    """
    product = HouseholderProduct(size, reflectors, length_one=length_one)
    module.register_parameter(tensor_name, nn.Parameter(product.sample()))
    parametrize.register_parametrization(module, tensor_name, product, unsafe=True)
    return product


def register_householder_svd(module: nn.Module, tensor_name: str, size: int, m1: int, m2: int,
                             r: float, sigma_star: float) -> HouseholderSVD:
    """Make ``module.<tensor_name>`` the (size, size) ``U diag(sigma) V^T`` of Spectral-RNN.

    Free parameters start as :meth:`HouseholderSVD.sample` (random unit
    reflectors, ``sigma = sigma_star``) and live, flat, in
    ``module.parametrizations.<tensor_name>.original``.
    ``module`` must not already have ``tensor_name``.
    """
    svd = HouseholderSVD(size, m1, m2, r, sigma_star)
    module.register_parameter(tensor_name, nn.Parameter(svd.sample()))
    parametrize.register_parametrization(module, tensor_name, svd, unsafe=True)
    return svd


def register_rectangular_householder_svd(module: nn.Module, tensor_name: str, rows: int, cols: int,
                                         m1: int, m2: int, r: float, sigma_star: float,
                                         stack: tuple[int, ...] = ()) -> RectangularHouseholderSVD:
    """Make ``module.<tensor_name>`` the (*stack, rows, cols) ``U Sigma_hat V^T`` of §5 (eqs. 7-8).

    ``stack`` = ``(L,)`` gives L independent layers in one tensor.  Free parameters start as
    :meth:`RectangularHouseholderSVD.sample` and live, flat, in
    ``module.parametrizations.<tensor_name>.original`` (*stack, P).
    ``module`` must not already have ``tensor_name``.
    """
    svd = RectangularHouseholderSVD(rows, cols, m1, m2, r, sigma_star)
    module.register_parameter(tensor_name, nn.Parameter(svd.sample(*stack)))
    parametrize.register_parametrization(module, tensor_name, svd, unsafe=True)
    return svd
