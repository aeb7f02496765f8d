"""Sweep: one base config, some fields varied, N seeds each; start it, watch its results live.

Start:  config form (as Train) -> Vary rows (``FIELD`` and values in the CLI's --vary syntax) -> seeds,
        sampler, pruning, workers -> sweeps.build_spec (SweepError: one line) -> its description, runs
        and rough time (sweeps.estimate, its unknown shapes timed in a separate process: the line is redrawn
        when their timings come) -> Start -> sweeps.start_sweep -> ``?sweep=ID``.
Watch:  a sweep (the "Watching" box or ``?sweep=ID``) -> progress by status, Stop / Resume ->
        sweeps.results (one row per run) -> groups.setting_table -> the objective against a varied
        field, a heatmap over two, parallel coordinates, curves over seeds -> the settings table
        (links to each run's Train page) and the results as CSV.

Note [Watching a sweep]
-----------------------
A sweep's workers train beside the page, so the page must cost little to keep open (issue 12: a live
16-run sweep page under the live-page benchmark's budget).  The watch panel is a fragment on a timer
(the "Live updates" setting; Auto looks every :data:`AUTO_EVERY_S` s while the sweep runs, never after
it ended).  Each rerun reads the sweep's row and its runs' results (sweeps.results: the runs and their
latest values, two indexed queries).  The charts of the objective are rebuilt only when a run's status
or objective changed (``watching.objective_version``: at evaluation steps, not at every training step); the
curves only when a run reached a new step (``watching.results_version``), and only then are their rows read,
in one query for the chosen metric.  An unchanged chart is sent as the identical spec, which the browser
does not redraw (Note [Watching cheaply] in stability/live/pace.py; Notes [Live charts], [Stable specs] in
stability/live/specs.py).  When the
sweep ends the page reruns once, to stop polling and update its buttons.
"""
from __future__ import annotations

import dataclasses
import json

import pandas as pd
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from pages.ui.access import current_visitor, view_only_line
from pages.ui.form import config_form
from pages.ui.live import REFRESH_CHOICES, DEFAULT_REFRESH, live_chart_specs, polled, refresh_control, show_chart
from pages.ui.links import QueryReader
from pages.ui.classroom import classroom_style, classroom_switch
from pages.ui.router import require_router
from pages.ui.status import format_duration
from pages.ui.store import open_store, store_guard, store_path
from stability import access, sweeps
from stability.workers import processes, scheduler
from stability import charts
from stability.analysis import groups
from stability.config import RunConfig
from stability.live import LiveChart, sweep_panels
from stability.runs.store import SweepNotFound
from stability.sweeps import starting, watching
from stability.sweeps.spec import Offered

require_router(__file__)

AUTO_EVERY_S = 5.0
ESTIMATE_TTL_S = 120.0             # a rough time is timed again after this long (completed runs improve it)
TIMING_EVERY_S = 1.0               # the rough time line looks again this often while its shapes are timed apart
SWEEP_CHOICES = 100                # newest sweeps offered in the "Watching" box
VARY_ROWS = 2                      # rows of the Vary editor at first
MAX_VARY_ROWS = 8
# What the Vary rows may name: the fields the config form shows, nothing it hides (stability/sweeps/spec.py,
# Note [Offered fields]). The train fields are those of pages/ui/form.py's "Training" section.
OFFERED = Offered(train=frozenset({"optimizer", "lr", "lr_schedule", "lr_step_size", "lr_gamma", "batch_size",
                                   "steps", "clip_grad_norm", "weight_decay", "dtype", "device",
                                   "freeze_recurrent"}))
CHART_HEIGHT = 360  # px, a chart with its title, legend and axes: room for a wrapped legend above its plot
NO_COLOUR = "(none)"


