"""The classroom view (pages/ui/classroom.py) through Streamlit's AppTest, on real tiny runs trained into a
temporary SQLite store: ?classroom=1 hides the forms and controls and puts beside each chart what to look at
and the cell's equations; without it the Train and Race pages are as they were."""
import json
from pathlib import Path

import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from stability.charts.classroom import CHART_FONTS, CHART_HEIGHT, EXPLANATIONS, explanation
from stability import cells
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.runs.store import RunStore
from stability.execution.lifecycle import train_run

PAGES = Path(__file__).resolve().parent.parent / "pages"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real tiny runs on MASO's ternary adding task (an accuracy metric): sgornn (gates) and rnn.
    Returns (store path, {cell: run id})."""
    path = tmp_path_factory.mktemp("classroom") / "runs.db"
    train = TrainConfig(steps=10, batch_size=16, log_every=5, eval_every=5, probe_every=5, eval_examples=32,
                        probe_examples=8)
    ids = {}
    with RunStore(path) as store:
        for cell in ("sgornn", "rnn"):
            config = RunConfig(CellConfig(cell, 8), TaskConfig("adding_ternary", {"seq_len": 12}), train)
            ids[cell] = store.create_run(config.to_dict())
            assert train_run(config, store, ids[cell]).status == "completed"
    return path, ids


def page(name, store_path, monkeypatch, **query):
    monkeypatch.setenv("STABILITY_STORE", str(store_path))
    app = AppTest.from_file(str(PAGES / name), default_timeout=60)
    for key, value in query.items():
        app.query_params[key] = str(value)
    return app.run()


def drawn_names(chart) -> set[str]:
    """The metric rows a chart draws, read from its datasets as sent: the ``name`` column of long rows,
    and the columns of wide ones (``sv_min`` is the row ``sv/min``)."""
    names = set()
    for dataset in chart.proto.datasets:
        table = pa.ipc.open_stream(dataset.data.data).read_all()
        if "name" in table.column_names:
            names |= set(table.column("name").to_pylist())
        names |= {column.replace("_", "/", 1) for column in table.column_names
                  if column.startswith(("sv_", "grad_", "gate_"))}
    return names


def explained_rows(app):
    """(chart, words, LaTeX bodies) of each chart drawn with its explanation beside it."""
    columns = list(app.columns)
    rows = []
    for left, right in zip(columns, columns[1:]):
        charts, words = left.get("vega_lite_chart"), right.get("markdown")
        if len(charts) == 1 and not right.get("vega_lite_chart") and words:
            rows.append((charts[0], words[0].value, [latex.value for latex in right.get("latex")]))
    return rows


def spec(chart) -> dict:
    return json.loads(chart.proto.spec)


def labels(elements) -> list[str]:
    return [element.label for element in elements]


def test_train_in_classroom_view_hides_the_form_and_explains_every_chart_of_a_real_run(runs, monkeypatch):
    store_path, ids = runs
    app = page("train.py", store_path, monkeypatch, run=ids["sgornn"], classroom=1)
    assert not app.exception
    assert labels(app.button) == [] and labels(app.selectbox) == [] and labels(app.slider) == []
    assert labels(app.toggle) == ["Classroom view"] and app.toggle[0].value and not app.sidebar.toggle
    charts = app.get("vega_lite_chart")
    rows = explained_rows(app)
    assert len(charts) >= 6 and len(rows) == len(charts)  # every chart has its words beside it
    equations = cells.describe("sgornn").equations
    for chart, words, latex in rows:
        names = drawn_names(chart)
        assert names and all(explanation(name) for name in names), names
        assert words in {explanation(name) for name in names}  # the words are about what the chart draws
        assert latex and all(equation in latex[0] for equation in equations)
        assert spec(chart)["height"] == CHART_HEIGHT
        assert spec(chart)["config"]["axis"]["labelFontSize"] == CHART_FONTS["axis"]["labelFontSize"]
    shown = {words for _, words, _ in rows}
    assert {EXPLANATIONS["gate/*"], EXPLANATIONS["*/accuracy"], EXPLANATIONS["grad/h0_norm"],
            EXPLANATIONS["grad/h_t_norm"]} <= shown
    assert app.query_params["run"] == str(ids["sgornn"]) and app.query_params["classroom"] == "1"


def test_without_the_parameter_train_is_unchanged_and_the_switch_sets_and_removes_it(runs, monkeypatch):
    store_path, ids = runs
    app = page("train.py", store_path, monkeypatch, run=ids["rnn"])
    normal = len(app.get("vega_lite_chart"))
    assert {"Start", "Stop"} <= set(labels(app.button)) and "Watching" in labels(app.selectbox)
    assert labels(app.sidebar.toggle) == ["Classroom view"] and not app.sidebar.toggle[0].value
    assert not explained_rows(app) and not {markdown.value for markdown in app.markdown} & set(EXPLANATIONS.values())
    assert all(spec(chart)["height"] != CHART_HEIGHT and "axis" not in spec(chart).get("config", {})
               for chart in app.get("vega_lite_chart"))

    app.toggle(key="classroom_view").set_value(True).run()
    assert app.query_params["classroom"] == "1" and "Start" not in labels(app.button)
    rows = explained_rows(app)
    assert len(rows) == normal
    assert all(cells.describe("rnn").equations[0] in latex[0] for _, _, latex in rows)

    app.toggle(key="classroom_view").set_value(False).run()
    assert "classroom" not in app.query_params and "Start" in labels(app.button) and not explained_rows(app)
    assert len(app.get("vega_lite_chart")) == normal


def test_a_link_to_a_missing_run_says_so_and_shows_the_newest(runs, monkeypatch):
    store_path, ids = runs
    app = page("train.py", store_path, monkeypatch, run=999, classroom=1)
    assert any("run=999 (no such run in this store)" in warning.value for warning in app.warning)
    assert app.query_params["run"] == str(max(ids.values())) and explained_rows(app)


def test_race_in_classroom_view_shows_the_cells_once_and_explains_every_chart(runs, monkeypatch):
    store_path, ids = runs
    race = f"{ids['sgornn']},{ids['rnn']}"
    app = page("race.py", store_path, monkeypatch, runs=race, classroom=1)
    assert not app.exception and labels(app.button) == [] and labels(app.slider) == []
    rows = explained_rows(app)
    assert len(rows) == len(app.get("vega_lite_chart")) == 5  # the losses, accuracy, ‖∂L/∂h₀‖, the σ band
    for chart, words, latex in rows:
        names = drawn_names(chart)
        assert all(explanation(name) for name in names) and words in {explanation(name) for name in names}
        assert not latex  # a race's chart overlays every cell: their equations stand once, above
    equations = [latex.value for latex in app.get("latex")]
    for cell in ("sgornn", "rnn"):
        assert any(cells.describe(cell).equations[0] in body for body in equations)

    app = page("race.py", store_path, monkeypatch, runs=race)
    assert "Start race" in labels(app.button) and not explained_rows(app)
    assert len(app.get("vega_lite_chart")) == 5


def draw_an_altair_chart():
    """A script for AppTest: explained() on an Altair chart, as a page that builds its own charts calls it."""
    import altair as alt
    import pandas as pd

    from pages.ui.classroom import classroom_style, classroom_switch, explained

    classroom_switch()
    classroom_style()
    frame = pd.DataFrame({"step": [0, 10, 20], "value": [1.0, 1e-5, 1e-10]})
    explained(alt.Chart(frame).mark_line().encode(x="step", y=alt.Y("value", scale=alt.Scale(type="log"))),
              "grad/h0_norm", "rnn", key="h0")


@pytest.mark.parametrize("classroom", [False, True])
def test_explained_draws_an_altair_chart_alone_or_with_its_words_and_equations(classroom):
    app = AppTest.from_function(draw_an_altair_chart, default_timeout=30)
    if classroom:
        app.query_params["classroom"] = "1"
    app.run()
    assert not app.exception
    charts = app.get("vega_lite_chart")
    assert len(charts) == 1
    height = spec(charts[0]).get("height")
    if classroom:
        (chart, words, latex), = explained_rows(app)
        assert height == CHART_HEIGHT and words == EXPLANATIONS["grad/h0_norm"]
        assert cells.describe("rnn").equations[0] in latex[0]
    else:
        assert height != CHART_HEIGHT and not app.markdown and not app.get("latex")


@pytest.mark.parametrize("name", sorted(path.name for path in PAGES.glob("*.py")))
def test_every_page_has_the_switch_and_keeps_the_classroom_link(name, runs, monkeypatch):
    """?classroom=1 on every page: the switch on (drawn in the page, the sidebar hidden), the parameter kept;
    without it the switch is off in the sidebar."""
    store_path, _ = runs
    app = page(name, store_path, monkeypatch, classroom=1)
    assert not app.exception, name
    assert app.toggle(key="classroom_view").value and "Classroom view" not in labels(app.sidebar.toggle)
    assert app.query_params.get("classroom") in ("1", ["1"])
    app = page(name, store_path, monkeypatch)
    assert not app.exception, name
    (switch,) = [toggle for toggle in app.sidebar.toggle if toggle.label == "Classroom view"]
    assert not switch.value
