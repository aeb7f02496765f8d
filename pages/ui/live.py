"""The Train page's live panel made cheap to watch: when it reruns, what it reads, what it sends.

    refresh = refresh_control(column, query.choice("refresh", list(REFRESH_CHOICES), DEFAULT_REFRESH))
    every = live_every(refresh, run, cached_rows(store, run_id))      # seconds between reruns; None: no polling
    rows = run_rows(store, run, flow=True)              # read only when the run's step or heartbeat moved
    specs = live_chart_specs(("train", store.location, run_id), live_charts, final=rows.final)
    for spec in specs: show_chart(st, spec)             # a chart whose rows did not change is the same spec

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
interval, 1.5 to 2 s while the run trains), or the user's choice, or never ("Paused"), and every tenth of a second
from Start to the run's first point (Note [The first point]); each rerun takes the server's shared look at the
run (pages/ui/shared.py, Note [Many watchers]): its row and its new rows are read about once a second for
every session together, only the rows after the last step read; each chart is rebuilt only when the rows it
draws or its controls changed (:func:`live_chart_specs`), once for every session watching the run
(stability/live/specs.py, Note [Shared specs]), otherwise the identical spec goes out again; and the charts are
drawn light (``LIVE_POINTS`` points a line, ``HOVER_POINTS`` hover points, stability/live/specs.py;
stability.charts.lines, Note [Light charts]).

Auto used to follow the run's logging within 5 to 30 s, because every watcher read the run and rebuilt its
charts itself (a 1-s refresh cost the default run 0.77x of its speed on 2 cores); with the reads and the
chart work shared, a 1-2 s rhythm costs the server a script run per watcher and a dictionary lookup
(benchmarks/live-page-cpu-2026-11-26.md).  Auto's lower bound is 1.5 s, not 1: with one watcher of the
default run on a quiet 2-core machine, a 1-s Auto cost the server 13 % of a core and Chromium 32 %, 1.5 s
10 % and 26 %, the run keeping 0.945x and 0.967x of its speed (same benchmark, later that day); with the
charts' rows made in numpy (stability.charts.lines, Note [Light charts]) 9 % and 28 %, 0.976x.
Streamlit 1.67 has no ``add_rows`` for a Vega-Lite chart any more; a new chart's rows still go out whole (as
Arrow bytes, Note [Arrow rows] in stability/live/specs.py).

Streamlit only: the specs, their Arrow rows and their caches are stability/live/specs.py's; nothing here decides
what is valid (stability.config does).
"""
from __future__ import annotations

import functools
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd
import streamlit as st

from stability.config import ConfigError, RunConfig
from stability.live import SHARED_SLOTS, Audience, LiveChart, paced, session_specs, shared_specs, skeleton_spec
from stability.runs.status import TERMINAL

from .shared import awaited, shared_memo, shared_runs

REFRESH_CHOICES = {"auto": "Auto (follows the run)", "2": "Every 2 s", "5": "Every 5 s", "10": "Every 10 s",
                   "30": "Every 30 s", "off": "Paused"}
DEFAULT_REFRESH = "auto"
AUTO_EVERY_S = (1.5, 2.0)   # Auto: the run's logging interval, within these bounds (Note [Watching cheaply])
FIRST_POINT_EVERY_S = 0.1   # from Start to a run's first rows (Note [The first point]), for at most
FIRST_POINT_FOR_S = 20.0    # this long after the run was created (a run queued behind others waits slower)
FIRST_ROWS_WAIT_S = 0.5     # and each of those looks waits this long for the rows (pages/ui/shared.py, Note
                            # [Waiting for the first rows])
RETIME_FACTOR = 1.5         # Auto re-times the panel (a full rerun) when its interval is this far off
RETIME_EVERY_S = 30.0       # and at most this often
ROWS_KEY, SPECS_KEY, RETIMED_KEY, ROWS_MEMO = "_live_rows", "_live_specs", "_live_retimed", "_live_rows_memo"
AUDIENCE_KEY, PACED_KEY = "_live_audience", "_live_paced"  # this session's token; its last re-pacing


