"""Race: one task, several cells, the same seed and budget, started with one click; curves overlaid live.

The classroom demo (spectral paper §7.1, Fig. 1): the adding problem at T = 200, where the plain RNN's
gradient reaching the first step vanishes and the LSTM slows down, while Spectral-RNN and SGORNN keep
their singular values near 1. Widgets -> one RunConfig per cell -> scheduler.start_run each, within the slots
whoever started the server set (``STABILITY_MAX_RUNS``: the runs beyond them wait 'queued' and start as
slots free, stability/workers/slots.py) -> a fragment that reads every run's new rows once a second
(four times a second until each run's first point is drawn: Note [The first point] in stability/live/pace.py),
and says in one line a run what its rows show (stability.analysis.diagnosis). ``?runs=1,2,3`` reopens a race;
with ``?classroom=1`` (the "Classroom view" switch) without the form and the controls, the cells' equations above the charts and each chart one a
row with what to look at beside it (pages/ui/classroom.py, Note [Classroom view]).
"""
import functools
import math
from typing import Callable

import pandas as pd
import streamlit as st

from pages.ui.access import current_visitor, view_only_line
from pages.ui.chart_view import (CHART_HEIGHT, chart_grid, chart_grid_style, outliers_control,
                                  outliers_from_query)
from pages.ui.classroom import classroom_on, classroom_style, classroom_switch, explained, show_cells
from pages.ui.diagnosis import live_findings, race_line
from pages.ui.live import (FIRST_POINT_EVERY_S, FIRST_ROWS_WAIT_S, awaiting_first_point, cached_rows, draw_skeleton,
                           drawn_in_turn, leave_first_point_pace, live_chart_specs, polled, read_now, run_rows,
                           watched_runs)
from pages.ui.form import config_form
from pages.ui.links import QueryReader, config_from_query, config_to_query
from pages.ui.router import require_router
from pages.ui.shared import shared_memo
from pages.ui.store import keep_warm_slots, open_store, store_guard, store_path
from stability import access, cells
from stability import charts
from stability.config import ConfigError
from stability.config.demos import RACE_DEFAULTS, race_cells
from stability.core.metric_names import H0_NORM, STEPS_PER_S, SV_MARGIN, SV_MIN, TRAIN_LOSS, VAL_LOSS, is_loss_metric
from stability.live import LiveChart
from stability.runs.records import RunRecord
from stability.workers import processes, scheduler

require_router(__file__)

RACE_EVERY_S = 1.0  # the panel's rhythm once every run has drawn its first point (pages/ui/live.py)
LOG_STEPS_MEMO = "race_log_steps"  # each log chart's label step, once a look for every session (race_board)


def labels_for(runs: dict[int, RunRecord]) -> dict[int, str]:
    """The cell's name, with the run id where two runs share a cell."""
    names = {run_id: run.cell for run_id, run in runs.items()}
    repeated = {name for name in names.values() if list(names.values()).count(name) > 1}
    return {run_id: f"{name} #{run_id}" if name in repeated else name for run_id, name in names.items()}


def standings(runs: dict[int, RunRecord], labels: dict[int, str]) -> pd.DataFrame:
    """One row per run from its latest values (read with the run, in the same query)."""
    table = []
    for run_id, run in runs.items():
        metric, latest = run.metric or "loss", run.latest
        entry = {"run": labels[run_id], "id": run_id, "status": run.status, "progress": run.progress,
                 "step": run.step or 0, "val loss": latest.get(VAL_LOSS, math.nan)}
        if not is_loss_metric(metric):
            entry[f"val {metric}"] = latest.get(f"val/{metric}", math.nan)
        table.append({**entry, "‖∂L/∂h₀‖": latest.get(H0_NORM, math.nan), "σ margin": latest.get(SV_MARGIN, math.nan),
                      "steps/s": latest.get(STEPS_PER_S, math.nan), "error": run.error or ""})
    frame = pd.DataFrame(table)
    return frame if frame["error"].any() else frame.drop(columns="error")


