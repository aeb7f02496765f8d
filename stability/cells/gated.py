"""LSTM and GRU: the gated baselines of every paper (spectral §7, SGORNN §3,
KRU §4, MASO §5.3).

LSTM (Hochreiter & Schmidhuber 1997), PyTorch's gate layout (i, f, g, o)::

    i, f, o = sigmoid(W_i* x_t + U_i* h_{t-1} + b_i*)
    g       = tanh(W_g x_t + U_g h_{t-1} + b_g)
    c_t = f * c_{t-1} + i * g
    h_t = o * tanh(c_t)

GRU (Cho et al. 2014), PyTorch's layout (r, z, n)::

    r, z = sigmoid(W_r* x_t + b_ir + U_r* h_{t-1} + b_hr)
    n    = tanh(W_n x_t + b_in + r * (U_n h_{t-1} + b_hn))
    h_t  = (1 - z) * n + z * h_{t-1}

State layout: the LSTM's state is the concatenation [h, c], shape (B, 2H),
so that h0, the gradient probes and dL/dh0 cover the memory cell too;
``outputs`` are the h part only.  The GRU state is h.

Training runs through PyTorch's own kernels (cuDNN on CUDA, ATen on CPU);
the reference loop below runs the probes.  ``gate_values()`` recomputes the
gate activations of the last forward pass from its inputs and states in a
few batched matmuls, only when asked, so training pays nothing for it.

``recurrent_matrix()`` returns the hidden-to-candidate block (U_g for the
LSTM, U_n for the GRU): the part of the update that is a plain Elman
recurrence, which the gates then modulate.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .base import RecurrentCell


class _GatedCell(RecurrentCell):
    gate_count: int
    candidate_block: int  # index of the candidate's block in the stacked weights

    def __init__(self, input_size: int, hidden_size: int, *, h0: str, h0_noise_std: float):
        super().__init__(input_size, hidden_size, h0=h0, h0_noise_std=h0_noise_std)
        rows = self.gate_count * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size))
        self.weight_hh = nn.Parameter(torch.empty(rows, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(rows))
        self.bias_hh = nn.Parameter(torch.empty(rows))
        bound = hidden_size ** -0.5  # PyTorch's default for nn.LSTM / nn.GRU
        for weight in self.parameters():
            nn.init.uniform_(weight, -bound, bound)
        self._last_forward: tuple[Tensor, Tensor, Tensor] | None = None

    def _params(self) -> list[Tensor]:
        return [self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh]

    def _remember(self, x: Tensor, h0: Tensor, outputs: Tensor) -> None:
        self._last_forward = (x.detach(), h0.detach(), outputs.detach())

    def _gate_preactivations(self) -> tuple[Tensor, Tensor] | None:
        """Input and hidden parts of every gate for the last forward, (B, T, G*H) each."""
        if self._last_forward is None:
            return None
        x, h0, outputs = self._last_forward
        h_prev = torch.cat([h0[:, None, :self.hidden_size], outputs[:, :-1]], dim=1)  # (B, T, H)
        with torch.no_grad():
            from_input = x @ self.weight_ih.t() + self.bias_ih
            from_hidden = h_prev @ self.weight_hh.t() + self.bias_hh
        return from_input, from_hidden

    def recurrent_matrix(self) -> Tensor:
        h = self.hidden_size
        return self.weight_hh[self.candidate_block * h:(self.candidate_block + 1) * h]

    def recurrent_parameter_count(self) -> int:
        return self.weight_hh.numel()


class LSTM(_GatedCell):
    """``lstm``: the standard LSTM; state [h, c] of size 2H."""

    summary = "Long short-term memory"
    equations = (r"c_t = f_t \odot c_{t-1} + i_t \odot g_t", r"g_t = \tanh(W_g h_{t-1} + U_g x_t + b_g)",
                 r"h_t = o_t \odot \tanh(c_t)")
    paper = "Hochreiter & Schmidhuber 1997; the baseline of every paper here"
    option_help = {"forget_bias": "added to the forget gate's bias at the start, so the cell starts by "
                                  "remembering (Jozefowicz et al. 2015)"}

    gate_count = 4
    candidate_block = 2  # (i, f, g, o)

    def __init__(self, input_size: int, hidden_size: int, *, forget_bias: float = 1.0,
                 h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, h0=h0, h0_noise_std=h0_noise_std)
        if isinstance(forget_bias, bool) or not isinstance(forget_bias, (int, float)):
            raise ValueError(f"forget_bias must be a number; got {forget_bias!r}")
        self.forget_bias = float(forget_bias)
        with torch.no_grad():  # Jozefowicz et al. 2015: start by remembering
            self.bias_ih[hidden_size:2 * hidden_size] += self.forget_bias
        self.state_size = 2 * hidden_size
        self._init_initial_state()

    def _forward_fast(self, x: Tensor, h0: Tensor, impl: str):
        h, c = h0[:, :self.hidden_size], h0[:, self.hidden_size:]
        outputs, h_last, c_last = torch.lstm(
            x, (h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()), self._params(),
            True, 1, 0.0, self._keeps_backward(), False, True)
        self._remember(x, h0, outputs)
        return outputs, torch.cat([h_last[0], c_last[0]], dim=1)

    def _forward_loop(self, x, h0, state_probe):
        outputs, state = super()._forward_loop(x, h0, state_probe)
        self._remember(x, h0, outputs)
        return outputs, state

    def _prepare(self, x: Tensor) -> dict:
        return {"inputs": x.transpose(0, 1) @ self.weight_ih.t() + self.bias_ih + self.bias_hh}

    def _step(self, u_t: Tensor, state: Tensor, context: dict) -> Tensor:
        h, c = state.chunk(2, dim=1)
        i, f, g, o = (u_t + h @ self.weight_hh.t()).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return torch.cat([h, c], dim=1)

    def _emit(self, state: Tensor) -> Tensor:
        return state[:, :self.hidden_size]

    def gate_values(self) -> dict[str, float]:
        parts = self._gate_preactivations()
        if parts is None:
            return {}
        i, f, _, o = torch.sigmoid(parts[0] + parts[1]).chunk(4, dim=-1)
        return {"input": i.mean().item(), "forget": f.mean().item(), "output": o.mean().item()}


class GRU(_GatedCell):
    """``gru``: the standard GRU."""

    summary = "Gated recurrent unit"
    equations = (r"n_t = \tanh(U_n x_t + r_t \odot (W_n h_{t-1} + b_n))",
                 r"h_t = (1 - z_t) \odot n_t + z_t \odot h_{t-1}")
    paper = "Cho et al. 2014"

    gate_count = 3
    candidate_block = 2  # (r, z, n)

    def __init__(self, input_size: int, hidden_size: int, *, h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, h0=h0, h0_noise_std=h0_noise_std)
        self._init_initial_state()

    def _forward_fast(self, x: Tensor, h0: Tensor, impl: str):
        outputs, h_last = torch.gru(x, h0.unsqueeze(0).contiguous(), self._params(),
                                    True, 1, 0.0, self._keeps_backward(), False, True)
        self._remember(x, h0, outputs)
        return outputs, h_last[0]

    def _forward_loop(self, x, h0, state_probe):
        outputs, state = super()._forward_loop(x, h0, state_probe)
        self._remember(x, h0, outputs)
        return outputs, state

    def _prepare(self, x: Tensor) -> dict:
        return {"inputs": x.transpose(0, 1) @ self.weight_ih.t() + self.bias_ih}

    def _step(self, u_t: Tensor, h: Tensor, context: dict) -> Tensor:
        x_r, x_z, x_n = u_t.chunk(3, dim=1)
        h_r, h_z, h_n = (h @ self.weight_hh.t() + self.bias_hh).chunk(3, dim=1)
        r = torch.sigmoid(x_r + h_r)
        z = torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * h_n)
        return (1 - z) * n + z * h

    def gate_values(self) -> dict[str, float]:
        parts = self._gate_preactivations()
        if parts is None:
            return {}
        (x_r, x_z, _), (h_r, h_z, _) = parts[0].chunk(3, dim=-1), parts[1].chunk(3, dim=-1)
        return {"update": torch.sigmoid(x_z + h_z).mean().item(),
                "reset": torch.sigmoid(x_r + h_r).mean().item()}
