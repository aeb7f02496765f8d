"""Chart specs: marks, encodings and scales, without a browser."""
import numpy as np
import pytest
import pandas as pd

from stability import charts


def layers(spec):
    return spec.get("layer", [spec])


def test_clip_for_log_flags_zero_and_infinity():
    values, flags = charts.clip_for_log(pd.Series([0.0, 1e-300, 2.0, np.inf, -1.0]))
    assert values.tolist()[2] == 2.0 and values.tolist()[1] == 1e-300
    assert values.iloc[0] == charts.TINY and values.iloc[4] == charts.TINY
    assert values.iloc[3] == charts.HUGE
    assert flags.tolist() == ["underflow (0 in float64)", "", "", "overflow", "underflow (0 in float64)"]


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
    assert {row["flag"] for row in rows} == {"", "underflow (0 in float64)", "overflow"}


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
