"""What a sweep found: one row per run, and the objective's mean, min and max over seeds per setting.

    frame = results(store, sweep_id)      # run_id, trial, seed, status, objective, step, setting, <fields>
    rows = setting_rows(frame, spec)      # what ``sweeps show --json`` prints, a setting a line
    stats = seed_statistics(frame["objective"], frame["status"], frame["setting"])   # mean, min, max, std, n

:func:`seed_statistics` is the one place the objective is summarised over a setting's seeds: the
CLI's rows here and the Sweep page's table (:func:`stability.analysis.groups.setting_table`) both
read it. Which runs count is Note [Which runs count] in :mod:`stability.analysis.groups`.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..config.fields import setting_label
from .spec import SweepSpec, objective_name

COUNTED = ("completed",)  # the statuses whose objective is a final one (Note [Which runs count])


def results(store, sweep_id: int) -> pd.DataFrame:
    """One row per run of the sweep: run_id, trial, seed, status, objective (the run's final
    :func:`objective_name`; NaN without one), step, setting (a label of the varied values,
    the same for runs that differ only in seed), then one column per varied field (``spec.vary``'s
    order), named by its path."""

    spec = SweepSpec.from_dict(store.sweep(sweep_id).spec)
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
    stats = seed_statistics(frame["objective"], frame["status"], frame["setting"])
    rows = []
    for label, group in frame.groupby("setting", sort=False):
        first, counted = group.iloc[0], stats.loc[label]
        rows.append({
            "setting": {path: _json_value(first[path]) for path in fields_},
            "runs": [{"run_id": int(run.run_id), "seed": int(run.seed), "status": run.status,
                      "objective": _json_value(run.objective)} for run in group.itertuples()],
            **{name: float(counted[name]) if counted["n"] else None for name in ("mean", "min", "max")},
            **{status: int((group["status"] == status).sum()) for status in ("completed", "diverged", "pruned")}})
    return rows


def counted_objective(objective: pd.Series, status: pd.Series) -> pd.Series:
    """Each run's objective where it counts (a :data:`COUNTED` status and a finite value), else NaN."""
    values = pd.to_numeric(objective, errors="coerce").astype(float)
    return values.where(status.isin(COUNTED) & np.isfinite(values))


def seed_statistics(objective: pd.Series, status: pd.Series, settings: pd.Series) -> pd.DataFrame:
    """Per setting (``settings``: each run's setting key, aligned with ``objective`` and ``status``), in
    the order first seen: ``mean``, ``min``, ``max`` and ``std`` (ddof = 1) of the objective over the
    setting's counted runs (:func:`counted_objective`; NaN without one, std also with one) and ``n``,
    how many counted."""
    by = counted_objective(objective, status).groupby(settings, sort=False)
    return pd.DataFrame({"mean": by.mean(), "min": by.min(), "max": by.max(), "std": by.std(ddof=1),
                         "n": by.count()})


def _json_value(value: Any) -> Any:
    """A cell of a results frame as JSON: numpy scalars as Python numbers, NaN/missing as None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):
        value = value.item()
        return None if isinstance(value, float) and math.isnan(value) else value
    return value
