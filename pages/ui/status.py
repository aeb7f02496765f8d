"""A run's status line: badge, config in one line, its sweep, progress with ETA and speed, and what went wrong.

    run_status_panel(store, record, eta_step=step)     # in the Train page's live panel, at the charts' rhythm

Note [A status that moves]
--------------------------
A run logs about 200 points, so a 20,000-step run's rows come every few seconds, and the Train page, whose
status line is drawn with its charts, showed a new step every 2.8 s on average and stood still up to 5.9 s
(real Chromium, 2 cores). Between its log steps a run now writes its step and heartbeat to its row every
half second (stability/training/sinks.py, Note [A moving step]), so the status line, still drawn in the
charts' fragment, shows a new step at every look of the panel (1.5-2 s at Auto: stability/live/pace.py, Note
[Watching cheaply]), and the ETA moves with it: the one logged at the last log step scaled by the steps
left (:func:`moving_eta`).

A status line of its own, a fragment rerun every second, was built and measured, and taken out again
(benchmarks/live_watchers.py --clients headless --run long, 2 cores, 2026-11-28, charts' fragment only ->
with a 1-s status fragment): the refresh seen 1.5 s -> 1.0 s at 1 and 10 watchers, but the server's CPU
5 -> 7 % at 1, 14 -> 24 % at 10 and 52 -> 99 % at 30, where the watchers then saw no progress at all in
the window: a second fragment a watcher doubles what a watcher costs.  A classroom of thirty matters more
than a second's cadence; a status that moves every second for many watchers needs a cheaper rerun
(issue 33, item 6).
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import streamlit as st

from pages.ui.access import current_visitor
from stability.config.fields import setting_label
from stability.core.metric_names import ETA_S, STEPS_PER_S
from stability.runs.records import RunRecord
from stability.runs.status import TERMINAL
from stability.runs.store import RunNotFound, RunStore


EXTERNAL = "external run — logged from your own loop"  # what the pages say instead of offering Start/Stop/Resume
QUIET_AFTER_S = 120.0  # an external run silent this long is "no word for N min" (never failed for it)

STATUS_COLOURS = {"queued": "gray", "running": "blue", "completed": "green", "stopped": "orange",
                  "diverged": "red", "failed": "red", "interrupted": "orange", "pruned": "violet"}


def format_duration(seconds: float | None) -> str:
    """``"45 s"``, ``"3 min 05 s"``, ``"1 h 02 min"``; an em dash when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "—"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def describe_config(config: dict) -> str:
    """One line: ``spectral (128) on adding T=200 · adam lr 0.001 · 2000 steps · seed 0``."""
    cell, task, train = config.get("cell", {}), config.get("task", {}), config.get("train", {})
    length = task.get("options", {}).get("seq_len")
    return (f"{cell.get('name')} ({cell.get('hidden_size')}) on {task.get('name')}"
            f"{f' T={length}' if length else ''} · {train.get('optimizer')} lr {train.get('lr'):g} · "
            f"{train.get('steps')} steps · seed {train.get('seed')}")


def describe_run(run: RunRecord) -> str:
    """The config in one line (:func:`describe_config`); for an external run (stability.watch) what it
    is and the model it watches."""
    if not run.external:
        return describe_config(dict(run.raw_config))
    cell = (run.raw_config.get("cell") or {}).get("name")
    return f"{EXTERNAL}" + (f" · {cell}" if cell and cell != "your model" else "")


def quiet_for(run: RunRecord, now: float | None = None) -> str | None:
    """``"no word for 12 min"`` for a running external run whose last sign of life (its heartbeat, written
    with its rows) is older than :data:`QUIET_AFTER_S`; None otherwise (Note [External runs] in
    stability.execution.lifecycle: silence never fails it)."""
    last = run.heartbeat or run.started_at or run.created_at
    silent = (time.time() if now is None else now) - last if last else 0.0
    if not (run.external and run.status == "running" and silent > QUIET_AFTER_S):
        return None
    return f"no word for {int(silent // 60)} min"


