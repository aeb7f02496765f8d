"""Compare: overlay the metrics of stored runs, as in TensorBoard or Weights & Biases.

Run table (select rows) -> metric rows from the store -> charts.metric_chart per metric -> CSV of
exactly what is drawn. The selection and every control are mirrored in the URL
(``?runs=1,2,3&metrics=val/loss,grad/h0_norm&smooth=0.6&log=1&x=wall_time&group=1&by=cell,lr``), so a link
reproduces the view.

"Group seeds" draws the selected runs that differ only in seed (or, with "Group by", that agree on the
chosen config fields) as one line per group, the mean over its runs with a min-max band
(stability.analysis.groups.seed_groups and group_curves, charts.grouped_curves_chart); on a log axis the mean is
geometric (stability.analysis.groups, Note [Geometric mean on a log axis]).  Groups are drawn against the step, raw:
runs log at the same steps, not at the same wall times, and a mean of smoothed curves would hide the spread.
"""
import streamlit as st

import pandas as pd

from pages.ui.chart_view import CHART_HEIGHT, chart_grid, chart_grid_style, outliers_control, outliers_from_query
from pages.ui.status import EXTERNAL
from pages.ui.live import live_chart_specs, polled, run_rows
from pages.ui.links import QueryReader, linked_text
from pages.ui.classroom import classroom_style, classroom_switch
from pages.ui.router import require_router
from pages.ui.selection import final_columns, run_selection
from pages.ui.store import STORE_ERRORS, open_store, store_guard, store_problem
from stability import charts
from stability.analysis.groups import group_curves, seed_groups
from stability.core.metric_names import H0_NORM, TRAIN_LOSS, VAL_LOSS, is_loss_metric, split_name
from stability.live import charts_built_together
from stability.runs.table import run_table
from stability.runs.status import ACTIVE_STATUSES
from stability.runs.store import RunNotFound

require_router(__file__)

DEFAULT_RUNS = 5  # newest runs selected when the URL names none
METRIC_GROUPS = ("val", "train", "test", "gap", "grad", "sv", "gate", "speed", "progress")
X_LABELS = {"step": "step", "wall_time": "wall time"}
TABLE_COLUMNS = ["id", "name", "status", "cell", "hidden", "task", "seq_len", "steps", "lr", "seed"]
GROUP_FIELDS = ("cell", "cell.hidden_size", "task", "task.seq_len", "lr", "optimizer", "clip_grad_norm",
                "batch_size", "steps", "weight_decay", "cell.h0", "cell.h0_noise_std")


def label(run):
    return f"#{run.id} {run.name or run.cell}"


def metric_order(name):
    group = name.split("/", 1)[0]
    return (METRIC_GROUPS.index(group) if group in METRIC_GROUPS else len(METRIC_GROUPS), name)


def default_metrics(available, metric):
    """The task's headline metric on validation data (where its baseline applies), and ‖∂L/∂h0‖."""
    headline = VAL_LOSS if is_loss_metric(metric) or not metric else split_name("val", metric)
    first = next((name for name in (headline, VAL_LOSS, TRAIN_LOSS) if name in available), None)
    return [name for name in (first, H0_NORM) if name in available]


def baseline_applies(name, metric):
    """The baseline is in the task metric's units: it fits train/val/test of that metric (and of the loss
    where the loss is the metric), not gaps or diagnostics."""
    split, _, measured = name.partition("/")
    return split in ("train", "val", "test") and (measured == metric or
                                                  (measured == "loss" and is_loss_metric(metric)))


def read_or_stop(read):
    """``read()``; a store that breaks under it (a damaged page, say) stops the page with the store's one error
    line, as every other page shows it, not an exception box."""
    try:
        return read()
    except STORE_ERRORS as error:
        st.error(store_problem(error))
        st.stop()


def init_state(key, value):
    """Seed a widget from the URL the first time it is drawn (afterwards the widget owns its value)."""
    if key not in st.session_state:
        st.session_state[key] = value


def shown_rows(prepared, x, smoothing):
    """The drawn data as CSV columns: run, metric, x, raw value (and the smoothed value when smoothing)."""
    columns = ["run_id", "run", "name", "step"] + (["time_s"] if x == "wall_time" else []) + ["value"]
    return prepared[columns + (["smoothed"] if smoothing > 0 else [])]


