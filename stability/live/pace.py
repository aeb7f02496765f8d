"""How often a live panel looks at a run: a timer that follows the run's logging, the user's setting, the first
point's fast pace from Start, and when a timer has drifted far enough to be set again.

    every = live_every(refresh, run, rows)        # seconds between a panel's looks; None: no polling
    describe_refresh(refresh, every, run, rows)   # the line under the panel saying so
    needs_retime(refresh, every, run, rows)       # Auto's timer is RETIME_FACTOR off the run's logging

``run`` is a run as the store gives it (a ``RunRecord``, ``store.record(run_id)``); ``rows`` a session's rows
of it (pages/ui/live.py's LiveRows: ``metrics`` and ``last(name)``), or None before any were read.

Note [Watching cheaply]
-----------------------
A live page is a neighbour of the worker it watches: on 2 cores, a Train page redrawing every second cost
the worker a quarter of its steps/s, and Chromium, not the server, was the main neighbour.  Measured with
benchmarks/live_page.py (--cost: CPU seconds per minute from /proc) and the renderer's own profile:

* every fragment rerun costs the browser ~25 ms and the server a script run, even when nothing changed;
* a chart element identical to the one on the page (same spec, same Arrow bytes) is sent by Streamlit as
  a 75-byte reference to the browser's cached message, and the frontend keeps the element it has (same
  hash): no Vega work at all, ~7 ms of decoding and React per chart;
* a chart whose rows changed is re-run through Vega's dataflow with Streamlit's CSP-safe expression
  interpreter, per row and per layer: a Train page's six charts at 2000 points a line kept the
  renderer's main thread busy for a second at every redraw.

So the panel reruns on a timer that follows the data (:func:`live_every`; ``Auto``: the run's own logging
interval, 1.5 to 2 s while the run trains), or the user's choice, or never ("Paused"), and every tenth of a
second from Start to the run's first point (Note [The first point]); each rerun takes the server's shared look
at the run (stability/live/tail.py, Note [Many watchers]): its row and its new rows are read about once a second
for every session together, only the rows after the last step read; each chart is rebuilt only when the rows
it draws or its controls changed, once for every session watching the run (stability/live/specs.py, Notes
[Live charts], [Shared specs]), otherwise the identical spec goes out again; and the charts are drawn light
(``LIVE_POINTS`` points a line, ``HOVER_POINTS`` hover points, stability/live/specs.py; stability.charts.lines,
Note [Light charts]).

Auto used to follow the run's logging within 5 to 30 s, because every watcher read the run and rebuilt its
charts itself (a 1-s refresh cost the default run 0.77x of its speed on 2 cores); with the reads and the
chart work shared, a 1-2 s rhythm costs the server a script run per watcher and a dictionary lookup
(benchmarks/live-page-cpu-2026-11-26.md).  Auto's lower bound is 1.5 s, not 1: with one watcher of the
default run on a quiet 2-core machine, a 1-s Auto cost the server 13 % of a core and Chromium 32 %, 1.5 s
10 % and 26 %, the run keeping 0.945x and 0.967x of its speed (same benchmark, later that day); with the
charts' rows made in numpy (stability.charts.lines, Note [Light charts]) 9 % and 28 %, 0.976x.
Streamlit 1.67 has no ``add_rows`` for a Vega-Lite chart any more; a new chart's rows still go out whole (as
Arrow bytes, Note [Arrow rows] in stability/live/specs.py).
"""
from __future__ import annotations

import math
import time

from ..config import ConfigError, RunConfig
from ..runs.status import TERMINAL

REFRESH_CHOICES = {"auto": "Auto (follows the run)", "2": "Every 2 s", "5": "Every 5 s", "10": "Every 10 s",
                   "30": "Every 30 s", "off": "Paused"}
DEFAULT_REFRESH = "auto"
AUTO_EVERY_S = (1.5, 2.0)   # Auto: the run's logging interval, within these bounds (Note [Watching cheaply])
FIRST_POINT_EVERY_S = 0.1   # from Start to a run's first rows (Note [The first point]), for at most
FIRST_POINT_FOR_S = 20.0    # this long after the run was created (a run queued behind others waits slower)
FIRST_ROWS_WAIT_S = 0.5     # and each of those looks waits this long for the rows (stability/live/tail.py, Note
                            # [Waiting for the first rows])
RETIME_FACTOR = 1.5         # Auto re-times the panel (a full rerun) when its interval is this far off
RETIME_EVERY_S = 30.0       # and at most this often


def _config(run) -> RunConfig:
    if run.config is None:  # an external run, or a stored config that no longer parses: no RunConfig
        raise ConfigError("no config")
    return run.config


