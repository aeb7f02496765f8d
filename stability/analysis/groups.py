"""Seed groups: runs that differ only in their seed, and the statistics drawn over them (pure pandas).

    table = setting_table(results, ["cell", "train.lr"])      # one row per setting: mean/min/max over seeds
    groups = seed_groups(store.records())                     # {"cell=rnn lr=0.001": [3, 7, 9], ...}
    curves = group_curves(store.metrics_many(ids), {3: "a", 7: "a", 9: "b"}, "grad/h0_norm")

A sweep runs every setting (one value of each varied field) with N seeds; the Sweep page and
``python -m stability sweeps show`` summarise the seeds of a setting, and the Compare page draws runs
that differ only in seed as one line with a band.  ``results`` is :func:`stability.sweeps.results`'s
frame (one row per run: ``run_id``, ``status``, ``objective``, ``setting``, one column per varied field).

Note [Which runs count]
-----------------------
A setting's mean, min, max and std are taken over its *completed* runs with a finite objective: the
objective is the run's final validation loss, and only a completed run has a final one.  A diverged run
has none (NaN or inf) and is counted in ``diverged``; a pruned, stopped, failed or interrupted run ended
early, so its last validation loss is not a final one and would pull the mean towards the losses of
half-trained models (a pruned trial's loss is high by construction); a running run's value still moves.
Each is counted in its status column instead, so the table says how many seeds stand behind a mean
(``n``) and what happened to the others.  ``std`` is the sample standard deviation (ddof = 1), NaN
below two counted runs.  A setting without a counted run has NaN statistics and no rank.  This table
and ``sweeps show`` take them from one function, :func:`stability.sweeps.summary.seed_statistics`.

Note [Geometric mean on a log axis]
-----------------------------------
Gradient norms and singular values span decades, and the pages draw them on a log axis, where the
arithmetic mean of 1e-3 and 1e-21 (5e-4) sits on the larger one.  :func:`group_curves` averages such a
metric as a geometric mean, 10 ** mean(log10 v), over the positive values.  A value of exactly 0 (a
gradient that vanished below float64's range, docs/readings.md) has no logarithm: it is counted in
``zeros`` and left out of the mean, but ``min`` is 0, so the band reaches the bottom of the axis, where
stability.charts draws 0 with a marker and says so in the tooltip.  All values 0: the mean is 0 too.
A +inf (overflow) makes the mean +inf, drawn at the top edge, flagged.  NaN (a diverged value) is
skipped by every statistic and not counted in ``n``.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..config.fields import field_value, flat_fields, setting_label  # a field, and a setting, as runs name them
from ..core.metric_names import is_log_metric
from ..sweeps.summary import counted_objective, seed_statistics  # Note [Which runs count]

# The status columns of setting_table; each gathers these run statuses.
STATUS_COLUMNS = {"completed": ("completed",), "diverged": ("diverged",), "pruned": ("pruned",),
                  "stopped": ("stopped",), "failed": ("failed", "interrupted"), "running": ("queued", "running")}
DIRECTIONS = ("minimize", "maximize")
CURVE_COLUMNS = ["group", "step", "mean", "min", "max", "n", "zeros"]


# ------------------------------------------------------------------------------- settings
def setting_table(results: pd.DataFrame, fields: list[str], direction: str = "minimize") -> pd.DataFrame:
    """One row per setting (distinct values of ``fields`` in ``results``), best first.

    Columns: the ``fields``; ``setting`` (a label of their values, ``cell=rnn lr=0.001``; with no fields,
    the runs' own ``setting``); ``mean``, ``min``, ``max``,
    ``std`` of ``objective`` and ``n``, the runs they are taken over (Note [Which runs count]);
    ``seeds`` (every run of the setting); the status counts of :data:`STATUS_COLUMNS`; ``best_run``
    (the counted run with the best objective, ``<NA>`` if none); ``rank`` by mean in ``direction``
    (1 = best, ties share the best rank, ``<NA>`` without a mean).  A None field value is a value of
    its own (e.g. no gradient clipping).
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    missing = [name for name in [*fields, "run_id", "status", "objective"] if name not in results]
    if missing:
        raise ValueError(f"results lack the column(s) {', '.join(missing)}")
    fields = list(fields)
    data = results.reset_index(drop=True)
    keys = data[fields].astype(object).map(_hashable) if fields else pd.DataFrame(index=data.index)
    codes = (keys.groupby(fields, sort=False, dropna=False).ngroup() if fields
             else pd.Series(0, index=data.index))
    shown = counted_objective(data["objective"], data["status"])  # NaN for every run that does not count
    firsts = data.groupby(codes, sort=False).head(1)  # each setting's first run, in the groups' order
    table = firsts[fields].reset_index(drop=True)  # typed as in results: a None stays None beside numbers
    table["setting"] = ([setting_label(dict(zip(fields, values))) for values in firsts[fields].itertuples(index=False)]
                        if fields or "setting" not in data else firsts["setting"].astype(str).tolist())
    stats = seed_statistics(data["objective"], data["status"], codes)
    for name in ("mean", "min", "max", "std", "n"):
        table[name] = stats[name].to_numpy()
    table["seeds"] = codes.groupby(codes, sort=False).size().to_numpy()
    for column, statuses in STATUS_COLUMNS.items():
        table[column] = data["status"].isin(statuses).groupby(codes, sort=False).sum().to_numpy()
    worst = np.inf if direction == "minimize" else -np.inf  # never picked while a counted run is there
    filled = shown.fillna(worst).groupby(codes, sort=False)
    best = (filled.idxmin() if direction == "minimize" else filled.idxmax()).to_numpy()
    table["best_run"] = pd.array(data.loc[best, "run_id"].to_numpy(), dtype="Int64") if len(best) else pd.array(
        [], dtype="Int64")
    table.loc[table["n"] == 0, "best_run"] = pd.NA
    for name in ("mean", "min", "max", "std"):
        table[name] = table[name].astype(float)
    table = table.astype({"n": "int64", "seeds": "int64", **{name: "int64" for name in STATUS_COLUMNS}})
    table["rank"] = table["mean"].rank(method="min", ascending=direction == "minimize").astype("Int64")
    return table.sort_values("rank", kind="stable", na_position="last").reset_index(drop=True)


def _hashable(value: Any) -> Any:
    """A key for grouping: None and NaN as one value, lists as tuples."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "<none>"
    if isinstance(value, list):
        return tuple(value)
    return value


# ------------------------------------------------------------------------------- curves
def group_curves(metrics: pd.DataFrame, groups: Mapping[int, str], metric: str, *,
                 log: bool | None = None) -> pd.DataFrame:
    """Per group and step, the ``mean``, ``min`` and ``max`` of ``metric`` over the group's runs that have
    a value at that step (``n`` of them), and ``zeros`` (values <= 0 a log mean leaves out).

    ``metrics`` holds long metric rows (run_id, step, wall_time, name, value); ``groups`` maps a run id
    to its group's label (runs not in it are left out).  Of several rows of one run at one step (rows a
    resumed run wrote again) the last counts.  With ``log`` (default: :func:`is_log_metric`) the mean is
    geometric (Note [Geometric mean on a log axis]); else arithmetic, and ``zeros`` is 0.  Columns
    :data:`CURVE_COLUMNS`, sorted by group (in ``groups``' order) and step.
    """
    log = is_log_metric(metric) if log is None else bool(log)
    labels = list(dict.fromkeys(groups.values()))
    data = metrics[(metrics["name"] == metric) & metrics["run_id"].isin(list(groups))]
    data = data.drop_duplicates(["run_id", "step"], keep="last")
    values = pd.to_numeric(data["value"], errors="coerce").astype(float)
    frame = pd.DataFrame({"group": data["run_id"].map(groups).to_numpy(), "step": data["step"].to_numpy(),
                          "value": values.to_numpy()}).dropna(subset=["value"])
    if frame.empty:
        return pd.DataFrame({"group": pd.Series(dtype=object), "step": pd.Series(dtype="int64"),
                             **{name: pd.Series(dtype=float) for name in ("mean", "min", "max")},
                             "n": pd.Series(dtype="int64"), "zeros": pd.Series(dtype="int64")})
    positive = frame["value"] > 0
    frame["zero"] = (~positive).astype("int64") if log else 0
    frame["log10"] = np.log10(frame["value"].where(positive))
    by = frame.groupby(["group", "step"], sort=False)
    out = by["value"].agg(["min", "max", "size"]).rename(columns={"size": "n"})
    out["zeros"] = by["zero"].sum()
    if log:
        out["mean"] = 10.0 ** by["log10"].mean()
        out.loc[out["zeros"] == out["n"], "mean"] = 0.0
    else:
        out["mean"] = by["value"].mean()
    out = out.reset_index()
    out["order"] = out["group"].map({label: index for index, label in enumerate(labels)})
    out = out.sort_values(["order", "step"], kind="stable").reset_index(drop=True)
    return out.astype({"n": "int64", "zeros": "int64", "step": "int64"})[CURVE_COLUMNS]


# ------------------------------------------------------------------------------- seed groups
def seed_groups(records: Iterable, by: list[str] | None = None) -> dict[str, list[int]]:
    """Runs grouped under a label: without ``by``, the runs whose configs are equal except for
    ``train.seed`` and the name; with ``by`` (field paths, read by :func:`stability.config.fields.field_value`:
    a cell's or task's declared default where a stored config leaves an option out), the runs that
    agree on those fields, whatever else differs.

    ``records`` are :class:`~stability.runs.records.RunRecord`\\ s (anything with ``id`` and ``raw_config``).
    A label names the fields whose values tell the groups apart (``cell=rnn lr=0.001``; with ``by``
    exactly those fields), or the cell and task when every run is in one group.  Groups are ordered by
    their oldest run, and each lists its run ids in ascending order.
    """
    records = sorted(records, key=lambda record: record.id)
    keyed: dict[str, tuple[dict, list[int]]] = {}
    for record in records:
        config = dict(record.raw_config)
        if by:
            values = {path: field_value(config, path) for path in by}
        else:
            values = {path: value for path, value in flat_fields(config).items() if path != "train.seed"}
        key = json.dumps(values, sort_keys=True, default=str)
        keyed.setdefault(key, (values, []))[1].append(int(record.id))
    settings = [values for values, _ in keyed.values()]
    if by:
        shown = list(by)
    else:
        paths = list(dict.fromkeys(path for values in settings for path in values))
        shown = [path for path in paths
                 if len({json.dumps(values.get(path), default=str) for values in settings}) > 1]
    out = {}
    for values, ids in keyed.values():
        label = setting_label({path: values.get(path) for path in shown}) if shown else _whole(values)
        out[label] = ids
    return out


def _whole(values: Mapping[str, Any]) -> str:
    """A label for the only group: its cell on its task."""
    return f"{values.get('cell', '?')} on {values.get('task', '?')}"
