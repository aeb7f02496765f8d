"""One row per stored run: its config summary, progress and final metrics.

    table = run_table(RunStore())          # newest first, like RunStore.records()

The one table of runs: what the Compare and Runs pages show and select from, read in two
queries however many runs there are (:meth:`RunStore.records`: the runs, then
every run's latest values from the store's latest-metrics table). Columns:

==========================  ==================================================
``id``, ``name``, ``status``  as stored
``cell``, ``hidden``        the cell's name and hidden size
``task``, ``seq_len``       the task's name and length (NaN where it has none)
``steps``, ``lr``, ``seed``  the training budget, learning rate and seed
``step``, ``total_steps``   the last step a worker reported, and the budget
``progress``                ``step / total_steps`` in [0, 1] (0 before the first report)
``created``                 ``created_at`` as a local datetime
``device``, ``error``       as stored; for a run whose stored config no longer
                            parses, ``error`` says why (and the config columns
                            other than ``cell`` and ``task`` are empty)
``metric``, ``baseline``,   the task's metric name and its memoryless baseline,
``baseline_label``          known once a worker has built the task
``sweep_id``, ``trial``      the run's sweep and Optuna trial (``<NA>`` for a run of no sweep)
``external``                whether it was logged from someone's own loop (stability.watch)
``varied``                  the sweep's values of the run (``cell=rnn lr=0.001``; "" for none)
``val/...``, ``test/...``   the last logged value of every held-out metric (the loss's and
                            the task metrics', then at most 20 others: Note [Metric columns])
==========================  ==================================================
"""
from __future__ import annotations

import math
from datetime import datetime

import pandas as pd

from ..core.metric_names import FINAL_PREFIXES, is_final
from .records import RunRecord
from .store import RunStore
from ..config.fields import setting_label

SUMMARY_COLUMNS = ["id", "name", "status", "cell", "hidden", "task", "seq_len", "steps", "lr", "seed",
                   "step", "total_steps", "progress", "created", "device", "error",
                   "metric", "baseline", "baseline_label", "sweep_id", "trial", "external", "varied"]


MAX_OTHER_FINALS = 20  # held-out metric columns beyond the tasks' own (Note [Metric columns])
LEFT_OUT = "finals_left_out"  # frame.attrs: how many held-out metric columns the table leaves out

# Note [Metric columns]
# ---------------------
# A run logged from someone's own loop may name any metric: one logging 3,000 ``val/*`` names made the
# Runs table 3,016 columns wide (7.5 s a refresh).  The table keeps the held-out columns of the loss and of
# every run's task metric (``val/loss``, ``val/accuracy`` ...), then at most MAX_OTHER_FINALS others in
# their order (final_order); ``frame.attrs[LEFT_OUT]`` says how many it left out, for the page's note.


def run_table(store: RunStore) -> pd.DataFrame:
    """Every run of ``store`` with the columns of the module docstring, newest first; the held-out metric
    columns capped (Note [Metric columns])."""
    rows = [_summary(record) for record in store.records()]
    finals, left_out = kept_finals(rows)
    if left_out:
        rows = [{key: value for key, value in row.items() if not is_final(key) or key in finals} for row in rows]
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS + finals)
    frame.attrs[LEFT_OUT] = left_out
    return frame.astype({"id": "int64", "hidden": "Int64", "seq_len": "Int64", "steps": "Int64", "seed": "Int64",
                         "step": "Int64", "total_steps": "Int64", "progress": "float64", "lr": "float64",
                         "sweep_id": "Int64", "trial": "Int64", "external": "bool",
                         "baseline": "float64", **{name: "float64" for name in finals}})


def kept_finals(rows: list[dict]) -> tuple[list[str], int]:
    """The held-out metric columns of ``rows`` the table keeps, in :func:`final_order`, and how many it
    leaves out: the loss's and the runs' task metrics', then at most :data:`MAX_OTHER_FINALS` others."""
    names = {key for row in rows for key in row if is_final(key)}
    known = {f"{prefix}{metric}" for prefix in FINAL_PREFIXES
             for metric in {"loss", *(row["metric"] for row in rows if row["metric"])}}
    others = sorted(names - known, key=final_order)
    kept = (names & known) | set(others[:MAX_OTHER_FINALS])
    return sorted(kept, key=final_order), len(others) - min(len(others), MAX_OTHER_FINALS)


def final_order(name: str) -> tuple:
    """Sort key for final-metric columns: val before test, loss first within each."""
    split, _, metric = name.partition("/")
    return (FINAL_PREFIXES.index(split + "/"), metric != "loss", metric)


def _summary(record: RunRecord) -> dict:
    config = record.config
    return {
        "id": record.id, "name": record.name, "status": record.status,
        "cell": record.cell, "hidden": config.cell.hidden_size if config else None,
        "task": record.task, "seq_len": (config.task.options or {}).get("seq_len") if config else None,
        "steps": config.train.steps if config else None, "lr": config.train.lr if config else None,
        "seed": config.train.seed if config else None,
        "step": record.step, "total_steps": record.total_steps, "progress": record.progress,
        "created": datetime.fromtimestamp(record.created_at),
        "device": record.device or "", "error": record.error or record.config_problem or "",
        "metric": record.metric or "", "baseline": math.nan if record.baseline is None else record.baseline,
        "baseline_label": record.baseline_label or "",
        "sweep_id": record.sweep_id, "trial": record.trial, "external": record.external,
        "varied": setting_label(record.params) if record.params else "",
        **{name: value for name, value in record.latest.items() if is_final(name)},
    }