def log_interval(run, rows=None) -> float | None:
    """Seconds between the run's logged rows: its log interval in steps over its steps/s (the worker's
    own ``speed/steps_per_s`` when read, else step over the time since it started); None before it is known."""
    try:
        log_every = _config(run).train.resolved_log_every()
    except (ConfigError, KeyError, TypeError, ValueError):
        return None
    speed = rows.last("speed/steps_per_s") if rows is not None and len(rows.metrics) else math.nan
    if not (math.isfinite(speed) and speed > 0):
        started, heartbeat, step = run.started_at, run.heartbeat, run.step or 0
        speed = step / (heartbeat - started) if started and heartbeat and heartbeat > started and step else math.nan
    return log_every / speed if math.isfinite(speed) and speed > 0 else None


# Note [The first point]
# ----------------------
# A run's first rows are stored before its first update (stability.training.step_zero), so from Start the wait
# is the worker's start and the page's next look.  Until a run's first rows are read (while it is queued and
# while it has none), its panel looks every FIRST_POINT_EVERY_S: a look is one row of the runs table and an
# empty range of rows (the shared look reads such a run every FIRST_ROWS_EVERY_S, stability/live/tail.py, Note
# [The first rows]), a few ms of the server, and it lasts a second or two with a warm worker.  The looks that
# find rows draw the charts a few at a time (Note [Drawn in turn] in stability/live/specs.py), and when every
# chart is drawn the page reruns once (pages/ui/live.py's leave_first_point_pace), which sets the panel's
# timer to its usual rhythm: one full rerun a run, never a loop, since a run with rows is never awaited again.
# A run still waiting FIRST_POINT_FOR_S after it was created (queued behind others) is watched at the usual
# rhythm.  Meanwhile the panel draws the loss chart empty (Note [Skeleton] in pages/ui/live.py), so the
# browser has loaded its chart code before the first point.
def awaiting_first_point(run, rows, now: float | None = None) -> bool:
    """Whether ``run`` is active, created within :data:`FIRST_POINT_FOR_S` (a run of unknown age is not), and
    queued or without a row read yet (``rows``: this session's, or None)."""
    status, created = run.status, run.created_at
    recent = created is not None and (time.time() if now is None else now) - created < FIRST_POINT_FOR_S
    return status not in TERMINAL and recent and (status == "queued" or rows is None or rows.metrics.empty)


def live_every(refresh: str, run, rows=None) -> float | None:
    """Seconds between the panel's reruns for the setting ``refresh`` (a key of :data:`REFRESH_CHOICES`); None
    (no polling) when paused or when the run has ended; :data:`FIRST_POINT_EVERY_S` while the run awaits its
    first point."""
    if run.status in TERMINAL or refresh == "off":
        return None
    if awaiting_first_point(run, rows):
        return FIRST_POINT_EVERY_S
    if refresh != "auto":
        return float(refresh)
    low, high = AUTO_EVERY_S
    interval = log_interval(run, rows)
    return low if interval is None else min(high, max(low, interval))


def describe_refresh(refresh: str, every: float | None, run, rows) -> str:
    """One line saying how the panel is kept up to date."""
    if run.status in TERMINAL:
        return "The run has ended: nothing more to poll."
    if every is None:
        return "Live updates paused: the panel shows the rows read so far."
    if every == FIRST_POINT_EVERY_S:
        return f"Waiting for the run's first point: looks every {every:g} s until it is drawn."
    text = f"Live: looks for new rows every {every:g} s"
    interval = log_interval(run, rows)
    if refresh == "auto" and interval is not None:
        text += f" (Auto: the run logs every {interval:.2g} s)"
    return text + "; a chart is redrawn only when its rows changed."


def drifted(wanted: float | None, every: float | None) -> bool:
    """Whether a panel's timer ``every`` is :data:`RETIME_FACTOR` or more away from the pace now ``wanted``."""
    return wanted is not None and every is not None and max(wanted, every) / min(wanted, every) >= RETIME_FACTOR


def needs_retime(refresh: str, every: float | None, run, rows) -> bool:
    """With Auto, whether the run's logging interval has moved :data:`RETIME_FACTOR` away from the panel's
    timer ``every`` (the first point's pace ends by itself)."""
    if refresh != "auto" or every is None or every == FIRST_POINT_EVERY_S:
        return False
    return drifted(live_every(refresh, run, rows), every)


__all__ = ["AUTO_EVERY_S", "DEFAULT_REFRESH", "FIRST_POINT_EVERY_S", "FIRST_POINT_FOR_S", "FIRST_ROWS_WAIT_S",
           "REFRESH_CHOICES", "RETIME_EVERY_S", "RETIME_FACTOR", "awaiting_first_point", "describe_refresh",
           "drifted", "live_every", "log_interval", "needs_retime"]
