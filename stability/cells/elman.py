"""The Elman recurrence every real non-LSTM cell is built on.

    h_t = alpha * f(W_in x_t + b + W h_{t-1}) + beta * h_{t-1}

with alpha = 1, beta = 0 for the plain Elman RNN (KRU paper eq. 1; spectral
paper §4).  Subclasses decide what ``W`` is: a free matrix (``rnn``), a
product of Householder reflectors (``spectral``, ``orthogonal``), of plane
rotations (``vprnn``), with scalar gates (``fastrnn``, ``sgornn``).  ``W`` is
the tensor attribute ``weight_hh``, usually behind a
``torch.nn.utils.parametrize`` parametrization, read once per forward pass.

``f`` is one of :data:`stability.cells.scan.ACTIVATIONS`.  With
``nonlinearity="modrelu"``, f(a) = sign(a) relu(|a| + c), the cell gets a
trainable per-unit ``modrelu_bias`` c, initialised U[-0.01, 0.01], and
``W_in`` has no bias of its own: c is the unit's only bias, as in expRNN
(github Lezcano/expRNN, ``orthogonal.py``: class ``modrelu`` and a bias-free
``input_kernel``) and the uRNN (:mod:`stability.cells.unitary`).

Three ways to run the time loop, chosen by ``cell.impl``:

* ``"scan"`` — :func:`stability.cells.scan.elman_scan`, a fused loop with a
  hand-written backward (the CPU default, and on CUDA for cells that
  PyTorch's kernels cannot run);
* ``"native"`` — PyTorch's own RNN kernel (cuDNN on CUDA, ATen on CPU) fed
  the built matrix; only for plain tanh/relu updates (the CUDA default there);
* ``"loop"`` — the reference autograd loop (:meth:`RecurrentCell._forward_loop`).
"""
from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from ..core.errors import check_choice
from .base import RecurrentCell, check_nonnegative, project_time_major
from .scan import ACTIVATIONS, apply_activation, elman_scan

# cuDNN asks for one flat weight buffer; ours is rebuilt each forward pass.
warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")

_NATIVE_KERNELS = {"tanh": torch.rnn_tanh, "relu": torch.rnn_relu}


class ElmanCell(RecurrentCell):
    """Shared machinery of the Elman-type cells; not registered by itself."""

    option_help = {
        "nonlinearity": "f of the update; modrelu is sign(a) relu(|a| + c) with a trainable c per unit (expRNN)",
        "negative_slope": "slope of leaky_relu below zero",
    }
    option_choices = {"nonlinearity": ACTIVATIONS}
    option_ranges = {"negative_slope": (0.0, None)}

    def __init__(self, input_size: int, hidden_size: int, *, nonlinearity: str = "tanh",
                 negative_slope: float = 0.01, h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, h0=h0, h0_noise_std=h0_noise_std)
        self.nonlinearity = check_choice("nonlinearity", nonlinearity, ACTIVATIONS)
        self.negative_slope = check_nonnegative("negative_slope", negative_slope)
        modrelu = self.nonlinearity == "modrelu"
        self.input_proj = nn.Linear(input_size, hidden_size, bias=not modrelu)
        if modrelu:
            self.modrelu_bias = nn.Parameter(torch.empty(hidden_size).uniform_(-0.01, 0.01))
        else:
            self.modrelu_bias = None
            nn.init.zeros_(self.input_proj.bias)
        self._init_initial_state()

    # alpha and beta of the scalar-gated update; None for the plain Elman step.
    def scalar_gates(self) -> tuple[Tensor | None, Tensor | None]:
        return None, None

    def _prepare(self, x: Tensor) -> dict:
        alpha, beta = self.scalar_gates()
        return {"inputs": project_time_major(x, self.input_proj), "weight": self.weight_hh, "alpha": alpha, "beta": beta}

    def _step(self, u_t: Tensor, h: Tensor, context: dict) -> Tensor:
        s = apply_activation(u_t + h @ context["weight"].t(), self.nonlinearity, self.negative_slope,
                             self.modrelu_bias)
        if context["alpha"] is None:
            return s
        return context["alpha"] * s + context["beta"] * h

    def _native_possible(self) -> bool:
        return self.nonlinearity in _NATIVE_KERNELS and self.scalar_gates()[0] is None

    def _forward_fast(self, x: Tensor, h0: Tensor, impl: str):
        if impl == "native" and not self._native_possible():
            raise ValueError(f"impl='native' needs a plain tanh or relu update; "
                             f"this cell has nonlinearity={self.nonlinearity!r}"
                             f"{' and scalar gates' if self.scalar_gates()[0] is not None else ''}")
        if impl == "native" or (impl == "auto" and x.is_cuda and self._native_possible()):
            return self._forward_native(x, h0)
        weight = self.weight_hh
        alpha, beta = self.scalar_gates()
        u = project_time_major(x, self.input_proj)
        states = elman_scan(u, weight, h0, self.nonlinearity, self.negative_slope, alpha, beta,
                            self.modrelu_bias)
        return states.transpose(0, 1), states[-1]

    def _forward_native(self, x: Tensor, h0: Tensor):
        bias = self.input_proj.bias
        # cuDNN copies the weights into one flat buffer by views: a transposed or parametrized weight
        # must be contiguous first (a no-op for a plain one)
        params = [self.input_proj.weight.contiguous(), self.weight_hh.contiguous(), bias, torch.zeros_like(bias)]
        kernel = _NATIVE_KERNELS[self.nonlinearity]
        outputs, h_last = kernel(x, h0.unsqueeze(0).contiguous(), params, True, 1, 0.0,
                                 self._keeps_backward(), False, True)
        return outputs, h_last[0]

    def recurrent_matrix(self) -> Tensor:
        return self.weight_hh

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, nonlinearity={self.nonlinearity!r}"
