"""The Gradient flow page and the app frame, through Streamlit's AppTest."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from statuses import set_status

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "pages" / "gradient_flow.py"


def run(page=PAGE, **query):
    app = AppTest.from_file(str(page), default_timeout=60)
    for key, value in query.items():
        app.query_params[key] = value
    return app.run()


def metric(app, label):
    return next(m.value for m in app.metric if m.label == label)


def test_default_page_draws_two_charts_and_metrics():
    app = run()
    assert not app.exception
    assert len(app.get("vega_lite_chart")) == 2
    assert float(metric(app, "‖∂h_T/∂h_0‖")) > 0


def test_query_parameters_choose_the_configuration_and_are_written_back():
    app = run(cell="spectral", hidden="32", T="120", seed="4")
    assert not app.exception
    assert app.selectbox(key="gf_cell").value == "spectral"
    assert app.select_slider(key="gf_hidden").value == 32
    assert app.slider(key="gf_T").value == 120
    assert float(metric(app, "margin max|σ−1|")) <= 0.01 + 1e-6
    assert app.query_params["cell"] == ["spectral"] or app.query_params["cell"] == "spectral"


def test_moving_a_widget_redraws():
    app = run(cell="rnn")
    before = metric(app, "‖∂h_T/∂h_0‖")
    app.number_input(key="gf_rnn_init_gain").set_value(0.5).run()
    assert not app.exception
    assert metric(app, "‖∂h_T/∂h_0‖") != before
    assert float(metric(app, "‖W‖₂ (largest σ)")) < 1.0


def test_bad_option_shows_an_error_not_a_traceback():
    app = run(cell="spectral")
    app.number_input(key="gf_spectral_r").set_value(5.0).run()
    assert not app.exception
    assert len(app.error) == 1 and "Cannot build spectral" in app.error[0].value


@pytest.mark.parametrize("name", ["lstm", "kru", "sgornn", "urnn"])
def test_other_cells_render(name):
    app = run(cell=name, hidden="16", T="50")
    assert not app.exception and not app.error
    assert len(app.get("vega_lite_chart")) == 2


def test_app_frame_shows_the_device_and_runs_in_progress(tmp_path, monkeypatch):
    from stability.runs.store import RunStore

    monkeypatch.setenv("STABILITY_STORE", str(tmp_path / "runs.db"))
    app = run(ROOT / "app.py")
    assert not app.exception
    assert any("Device:" in caption.value for caption in app.sidebar.caption)
    assert any("No runs in progress" in caption.value for caption in app.sidebar.caption)
    store = RunStore(tmp_path / "runs.db")
    from stability.config import CellConfig, RunConfig, TaskConfig

    run_id = store.create_run(RunConfig().to_dict())
    import os
    set_status(store, run_id, "running", pid=os.getpid(), step=50, total_steps=200)
    app = run(ROOT / "app.py")
    assert not app.exception
    assert any("1** run in progress" in caption.value for caption in app.sidebar.caption)
    assert app.sidebar.get("progress")[0].proto.text == f"#{run_id} spectral on adding · running"
    queued = store.create_run(RunConfig(cell=CellConfig("lstm"), task=TaskConfig("copy", {})).to_dict())
    store.update_run(queued, pid=os.getpid())  # claimed, so reconcile leaves it alone
    app = run(ROOT / "app.py")
    assert not app.exception
    assert any("2** runs in progress" in caption.value for caption in app.sidebar.caption)


@pytest.mark.parametrize("name", ["spectral", "exponential"])
def test_the_cell_is_described_by_its_class(name):
    """Summary, equations, paper and the option widgets all come from cells.describe()."""
    from stability import cells

    info = cells.describe(name)
    app = run(cell=name, hidden="16", T="50")
    assert not app.exception and not app.error
    [latex] = app.latex
    assert all(equation in latex.value for equation in info.equations)
    captions = [caption.value for caption in app.caption]
    assert info.summary in captions and f"Source: {info.paper}" in captions
    assert app.selectbox(key=f"gf_{name}_nonlinearity").options == list(info.option("nonlinearity").choices)
    keys = [widget.key for widget in [*app.selectbox, *app.number_input]]
    assert f"gf_{name}_h0" not in keys and f"gf_{name}_h0_noise_std" not in keys  # unused by the measurement
