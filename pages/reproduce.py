"""Reproduce: a paper's figure one click away, drawn live, with the paper's outcome beside ours.

A storyboard: the gallery of presets (stability.presets.available(): paper, figure, what it shows, runs
at each scale) -> Run (a list preset's runs go to background workers one after another, a sweep preset
becomes an ordinary sweep) -> ``?preset=NAME&scale=S&runs=1,2,3`` (or ``&sweep=ID``) -> a live panel: the
runs' progress, what each run's rows say, the preset's figure laid out as the paper's (stability.charts.figures,
Note [Layout] in stability/presets/layout.py) and the verdict table, judged from the stored rows by
``presets.verdicts`` at every redraw: "could not tell" until a run has the rows a claim needs, "needs paper
scale" for a claim the preset places at the paper's sizes. The gallery's verdict counts and times are the
saved measurements (stability/presets/measured/, Note [Measured results]), never typed. With
``?classroom=1`` (pages/ui/classroom.py) no controls, the cells' equations on top and what to look at
beside each row of panels.
"""

import pandas as pd
import streamlit as st

from pages.ui.access import current_visitor, view_only_line
from pages.ui.classroom import SPLIT, classroom_on, classroom_style, classroom_switch, explained, show_cells
from pages.ui.diagnosis import live_findings, race_line
from pages.ui.links import QueryReader, linked_text
from pages.ui.live import live_chart_specs, polled, show_chart, watched_runs
from pages.ui.router import require_router
from pages.ui.store import open_store, store_guard, store_path
from stability.charts import explanation, figures, projected
from stability import access, presets
from stability.presets import measured
from stability.workers.threads import available_cores
from stability import sweeps
from stability.config import ConfigError
from stability.core.metric_names import LAYER_NORM
from stability.live import charts_built_together
from stability.runs.status import ACTIVE_STATUSES
from stability.runs.store import RunNotFound, SweepNotFound

require_router(__file__)



def start(preset, scale: str) -> dict:
    """Start the preset at ``scale`` in the background, an operator's to do (Note [Roles]); the query
    parameters that reopen it."""
    visitor = current_visitor()
    access.operate(visitor, "run a preset")
    if preset.is_sweep:
        spec = preset.sweep_spec(scale, check=True)
        return {"sweep": str(sweeps.start_sweep(spec, store_path(), workers=1, name=preset.name))}
    started = []
    for config in preset.configs(scale).values():
        started.append(access.start_run(visitor, config, store_path()))
    return {"runs": ",".join(map(str, started))}


def preset_runs(store, query: QueryReader) -> tuple[dict, int | None]:
    """The runs the link names that are in the store, by id (their records), and the sweep's id: ``?runs=``,
    or the runs of ``?sweep=``. Ids are read as every page reads them (``QueryReader.ids``); one that is
    malformed, out of range or not in the store is noted on ``query``, for its one warning line."""
    if "sweep" in st.query_params:
        sweep_id = next(iter(query.ids("sweep")), None)
        if sweep_id is None:
            return {}, None
        try:
            store.sweep(sweep_id)
        except SweepNotFound:
            query.note(f"sweep={sweep_id} (no such sweep in this store)")
            return {}, None
        return {run.id: run for run in sorted(store.records(sweep_id=sweep_id), key=lambda run: run.id)}, sweep_id
    records, missing = {}, []
    for run_id in query.ids("runs"):
        try:
            records[run_id] = store.record(run_id)
        except RunNotFound:
            missing.append(str(run_id))
    if missing:
        query.note(f"runs: {linked_text(', '.join(missing), 60)} (no such run in this store)")
    return records, None


def verdict_table(verdicts) -> pd.DataFrame:
    return pd.DataFrame([{"claim": v.claim, "paper": presets.verdict_value(v.paper), "source": v.source,
                          "ours": presets.verdict_value(v.ours), "compared with": presets.verdict_value(v.reference),
                          "verdict": v.outcome, "why": v.why}
                         for v in verdicts])


