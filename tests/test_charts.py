"""Chart specs: marks, encodings and scales, without a browser."""
import json
import math
import re

import numpy as np
import pytest
import pandas as pd

from stability import charts


def layers(spec):
    return spec.get("layer", [spec])


def test_clip_for_log_flags_zero_and_infinity():
    values, flags = charts.clip_for_log(pd.Series([0.0, 1e-300, 2.0, np.inf, -1.0, np.nan]))
    assert values.tolist()[2] == 2.0 and values.tolist()[1] == 1e-300
    assert values.iloc[0] == charts.TINY and values.iloc[4] == charts.TINY
    assert values.iloc[3] == charts.HUGE
    assert np.isnan(values.iloc[5])  # a diverged value is a gap, not a point at the edge
    assert flags.tolist() == [charts.NOTE_UNDERFLOW, "", "", "overflow", charts.NOTE_UNDERFLOW,
                              "not a number"]


def test_gradient_flow_chart_is_log_y_with_measured_and_bound():
    per_step = pd.DataFrame({"t": [0, 1, 2], "steps_back": [2, 1, 0], "grad_norm": [0.0, 0.5, 1.0],
                             "bound": [np.inf, 2.0, 1.0]})
    spec = charts.gradient_flow_chart(per_step).to_dict()
    marks = [layer["mark"]["type"] for layer in layers(spec)]
    assert marks == ["line", "point"]
    encoding = layers(spec)[0]["encoding"]
    assert encoding["x"]["field"] == "t"
    assert encoding["y"]["field"] == "value" and encoding["y"]["scale"]["type"] == "log"
    assert encoding["color"]["field"] == "series"
    rows = next(iter(spec["datasets"].values()))
    assert len(rows) == 6 and all(0 < row["value"] < np.inf for row in rows)
    assert {row["flag"] for row in rows} == {"", charts.NOTE_UNDERFLOW, "overflow"}


def test_singular_values_chart_has_bars_and_the_unit_reference():
    spec = charts.singular_values_chart(np.array([1.2, 1.0, 0.7])).to_dict()
    marks = [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in layers(spec)]
    assert marks == ["bar", "rule"]
    assert layers(spec)[0]["encoding"]["y"]["field"] == "sigma"
    datasets = list(spec["datasets"].values())
    assert [row["sigma"] for row in datasets[0]] == [1.2, 1.0, 0.7]
    assert datasets[1] == [{"sigma": 1.0}]
    assert layers(spec)[0]["encoding"]["color"]["scale"]["domain"] == pytest.approx([0.0, 0.3])  # max |σ − 1|


def test_singular_values_colour_ignores_rounding_noise():
    spec = charts.singular_values_chart(np.array([1.0 + 1e-15, 1.0])).to_dict()
    assert layers(spec)[0]["encoding"]["color"]["scale"]["domain"] == [0.0, 0.05]


# --- dashboards: prepare, metric_chart, singular_value_band_chart, gradient_flow_heatmap --------------------

def flat_layers(spec):
    """Unit layers of a (possibly nested) layer spec, depth first."""
    if "layer" not in spec:
        return [spec]
    return [unit for layer in spec["layer"] for unit in flat_layers(layer)]


def mark_type(layer):
    return layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"]


def rows_of(spec, layer):
    """The rows a unit layer draws (altair hoists data shared by every layer to the top)."""
    return pd.DataFrame(spec["datasets"][layer.get("data", spec.get("data"))["name"]])


def reference_ema(values, weight):
    """TensorBoard's debiased EMA written out plainly; non-finite values pass through and are skipped."""
    out, last, count = [], 0.0, 0
    for value in values:
        if np.isfinite(value):
            last = weight * last + (1 - weight) * value
            count += 1
            out.append(last / (1 - weight ** count))
        else:
            out.append(value)
    return np.array(out)


def metric_rows(series: dict, steps=range(5), runs=(1,), wall_start=None):
    """Long metric rows: series maps name -> f(run_id, step) -> value; run r's wall clock starts at 100 r."""
    rows = [(run, step, (wall_start or {}).get(run, 100.0 * run) + 2.0 * step, name, float(value(run, step)))
            for run in runs for name, value in series.items() for step in steps]
    return pd.DataFrame(rows, columns=["run_id", "step", "wall_time", "name", "value"])


def test_notes_match_clip_for_log():
    _, flags = charts.clip_for_log(pd.Series([0.0, np.inf]))
    assert flags.tolist() == [charts.NOTE_UNDERFLOW, charts.NOTE_OVERFLOW]


@pytest.mark.parametrize("weight", [0.0, 0.01, 0.6, 0.9, 0.99])
def test_ema_matches_tensorboard_debiased_average(weight):
    values = np.random.default_rng(0).normal(5.0, 2.0, size=300)  # crosses several blocks of the vectorised form
    values[[7, 150]] = [np.nan, np.inf]
    expected = reference_ema(values, weight)
    smoothed = charts.ema(values, weight)
    np.testing.assert_allclose(smoothed, expected, rtol=1e-12, atol=1e-12)
    assert smoothed[0] == pytest.approx(values[0])  # debiased: the first point is not pulled towards 0


@pytest.mark.parametrize("weight", [0.0, 0.5, 0.99])
def test_ema_passes_non_finite_values_through_and_the_average_skips_them(weight):
    """NaN, inf and -inf come out as they went in, wherever they are (first, last, in a row), and the
    finite values are smoothed as if those rows were not there: they neither enter the average nor age it."""
    values = np.array([np.nan, np.inf, 2.0, -np.inf, 4.0, np.nan, np.nan, 8.0, 1.0, np.inf])
    bad = ~np.isfinite(values)
    smoothed = charts.ema(values, weight)
    np.testing.assert_array_equal(smoothed[bad], values[bad])
    np.testing.assert_allclose(smoothed[~bad], reference_ema(values[~bad], weight), rtol=1e-12)
    for nothing_finite in (np.array([np.nan, -np.inf, np.inf]), np.array([])):
        np.testing.assert_array_equal(charts.ema(nothing_finite, weight), nothing_finite)
    logged = np.array([np.nan, 1e-3, 0.0, -5.0, 1e-9, np.inf, 1e2])
    shown = np.isfinite(logged) & (logged > 0)
    smoothed = charts.log_ema(logged, weight)
    np.testing.assert_array_equal(smoothed[~shown], logged[~shown])  # the chart flags these, unsmoothed
    np.testing.assert_allclose(smoothed[shown], 10.0 ** reference_ema(np.log10(logged[shown]), weight), rtol=1e-12)


def test_prepare_smooths_each_series_on_its_own_in_step_order():
    frame = metric_rows({"train/loss": lambda run, step: (step * 7 % 5) + run,
                         "val/loss": lambda run, step: 10.0 - step}, steps=range(40), runs=(1, 2))
    shuffled = frame.sample(frac=1.0, random_state=0)
    prepared = charts.prepare(shuffled, smoothing=0.8)
    assert list(prepared.columns) == charts.PREPARED_COLUMNS
    assert len(prepared) == len(frame)
    for (run_id, name), series in prepared.groupby(["run_id", "name"]):
        assert series["step"].tolist() == list(range(40))
        raw = frame[(frame.run_id == run_id) & (frame.name == name)].sort_values("step")["value"].to_numpy()
        np.testing.assert_allclose(series["value"], raw)
        np.testing.assert_allclose(series["smoothed"], reference_ema(raw, 0.8), rtol=1e-12)


def test_prepare_without_smoothing_keeps_the_raw_values():
    frame = metric_rows({"train/loss": lambda run, step: step ** 2})
    prepared = charts.prepare(frame)
    np.testing.assert_array_equal(prepared["smoothed"], prepared["value"])


def test_prepare_wall_time_is_seconds_since_each_runs_first_row():
    frame = metric_rows({"a": lambda run, step: 1.0, "b": lambda run, step: 2.0}, runs=(1, 2),
                        wall_start={1: 1000.0, 2: 5000.0})
    frame.loc[(frame.run_id == 2) & (frame.name == "b"), "wall_time"] += 3.0  # b starts later in run 2
    prepared = charts.prepare(frame, x="wall_time")
    by_run = prepared.groupby("run_id")["time_s"]
    assert by_run.min().tolist() == [0.0, 0.0]
    run2_b = prepared[(prepared.run_id == 2) & (prepared.name == "b")]
    assert run2_b["time_s"].tolist() == [3.0, 5.0, 7.0, 9.0, 11.0]
    np.testing.assert_allclose(prepared["time_s"], prepared["wall_time"] - prepared["run_id"].map({1: 1000.0, 2: 5000.0}))