def run_groups(store, ids, by):
    """run id -> the label of its group (:func:`stability.analysis.groups.seed_groups`, ``by`` fields or seeds)."""
    records = []
    for run_id in ids:
        try:
            records.append(store.record(run_id))
        except RunNotFound:  # deleted meanwhile
            pass
    found = seed_groups(records, by=list(by) or None)
    return {run_id: f"{group} ({len(members)} run{'s' if len(members) > 1 else ''})"
            for group, members in found.items() for run_id in members}


@store_guard
def draw_charts(selected, names, smoothing, log_y, x, by=None, ignore_outliers=True):
    """One chart per metric, then the CSV download of the same rows; refreshes while a selected run trains,
    reading only the rows logged since its last look and redrawing only when some arrived.  With ``by``
    (a tuple of config fields, empty: runs that differ only in seed) the runs are drawn as groups."""
    store = open_store()
    labels = dict(zip(selected["id"], (label(run) for run in selected.itertuples())))
    rows = {}
    for run_id in labels:
        try:
            rows[run_id] = run_rows(store, store.record(run_id))
        except RunNotFound:  # deleted meanwhile, e.g. from the Runs page
            pass
    groups = None if by is None else run_groups(store, list(rows), by)
    build = (lambda: compare_charts(selected, rows, labels, names, smoothing, log_y, x, ignore_outliers)
             ) if groups is None else (lambda: grouped_charts(rows, groups, names, log_y))
    live_charts = charts_built_together("compare", len(names),
                                        (tuple(rows), tuple(names), smoothing, log_y, x, by, ignore_outliers),
                                        tuple(row.version(names) for row in rows.values()), build)
    specs = live_chart_specs("compare", live_charts, final=all(row.final for row in rows.values()))
    chart_grid(st, specs, "compare")
    csv, count = st.session_state["cmp_csv_data"]
    st.download_button(f"Download CSV ({count} rows)", csv,
                       file_name=f"runs-{'-'.join(map(str, selected['id']))}.csv", mime="text/csv",
                       key="cmp_csv", help="Exactly the rows drawn above: after smoothing and decimation."
                       if groups is None else "The groups' mean, min and max at each step, as drawn above.")


def grouped_charts(rows, groups, names, log_y):
    """One chart per metric: a mean line and a min-max band per group; and the CSV of those statistics."""
    frames = [row.metrics[row.metrics["name"].isin(names)] for row in rows.values()]
    drawn = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run_id", "step", "wall_time",
                                                                                     "name", "value"])
    panels, tables = [], []
    for name in names:
        curves = group_curves(drawn, groups, name, log=log_y)
        tables.append(curves.assign(name=name))
        panels.append(charts.grouped_curves_chart(curves, name, log_y, title=name, height=CHART_HEIGHT))
    shown = pd.concat(tables, ignore_index=True)[["group", "name", "step", "mean", "min", "max", "n", "zeros"]]
    st.session_state["cmp_csv_data"] = (shown.to_csv(index=False).encode(), len(shown))
    return panels


def compare_charts(selected, rows, labels, names, smoothing, log_y, x, ignore_outliers=True):
    """The charts of ``names``, and (into the session) the CSV of exactly what they draw."""
    frames = [row.metrics[row.metrics["name"].isin(names)] for row in rows.values()]
    drawn = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run_id", "step", "wall_time",
                                                                                     "name", "value"])
    drawn["run"] = drawn["run_id"].map(labels)
    metrics, baselines = set(selected["metric"]), set(selected["baseline"].dropna())
    shared_metric = metrics.pop() if len(metrics) == 1 else None
    baseline = baselines.pop() if len(baselines) == 1 and selected["baseline"].notna().all() else None
    panels = []
    for name in names:
        fits = baseline is not None and baseline_applies(name, shared_metric)
        panels.append(charts.metric_chart(drawn, names=[name], baseline=baseline if fits else None,
                                          baseline_label=selected["baseline_label"].iloc[0] if fits else None,
                                          log_y=log_y, x=x, smoothing=smoothing, title=name, height=CHART_HEIGHT,
                                          ignore_outliers=ignore_outliers))
    shown = shown_rows(charts.prepare(drawn, smoothing=smoothing, x=x, log=log_y), x, smoothing)
    st.session_state["cmp_csv_data"] = (shown.to_csv(index=False).encode(), len(shown))
    return panels


chart_grid_style()
classroom_switch()  # ?classroom=1: the projector's view on every page (pages/ui/classroom.py)
classroom_style()
st.title("Compare")
st.caption("Select runs in the table (click the row checkboxes) to overlay their curves. "
           "Click a run in a chart's legend to highlight it; the URL keeps the view.")

