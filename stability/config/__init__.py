"""One typed configuration for a run, from the page or the CLI to the worker and the store.

    from stability.config import RunConfig, CellConfig, TaskConfig, TrainConfig, ConfigError

:mod:`.run_config` holds the dataclasses and their validation, :mod:`.fields`
a field by its path, :mod:`.demos` the dashboard's starting configs.
"""
from __future__ import annotations

from ..core.errors import ConfigError
from .run_config import DEVICES, DTYPES, LR_SCHEDULES, OPTIMIZERS, CellConfig, RunConfig, TaskConfig, TrainConfig
from ..core.faces import lazy

__all__ = ["DEVICES", "DTYPES", "LR_SCHEDULES", "OPTIMIZERS", "CellConfig", "ConfigError", "RunConfig", "TaskConfig",
           "TrainConfig"]

# The rest of the room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py
# and benchmarks/ may import from it beside the ones above, each -> the module here that holds it (None: that
# module itself), imported on first use.
_FACE = {
    "GRADIENT_FLOW_CELL": "demos", "RACE_DEFAULTS": "demos", "race_cells": "demos", "fields": None, "Field": "fields",
    "SEED": "fields", "apply": "fields", "drop_undeclared": "fields", "field_label": "fields",
    "field_value": "fields", "flat_fields": "fields", "resolve_field": "fields", "setting_label": "fields",
    "check_options": "run_config",
}
__all__ += sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
