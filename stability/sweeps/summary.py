"""What a sweep found: one row per run, and the objective's mean, min and max over seeds per setting.

    frame = results(store, sweep_id)      # run_id, trial, seed, status, objective, step, setting, <fields>
    rows = setting_rows(frame, spec)      # what ``sweeps show --json`` prints, a setting a line
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ..config.fields import setting_label
from .spec import SweepSpec, objective_name

def results(store, sweep_id: int) -> pd.DataFrame:
    """One row per run of the sweep: run_id, trial, seed, status, objective (the run's final
    :func:`objective_name`; NaN without one), step, setting (a label of the varied values,
    the same for runs that differ only in seed), then one column per varied field (``spec.vary``'s
    order), named by its path."""

    spec = SweepSpec.from_dict(store.sweep(sweep_id)["spec"])
    objective = objective_name(spec)
    fields_ = [vary.field for vary in spec.vary]
    rows = []
    for run in sorted(store.records(sweep_id=sweep_id), key=lambda run: (run.trial is None, run.trial, run.id)):
        params = {path: run.params.get(path) for path in fields_}
        seed = (run.raw_config.get("train") or {}).get("seed")
        rows.append({"run_id": run.id, "trial": run.trial, "seed": seed, "status": run.status,
                     "objective": run.latest.get(objective, math.nan), "step": run.step,
                     "setting": setting_label(params), **params})
    frame = pd.DataFrame(rows, columns=["run_id", "trial", "seed", "status", "objective", "step", "setting", *fields_])
    return frame.astype({"run_id": "int64", "trial": "Int64", "seed": "int64", "status": "object",
                         "objective": "float64", "step": "Int64", "setting": "object"})


def setting_rows(frame: pd.DataFrame, spec: SweepSpec) -> list[dict[str, Any]]:
    """One dict per setting of :func:`results` (in the order its first run was asked): ``setting``
    (field path -> value), ``runs`` (each seed's run_id, seed, status, objective), and ``mean``,
    ``min``, ``max`` of the objective over the setting's completed runs (None when none completed),
    ``completed``, ``diverged``, ``pruned`` (counts). What ``sweeps show --json`` prints, a line each."""
    fields_ = [vary.field for vary in spec.vary]
    rows = []
    for _, group in frame.groupby("setting", sort=False):
        finals = group.loc[(group["status"] == "completed") & group["objective"].notna(), "objective"]
        finals = finals[finals.map(math.isfinite)]
        first = group.iloc[0]
        rows.append({
            "setting": {path: _json_value(first[path]) for path in fields_},
            "runs": [{"run_id": int(run.run_id), "seed": int(run.seed), "status": run.status,
                      "objective": _json_value(run.objective)} for run in group.itertuples()],
            "mean": float(finals.mean()) if len(finals) else None,
            "min": float(finals.min()) if len(finals) else None,
            "max": float(finals.max()) if len(finals) else None,
            **{status: int((group["status"] == status).sum()) for status in ("completed", "diverged", "pruned")}})
    return rows


def _json_value(value: Any) -> Any:
    """A cell of a results frame as JSON: numpy scalars as Python numbers, NaN/missing as None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):
        value = value.item()
        return None if isinstance(value, float) and math.isnan(value) else value
    return value
