"""What a page watching a sweep reads off it: its progress in words, whether it is active, its runs in the
order its spec lists their values, and the versions that tell a chart its rows changed.

    fraction, text = progress(spec, counts)     # "5 / 12 runs done · 3 completed · 2 running"
    results = in_spec_order(results, spec)      # cell=rnn,spectral: rnn's runs first, then by seed
    objective_version(results)                  # changes at an evaluation step, not at a training step

Nothing here draws or reads a store: pages/sweep.py does, with :func:`stability.sweeps.results`.
"""
from __future__ import annotations

import json

import pandas as pd

from ..runs.status import ACTIVE_STATUSES, TERMINAL
from .spec import SweepSpec

CURVE_METRICS = ("val/loss", "train/loss", "grad/h0_norm", "sv/min", "sv/max", "sv/margin", "gap/loss")
STATUS_ORDER = ("completed", "running", "queued", "pruned", "diverged", "stopped", "failed", "interrupted")


def done_and_total(spec: SweepSpec, counts: dict) -> tuple[int, int]:
    """Runs ended and the sweep's total: its spec's size, or the runs it has if more (the trials not asked
    yet have no run in the store)."""
    done = sum(count for status, count in counts.items() if status in TERMINAL)
    return done, max(spec.size(), sum(counts.values()))


def label(sweep) -> str:
    """``#3 lr x cell · running · 5/12 runs`` of a ``SweepRecord``."""
    done, total = done_and_total(SweepSpec.from_dict(sweep.spec), sweep.counts)
    return f"#{sweep.id}{' ' + sweep.name if sweep.name else ''} · {sweep.status} · {done}/{total} runs"


def progress(spec: SweepSpec, counts: dict) -> tuple[float, str]:
    """(fraction done, ``5 / 12 runs done · 3 completed · 2 running``): how many runs are in each status."""
    done, total = done_and_total(spec, counts)
    parts = [f"{counts[status]} {status}" for status in STATUS_ORDER if counts.get(status)]
    return done / total if total else 0.0, f"{done} / {total} runs done · " + " · ".join(parts)


def is_active(sweep) -> bool:
    """Whether a ``SweepRecord`` is running or has a run in progress."""
    return sweep.status == "running" or any(sweep.counts.get(status) for status in ACTIVE_STATUSES)


NO_ROOM = "the sweep stopped: "  # how the error of a run a full disk stopped begins (Note [A full disk ends the sweep])


def halted(stopped_runs) -> str | None:
    """Why a sweep stopped by itself, in one line: the error of its newest run a worker stopped for want of disk
    (:data:`NO_ROOM`, stability/sweeps/workers.py, Note [A full disk ends the sweep]); None when none was."""
    return next((run.error for run in stopped_runs if (run.error or "").startswith(NO_ROOM)), None)


def listed_values(spec: SweepSpec, field: str) -> tuple:
    """The values the sweep lists for ``field`` (empty for a sampled range)."""
    return next(vary for vary in spec.vary if vary.field == field).values


def in_spec_order(results: pd.DataFrame, spec: SweepSpec) -> pd.DataFrame:
    """The runs ordered by their varied values as the spec lists them (``cell=rnn,spectral``: rnn first),
    then by seed: the order the charts give names and lines (they keep the order values first appear in)."""
    keys = {}
    for vary in spec.vary:
        listed = {json.dumps(value, default=str): index for index, value in enumerate(vary.values)}
        keys[vary.field] = results[vary.field].map(
            lambda value, listed=listed: listed.get(json.dumps(value, default=str), len(listed)))
    if not keys:
        return results
    order = pd.DataFrame(keys).assign(seed=results["seed"], run_id=results["run_id"])
    return results.loc[order.sort_values([*keys, "seed", "run_id"], kind="stable").index].reset_index(drop=True)


def results_version(results: pd.DataFrame) -> tuple:
    """Changes when a run of the sweep appears, changes status or reaches a new step: the curves' version."""
    return tuple(zip(results["run_id"].tolist(), results["status"].tolist(),
                     results["step"].fillna(-1).astype(int).tolist()))


def objective_version(results: pd.DataFrame) -> tuple:
    """Changes when a run appears, changes status or its objective moves (at an evaluation step): the version
    of the charts of the objective, which a training step alone does not change."""
    values = [None if pd.isna(value) else float(value) for value in results["objective"]]  # NaN != NaN
    return tuple(zip(results["run_id"].tolist(), results["status"].tolist(), values))


__all__ = ["CURVE_METRICS", "NO_ROOM", "STATUS_ORDER", "done_and_total", "halted", "in_spec_order", "is_active",
           "label", "listed_values", "objective_version", "progress", "results_version"]
