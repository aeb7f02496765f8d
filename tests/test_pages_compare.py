"""The Compare page through Streamlit's AppTest, on a temp store filled directly through RunStore."""
import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import streamlit
from streamlit import dataframe_util
from streamlit.testing.v1 import AppTest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from statuses import set_status

PAGE = Path(__file__).resolve().parent.parent / "pages" / "compare.py"
ADDING_BASELINE = 1 / 6
STEPS = range(0, 100, 10)


def add_run(store, cell, task, metric, baseline, status="completed", seq_len=50):
    """A finished-looking run with train/val curves, a gradient norm and final test metrics."""
    config = RunConfig(cell=CellConfig(cell, 16), task=TaskConfig(task, {"seq_len": seq_len}),
                       train=TrainConfig(steps=100, lr=1e-3, seed=3))
    run_id = store.create_run(config.to_dict())
    store.update_run(run_id, metric=metric, baseline=baseline, baseline_label="memoryless", total_steps=100,
                     step=90)
    set_status(store, run_id, status)
    start = 1000.0 * run_id
    rows = []
    for step in STEPS:
        wall = start + 0.5 * step
        loss = 1.0 / (1 + step * run_id)
        rows += [(step, wall, "train/loss", loss), (step, wall, "val/loss", loss + 0.01),
                 (step, wall, f"val/{metric}", loss + 0.02), (step, wall, "grad/h0_norm", 10.0 ** -(step / 10)),
                 (step, wall, "gap/loss", 0.01)]
    rows += [(90, start + 45, "test/loss", 0.5 / run_id), (90, start + 45, f"test/{metric}", 0.25 / run_id)]
    store.log(run_id, rows)
    return run_id



@pytest.fixture
def three_runs(store):
    """Runs 1, 2 on adding (metric mse, shared baseline), run 3 on copy (another metric and baseline)."""
    return [add_run(store, "rnn", "adding", "mse", ADDING_BASELINE),
            add_run(store, "lstm", "adding", "mse", ADDING_BASELINE),
            add_run(store, "spectral", "copy", "cross_entropy", 0.3)]


def run(**query):
    app = AppTest.from_file(str(PAGE), default_timeout=30)
    for key, value in query.items():
        app.query_params[key] = value
    return app.run()


def charts_of(app):
    return app.get("vega_lite_chart")


def spec(chart):
    return json.loads(chart.proto.spec)


def by_title(app):
    """The charts keyed by their title (the metric name); the page lays them out in two columns."""
    return {spec(chart)["title"]: chart for chart in charts_of(app)}


def chart_rows(chart):
    """The chart's datasets (every layer's data) as one DataFrame."""
    return pd.concat([dataframe_util.convert_arrow_bytes_to_pandas_df(named.data.data)
                      for named in chart.proto.datasets], ignore_index=True)


def drawn(chart):
    """The metric rows of a chart (the layers that carry runs), as (run, name, step, value) tuples."""
    rows = chart_rows(chart).dropna(subset=["run"]).drop_duplicates(["run", "name", "step"])
    return set(zip(rows["run"], rows["name"], rows["step"].astype(int), rows["value"].round(12)))


def layers(chart):
    return spec(chart)["layer"]


def param(app, key):
    value = app.query_params[key]
    return value[0] if isinstance(value, list) else value


def test_table_rows_match_the_store(store, three_runs):
    app = run()
    assert not app.exception
    table = app.dataframe[0].value
    assert table["id"].tolist() == [r.id for r in store.records(latest=False)] == [3, 2, 1]
    assert table["cell"].tolist() == ["spectral", "lstm", "rnn"]
    assert table["task"].tolist() == ["copy", "adding", "adding"]
    assert table["seq_len"].tolist() == [50, 50, 50] and table["seed"].tolist() == [3, 3, 3]
    assert table.loc[table["id"] == 2, "test/mse"].item() == pytest.approx(0.125)
    assert math.isnan(table.loc[table["id"] == 3, "test/mse"].item())
    assert table.loc[table["id"] == 3, "test/cross_entropy"].item() == pytest.approx(0.25 / 3)