store = open_store()
query = QueryReader()
table = read_or_stop(lambda: run_table(store))
if table.empty:
    query.warn()
    st.info("No runs stored yet. Start one on the **Train** page (or race several cells on **Race**), "
            "then come back to compare them.")
    st.stop()

ids = table["id"].tolist()
selected = run_selection(
    table, key="cmp_table", columns=TABLE_COLUMNS + final_columns(table),
    default_ids=query.ids("runs") if "runs" in st.query_params else ids[:DEFAULT_RUNS],
    column_config={"lr": st.column_config.NumberColumn("lr", format="%.0e")})
st.query_params["runs"] = ",".join(map(str, selected["id"]))
if selected["external"].any():  # logged from someone's own loop: compared like ours, nothing to re-run
    st.caption(" · ".join(f"#{run_id}: {EXTERNAL}" for run_id in selected.loc[selected["external"], "id"]))
if selected.empty:
    query.warn()
    st.info("Select one or more runs in the table to draw their curves.")
    st.stop()

available = sorted(read_or_stop(lambda: set().union(*(set(run_rows(store, store.record(run.id)).metrics["name"])
                                                       for run in selected.itertuples()))), key=metric_order)
if not available:
    query.warn()
    st.info("The selected runs have not logged any metrics yet.")
    st.stop()
metrics = set(selected["metric"])
if "metrics" in st.query_params:
    wanted = [name for name in st.query_params["metrics"].split(",") if name]
    unknown = [name for name in wanted if name not in available]
    if unknown:
        query.note(f"metrics: {linked_text(', '.join(unknown))} (not logged by the selected runs)")
else:
    wanted = default_metrics(available, metrics.pop() if len(metrics) == 1 else "")
init_state("cmp_metrics", [name for name in wanted if name in available])
st.session_state["cmp_metrics"] = [name for name in st.session_state["cmp_metrics"] if name in available]
init_state("cmp_smoothing", query.number("smooth", 0.0))
init_state("cmp_log", query.choice("log", ("0", "1"), "1") != "0")  # gradient norms span many decades
linked_outliers = outliers_from_query(query)
init_state("cmp_x", query.choice("x", list(X_LABELS), "step"))
init_state("cmp_group", query.choice("group", ("0", "1"), "0") == "1")
init_state("cmp_group_by", query.choices("by", list(GROUP_FIELDS), []))
query.warn()

pick, smooth, scale = st.columns([3, 2, 1.6], vertical_alignment="bottom")  # no label cut at 1,280 px
names = pick.multiselect("Metrics", available, key="cmp_metrics", help="One chart per metric.")
smoothing = smooth.slider("Smoothing", 0.0, charts.MAX_SMOOTHING, step=0.01, key="cmp_smoothing",
                          help="Exponential moving average weight (TensorBoard's, debiased); "
                               "the raw curve stays faint behind.")
log_y = scale.toggle("Log y", key="cmp_log", help="Zeros and infinities are clipped and marked with a ▼.")
ignore_outliers = outliers_control(scale, linked_outliers, key="cmp_outliers")
group_column, by_column, axis = st.columns([1.2, 3.4, 1.4], vertical_alignment="bottom")
grouped = group_column.toggle("Group seeds", key="cmp_group",
                              help="Runs that differ only in seed (or that agree on the fields chosen beside) as one "
                                   "line: the mean over the runs, with a min-max band. Geometric mean on a log axis.")
by = by_column.multiselect("Group by", GROUP_FIELDS, key="cmp_group_by", disabled=not grouped,
                           placeholder="every config field but the seed",
                           help="Group the runs that agree on these fields, whatever else differs.")
x = axis.radio("x axis", list(X_LABELS), format_func=X_LABELS.get, horizontal=True, key="cmp_x")
st.query_params.update({"metrics": ",".join(names), "smooth": f"{smoothing:g}", "log": str(int(log_y)), "x": x,
                        "group": str(int(grouped))})
if by:
    st.query_params["by"] = ",".join(by)
else:
    st.query_params.pop("by", None)
if grouped and (smoothing > 0 or x != "step"):
    st.caption("Groups are drawn raw against the step: the smoothing and wall-time settings apply to single runs.")

if not names:
    st.info("Choose at least one metric.")
    st.stop()
live = selected["status"].isin(ACTIVE_STATUSES).any()
polled(draw_charts, 2.0 if live else None, selected, names, smoothing, log_y, x,
       tuple(by) if grouped else None, ignore_outliers)
