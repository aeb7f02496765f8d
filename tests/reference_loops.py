"""Step-by-step references under autograd, against which the fused kernels are tested."""
from __future__ import annotations

import torch
from torch import Tensor

from stability.cells.scan import apply_activation


def elman_loop(
    u: Tensor,
    weight: Tensor,
    h0: Tensor,
    activation: str = "tanh",
    negative_slope: float = 0.01,
    alpha: Tensor | None = None,
    beta: Tensor | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """The recurrence of :func:`stability.cells.scan.elman_scan`, step by step under autograd:
    s_t = φ(u_t + W h_{t-1}) and h_t = s_t, or h_t = α s_t + β h_{t-1} (FastRNN, SGORNN paper eq. 1)."""
    h = h0
    states = []
    for u_t in u.unbind(0):
        s = apply_activation(u_t + h @ weight.t(), activation, negative_slope, bias)
        h = s if alpha is None else alpha * s + beta * h
        states.append(h)
    return torch.stack(states)