@store_guard
def live_panel(preset_name: str, run_ids: list[int], scale: str | None = None) -> None:
    store = open_store()
    preset = presets.load(preset_name)
    runs, rows = watched_runs(store, run_ids)
    if not runs:
        return
    labels = {run_id: presets.group_of(run, preset) or f"run {run_id}" for run_id, run in runs.items()}
    if preset.is_sweep:
        labels = {run_id: f"{label} seed={runs[run_id].config.train.seed}" if runs[run_id].config else label
                  for run_id, label in labels.items()}
    done = sum(run.status not in ACTIVE_STATUSES for run in runs.values())
    st.progress(sum(run.progress for run in runs.values()) / len(runs),
                text=f"{done} of {len(runs)} runs finished")
    for run_id, run in runs.items():
        if run.status in ("diverged", "failed"):
            st.error(f"{labels[run_id]} (run {run_id}) {run.status}: {run.error or 'no error message'}")

    # what each run's rows say, in words (stability.analysis.diagnosis), computed only when its rows changed
    st.markdown("**What is happening**  \n" + "  \n".join(
        race_line(labels[run_id], live_findings(("reproduce", store.location, run_id), rows[run_id], run))
        for run_id, run in runs.items()))

    st.subheader(f"{preset.figure}, laid out as in the paper")
    draw_figure(preset, runs, rows, labels)

    st.subheader("Verdicts")
    st.caption("Each claim judged from the stored rows of these runs, the paper's value beside ours; "
               "\"needs paper scale\": a claim the preset expects to hold only at the paper's sizes, with why.")
    st.dataframe(verdict_table(presets.verdicts(preset, store, list(runs), scale=scale)), hide_index=True,
                 width="stretch")


@st.cache_data(show_spinner=False, max_entries=256)
def _layer_series(_store, store_key: str, run_id: int, rows_seen: int) -> pd.DataFrame:
    """A run's ``grad/layer_norm`` rows, read again only when its metric rows grew (``rows_seen``)."""
    return _store.series(run_id, LAYER_NORM)


def depth_rows(layout, metrics: dict) -> dict | None:
    """Each run's series over depth, where the layout has a panel over layers (Note [Layout]); else None."""
    if not any(panel.over_layers for panel in layout.panels):
        return None
    store = open_store()
    return {run_id: _layer_series(store, str(store), run_id, len(frame)) for run_id, frame in metrics.items()}


def draw_figure(preset, runs: dict, rows: dict, labels: dict) -> None:
    """The preset's layout (stability.charts.figures), a row of charts per panel, drawn live; in the classroom
    view each row has the explanation of its metric beside it."""
    layout = preset.drawn()
    if not layout.panels or all(rows[run_id].metrics.empty for run_id in runs):
        st.info("Waiting for the first rows from the workers…")
        return
    lines = figures.line_labels(layout, runs, labels)
    columns = figures.column_values(layout, runs)
    slots = figures.grid_slots(layout, columns)
    metrics = {run_id: rows[run_id].metrics for run_id in runs}
    depth = depth_rows(layout, metrics)
    live_charts = charts_built_together(f"reproduce-{preset.name}", len(slots), tuple(runs),
                                        tuple(len(frame) for frame in metrics.values()),
                                        lambda: figures.charts(layout, slots, runs, metrics, lines, columns, depth))
    specs = live_chart_specs(f"reproduce-{preset.name}", live_charts,
                             final=all(rows[run_id].final for run_id in runs))
    width = max(1, len({value for _, value in slots}))
    for start_at in range(0, len(specs), width):
        row, panel = specs[start_at:start_at + width], slots[start_at][0]
        if width == 1:
            explained(row[0], panel.metric)
            continue
        charts_at, words = (st.columns(SPLIT, gap="large") if classroom_on() else (st.container(), None))
        with charts_at:
            for column, spec in zip(st.columns(width), row):
                show_chart(column, projected(spec) if classroom_on() else spec)
        if words is not None and (text := explanation(panel.metric)):
            words.markdown(text)


classroom_switch()
classroom_style()
st.title("Reproduce")
st.caption("A figure of the papers, one click away: its runs at classroom scale (a few CPU minutes) or at the "
           "paper's, drawn live, and each of the paper's claims judged from our stored rows.")

store = open_store()
shipped = presets.available()
chosen = st.query_params.get("preset")
names = [info.name for info in shipped]
if chosen is not None and chosen not in names:
    st.warning(f"Ignored in this link: no preset {linked_text(repr(chosen))}; available: {', '.join(names)}.")
    chosen = None

