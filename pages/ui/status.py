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
left (``moving_eta`` in stability/live/status.py).

A status line of its own, a fragment rerun every second, was built and measured, and taken out again
(benchmarks/live_watchers.py --clients headless --run long, 2 cores, 2026-11-28, charts' fragment only ->
with a 1-s status fragment): the refresh seen 1.5 s -> 1.0 s at 1 and 10 watchers, but the server's CPU
5 -> 7 % at 1, 14 -> 24 % at 10 and 52 -> 99 % at 30, where the watchers then saw no progress at all in
the window: a second fragment a watcher doubles what a watcher costs.  A classroom of thirty matters more
than a second's cadence; a status that moves every second for many watchers needs a cheaper rerun
(issue 33, item 6).
"""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from pages.ui.access import current_visitor
from stability.config.fields import setting_label
from stability.live import (EXTERNAL, QUIET_AFTER_S, describe_run, format_duration,  # noqa: F401 - the pages
                            progress_line, quiet_for)  # read these names from here too
from stability.runs.records import RunRecord
from stability.runs.store import RunNotFound, RunStore

STATUS_COLOURS = {"queued": "gray", "running": "blue", "completed": "green", "stopped": "orange",
                  "diverged": "red", "failed": "red", "interrupted": "orange", "pruned": "violet"}


def sweep_tag(run: RunRecord) -> str:
    """``sweep #3 trial 5: cell=rnn lr=0.001``, the sweep a link to its Sweep page (relative: the app may be
    served under a path)."""
    trial = f" trial {run.trial}" if run.trial is not None else ""
    varied = f": {setting_label(run.params)}" if run.params else ""
    return f"[sweep #{run.sweep_id}](sweep?sweep={run.sweep_id}){trial}{varied}"


def run_status_panel(store: RunStore, run: RunRecord | int, eta_step: int | None = None) -> None:
    """Status badge, a progress bar with ETA and steps/s, the device; a diverged, failed or interrupted
    run's error as a plain message.  ``run`` is the :class:`~stability.runs.records.RunRecord` a live panel
    has just read (its ``latest`` values give speed and ETA; ``eta_step``: the step the ETA was logged at,
    ``moving_eta``), or a run id to read it now."""
    if not isinstance(run, RunRecord):
        try:
            run = store.record(run)
        except RunNotFound:
            st.warning(f"Run {run} is not in this store.")
            return
    status, step = run.status, run.step or 0
    quiet = quiet_for(run)  # one markdown element with its badges: drawn every second (Note [A status that moves])
    st.markdown(f":{STATUS_COLOURS.get(status, 'gray')}-badge[{status}] **Run {run.id}** · {describe_run(run)}"
                + ("" if quiet is None else f" :gray-badge[{quiet}]"))
    if run.sweep_id is not None:
        st.markdown(sweep_tag(run))
    st.progress(run.progress, text=progress_line(run, eta_step))
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