def test_prepare_run_labels_default_to_the_id_and_keep_given_ones():
    frame = metric_rows({"a": lambda run, step: 1.0}, runs=(3, 4))
    assert set(charts.prepare(frame)["run"]) == {"3", "4"}
    labelled = frame.assign(run=frame["run_id"].map({3: "#3 lstm", 4: "#4 spectral"}))
    assert set(charts.prepare(labelled)["run"]) == {"#3 lstm", "#4 spectral"}


def test_prepare_downsamples_keeping_ends_and_extremes():
    steps = np.arange(10_000)
    values = np.sin(steps / 300.0)
    values[1234], values[8765] = 50.0, -50.0  # one-step spikes that plain striding would miss
    values[4321] = np.nan
    frame = pd.DataFrame({"run_id": 1, "step": steps, "wall_time": steps * 0.1, "name": "train/loss",
                          "value": values})
    other = frame.assign(run_id=2, value=np.cos(steps / 100.0))
    prepared = charts.prepare(pd.concat([frame, other]), smoothing=0.9, max_points=100)
    for run_id, series in prepared.groupby("run_id"):
        assert 50 <= len(series) <= 100
        assert series["step"].iloc[0] == 0 and series["step"].iloc[-1] == 9_999
        assert series["step"].is_monotonic_increasing
    run1 = prepared[prepared.run_id == 1].set_index("step")
    assert run1.loc[1234, "value"] == 50.0 and run1.loc[8765, "value"] == -50.0
    expected = reference_ema(values, 0.9)[run1.index]  # smoothed before decimation, on the full series
    np.testing.assert_allclose(run1["smoothed"], expected, rtol=1e-12)
    run2 = prepared[prepared.run_id == 2]
    assert run2["value"].max() == pytest.approx(1.0) and run2["value"].min() == pytest.approx(-1.0)


def test_downsample_indices_keeps_the_extremes_of_every_column():
    first = np.zeros(1000)
    second = np.zeros(1000)
    first[500], second[501] = 9.0, -9.0
    keep = charts.downsample_indices([first, second], 20)
    assert len(keep) <= 20 and {0, 999, 500, 501} <= set(keep.tolist())
    assert np.all(np.diff(keep) > 0)
    np.testing.assert_array_equal(charts.downsample_indices([first[:20]], 20), np.arange(20))


def random_series(rng, n):
    """A series a training run could log, and worse: log-uniform magnitudes over the whole float64 range
    (subnormals included), flat runs with ties, one-row spikes, zeros, negatives, infinities and NaN."""
    kind = rng.integers(4)
    if kind == 0:  # a gradient norm vanishing or exploding over many decades
        with np.errstate(over="ignore", under="ignore"):
            values = 10.0 ** np.cumsum(rng.normal(0, rng.choice([0.1, 3.0, 30.0]), n))
    elif kind == 1:
        values = 10.0 ** rng.uniform(-323, 308, n) * rng.choice([1.0, -1.0], n, p=[0.9, 0.1])
    elif kind == 2:  # plateaus: many ties
        values = rng.choice([0.0, 1e-300, 1.0, 2.0], n)
    else:
        values = rng.normal(1.0, 0.1, n)
    for special in (0.0, np.inf, -np.inf, np.nan, 1e-310, 1e300):
        values[rng.random(n) < 0.02] = special
    return values