if chosen is None:
    for info in shipped:
        with st.container(border=True):
            text, action = st.columns([4, 1], vertical_alignment="center")
            text.markdown(f"**{info.title}**  \n{info.paper}, {info.figure} ({info.section})  \n{info.shows}")
            counts = ", ".join(f"{count} run{'s' * (count != 1)} at {scale} scale" for scale, count in info.runs.items())
            text.caption(counts + (" · a sweep" if info.sweep else "") + f" · classroom: {info.notes['classroom']}")
            for shown in ("classroom", "paper"):  # the saved results, NAME.SCALE.json (Note [Measured results])
                if line := measured.result_line(info.name, shown, cores=available_cores()):
                    text.caption(line)
            if line := measured.paper_cost_line(info.name):  # timed on a GPU (Note [Paper cost])
                text.caption(line)
            if action.button("Open", key=f"open_{info.name}", width="stretch"):
                st.query_params["preset"] = info.name
                st.rerun()
    if not shipped:
        st.info("No presets are installed.")
else:
    try:
        preset = presets.load(chosen)
    except presets.PresetError as error:
        st.error(str(error))
        st.stop()
    st.subheader(preset.title)
    st.markdown(f"{preset.paper}, **{preset.figure}** ({preset.section}): {preset.shows}")
    if classroom_on():  # for the projector: the cells' equations instead of the controls
        shown_scale = st.query_params.get("scale", "classroom")
        show_cells([config.cell.name for config in
                    preset.all_configs(shown_scale if shown_scale in preset.scales else "classroom")])
    if preset.notes:
        with st.expander("How our runs differ from the paper's"):
            st.write(preset.notes)
    scale_names = list(preset.scales)
    default_scale = st.query_params.get("scale", "classroom")
    query = QueryReader()
    records, sweep_id = preset_runs(store, query)
    query.warn()
    run_ids = list(records)
    active = [run_id for run_id, run in records.items() if run.status in ACTIVE_STATUSES]
    visitor = current_visitor()
    if classroom_on():  # for the projector: no controls; the link names the runs
        scale = default_scale if default_scale in scale_names else scale_names[0]
    elif not visitor.may_operate:  # a viewer: the runs the link names, and the way back to the gallery
        scale = default_scale if default_scale in scale_names else scale_names[0]
        if st.button("Gallery", key="reproduce_gallery"):
            for key in ("preset", "scale", "runs", "sweep"):
                st.query_params.pop(key, None)
            st.rerun()
        view_only_line(visitor)
    else:
        scale = st.radio("Scale", scale_names, horizontal=True, key="reproduce_scale",
                         index=scale_names.index(default_scale) if default_scale in scale_names else 0,
                         format_func=lambda name: f"{name}: {preset.scales[name].get('note', '')}")
        left, middle, right = st.columns([1, 1, 3])
        if left.button("Run", type="primary", key="reproduce_run", width="stretch"):
            try:
                params = start(preset, scale)
            except (presets.PresetError, ConfigError, sweeps.SweepError) as error:
                st.error(str(error))
            else:
                st.query_params.update({"preset": preset.name, "scale": scale, **params})
                st.query_params.pop("runs" if "sweep" in params else "sweep", None)
                st.rerun()
        if middle.button("Gallery", key="reproduce_gallery", width="stretch"):
            for key in ("preset", "scale", "runs", "sweep"):
                st.query_params.pop(key, None)
            st.rerun()
        if run_ids and right.button("Stop", key="reproduce_stop", disabled=not active):
            if sweep_id is not None:
                sweeps.stop_sweep(sweep_id, store_path())
            for run_id in active:
                access.stop_run(visitor, run_id, store_path())
            active = []
    if run_ids:
        polled(live_panel, 2.0 if active else None, preset.name, run_ids, st.query_params.get("scale"))
    elif classroom_on():
        st.info("No runs in this link yet: start the preset in the normal view, then switch to the classroom view.")
    elif not visitor.may_operate:
        st.info("No runs in this link yet: the figure and the verdicts fill in here once the lecturer runs it and "
                "shares its link.")
    else:
        st.info(f"Press **Run** to train its {preset.run_count(scale)} runs at {scale} scale in the background; "
                "the figure and the verdicts fill in here as they train.")
