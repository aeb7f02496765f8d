"""A deep MLP (or ResNet) as a cell: the whole stack of layers is one step, dense or SVD-parameterised.

The spectral paper's MLP (Zhang, Lei & Dhillon 2018, §5, eq. 9; §7.2, Fig. 5)
flattens an MNIST image to x in R^784 and runs an input layer and then L
hidden layers of width n, each a fully connected layer with leaky ReLU (§7:
"in most cases leaky_Relu is used")::

    a_0 = f(W_in x + b_in)                       W_in (n, 784): the non-square layer
    a_l = f(W_l a_{l-1} + b_l),   l = 1 .. L     W_l  (n, n)
    y   = readout(a_L)                           (the trainer's linear readout)

With ``layer = "spectral"`` every weight matrix, the input layer's included,
is the SVD parameterisation of §3-5: ``W = U Sigma_hat V^T``, U and V products
of Householder reflectors, ``sigma_i = sigma* + 2 r (sigmoid(sigma_hat_i) - 1/2)``
(eq. 4), so each layer's singular values stay in ``[sigma* - r, sigma* + r]``
whatever training does; the non-square input layer has ``min(n, 784)`` of
them (§5, eqs. 7-8, Thm. 4; :class:`~stability.parametrizations.householder.RectangularHouseholderSVD`).
With ``residual = True`` the hidden layers form residual blocks of two layers
(§7: "We used a residual block of two layers in ResNet")::

    a_l = f(W_l a_{l-1} + b_l) + a_{l-2}   at the end of each block (l even; a last odd layer is a block alone)

so the four models of Fig. 5 are MLP, ResNet, Spectral-MLP and Spectral-ResNet.

Note [A stack per step]
-----------------------
As a cell the whole stack is one step of a recurrence (a deep-transition RNN,
Pascanu et al. 2014), the previous state added to the first hidden layer::

    a_0 = f(W_in x_t + b_in) + h_{t-1},   h_t = a_L,   h_0 = the cell's initial state (zero by default)

Fed one step, the flattened image (``mnist`` with ``pixels_per_step = 784``,
T = 1), it is exactly the paper's MLP, and the trainer's readings mean:

* ``grad/h0_norm`` = ‖∂L/∂a_0‖, the gradient at the first hidden layer: the
  paper's first-layer gradient (Fig. 5's claim that spectral layers keep it);
* ``grad/h_t_norm`` = (‖∂L/∂a_0‖, ‖∂L/∂a_L‖): the first and the last hidden
  layer, so its ratio is the gradient lost through the depth;
* ``grad/layer_norm`` = (‖∂L/∂a_0‖, ..., ‖∂L/∂a_L‖): the gradient reaching every
  layer, the line over depth Fig. 5 is about (:meth:`DeepMLP.probing_layers`: a
  zero probe added to each a_l, whose gradient is ∂L/∂a_l; on a sequence of
  T > 1 steps it is the sum over the steps of each layer's gradient);
* ``sv/*``: see Note [Which singular values].

The weights are the same at every step, so the cell keeps the cell contract
(a step's update depends on the state and the input only; the state probe is
exact), and on longer sequences it is a proper recurrent cell whose every
step is L layers deep.  Depth is not laid out as time: untied per-layer
weights at per-time steps would make a step's update depend on its index,
which the contract (``tests/test_cells_common.py``, restarting from h_t) rules out.

Note [Which singular values]
----------------------------
There is no single transition matrix: a step passes through L of them.
``recurrent_matrix()`` returns the (n, n) diagonal matrix of n singular values
taken evenly, largest to smallest, from those of all L hidden matrices W_l
pooled and sorted (the input layer's W_in is not pooled: it acts on x_t, not on
the state).  So ``sv/max`` and ``sv/min`` are the largest and the smallest
singular value of any hidden layer, ``sv/margin`` is max over layers of
max_i |sigma_i - 1|, ``sv/condition`` is sv/max / sv/min across layers (at least
every layer's own condition number), ``sv/spectrum`` is n quantiles of the pooled
spectrum, and ``sv/spectral_radius`` (the diagonal's) equals sv/max: it is not the
eigenvalue of any layer.  On the Gradient flow page the bound on a step is
:meth:`DeepMLP.step_gain_bound`: the largest layer's norm to the L-th power (a
residual block of two layers: 1 + its square), and the line is that to the T − t.
For spectral layers the singular values are read from eq. 4 (exact: U and V
are orthogonal); for dense ones from one batched ``torch.linalg.svdvals`` of
the (L, n, n) stack, which at L = 100, n = 128 costs a few tens of ms per log step.
"""
from __future__ import annotations