def test_query_parameter_selects_runs_and_draws_one_chart_per_default_metric(three_runs):
    app = run(runs="1,2")
    assert not app.exception
    assert app.multiselect(key="cmp_metrics").value == ["val/loss", "grad/h0_norm"]
    assert len(charts_of(app)) == 2
    assert {run for run, *_ in drawn(charts_of(app)[0])} == {"#1 rnn", "#2 lstm"}
    assert param(app, "runs") == "1,2"


def test_without_a_query_parameter_the_newest_runs_are_selected(three_runs):
    app = run()
    assert {run for run, *_ in drawn(charts_of(app)[0])} == {"#1 rnn", "#2 lstm", "#3 spectral"}


def test_clicking_rows_changes_the_selection_and_the_url(three_runs):
    app = run(runs="1,2")
    app.session_state["cmp_table"] = {"selection": {"rows": [0]}}  # what a click on the first row sends
    app.run()
    assert not app.exception
    assert {run for run, *_ in drawn(charts_of(app)[0])} == {"#3 spectral"}
    assert param(app, "runs") == "3"


def test_selection_follows_the_run_when_new_runs_push_rows_down(store, three_runs):
    app = run(runs="1")
    add_run(store, "gru", "adding", "mse", ADDING_BASELINE)
    app.run()
    assert not app.exception
    assert {run for run, *_ in drawn(charts_of(app)[0])} == {"#1 rnn"}
    assert param(app, "runs") == "1"


def test_no_selection_asks_for_one(three_runs):
    app = run(runs="")
    assert not app.exception and not charts_of(app)
    assert any("Select one or more runs" in info.value for info in app.info)


def test_metric_query_parameter_and_multiselect_choose_the_charts(three_runs):
    app = run(runs="1", metrics="train/loss,val/mse,grad/h0_norm,no/such")
    assert app.multiselect(key="cmp_metrics").value == ["train/loss", "val/mse", "grad/h0_norm"]
    assert set(by_title(app)) == {"train/loss", "val/mse", "grad/h0_norm"}
    app.multiselect(key="cmp_metrics").unselect("val/mse").run()
    assert set(by_title(app)) == {"train/loss", "grad/h0_norm"}
    assert param(app, "metrics") == "train/loss,grad/h0_norm"


def rule_values(chart):
    """Values of the baseline rule layers (the layers whose data has a 'baseline' column)."""
    rows = chart_rows(chart)
    return rows["baseline"].dropna().tolist() if "baseline" in rows else []


def test_baseline_is_drawn_on_the_task_metric_only_when_the_runs_share_it(three_runs):
    app = run(runs="1,2", metrics="val/loss,val/mse,gap/loss,grad/h0_norm")
    values = {title: rule_values(chart) for title, chart in by_title(app).items()}
    assert values["val/loss"] and values["val/loss"] == values["val/mse"] == [pytest.approx(ADDING_BASELINE)]
    assert values["gap/loss"] == values["grad/h0_norm"] == []
    mixed = run(runs="1,3", metrics="val/loss")
    assert rule_values(charts_of(mixed)[0]) == []


def test_smoothing_adds_the_faint_raw_layer_and_smooths_the_drawn_values(three_runs):
    app = run(runs="1", metrics="train/loss")
    plain = charts_of(app)[0]
    app.slider(key="cmp_smoothing").set_value(0.9).run()
    assert not app.exception
    smooth = charts_of(app)[0]
    assert len(layers(smooth)) == len(layers(plain)) + 1
    raw = chart_rows(plain).dropna(subset=["run"]).drop_duplicates("step")["y"].to_numpy()
    smoothed = chart_rows(smooth).dropna(subset=["run"]).drop_duplicates("step")["y"].to_numpy()
    assert smoothed[0] == pytest.approx(raw[0]) and (smoothed[1:] > raw[1:]).all()  # the average lags a fall
    assert param(app, "smooth") == "0.9"


def y_scale_types(chart):
    return {layer["encoding"]["y"].get("scale", {}).get("type") for layer in layers(chart) if "y" in layer.get(
        "encoding", {})}


def x_fields(chart):
    return {layer["encoding"]["x"]["field"] for layer in layers(chart) if "x" in layer.get("encoding", {})
            and "field" in layer["encoding"]["x"]}