# ---------------------------------------------------------------------------------------- refresh
def refresh_control(container, default: str = DEFAULT_REFRESH, key: str = "train_refresh") -> str:
    """The "Live updates" setting (a key of :data:`REFRESH_CHOICES`), starting at ``default`` (a link's
    ``?refresh=``), written back to the URL when it is not the default."""
    choices = list(REFRESH_CHOICES)
    refresh = container.selectbox(
        "Live updates", choices, index=choices.index(default if default in choices else DEFAULT_REFRESH),
        format_func=REFRESH_CHOICES.get, key=key,
        help="How often the panel looks for new rows. Auto follows the run: as often as it logs, every "
             f"{AUTO_EVERY_S[0]:g} to {AUTO_EVERY_S[1]:g} s. Only charts whose rows changed are redrawn.")
    if refresh == DEFAULT_REFRESH:
        st.query_params.pop("refresh", None)
    else:
        st.query_params["refresh"] = refresh
    return refresh


def log_interval(run: dict, rows: LiveRows | None = None) -> float | None:
    """Seconds between the run's logged rows: its log interval in steps over its steps/s (the worker's
    own ``speed/steps_per_s`` when read, else step over the time since it started); None before it is known."""
    try:
        log_every = RunConfig.from_dict(run["config"]).train.resolved_log_every()
    except (ConfigError, KeyError, TypeError, ValueError):
        return None
    speed = rows.last("speed/steps_per_s") if rows is not None and len(rows.metrics) else math.nan
    if not (math.isfinite(speed) and speed > 0):
        started, heartbeat, step = run.get("started_at"), run.get("heartbeat"), run.get("step") or 0
        speed = step / (heartbeat - started) if started and heartbeat and heartbeat > started and step else math.nan
    return log_every / speed if math.isfinite(speed) and speed > 0 else None


# Note [The first point]
# ----------------------
# A run's first rows are stored before its first update (stability.training.step_zero), so from Start the wait
# is the worker's start and the page's next look.  Until a run's first rows are read (while it is queued and
# while it has none), its panel looks every FIRST_POINT_EVERY_S: a look is one row of the runs table and an
# empty range of rows (the shared look reads such a run every FIRST_ROWS_EVERY_S, pages/ui/shared.py, Note
# [The first rows]), a few ms of the server, and it lasts a second or two with a warm worker.  The looks that
# find rows draw the charts a few at a time (Note [Drawn in turn] in stability/live/specs.py), and when every
# chart is drawn the page reruns once (leave_first_point_pace), which sets the panel's timer to its usual
# rhythm: one full rerun a run, never a loop, since a run with rows is never awaited again.  A run still
# waiting FIRST_POINT_FOR_S after it was created (queued behind others) is watched at the usual rhythm.
# Meanwhile the panel draws the loss chart empty (Note [Skeleton]), so the browser has loaded its chart code
# before the first point.
def awaiting_first_point(run, rows: LiveRows | None, now: float | None = None) -> bool:
    """Whether ``run`` (a :meth:`RunStore.run` dict or a ``RunRecord``) is active, created within
    :data:`FIRST_POINT_FOR_S` (a run of unknown age is not), and queued or without a row read yet (``rows``:
    this session's, or None)."""
    status, _, _ = _position(run)
    created = run.get("created_at") if isinstance(run, dict) else run.created_at
    recent = created is not None and (time.time() if now is None else now) - created < FIRST_POINT_FOR_S
    return status not in TERMINAL and recent and (status == "queued" or rows is None or rows.metrics.empty)


def leave_first_point_pace(every: float | None, waiting: bool) -> None:
    """Rerun the page once when a panel polling at :data:`FIRST_POINT_EVERY_S` has nothing left to wait for
    (Note [The first point]); call it after the panel has drawn what it read."""
    if every == FIRST_POINT_EVERY_S and not waiting:
        st.rerun()


# ---------------------------------------------------------------------------------------- the audience
@st.cache_resource(show_spinner=False)
def server_audience() -> Audience:
    """The server process's :class:`~stability.live.Audience` (every session, every page)."""
    return Audience()


def watching() -> int:
    """This session looks now (Note [A class watching], stability/live/audience.py); the number of sessions
    that looked at a live panel lately, this one included."""
    token = st.session_state.setdefault(AUDIENCE_KEY, uuid.uuid4().hex)
    return server_audience().look(token)


