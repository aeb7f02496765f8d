"""A run's status line: badge, config in one line, its sweep, progress with ETA and speed, and what went wrong.

    st.fragment(live_status, run_every=status_every(refresh, run))(run_id)   # the Train page's, every second

Note [A status that moves]
--------------------------
A run logs about 200 points, so a 20,000-step run's rows come every few seconds, and the Train page, whose
status line was drawn with its charts, showed a new step every 2.8 s on average and stood still up to 5.9 s
(real Chromium, 2 cores). Between its log steps a run now writes its step and heartbeat to its row every
half second (stability/training/sinks.py, Note [A moving step]), and the page draws its status line in a fragment
of its own (:func:`live_status`), rerun every :data:`STATUS_EVERY_S` while the run is active, beside the
charts' fragment, which keeps its log cadence (pages/ui/live.py, Note [Watching cheaply]). The status
fragment draws two elements while the run trains (one markdown line with the status badge and the run, the
progress bar with the step, ETA and speed; a notice too when the run is not training) from the server's shared look at the run
(pages/ui/shared.py, Note [Many watchers]): the run's row and latest values, read at most once every
READ_EVERY_S for every session together, and only the metric rows after the last step read, none between
log steps. The ETA moves with the step: the one logged at the last log step scaled by the steps left
(:func:`moving_eta`). Paused, or once the run has ended, the fragment is drawn once with the page and not
polled. Measured (benchmarks/live_watchers.py --clients headless --run long, 2 cores, 2026-11-28, before ->
after): the refresh seen 1.5 s (max 1.5-1.6) -> 1.0 s (max 1.1-1.3) at 1 and 10 watchers, one Chromium tab
1.5 s (max 3) -> 1 s (max 1); but the server's CPU 5 -> 7 % at 1, 14 -> 24 % at 10, 52 -> 99 % at 30, where
the watchers then saw no progress at all in the window (98 % and the same at 60): a 1-s fragment about
doubles what a watcher costs, so many watchers need a cheaper rhythm (issue 33, item 6; not done here).
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import streamlit as st

from stability.config.fields import setting_label
from stability.core.metric_names import ETA_S, STEPS_PER_S
from stability.runs.records import RunRecord
from stability.runs.status import TERMINAL
from stability.runs.store import RunNotFound, RunStore

from .shared import shared_runs
from .store import open_store, store_guard

STATUS_EVERY_S = 1.0  # the status line's rhythm while its run is active (Note [A status that moves])
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


def status_every(refresh: str, run) -> float | None:
    """Seconds between the status fragment's reruns: :data:`STATUS_EVERY_S` while ``run`` (a
    :meth:`RunStore.run` dict or a ``RunRecord``) is active and the live updates (``refresh``, a key of
    pages/ui/live.py's REFRESH_CHOICES) are not paused; None otherwise (Note [A status that moves])."""
    status = run["status"] if isinstance(run, dict) else run.status
    return None if status in TERMINAL or refresh == "off" else STATUS_EVERY_S


@store_guard
def live_status(run_id: int) -> None:
    """The status line of run ``run_id`` from the server's shared look at it (Note [A status that moves]):
    the fragment a page reruns every :func:`status_every` seconds."""
    store = open_store()
    try:
        look = shared_runs().look(store, run_id)
    except RunNotFound:
        st.warning(f"Run {run_id} is not in the store {store.location}.")
        return
    run_status_panel(store, look.record, eta_step=look.counts.get(ETA_S, (0, None))[1])


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
    elif run.status == "failed":
        st.error(f"Run {run.id} failed: {error} (log: {Path(store.home) / 'logs' / f'run-{run.id}.log'})")
    elif run.status == "interrupted":
        st.warning(f"Run {run.id} was interrupted: {error}")
    elif run.status == "stopped":
        st.info(f"Run {run.id} was stopped at step {step:,}.")
    elif run.status == "pruned":
        st.info(f"Run {run.id} was pruned at step {step:,}: its sweep's pruner judged it hopeless from its "
                "validation loss (worse than the median of the other trials at that step). Its rows are kept.")
    elif run.status == "queued":
        st.info(f"Run {run.id} is queued: it starts when a worker slot is free.")
