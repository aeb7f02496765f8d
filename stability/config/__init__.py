"""One typed configuration for a run, from the page or the CLI to the worker and the store.

    from stability.config import RunConfig, CellConfig, TaskConfig, TrainConfig, ConfigError

:mod:`.run_config` holds the dataclasses and their validation, :mod:`.fields`
a field by its path, :mod:`.demos` the dashboard's starting configs.
"""
from __future__ import annotations

from ..core.errors import ConfigError
from .run_config import DEVICES, DTYPES, LR_SCHEDULES, OPTIMIZERS, CellConfig, RunConfig, TaskConfig, TrainConfig

__all__ = ["DEVICES", "DTYPES", "LR_SCHEDULES", "OPTIMIZERS", "CellConfig", "ConfigError", "RunConfig", "TaskConfig",
           "TrainConfig"]