import contextlib
import math

import torch
from torch import Tensor, nn

from ..core.devices import run_with_kernel
from ..parametrizations.householder import register_rectangular_householder_svd
from ..core.errors import check_choice
from .base import (RecurrentCell, check_band, check_bool, check_nonnegative, check_positive_int,
                   project_time_major)
from .scan import apply_activation

LAYERS = ("dense", "spectral")
NONLINEARITIES = ("leaky_relu", "relu", "tanh")


def glorot_normal_(weight: Tensor) -> Tensor:
    """N(0, 2 / (fan_in + fan_out)) over the last two dimensions (§7: "initialized by sampling from
    a Gaussian distribution"; Glorot's variance, TensorFlow's default scale for dense layers)."""
    fan_out, fan_in = weight.shape[-2:]
    with torch.no_grad():
        return weight.normal_(0.0, math.sqrt(2.0 / (fan_in + fan_out)))


MAX_LAYERS = 1000  # ten times the deepest network of spectral paper Fig. 5 (L = 100)


class DeepMLP(RecurrentCell):
    """``mlp``: the spectral paper's deep MLP / ResNet, dense or SVD-parameterised, one stack per step.

    Options:

    * ``layers`` (30) — L, hidden layers of width ``hidden_size`` after the
      input layer; Fig. 5 runs L = 30 to 100 at n = 128 (§7.2).
    * ``layer`` ("dense") — ``"dense"``: free matrices, Glorot-Gaussian
      initialised; ``"spectral"``: every matrix (input layer included) is
      ``U Sigma_hat V^T`` by Householder reflectors with singular values in
      ``[sigma_star - r, sigma_star + r]`` (§3-5, eq. 4, eqs. 7-8).
    * ``residual`` (False) — residual blocks of two hidden layers (§7).
    * ``m1``, ``m2`` (None: all) — reflectors in U and V of each spectral
      layer, capped at min(rows, cols) of that layer; None takes that many,
      which reaches every matrix (Thm. 4).  Ignored by dense layers.
    * ``r`` (0.01), ``sigma_star`` (1.0) — the band of eq. 4, as ``spectral``;
      ``r <= sigma_star``.  Ignored by dense layers.
    * ``renormalize`` (True) — reflectors back to unit length after every
      optimizer step, as ``spectral`` (Note [Reflector length]).
    * ``nonlinearity`` ("leaky_relu"; also "relu", "tanh"), ``negative_slope`` (0.01).
    * ``h0``, ``h0_noise_std`` — the state added to the first hidden layer
      (Note [A stack per step]); zero by default.

    ``recurrent_matrix()`` is a summary of all hidden layers' singular values,
    not one of them: Note [Which singular values].
    """

    summary = "Deep MLP / ResNet of L layers, dense or SVD-parameterised, as one step (spectral paper §5, Fig. 5)"
    equations = (r"a_0 = \phi(W_{in} x_t + b_{in}) + h_{t-1}",
                 r"a_l = \phi(W_l a_{l-1} + b_l) \;[+\, a_{l-2}],\quad l = 1..L,\qquad h_t = a_L",
                 r"W_l = U_l \hat\Sigma_l V_l^\top,\quad \sigma_i = \sigma^* + 2r\left(\operatorname{sigmoid}"
                 r"(\hat\sigma_i) - \tfrac12\right)")
    paper = "Zhang et al. 2018 (Spectral-RNN) §5, eqs. (7)-(9); §7.2, Fig. 5"
    option_help = {
        "layers": "L: hidden layers after the input layer (Fig. 5: 30 to 100 at width 128); one time step "
                  "runs all of them, so give the image as one step (mnist: pixels_per_step = 784). "
                  "sv/* are every hidden layer's singular values pooled (sv/max the largest of any layer), "
                  "not one matrix's",
        "layer": "dense: free matrices (Glorot-Gaussian init); spectral: every matrix U Σ V^T by Householder "
                 "reflectors, singular values in [sigma_star - r, sigma_star + r] (§3-5, eq. 4)",
        "residual": "residual blocks of two hidden layers (ResNet, §7)",
        "m1": "reflectors in U of each spectral layer; empty: min(rows, cols), every matrix (Thm. 4); capped there",
        "m2": "reflectors in V of each spectral layer; empty: min(rows, cols); capped there",
        "r": "half-width of every spectral layer's singular-value band (eq. 4); at most sigma_star",
        "sigma_star": "centre of every spectral layer's singular-value band (eq. 4)",
        "renormalize": "put every reflector back to unit length after each optimizer step (spectral layers)",
        "nonlinearity": "f of every layer (§7: leaky_relu in most cases)",
        "negative_slope": "slope of leaky_relu below zero",
        "h0": "the state added to the first hidden layer: zero (the paper's MLP), learned, or noisy: "
              "N(0, sigma^2 I) while training, zero at evaluation (MASO paper §5.1)",
    }
    option_choices = {"layer": LAYERS, "nonlinearity": NONLINEARITIES}
    option_ranges = {"layers": (1, MAX_LAYERS), "m1": (1, None), "m2": (1, None), "r": (0.0, None),
                     "sigma_star": (0.0, None), "negative_slope": (0.0, None)}

    def __init__(self, input_size: int, hidden_size: int, *, layers: int = 30, layer: str = "dense",
                 residual: bool = False, m1: int | None = None, m2: int | None = None, r: float = 0.01,
                 sigma_star: float = 1.0, renormalize: bool = True, nonlinearity: str = "leaky_relu",
                 negative_slope: float = 0.01, h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, h0=h0, h0_noise_std=h0_noise_std)
        self.layers = check_positive_int("layers", layers, maximum=MAX_LAYERS)
        self.layer = check_choice("layer", layer, LAYERS)
        self.residual = check_bool("residual", residual)
        self.m1 = None if m1 is None else check_positive_int("m1", m1)
        self.m2 = None if m2 is None else check_positive_int("m2", m2)
        self.r, self.sigma_star = check_band(r, sigma_star)
        self.renormalize = check_bool("renormalize", renormalize)
        self.nonlinearity = check_choice("nonlinearity", nonlinearity, NONLINEARITIES)
        self.negative_slope = check_nonnegative("negative_slope", negative_slope)

        n = hidden_size
        self.input_proj = nn.Linear(input_size, n)  # W_in, b_in
        nn.init.zeros_(self.input_proj.bias)
        self.bias_hh = nn.Parameter(torch.zeros(self.layers, n))  # b_1 .. b_L
        if self.layer == "dense":
            glorot_normal_(self.input_proj.weight)
            self.weight_hh = nn.Parameter(glorot_normal_(torch.empty(self.layers, n, n)))  # W_1 .. W_L
        else:
            del self.input_proj.weight
            self._register_svd(self.input_proj, "weight", n, input_size, ())
            self._register_svd(self, "weight_hh", n, n, (self.layers,))
        self._init_initial_state()
        self._layer_probe: Tensor | None = None  # (L + 1, B, n) while probing_layers() is open

    @contextlib.contextmanager
    def probing_layers(self, probe: Tensor):
        """While open, ``probe[l]`` ((L + 1, B, n), zeros) is added to a_l, l = 0..L, at every step, so
        ``∂L/∂probe[l]`` is ∂L/∂a_l, the gradient reaching layer l (Note [A stack per step])."""
        if probe.shape[0] != self.layers + 1 or probe.shape[-1] != self.hidden_size:
            raise ValueError(f"expected a probe of shape ({self.layers + 1}, batch, {self.hidden_size}); "
                             f"got {tuple(probe.shape)}")
        self._layer_probe = probe
        try:
            yield probe
        finally:
            self._layer_probe = None

    def _register_svd(self, module: nn.Module, name: str, rows: int, cols: int, stack: tuple[int, ...]) -> None:
        rank = min(rows, cols)
        m1, m2 = min(self.m1 or rank, rank), min(self.m2 or rank, rank)
        register_rectangular_householder_svd(module, name, rows, cols, m1, m2, self.r, self.sigma_star, stack)

    # ---------------------------------------------------------------- forward
    def _prepare(self, x: Tensor) -> dict:
        first = apply_activation(project_time_major(x, self.input_proj), self.nonlinearity,
                                 self.negative_slope)  # (T, B, n): f(W_in x_t + b_in)
        return {"inputs": first, "weights": self.weight_hh.unbind(0), "biases": self.bias_hh.unbind(0),
                "probe": self._layer_probe}

    def _step(self, first_t: Tensor, h: Tensor, context: dict) -> Tensor:
        probe = context.get("probe")
        a = first_t + h  # a_0
        if probe is not None:
            a = a + probe[0]
        block_input = a
        for index, (weight, bias) in enumerate(zip(context["weights"], context["biases"])):
            if index % 2 == 0:
                block_input = a  # a residual block starts at layers 1, 3, 5, ...
            a = apply_activation(torch.addmm(bias, a, weight.t()), self.nonlinearity, self.negative_slope)
            if self.residual and (index % 2 == 1 or index == self.layers - 1):
                a = a + block_input
            if probe is not None:
                a = a + probe[index + 1]
        return a

    # ------------------------------------------------------------ diagnostics
    def layer_singular_values(self) -> Tensor:
        """(L, n): each hidden layer's singular values, largest first (eq. 4's sigma for spectral layers)."""
        with torch.no_grad():
            if self.layer == "spectral":
                weight = self.parametrizations.weight_hh
                sigma = weight[0].singular_values(weight.original)
            else:  # one batched SVD (the trainer reads W's spectrum once a step: Trainer.spectrum)
                sigma = run_with_kernel("svd", torch.linalg.svdvals, self.weight_hh)  # MPS has none
            return sigma.sort(dim=-1, descending=True).values

    def recurrent_matrix(self) -> Tensor:
        """diag of n singular values spread evenly over every hidden layer's, pooled: Note [Which singular values]."""
        pooled = self.layer_singular_values().flatten().sort(descending=True).values  # (L n,)
        picks = torch.linspace(0, len(pooled) - 1, self.hidden_size, device=pooled.device).round().long()
        return torch.diag(pooled[picks])

    def step_gain_bound(self, spectral_norm: float) -> float:
        """A bound on ‖∂h_t/∂h_{t-1}‖₂ given ``spectral_norm`` s, the largest singular value of any hidden
        layer (sv/max): |f'| <= 1 for leaky_relu, relu and tanh, so a layer multiplies by at most s and a
        step of L plain layers by s^L; a residual block of two layers, f(W f(W a)) + a, by at most 1 + s²
        (a last odd layer alone, 1 + s). The Gradient flow page's bound ‖W‖^(T−t) is this to the T − t; inf
        past a float (s^1000 overflows for s > 2.03: issue 33's OverflowError)."""
        try:
            if not self.residual:
                return spectral_norm ** self.layers
            return (1 + spectral_norm ** 2) ** (self.layers // 2) * (1 + spectral_norm) ** (self.layers % 2)
        except OverflowError:
            return math.inf

    def recurrent_parameter_count(self) -> int:
        if self.layer == "spectral":
            return self.layers * self.parametrizations.weight_hh[0].parameter_count
        return self.weight_hh.numel()

    def after_optimizer_step(self) -> None:
        """With spectral layers and ``renormalize``, every reflector back to unit length, in place."""
        if self.layer == "spectral" and self.renormalize:
            with torch.no_grad():
                for weight in (self.input_proj.parametrizations.weight, self.parametrizations.weight_hh):
                    weight.original.copy_(weight[0].normalized(weight.original))

    def extra_repr(self) -> str:
        band = f", r={self.r}, sigma_star={self.sigma_star}" if self.layer == "spectral" else ""
        return (f"{super().extra_repr()}, layers={self.layers}, layer={self.layer!r}, residual={self.residual}"
                f"{band}, nonlinearity={self.nonlinearity!r}")
