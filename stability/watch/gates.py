"""Gate statistics of an ``nn.LSTM`` or ``nn.GRU``, from its last forward pass, only when asked.

A forward hook keeps a reference to the module's last input and initial state (nothing is copied
or computed while training); :meth:`GateRecorder.gates` then replays that pass without gradients,
layer by layer and direction by direction, with PyTorch's documented update (``torch.nn.LSTM``,
``torch.nn.GRU``; gate rows in the order i, f, g, o and r, z, n)::

    LSTM   i, f, o = σ(W_i* x_t + b_i* + U_i* h_{t-1} + b_h*)     GRU   r, z = σ(W_r* x_t + b_ir + U_r* h + b_hr)
           c_t = f c_{t-1} + i tanh(W_g x_t + U_g h_{t-1} + b)          n = tanh(W_n x_t + b_in + r (U_n h + b_hn))
           h_t = o tanh(c_t)  (times W_hr with proj_size)                h_t = (1 − z) n + z h_{t-1}

and returns the mean of each gate over batch, time and units, named as our own cells name them
(stability/cells/gated.py: ``input``, ``forget``, ``output``; ``update``, ``reset``). The replay
leaves out the dropout between layers (a gate's mean is read as at evaluation). A packed sequence
is not replayed (no gates then).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


class GateRecorder:
    """Remembers the last forward pass of ``module`` (an ``nn.LSTM`` or ``nn.GRU``) and replays it on demand."""

    def __init__(self, module: nn.LSTM | nn.GRU):
        self.module = module
        self._last: tuple[Tensor, object] | None = None
        self._cache: list[dict[str, float]] | None = None
        self.handle = module.register_forward_hook(self._remember, with_kwargs=True)

    def _remember(self, module, args, kwargs, output) -> None:
        hx = args[1] if len(args) > 1 else kwargs.get("hx")
        self._last, self._cache = (args[0] if args else kwargs.get("input"), hx), None

    def remove(self) -> None:
        self.handle.remove()

    def gates(self, index: int) -> dict[str, float]:
        """The gate means of unit ``index`` (layer k, direction d: ``k * directions + d``) of the last
        forward pass; {} before one, or for a packed sequence."""
        if self._cache is None:
            self._cache = self._replay()
        return self._cache[index] if index < len(self._cache) else {}

    def _replay(self) -> list[dict[str, float]]:
        if self._last is None or isinstance(self._last[0], nn.utils.rnn.PackedSequence):
            return []
        x, hx = self._last
        module = self.module
        with torch.no_grad():
            x = x.detach()
            if x.dim() == 2:  # an unbatched sequence (T, I)
                x = x.unsqueeze(1)
                hx = _unbatched(hx)
            elif module.batch_first:
                x = x.transpose(0, 1)  # (T, B, I)
            return self._layers(x, hx)

    def _layers(self, x: Tensor, hx) -> list[dict[str, float]]:
        module, stats = self.module, []
        directions = 2 if module.bidirectional else 1
        h_all, c_all = (hx if isinstance(hx, tuple) else (hx, None)) if hx is not None else (None, None)
        for k in range(module.num_layers):
            outputs = []
            for d in range(directions):
                index = k * directions + d
                suffix = f"_l{k}{'_reverse' if d else ''}"
                h = h_all[index].detach() if h_all is not None else x.new_zeros(x.shape[1], _state(module))
                c = c_all[index].detach() if c_all is not None else x.new_zeros(x.shape[1], module.hidden_size)
                sequence = x.flip(0) if d else x
                out, means = self._direction(sequence, h, c, suffix)
                outputs.append(out.flip(0) if d else out)
                stats.append(means)
            x = torch.cat(outputs, dim=-1)  # (T, B, directions * H): the next layer's input
        return stats

    def _direction(self, x: Tensor, h: Tensor, c: Tensor, suffix: str) -> tuple[Tensor, dict[str, float]]:
        """One layer and direction over the sequence ``x`` (T, B, I): its outputs and gate means."""
        module = self.module
        w_ih, w_hh = getattr(module, f"weight_ih{suffix}"), getattr(module, f"weight_hh{suffix}")
        b_ih = getattr(module, f"bias_ih{suffix}") if module.bias else torch.zeros_like(w_ih[:, 0])
        b_hh = getattr(module, f"bias_hh{suffix}") if module.bias else torch.zeros_like(w_hh[:, 0])
        inputs = x.to(w_ih.dtype) @ w_ih.t() + b_ih  # (T, B, G*H)
        lstm = isinstance(module, nn.LSTM)
        sums = torch.zeros(3 if lstm else 2, dtype=w_ih.dtype, device=w_ih.device)
        outputs = []
        for u_t in inputs:
            hidden = h @ w_hh.t() + b_hh
            if lstm:
                i, f, g, o = (u_t + hidden).chunk(4, dim=1)
                i, f, o = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o)
                c = f * c + i * torch.tanh(g)
                h = o * torch.tanh(c)
                if module.proj_size:
                    h = h @ getattr(module, f"weight_hr{suffix}").t()
                sums += torch.stack([i.mean(), f.mean(), o.mean()])
            else:
                (x_r, x_z, x_n), (h_r, h_z, h_n) = u_t.chunk(3, dim=1), hidden.chunk(3, dim=1)
                r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
                h = (1 - z) * torch.tanh(x_n + r * h_n) + z * h
                sums += torch.stack([z.mean(), r.mean()])
            outputs.append(h)
        means = (sums / max(1, len(inputs))).tolist()
        names = ("input", "forget", "output") if lstm else ("update", "reset")
        return torch.stack(outputs), dict(zip(names, means))


def _state(module: nn.Module) -> int:
    """The size of the state h a layer carries (an LSTM's ``proj_size`` where it has one)."""
    return getattr(module, "proj_size", 0) or module.hidden_size


def _unbatched(hx):
    """An unbatched pass's initial state (L*D, H) with a batch of one (L*D, 1, H)."""
    if hx is None:
        return None
    if isinstance(hx, tuple):
        return tuple(part.unsqueeze(1) for part in hx)
    return hx.unsqueeze(1)