# ------------------------------------------------------------------------------------ start
def vary_editor(base: RunConfig) -> list[str]:
    """Rows of (field, values); returns the ``FIELD=VALUES`` texts of the filled rows."""
    count = st.session_state.setdefault("sweep_vary_rows", VARY_ROWS)
    choices = starting.field_choices(base.cell.name)
    texts = []
    for row in range(count):
        field_column, values_column = st.columns([1, 1.4])
        vary = starting.DEFAULT_VARY
        default_field, default_values = vary[row] if row < len(vary) else (None, "")
        field = field_column.selectbox(
            "Field" if row == 0 else f"Field {row + 1}", choices, key=f"sweep_vary_field_{row}",
            index=choices.index(default_field) if default_field in choices else None, accept_new_options=True,
            placeholder="a config path", label_visibility="visible" if row == 0 else "collapsed",
            help="What to vary: a name from the list, or any setting the form shows (cell.OPTION, "
                 "task.OPTION, a training setting).")
        values = values_column.text_input(
            "Values" if row == 0 else f"Values {row + 1}", value=default_values, key=f"sweep_vary_values_{row}",
            placeholder=starting.FIELD_HINTS.get(field or "", "V1,V2,... or LOW:HIGH:COUNT[:log]"),
            label_visibility="visible" if row == 0 else "collapsed",
            help="V1,V2,... or LOW:HIGH:COUNT (evenly spaced), LOW:HIGH:COUNT:log (log-spaced); random and "
                 "TPE also take LOW:HIGH[:log], any value in the range.")
        if field and values.strip():
            texts.append(f"{field.strip()}={values.strip()}")
    add, remove = st.columns(2)
    add.button("Add a field", key="sweep_vary_add", disabled=count >= MAX_VARY_ROWS, width="stretch",
               on_click=lambda: st.session_state.update(sweep_vary_rows=count + 1))
    remove.button("Remove the last", key="sweep_vary_remove", disabled=count <= 1, width="stretch",
                  on_click=lambda: st.session_state.update(sweep_vary_rows=count - 1))
    return texts


@st.cache_data(show_spinner=False, max_entries=128)
def checked_spec(base_json: str, texts: tuple, seeds: int, sampler: str, trials: int | None,
                 prune: bool) -> tuple[dict | None, str | None, str | None]:
    """(the checked spec as a dict, None, a note on the models not built) or (None, the SweepError's line,
    None); each sweep is checked once per server process, a few of its models built, and only over the
    fields the form offers (:data:`OFFERED`), every size refused before it is listed or built
    (stability/sweeps/spec.py, Note [Bounded checks])."""
    try:
        spec = sweeps.build_spec(RunConfig.from_json(base_json), list(texts), seeds=seeds, sampler=sampler,
                                 trials=trials, prune=prune, offered=OFFERED)
    except sweeps.SweepError as error:
        return None, str(error), None
    return spec.to_dict(), None, spec.check_note()


class TimingPending(Exception):
    """A rough time whose shapes a separate process still times: not to be cached."""

    def __init__(self, estimate: dict):
        super().__init__("timing")
        self.estimate = estimate


@st.cache_data(show_spinner=False, ttl=ESTIMATE_TTL_S, max_entries=64)
def settled_rough_time(spec_json: str, workers: int, _session: str | None = None) -> dict | None:
    """sweeps.estimate_sweep_time of a spec once no shape of it is being timed, kept for :data:`ESTIMATE_TTL_S`
    (completed runs improve it); TimingPending, not kept, while one is. ``_session`` (not part of the cache's
    key): who waits for the timings, whose next request replaces this one (stability/workers/timing.py,
    Note [One timing child])."""
    estimate = sweeps.estimate_sweep_time(sweeps.SweepSpec.from_dict(json.loads(spec_json)), open_store(), workers,
                                          apart=True, requester=_session)
    if estimate is not None and estimate["pending"]:
        raise TimingPending(estimate)
    return estimate


def rough_time(spec_json: str, workers: int) -> dict | None:
    """The sweep's rough time (Note [Rough time] in stability/sweeps/rough_time.py): shapes the store has run
    and shapes timed before, at once; the others from their operation count while a separate process times
    them, under a time limit (``apart``: this server never builds or trains a model)."""
    context = get_script_run_ctx()
    try:
        return settled_rough_time(spec_json, workers, context.session_id if context else None)
    except TimingPending as pending:
        return pending.estimate


