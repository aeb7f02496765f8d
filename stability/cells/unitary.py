"""Strictly unitary / orthogonal baselines of the KRU paper (§1, §4; appendix C).

``urnn`` — the restricted-capacity unitary RNN (Arjovsky, Shah & Bengio 2016)::

    h_t = modReLU(W h_{t-1} + V x_t),     h_t in C^N
    W   = D3 R2 F^-1 D2 Pi R1 F D1          (KRU paper eq. 21; 7N real parameters)
    modReLU(z) = relu(|z| + b) z / |z|      (b in R^N trainable, one per unit)

The state is complex; the per-step outputs are the real features
[Re h_t, Im h_t] (B, T, 2N), which the uRNN feeds to its real readout
o_t = U [Re h_t; Im h_t] + b_o.  ``V`` is a real ``nn.Linear`` to 2N features
read as [Re(V x) | Im(V x)], without bias (the uRNN's only hidden bias is b).

``exponential`` — expRNN (Lezcano-Casado & Martínez-Rubio 2019)::

    h_t = modReLU(W_in x_t + W h_{t-1}),    W = exp(A - A^T) in SO(N)
    modReLU(a) = sign(a) relu(|a| + b)      (real; b in R^N trainable, one per unit)

an Elman cell whose W is behind :class:`~stability.parametrizations.exponential.SkewExponential`.

The uRNN paper (§4, "Complex hidden units") runs the complex recurrence on
real numbers, s = [Re h, Im h] with W acting as [[Re W, -Im W], [Im W, Re W]];
so does the fused path here, :func:`stability.cells.modrelu.modrelu_scan`,
shared with KRU.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils import parametrize

from ..parametrizations.exponential import SKEW_INITS, SkewExponential, skew_block_init
from ..parametrizations.unitary import RestrictedUnitary, initial_factors
from ..core.errors import check_choice
from .base import check_nonnegative
from .elman import ElmanCell
from .modrelu import ModReLUCell


class URNN(ModReLUCell):
    """``urnn``: restricted-capacity unitary RNN with modReLU (Arjovsky et al. 2016).

    Initialisation (uRNN paper §4, "Initialization"): phases U[-pi, pi],
    reflection vectors U[-1, 1], modReLU bias 0 (so the cell starts as a
    linear unitary map plus input), V Glorot-uniform
    U[-sqrt(6 / (n_in + N)), +sqrt(6 / (n_in + N))] for each of Re V and Im V.
    The permutation Pi is drawn once at construction and kept as a buffer.

    ``h0``, like every state, is complex (B, N); ``outputs`` are real (B, T, 2N).
    """

    summary = "Unitary RNN, restricted capacity (Arjovsky et al. 2016)"
    equations = (r"h_t = \operatorname{modReLU}(W h_{t-1} + V x_t + b)",
                 r"W = D_3 R_2 \mathcal{F}^{-1} D_2 \Pi R_1 \mathcal{F} D_1")
    paper = "Arjovsky et al. 2016 (uRNN); the KRU paper's baseline"
    device_needs = {**ModReLUCell.device_needs, "fft": "W's unitary DFT factors (torch.fft.fft, ifft)"}

    def __init__(self, input_size: int, hidden_size: int, *, h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, input_bias=False, h0=h0, h0_noise_std=h0_noise_std)
        bound = math.sqrt(6.0 / (input_size + hidden_size))
        nn.init.uniform_(self.input_proj.weight, -bound, bound)
        self.weight_hh = nn.Parameter(initial_factors(hidden_size))
        parametrize.register_parametrization(
            self, "weight_hh", RestrictedUnitary(torch.randperm(hidden_size)), unsafe=True)
        self._init_initial_state()

    def recurrent_parameter_count(self) -> int:
        return self.parametrizations.weight_hh.original.numel()  # 7N


class ExponentialRNN(ElmanCell):
    """``exponential``: Elman cell with W = exp(A - A^T) orthogonal (expRNN).

    What the reference code does (github Lezcano/expRNN, ``orthogonal.py``,
    class ``OrthogonalRNN``; the first version's ``exprnn.py`` alike), and here:

    * nonlinearity: the real modReLU ``sign(a) relu(|a| + b)``, b per unit
      drawn U[-0.01, 0.01] (class ``modrelu``); here ``nonlinearity="modrelu"``
      (default), with b in ``modrelu_bias``, run by the fused Elman scan
      (:mod:`stability.cells.scan`, Note [modReLU from its output]);
    * ``W_in``: ``nn.Linear(bias=False)``, He-normal (fan-in, ReLU gain); with
      modReLU ours has no input bias either, b is the only one;
    * ``h0``: zeros (``default_hidden``), our default ``h0="zero"``;
    * the skew-symmetric parameter: ``henaff`` init by default in the copying
      task (``1_copying.py``), ``cayley`` in (permuted) MNIST (``2_mnist.py``).
      The reference multiplies row states on the right, ``h B``, so its W
      acting on column vectors is ``exp(A - A^T)^T``, ours at ``-A``: the
      same distribution under ``henaff`` (angles symmetric about 0), the units
      of each pair swapped under ``cayley`` (angles all <= 0).
    * the reference trains A with its own RMSprop at a tenth of the learning
      rate (``lr_orth``: 2e-5 vs 2e-4 copying, 7e-5 vs 7e-4 MNIST, 1e-4 vs
      1e-3 TIMIT; its README recommends the 10x ratio); here the option
      ``recurrent_lr_scale`` (default 0.1) puts A in its own group of the
      run's optimizer at lr * 0.1 (``stability.models.sequence.parameter_groups``).

    Options:
        init: ``"henaff"`` (default) or ``"cayley"``; see
            :mod:`stability.parametrizations.exponential`.
        nonlinearity: ``"modrelu"`` (default, expRNN's); ``"relu"``, ``"tanh"``
            and ``"leaky_relu"`` keep a zero-initialised input bias instead.
        recurrent_lr_scale: A's learning rate as a multiple of the run's (0.1,
            the reference's ratio; 1 trains everything at one rate).
    """

    summary = "expRNN: W = exp(A - A^T), orthogonal (Lezcano-Casado & Martinez-Rubio 2019)"
    equations = (r"h_t = \phi(W h_{t-1} + U x_t + b)", r"W = \exp(A - A^\top)")
    paper = "Lezcano-Casado & Martínez-Rubio 2019 (expRNN)"
    option_help = {
        "init": "the skew-symmetric A at the start: henaff (copying task) or cayley (MNIST), as the "
                "reference code",
        "recurrent_lr_scale": "A's learning rate as a multiple of the run's (0.1: the reference's lr / 10)",
    }
    option_choices = {"init": SKEW_INITS}
    option_ranges = {"recurrent_lr_scale": (0.0, None)}

    def __init__(self, input_size: int, hidden_size: int, *, nonlinearity: str = "modrelu",
                 negative_slope: float = 0.01, init: str = "henaff", recurrent_lr_scale: float = 0.1,
                 h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, nonlinearity=nonlinearity,
                         negative_slope=negative_slope, h0=h0, h0_noise_std=h0_noise_std)
        self.init = check_choice("init", init, SKEW_INITS)
        self.recurrent_lr_scale = check_nonnegative("recurrent_lr_scale", recurrent_lr_scale)
        nn.init.kaiming_normal_(self.input_proj.weight, nonlinearity="relu")
        self.weight_hh = nn.Parameter(skew_block_init(hidden_size, init))
        parametrize.register_parametrization(self, "weight_hh", SkewExponential())

    def recurrent_parameter_count(self) -> int:
        return self.hidden_size * (self.hidden_size - 1) // 2

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, init={self.init!r}, recurrent_lr_scale={self.recurrent_lr_scale}"