def expected_buckets(n, max_points, kept, columns):
    """The buckets :func:`charts.downsample_indices` documents: the interior rows 1..n-2 in contiguous runs
    of equal length, as many as (max_points - kept) // (2 * columns), at least one."""
    count = max(1, (max_points - kept) // (2 * columns))
    return [[row for row in range(1, n - 1) if (row - 1) * count // (n - 2) == bucket] for bucket in range(count)]


@pytest.mark.parametrize("seed", range(40))
def test_downsampling_keeps_every_buckets_extremes_and_every_decade_brute_force(seed):
    """Against a brute-force reading of the contract: first and last rows; in every bucket a row holding
    the bucket's smallest and one holding its largest value of every column (NaN aside); with log, a row
    of every decade each column visited (zero/negative, infinite and NaN each counted as one); at most
    max_points rows unless the decades alone need more; rows are picked, so values are never altered."""
    rng = np.random.default_rng(seed)
    for _ in range(12):
        n, width, log = int(rng.integers(1, 700)), int(rng.integers(1, 4)), bool(rng.integers(2))
        max_points = int(rng.integers(4, 120))
        columns = [random_series(rng, n) for _ in range(width)]
        keep = charts.downsample_indices(columns, max_points, log=log)
        kept = set(keep.tolist())
        assert keep.tolist() == sorted(kept) and (n == 0 or {0, n - 1} <= kept)
        if n <= max_points:
            assert kept == set(range(n))
            continue
        first_of_decade = set()
        for column in columns if log else []:
            seen = {}
            for row, value in enumerate(column):
                seen.setdefault(float(charts.decades([value])[0]), row)
            first_of_decade |= set(seen.values())
        assert first_of_decade <= kept
        decade_rows = len(first_of_decade | {0, n - 1})
        assert len(kept) <= max(max_points, decade_rows + 2 * width)
        for rows in expected_buckets(n, max_points, decade_rows, width):
            for column in columns:
                values = {row: column[row] for row in rows if not np.isnan(column[row])}
                if values:
                    shown = [values[row] for row in values if row in kept]
                    assert min(values.values()) in shown and max(values.values()) in shown


def test_decades_are_floor_log10_with_one_class_for_each_thing_a_log_axis_cannot_show():
    values = [3e-5, 7e12, 5e-324, 1.5, 0.0, -2.0, -np.inf, np.inf, np.nan]
    assert charts.decades(values)[:4].tolist() == [math.floor(math.log10(v)) for v in values[:4]]
    classes = charts.decades(values)[4:].tolist()
    assert classes[0] == classes[1] == classes[2] and len({classes[0], classes[3], classes[4]}) == 3
    assert not set(classes) & set(range(-400, 400))


def test_a_log_chart_downsampled_draws_tiny_values_as_they_are():
    """Decimation picks rows: 1e-300 stays 1e-300 (never averaged into 0 nor lifted), and the decades a
    vanishing gradient passes through all appear however long the run."""
    steps = np.arange(20_000)
    values = 10.0 ** (-steps / 70.0)  # 1 down to ~1e-286: 286 decades in 20 000 rows
    values[7_777] = 1e-300
    frame = pd.DataFrame({"run_id": 1, "step": steps, "wall_time": steps * 0.1, "name": "grad/h0_norm",
                          "value": values})
    rows = charts.metric_chart_rows(frame, names=["grad/h0_norm"], log_y=True, max_points=500, hover_points=50)
    drawn = rows.lines.set_index("step")["y"]
    assert len(drawn) <= 500 and drawn.loc[7_777] == 1e-300 and (drawn > 0).all()
    np.testing.assert_array_equal(drawn.to_numpy(), values[drawn.index])
    assert set(np.floor(np.log10(drawn))) == set(np.floor(np.log10(values)))
    assert 7_777 in set(rows.hover["step"])  # the spike keeps its tooltip among the thinned hover points


def test_prepare_of_nothing_has_the_columns():
    empty = pd.DataFrame(columns=["run_id", "step", "wall_time", "name", "value"])
    prepared = charts.prepare(empty)
    assert prepared.empty and list(prepared.columns) == charts.PREPARED_COLUMNS


@pytest.mark.parametrize("kwargs, word", [({"smoothing": 1.0}, "smoothing"), ({"smoothing": -0.1}, "smoothing"),
                                          ({"x": "time"}, "x must be one of step, wall_time"),
                                          ({"max_points": 3}, "max_points"), ({"max_points": 10.5}, "max_points")])
def test_prepare_rejects_bad_options(kwargs, word):
    with pytest.raises(ValueError, match=word):
        charts.prepare(metric_rows({"a": lambda run, step: 1.0}), **kwargs)


def legend_param(spec):
    (param,) = [p for p in spec["params"] if p.get("bind") == "legend"]
    assert param["select"] == {"type": "point", "fields": ["run"]}
    return param


def test_metric_chart_one_metric_lines_coloured_by_run_with_legend_highlight():
    frame = metric_rows({"train/loss": lambda run, step: 2.0 - step / 10 + run, "val/loss": lambda run, step: 9.0},
                        runs=(1, 2))
    spec = charts.metric_chart(frame, names="train/loss", title="loss", height=200).to_dict()
    units = flat_layers(spec)
    assert [mark_type(layer) for layer in units] == ["line", "point"]  # curves, hover points
    line, hover = units
    assert line["encoding"]["x"] == {"field": "step", "title": "step", "type": "quantitative",
                                     "axis": {"tickMinStep": 1, "format": ",d"}}  # whole steps: no "0.000000"
    assert line["encoding"]["y"]["field"] == "y" and line["encoding"]["y"]["scale"] == {"zero": False}
    assert line["encoding"]["color"]["field"] == "run" and line["encoding"]["color"]["type"] == "nominal"
    assert "strokeDash" not in line["encoding"]
    param = legend_param(spec)
    assert line["encoding"]["opacity"]["condition"]["param"] == param["name"]
    assert {tip["field"] for tip in hover["encoding"]["tooltip"]} >= {"run", "name", "step", "value", "note"}
    hover_param = next(p for p in spec["params"] if p is not param)
    assert hover_param["select"]["nearest"] is True and hover_param["select"]["fields"] == ["step"]
    data = rows_of(spec, line)
    assert set(data["name"]) == {"train/loss"} and set(data["run"]) == {"1", "2"}
    np.testing.assert_allclose(data["y"], data["value"])
    assert spec["title"] == "loss" and spec["height"] == 200


def test_metric_chart_several_metrics_are_told_apart_by_dash():
    frame = metric_rows({"train/loss": lambda run, step: 1.0, "val/loss": lambda run, step: 2.0})
    spec = charts.metric_chart(frame, names=["train/loss", "val/loss"]).to_dict()
    encoding = flat_layers(spec)[0]["encoding"]
    assert encoding["strokeDash"]["field"] == "name" and encoding["strokeDash"]["type"] == "nominal"
    assert set(rows_of(spec, flat_layers(spec)[0])["name"]) == {"train/loss", "val/loss"}


def test_metric_chart_smoothing_draws_the_raw_curve_faintly_behind():
    frame = metric_rows({"train/loss": lambda run, step: (-1.0) ** step + 3}, steps=range(30))
    spec = charts.metric_chart(frame, names=["train/loss"], smoothing=0.7).to_dict()
    units = flat_layers(spec)
    assert [mark_type(layer) for layer in units] == ["line", "line", "point"]
    raw, smooth = units[0], units[1]
    assert raw["encoding"]["y"]["field"] == "y_raw" and smooth["encoding"]["y"]["field"] == "y"
    assert raw["encoding"]["opacity"]["condition"]["value"] < smooth["encoding"]["opacity"]["condition"]["value"]
    data = rows_of(spec, smooth)
    np.testing.assert_allclose(data["y"], reference_ema(data["value"].to_numpy(), 0.7), rtol=1e-12)
    np.testing.assert_allclose(data["y_raw"], data["value"])


def test_metric_chart_x_can_be_wall_time():
    frame = metric_rows({"train/loss": lambda run, step: 1.0})
    spec = charts.metric_chart(frame, names=["train/loss"], x="wall_time").to_dict()
    assert flat_layers(spec)[0]["encoding"]["x"]["field"] == "time_s"
    assert rows_of(spec, flat_layers(spec)[0])["time_s"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_metric_chart_log_scale_flags_zero_and_infinity_at_the_axis_edges():
    values = {0: 1.0, 1: 0.1, 2: 0.0, 3: np.inf, 4: 0.01}
    frame = metric_rows({"grad/h0_norm": lambda run, step: values[step]})
    spec = charts.metric_chart(frame, names=["grad/h0_norm"], log_y=True).to_dict()
    units = flat_layers(spec)
    assert [mark_type(layer) for layer in units] == ["line", "point", "point"]
    assert all(layer["encoding"]["y"]["scale"]["type"] == "log" for layer in units)
    flagged = units[2]
    assert flagged["mark"]["shape"] == "triangle-down" and "datum.note !== ''" in flagged["transform"][0]["filter"]
    data = rows_of(spec, units[0]).set_index("step")
    assert data.loc[2, "note"] == charts.NOTE_UNDERFLOW and data.loc[3, "note"] == charts.NOTE_OVERFLOW
    assert data.loc[2, "y"] == pytest.approx(0.001) and data.loc[3, "y"] == pytest.approx(10.0)  # a decade out
    assert (data.loc[[0, 1, 4], "note"] == "").all()
    np.testing.assert_allclose(data.loc[[0, 1, 4], "y"], [1.0, 0.1, 0.01])


def test_metric_chart_baseline_is_a_labelled_dashed_rule():
    frame = metric_rows({"val/loss": lambda run, step: 1.0 + step})
    spec = charts.metric_chart(frame, names=["val/loss"], baseline=2.3, baseline_label="chance (ln 10)").to_dict()
    units = flat_layers(spec)
    assert [mark_type(layer) for layer in units] == ["line", "point", "rule", "text"]
    rule, text = units[2], units[3]
    assert rule["mark"]["strokeDash"] and rule["encoding"]["y"]["field"] == "baseline"
    assert rows_of(spec, rule).to_dict("records") == [{"baseline": 2.3, "label": "chance (ln 10)"}]
    assert text["encoding"]["text"]["field"] == "label"
    unlabelled = charts.metric_chart(frame, names=["val/loss"], baseline=1.0).to_dict()
    assert rows_of(unlabelled, flat_layers(unlabelled)[2])["label"].tolist() == ["baseline"]
    on_log = charts.metric_chart(frame, names=["val/loss"], baseline=0.0, log_y=True).to_dict()
    assert "rule" not in [mark_type(layer) for layer in flat_layers(on_log)]


def test_metric_chart_of_no_rows_still_draws():
    frame = metric_rows({"a": lambda run, step: 1.0})
    spec = charts.metric_chart(frame, names=["missing"], log_y=True, smoothing=0.5, baseline=1.0).to_dict()
    assert rows_of(spec, flat_layers(spec)[0]).empty
    zeros = metric_rows({"grad/h0_norm": lambda run, step: 0.0})  # a vanished gradient from the start
    spec = charts.metric_chart(zeros, names=["grad/h0_norm"], log_y=True).to_dict()
    data = rows_of(spec, flat_layers(spec)[0])
    assert (data["note"] == charts.NOTE_UNDERFLOW).all() and np.all((data["y"] > 0) & (data["y"] < 1))


def sv_rows():
    """Run 1 logs steps 0..4, run 2 steps 0, 10, 20: the pivot must not mix them."""
    frame = metric_rows({"sv/min": lambda run, step: 0.5 + step / 100, "sv/max": lambda run, step: 2.0 * run,
                         "sv/margin": lambda run, step: 2.0 * run - 1, "train/loss": lambda run, step: 7.0})
    late = metric_rows({"sv/min": lambda run, step: 0.1, "sv/max": lambda run, step: 1.0,
                        "sv/margin": lambda run, step: 0.9}, steps=(0, 10, 20), runs=(2,))
    return pd.concat([frame[frame.run_id == 1], late], ignore_index=True)


def test_singular_value_band_chart_band_unit_rule_and_margin_axis():
    spec = charts.singular_value_band_chart(sv_rows(), title="σ").to_dict()
    assert spec["resolve"] == {"scale": {"y": "independent"}}
    assert len(spec["layer"]) == 2 and len(spec["layer"][0]["layer"]) == 2
    band, unit, margin = flat_layers(spec)
    assert [mark_type(layer) for layer in (band, unit, margin)] == ["area", "rule", "line"]
    assert band["encoding"]["y"]["field"] == "sv_min" and band["encoding"]["y2"]["field"] == "sv_max"
    assert band["encoding"]["color"]["field"] == "run"
    assert rows_of(spec, unit).to_dict("records") == [{"sigma": 1.0}]
    assert margin["encoding"]["y"]["field"] == "sv_margin" and margin["encoding"]["y"]["axis"]["orient"] == "right"
    assert band["encoding"]["opacity"]["condition"]["param"] == legend_param(spec)["name"]
    data = rows_of(spec, band)
    assert len(data) == 5 + 3
    run1 = data[data.run_id == 1].set_index("step")
    np.testing.assert_allclose(run1["sv_min"], 0.5 + np.arange(5) / 100)
    assert (run1["sv_max"] == 2.0).all() and (run1["sv_margin"] == 1.0).all()
    run2 = data[data.run_id == 2]
    assert run2["step"].tolist() == [0, 10, 20] and (run2["sv_min"] == 0.1).all()


def test_singular_value_band_chart_over_wall_time_and_empty():
    spec = charts.singular_value_band_chart(sv_rows(), x="wall_time").to_dict()
    assert all(layer["encoding"]["x"]["field"] == "time_s" for layer in flat_layers(spec) if "x" in layer["encoding"])
    empty = charts.singular_value_band_chart(sv_rows().iloc[:0]).to_dict()
    assert rows_of(empty, flat_layers(empty)[0]).empty
    with pytest.raises(ValueError, match="x must be one of"):
        charts.singular_value_band_chart(sv_rows(), x="epoch")


def h_t_rows(steps, length, value):
    return pd.DataFrame([(1, step, float(step), "grad/h_t_norm", t, value(step, t))
                         for step in steps for t in range(length)],
                        columns=["run_id", "step", "wall_time", "name", "index", "value"])


def test_gradient_flow_heatmap_colours_log10_and_flags_what_a_log_cannot_show():
    frame = h_t_rows([0, 10], 6, lambda step, t: {0: 0.0, 1: np.nan}.get(t, 10.0 ** (t - step / 10)))
    other = frame.assign(name="sv/spectrum")
    spec = charts.gradient_flow_heatmap(pd.concat([frame, other]), title="flow").to_dict()
    cells, flagged = flat_layers(spec)
    assert mark_type(cells) == "rect" and mark_type(flagged) == "rect"
    assert cells["encoding"]["x"]["field"] == "index" and cells["encoding"]["x"]["type"] == "ordinal"
    assert cells["encoding"]["y"]["field"] == "step" and cells["encoding"]["y"]["type"] == "ordinal"
    assert cells["encoding"]["color"]["field"] == "log10" and cells["encoding"]["color"]["type"] == "quantitative"
    assert {tip["field"] for tip in cells["encoding"]["tooltip"]} >= {"value", "step", "index", "note"}
    coloured, grey = rows_of(spec, cells), rows_of(spec, flagged)
    assert len(coloured) + len(grey) == 12 and set(pd.concat([coloured, grey])["name"]) == {"grad/h_t_norm"}
    # The colour scale sees the finite values only (no domain written into the spec: Vega takes the rows')
    assert (coloured["index"] >= 2).all() and (coloured["note"] == "").all()
    np.testing.assert_allclose(coloured["log10"], coloured["index"] - coloured["step"] / 10)
    assert "domain" not in cells["encoding"]["color"]["scale"]
    # zeros and NaN are the grey layer's, noted, and never on the colour scale
    assert sorted(grey["index"]) == [0, 0, 1, 1] and grey["log10"].isna().all()
    assert set(grey.loc[grey["index"] == 0, "note"]) == {charts.NOTE_UNDERFLOW}
    assert set(grey.loc[grey["index"] == 1, "note"]) == {charts.NOTE_NAN}
    assert flagged["encoding"]["color"]["field"] == "note"
    assert spec["resolve"] == {"scale": {"color": "independent"}}


def test_spectrum_heatmap_draws_the_spectrum_series_of_a_real_run_in_log10(tmp_path):
    import torch

    from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
    from stability.runs.store import RunStore
    from stability.training.build import build_model, build_task
    from stability.training.sinks import StoreSink
    from stability.training.trainer import Trainer

    config = RunConfig(cell=CellConfig("rnn", 8), task=TaskConfig("adding", {"seq_len": 10}),
                       train=TrainConfig(steps=4, batch_size=8, eval_examples=16, probe_examples=4, log_every=2,
                                         probe_every=2))
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(config.to_dict())
        task = build_task(config)
        trainer = Trainer(build_model(config, task), task, config, hooks=[StoreSink(store, run_id)])
        trainer.fit()
        series = pd.concat([store.series(run_id, "sv/spectrum"), store.series(run_id, "grad/h_t_norm")])
    spec = charts.spectrum_heatmap(series, title="spectrum").to_dict()
    cells, flagged = flat_layers(spec)
    coloured = rows_of(spec, cells)
    assert set(coloured["name"]) == {"sv/spectrum"} and rows_of(spec, flagged).empty
    assert cells["encoding"]["x"]["title"] == "singular value i (largest first)"
    # the last probe's row is the trained matrix's spectrum, read independently
    last = coloured[coloured["step"] == coloured["step"].max()].sort_values("index")
    sigma = torch.linalg.svdvals(trainer.model.cell.recurrent_matrix().detach().double()).numpy()
    np.testing.assert_allclose(last["log10"], np.log10(sigma), rtol=1e-5)


def test_gradient_flow_heatmap_spec_does_not_depend_on_its_rows():
    """A live page keeps the chart and swaps its rows only if the spec (all but the data) is the same."""
    def spec_without_data(steps, value):
        spec = charts.gradient_flow_heatmap(h_t_rows(steps, 50, value)).to_dict()
        del spec["datasets"]
        for layer in flat_layers(spec):
            del layer["data"]
        return spec

    assert spec_without_data(range(0, 100, 10), lambda step, t: 1.0) == \
        spec_without_data(range(0, 900, 10), lambda step, t: 10.0 ** (t - step))


def test_gradient_flow_heatmap_thins_long_histories_keeping_first_and_last():
    steps = list(range(0, 1000, 5))
    spec = charts.gradient_flow_heatmap(h_t_rows(steps, 300, lambda step, t: 1.0)).to_dict()
    data = rows_of(spec, flat_layers(spec)[0])  # every value finite: all in the coloured layer
    shown_steps, shown_t = sorted(set(data["step"])), sorted(set(data["index"]))
    assert len(shown_steps) == charts.HEATMAP_MAX_STEPS and len(shown_t) == charts.HEATMAP_MAX_T
    assert shown_steps[0] == 0 and shown_steps[-1] == 995 and shown_t[0] == 0 and shown_t[-1] == 299
    assert len(data) == len(shown_steps) * len(shown_t)


def test_log_axis_smoothing_averages_exponents_not_values():
    """A gradient norm falling from 1e-6 to 1e-22: a linear EMA stays near 1e-7 for as long as it
    remembers the early points; the log-axis chart must smooth the exponents (a geometric average)."""
    values = np.array([1e-6] * 5 + [1e-22] * 5 + [0.0])
    weight = 0.6
    exponents, expected = 0.0, []
    for count, value in enumerate(values[:-1], start=1):  # debiased EMA of log10, written out
        exponents = weight * exponents + (1 - weight) * np.log10(value)
        expected.append(10 ** (exponents / (1 - weight ** count)))
    smoothed = charts.log_ema(values, weight)
    np.testing.assert_allclose(smoothed[:-1], expected, rtol=1e-9)
    assert smoothed[-1] == 0.0  # a zero passes through, for the chart to flag
    assert charts.ema(values, weight)[9] > 1e-8  # what a linear average would have drawn
    frame = metric_rows({"grad/h0_norm": lambda run, step: values[step]}, steps=range(len(values)))
    spec = charts.metric_chart(frame, names=["grad/h0_norm"], log_y=True, smoothing=weight).to_dict()
    data = rows_of(spec, flat_layers(spec)[0]).set_index("step")
    assert data.loc[9, "smoothed"] == pytest.approx(expected[9], rel=1e-9)
    linear = charts.metric_chart(frame, names=["grad/h0_norm"], smoothing=weight).to_dict()
    assert rows_of(linear, flat_layers(linear)[0]).set_index("step").loc[9, "smoothed"] > 1e-8


def datasets_in_layer_order(spec):
    """The chart's datasets, each once, in the order its layers (depth first) first use them."""
    names = []

    def visit(node):
        name = node.get("data", {}).get("name")
        if name and name not in names:
            names.append(name)
        for layer in node.get("layer", []):
            visit(layer)

    visit(spec)
    return [pd.DataFrame(spec["datasets"][name]) for name in names]


@pytest.mark.parametrize("draw, rows", [
    (lambda f: charts.metric_chart(f, names=["grad/h0_norm", "val/loss"], log_y=True, smoothing=0.5, baseline=0.3,
                                   hover_points=5, max_points=20),
     lambda f: charts.metric_chart_rows(f, names=["grad/h0_norm", "val/loss"], log_y=True, smoothing=0.5,
                                        baseline=0.3, hover_points=5, max_points=20).datasets()),
    (lambda f: charts.metric_chart(f, names="val/loss", hover_points=5),
     lambda f: charts.metric_chart_rows(f, names="val/loss", hover_points=5).datasets()),
    (lambda f: charts.metric_chart(f, names="grad/h0_norm", baseline=2.0, baseline_label="chance"),
     lambda f: charts.metric_chart_rows(f, names="grad/h0_norm", baseline=2.0, baseline_label="chance").datasets()),
    (lambda f: charts.singular_value_band_chart(f, max_points=10),
     lambda f: charts.singular_value_band_rows(f, max_points=10)),
])
def test_a_charts_rows_function_gives_its_datasets_in_the_order_its_layers_use_them(draw, rows):
    """A live page puts the rows of these functions into a chart's spec by position (stability/live/specs.py)."""
    values = {step: 10.0 ** -step for step in range(40)} | {7: 0.0, 9: np.inf}
    frame = pd.concat([metric_rows({"grad/h0_norm": lambda run, step: values[step],
                                    "val/loss": lambda run, step: 1.0 + step % 3}, steps=range(40)), sv_rows()])
    drawn, expected = datasets_in_layer_order(draw(frame).to_dict()), rows(frame)
    assert len(drawn) == len(expected)
    for shown, frame_rows in zip(drawn, expected):
        as_json = frame_rows.reset_index(drop=True).replace([np.inf, -np.inf], np.nan)  # JSON has no infinity
        pd.testing.assert_frame_equal(shown, as_json, check_dtype=False)


def test_the_heatmaps_rows_function_gives_its_datasets_in_layer_order():
    flow = h_t_rows([0, 10, 20], 8, lambda step, t: 0.0 if t == 3 else 10.0 ** -t)
    drawn = datasets_in_layer_order(charts.gradient_flow_heatmap(flow).to_dict())
    expected = charts.gradient_flow_heatmap_rows(flow)
    assert [len(frame) for frame in drawn] == [21, 3]
    for shown, frame_rows in zip(drawn, expected):  # JSON turns a column of NaN into None
        pd.testing.assert_frame_equal(shown.fillna(np.nan), frame_rows.reset_index(drop=True), check_dtype=False)


def test_a_light_metric_chart_draws_lean_lines_few_hover_points_and_flags_apart():
    steps = range(3000)
    spike = {1234: 40.0}
    frame = metric_rows({"train/loss": lambda run, step: spike.get(step, 1.0 / (1 + step)),
                         "val/loss": lambda run, step: 2.0}, steps=steps)
    spec = charts.metric_chart(frame, names=["train/loss", "val/loss"], smoothing=0.6, max_points=400,
                               hover_points=30).to_dict()
    raw, line, points = flat_layers(spec)
    lines, hover = rows_of(spec, line), rows_of(spec, points)
    assert list(lines.columns) == ["step", "y", "y_raw", "run", "name"]  # what the lines draw, nothing else
    assert lines.groupby("name").size().max() <= 400
    assert {tip["field"] for tip in points["encoding"]["tooltip"]} <= set(hover.columns)
    assert hover.groupby("name").size().max() <= 30
    assert 1234 in set(hover.loc[hover["name"] == "train/loss", "step"])  # the spike keeps its tooltip
    log_spec = charts.metric_chart(frame, names="train/loss", log_y=True, hover_points=30).to_dict()
    assert "triangle-down" not in str(log_spec)  # nothing to flag: no layer for it
    zeros = metric_rows({"grad/h0_norm": lambda run, step: 0.0 if step == 3 else 1.0})
    flagged_spec = charts.metric_chart(zeros, names="grad/h0_norm", log_y=True, hover_points=30).to_dict()
    marks = flat_layers(flagged_spec)[-1]
    assert marks["mark"]["shape"] == "triangle-down" and "transform" not in marks
    assert rows_of(flagged_spec, marks)["step"].tolist() == [3]


# --- sweeps: objective chart, heatmap, parallel coordinates, curves over seeds ------------------------------

def sweep_results(seed=0):
    """A finished grid cell x lr x 3 seeds: rnn at lr 0.1 diverges twice, one rnn seed at 1e-4 is pruned."""
    rng = np.random.default_rng(seed)
    rows, run_id = [], 0
    for cell in ("rnn", "spectral"):
        for lr in (1e-4, 1e-3, 1e-2, 1e-1):
            for s in range(3):
                run_id += 1
                status, objective = "completed", float(rng.lognormal(np.log(0.05 + lr), 0.3))
                if cell == "rnn" and lr == 1e-1 and s < 2:
                    status, objective = "diverged", np.nan
                if cell == "rnn" and lr == 1e-4 and s == 0:
                    status = "pruned"
                rows.append({"run_id": run_id, "trial": run_id - 1, "seed": s, "status": status,
                             "objective": objective, "step": 100, "setting": f"cell={cell} lr={lr:g}",
                             "cell": cell, "train.lr": lr})
    return pd.DataFrame(rows)


def layer_by_mark(spec, mark):
    return [layer for layer in flat_layers(spec) if mark_type(layer) == mark]


def test_sweep_objective_chart_log_x_band_mean_and_every_seed():
    results = sweep_results()
    spec = charts.sweep_objective_chart(results, "train.lr", "cell", log_x=True, log_y=True).to_dict()
    area, = layer_by_mark(spec, "area")
    line, = layer_by_mark(spec, "line")
    points, = layer_by_mark(spec, "point")
    assert area["encoding"]["x"]["scale"]["type"] == "log" and line["encoding"]["y"]["scale"]["type"] == "log"
    assert area["encoding"]["y"]["field"] == "min" and area["encoding"]["y2"]["field"] == "max"
    means = rows_of(spec, line)
    counted = results[(results["status"] == "completed") & np.isfinite(results["objective"])]
    expected = counted.groupby(["cell", "train.lr"])["objective"].agg(["mean", "min", "max"])
    got = means.set_index(["group", "x"])
    for (cell, lr), row in expected.iterrows():
        assert got.loc[(cell, lr), "mean"] == pytest.approx(row["mean"])
        assert got.loc[(cell, lr), "min"] == row["min"] and got.loc[(cell, lr), "max"] == row["max"]
    assert len(rows_of(spec, points)) == len(results)  # every seed a point, diverged ones included


def test_sweep_objective_chart_marks_diverged_at_the_top_and_pruned_apart():
    results = sweep_results()
    spec = charts.sweep_objective_chart(results, "train.lr", "cell", log_x=True, log_y=True).to_dict()
    points, = layer_by_mark(spec, "point")
    rows = rows_of(spec, points)
    diverged = rows[rows["status"] == "diverged"]
    assert len(diverged) == 2 and (diverged["note"] == charts.NOTE_DIVERGED).all()
    assert (diverged["y"] > results["objective"].max()).all()  # above every finite objective
    shape = points["encoding"]["shape"]
    assert dict(zip(shape["scale"]["domain"], shape["scale"]["range"])) == {
        "completed": "circle", "pruned": "cross", "diverged": "triangle-up"}
    assert points["encoding"]["color"]["condition"]["value"] == charts.DIVERGED_COLOUR
    linear = charts.sweep_objective_chart(results, "train.lr", "cell").to_dict()
    top = rows_of(linear, layer_by_mark(linear, "point")[0])
    assert layer_by_mark(linear, "area")[0]["encoding"]["x"]["scale"].get("type") != "log"
    assert (top.loc[top["status"] == "diverged", "y"] > results["objective"].max()).all()


def test_sweep_objective_chart_over_a_categorical_field_draws_min_max_rules():
    results = sweep_results()
    spec = charts.sweep_objective_chart(results, "cell", "train.lr", log_x=True).to_dict()
    assert not layer_by_mark(spec, "area")
    rule, = layer_by_mark(spec, "rule")
    assert rule["encoding"]["x"]["type"] == "ordinal" and rule["encoding"]["x"]["sort"] == ["rnn", "spectral"]
    assert rule["encoding"]["y"]["field"] == "min" and rule["encoding"]["y2"]["field"] == "max"
    with pytest.raises(ValueError, match="task.seq_len"):
        charts.sweep_objective_chart(results, "task.seq_len")


def test_sweep_heatmap_one_cell_per_setting_coloured_by_the_mean():
    from stability.analysis.groups import setting_table

    results = sweep_results()
    results.loc[(results["cell"] == "rnn") & (results["train.lr"] == 1e-1), ["status", "objective"]] = [
        "diverged", np.nan]
    table = setting_table(results, ["train.lr", "cell"])
    spec = charts.sweep_heatmap(table, "train.lr", "cell", log_color=True).to_dict()
    cells, grey = layer_by_mark(spec, "rect")
    text, = layer_by_mark(spec, "text")
    assert cells["encoding"]["color"]["field"] == "mean" and cells["encoding"]["color"]["scale"]["type"] == "log"
    assert cells["encoding"]["x"]["sort"] == ["0.0001", "0.001", "0.01", "0.1"]
    coloured, empty, labels = rows_of(spec, cells), rows_of(spec, grey), rows_of(spec, text)
    assert len(coloured) + len(empty) == len(labels) == 8
    assert empty[["x", "y"]].values.tolist() == [["0.1", "rnn"]]
    assert labels.set_index(["x", "y"]).loc[("0.1", "rnn"), "label"] == "diverged"
    expected = results[results["status"] == "completed"].groupby(["cell", "train.lr"])["objective"].mean()
    for row in coloured.itertuples():
        assert row.mean == pytest.approx(expected[(row.y, float(row.x))])


def test_parallel_coordinates_positions_categorical_log_and_objective_axes():
    results = sweep_results()
    spec = charts.parallel_coordinates(results, ["cell", "train.lr"], log_fields={"train.lr"},
                                       log_objective=True).to_dict()
    lines = layer_by_mark(spec, "line")
    good = next(rows_of(spec, layer) for layer in lines if "strokeDash" not in layer["mark"])
    bad = next(rows_of(spec, layer) for layer in lines if "strokeDash" in layer["mark"])
    assert lines[0]["encoding"]["x"]["sort"] == ["cell", "lr", "val/loss"]
    lr = good[good["axis"] == "lr"].drop_duplicates("value").set_index("value")["position"]
    assert lr.to_dict() == pytest.approx({"0.0001": 0.0, "0.001": 1 / 3, "0.01": 2 / 3, "0.1": 1.0})
    cell = good[good["axis"] == "cell"].drop_duplicates("value").set_index("value")["position"]
    assert cell.to_dict() == {"rnn": 0.0, "spectral": 1.0}
    objective = good[good["axis"] == "val/loss"]
    finite = results["objective"].dropna()
    low = objective.loc[objective["objective"].idxmin(), "position"]
    high = objective.loc[objective["objective"].idxmax(), "position"]
    assert (low, high) == (0.0, 1.0) and objective["objective"].min() == finite.min()
    assert sorted(bad["run_id"].unique()) == sorted(results.loc[results["status"] == "diverged", "run_id"])
    assert (bad.loc[bad["axis"] == "val/loss", "position"] > 1).all()
    colour = next(layer for layer in lines if "strokeDash" not in layer["mark"])["encoding"]["color"]
    assert colour["field"] == "objective" and colour["scale"]["type"] == "log"


def test_grouped_curves_chart_mean_line_min_max_band_and_zeros_marked_on_log():
    from stability.analysis.groups import group_curves

    metrics = pd.DataFrame({"run_id": [1, 2, 1, 2, 3, 3], "step": [0, 0, 10, 10, 0, 10], "wall_time": 0.0,
                            "name": "grad/h0_norm", "value": [1e-3, 1e-5, 1e-9, 0.0, 1e-2, 1e-2]})
    curves = group_curves(metrics, {1: "rnn", 2: "rnn", 3: "spectral"}, "grad/h0_norm")
    spec = charts.grouped_curves_chart(curves, "grad/h0_norm", log_y=True).to_dict()
    area, = layer_by_mark(spec, "area")
    line, = layer_by_mark(spec, "line")
    assert area["encoding"]["y"]["field"] == "y_min" and area["encoding"]["y2"]["field"] == "y_max"
    assert line["encoding"]["y"]["field"] == "y_mean" and line["encoding"]["y"]["scale"]["type"] == "log"
    rows = rows_of(spec, line).set_index(["group", "step"])
    assert rows.loc[("rnn", 0), "mean"] == pytest.approx(1e-4)  # geometric
    assert rows.loc[("rnn", 10), "min"] == 0.0 and rows.loc[("rnn", 10), "y_min"] == pytest.approx(1e-10)
    marked = [layer for layer in layer_by_mark(spec, "point") if layer["mark"].get("shape") == "triangle-down"]
    assert len(marked) == 1 and rows_of(spec, marked[0])[["group", "step"]].values.tolist() == [["rnn", 10]]
    linear = charts.grouped_curves_chart(curves, "grad/h0_norm").to_dict()
    assert not [layer for layer in layer_by_mark(linear, "point") if layer["mark"].get("shape") == "triangle-down"]


def test_log_axis_for_learning_rates_wide_spans_and_only_positive_numbers():
    assert charts.log_axis_for("train.lr", [1e-3, 2e-3])
    assert charts.log_axis_for("task.seq_len", [10, 1000]) and not charts.log_axis_for("task.seq_len", [50, 100])
    assert charts.log_axis_for("cell.h0_noise_std", [0.1, 0.5], log=True)
    assert not charts.log_axis_for("cell.h0_noise_std", [0.0, 0.1], log=True)  # 0 has no place on a log axis
    assert not charts.log_axis_for("cell", ["rnn", "lstm"]) and not charts.log_axis_for("train.clip_grad_norm",
                                                                                      [None, 1.0, 1000.0])


def test_sweep_heatmap_axes_follow_a_given_order():
    from stability.analysis.groups import setting_table

    table = setting_table(sweep_results(), ["train.lr", "cell"])
    spec = charts.sweep_heatmap(table, "train.lr", "cell", y_order=["spectral", "rnn"], x_order=[0.1, 0.01]).to_dict()
    cells = layer_by_mark(spec, "rect")[0]["encoding"]
    assert cells["y"]["sort"] == ["spectral", "rnn"] and cells["x"]["sort"] == ["0.01", "0.1"]  # numbers ascend


# --- readable at the defaults: early outliers, log ticks, legends (issue 21) -------------------------------

def spec_without_rows(chart):
    """A chart's spec less its rows, its generated names numbered in order (as a live page sends it)."""
    import json
    import re

    spec = chart.to_dict()
    spec.pop("datasets", None)
    numbers = {}
    return re.sub(r'"(param|view|data)[-_][0-9a-f]+(?:_[0-9]+)*"',
                  lambda m: numbers.setdefault(m.group(0), f'"{m.group(1)}_{len(numbers)}"'), json.dumps(spec))


def spiky(spike_steps, runs=(1, 2)):
    """200 steps of a loss settling from 1.2 towards 0.2 (run 2 a little above run 1), 100x at ``spike_steps``."""
    def value(run, step):
        settled = 0.2 + 0.05 * run + math.exp(-step / 40)
        return 100.0 * settled if step in spike_steps else settled
    return metric_rows({"train/loss": value}, steps=range(200), runs=runs)


def expected_top(frame, early_steps):
    """Note [Ignoring outliers] computed plainly: the 95th percentile of every value, or the largest value after
    the early steps if higher; then the largest value within half that range's span above it; plus 5 % of the
    range's span."""
    values = frame["value"].to_numpy()
    settled = frame.loc[frame["step"] > early_steps, "value"].to_numpy()
    ordered = np.sort(values)  # the 5th and 95th percentiles taken at a point, not between two
    low = min(ordered[math.ceil(0.05 * (len(values) - 1))], settled.min())
    high = max(ordered[math.floor(0.95 * (len(values) - 1))], settled.max())
    low, high = min(values[values >= low - 0.5 * (high - low)]), max(values[values <= high + 0.5 * (high - low)])
    return high + 0.05 * (high - low)


def test_an_early_spike_does_not_set_a_linear_range_it_is_drawn_at_the_edge_and_marked():
    frame = spiky({0, 1, 2})
    spec = charts.metric_chart(frame, names="train/loss").to_dict()
    line, hover = flat_layers(spec)
    data = rows_of(spec, line)
    top = expected_top(frame, early_steps=0.1 * 199)
    assert data["y"].max() == pytest.approx(top) and top < 2.0  # 100x spike: the range stays on the curves
    clamped = data[data["edge"] != ""]
    assert set(clamped.index) == set(data.index[data["value"] > top]) and (clamped["edge"] == "above").all()
    assert {0, 1, 2} <= set(clamped["step"]) and clamped["step"].max() < 0.1 * 199  # only early points
    assert (clamped["note"] == charts.NOTE_ABOVE).all() and (clamped["y"] == top).all()
    assert (clamped.loc[clamped["step"] <= 2, "value"] > 100).all()  # the true value kept for the tooltip
    rest = data[data["edge"] == ""]
    np.testing.assert_allclose(rest["y"], rest["value"])  # everything else drawn as it is
    shape = hover["encoding"]["shape"]
    assert dict(zip(shape["scale"]["domain"], shape["scale"]["range"]))["above"] == "triangle-up"
    assert {"test": "datum.edge !== ''", "value": 1.0} in hover["encoding"]["opacity"]["condition"]  # always shown


def test_the_flag_shows_every_point_and_a_late_spike_is_never_left_out():
    frame = spiky({0, 1, 2})
    shown = charts.metric_chart(frame, names="train/loss", ignore_outliers=False).to_dict()
    data = rows_of(shown, flat_layers(shown)[0])
    assert data["y"].max() == pytest.approx(frame["value"].max()) and "shape" not in flat_layers(shown)[1]["encoding"]
    late = spiky({150})
    spec = charts.metric_chart(late, names="train/loss").to_dict()
    data = rows_of(spec, flat_layers(spec)[0])
    assert data["y"].max() == pytest.approx(late["value"].max()) and (data["edge"] == "").all()
    nothing = charts.metric_chart(frame, names="missing", smoothing=0.5).to_dict()  # no rows yet: still a chart
    assert rows_of(nothing, flat_layers(nothing)[0]).empty
    on_log = charts.metric_chart(frame, names="train/loss", log_y=True).to_dict()  # decades hold any spike
    assert rows_of(on_log, flat_layers(on_log)[0])["y"].max() == pytest.approx(frame["value"].max())


def test_an_early_dip_is_drawn_at_the_bottom_edge_and_a_smoothed_chart_clamps_both_lines():
    dip = metric_rows({"val/accuracy": lambda run, step: 0.001 if step == 0 else 0.9 + 0.0005 * step},
                      steps=range(100))
    spec = charts.metric_chart(dip, names="val/accuracy", smoothing=0.5).to_dict()
    raw, line, _ = flat_layers(spec)
    data = rows_of(spec, line)
    first = data[data["step"] == 0].iloc[0]
    assert first["edge"] == "below" and first["note"] == charts.NOTE_BELOW
    assert first["y"] == data["y"].min() == data["y_raw"].min() > 0.85  # at the edge, both the line and the raw one


def test_a_live_charts_spec_does_not_change_when_an_outlier_appears_or_the_range_moves():
    calm, spiked = spiky(set()), spiky({0, 1, 2})
    for light in (None, 50):
        charts_of = [charts.metric_chart(frame, names="train/loss", hover_points=light, smoothing=0.3)
                     for frame in (calm, spiked, spiked[spiked["step"] < 120])]
        assert len({spec_without_rows(chart) for chart in charts_of}) == 1
        hovered = charts.metric_chart_rows(spiked, names="train/loss", hover_points=light, smoothing=0.3).hover
        every = charts.metric_chart_rows(spiked, names="train/loss", smoothing=0.3).lines
        clamped = {(run, step) for run, step, edge in every[["run", "step", "edge"]].itertuples(index=False) if edge}
        assert {0, 1, 2} <= {step for _, step in clamped}
        assert {(run, step) for run, step, edge in hovered[["run", "step", "edge"]].itertuples(index=False)
                if edge} == clamped  # every clamped point keeps its mark, however few hover points there are


def test_robust_range_is_the_central_90_percent_widened_to_every_settled_point():
    rng = np.random.default_rng(0)
    values = rng.normal(1.0, 0.1, size=400)
    early = np.zeros(400, dtype=bool)
    values[:4], early[:40] = 50.0, True
    low, high = charts.robust_range(values, early)
    ordered = np.sort(values)
    q5, q95 = ordered[math.ceil(0.05 * 399)], ordered[math.floor(0.95 * 399)]
    settled = values[40:]
    expected_low, expected_high = min(q5, settled.min()), max(q95, settled.max())
    margin = 0.05 * (expected_high - expected_low)
    assert (low, high) == pytest.approx((expected_low - margin, expected_high + margin))
    assert charts.robust_range(values, np.zeros(400, dtype=bool)) is None  # nothing early: nothing left out
    assert charts.robust_range([1.0, 100.0, 1.0], [True, False, False]) is None  # three points: all shown
    few = charts.robust_range([20.0, 0.19, 0.18, 0.17], [True, False, False, False])  # a live run's first four
    assert few == pytest.approx((0.17 - 0.001, 0.19 + 0.001))
    assert 20.0 < charts.robust_range(values, early, references=[20.0])[1] < 50.0  # a baseline stays in range
    assert charts.robust_range(values, early, references=[60.0]) is None  # and one above the spike takes it in
    near = values.copy()
    near[:4] = values[40:].max() + 0.2  # early, beyond the settled points, but within half the range's span
    assert charts.robust_range(near, early) is None  # is no outlier: a 4.0 beside a 3.9 is drawn as it is
    rising = charts.robust_range([10.0, 1.2, 1.1, 1.0, 0.5, 0.4, 0.3, 0.2, 0.2, 0.2], [True] * 3 + [False] * 7)
    assert rising[1] == pytest.approx(1.2 + 0.05 * 1.0)  # a curve's fall kept whole, the first 10.0 left out


def log_axis_of(spec):
    return flat_layers(spec)[0]["encoding"]["y"]["axis"]


def labelled_exponents(axis, low, high):
    """The exponents of the axis's tick values within [low, high], each checked to be a power of ten."""
    ticks = [value for value in axis["values"] if low <= value <= high]
    exponents = [round(math.log10(value)) for value in ticks]
    assert ticks == [float(f"1e{exponent}") for exponent in exponents]  # exactly powers of ten
    return exponents


@pytest.mark.parametrize("span, every", [(35, 3), (10, 1), (12, 1), (20, 2), (60, 5)])
def test_a_log_axis_labels_every_decade_up_to_a_dozen_then_every_few(span, every):
    values = {step: 10.0 ** (-span * step / 49) for step in range(50)}
    frame = metric_rows({"grad/h0_norm": lambda run, step: values[step]}, steps=range(50))
    axis = log_axis_of(charts.metric_chart(frame, names="grad/h0_norm", log_y=True).to_dict())
    exponents = labelled_exponents(axis, 10.0 ** -span, 1.0)
    assert np.diff(exponents).tolist() == [every] * (len(exponents) - 1)
    assert exponents[0] - every < -span + 1 and exponents[-1] > -every  # the labels cover the data
    assert len(exponents) <= 13 and axis["tickCount"] == len(axis["values"]) and axis["labelOverlap"] is False
    assert "'.0e'" in axis["labelExpr"]  # written 1e-16


def test_a_narrow_log_axis_labels_ones_twos_and_fives_and_the_axis_follows_only_the_step():
    frame = metric_rows({"grad/h0_norm": lambda run, step: 1.7e-4 + 1e-4 * step}, steps=range(6))
    axis = log_axis_of(charts.metric_chart(frame, names="grad/h0_norm", log_y=True).to_dict())
    assert [value for value in axis["values"] if 1e-4 <= value <= 1e-3] == [1e-4, 2e-4, 5e-4, 1e-3]
    moved = metric_rows({"grad/h0_norm": lambda run, step: 10.0 ** (-20 - step)}, steps=range(6))
    far = metric_rows({"grad/h0_norm": lambda run, step: 10.0 ** (-200 - 2 * step)}, steps=range(6))
    assert log_axis_of(charts.metric_chart(moved, names="grad/h0_norm", log_y=True).to_dict()) == log_axis_of(
        charts.metric_chart(far, names="grad/h0_norm", log_y=True).to_dict())  # same step, same spec



def test_a_live_log_charts_step_is_told_by_its_rows_as_the_chart_draws_them():
    """metric_log_step (what a live page keeps among a chart's controls) is the step the chart's axis uses: a
    zero counts a decade below the rest, a baseline counts, and a curve falling through decades moves it."""
    def falling(last_exponent, zero=False):
        return metric_rows({"grad/h0_norm": lambda run, step: 0.0 if zero and step == 3 else
                            10.0 ** (-last_exponent * step / 5)}, steps=range(6))
    cases = [(falling(2), []), (falling(2, zero=True), []), (falling(2), [1e3]), (falling(40), []),
             (falling(40, zero=True), [0.5])]
    for frame, references in cases:
        step = charts.metric_log_step(frame, ["grad/h0_norm"], references)
        baseline = {"baseline": references[0]} if references else {}
        axis = log_axis_of(charts.metric_chart(frame, names="grad/h0_norm", log_y=True, **baseline).to_dict())
        assert axis["values"] == charts.log_axis_at(step).to_dict()["values"]
    assert [charts.metric_log_step(falling(span), "grad/h0_norm") for span in (1, 4, 12, 13, 36)] == [0, 1, 1, 2, 3]
    assert charts.metric_log_step(falling(2, zero=True), "grad/h0_norm") == 1  # 2 decades, and the zero's below
    assert charts.metric_log_step(falling(1), "grad/h0_norm", [1e3]) == 1  # a baseline three decades above
    assert charts.metric_log_step(falling(2).iloc[:0], "grad/h0_norm") == 0  # no rows yet

def every_legend(spec):
    """Every distinct legend of a spec (each layer repeats its encodings), in the order met."""
    found = []

    def visit(node):
        if isinstance(node, dict):
            if isinstance(node.get("legend"), dict) and node["legend"] not in found:
                found.append(node["legend"])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(spec)
    return found


def test_legends_cut_no_name_drop_no_entry_and_wrap_into_columns_that_fit():
    from stability.charts import legends

    names = ["rnn", "lstm", "spectral", "sgornn"]
    frame = pd.concat([metric_rows({"val/loss": lambda run, step: 1.0, "train/loss": lambda run, step: 2.0})
                       .assign(run=name, run_id=index) for index, name in enumerate(names)])
    race = charts.metric_chart(frame, names=["val/loss", "train/loss"], height=300).to_dict()
    runs, metrics = every_legend(race)
    assert runs == {"orient": "top", "columns": 4, "labelLimit": 0, "symbolLimit": 0, "title": None}  # one row
    assert metrics["orient"] == "bottom" and metrics["labelLimit"] == 0
    assert race["height"] == 300 + legends.ROW_PX + legends.LEGEND_GAP_PX  # the metric legend's row below
    long = [f"cell=spectral lr={lr:g} seed={seed}" for lr in (1e-4, 1e-3, 1e-2) for seed in range(3)]
    wide = pd.concat([metric_rows({"val/loss": lambda run, step: 1.0}).assign(run=name, run_id=index)
                      for index, name in enumerate(long)])
    spec = charts.metric_chart(wide, names="val/loss", height=300).to_dict()
    (legend,) = every_legend(spec)
    columns = legend["columns"]
    rows = math.ceil(len(long) / columns)
    assert spec["height"] == 300 + legends.ROW_PX * (rows - 1)  # the plot keeps its height
    for width, font in ((legends.NARROWEST_CHART_PX, legends.LABEL_PX),
                        (legends.CLASSROOM_CHART_PX, legends.CLASSROOM_LABEL_PX)):
        entry = [legends.entry_width(name, font) for name in long]
        fits = [k for k in range(1, len(long) + 1)
                if sum(max(entry[j::k]) for j in range(k)) <= width - legends.AXIS_ALLOWANCE_PX]
        assert columns <= max(fits)  # fits across the narrowest chart, in the normal and the classroom view
    assert columns == min(legends.columns_for(long), legends.columns_for(long, legends.CLASSROOM_CHART_PX,
                                                                         legends.CLASSROOM_LABEL_PX))
    band = charts.singular_value_band_chart(sv_rows().assign(run="a run with a long name")).to_dict()
    assert all(found["labelLimit"] == 0 and found["symbolLimit"] == 0 for found in every_legend(band))
    from stability.analysis.groups import group_curves

    groups = {index: f"cell=spectral lr={lr:g}" for index, lr in enumerate((1e-4, 1e-3, 1e-2, 1e-1))}
    grouped = charts.grouped_curves_chart(group_curves(pd.DataFrame(
        {"run_id": list(groups) * 2, "step": [0] * 4 + [10] * 4, "wall_time": 0.0, "name": "val/loss",
         "value": 1.0}), groups, "val/loss"), "val/loss", height=300).to_dict()
    (legend,) = every_legend(grouped)  # a sweep's groups above the plot, wrapped, none cut: the plot keeps its width
    assert legend["orient"] == "top" and legend["labelLimit"] == 0 and legend["columns"] == legends.legend_columns(
        list(groups.values()))
    assert grouped["height"] == 300 + legends.extra_height(list(groups.values()))


# The σ band's rows and prepare's series are built in numpy (a live page rebuilds them at every look); these
# check them against the plain pandas computation they replace: a pivot of each step's last row of each
# name, and a groupby of each (run, name) series in x order.
def _random_sv_rows(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for run_id in rng.choice([3, 7, 11], size=rng.integers(1, 4), replace=False):
        for step in rng.permutation(rng.integers(1, 60)) * 10:
            for name in ("sv/min", "sv/max", "sv/margin", "train/loss"):
                for _ in range(int(rng.integers(0, 3))):  # absent, once, or twice (the last one counts)
                    value = np.nan if rng.random() < 0.05 else float(rng.random())
                    rows.append((int(run_id), int(step), 100.0 + step / 10 + rng.random(), name, value))
    frame = pd.DataFrame(rows, columns=["run_id", "step", "wall_time", "name", "value"])
    return frame.assign(run=frame["run_id"].map({3: "b", 7: "a", 11: "b"}))


def _pivoted_sv_rows(frame: pd.DataFrame, x: str) -> pd.DataFrame:
    data = frame[frame["name"].isin(["sv/min", "sv/max", "sv/margin"])].reset_index(drop=True)
    data["time_s"] = data["wall_time"] - data.groupby("run_id")["wall_time"].transform("min")
    keys = ["run_id", "run", "step"]
    wide = data.drop_duplicates([*keys, "name"], keep="last").pivot(index=keys, columns="name", values="value")
    wide = wide.reindex(columns=["sv/min", "sv/max", "sv/margin"]).set_axis(["sv_min", "sv_max", "sv_margin"], axis=1)
    wide = wide.join(data.groupby(keys)[["wall_time", "time_s"]].min()).reset_index()
    wide = wide.sort_values(["run_id", "run", "time_s" if x == "wall_time" else "step"], kind="stable")
    return wide[["run_id", "run", "step", "wall_time", "time_s", "sv_min", "sv_max", "sv_margin"]].reset_index(drop=True)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("x", ["step", "wall_time"])
def test_singular_value_band_rows_are_each_steps_last_values_in_order(seed, x):
    frame = _random_sv_rows(seed)
    rows = charts.singular_value_band_rows(frame, x=x, max_points=10_000)[0]
    expected = _pivoted_sv_rows(frame, x)
    pd.testing.assert_frame_equal(rows, expected, check_dtype=False)
    decimated = charts.singular_value_band_rows(frame, x=x, max_points=8)[0]  # a subset, per run, in order
    assert decimated.groupby(["run_id", "run"]).size().max() <= 8
    merged = decimated.merge(expected, on=["run_id", "run", "step"], suffixes=("", "_all"))
    assert len(merged) == len(decimated)
    assert np.allclose(merged["sv_max"], merged["sv_max_all"], equal_nan=True)


@pytest.mark.parametrize("seed", range(6))
def test_prepare_series_match_a_groupby_in_x_order(seed):
    rng = np.random.default_rng(seed)
    frame = _random_sv_rows(seed)
    frame["step"] = rng.integers(0, 30, len(frame))  # ties: rows tied on x keep their order
    prepared = charts.prepare(frame, smoothing=0.0, max_points=10_000)
    expected = [group.sort_values("step", kind="stable") for _, group in frame.reset_index(drop=True).groupby(
        ["run_id", "run", "name"], sort=True)]
    assert list(prepared["value"]) == pytest.approx(list(pd.concat(expected)["value"]), nan_ok=True)
    assert list(prepared["step"]) == list(pd.concat(expected)["step"])


def test_a_curve_of_one_point_draws_that_point_and_the_spec_stays_when_its_line_can_be_drawn():
    """Note [Lone points]: a run's first row (a live chart's first point) is visible before its second, and
    the second changes the chart's rows only (a live page keeps its Vega view: Note [Stable specs] in
    stability/live/specs.py)."""
    frame = metric_rows({"train/loss": lambda run, step: 2.0 + run}, runs=(1, 2))
    first = frame[((frame["run_id"] == 1) & (frame["step"] == frame["step"].min())) | (frame["run_id"] == 2)]
    for options in ({"ignore_outliers": False}, {"hover_points": 5, "ignore_outliers": False}, {}):
        spec = charts.metric_chart(first, names="train/loss", **options).to_dict()
        hover = flat_layers(spec)[1]
        assert {"test": "datum.lone", "value": 1.0} in hover["encoding"]["opacity"]["condition"]
        shown = rows_of(spec, hover)
        assert shown.loc[shown["lone"], "run"].tolist() == ["1"] and shown.loc[shown["lone"], "step"].tolist() == [0]
        whole = charts.metric_chart(frame, names="train/loss", **options).to_dict()
        assert not rows_of(whole, flat_layers(whole)[1])["lone"].any()
        assert _drawn(whole) == _drawn(spec)  # the same layers, marks and encodings: only the rows differ


def _drawn(spec) -> str:
    """The layers' marks and encodings, Altair's generated parameter names numbered away."""
    text = json.dumps([(layer["mark"], layer["encoding"]) for layer in flat_layers(spec)], sort_keys=True)
    return re.sub(r"param_[0-9]+", "param", text)