def rough_time_line(spec_json: str, size: int, workers: int, polling: bool = False) -> None:
    """``**N runs** · about T (basis)``; while shapes are being timed apart, redrawn every
    :data:`TIMING_EVERY_S` s (a fragment), and the page once when their timings are in."""
    estimate = rough_time(spec_json, workers)
    timing = (f"about {format_duration(estimate['seconds'])} ({estimate['basis']})" if estimate
              else "no time estimate: no model of this sweep could be timed")
    st.markdown(f"**{size:,} runs** · {timing}")
    if polling and not (estimate or {}).get("pending"):
        st.rerun()  # the timings are in: the line stops polling


def sweep_settings() -> dict:
    """Seeds, sampler and trials, pruning, workers and a name."""
    left, right = st.columns(2)
    seeds = int(left.number_input("Seeds", min_value=1, max_value=100, value=3, step=1, key="sweep_seeds",
                                  help="Each setting runs with the seeds base, base + 1, ..."))
    slots = scheduler.max_concurrent_runs()  # the server's run slots, shared with every run (workers/slots.py)
    workers = int(right.number_input("Workers", min_value=1, max_value=slots, value=min(2, slots), step=1,
                                     key="sweep_workers",
                                     help=f"Runs trained at once, each in its own process: at most this server's "
                                          f"{slots} run slot{'s' * (slots > 1)} ({processes.MAX_RUNS_ENV}), shared with "
                                          "every other run; workers without a free slot start as one frees."))
    sampler = left.selectbox("Sampler", sweeps.SAMPLERS, key="sweep_sampler",
                             help="grid: every setting; random and tpe: Optuna samples a trial budget of settings.")
    trials = int(right.number_input("Trials", min_value=1, max_value=10_000, value=8, step=1, key="sweep_trials",
                                    disabled=sampler == "grid", help="Settings to sample (random and tpe)."))
    prune = st.checkbox("Prune hopeless trials", key="sweep_prune",
                        help="Optuna's median pruner stops a run whose validation loss is worse than the median "
                             "of the others at the same step; its rows are kept.")
    name = st.text_input("Name (optional)", key="sweep_name")
    return {"seeds": seeds, "sampler": sampler, "trials": None if sampler == "grid" else trials, "prune": prune,
            "workers": workers, "name": name.strip()}


def start_section(store) -> int | None:
    """The form: the base config on the left, what to vary and how on the right; returns the id of a
    sweep started just now."""
    config_column, vary_column = st.columns([1, 1.15], gap="large")
    with config_column:
        base = config_form("sweep")
    with vary_column:
        st.markdown("**Vary**")
        texts = vary_editor(base or RunConfig())
        settings = sweep_settings()
        return ready_to_start(base, texts, settings)


def ready_to_start(base: RunConfig | None, texts: list[str], settings: dict) -> int | None:
    """The checked sweep's description, runs and rough time, and the Start button (or the one error line)."""
    if base is None:
        return None
    spec_dict, problem, note = checked_spec(starting.without_default_options(base).to_json(), tuple(texts),
                                            settings["seeds"], settings["sampler"], settings["trials"],
                                            settings["prune"])
    if problem:
        st.error(problem)
        return None
    spec = sweeps.SweepSpec.from_dict(spec_dict)
    st.caption(spec.describe() + (f" · {note}" if note else ""))
    spec_json = json.dumps(spec_dict, sort_keys=True)
    if (rough_time(spec_json, settings["workers"]) or {}).get("pending"):
        st.fragment(rough_time_line, run_every=TIMING_EVERY_S)(spec_json, spec.size(), settings["workers"], True)
    else:
        rough_time_line(spec_json, spec.size(), settings["workers"])
    visitor = current_visitor()
    if visitor.role == access.STUDENT:  # what the action will hold them to (Note [A student's sweep])
        st.caption(f":material/person: Your limits: {visitor.limits.describe(sweeps=True)}.")
    if st.button("Start", type="primary", key="sweep_start", width="stretch"):
        try:  # the guard is in the action: a student's limits, a viewer refused (Note [Guarded in the action])
            return access.start_sweep(visitor, spec, store_path(), workers=settings["workers"], name=settings["name"])
        except (sweeps.SweepError, access.Refused) as error:  # shown below the form, which may fold now
            st.session_state["sweep_refused"] = str(error)
    return None


