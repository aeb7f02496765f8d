"""stability/charts/figures.py: a preset's layout drawn from hand-written stored rows: the grid of panels by
columns, the lines named by the colour field, the reference marks, and a panel against a config field
whose points are the runs' statistics read back from the charts' own data."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from stability.charts import figures
from stability import presets
from stability.config.fields import field_label, field_value
from stability.core.formatting import shown
from statuses import set_status

LAYOUT = """
name = "laid"
title = "t"
paper = "p"
figure = "Fig. 2"
section = "§7.1"
shows = "s"
[base]
task = { name = "adding" }
[[runs]]
name = "rnn-short"
cell = { name = "rnn", hidden_size = 4 }
task = { options = { seq_len = 10 } }
[[runs]]
name = "rnn-long"
cell = { name = "rnn", hidden_size = 4 }
task = { options = { seq_len = 30 } }
[[runs]]
name = "spectral-short"
cell = { name = "spectral", hidden_size = 4, options = { m1 = 4, m2 = 4 } }
task = { options = { seq_len = 10 } }
[[runs]]
name = "spectral-long"
cell = { name = "spectral", hidden_size = 4, options = { m1 = 4, m2 = 4 } }
task = { options = { seq_len = 30 } }
[scales.classroom]
note = "n"
[scales.paper]
note = "n"
[[claims]]
text = "c"
run = "rnn-short"
metric = "val/loss"
than = 1
[layout]
columns = "task.seq_len"
color = "cell"
[[layout.panels]]
metric = "val/loss"
title = "MSE"
marks = ["baseline", { value = 0.05, label = "paper" }]
[[layout.panels]]
metric = "grad/h0_norm"
log = true
range = [1e-30, 1]
[[layout.panels]]
metric = "val/loss"
title = "final MSE against T"
x = "task.seq_len"
stat = "min"
"""
# chosen rows: (run name) -> val/loss at steps 0, 5, 10 and grad/h0_norm at those steps
LOSSES = {"rnn-short": [0.2, 0.17, 0.16], "rnn-long": [0.2, 0.18, 0.17],
          "spectral-short": [0.2, 0.05, 0.01], "spectral-long": [0.2, 0.1, 0.03]}
GRADS = {"rnn-short": [1e-3, 1e-20, 0.0], "rnn-long": [1e-5, 1e-40, 0.0],
         "spectral-short": [1e-2, 2e-2, 3e-2], "spectral-long": [1e-2, 1e-2, float("inf")]}


@pytest.fixture
def laid(store, tmp_path):
    path = tmp_path / "laid.toml"
    path.write_text(LAYOUT)
    preset = presets.load(path)
    runs, metrics = {}, {}
    for name, config in preset.configs("classroom").items():
        run_id = store.create_run(config.to_dict())
        store.flush(run_id, [(step, float(step), metric, values[i]) for i, step in enumerate((0, 5, 10))
                             for metric, values in (("val/loss", LOSSES[name]), ("grad/h0_norm", GRADS[name]))])
        store.update_run(run_id, baseline=1 / 6, baseline_label="memoryless", metric="mse", step=10)
        set_status(store, run_id, "completed")
        runs[run_id] = store.record(run_id)
        metrics[run_id] = store.metrics(run_id)
    return preset, runs, metrics


def test_the_grid_is_panels_by_columns_and_the_lines_are_named_by_the_colour_field(laid):
    preset, runs, metrics = laid
    layout = preset.drawn()
    names = {run_id: presets.group_of(run, preset) for run_id, run in runs.items()}
    lines = figures.line_labels(layout, runs, names)
    assert sorted(lines.values()) == ["rnn", "rnn", "spectral", "spectral"]
    columns = figures.column_values(layout, runs)
    assert {names[run_id]: value for run_id, value in columns.items()} == {
        "rnn-short": 10, "rnn-long": 30, "spectral-short": 10, "spectral-long": 30}
    grid = figures.grid_slots(layout, columns)
    assert [(panel.metric, panel.x, value) for panel, value in grid] == [
        ("val/loss", "step", 10), ("val/loss", "step", 30), ("grad/h0_norm", "step", 10),
        ("grad/h0_norm", "step", 30), ("val/loss", "task.seq_len", 10), ("val/loss", "task.seq_len", 30)]

    drawn = figures.charts(layout, grid, runs, metrics, lines, columns)
    assert len(drawn) == len(grid)
    first = drawn[0].to_dict()
    assert first["title"] == "seq_len = 10 · MSE"  # the value first: a cut title keeps it
    data = _datasets(first)
    lines_data = next(frame for frame in data if "y" in frame and "run_id" in frame)  # the hover points
    assert set(lines_data["run"]) == {"rnn", "spectral"}  # only the T = 10 runs, named by their cell
    short = {run_id for run_id, value in columns.items() if value == 10}
    assert set(lines_data["run_id"]) == short
    marks = next(frame for frame in data if "baseline" in frame)
    assert list(zip(marks["label"], marks["baseline"])) == [("memoryless", pytest.approx(1 / 6)), ("paper", 0.05)]


def test_a_log_panel_marks_a_vanished_gradient_instead_of_dropping_it(laid):
    preset, runs, metrics = laid
    layout = preset.drawn()
    lines = figures.line_labels(layout, runs, {run_id: str(run_id) for run_id in runs})
    columns = figures.column_values(layout, runs)
    grid = figures.grid_slots(layout, columns)
    drawn = figures.charts(layout, grid, runs, metrics, lines, columns)
    (long_grad,) = [chart for chart, (panel, value) in zip(drawn, grid)
                    if panel.metric == "grad/h0_norm" and value == 30]
    rows = pd.concat([frame for frame in _datasets(long_grad.to_dict()) if "note" in frame], ignore_index=True)
    rnn = rows[(rows["run"] == "rnn") & rows["step"].notna()]
    assert 10 in set(rnn["step"])                       # the stored 0 is drawn, at the bottom edge, marked
    assert (rnn.loc[rnn["step"] == 10, "note"].str.len() > 0).all()
    assert (rnn.loc[rnn["step"] == 0, "note"] == "").all()
    spectral = rows[(rows["run"] == "spectral") & (rows["step"] == 10)]
    assert len(spectral) and (spectral["note"].str.len() > 0).all()   # and an infinity at the top edge


def test_a_panel_against_a_field_draws_each_runs_statistic(laid):
    preset, runs, metrics = laid
    layout = preset.drawn()
    names = {run_id: presets.group_of(run, preset) for run_id, run in runs.items()}
    lines = figures.line_labels(layout, runs, names)
    panel = layout.panels[2]
    points = figures.field_points(panel, list(runs), runs, metrics, lines)
    by_name = {names[row.run_id]: (row.x, row.run, row.value) for row in points.itertuples()}
    for name, values in LOSSES.items():  # the statistic, computed here from the chosen rows
        assert by_name[name] == (10 if name.endswith("short") else 30, name.split("-")[0], min(values))
    chart = figures.charts(layout, [(panel, None)], runs, metrics, lines, {run_id: None for run_id in runs})[0]
    drawn = next(frame for frame in _datasets(chart.to_dict()) if "value" in frame)
    assert sorted(drawn["value"]) == sorted(min(values) for values in LOSSES.values())


def test_lines_that_would_share_a_name_get_what_differs_then_their_id(laid):
    preset, runs, metrics = laid
    lines = {run_id: "same" for run_id in runs}
    named = figures.distinct(lines, runs)  # the four runs differ in cell and T, nothing else
    for run_id, run in runs.items():
        stored = run.config.to_dict()
        assert named[run_id] == f"same cell={stored['cell']['name']} seq_len={stored['task']['options']['seq_len']}"
    # with those fields the layout's own, nothing else differs and every stored seed is 0: the run ids
    named = figures.distinct(lines, runs, skip=("cell", "task.seq_len"))
    assert sorted(named.values()) == sorted(f"same run {run_id}" for run_id in runs)
    one = next(iter(runs))
    assert figures.distinct({one: "alone", **{i: "x" for i in runs if i != one}}, runs)[one] == "alone"


def test_fields_read_for_columns_and_lines_come_from_the_stored_config(laid):
    preset, runs, _ = laid
    for run in runs.values():  # independently: the stored config's own dict
        stored = run.config.to_dict()
        assert field_value(run.config, "task.seq_len") == stored["task"]["options"]["seq_len"]
        assert field_value(run.config, "cell") == stored["cell"]["name"]
    assert field_label("cell.h0_noise_std", short=True) == "h0_noise_std" and field_label("cell", short=True) == "cell"
    assert shown(0.5) == "0.5" and not math.isnan(1.0)


def _datasets(spec: dict) -> list[pd.DataFrame]:
    return [pd.DataFrame(rows) for rows in spec.get("datasets", {}).values()]


def test_a_panel_range_fixes_the_y_axis_and_clips_every_mark(laid):
    preset, runs, metrics = laid
    layout = preset.drawn()
    grid = [cell for cell in figures.grid_slots(layout, figures.column_values(layout, runs)) if cell[0].range]
    assert grid and all(panel.range == (1e-30, 1.0) for panel, _ in grid)
    lines = figures.line_labels(layout, runs, {run_id: str(run_id) for run_id in runs})
    for chart in figures.charts(layout, grid, runs, metrics, lines, figures.column_values(layout, runs)):
        spec = chart.to_dict()
        scales = [layer["encoding"]["y"]["scale"] for layer in spec["layer"] if "y" in layer.get("encoding", {})]
        assert scales and all(scale["domain"] == [1e-30, 1.0] and scale["type"] == "log" for scale in scales)
        assert all(layer["mark"]["clip"] is True for layer in spec["layer"])
    unbounded = figures.charts(layout, [(layout.panels[0], 10)], runs, metrics, lines,
                               figures.column_values(layout, runs))[0].to_dict()
    assert all("domain" not in layer["encoding"]["y"].get("scale", {}) for layer in unbounded["layer"]
               if "y" in layer.get("encoding", {}))


def test_a_field_over_decades_is_drawn_evenly_in_numeric_order_and_a_close_one_to_scale():
    from stability import charts

    points = pd.DataFrame({"x": [5, 0.01, 0, 5, 0, 0.01], "run": list("aaabbb"), "value": [0.3, 0.2, 0.1, 0.6, 0.4, 0.5],
                           "run_id": range(6)})
    x = charts.field_chart(points, x_title="σ", y_title="acc").to_dict()["layer"][0]["encoding"]["x"]
    assert x["type"] == "ordinal" and x["sort"] == ["0", "0.01", "5"]
    close = charts.field_chart(points.assign(x=[40, 20, 5, 40, 5, 20]), x_title="L", y_title="acc").to_dict()
    x = close["layer"][0]["encoding"]["x"]
    assert x["type"] == "quantitative" and x["axis"]["values"] == [5.0, 20.0, 40.0]


def test_long_or_many_line_names_wrap_the_legend_uncut_in_a_taller_panel():
    from stability.charts import legends

    assert legends.legend_rows(["rnn", "lstm", "spectral", "orthogonal"]) == 1
    long = [f"optimizer = rmsprop h0_noise_std={sigma}" for sigma in (0, 0.01, 5)]
    assert legends.legend_rows(long) == 3
    assert legends.extra_height(long) == 2 * legends.ROW_PX
    assert legends.extra_height(["rnn", "lstm"]) == 0
    from stability import charts

    frame = pd.DataFrame({"run_id": [1, 1], "run": [long[0]] * 2, "name": ["val/loss"] * 2, "step": [0, 1],
                          "wall_time": [0.0, 1.0], "value": [1.0, 0.5]})
    legend = charts.metric_chart(frame, names=["val/loss"], legend="wrap").to_dict()["layer"][0]["encoding"]["color"]
    assert legend["legend"] == {"orient": "top", "columns": 2, "labelLimit": 400}


DEPTH = """
name = "deep"
title = "t"
paper = "p"
figure = "Fig. 5"
section = "§7.2"
shows = "s"
[base]
task = { name = "adding", options = { seq_len = 6 } }
[[runs]]
name = "mlp"
cell = { name = "mlp", hidden_size = 4, options = { layers = 3 } }
[scales.classroom]
note = "n"
[scales.paper]
note = "n"
[[claims]]
text = "c"
run = "mlp"
metric = "val/loss"
than = 1
[layout]
[[layout.panels]]
metric = "grad/layer_norm"
x = "layer"
stat = "STAT"
log = true
"""


@pytest.mark.parametrize("stat", ["first", "final"])
def test_a_panel_over_layers_draws_the_series_at_its_first_or_final_reading(store, tmp_path, stat):
    path = tmp_path / "deep.toml"
    path.write_text(DEPTH.replace("STAT", stat))
    preset = presets.load(path)
    layout = preset.drawn()
    run_id = store.create_run(preset.configs("classroom")["mlp"].to_dict())
    by_step = {0: [1e-3, 1e-6, 1e-9, 0.0], 7: [2.0, 3.0, 4.0, 5.0]}  # chosen ‖∂L/∂a_l‖, l = 0..3
    store.flush(run_id, [(0, 0.0, "val/loss", 0.2)],
                [(step, float(step), "grad/layer_norm", layer, value) for step, values in by_step.items()
                 for layer, value in enumerate(values)])
    runs, depth = {run_id: store.record(run_id)}, {run_id: store.series(run_id, "grad/layer_norm")}
    (panel,) = layout.panels
    points = figures.layer_points(panel, [run_id], depth, {run_id: "mlp"})
    assert points["x"].tolist() == [0, 1, 2, 3]
    assert points["value"].tolist() == by_step[0 if stat == "first" else 7]
    chart = figures.charts(layout, [(panel, None)], runs, {run_id: store.metrics(run_id)}, {run_id: "mlp"},
                           {run_id: None}, depth)[0]
    drawn = next(frame for frame in _datasets(chart.to_dict()) if "value" in frame)
    assert sorted(drawn["x"]) == [0, 1, 2, 3]
    if stat == "first":  # the 0 at l = 3 stays on the log axis, marked at its edge
        assert (drawn.loc[drawn["x"] == 3, "note"].str.len() > 0).all()


def test_a_panel_over_layers_takes_only_a_series_over_depth_at_its_first_or_final_reading(tmp_path):
    for wrong in ('metric = "grad/h0_norm"\nx = "layer"', 'metric = "grad/layer_norm"\nx = "layer"\nstat = "max"'):
        path = tmp_path / "wrong.toml"
        text = DEPTH.replace('metric = "grad/layer_norm"\nx = "layer"\nstat = "STAT"', wrong)
        path.write_text(text)
        with pytest.raises(presets.PresetError, match="series over depth"):
            presets.load(path)
