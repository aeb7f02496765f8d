"""What a training step of a model shape costs: its key, its operations, its seconds timed in this process.

    shape_of(config)                 # the key: cell, hidden size, options, task and options, batch, dtype, device
    operations_per_step(config)      # floating-point operations a step (stability.admission.budget.work)
    seconds = time_steps(config)     # a few steps timed here, on the CPU (the CLI's rough time)
    step_seconds(config, device, steps)   # the same on any device (benchmarks/paper_scale.py)

A shape is what decides a step's time. Timing it means building its model and training a few steps,
which the Streamlit server must never do itself (issue 20): it hands the shapes to the timing child
(:mod:`stability.workers.timing`, Note [Timing apart]), which calls :func:`time_steps` in its own
process. The sweeps' rough time (:mod:`stability.sweeps.rough_time`, Note [Rough time]) reads both.
"""
from __future__ import annotations

import json
import time

from .. import tasks
from ..config import RunConfig
from . import budget

TIMED_STEPS = 3
OPERATIONS_PER_S = 1e10  # an assumed CPU rate for float32 matrix products, before any shape is known


def shape_of(config: RunConfig) -> str:
    """The key of ``config``'s shape: what decides the time of a training step."""
    train = config.train
    return json.dumps([config.cell.name, config.cell.hidden_size, config.cell.options, config.task.name,
                       config.task.options, train.batch_size, train.dtype, train.device], sort_keys=True, default=str)


def operations_per_step(config: RunConfig) -> float | None:
    """Floating-point operations of a training step, evaluations and probes spread over the steps
    (stability.admission.budget.work); None when the task's options cannot be checked."""
    try:
        task = tasks.check(config.task.name, seed=config.train.seed, **config.task.options)
    except (ValueError, TypeError):
        return None
    return budget.work(config, task).per_step(config)


def time_steps(config: RunConfig) -> float | None:
    """Seconds one training step of ``config``'s model takes on this process's CPU (the median of a
    few, after one warm-up step; never on a GPU: Note [Rough time] in stability.sweeps.rough_time);
    None when the model or task cannot be built."""
    import torch

    try:
        return step_seconds(config, torch.device("cpu"), TIMED_STEPS, warm_up=1)
    except Exception:  # noqa: BLE001 - an estimate is optional; the sweep's own checks say what is wrong
        return None


def step_seconds(config: RunConfig, device, steps: int, *, warm_up: int = 1, task_options: dict | None = None,
                 penalty: bool = False, first_over: float | None = None) -> float:
    """The median seconds of ``steps`` training steps of ``config``'s model on ``device`` (forward, backward,
    optimizer step; with the cell's ``penalty`` if asked), after ``warm_up`` steps, each synchronised with the
    device. ``task_options`` replace the config's (a stand-in of a dataset's shapes); a first step over
    ``first_over`` seconds is the answer alone. Raises what building the model or task raises."""
    import torch

    from ..core.devices import synchronize
    from ..training.batches import batch_on, compact_batches
    from ..training.build import build_model, build_optimizer

    dtype = torch.float64 if config.train.dtype == "float64" else torch.float32
    task = tasks.build(config.task.name, seed=config.train.seed, **(task_options or config.task.options))
    model = build_model(config, task).to(device=device, dtype=dtype)
    optimizer = build_optimizer(model, config)
    batches = compact_batches(task, "train", config.train.batch_size)
    seconds = []
    for number in range(steps + warm_up):
        x, y = batch_on(task, next(batches), device, dtype)
        synchronize(device)
        started = time.perf_counter()
        optimizer.zero_grad()
        pred, _ = model(x)
        (task.loss(pred, y) + (model.cell.penalty() if penalty else 0)).backward()
        optimizer.step()
        synchronize(device)
        seconds.append(time.perf_counter() - started)
        if number == 0 and first_over is not None and seconds[0] > first_over:
            return seconds[0]
    timed = sorted(seconds[warm_up:])
    return timed[len(timed) // 2]
