"""Train: configure a run, start it in the background, watch it live.

Widgets -> RunConfig -> scheduler.start_run -> (a worker writes the store) -> a fragment that looks at the
run on a timer that follows its logging (or the "Live updates" setting), reads only the rows logged since
its last look, and redraws only the charts whose rows changed (stability/live/pace.py, Note [Watching cheaply]),
with "What is happening" above them: stability.analysis.diagnosis's findings on the same rows, in words.
The widgets live outside the fragment, so polling never resets them. ``?run=ID`` reopens a run,
``?refresh=auto|2|5|10|30|off`` sets the live updates. ``?classroom=1`` (the "Classroom view" switch) shows
the watched run (``?run=ID``, else the newest) without the form and the controls, each chart one a row with
what to look at and the cell's equations beside it (pages/ui/classroom.py, Note [Classroom view]).
"""
import streamlit as st

from pages.ui.access import current_visitor, view_only_line
from pages.ui.chart_view import (CHART_HEIGHT, chart_grid, chart_grid_style, outliers_control,
                                  outliers_from_query)
from pages.ui.classroom import classroom_on, classroom_style, classroom_switch, explained
from pages.ui.diagnosis import live_findings, show_findings
from pages.ui.form import config_form
from pages.ui.links import QueryReader, config_from_query, config_to_query
from pages.ui.router import require_router
from pages.ui.status import EXTERNAL, run_status_panel
from pages.ui.store import open_store, store_guard, store_path
from pages.ui.live import (
    DEFAULT_REFRESH,
    FIRST_POINT_EVERY_S,
    FIRST_ROWS_WAIT_S,
    REFRESH_CHOICES,
    awaiting_first_point,
    cached_rows,
    draw_skeleton,
    drawn_in_turn,
    leave_first_point_pace,
    describe_refresh,
    live_chart_specs,
    live_every,
    polled,
    refresh_control,
    retime_if_needed,
    run_rows,
    read_now,
    show_chart,
    watch,
)
from stability import access
from stability.config import ConfigError, RunConfig
from stability.core.metric_names import ETA_S
from stability.live import LiveChart, heatmaps, run_panels, summary_values
from stability.runs.status import TERMINAL
from stability.runs.store import RunNotFound

require_router(__file__)

RUN_CHOICES = 200  # newest runs offered in the "Watching" box


def form_defaults(store, run_id: int | None, query: QueryReader) -> RunConfig:
    """The watched run's config (so ?run=ID also reloads its settings), overridden by the URL's."""
    base = RunConfig()
    if run_id is not None:
        try:
            base = store.record(run_id, latest=False).config or base  # None: an external run, or one that no longer parses
        except RunNotFound:
            query.note(f"run={run_id} (no such run in this store)")
    return config_from_query(base, query)


def run_label(row) -> str:
    return f"#{row.id} · {row.cell} on {row.task}" + (f" · {row.name}" if row.name else "")


def summary(record, rows) -> None:
    values = summary_values(record.metric, rows)
    for column, (label, text) in zip(st.columns(len(values)), values):
        column.metric(label, text)


def train_charts(record, rows, smoothing: float, log_loss: bool, ignore_outliers: bool = True) -> list[LiveChart]:
    """The run's live charts (stability/live/panels.py) for its ``RunRecord``, drawn with the page's controls."""
    return run_panels(rows, cell=record.cell, metric=record.metric, baseline=record.baseline,
                      baseline_label=record.baseline_label, smoothing=smoothing, log_loss=log_loss,
                      ignore_outliers=ignore_outliers, height=CHART_HEIGHT)


def draw_grid(specs: list, wide: int, places: bool = False) -> list:
    """One or two charts a row, as wide as the page allows (pages/ui/chart_view.py, Note [Chart grid]); the
    ``wide`` heatmaps over training, when there are any, each across the whole width below (the picture of a
    gradient dying, or of a spectrum held near 1, over all of training). ``places``: as chart_grid's."""
    drawn = chart_grid(st, specs[:len(specs) - wide], "train", places)
    for spec in specs[len(specs) - wide:]:
        place = st.empty() if places else st
        show_chart(place, spec)
        drawn.append(place)
    return drawn if places else []


