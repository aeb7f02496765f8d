"""The vanilla Elman RNN and IRNN.

    h_t = f(W_in x_t + b + W h_{t-1})                  (KRU paper eq. 1)

``rnn`` takes any nonlinearity (tanh, relu, leaky_relu) and one of three
recurrent initialisations, each scaled by ``init_gain``:

* ``"gaussian"``   — W_ij ~ N(0, gain^2 / H): spectral radius ≈ gain (the
  spectral paper's RNN is Gaussian-initialised, §7, variance not stated);
* ``"orthogonal"`` — gain · Q, Q Haar-random orthogonal (Saxe et al.);
* ``"identity"``   — gain · I (Le et al., 2015).

tanh is the default, the RNN of the KRU paper (§4) and of the Spectral-RNN
reference code; the spectral paper uses leaky ReLU "in most cases" for every
model but the LSTM (§7), so its figures need ``nonlinearity="leaky_relu"``.

``irnn`` is the ReLU RNN with identity initialisation of Le et al., the model
the MASO paper trains with a noisy h0 (§5.3, "identity-initialized ReLU
RNNs").  The spectral paper's "IRNN" is initialised orthogonal instead (§7),
with its leaky ReLU: that is ``rnn`` with ``init="orthogonal",
nonlinearity="leaky_relu"``.  Defaults against the papers: ``docs/cells.md``.
"""
from __future__ import annotations

import torch
from torch import nn

from ..core.errors import check_choice
from .base import check_nonnegative
from .elman import ElmanCell

RECURRENT_INITS = ("gaussian", "orthogonal", "identity")


class ElmanRNN(ElmanCell):
    """``rnn``: a free H x H recurrent matrix."""

    summary = "Elman RNN, tanh/relu/leaky_relu; gaussian, orthogonal or identity init"
    equations = (r"h_t = \phi(W h_{t-1} + U x_t + b)",)
    paper = "Elman 1990; KRU paper eq. (1); the RNN of the spectral paper §4"
    option_help = {
        "init": "W at the start: gaussian N(0, gain²/H) (spectral radius ≈ gain), orthogonal (gain · Q), "
                "or identity (gain · I, Le et al. 2015)",
        "init_gain": "scale of the initial W",
    }
    option_choices = {"init": RECURRENT_INITS}
    option_ranges = {"init_gain": (0.0, None)}

    def __init__(self, input_size: int, hidden_size: int, *, nonlinearity: str = "tanh",
                 negative_slope: float = 0.01, init: str = "gaussian", init_gain: float = 1.0,
                 h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, nonlinearity=nonlinearity,
                         negative_slope=negative_slope, h0=h0, h0_noise_std=h0_noise_std)
        self.init = check_choice("init", init, RECURRENT_INITS)
        self.init_gain = check_nonnegative("init_gain", init_gain)
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))
        with torch.no_grad():
            if init == "gaussian":
                self.weight_hh.normal_(0.0, self.init_gain / hidden_size ** 0.5)
            elif init == "orthogonal":
                nn.init.orthogonal_(self.weight_hh, gain=self.init_gain)
            else:
                self.weight_hh.copy_(torch.eye(hidden_size) * self.init_gain)

    def recurrent_parameter_count(self) -> int:
        return self.hidden_size ** 2


class IRNN(ElmanRNN):
    """``irnn``: ReLU, W initialised to the identity (Le et al.; MASO paper §5.3)."""

    summary = "ReLU RNN with identity init (Le et al. 2015)"
    equations = (r"h_t = \operatorname{relu}(W h_{t-1} + U x_t + b)", r"W_0 = g I")
    paper = "Le et al. 2015; MASO paper §5.3; spectral paper §7"
    option_help = {"init_gain": "g: W starts as g · I"}

    def __init__(self, input_size: int, hidden_size: int, *, init_gain: float = 1.0,
                 h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, nonlinearity="relu", init="identity",
                         init_gain=init_gain, h0=h0, h0_noise_std=h0_noise_std)