def polled(panel: Callable, every: float | None, *args, **kwargs) -> None:
    """``panel(*args, **kwargs)`` as a fragment that reruns every ``every`` seconds (None: once), slowed so
    that the server's watchers together stay within its looks a second (:func:`stability.live.paced`). The
    fragment counts its session at every look, and when the audience has moved its pace
    :data:`RETIME_FACTOR` away it reruns the page (which sets its timer again), at most every
    :data:`RETIME_EVERY_S`."""
    period = paced(every, watching())

    @functools.wraps(panel)  # the fragment keeps the panel's name, hence its id (Streamlit's: module, name, place)
    def look(*args, **kwargs):
        wanted = paced(every, watching())
        if period is not None and max(wanted, period) / min(wanted, period) >= RETIME_FACTOR:
            now = time.monotonic()
            if now - st.session_state.get(PACED_KEY, -math.inf) >= RETIME_EVERY_S:
                st.session_state[PACED_KEY] = now
                st.rerun()
        panel(*args, **kwargs)

    st.fragment(look, run_every=period)(*args, **kwargs)


def live_every(refresh: str, run: dict, rows: LiveRows | None = None) -> float | None:
    """Seconds between the panel's reruns for the setting ``refresh``; None (no polling) when paused or
    when the run has ended; :data:`FIRST_POINT_EVERY_S` while the run awaits its first point."""
    if run["status"] in TERMINAL or refresh == "off":
        return None
    if awaiting_first_point(run, rows):
        return FIRST_POINT_EVERY_S
    if refresh != "auto":
        return float(refresh)
    low, high = AUTO_EVERY_S
    interval = log_interval(run, rows)
    return low if interval is None else min(high, max(low, interval))


def describe_refresh(refresh: str, every: float | None, run: dict, rows: LiveRows | None) -> str:
    """One line saying how the panel is kept up to date."""
    if run["status"] in TERMINAL:
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


def retime_if_needed(refresh: str, every: float | None, run: dict, rows: LiveRows) -> None:
    """With Auto, rerun the whole page (which sets the panel's timer again) when the run's logging interval
    has moved :data:`RETIME_FACTOR` away from the panel's timer; at most every :data:`RETIME_EVERY_S`."""
    if refresh != "auto" or every is None or every == FIRST_POINT_EVERY_S:  # that pace ends by itself
        return
    wanted = live_every(refresh, run, rows)
    if wanted is None or max(wanted, every) / min(wanted, every) < RETIME_FACTOR:
        return
    now = time.monotonic()
    if now - st.session_state.get(RETIMED_KEY, -math.inf) >= RETIME_EVERY_S:
        st.session_state[RETIMED_KEY] = now
        st.rerun()


# ------------------------------------------------------------------------------------ live rows
@dataclass
class LiveRows:
    """A run's rows as read so far in this session: metric rows, and the 'grad/h_t_norm' and 'sv/spectrum'
    series if asked.

    ``final``: read in full after the run ended, so never read again. ``just_finished``: the run ended
    since the previous look (a page reruns itself once, to stop polling and update its buttons).
    ``seen``: the run's (status, step, heartbeat) at the last read; rows are read again only when it moved.
    ``counts``: per metric name, (rows, last step): what a chart's data version is made of.
    """

    metrics: pd.DataFrame
    flow: pd.DataFrame | None = None
    spectrum: pd.DataFrame | None = None  # the 'sv/spectrum' series, read with the flow (both at probe steps)
    depth: pd.DataFrame | None = None     # the 'grad/layer_norm' series (a deep step's layers: mlp), with the flow
    final: bool = False
    just_finished: bool = False
    seen: tuple = ()
    counts: dict = field(default_factory=dict)
    latest: dict | None = None  # per metric name, its last value (None: not known, read from ``metrics``)
    token: object = None        # the server's shared rows these are (pages/ui/shared.py, Look.token)

    def last(self, name: str) -> float:
        """The last logged value of metric ``name``, NaN if there is none."""
        if self.latest is None:
            return latest_value(self.metrics, name)
        return float(self.latest.get(name, math.nan))

    def memo(self, key, compute: Callable[[], object]):
        """``compute()``, done once for every session with these rows (by their ``token``) and ``key``."""
        return compute() if self.token is None else shared_memo(ROWS_MEMO).get((self.token, key), compute)

    def version(self, names) -> tuple:
        """Changes whenever a row of one of ``names`` is added."""
        return tuple(self.counts.get(name, (0, None)) for name in names)

    def flow_version(self) -> tuple:
        return _series_version(self.flow)

    def spectrum_version(self) -> tuple:
        return _series_version(self.spectrum)

    def depth_version(self) -> tuple:
        return _series_version(self.depth)