def draw_explained(specs: list, live_charts: list[LiveChart], cell: str) -> None:
    """Classroom view: one chart a row, what to look at and the cell's equations beside it."""
    for spec, chart in zip(specs, live_charts):
        explained(spec, chart.metric, cell)


@store_guard
def live_panel(run_id: int, smoothing: float, log_loss: bool, refresh: str = DEFAULT_REFRESH,
               every: float | None = None, ignore_outliers: bool = True) -> None:
    store = open_store()
    try:  # the server's look at the run, read about once a second for every session (stability/live/tail.py)
        look, rows = watch(store, run_id, flow=True,  # at the first point's pace, waits for the first rows
                           wait_s=FIRST_ROWS_WAIT_S if every == FIRST_POINT_EVERY_S else 0.0)
    except RunNotFound:
        st.warning(f"Run {run_id} is not in this store.")
        return
    record = look.record
    if rows.just_finished:  # once: a full rerun stops the polling and updates the Stop button
        rows.just_finished = False
        st.rerun()
    retime_if_needed(refresh, every, record, rows)
    classroom = classroom_on()
    # the status line at the charts' rhythm, its step moving between log steps (Note [A status that moves])
    run_status_panel(store, record, eta_step=rows.counts.get(ETA_S, (0, None))[1])
    if not classroom:
        st.caption(describe_refresh(refresh, every, record, rows))
    if every is None and record.status not in TERMINAL and not classroom:
        if st.button("Refresh now", key="train_refresh_now", help="Read the rows logged since the last look."):
            st.rerun()  # the whole page: the status line's fragment too
    if rows.metrics.empty:
        st.info("Waiting for the first rows from the worker…")
        draw_skeleton(st, "Loss (train, validation): waiting for the first rows", CHART_HEIGHT)
        leave_first_point_pace(every, awaiting_first_point(record, rows))  # ended or queued long: the usual rhythm
        return
    summary(record, rows)
    # in words, from the rows read above (pages/ui/diagnosis.py, Note [Findings cost nothing when nothing changed])
    show_findings(st, live_findings(("train", store.location, run_id), rows, record))
    live_charts = train_charts(record, rows, smoothing, log_loss, ignore_outliers)
    # at the first point's pace, one new chart a look, loss first, built after the others are drawn (Note
    # [Drawn in turn])
    slot, in_turn = ("train", store.location, run_id), every == FIRST_POINT_EVERY_S
    if in_turn and not classroom:
        specs = drawn_in_turn(slot, live_charts, lambda specs: draw_grid(specs, heatmaps(rows), places=True),
                              final=rows.final, shared=True)
    else:
        specs = live_chart_specs(slot, live_charts, final=rows.final, shared=True, in_turn=in_turn)
        if classroom:
            draw_explained(specs, live_charts, record.cell)
        else:
            draw_grid(specs, heatmaps(rows))
    # every chart drawn: back to the usual rhythm, once
    leave_first_point_pace(every, awaiting_first_point(record, rows) or None in specs)


def watched_in_class(store, requested: int | None, query: QueryReader) -> int | None:
    """The run the classroom view shows: ``?run=ID`` if the store has it (else noted on ``query``), else the
    newest run; None if there are none (a line says how to start one)."""
    watched = None
    if requested is not None:
        try:
            watched = store.record(requested, latest=False).id
        except RunNotFound:
            query.note(f"run={requested} (no such run in this store)")
    if watched is None:
        newest = store.records(latest=False, limit=1)
        if not newest:
            st.info("No runs yet: turn **Classroom view** off (top right) to configure and start one.")
            return None
        watched = newest[0].id
    st.query_params["run"] = str(watched)
    return watched


def start_watching(visitor, config: RunConfig, requested: int | None) -> int | None:
    """Start ``config`` through the visitor's guard (stability.access) and watch it; the run watched."""
    try:
        started = access.start_run(visitor, config, store_path())
    except ConfigError as error:  # a bad config, a student's limit, a role that may not start: one line
        st.error(str(error))
        return requested
    st.query_params["run"] = str(started)
    # Watched from now on, whatever ?run= said: set through the widget's state, which the browser
    # takes too (a removed state would come back from the browser's copy at the next click).
    st.session_state["train_watch"] = started
    return started


