"""One row per stored run: its config summary, progress and final metrics.

    table = run_table(RunStore())          # newest first, like RunStore.runs()

The table the Compare and Runs pages show and select from. Columns:

==========================  ==================================================
``id``, ``name``, ``status``  as stored
``cell``, ``hidden``        the cell's name and hidden size
``task``, ``seq_len``       the task's name and length (NaN where it has none)
``steps``, ``lr``, ``seed``  the training budget, learning rate and seed
``step``, ``total_steps``   the last step a worker reported, and the budget
``progress``                ``step / total_steps`` in [0, 1] (0 before the first report)
``created``                 ``created_at`` as a local datetime
``device``, ``error``       as stored
``metric``, ``baseline``,   the task's metric name and its memoryless baseline,
``baseline_label``          known once a worker has built the task
``val/...``, ``test/...``   the last logged value of every held-out metric
==========================  ==================================================
"""
from __future__ import annotations

import math
from datetime import datetime

import pandas as pd

from .store import RunStore

SUMMARY_COLUMNS = ["id", "name", "status", "cell", "hidden", "task", "seq_len", "steps", "lr", "seed",
                   "step", "total_steps", "progress", "created", "device", "error",
                   "metric", "baseline", "baseline_label"]
FINAL_PREFIXES = ("val/", "test/")


def run_table(store: RunStore) -> pd.DataFrame:
    """Every run of ``store`` with the columns of the module docstring, newest first."""
    rows = [_summary(store.run(run_id), store.latest(run_id)) for run_id in store.runs()["id"]]
    finals = sorted({key for row in rows for key in row if key.startswith(FINAL_PREFIXES)}, key=final_order)
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS + finals)
    return frame.astype({"id": "int64", "hidden": "Int64", "seq_len": "Int64", "steps": "Int64", "seed": "Int64",
                         "step": "Int64", "total_steps": "Int64", "progress": "float64", "lr": "float64",
                         "baseline": "float64", **{name: "float64" for name in finals}})


def final_order(name: str) -> tuple:
    """Sort key for final-metric columns: val before test, loss first within each."""
    split, _, metric = name.partition("/")
    return (FINAL_PREFIXES.index(split + "/"), metric != "loss", metric)


def _summary(run: dict, latest: dict[str, float]) -> dict:
    config = run["config"]
    cell, task, train = (config.get(section) or {} for section in ("cell", "task", "train"))
    step, total = run["step"], run["total_steps"] or train.get("steps")
    return {
        "id": run["id"], "name": run["name"] or "", "status": run["status"],
        "cell": cell.get("name"), "hidden": cell.get("hidden_size"),
        "task": task.get("name"), "seq_len": (task.get("options") or {}).get("seq_len"),
        "steps": train.get("steps"), "lr": train.get("lr"), "seed": train.get("seed"),
        "step": step, "total_steps": total,
        "progress": min(1.0, (step or 0) / total) if total else 0.0,
        "created": datetime.fromtimestamp(run["created_at"]),
        "device": run["device"] or "", "error": run["error"] or "",
        "metric": run["metric"] or "", "baseline": math.nan if run["baseline"] is None else run["baseline"],
        "baseline_label": run["baseline_label"] or "",
        **{name: value for name, value in latest.items() if name.startswith(FINAL_PREFIXES)},
    }