def _series_version(frame: pd.DataFrame | None) -> tuple:
    return (0, None) if frame is None or frame.empty else (len(frame), int(frame["step"].iat[-1]))


def cached_rows(store, run_id: int) -> LiveRows | None:
    """The rows this session has read of ``run_id``, without reading anything."""
    return st.session_state.get(ROWS_KEY, {}).get((store.location, int(run_id)))


def latest_value(frame: pd.DataFrame, name: str) -> float:
    """The last logged value of metric ``name`` in long rows, NaN if there is none."""
    values = frame.loc[frame["name"] == name, "value"]
    return float(values.iloc[-1]) if len(values) else math.nan


def read_now(store, run_id: int) -> None:
    """Read run ``run_id``'s shared look now: this session has just stopped it, and its panel, no longer polled
    once the run has ended, must draw it stopped (at its next :func:`watch`, which also reruns the page once)."""
    shared_runs().look(store, run_id, now=True)


def watch(store, run_id: int, *, flow: bool = False, wait_s: float = 0.0):
    """``(look, rows)``: the server's shared :class:`~pages.ui.shared.Look` at run ``run_id`` (its row, record
    and rows, read about once a second for every session: Note [Many watchers] in pages/ui/shared.py) and
    this session's :class:`LiveRows` of it; ``flow``: with the ``grad/h_t_norm`` and ``sv/spectrum`` series;
    ``wait_s``: a run without rows is waited for that long (Note [Waiting for the first rows]).
    Raises ``RunNotFound``."""
    look = shared_runs().first_rows(store, run_id, series=flow, wait_s=wait_s)
    cache = st.session_state.setdefault(ROWS_KEY, {})
    key = (store.location, int(run_id))
    before = cache.get(key)
    cache[key] = rows = LiveRows(look.metrics, look.flow, look.spectrum, look.depth, final=look.final,
                                 just_finished=before is not None and not before.final and look.final,
                                 seen=look.position, counts=look.counts, latest=look.latest, token=look.token)
    return look, rows


def run_rows(store, run, *, flow: bool = False) -> LiveRows:
    """This session's rows of ``run`` (a :meth:`RunStore.run` dict or a ``RunRecord``), as :func:`watch` gives
    them: every row the server has read of it, topped up with the rows logged since its last read when that
    is a second old.

    A terminal status means every row is already stored: then everything is read once more in full (rows
    a worker added to an already-seen step included) and the rows are final. A step that went back (a
    resumed run discards the rows after its checkpoint) is read afresh.
    """
    return watch(store, run["id"] if isinstance(run, dict) else run.id, flow=flow)[1]


def watched_runs(store, run_ids, *, wait_s: float = 0.0) -> tuple[dict, dict]:
    """``(records, rows)`` of the runs a live panel of several runs watches (Race, Reproduce), by id:
    each run's record (a missing one is a warning line, not an error) and its rows, both from the server's
    shared look (:func:`watch`). When a run has just finished, the page reruns once in full (its buttons
    update and the polling stops). ``wait_s``: while no run has a row and some run is active, they are looked
    at again for up to that long (pages/ui/shared.py, Note [Waiting for the first rows])."""
    from stability.runs.store import RunNotFound

    def read() -> tuple[dict, dict, list]:
        runs, rows, missing = {}, {}, []
        for run_id in run_ids:
            try:
                look, rows[run_id] = watch(store, run_id)
                runs[run_id] = look.record
            except RunNotFound:
                missing.append(run_id)
        return runs, rows, missing

    runs, rows, missing = awaited(read, lambda read: all(row.metrics.empty for row in read[1].values()) and any(
        run.status not in TERMINAL for run in read[0].values()), wait_s)
    if missing:  # one line however many (the link's ids are capped: Note [Linked ids] in pages/ui/links.py)
        shown = ", ".join(map(str, missing[:10])) + (f" and {len(missing) - 10:,} more" if len(missing) > 10 else "")
        st.warning(f"Run{'s' * (len(missing) > 1)} {shown} {'are' if len(missing) > 1 else 'is'} not in this store.")
    if any(row.just_finished for row in rows.values()):
        for row in rows.values():
            row.just_finished = False
        st.rerun()
    return runs, rows


def _position(run) -> tuple:
    """(status, step, heartbeat) of a run dict (``RunStore.run``) or a ``RunRecord``."""
    if isinstance(run, dict):
        return run["status"], run["step"], run["heartbeat"]
    return run.status, run.step, run.heartbeat


