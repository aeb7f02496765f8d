"""Train a run from its config, in this process: build the task and the model, hand them to the
:class:`~stability.training.trainer.Trainer`, and return how it ended.

    result = train_run(config)                        # rows kept in memory
    result.status, result.metrics                     # "completed", a DataFrame (step, wall_time, name, value)
    result = train_run(config, store)                 # a new run of the store, trained
    train_run(config, store, run_id, resume=True)     # continue a stopped run from its checkpoint
"""
from __future__ import annotations

import os
from typing import Callable

import torch

from ..config import RunConfig
from ..core.devices import on_host
from .build import build_model, build_task
from .checkpoints import ResumeError
from .sinks import StoreSink, TrainResult
from .trainer import Trainer


def train_run(config: RunConfig, store=None, run_id: int | None = None, *, hooks=(),
              progress: Callable[[dict], None] | None = None, resume: bool = False) -> TrainResult:
    """Train ``config`` in this process; return its :class:`~stability.training.sinks.TrainResult`.

    With a ``store`` (a :class:`stability.runs.store.RunStore`) the rows, the run's columns and its
    terminal status go to run ``run_id`` of it (a new run named ``config.name`` when ``run_id`` is
    None), through a :class:`~stability.training.sinks.StoreSink`; without one they are kept in
    memory (or by a sink among ``hooks``).  The status is ``"completed"``, ``"stopped"``,
    ``"diverged"`` or a hook's; any other problem is raised after every hook's ``on_exception``,
    leaving the run's status to the caller (a run created here is marked ``failed`` here: no
    caller knows its id).  ``resume=True`` continues from the run's checkpoint
    (:class:`~stability.training.checkpoints.ResumeError` when there is none).  The model's
    initial weights follow ``config.train.seed``.
    """
    config.validate()
    if store is None and run_id is not None:
        raise ValueError(f"run_id {run_id} names a run of a store; give the store too")
    if store is not None and run_id is None and resume:
        raise ResumeError("resume needs the id of the run to continue")
    torch.manual_seed(config.train.seed)
    with on_host():  # built on the CPU; the trainer moves the model to its device
        task = build_task(config)
        model = build_model(config, task)
    created = store is not None and run_id is None
    if created:
        run_id = _create_claimed_run(store, config)
    if store is not None:
        hooks = [StoreSink(store, run_id), *hooks]
    try:
        return Trainer(model, task, config, hooks=hooks, progress=progress).fit(resume=resume)
    except Exception as error:
        if created:  # no caller knows this run's id to settle it
            message = str(error).strip().splitlines()
            store.set_status(run_id, "failed", error=f"{type(error).__name__}: {message[0]}" if message
                             else type(error).__name__)
        raise


def _create_claimed_run(store, config: RunConfig) -> int:
    """A new run of ``store`` for ``config``, claimed by this process (its pid) so that a run queue
    sharing the store does not hand it to a worker as well (``runner.create_attached_run`` does
    the same under the queue's lock; pass its id where a queue runs beside this process)."""
    run_id = store.create_run(config.to_dict(), config.name)
    store.update_run(run_id, pid=os.getpid())
    return run_id