def test_log_toggle_and_wall_time_change_the_chart_spec(three_runs):
    app = run(runs="1", metrics="grad/h0_norm")
    assert y_scale_types(charts_of(app)[0]) == {"log"} and x_fields(charts_of(app)[0]) == {"step"}
    app.toggle(key="cmp_log").set_value(False).run()
    app.radio(key="cmp_x").set_value("wall_time").run()
    assert not app.exception
    chart = charts_of(app)[0]
    assert "log" not in y_scale_types(chart) and x_fields(chart) == {"time_s"}
    assert (param(app, "log"), param(app, "x")) == ("0", "wall_time")


def test_url_restores_every_control(three_runs):
    app = run(runs="2", metrics="val/mse", smooth="0.5", log="0", x="wall_time")
    assert app.slider(key="cmp_smoothing").value == 0.5
    assert app.toggle(key="cmp_log").value is False and app.radio(key="cmp_x").value == "wall_time"


def test_bad_query_parameters_fall_back_quietly(three_runs):
    app = run(runs="x,2,,-1", smooth="lots", x="sideways", log="maybe")
    assert not app.exception and not app.error
    assert app.slider(key="cmp_smoothing").value == 0.0 and app.radio(key="cmp_x").value == "step"
    assert {run for run, *_ in drawn(charts_of(app)[0])} == {"#2 lstm"}


def test_csv_download_holds_exactly_the_drawn_rows(three_runs, monkeypatch):
    downloads = []
    original = streamlit.download_button

    def recording(label, data, *args, **kwargs):
        downloads.append(data)
        return original(label, data, *args, **kwargs)

    monkeypatch.setattr(streamlit, "download_button", recording)
    app = run(runs="1,2", metrics="val/loss,grad/h0_norm", smooth="0.6", x="wall_time")
    assert not app.exception
    csv = pd.read_csv(io.BytesIO(downloads[-1]))
    assert list(csv.columns) == ["run_id", "run", "name", "step", "time_s", "value", "smoothed"]
    shown = set().union(*(drawn(chart) for chart in charts_of(app)))
    assert set(zip(csv["run"], csv["name"], csv["step"], csv["value"].round(12))) == shown
    assert len(csv) == len(shown) == 2 * 2 * len(STEPS)
    first = csv[(csv["run_id"] == 1) & (csv["name"] == "val/loss")]
    assert first["time_s"].tolist() == [0.5 * step for step in STEPS]  # seconds since the run's first row
    assert first["smoothed"].iloc[-1] > first["value"].iloc[-1]  # a falling curve's average lags above it


def test_empty_store_points_to_train(store):
    app = run()
    assert not app.exception and not app.error
    assert "Train" in app.info[0].value


def test_a_store_path_that_is_a_folder_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.setenv("STABILITY_STORE", str(tmp_path))
    app = run()
    assert not app.exception
    assert len(app.error) == 1 and "is a directory" in app.error[0].value


def test_a_task_whose_metric_is_not_its_loss_defaults_to_that_metric_with_its_baseline(store):
    runs = [add_run(store, cell, "adding", "accuracy", 0.5) for cell in ("rnn", "lstm")]
    app = run(runs=",".join(map(str, runs)))
    assert not app.exception
    assert app.multiselect(key="cmp_metrics").value == ["val/accuracy", "grad/h0_norm"]
    app.multiselect(key="cmp_metrics").select("val/loss").run()
    values = {title: rule_values(chart) for title, chart in by_title(app).items()}
    assert values["val/accuracy"] == [pytest.approx(0.5)]
    assert values["val/loss"] == []  # a loss is not in accuracy's units


def test_a_run_whose_stored_config_no_longer_parses_does_not_break_the_page(store, three_runs):
    old = store.create_run({"cell": {"name": "gru", "hidden_size": 16, "retired_option": 1},
                            "task": {"name": "adding"}}, name="")
    store.log(old, [(0, 1.0, "val/loss", 0.3)])
    app = run(runs=f"1,{old}")
    assert not app.exception and not app.error
    assert {run for run, *_ in drawn(by_title(app)["val/loss"])} == {"#1 rnn", f"#{old} gru"}


