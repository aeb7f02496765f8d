"""The Train page's live panel made cheap to watch: when it reruns, what it reads, what it sends.

    refresh = refresh_control(column, query.choice("refresh", list(REFRESH_CHOICES), DEFAULT_REFRESH))
    every = live_every(refresh, run, cached_rows(store, run_id))      # seconds between reruns; None: no polling
    rows = run_rows(store, run, flow=True)              # read only when the run's step or heartbeat moved
    specs = live_chart_specs(("train", store.location, run_id), live_charts, final=rows.final)
    for spec in specs: show_chart(st, spec)             # a chart whose rows did not change is the same spec

How often a panel looks (the timer that follows the run, the first point's pace, Note [Watching cheaply])
is stability/live/pace.py's; what it sends (the chart specs, their Arrow rows, kept for a session or for the
whole server) stability/live/specs.py's; what it reads (the server's shared look at a run, only the rows logged
since the last read) stability/live/tail.py's, kept in the server by pages/ui/shared.py.

Streamlit only: the session's state, the server's caches, fragments, reruns and drawing.
"""
from __future__ import annotations

import functools
import math
import time
import uuid
from typing import Callable

import streamlit as st

from stability.live import (AUTO_EVERY_S, DEFAULT_REFRESH, FIRST_POINT_EVERY_S, FIRST_ROWS_WAIT_S,  # noqa: F401
                            REFRESH_CHOICES, RETIME_EVERY_S, SHARED_SLOTS, Audience, LiveChart, LiveRows, awaited,
                            awaiting_first_point, describe_refresh, drifted, live_every, log_interval, needs_retime,
                            not_in_store, paced, session_rows, session_specs, shared_specs,
                            skeleton_spec)  # the pace's names: the pages' too, from here
from stability.runs.status import TERMINAL

from .shared import shared_memo, shared_runs

ROWS_KEY, SPECS_KEY, RETIMED_KEY, ROWS_MEMO = "_live_rows", "_live_specs", "_live_retimed", "_live_rows_memo"
AUDIENCE_KEY, PACED_KEY = "_live_audience", "_live_paced"  # this session's token; its last re-pacing


# ---------------------------------------------------------------------------------------- refresh
def refresh_control(container, default: str = DEFAULT_REFRESH, key: str = "train_refresh") -> str:
    """The "Live updates" setting (a key of ``REFRESH_CHOICES``), starting at ``default`` (a link's
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


def leave_first_point_pace(every: float | None, waiting: bool) -> None:
    """Rerun the page once when a panel polling at ``FIRST_POINT_EVERY_S`` has nothing left to wait for
    (Note [The first point] in stability/live/pace.py); call it after the panel has drawn what it read."""
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
    fragment counts its session at every look, and when the audience has moved its pace ``RETIME_FACTOR``
    away (stability/live/pace.py) it reruns the page (which sets its timer again), at most every
    ``RETIME_EVERY_S``."""
    period = paced(every, watching())

    @functools.wraps(panel)  # the fragment keeps the panel's name, hence its id (Streamlit's: module, name, place)
    def look(*args, **kwargs):
        wanted = paced(every, watching())
        if drifted(wanted, period):
            now = time.monotonic()
            if now - st.session_state.get(PACED_KEY, -math.inf) >= RETIME_EVERY_S:
                st.session_state[PACED_KEY] = now
                st.rerun()
        panel(*args, **kwargs)

    st.fragment(look, run_every=period)(*args, **kwargs)


def retime_if_needed(refresh: str, every: float | None, run, rows: LiveRows) -> None:
    """With Auto, rerun the whole page (which sets the panel's timer again) when the run's logging interval
    has moved away from the panel's timer (stability/live/pace.py's needs_retime); at most every
    ``RETIME_EVERY_S``."""
    if not needs_retime(refresh, every, run, rows):
        return
    now = time.monotonic()
    if now - st.session_state.get(RETIMED_KEY, -math.inf) >= RETIME_EVERY_S:
        st.session_state[RETIMED_KEY] = now
        st.rerun()


# ------------------------------------------------------------------------------------ live rows
def cached_rows(store, run_id: int) -> LiveRows | None:
    """The rows this session has read of ``run_id``, without reading anything."""
    return st.session_state.get(ROWS_KEY, {}).get((store.location, int(run_id)))


def read_now(store, run_id: int) -> None:
    """Read run ``run_id``'s shared look now: this session has just stopped it, and its panel, no longer polled
    once the run has ended, must draw it stopped (at its next :func:`watch`, which also reruns the page once)."""
    shared_runs().look(store, run_id, now=True)


def watch(store, run_id: int, *, flow: bool = False, wait_s: float = 0.0):
    """``(look, rows)``: the server's shared :class:`~stability.live.tail.Look` at run ``run_id`` (its row, record
    and rows, read about once a second for every session: Note [Many watchers] in stability/live/tail.py) and
    this session's :class:`~stability.live.tail.LiveRows` of it; ``flow``: with the ``grad/h_t_norm`` and ``sv/spectrum`` series;
    ``wait_s``: a run without rows is waited for that long (Note [Waiting for the first rows]).
    Raises ``RunNotFound``."""
    look = shared_runs().first_rows(store, run_id, series=flow, wait_s=wait_s)
    cache = st.session_state.setdefault(ROWS_KEY, {})
    key = (store.location, int(run_id))
    cache[key] = rows = session_rows(look, cache.get(key), shared_memo(ROWS_MEMO))
    return look, rows


def run_rows(store, run, *, flow: bool = False) -> LiveRows:
    """This session's rows of ``run`` (a ``RunRecord``), as :func:`watch` gives
    them: every row the server has read of it, topped up with the rows logged since its last read when that
    is a second old.

    A terminal status means every row is already stored: then everything is read once more in full (rows
    a worker added to an already-seen step included) and the rows are final. A step that went back (a
    resumed run discards the rows after its checkpoint) is read afresh.
    """
    return watch(store, run.id, flow=flow)[1]


def watched_runs(store, run_ids, *, wait_s: float = 0.0) -> tuple[dict, dict]:
    """``(records, rows)`` of the runs a live panel of several runs watches (Race, Reproduce), by id:
    each run's record (a missing one is a warning line, not an error) and its rows, both from the server's
    shared look (:func:`watch`). When a run has just finished, the page reruns once in full (its buttons
    update and the polling stops). ``wait_s``: while no run has a row and some run is active, they are looked
    at again for up to that long (stability/live/tail.py, Note [Waiting for the first rows])."""
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
        st.warning(not_in_store(missing))
    if any(row.just_finished for row in rows.values()):
        for row in rows.values():
            row.just_finished = False
        st.rerun()
    return runs, rows


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
