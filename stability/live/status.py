"""A run's status in words, without Streamlit: its config in one line, how long, an external run's silence,
and the progress line with its ETA moving between log steps.

    progress_line(record, eta_step)    # "step 1,200 / 2,000 · ETA 3 min 05 s · 41.2 steps/s · cpu"
    describe_run(record)               # "spectral (128) on adding T=200 · adam lr 0.001 · 2000 steps · seed 0"
    quiet_for(record)                  # "no word for 12 min": an external run silent for a while

pages/ui/status.py draws them (its Note [A status that moves]).
"""
from __future__ import annotations

import math
import time

from ..core.formatting import format_duration
from ..core.metric_names import ETA_S, STEPS_PER_S
from ..runs.status import TERMINAL

EXTERNAL = "external run — logged from your own loop"  # what the pages say instead of offering Start/Stop/Resume
QUIET_AFTER_S = 120.0  # an external run silent this long is "no word for N min" (never failed for it)


def describe_config(config: dict) -> str:
    """One line: ``spectral (128) on adding T=200 · adam lr 0.001 · 2000 steps · seed 0``."""
    cell, task, train = config.get("cell", {}), config.get("task", {}), config.get("train", {})
    length = task.get("options", {}).get("seq_len")
    return (f"{cell.get('name')} ({cell.get('hidden_size')}) on {task.get('name')}"
            f"{f' T={length}' if length else ''} · {train.get('optimizer')} lr {train.get('lr'):g} · "
            f"{train.get('steps')} steps · seed {train.get('seed')}")


def describe_run(run) -> str:
    """The config in one line (:func:`describe_config`); for an external run (stability.watch) what it
    is and the model it watches."""
    if not run.external:
        return describe_config(dict(run.raw_config))
    cell = (run.raw_config.get("cell") or {}).get("name")
    return f"{EXTERNAL}" + (f" · {cell}" if cell and cell != "your model" else "")


def quiet_for(run, now: float | None = None) -> str | None:
    """``"no word for 12 min"`` for a running external run whose last sign of life (its heartbeat, written
    with its rows) is older than :data:`QUIET_AFTER_S`; None otherwise (Note [External runs] in
    stability.execution.lifecycle: silence never fails it)."""
    last = run.heartbeat or run.started_at or run.created_at
    silent = (time.time() if now is None else now) - last if last else 0.0
    if not (run.external and run.status == "running" and silent > QUIET_AFTER_S):
        return None
    return f"no word for {int(silent // 60)} min"


def moving_eta(run, eta_step: int | None) -> float | None:
    """The ETA logged at the run's last log step (``eta_step``, when known), scaled to the steps left at the
    run's current step, which moves between log steps (Note [A status that moves] in pages/ui/status.py); None when not logged."""
    eta = run.latest.get(ETA_S)  # none for an external run that gave no total_steps
    step, total = run.step or 0, run.total_steps or 0
    if eta is None or eta_step is None or not math.isfinite(eta) or not total or total <= eta_step:
        return eta
    return eta * max(0, total - step) / (total - eta_step)


def progress_line(run, eta_step: int | None = None) -> str:
    """The text of a run's progress bar: its step of its total, how long it took (ended) or its ETA
    (:func:`moving_eta`, while it runs), its steps a second and its device."""
    status, step, total = run.status, run.step or 0, run.total_steps or 0
    if status in TERMINAL and run.started_at and run.finished_at:
        elapsed = run.finished_at - run.started_at
        speed, timing = (step / elapsed if elapsed > 0 else math.nan), f"took {format_duration(elapsed)}"
    else:
        speed = run.latest.get(STEPS_PER_S, math.nan) if status == "running" else math.nan
        eta = moving_eta(run, eta_step)
        timing = f"ETA {format_duration(eta)}" if status == "running" and eta is not None and math.isfinite(eta) else ""
    parts = [f"step {step:,} / {total:,}" if total else f"step {step:,}", timing,
             f"{speed:.1f} steps/s" if math.isfinite(speed) else "", run.device or ""]
    return " · ".join(part for part in parts if part)


__all__ = ["EXTERNAL", "QUIET_AFTER_S", "describe_config", "describe_run", "format_duration", "moving_eta",
           "progress_line", "quiet_for"]