# ------------------------------------------------------------------------------------ watch
def show_progress(spec: sweeps.SweepSpec, counts: dict) -> None:
    """Runs done of the sweep's total, and how many are in each status."""
    fraction, text = watching.progress(spec, counts)
    st.progress(fraction, text=text)


def settings_of(sweep_id: int, results: pd.DataFrame, fields: list[str], direction: str) -> pd.DataFrame:
    """groups.setting_table of the results, computed again only when a run's status or objective changed."""
    cache = st.session_state.setdefault("_sweep_settings", {})
    version = (sweep_id, tuple(fields), direction, watching.objective_version(results))
    if cache.get("version") != version:
        cache.update(version=version, table=groups.setting_table(results, fields, direction))
    return cache["table"]


def curve_rows(store, sweep_id: int, metric: str, version: tuple) -> pd.DataFrame:
    """The rows of ``metric`` of the sweep's runs, read again only when a run moved (Note [Watching a sweep])."""
    cache = st.session_state.setdefault("_sweep_curves", {})
    key = (sweep_id, metric)
    if key not in cache or cache[key][0] != version:
        cache.clear()
        cache[key] = (version, store.metrics_many([run_id for run_id, *_ in version], names=[metric]))
    return cache[key][1]


def run_link(run_id) -> str | None:
    """A link to the run's Train page (the app's default page)."""
    return None if pd.isna(run_id) else f"./?run={int(run_id)}"


def chart_controls(spec: sweeps.SweepSpec) -> dict:
    """x field, colour field, heatmap fields, curve metric, log objective; the choices read the spec."""
    fields = [vary.field for vary in spec.vary]
    if not fields:
        metric = st.selectbox("Curves of", watching.CURVE_METRICS, key="sweep_metric")
        return {"fields": [], "metric": metric, "log_y": True}
    log_fields = charts.log_fields(spec.vary)
    default_x = next((f for f in fields if f in log_fields), fields[0])
    row = st.columns([1.1, 1.1, 1.1, 1.1, 1.3, 1.1], vertical_alignment="bottom")  # "Log y" uncut at 1,280 px
    x_field = row[0].selectbox("x", fields, index=fields.index(default_x), key="sweep_x",
                               format_func=charts.field_title, help="The varied field along x.")
    others = [NO_COLOUR] + [f for f in fields if f != x_field]
    colour = row[1].selectbox("Line per", others, index=1 if len(others) > 1 else 0, key="sweep_colour",
                              format_func=lambda f: f if f == NO_COLOUR else charts.field_title(f))
    heat_x = row[2].selectbox("Heatmap x", fields, index=fields.index(x_field), key="sweep_heat_x",
                              format_func=charts.field_title)
    rest = [f for f in fields if f != heat_x] or fields
    heat_y = row[3].selectbox("Heatmap y", rest, key="sweep_heat_y", format_func=charts.field_title)
    metric = row[4].selectbox("Curves of", watching.CURVE_METRICS, key="sweep_metric",
                              help="Mean over each setting's seeds (geometric for gradient norms and singular "
                                   "values) with a min-max band.")
    log_y = row[5].toggle("Log y", value=True, key="sweep_log", help="Log scale for the objective and the loss "
                                                                  "curves (gradient norms and singular values are "
                                                                  "always on a log scale).")
    return {"fields": fields, "x": x_field, "colour": None if colour == NO_COLOUR else colour, "heat_x": heat_x,
            "heat_y": heat_y, "metric": metric, "log_y": log_y,
            "log_fields": log_fields}


def sweep_charts(store, sweep_id: int, spec: sweeps.SweepSpec, results: pd.DataFrame,
                 controls: dict) -> list[LiveChart]:
    """The four charts as live charts (stability/live/panels.py), the curves' rows read when a run moved."""
    rows = curve_rows(store, sweep_id, controls["metric"], watching.results_version(results))
    return sweep_panels(spec, results, controls, rows, height=CHART_HEIGHT)


