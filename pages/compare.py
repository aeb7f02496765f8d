"""Compare: overlay the metrics of stored runs, as in TensorBoard or Weights & Biases.

Run table (select rows) -> metric rows from the store -> charts.metric_chart per metric -> CSV of
exactly what is drawn. The selection and every control are mirrored in the URL
(``?runs=1,2,3&metrics=val/loss,grad/h0_norm&smooth=0.6&log=1&x=wall_time``), so a link reproduces the view.
"""
import pandas as pd
import streamlit as st

from stability import charts
from stability.run_table import run_table
from stability.store import RunStore, StoreError

try:
    from pages.common import store_path
except ImportError:  # pages/common.py (helper A) not there yet: the default store ($STABILITY_STORE)
    def store_path():
        return None

DEFAULT_RUNS = 5  # newest runs selected when the URL names none
LOSS_METRICS = ("mse", "cross_entropy")  # tasks whose loss is their metric, so the baseline fits */loss too
ACTIVE = ("queued", "running")
METRIC_GROUPS = ("val", "train", "test", "gap", "grad", "sv", "gate", "speed", "progress")
X_LABELS = {"step": "step", "wall_time": "wall time"}
TABLE_COLUMNS = ["id", "name", "status", "cell", "hidden", "task", "seq_len", "steps", "lr", "seed"]


def query_ids(text):
    """Run ids from '1,2,3' (anything that is not an integer is ignored)."""
    return [int(token) for token in text.split(",") if token.strip().isdigit()]


def query_float(key, default, low, high):
    try:
        return min(max(float(st.query_params.get(key, default)), low), high)
    except ValueError:
        return default


def label(run):
    return f"#{run.id} {run.name or run.cell}"


def metric_order(name):
    group = name.split("/", 1)[0]
    return (METRIC_GROUPS.index(group) if group in METRIC_GROUPS else len(METRIC_GROUPS), name)


def default_metrics(names, metric):
    """The task's headline metric on validation data (where its baseline applies), and ‖∂L/∂h0‖."""
    headline = "val/loss" if metric in LOSS_METRICS or not metric else f"val/{metric}"
    first = next((name for name in (headline, "val/loss", "train/loss") if name in names), None)
    return [name for name in (first, "grad/h0_norm") if name in names]


def baseline_applies(name, metric):
    """The baseline is in the task metric's units: it fits train/val/test of that metric (and of the loss
    where the loss is the metric), not gaps or diagnostics."""
    split, _, measured = name.partition("/")
    return split in ("train", "val", "test") and (measured == metric or
                                                  (measured == "loss" and metric in LOSS_METRICS))


def select_runs(table):
    """The run table with multi-row selection; returns the selected rows, oldest first.

    Streamlit's selection is by row position, so when runs appear or disappear between reruns the
    selection is moved to follow the same run ids.
    """
    ids = table["id"].tolist()
    previous = st.session_state.get("cmp_table_ids")
    if previous is not None and previous != ids and "cmp_table" in st.session_state:
        rows = st.session_state["cmp_table"]["selection"]["rows"]
        kept = {previous[row] for row in rows if row < len(previous)}
        st.session_state["cmp_table"] = {"selection": {"rows": [i for i, run_id in enumerate(ids) if run_id in kept]}}
    st.session_state["cmp_table_ids"] = ids
    wanted = query_ids(st.query_params["runs"]) if "runs" in st.query_params else ids[:DEFAULT_RUNS]
    finals = [column for column in table.columns if column.startswith(("val/", "test/"))]
    event = st.dataframe(
        table[TABLE_COLUMNS + finals], key="cmp_table", on_select="rerun", selection_mode="multi-row",
        selection_default={"selection": {"rows": [i for i, run_id in enumerate(ids) if run_id in wanted]}},
        hide_index=True, width="stretch", placeholder="—",
        column_config={"id": st.column_config.NumberColumn("id", format="%d"),
                       "lr": st.column_config.NumberColumn("lr", format="%.0e"),
                       **{column: st.column_config.NumberColumn(column, format="%.4g") for column in finals}})
    return table.iloc[event.selection.rows].sort_values("id")


def init_state(key, value):
    """Seed a widget from the URL the first time it is drawn (afterwards the widget owns its value)."""
    if key not in st.session_state:
        st.session_state[key] = value


