"""stability: a lab for watching gradients stay stable, or not, in recurrent networks.

The public names, from one place::

    from stability import cells, tasks, hooks, metric_names
    from stability import RunConfig, CellConfig, TaskConfig, TrainConfig, ConfigError
    from stability import Trainer, train_run, TrainResult, RunStore

Each name is imported when it is first used, so ``import stability.core.metric_names`` (or a page
that needs only the store) does not pay for torch, Optuna or Altair. docs/architecture.md is the
map of the rooms these names come from.
"""
from __future__ import annotations

from .core.faces import named

# name -> (module, attribute); attribute None: the module itself
_PUBLIC: dict[str, tuple[str, str | None]] = {
    "cells": ("stability.cells", None),
    "tasks": ("stability.tasks", None),
    "parametrizations": ("stability.parametrizations", None),
    "metric_names": ("stability.core.metric_names", None),
    "hooks": ("stability.training.hooks", None),
    "sweeps": ("stability.sweeps", None),
    "watch": ("stability.watch", None),
    "ConfigError": ("stability.core.errors", "ConfigError"),
    "RunConfig": ("stability.config", "RunConfig"),
    "CellConfig": ("stability.config", "CellConfig"),
    "TaskConfig": ("stability.config", "TaskConfig"),
    "TrainConfig": ("stability.config", "TrainConfig"),
    "Trainer": ("stability.training.trainer", "Trainer"),
    "train_run": ("stability.execution.lifecycle", "train_run"),
    "TrainResult": ("stability.training.sinks", "TrainResult"),
    "Hook": ("stability.training.hooks", "Hook"),
    "RunStore": ("stability.runs.store", "RunStore"),
    "RunRecord": ("stability.runs.records", "RunRecord"),
    "SweepRecord": ("stability.runs.records", "SweepRecord"),
    "diagnose": ("stability.analysis.diagnosis", "diagnose"),
}

__all__ = sorted(_PUBLIC)


__getattr__, __dir__ = named(__name__, _PUBLIC)