def show_settings(table: pd.DataFrame, fields: list[str], objective: str) -> None:
    """The settings table (groups.setting_table), sortable, each setting's best run a link to Train."""
    number = st.column_config.NumberColumn
    config = {name: number(name, format="%.4g") for name in ("mean", "min", "max", "std")}
    for name in fields:
        numeric = pd.api.types.is_numeric_dtype(table[name]) and table[name].dtype != bool
        label = charts.field_title(name)
        config[name] = number(label, format="%g") if numeric else st.column_config.TextColumn(label)
    config.update(seeds=number("runs", help="Runs of the setting, one per seed."),
                  n=number("n", help="Completed seeds the statistics are over."),
                  best_run=st.column_config.LinkColumn("best run", display_text=r"run=(\d+)",
                                                       help="Open the best seed's run on the Train page."))
    st.markdown(f"**Settings**, best mean final {objective} first (click a header to sort)")
    st.dataframe(table.assign(best_run=table["best_run"].map(run_link)).drop(columns=["setting"] if fields else []),
                 key="sweep_settings", hide_index=True, placeholder="—", width="stretch", column_config=config)


@store_guard
def sweep_panel(sweep_id: int, controls: dict) -> None:
    """Progress, the charts, the settings table and the CSV; a fragment while the sweep runs."""
    store = open_store()
    try:
        sweep = store.sweep(sweep_id)
        results = sweeps.results(store, sweep_id)
    except SweepNotFound:  # deleted meanwhile
        st.warning(f"Sweep {sweep_id} is not in this store.")
        return
    counts = results["status"].value_counts().to_dict()
    was_active = st.session_state.get("_sweep_active", {}).get(sweep_id)
    active = watching.is_active(dataclasses.replace(sweep, counts=counts))
    st.session_state.setdefault("_sweep_active", {})[sweep_id] = active
    if was_active and not active:  # once: a full rerun stops the polling and updates the buttons
        st.rerun()
    spec = sweeps.SweepSpec.from_dict(sweep.spec)
    show_progress(spec, counts)
    results = watching.in_spec_order(results, spec)
    if results.empty:
        st.info("Waiting for the first runs of this sweep…")
        return
    objective, direction = sweeps.objective_name(spec), sweeps.direction(spec)
    specs = live_chart_specs(("sweep", sweep_id), sweep_charts(store, sweep_id, spec, results, controls),
                             final=not active)
    for start in range(0, len(specs), 2):
        for column, chart in zip(st.columns(2), specs[start:start + 2]):
            show_chart(column, chart)
    fields = [vary.field for vary in spec.vary]
    show_settings(settings_of(sweep_id, results, fields, direction), fields, objective)
    with st.expander(f"Runs of sweep #{sweep_id} ({len(results)})"):
        runs = results.assign(run=results["run_id"].map(run_link))
        st.dataframe(runs[["run", "setting", "seed", "status", "objective", "step"]], key="sweep_runs",
                     hide_index=True, width="stretch", column_config={
                         "run": st.column_config.LinkColumn("run", display_text=r"run=(\d+)"),
                         "objective": st.column_config.NumberColumn(objective, format="%.4g")})
    ids = ",".join(map(str, sorted(results["run_id"])))
    st.markdown(f"[Open these runs in Compare](compare?runs={ids}&group=1&metrics=val/loss,grad/h0_norm), their "
                "seeds grouped: any metric, smoothing, wall time.")
    st.download_button(f"Download results CSV ({len(results)} runs)", lambda: results.to_csv(index=False).encode(),
                       file_name=f"sweep-{sweep_id}.csv", mime="text/csv", key="sweep_csv",
                       help="One row per run: its trial, seed, status, final objective and varied values. "
                            "Written when clicked, not at every refresh.")