def sweep_tag(run: RunRecord) -> str:
    """``sweep #3 trial 5: cell=rnn lr=0.001``, the sweep a link to its Sweep page (relative: the app may be
    served under a path)."""
    trial = f" trial {run.trial}" if run.trial is not None else ""
    varied = f": {setting_label(run.params)}" if run.params else ""
    return f"[sweep #{run.sweep_id}](sweep?sweep={run.sweep_id}){trial}{varied}"


def moving_eta(run: RunRecord, eta_step: int | None) -> float | None:
    """The ETA logged at the run's last log step (``eta_step``, when known), scaled to the steps left at the
    run's current step, which moves between log steps (Note [A status that moves]); None when not logged."""
    eta = run.latest.get(ETA_S)  # none for an external run that gave no total_steps
    step, total = run.step or 0, run.total_steps or 0
    if eta is None or eta_step is None or not math.isfinite(eta) or not total or total <= eta_step:
        return eta
    return eta * max(0, total - step) / (total - eta_step)


def run_status_panel(store: RunStore, run: RunRecord | int, eta_step: int | None = None) -> None:
    """Status badge, a progress bar with ETA and steps/s, the device; a diverged, failed or interrupted
    run's error as a plain message.  ``run`` is the :class:`~stability.runs.records.RunRecord` a live panel
    has just read (its ``latest`` values give speed and ETA; ``eta_step``: the step the ETA was logged at,
    :func:`moving_eta`), or a run id to read it now."""
    if not isinstance(run, RunRecord):
        try:
            run = store.record(run)
        except RunNotFound:
            st.warning(f"Run {run} is not in this store.")
            return
    status, step, total = run.status, run.step or 0, run.total_steps or 0
    if status in TERMINAL and run.started_at and run.finished_at:
        elapsed = run.finished_at - run.started_at
        speed, timing = (step / elapsed if elapsed > 0 else math.nan), f"took {format_duration(elapsed)}"
    else:
        speed = run.latest.get(STEPS_PER_S, math.nan) if status == "running" else math.nan
        eta = moving_eta(run, eta_step)
        timing = f"ETA {format_duration(eta)}" if status == "running" and eta is not None and math.isfinite(eta) else ""
    quiet = quiet_for(run)  # one markdown element with its badges: drawn every second (Note [A status that moves])
    st.markdown(f":{STATUS_COLOURS.get(status, 'gray')}-badge[{status}] **Run {run.id}** · {describe_run(run)}"
                + ("" if quiet is None else f" :gray-badge[{quiet}]"))
    if run.sweep_id is not None:
        st.markdown(sweep_tag(run))
    parts = [f"step {step:,} / {total:,}" if total else f"step {step:,}", timing, f"{speed:.1f} steps/s" if math.isfinite(speed) else "",
             run.device or ""]
    st.progress(run.progress, text=" · ".join(part for part in parts if part))
    _explain(store, run, step)


def _explain(store: RunStore, run: RunRecord, step: int) -> None:
    """What happened to a run that is not training, in one message."""
    error = run.error or "no error message was recorded"
    if run.status == "diverged":
        st.error(f"Run {run.id} diverged: {error}. Try a lower learning rate, gradient clipping, "
                 "or a cell that bounds its spectrum.")
    elif run.status == "failed" and run.external:
        st.error(f"Run {run.id} failed: {error} (raised in the loop that logged it)")
    elif run.status == "failed":  # the log's path is the server's, for its operators only (Note [Roles])
        log = f" (log: {Path(store.home) / 'logs' / f'run-{run.id}.log'})" if current_visitor().may_operate else ""
        st.error(f"Run {run.id} failed: {error}{log}")
    elif run.status == "interrupted":
        st.warning(f"Run {run.id} was interrupted: {error}")
    elif run.status == "stopped":
        st.info(f"Run {run.id} was stopped at step {step:,}.")
    elif run.status == "pruned":
        st.info(f"Run {run.id} was pruned at step {step:,}: its sweep's pruner judged it hopeless from its "
                "validation loss (worse than the median of the other trials at that step). Its rows are kept.")
    elif run.status == "queued":
        st.info(f"Run {run.id} is queued: it starts when a worker slot is free.")
