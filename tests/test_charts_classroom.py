"""The classroom view's words and projector charts (stability/charts/classroom.py), without Streamlit."""
import altair as alt
import pandas as pd

from stability.charts.classroom import CHART_FONTS, CHART_HEIGHT, EXPLANATIONS, cell_equations, explanation, projected


def test_explanations_are_found_by_name_and_by_pattern():
    assert explanation("grad/h0_norm") == EXPLANATIONS["grad/h0_norm"]
    assert explanation("gate/beta_raw") == EXPLANATIONS["gate/*"]
    assert explanation("val/accuracy") == EXPLANATIONS["*/accuracy"]
    assert explanation("gap/accuracy") == EXPLANATIONS["gap/*"]  # the gap's words, not accuracy's
    assert "[1 − r, 1 + r]" in explanation("sv/min") and "eq. 4" in explanation("sv/min")  # spectral paper §4
    assert explanation("speed/steps_per_s") is None and explanation("nonsense") is None


def test_a_cells_equations_come_from_the_registry_and_an_unknown_cell_has_none():
    summary, paper, equations = cell_equations("rnn")
    assert equations and all(isinstance(equation, str) for equation in equations)
    assert cell_equations(None) == ("", "", ()) == cell_equations("no-such-cell")


def test_a_projected_spec_is_a_shallow_copy_taller_with_larger_fonts_and_its_datasets_shared():
    rows = {"rows_0": b"arrow"}
    spec = {"mark": "line", "height": 200, "config": {"axis": {"grid": False}}, "datasets": rows}
    shown = projected(spec)
    assert shown["height"] == CHART_HEIGHT and shown["datasets"] is rows and spec["height"] == 200
    assert shown["config"]["axis"] == {"grid": False, **CHART_FONTS["axis"]}
    assert projected({"vconcat": [], "config": {}}).get("height") is None  # a compound chart keeps its own
    assert projected(None) is None
    chart = projected(alt.Chart(pd.DataFrame({"x": [1]})).mark_point().encode(x="x:Q")).to_dict(validate=False)
    assert chart["height"] == CHART_HEIGHT and chart["config"]["axis"]["labelFontSize"] == CHART_FONTS["axis"]["labelFontSize"]
