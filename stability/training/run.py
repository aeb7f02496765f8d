"""Train a run from its config, in this process: build the task and the model, hand them to the
:class:`~stability.training.trainer.Trainer`, and return how it ended.

    result = train_run(config)                        # rows kept in memory
    result.status, result.metrics                     # "completed", a DataFrame (step, wall_time, name, value)
    train_run(config, hooks=[MemorySink("ckpt")], resume=True)   # continue from a sink's checkpoint

A run of a run store is trained through :mod:`stability.execution.lifecycle` (its ``train_run``,
``stability.train_run``), which claims the run, hands this function a
:class:`~stability.training.sinks.StoreSink` and writes the run's status: this room does not
change a stored run's status.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..config import RunConfig
from ..core.devices import on_host
from .build import build_model, build_task
from .sinks import TrainResult
from .trainer import Trainer


def train_run(config: RunConfig, *, hooks=(), progress: Callable[[dict], None] | None = None,
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
