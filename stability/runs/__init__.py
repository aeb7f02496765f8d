"""What a run leaves: its row and config (records), its metric rows (the store), and exports."""

from __future__ import annotations

from ..core.faces import lazy

# The room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py and
# benchmarks/ may import from it, each -> the module here that holds it (None: that module itself), imported
# on first use, so that importing the room imports none of its modules.
_FACE = {
    "RunNotFound": "errors", "StoreBusy": "errors", "StoreError": "errors", "StoreFull": "errors",
    "SweepNotFound": "errors", "not_readable": "errors", "csv_output": "export", "to_tensorboard": "export",
    "ENV_VAR": "location", "default_path": "location", "masked": "location", "RunRecord": "records",
    "ACTIVE_STATUSES": "status", "TERMINAL": "status", "RunActive": "store", "RunStore": "store", "LEFT_OUT": "table",
    "run_table": "table",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