def add_seeded(store, cell, seed, lr=1e-3):
    """A completed run whose val/loss and ‖∂L/∂h0‖ depend on its cell, lr and seed."""
    config = RunConfig(cell=CellConfig(cell, 16), task=TaskConfig("adding", {"seq_len": 50}),
                       train=TrainConfig(steps=100, lr=lr, seed=seed))
    run_id = store.create_run(config.to_dict(), name=f"{cell} seed {seed}")
    store.update_run(run_id, metric="mse", baseline=ADDING_BASELINE, total_steps=100, step=90)
    set_status(store, run_id, "completed")
    rows = []
    for step in STEPS:
        rows += [(step, 10.0 * run_id + step, "val/loss", (1 + seed) / (1 + step) + lr),
                 (step, 10.0 * run_id + step, "grad/h0_norm", 10.0 ** -(step * (1 + seed) / 10) if step < 90 or seed
                  else 0.0)]
    store.log(run_id, rows)
    return run_id


def group_rows(chart):
    """The mean/min/max rows of a grouped chart (the dataset with a 'group' column)."""
    return next(frame for frame in (dataframe_util.convert_arrow_bytes_to_pandas_df(named.data.data)
                                    for named in chart.proto.datasets) if "group" in frame)


def test_group_seeds_draws_one_mean_line_with_a_band_per_group(store):
    runs = [add_seeded(store, "rnn", seed) for seed in range(3)] + [add_seeded(store, "lstm", seed) for seed in (0, 1)]
    app = run(runs=",".join(map(str, runs)), metrics="val/loss,grad/h0_norm", log="0")
    app.toggle(key="cmp_group").set_value(True).run()
    assert not app.exception
    assert param(app, "group") == "1"
    metrics = store.metrics_many(runs)
    cells = {run_id: "rnn" if run_id in runs[:3] else "lstm" for run_id in runs}
    metrics["group"] = metrics["run_id"].map(cells)
    for name, chart in by_title(app).items():
        rows = group_rows(chart)
        assert set(rows["group"]) == {"cell=rnn (3 runs)", "cell=lstm (2 runs)"}
        expected = metrics[metrics["name"] == name].groupby(["group", "step"])["value"].agg(["mean", "min", "max"])
        for row in rows.itertuples():
            want = expected.loc[(row.group.split("=")[1].split(" ")[0], row.step)]
            assert row.mean == pytest.approx(want["mean"]) and row.min == want["min"] and row.max == want["max"]


def test_group_seeds_on_a_log_axis_averages_exponents_and_keeps_zeros(store):
    runs = [add_seeded(store, "rnn", seed) for seed in range(3)]
    app = run(runs=",".join(map(str, runs)), metrics="grad/h0_norm", log="1", group="1")
    assert not app.exception and app.toggle(key="cmp_group").value
    rows = group_rows(charts_of(app)[0]).set_index("step")
    values = store.metrics_many(runs, names=["grad/h0_norm"])
    at_50 = values.loc[values["step"] == 50, "value"]
    assert rows.loc[50, "mean"] == pytest.approx(10 ** np.log10(at_50).mean())
    assert rows.loc[90, "min"] == 0.0 and rows.loc[90, "zeros"] == 1  # seed 0 vanished: counted, not averaged


def test_group_by_chosen_fields_from_the_link(store):
    runs = [add_seeded(store, "rnn", 0, lr=1e-3), add_seeded(store, "rnn", 1, lr=1e-2), add_seeded(store, "lstm", 0)]
    app = run(runs=",".join(map(str, runs)), metrics="val/loss", group="1", by="cell")
    assert not app.exception
    assert app.multiselect(key="cmp_group_by").value == ["cell"]
    rows = group_rows(charts_of(app)[0])
    assert set(rows["group"]) == {"cell=rnn (2 runs)", "cell=lstm (1 run)"}
    assert rows.loc[(rows["group"] == "cell=rnn (2 runs)"), "n"].eq(2).all()
    ungrouped = run(runs=",".join(map(str, runs)), metrics="val/loss", group="1")
    assert len(set(group_rows(charts_of(ungrouped)[0])["group"])) == 3  # lr differs: three groups