def shown_rows(prepared, x, smoothing):
    """The drawn data as CSV columns: run, metric, x, raw value (and the smoothed value when smoothing)."""
    columns = ["run_id", "run", "name", "step"] + (["time_s"] if x == "wall_time" else []) + ["value"]
    return prepared[columns + (["smoothed"] if smoothing > 0 else [])]


def draw_charts(selected, names, smoothing, log_y, x):
    """One chart per metric, then the CSV download of the same rows; refreshes while a selected run trains."""
    with RunStore(store_path()) as store:
        rows = store.metrics_many(selected["id"].tolist(), names=names)
    rows["run"] = rows["run_id"].map(dict(zip(selected["id"], (label(run) for run in selected.itertuples()))))
    metrics, baselines = set(selected["metric"]), set(selected["baseline"].dropna())
    shared_metric = metrics.pop() if len(metrics) == 1 else None
    baseline = baselines.pop() if len(baselines) == 1 and selected["baseline"].notna().all() else None
    grid = st.columns(2)
    for position, name in enumerate(names):
        with grid[position % 2]:
            fits = baseline is not None and baseline_applies(name, shared_metric)
            chart = charts.metric_chart(rows, names=[name], baseline=baseline if fits else None,
                                        baseline_label=selected["baseline_label"].iloc[0] if fits else None,
                                        log_y=log_y, x=x, smoothing=smoothing, title=name)
            st.altair_chart(chart, width="stretch")
    shown = shown_rows(charts.prepare(rows, smoothing=smoothing, x=x), x, smoothing)
    st.download_button(f"Download CSV ({len(shown)} rows)", shown.to_csv(index=False).encode(),
                       file_name=f"runs-{'-'.join(map(str, selected['id']))}.csv", mime="text/csv",
                       key="cmp_csv", help="Exactly the rows drawn above: after smoothing and decimation.")


st.title("Compare")
st.caption("Select runs in the table (click the row checkboxes) to overlay their curves. "
           "Click a run in a chart's legend to highlight it; the URL keeps the view.")

try:
    with RunStore(store_path()) as store:
        table = run_table(store)
except StoreError as error:
    st.error(str(error))
    st.stop()
if table.empty:
    st.info("No runs stored yet. Start one on the **Train** page (or race several cells on **Race**), "
            "then come back to compare them.")
    st.stop()

selected = select_runs(table)
st.query_params["runs"] = ",".join(map(str, selected["id"]))
if selected.empty:
    st.info("Select one or more runs in the table to draw their curves.")
    st.stop()

with RunStore(store_path()) as store:
    available = sorted(set(store.metrics_many(selected["id"].tolist())["name"]), key=metric_order)
if not available:
    st.info("The selected runs have not logged any metrics yet.")
    st.stop()
metrics = set(selected["metric"])
wanted = st.query_params["metrics"].split(",") if "metrics" in st.query_params else \
    default_metrics(available, metrics.pop() if len(metrics) == 1 else "")
init_state("cmp_metrics", [name for name in wanted if name in available])
st.session_state["cmp_metrics"] = [name for name in st.session_state["cmp_metrics"] if name in available]
init_state("cmp_smoothing", query_float("smooth", 0.0, 0.0, charts.MAX_SMOOTHING))
init_state("cmp_log", st.query_params.get("log", "0") == "1")
init_state("cmp_x", st.query_params.get("x") if st.query_params.get("x") in X_LABELS else "step")

pick, smooth, scale, axis = st.columns([4, 2, 1, 1.4], vertical_alignment="bottom")
names = pick.multiselect("Metrics", available, key="cmp_metrics", help="One chart per metric.")
smoothing = smooth.slider("Smoothing", 0.0, charts.MAX_SMOOTHING, step=0.01, key="cmp_smoothing",
                          help="Exponential moving average weight (TensorBoard's, debiased); "
                               "the raw curve stays faint behind.")
log_y = scale.toggle("Log y", key="cmp_log", help="Zeros and infinities are clipped and marked with a ▼.")
x = axis.radio("x axis", list(X_LABELS), format_func=X_LABELS.get, horizontal=True, key="cmp_x")
st.query_params.update({"metrics": ",".join(names), "smooth": f"{smoothing:g}", "log": str(int(log_y)), "x": x})

if not names:
    st.info("Choose at least one metric.")
    st.stop()
live = selected["status"].isin(ACTIVE).any()
st.fragment(draw_charts, run_every=2.0 if live else None)(selected, names, smoothing, log_y, x)