classroom_switch()  # ?classroom=1: the projector's view on every page (pages/ui/classroom.py)
classroom_style()
st.title("Sweep")
st.caption("Vary any setting of a run over a list or a range of values, times a few seeds, and see where it "
           "stops learning: the final validation loss against the varied fields, mean and spread over seeds.")

store = open_store()
query = QueryReader()
requested = next(iter(query.ids("sweep")), None)
linked_refresh = query.choice("refresh", list(REFRESH_CHOICES), DEFAULT_REFRESH)
visitor = current_visitor()
known = store.sweeps()[:SWEEP_CHOICES]
started = None
if visitor.may_sweep:  # an operator's, or a student's where the lecturer allows it (Note [Roles])
    with st.expander("New sweep", expanded=not known, icon=":material/add:"):
        started = start_section(store)
    if refused := st.session_state.pop("sweep_refused", None):  # outside the form: seen even where it folded
        st.error(refused)
else:
    view_only_line(visitor)
    if visitor.role == access.STUDENT:
        st.caption(":material/person: Sweeps are the lecturer's on this server: you may start Train and Race runs.")
if started is not None:
    st.query_params["sweep"] = str(started)
    st.session_state["sweep_watch"] = started  # watched from now on, whatever ?sweep= said (as Train does)
    known = store.sweeps()[:SWEEP_CHOICES]

labels = {sweep.id: watching.label(sweep) for sweep in known}
if requested is not None and requested not in labels:
    query.note(f"sweep={requested} (no such sweep in this store)")
if not known:
    query.warn()
    st.info("No sweeps yet: open **New sweep** above, set a base config and the fields to vary, and press "
            "**Start**." if visitor.may_sweep else "No sweeps yet: they appear here once the lecturer starts one.")
    st.stop()
if st.session_state.get("sweep_watch") not in labels:
    st.session_state["sweep_watch"] = requested if requested in labels else known[0].id
pick, buttons, cadence = st.columns([2.6, 1.4, 1.3], vertical_alignment="bottom")
watched = pick.selectbox("Watching", list(labels), format_func=labels.get, key="sweep_watch")
refresh = refresh_control(cadence, linked_refresh, key="sweep_refresh")
query.warn()
st.query_params["sweep"] = str(watched)
sweep = store.sweep(watched)  # its counts read with it, now
active = watching.is_active(sweep)
stop, resume = buttons.columns(2) if visitor.may_change(access.sweep_owner(sweep)) else (None, None)
if stop is not None and stop.button("Stop", key="sweep_stop", disabled=not active, width="stretch",
                                    help="Stop the sweep: its running runs stop, no new trial starts."):
    try:
        st.session_state["sweep_notice"] = f"Sweep #{watched}: {access.stop_sweep(visitor, watched, store_path())}"
    except access.Refused as error:
        st.session_state["sweep_notice"] = str(error)
    st.rerun()  # the buttons, the progress and the timer drawn for the sweep as it is now
if resume is not None and resume.button("Resume", key="sweep_resume", disabled=active, width="stretch",
                                        help="Start workers again for the runs this sweep has not finished."):
    try:
        access.resume_sweep(visitor, watched, store_path(), workers=int(sweep.workers or 1))
        st.session_state["sweep_notice"] = f"Sweep #{watched} resumed."
    except (sweeps.SweepError, SweepNotFound, access.Refused) as error:
        st.session_state["sweep_notice"] = str(error)
    st.rerun()
if "sweep_notice" in st.session_state:
    st.info(st.session_state.pop("sweep_notice"))
if not active and sweep.status == "stopped" and (halted := watching.halted(store.records(("stopped",), watched,
                                                                                        latest=False))):
    st.warning(f"Sweep #{watched}: {halted}")  # a full disk stopped it (Note [A full disk ends the sweep])
spec = sweeps.SweepSpec.from_dict(sweep.spec)
st.caption(f"Sweep #{watched}: {spec.describe()}")
controls = chart_controls(spec)
every = (None if not active or refresh == "off" else AUTO_EVERY_S if refresh == "auto" else float(refresh))
st.session_state.setdefault("_sweep_active", {})[watched] = active  # what the buttons above were drawn for
polled(sweep_panel, every, watched, controls)