def race_every(store, active: list[RunRecord]) -> float | None:
    """Seconds between the panel's looks: none once every run has ended, :data:`FIRST_POINT_EVERY_S` while
    a run awaits its first point (Note [The first point] in stability/live/pace.py), else :data:`RACE_EVERY_S`."""
    if not active:
        return None
    # a run not read yet in this session is read now: a page opened on a race with rows awaits none of them
    if any(awaiting_first_point(run, cached_rows(store, run.id) or run_rows(store, run)) for run in active):
        return FIRST_POINT_EVERY_S
    return RACE_EVERY_S


@store_guard
def race_panel(run_ids: list[int], smoothing: float, log_loss: bool, ignore_outliers: bool = True,
               every: float | None = None) -> None:
    store = open_store()
    first_point = every == FIRST_POINT_EVERY_S  # waits for the first rows (Note [Waiting for the first rows])
    runs, rows = watched_runs(store, run_ids, wait_s=FIRST_ROWS_WAIT_S if first_point else 0.0)
    if not runs:
        return
    race_board(store, runs, rows, smoothing, log_loss, ignore_outliers, in_turn=first_point)
    # drawn: back to the usual rhythm, once (a run that ended or waits long in the queue no longer holds it)
    leave_first_point_pace(every, any(awaiting_first_point(run, rows[run_id]) for run_id, run in runs.items()))


def race_board(store, runs: dict[int, RunRecord], rows: dict, smoothing: float, log_loss: bool,
               ignore_outliers: bool = True, in_turn: bool = False) -> None:
    """The standings, the errors, what is happening and the overlaid charts of the race's runs."""
    labels = labels_for(runs)
    st.dataframe(standings(runs, labels), hide_index=True, width="stretch", column_config={
        "progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0, format="percent"),
        "‖∂L/∂h₀‖": st.column_config.NumberColumn(format="%.2e"),
        "σ margin": st.column_config.NumberColumn(format="%.3g"),
        "steps/s": st.column_config.NumberColumn(format="%.1f")})
    for run_id, run in runs.items():
        if run.status in ("diverged", "failed"):
            st.error(f"{labels[run_id]} (run {run_id}) {run.status}: {run.error or 'no error message'}")
    if all(rows[run_id].metrics.empty for run_id in runs):
        st.info("Waiting for the first rows from the workers…")
        draw_skeleton(st, "Loss (train, validation): waiting for the first rows", CHART_HEIGHT)
        return
    # What is happening, one line a run, from the rows read above (pages/ui/diagnosis.py)
    st.markdown("**What is happening**  \n" + "  \n".join(
        race_line(labels[run_id], live_findings(("race", store.location, run_id), rows[run_id], run))
        for run_id, run in runs.items()))
    first = next(iter(runs.values()))
    frame = functools.cache(lambda: pd.concat([rows[run_id].metrics.assign(run=labels[run_id]) for run_id in runs],
                                              ignore_index=True))  # once a rerun, for the charts that need it
    controls, data = (tuple(runs), smoothing, log_loss, ignore_outliers), tuple(len(rows[run_id].metrics) for run_id in runs)
    # new rows go into the spec a chart has (its log axis's labels among its controls: a new decade rebuilds it)
    tokens = tuple(rows[run_id].token for run_id in runs)  # the shared looks these rows are (stability/live/tail.py)
    steps = shared_memo(LOG_STEPS_MEMO)
    live_charts = [LiveChart(f"race/{index}", (*controls, steps.get((tokens, index, controls), log_step)), data,
                             build, chart_rows, metric=metric)
                   for index, ((build, chart_rows, log_step), metric)
                   in enumerate(zip(race_chart_parts(frame, first, smoothing, log_loss, ignore_outliers),
                                    race_metrics(first)))]
    slot, final = ("race", store.location), all(rows[run_id].final for run_id in runs)
    if in_turn and not classroom_on():  # the first point's pace: one new chart a look, training loss first,
        drawn_in_turn(slot, live_charts, lambda specs: chart_grid(st, specs, "race", places=True),  # built after
                      final=final, shared=True)                                     # the others are drawn
        return                                                            # (Note [Drawn in turn], live/specs.py)
    specs = live_chart_specs(slot, live_charts, final=final, shared=True, in_turn=in_turn)
    if classroom_on():  # the cells once, above; beside each chart what to look at (its cells are all of them)
        show_cells(run.cell for run in runs.values())
        for spec, chart in zip(specs, live_charts):
            explained(spec, chart.metric)
        return
    chart_grid(st, specs, "race")


