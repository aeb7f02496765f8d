"""Build a config's task and model and train them, in this process, and return how it ended.

    result = build_and_train(config)                  # rows kept in memory
    result.status, result.metrics                     # "completed", a DataFrame (step, wall_time, name, value)
    build_and_train(config, hooks=[MemorySink("ckpt")], resume=True)   # continue from a sink's checkpoint

Not the public ``stability.train_run`` (:func:`stability.execution.lifecycle.train_run`): that one, given a
store, claims a run of it, hands this function a :class:`~stability.training.sinks.StoreSink` and writes
the run's status; this function knows no store and no status, only the sink among its hooks.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..config import RunConfig
from ..core.devices import on_host
from .build import build_model, build_task
from .sinks import TrainResult
from .trainer import Trainer


def build_and_train(config: RunConfig, *, hooks=(), progress: Callable[[dict], None] | None = None,
                    resume: bool = False) -> TrainResult:
    """Train ``config`` in this process; return its :class:`~stability.training.sinks.TrainResult`.

    The rows go to the sink among ``hooks`` (kept in memory without one).  The status is
    ``"completed"``, ``"stopped"``, ``"diverged"`` or a hook's; any other problem is raised after
    every hook's ``on_exception``.  ``resume=True`` continues from the sink's checkpoint
    (:class:`~stability.training.checkpoints.ResumeError` when there is none).  The model's
    initial weights follow ``config.train.seed``.
    """
    config.validate()
    torch.manual_seed(config.train.seed)
    with on_host():  # built on the CPU; the trainer moves the model to its device
        task = build_task(config)
        model = build_model(config, task)
    return Trainer(model, task, config, hooks=hooks, progress=progress).fit(resume=resume)
