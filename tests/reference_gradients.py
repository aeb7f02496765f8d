"""An independent re-derivation of ‖∂L/∂h_t‖ for the tests: float64, step by step, in log space.

The trainer's readings come from one backward pass through the whole
sequence (:class:`stability.training.probes.ProbeBatch`).  This walks back one
step at a time instead, with ``torch.autograd.grad`` of h_t with respect to
a detached h_{t-1}, and keeps the carried gradient as (log-scale, unit
vector): g_{t-1} = J_tᵀ g_t = e^s J_tᵀ v.  Nothing can underflow, whatever T.
"""
from __future__ import annotations

import math

import torch


def log10_state_gradient_norms(model, loss, x, y) -> list[float]:
    """log10 ‖∂L/∂h_t‖ for t = 0..T (Frobenius over the batch and the state; -inf for an exact 0).

    ``model`` is a :class:`stability.models.sequence.SequenceModel` whose cell has the
    reference loop (``_prepare``/``_step``/``_emit``); it is run in float64 as given.
    """
    cell = model.cell
    x = x.double()
    y = y.double() if y.is_floating_point() else y
    h = cell.initial_state(x.shape[0], dtype=torch.float64)
    with torch.nn.utils.parametrize.cached():
        context = cell._prepare(x)
        leaves, states = [], []
        for u_t in context["inputs"].unbind(0):
            leaf = h.detach().requires_grad_()
            h = cell._step(u_t, leaf, context)
            leaves.append(leaf)
            states.append(h)
        ends = [state.detach().requires_grad_() for state in states]
        outputs = torch.stack([cell._emit(end) for end in ends], dim=1)
        if model.target_mode == "last":
            outputs = outputs[:, -1]
        direct = torch.autograd.grad(loss(model.readout(outputs), y), ends, allow_unused=True)
        logs = [-math.inf] * (len(states) + 1)
        log_scale, unit = -math.inf, None
        for t in range(len(states) - 1, -1, -1):
            terms = [] if unit is None else [(log_scale, unit)]
            if direct[t] is not None and direct[t].abs().max() > 0:
                norm = direct[t].norm()
                terms.append((math.log(norm.item()), direct[t] / norm))
            if not terms:
                continue
            top = max(a for a, _ in terms)
            total = sum(math.exp(a - top) * v for a, v in terms)
            norm = total.norm().item()
            if norm == 0:
                log_scale, unit = -math.inf, None
                continue
            log_scale, unit = top + math.log(norm), total / norm
            logs[t + 1] = log_scale / math.log(10)
            (back,) = torch.autograd.grad(states[t], leaves[t], unit, retain_graph=True)
            norm = back.norm().item()
            log_scale, unit = (log_scale + math.log(norm), back / norm) if norm > 0 else (-math.inf, None)
        logs[0] = log_scale / math.log(10)
    return logs