def race_metrics(first: RunRecord) -> list[str]:
    """The metric each chart of :func:`race_chart_parts` is about, in its order."""
    names = [TRAIN_LOSS, VAL_LOSS, H0_NORM, SV_MIN]
    if first.metric and not is_loss_metric(first.metric):
        names.insert(2, f"val/{first.metric}")
    return names


def race_chart_parts(frame: Callable[[], pd.DataFrame], first: RunRecord, smoothing: float, log_loss: bool,
                     ignore_outliers: bool = True) -> list[tuple[Callable[[], object], Callable[[], list], Callable]]:
    """Training and validation loss (with the baseline where it is in the loss's units), the task metric,
    ‖∂L/∂h₀‖ and the singular-value band, every run overlaid, each chart from ``frame()`` as (build, rows, log
    step), so that a panel at the first point's pace draws them in turn (Note [Drawn in turn] in
    stability/live/specs.py): ``build()`` its Altair chart, ``rows()``
    its datasets alone (a live page puts them into the spec it has: Note [Live charts] in stability/live/specs.py),
    ``log step()`` the decades between its log axis's labels (None on a linear axis), the one part of its spec
    that its rows set (stability.charts.lines, Note [Light charts])."""
    metric = first.metric
    baseline = {"baseline": first.baseline, "baseline_label": first.baseline_label}
    loss_baseline = baseline if metric and is_loss_metric(metric) else {}
    # the training loss first: a run's first point (step 0's loss, stored before its validation loss: Note
    # [Step 0 first] in stability/training/trainer.py) is the first chart a panel draws in turn
    curves = [dict(names=[TRAIN_LOSS], log_y=log_loss, smoothing=smoothing, title="Training loss", **loss_baseline),
              dict(names=[VAL_LOSS], log_y=log_loss, title="Validation loss", **loss_baseline),
              dict(names=[H0_NORM], log_y=True, smoothing=smoothing,
                   title="‖∂L/∂h₀‖, gradient at the first step (log)")]
    if metric and not is_loss_metric(metric):
        curves.insert(2, dict(names=[f"val/{metric}"], title=f"Validation {metric}", **baseline))
    parts = [_curve_parts(frame, {**options, "ignore_outliers": ignore_outliers}) for options in curves]
    return parts + [(lambda: charts.singular_value_band_chart(frame(), title="Singular values of W (band) and margin",
                                                             height=CHART_HEIGHT),
                     lambda: charts.singular_value_band_rows(frame()), lambda: None)]


def _curve_parts(frame: Callable[[], pd.DataFrame], options: dict) -> tuple:
    """(build, rows, log step) of one :func:`stability.charts.metric_chart` of the race (race_chart_parts)."""
    rows_options = {key: value for key, value in options.items() if key != "title"}
    references = [options["baseline"]] if options.get("baseline") is not None else []
    return (lambda: charts.metric_chart(frame(), height=CHART_HEIGHT, **options),
            lambda: charts.metric_chart_rows(frame(), **rows_options).datasets(),
            lambda: charts.metric_log_step(frame(), options["names"], references) if options.get("log_y") else None)


