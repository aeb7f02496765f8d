"""Step 0: the training readings of the model as built, before its first update.

A run's first rows used to be its first log step's: ``train/loss`` appeared ``log_every`` steps
after Start, and on a live page the loss chart stayed empty that long.  These readings are the
ones a log step takes, on the first training batch, at the weights the run starts from::

    train/loss          L(θ_0) on batch 1            (the loss step 1 then descends from)
    train/<metric>      the task's metric of that batch
    grad/h0_norm_train  ‖∂L/∂h0‖ on that batch, in the training dtype
    grad/total_norm     ‖∂L/∂θ‖ over every trained parameter
    grad/recurrent_norm ‖∂L/∂θ_W‖ over the parameters that build W (none while W is frozen)

together with what :class:`~stability.training.hooks.ProbeThroughTime` and
:class:`~stability.training.hooks.Evaluation` record at step 0 (``grad/h0_norm`` on the float64
probe batch, ``sv/*`` of W, ``val/*``), so every chart of a run has its first point as soon as
the model is built.

The batch is the run's own first batch (the trainer hands it to step 1 afterwards), and the
reading runs under :func:`torch.random.fork_rng`, so a cell that draws its h0 at random, or
dropout, takes nothing from the run's random stream: a run trains exactly as it did without
this reading.  Gradients are taken with :func:`torch.autograd.grad`, so no parameter's ``.grad``
is touched.  The numbers are read from the device in one transfer
(:mod:`stability.training.window`, Note [One read per log step]).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..core import metric_names as names
from .batches import batch_on
from .hooks import stacked_norm, step_norm
from .probes import stable_norm
from .window import StepWindow


def step_zero_readings(model: nn.Module, task, batch, device: torch.device, dtype: torch.dtype,
                       recurrent: list) -> dict[str, float]:
    """The step-0 rows (module docstring) of ``model`` on ``batch`` (as :func:`compact_batches` yields
    it), by metric name; a reading that is not finite is left out (step 1 finds a divergence)."""
    trained = [p for p in model.parameters() if p.requires_grad]
    recurrent_ids = {id(p) for p in recurrent if p.requires_grad}
    with torch.random.fork_rng(**_rng_devices(device)):
        x, y = batch_on(task, batch, device, dtype)
        h0 = model.cell.initial_state(x.shape[0], dtype=dtype, device=device)
        h0_probe = torch.zeros_like(h0).requires_grad_()
        pred, _ = model(x, h0 + h0_probe)
        loss = task.loss(pred, y)
        objective = loss + model.cell.penalty()
        window = StepWindow(task, 1)
        window.add(0, loss.detach(), objective.detach(), pred.detach(), y)
        grads = torch.autograd.grad(objective, [h0_probe, *trained], allow_unused=True)
    h0_grad, parameter_grads = grads[0], [(p, g) for p, g in zip(trained, grads[1:]) if g is not None]
    extras = {names.H0_NORM_TRAIN: stable_norm(h0_grad) if h0_grad is not None else math.nan}
    if parameter_grads:
        every = [g for _, g in parameter_grads]
        window.add_norm(step_norm(every))
        extras[names.TOTAL_NORM] = stacked_norm(every)
        of_w = [g for p, g in parameter_grads if id(p) in recurrent_ids]
        if of_w:
            extras[names.RECURRENT_NORM] = stacked_norm(of_w)
    reading = window.read(extras)  # one transfer: the loss, the score and the norms
    rows = {names.TRAIN_LOSS: reading.loss, names.split_name("train", task.metric): reading.score,
            **reading.extras}
    return {name: float(value) for name, value in rows.items() if math.isfinite(value)}


def _rng_devices(device: torch.device) -> dict:
    """``fork_rng``'s arguments that save and restore the host's generator and ``device``'s own."""
    if device.type == "cpu":
        return {"devices": []}
    return {"devices": [device.index or 0], "device_type": device.type}