# ---------------------------------------------------------------------------------- live charts
def live_chart_specs(slot, charts: list[LiveChart], *, final: bool = False, shared: bool = False,
                     in_turn: bool = False, build_new: bool = True) -> list[dict | None]:
    """The Vega-Lite specs of ``charts``, kept in this session under ``slot`` (one per watched run) and
    refreshed per chart only when needed (stability/live/specs.py, Note [Live charts]); ``final``: the data
    will not change again, so it is drawn now. ``shared``: kept in the server for every session instead (Note
    [Shared specs] there): then ``slot`` with a chart's key and controls must name its rows, and its data
    version must tell them apart. ``in_turn``: of the charts never built before, only the first is built at
    this look, and the others are None, built at the next looks (Note [Drawn in turn] there); ``build_new``
    False: none of them (the charts built before are brought up to date), as :func:`drawn_in_turn` asks first."""
    options = dict(final=final, in_turn=in_turn, build_new=build_new)
    if shared:
        return shared_specs(shared_memo(SPECS_KEY, SHARED_SLOTS), slot, charts, **options)
    return session_specs(st.session_state.setdefault(SPECS_KEY, {}), slot, charts, **options)


def drawn_in_turn(slot, charts: list[LiveChart], draw: Callable[[list], list], **options) -> list[dict | None]:
    """At the first point's pace (Note [Drawn in turn] in stability/live/specs.py): the charts built at earlier
    looks are drawn first, ``draw(specs)`` returning a placeholder for each chart in order, and only then is
    the next new chart built and drawn into its place; returns the specs as :func:`live_chart_specs`
    (``in_turn=True``) gives them. ``options``: :func:`live_chart_specs`'s."""
    drawn = live_chart_specs(slot, charts, in_turn=True, build_new=False, **options)
    places = draw(drawn)
    specs = live_chart_specs(slot, charts, in_turn=True, **options)
    for place, before, spec in zip(places, drawn, specs):
        if before is None and spec is not None:
            show_chart(place, spec)
    return specs


def show_chart(container, spec: dict | None) -> None:
    """Draw a spec from :func:`live_chart_specs` (Streamlit copies the spec before it takes the data out);
    None, a chart not built yet (Note [Drawn in turn] in stability/live/specs.py), holds its place empty."""
    if spec is None:
        container.empty()
        return
    container.vega_lite_chart(spec=spec, width="stretch")


SKELETON_KEY = "chart_skeleton"  # the container of an empty chart before a run's first rows (Note [Skeleton])


# Note [Skeleton]
# ---------------
# Streamlit's frontend loads its Vega code (vega-embed, the Arrow reader, Vega's expression interpreter:
# some twenty modules) only when a page first draws a chart. On the Train page opened on an empty store
# that was at the first point itself: 0.6-1.0 s of the 1.9 s from Start to the first point drawn, on 2
# cores beside the run (the browser's resource timings; benchmarks/first_point.py). So where a panel has
# nothing to draw yet (no run, or a run awaiting its first rows), it draws the chart its first rows will
# fill, empty: the loss chart's axes and title and no point. Drawn once from a fixed spec, it costs the
# server nothing per look and the browser one chart; it sits in a container of its own
# (``st-key-chart_skeleton``), so a benchmark can tell it from a chart with points.
def draw_skeleton(container, title: str, height: int) -> None:
    """An empty line chart titled ``title`` (Note [Skeleton]): axes, no rows."""
    spec = shared_memo(SPECS_KEY, SHARED_SLOTS).get(("skeleton", title, height), lambda: skeleton_spec(title, height))
    show_chart(container.container(key=SKELETON_KEY), spec)


__all__ = [
    "DEFAULT_REFRESH",
    "FIRST_POINT_EVERY_S",
    "FIRST_ROWS_WAIT_S",
    "REFRESH_CHOICES",
    "LiveRows",
    "awaiting_first_point",
    "cached_rows",
    "describe_refresh",
    "live_chart_specs",
    "leave_first_point_pace",
    "draw_skeleton",
    "drawn_in_turn",
    "SKELETON_KEY",
    "live_every",
    "polled",
    "watching",
    "log_interval",
    "read_now",
    "refresh_control",
    "retime_if_needed",
    "run_rows",
    "watch",
    "watched_runs",
    "show_chart",
]