classroom = classroom_switch()
classroom_style()
chart_grid_style()
st.title("Train")
visitor = current_visitor()
if not classroom:
    st.caption(("Pick a cell and a task, press Start, and watch" if visitor.may_start else "Watch a run:") +
               " the loss, the gradient reaching the first step, the singular values of the recurrent matrix and "
               "the gradient flow through time, live.")

store = open_store()
query = QueryReader()
requested = next(iter(query.ids("run")), None)
if classroom:  # no form, no controls: the run of the link, drawn with the defaults (Note [Classroom view])
    linked_refresh = query.choice("refresh", list(REFRESH_CHOICES), DEFAULT_REFRESH)
    ignore_outliers = outliers_from_query(query)
    live = st.container()
    with live:
        watched = watched_in_class(store, requested, query)
        query.warn()
    smoothing, log_loss, refresh = 0.0, False, linked_refresh
else:
    defaults = form_defaults(store, requested, query)
    linked_refresh = query.choice("refresh", list(REFRESH_CHOICES), DEFAULT_REFRESH)
    linked_outliers = outliers_from_query(query)
    query.warn()
    form, live = st.columns([1, 2.6], gap="large")

    config = stop_column = None
    with form:
        if visitor.may_start:
            config = config_form("train", defaults=defaults)
            start_column, stop_column = st.columns(2)
            if start_column.button("Start", type="primary", disabled=config is None, key="train_start",
                                   width="stretch"):
                requested = start_watching(visitor, config, requested)
        else:  # no form: nothing to start (Note [Roles] in stability/access/policy.py)
            view_only_line(visitor)
    if config is not None:
        st.query_params.update(config_to_query(config))

    runs = store.records(latest=False, limit=RUN_CHOICES)
    watched = None
    with live:
        if not runs:
            st.info("No runs yet: configure one on the left and press **Start**." if visitor.may_start else
                    "No runs yet: they appear here once the lecturer starts one.")
            draw_skeleton(st, "Loss (train, validation): press Start", CHART_HEIGHT)
        else:
            labels = {run.id: run_label(run) for run in runs}
            # two rows, so that no label is cut beside the form on a 1,280-px projector
            pick, cadence = st.columns([2.6, 1.4], vertical_alignment="bottom")
            smooth, scale = st.columns([3, 1.3], vertical_alignment="bottom")
            if st.session_state.get("train_watch") not in labels:  # a new session, or its run was deleted
                st.session_state["train_watch"] = requested if requested in labels else runs[0].id
            watched = pick.selectbox("Watching", list(labels), format_func=labels.get, key="train_watch")
            smoothing = smooth.slider("Smoothing", 0.0, 0.99, 0.0, step=0.01, key="train_smoothing",
                                      help="Exponential moving average of the curves (TensorBoard's, debiased); "
                                           "the raw curve stays faint behind.")
            log_loss = scale.toggle("Log y", value=False, key="train_log_loss", help="Log scale for the loss.")
            ignore_outliers = outliers_control(scale, linked_outliers, key="train_outliers")
            refresh = refresh_control(cadence, linked_refresh)
            st.query_params["run"] = str(watched)

record = store.record(watched, latest=False) if watched is not None else None
status = record.status if record is not None else None
if classroom or stop_column is None:  # the projector's view, or a visitor who starts nothing
    pass
elif record is not None and record.external:  # not ours to stop (pages/ui/status.py)
    stop_column.caption(EXTERNAL)
elif record is not None and not visitor.may_change(record.owner):
    stop_column.caption("Not your run: its owner or the lecturer stops it.")
elif stop_column.button("Stop", disabled=status is None or status in TERMINAL, key="train_stop", width="stretch"):
    try:
        status = access.stop_run(visitor, watched, store_path())
    except ConfigError as error:
        st.error(str(error))

if watched is not None:
    if status != record.status:  # stopped just now: the panel, no longer polled, reads it once more now
        record = store.record(watched, latest=False)
        read_now(store, watched)
    rows = cached_rows(store, watched)
    if rows is None and status not in TERMINAL:  # read now: a page opened on a run with rows is not awaiting them
        rows = run_rows(store, record, flow=True)
    every = live_every(refresh, record, rows)
    with live:
        polled(live_panel, every, watched, smoothing, log_loss, refresh, every, ignore_outliers)