def start_race(visitor, configs) -> list[int]:
    """Start one run per cell through the visitor's guard (stability.access), queued beyond the server's slots;
    the ids started (also put in the link)."""
    started = []
    try:
        for config in configs:
            started.append(access.start_run(visitor, config, store_path()))
    except ConfigError as error:  # a bad config, a student's limit, a role that may not start: one line
        st.error(str(error))
    slots = scheduler.max_concurrent_runs()
    if len(started) > slots:
        st.info(f"{len(started) - slots} of these runs wait 'queued': this server trains {slots} at a "
                f"time ({processes.MAX_RUNS_ENV}); each starts as a slot frees.")
    if started:
        st.query_params["runs"] = ",".join(map(str, started))
    return started


classroom = classroom_switch()
classroom_style()
chart_grid_style()
st.title("Race")
if not classroom:
    st.caption("One task, several cells, the same seed, data and budget: one click starts them all at once. "
               "Watch which cells beat the task's memoryless baseline, and whose gradient at the first step "
               "vanishes.")

store = open_store()
visitor = current_visitor()
query = QueryReader()
defaults = config_from_query(RACE_DEFAULTS, query)
chosen_cells = query.choices("cells", cells.available(), race_cells(cells.available()))
race = query.ids("runs")
linked_outliers = outliers_from_query(query)
query.warn()
if classroom:  # no form, no controls: the race of the link, drawn with the defaults (Note [Classroom view])
    live = st.container()
    smoothing, log_loss, ignore_outliers = 0.0, False, linked_outliers
    if not race:
        live.info("The classroom view shows a race opened by its link (`?runs=1,2,3`): turn **Classroom view** "
                  "off (top right) to start one.")
else:
    form, live = st.columns([1, 2.6], gap="large")
    configs = stop_column = None
    with form:
        if visitor.may_start:
            configs = config_form("race", defaults=defaults, cells_multi=True, cells_default=chosen_cells)
            start_column, stop_column = st.columns(2)
            if start_column.button("Start race", type="primary", disabled=configs is None, key="race_start",
                                   width="stretch"):
                race = start_race(visitor, configs) or race
        else:  # no form: nothing to start (Note [Roles] in stability/access/policy.py)
            view_only_line(visitor)
    if configs:
        st.query_params.update({key: value for key, value in config_to_query(configs[0]).items() if key != "cell"})
        st.query_params["cells"] = ",".join(config.cell.name for config in configs)

    with live:
        if race:
            smooth, scale = st.columns([3, 1.2], vertical_alignment="bottom")
            smoothing = smooth.slider("Smoothing", 0.0, 0.99, 0.0, step=0.01, key="race_smoothing",
                                      help="Exponential moving average of the training curves (debiased, as "
                                           "TensorBoard's).")
            log_loss = scale.toggle("Log y", value=False, key="race_log_loss", help="Log scale for the losses.")
            ignore_outliers = outliers_control(scale, linked_outliers, key="race_outliers")
        else:
            st.info("Pick the cells on the left and press **Start race**: they train side by side with the same "
                    "seed and budget, and their curves appear here." if visitor.may_start else
                    "A race opens here from its link (`?runs=1,2,3`), as the lecturer shares it.")
            draw_skeleton(st, "Loss (train, validation): press Start race", CHART_HEIGHT)

active = [run for run in store.active_runs() if run.id in race]
mine = [run for run in active if visitor.may_change(run.owner)]
if not classroom and stop_column is not None and stop_column.button(
        "Stop race", disabled=not mine, key="race_stop", width="stretch"):
    for run in mine:
        try:
            access.stop_run(visitor, run.id, store_path())
        except ConfigError as error:
            st.error(str(error))
        read_now(store, run.id)  # the panel, no longer polled, shows it stopped
    active = [run for run in active if run not in mine]

if not classroom and configs and not active:  # a worker with torch imported for each run of the next race
    keep_warm_slots(len(configs))
if race:
    every = race_every(store, active)
    with live:
        polled(race_panel, every, race, smoothing, log_loss, ignore_outliers, every)
