"""Spectral-RNN and oRNN: Elman cells whose transition matrix is built from Householder reflectors.

Both run the plain Elman update (spectral paper §4; eq. 10 of §6.1)

    h_t = f(W_in x_t + b + W h_{t-1})

and differ only in ``W`` (see :mod:`stability.parametrizations.householder`):

* ``spectral`` (Zhang, Lei & Dhillon 2018, §3-4)::

      W = H_n(u_n) ... H_{k1}(u_{k1}) diag(sigma) H_{k2}(v_{k2}) ... H_n(v_n),
      k1 = n - m1 + 1,  k2 = n - m2 + 1,
      sigma_i = 2 r (sigmoid(sigma_hat_i) - 0.5) + sigma_star          (eq. 4)

  so the singular values of ``W`` never leave ``[sigma_star - r, sigma_star + r]``;
* ``orthogonal`` (oRNN, Mhammedi et al. 2017)::

      W = H_n(u_n) ... H_{n-m+1}(u_{n-m+1}),

  the spectral cell with ``sigma = 1`` and one side only: ``W^T W = I``.

``W`` is built densely once per forward pass (compact WY form) and the time
loop is ElmanCell's fused scan, one (B, n) x (n, n) product per step.

Reflector lengths (Note [Reflector length] in the parametrization module):
``W`` is invariant to each reflector's scale, but the optimisation path is
not, and both authors' codes renormalise every reflector to unit length after
each optimizer update (zhangjiong724/spectral-RNN ``code/rnn.py``;
zmhammedi/Orthogonal_RNN ``sgd.py``).  So by default (``renormalize=True``)
:meth:`after_optimizer_step`, which the trainer calls after every step, does
the same to the stored reflectors, in place; ``sigma_hat`` is never touched.
``renormalize=False`` lets the lengths drift where the optimizer moves them.
Renormalising never changes ``W`` itself, but the two settings train along
different paths (the next Adam steps see different lengths).

Every nonzero reflector has determinant -1, and only a vector that lands
exactly on zero stops being one (renormalising keeps a zero vector at zero).
So training keeps the sign of det W where it starts: ``(-1)^(m1 + m2)`` for
``spectral``, ``(-1)^m`` for ``orthogonal`` with ``m < n``.  With ``m = n``
``orthogonal`` follows oRNN's code, whose last factor is
``diag(I_{n-1}, sign(u_1))`` (Note [The length-1 reflector]): det W is
``(-1)^(n-1) sign(u_1)``, random at initialisation, fixed after it.  For
``spectral`` with ``m1`` or ``m2`` equal to ``n`` the length-1 reflector is
eq. 1's constant ``-1``, as in Spectral-RNN's code.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..parametrizations.householder import register_householder_product, register_householder_svd
from .base import check_band, check_bool, check_positive_int
from .elman import ElmanCell


class SpectralRNN(ElmanCell):
    """``spectral``: Spectral-RNN, ``W = U diag(sigma) V^T`` by Householder reflectors.

    Options (spectral paper names):

    * ``m1``, ``m2`` (16, 16) — reflectors in ``U`` and ``V``; §7 uses 16 each
      at ``n = 128``.  Values above ``hidden_size`` are capped at it (there are
      only ``n`` reflector lengths, and ``n`` already reach every matrix,
      Thm. 2); the cell's ``m1``/``m2`` attributes hold the capped values.
    * ``r`` (0.01), ``sigma_star`` (1.0) — singular values in
      ``[sigma_star - r, sigma_star + r]`` (eq. 4; "sigma* is usually set to 1
      and r << 1", §4).  ``r <= sigma_star`` so that the range stays >= 0.
    * ``renormalize`` (True) — after every optimizer step put each reflector
      of ``U`` and ``V`` back to unit length (a zero one stays zero), leaving
      ``sigma_hat`` alone, as the authors' code does (zhangjiong724/spectral-RNN
      ``code/rnn.py``); ``W`` is unchanged by it, the training path is not.
      ``False`` leaves the lengths where the optimizer puts them.
    * ``nonlinearity`` ("leaky_relu", as in most of §7; also "relu", "tanh"),
      ``negative_slope`` (0.01), ``h0``, ``h0_noise_std`` (see ElmanCell).

    Initialisation: each reflector a random unit vector, ``sigma_hat = 0`` so
    every singular value is ``sigma_star`` and ``W`` starts as ``sigma_star``
    times an orthogonal matrix.  (The authors' code starts from Glorot-uniform
    vectors and first renormalises them after the first update.)
    """

    summary = "Spectral-RNN: W = U diag(sigma) V^T by Householder reflectors (spectral paper §3-4)"
    equations = (r"h_t = \phi(W h_{t-1} + U x_t + b)",
                 r"W = \mathcal{H}_n \cdots \mathcal{H}_{k_1} \, \Sigma \, \mathcal{H}_{k_2} \cdots \mathcal{H}_n",
                 r"\sigma_i = \sigma^* + 2r \left(\operatorname{sigmoid}(\hat\sigma_i) - \tfrac12\right)")
    paper = "Zhang et al. 2018 (Spectral-RNN) §4, eqs. (1), (4)"
    option_help = {
        "m1": "Householder reflectors in U (k1 = n - m1 + 1); §7 uses 16 at n = 128; capped at hidden_size",
        "m2": "Householder reflectors in V (k2 = n - m2 + 1); capped at hidden_size",
        "r": "half-width of the singular-value band [sigma* - r, sigma* + r] (eq. 4); at most sigma_star",
        "sigma_star": "centre sigma* of the singular-value band (eq. 4; usually 1)",
        "renormalize": "put every reflector back to unit length after each optimizer step, as the authors' "
                       "code does (W is unchanged by it, the training path is not)",
    }
    option_ranges = {"m1": (1, None), "m2": (1, None), "r": (0.0, None), "sigma_star": (0.0, None)}

    def __init__(self, input_size: int, hidden_size: int, *, m1: int = 16, m2: int = 16,
                 r: float = 0.01, sigma_star: float = 1.0, renormalize: bool = True,
                 nonlinearity: str = "leaky_relu", negative_slope: float = 0.01,
                 h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, nonlinearity=nonlinearity,
                         negative_slope=negative_slope, h0=h0, h0_noise_std=h0_noise_std)
        self.m1 = min(check_positive_int("m1", m1), hidden_size)
        self.m2 = min(check_positive_int("m2", m2), hidden_size)
        self.r, self.sigma_star = check_band(r, sigma_star)
        self.renormalize = check_bool("renormalize", renormalize)
        register_householder_svd(self, "weight_hh", hidden_size, self.m1, self.m2, self.r, self.sigma_star)

    def singular_values(self) -> Tensor:
        """sigma of eq. 4, the diagonal of ``W = U diag(sigma) V^T`` (not sorted)."""
        weight = self.parametrizations.weight_hh
        return weight[0].singular_values(weight.original)

    def recurrent_parameter_count(self) -> int:
        return self.parametrizations.weight_hh[0].parameter_count

    def after_optimizer_step(self) -> None:
        """With ``renormalize``, every reflector of ``U`` and ``V`` back to unit length, in place."""
        if self.renormalize:
            renormalize_reflectors(self)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, m1={self.m1}, m2={self.m2}, r={self.r}, "
                f"sigma_star={self.sigma_star}, renormalize={self.renormalize}")


class OrthogonalRNN(ElmanCell):
    """``orthogonal``: oRNN, ``W`` a product of the ``m`` longest Householder reflectors.

    Options:

    * ``m`` (16) — reflectors; the spectral paper runs oRNN with 16 at n = 32
      (App. C.1) and 32 at n = 256 (Table 2), i.e. ``n/8``, which at the usual
      n = 128 is 16 and matches ``spectral``'s default budget per side.
      Capped at ``hidden_size``; ``m = n`` reaches every orthogonal matrix (Thm. 1),
      with oRNN's code's last factor ``diag(I_{n-1}, sign(u_1))`` (see above).
    * ``renormalize`` (True) — after every optimizer step put each reflector
      back to unit length (a zero one stays zero), as the authors' code does
      (zmhammedi/Orthogonal_RNN ``sgd.py``); ``False`` leaves the lengths
      where the optimizer puts them.  ``W`` is the same either way at any
      given step; the training path differs.
    * ``nonlinearity`` ("leaky_relu", as the spectral paper runs oRNN in §7),
      ``negative_slope`` (0.01), ``h0``, ``h0_noise_std``.

    Initialisation: each reflector a random unit vector (direction uniform on
    the sphere), as the authors' code starts (``RNN_models.py``).
    """

    summary = "oRNN: W a product of m Householder reflectors (Mhammedi et al. 2017)"
    equations = (r"h_t = \phi(W h_{t-1} + U x_t + b)", r"W = \mathcal{H}_n \cdots \mathcal{H}_{n-m+1}")
    paper = "Mhammedi et al. 2017 (oRNN); spectral paper eq. (2)"
    option_help = {
        "m": "Householder reflectors in W; m = hidden_size reaches every orthogonal matrix (Thm. 1); "
             "capped at hidden_size",
        "renormalize": "put every reflector back to unit length after each optimizer step, as the authors' "
                       "code does (W is unchanged by it, the training path is not)",
    }
    option_ranges = {"m": (1, None)}

    def __init__(self, input_size: int, hidden_size: int, *, m: int = 16, renormalize: bool = True,
                 nonlinearity: str = "leaky_relu", negative_slope: float = 0.01,
                 h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, nonlinearity=nonlinearity,
                         negative_slope=negative_slope, h0=h0, h0_noise_std=h0_noise_std)
        self.m = min(check_positive_int("m", m), hidden_size)
        self.renormalize = check_bool("renormalize", renormalize)
        register_householder_product(self, "weight_hh", hidden_size, self.m, length_one="sign")

    def recurrent_parameter_count(self) -> int:
        return self.parametrizations.weight_hh[0].parameter_count

    def after_optimizer_step(self) -> None:
        """With ``renormalize``, every reflector back to unit length, in place."""
        if self.renormalize:
            renormalize_reflectors(self)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, m={self.m}, renormalize={self.renormalize}"


def renormalize_reflectors(cell: ElmanCell) -> None:
    """Overwrite the stored flat parameters of ``cell.weight_hh`` with their
    parametrization's ``normalized`` version (``W`` itself does not change)."""
    weight = cell.parametrizations.weight_hh
    with torch.no_grad():
        weight.original.copy_(weight[0].normalized(weight.original))
