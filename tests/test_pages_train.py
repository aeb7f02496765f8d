"""The Train page through Streamlit's AppTest: the RunConfig its widgets build, Start and Stop through a
fake runner, and the live panel fed by rows written straight into a temporary store (no training)."""
import json
import math
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig
from stability.runs.store import RunStore
from stability.workers import scheduler
from statuses import set_status

PAGE = Path(__file__).resolve().parent.parent / "pages" / "train.py"


@pytest.fixture(autouse=True)
def read_at_every_rerun(monkeypatch):
    """The server reads a watched run at most once a second (stability/live/tail.py); these tests rerun at once."""
    import pages.ui.live
    import stability.live.tail

    monkeypatch.setattr(stability.live.tail, "READ_EVERY_S", 0.0)
    monkeypatch.setattr(pages.ui.live, "FIRST_ROWS_WAIT_S", 0.0)  # a queued run's panel draws at once


@pytest.fixture
def fake_runner(store, monkeypatch):
    """start_run stores the run (so the page can watch it) and records what it was given; stop_run too."""
    calls = {"start": [], "stop": []}

    def start_run(config, store_path=None, name=None, max_concurrent=None, owner=None):
        calls["start"].append((config, store_path, max_concurrent))
        return store.create_run(config.to_dict(), owner=owner)

    def stop_run(run_id, store_path=None, timeout=5.0):
        calls["stop"].append((run_id, store_path))
        set_status(store, run_id, "stopped")
        return "stopped"

    monkeypatch.setattr(scheduler, "start_run", start_run)
    monkeypatch.setattr(scheduler, "stop_run", stop_run)
    return calls


def add_run(store, status="running", cell="sgornn", steps=(0, 10, 20), total=100, error=None):
    """A run with synthetic metric rows at ``steps`` and a gradient-through-time profile at each."""
    config = RunConfig(CellConfig(cell, 16), TaskConfig("adding", {"seq_len": 20}), TrainConfig(steps=total))
    run_id = store.create_run(config.to_dict())
    store.update_run(run_id, device="cpu (2 threads)", metric="mse", baseline=1 / 6, baseline_label="always predict 1",
                     total_steps=total)
    set_status(store, run_id, status, error=error)
    log(store, run_id, steps, gates=cell in ("sgornn", "fastrnn"))
    return run_id


def log(store, run_id, steps, gates=False):
    now = time.time()
    for step in steps:
        rows = [("train/loss", 0.3 / (1 + step)), ("val/loss", 0.31 / (1 + step)), ("train/mse", 0.3 / (1 + step)),
                ("val/mse", 0.31 / (1 + step)), ("gap/loss", 0.01), ("gap/mse", 0.01),
                ("grad/h0_norm", 10.0 ** -step), ("sv/min", 0.99), ("sv/max", 1.01), ("sv/margin", 0.01),
                ("speed/steps_per_s", 25.0), ("progress/eta_s", 90.0)]
        rows += [("gate/alpha", 0.02), ("gate/beta", 0.96)] if gates else []
        store.flush(run_id, [(step, now + step, name, value) for name, value in rows],
                    [(step, now + step, "grad/h_t_norm", t, 10.0 ** (t - 20)) for t in range(21)], heartbeat_step=step)


def run(**query):
    app = AppTest.from_file(str(PAGE), default_timeout=30)
    for key, value in query.items():
        app.query_params[key] = str(value)
    return app.run()


def charts(app):
    return app.get("vega_lite_chart")


def titles(app):
    return [json.loads(chart.proto.spec).get("title", "") for chart in charts(app)]


def metric(app, label):
    return next(m.value for m in app.metric if m.label == label)


def button(app, label):
    return next(b for b in app.button if b.label == label)


def test_empty_store_shows_the_form_with_start_and_a_disabled_stop(store):
    app = run()
    assert not app.exception and not app.error
    assert not button(app, "Start").disabled
    assert button(app, "Stop").disabled
    assert any("No runs yet" in info.value for info in app.info)
    assert titles(app) == ["Loss (train, validation): press Start"]  # empty: Note [Skeleton] in pages/ui/live.py
    assert drawn_rows(charts(app)[0]) == 0


def drawn_rows(chart) -> int:
    """How many rows the datasets of a drawn chart hold."""
    import pyarrow

    return sum(pyarrow.ipc.open_stream(dataset.data.data).read_all().num_rows for dataset in chart.proto.datasets)


def test_start_passes_the_config_the_widgets_describe_and_watches_the_new_run(store, fake_runner):
    app = run()
    app.selectbox(key="train_cell").set_value("spectral").run()
    app.number_input(key="train_hidden").set_value(32)
    app.selectbox(key="train_task").set_value("copy").run()
    app.number_input(key="train_copy_seq_len").set_value(30)
    app.number_input(key="train_steps").set_value(300)
    app.number_input(key="train_lr").set_value(0.01)
    app.number_input(key="train_seed").set_value(7)
    app.number_input(key="train_spectral_r").set_value(0.05)
    button(app, "Start").click().run()
    assert not app.exception and not app.error

    [(config, path, _)] = fake_runner["start"]
    assert isinstance(config, RunConfig)
    assert (config.cell.name, config.cell.hidden_size, config.cell.options["r"]) == ("spectral", 32, 0.05)
    assert (config.task.name, config.task.options["seq_len"]) == ("copy", 30)
    assert (config.train.steps, config.train.lr, config.train.seed) == (300, 0.01, 7)
    assert config.train.clip_grad_norm is None and config.train.optimizer == "adam"
    assert path == str(store.path)
    new_id = max(r.id for r in store.records(latest=False))
    assert app.query_params["run"] in (str(new_id), [str(new_id)])
    assert app.selectbox(key="train_watch").value == new_id
    assert not button(app, "Stop").disabled  # the new run is queued: it can be stopped


def test_query_parameters_set_the_form_and_are_written_back(store):
    app = run(cell="lstm", hidden=24, task="adding", seq_len=150, steps=500, lr=0.005, seed=3)
    assert not app.exception and not app.error
    assert app.selectbox(key="train_cell").value == "lstm"
    assert app.number_input(key="train_hidden").value == 24
    assert app.number_input(key="train_adding_seq_len").value == 150
    assert app.number_input(key="train_steps").value == 500
    assert app.number_input(key="train_lr").value == pytest.approx(0.005)
    assert app.number_input(key="train_seed").value == 3
    app.number_input(key="train_adding_seq_len").set_value(250).run()
    assert app.query_params["seq_len"] in ("250", ["250"])


@pytest.mark.parametrize("key, value, message", [
    ("train_spectral_r", 5.0, "cell 'spectral'"),
    ("train_spectral_m1", -1, "cell 'spectral'"),
])
def test_a_bad_value_shows_one_error_line_and_disables_start(store, fake_runner, key, value, message):
    app = run(cell="spectral")
    app.number_input(key=key).set_value(value).run()
    assert not app.exception
    assert len(app.error) == 1 and message in app.error[0].value and "\n" not in app.error[0].value
    assert button(app, "Start").disabled
    assert fake_runner["start"] == []


@pytest.mark.parametrize("key, value, limit", [
    ("train_lr", 0.0, "lr"), ("train_hidden", 0, "hidden"), ("train_hidden", 40000, "hidden"),
    ("train_adding_seq_len", 0, "seq_len"), ("train_steps", 0, "steps"), ("train_batch", 0, "batch"),
])
def test_the_number_widgets_keep_to_the_limits_a_link_keeps_to(store, fake_runner, key, value, limit):
    """The widgets refuse what a URL may not set (LIMITS): a sequence length of 0 or a 40000-unit model
    never reaches the config, so Start stays a valid choice."""
    from pages.ui.limits import LIMITS

    app = run()
    app.number_input(key=key).set_value(value).run()
    assert not app.exception and not app.error
    low, high = LIMITS[limit]
    assert low <= app.number_input(key=key).value <= high
    assert not button(app, "Start").disabled


def test_a_sequence_length_out_of_range_is_one_reason_and_no_start():
    """What the widgets cannot produce is still refused with one line (a config from elsewhere)."""
    from pages.ui.form import config_problem

    config = RunConfig(CellConfig("rnn", 16), TaskConfig("adding", {"seq_len": 0}), TrainConfig(steps=10))
    assert config_problem(json.dumps(config.to_dict(), sort_keys=True)) == \
        "seq_len must be an integer from 1 to 100,000; got 0"


def test_a_config_the_runner_rejects_shows_its_message(store, monkeypatch):
    def start_run(config, store_path=None, name=None, max_concurrent=None, owner=None):
        raise ConfigError("device 'cuda' was asked for but no CUDA GPU is available; use auto or cpu")

    monkeypatch.setattr(scheduler, "start_run", start_run)
    app = run()
    button(app, "Start").click().run()
    assert not app.exception
    assert [error.value for error in app.error] == [
        "device 'cuda' was asked for but no CUDA GPU is available; use auto or cpu"]


def test_live_panel_shows_status_progress_metrics_and_every_chart(store):
    run_id = add_run(store, status="running", steps=(0, 10, 20), total=100)
    store.update_run(run_id, step=20)
    app = run(run=run_id)
    assert not app.exception and not app.error
    assert app.selectbox(key="train_watch").value == run_id
    assert any("running" in block.value for block in app.markdown)
    [progress] = app.get("progress")
    assert progress.value == 20
    assert "step 20 / 100" in progress.proto.text and "25.0 steps/s" in progress.proto.text
    assert "ETA 1 min 30 s" in progress.proto.text and "cpu (2 threads)" in progress.proto.text
    assert float(metric(app, "val mse")) == pytest.approx(0.31 / 21, rel=1e-3)
    assert float(metric(app, "‖∂L/∂h₀‖")) == pytest.approx(1e-20)
    # loss, grad/h0 (log), singular values, gates, gap, gradient-flow heatmap
    assert len(charts(app)) == 6
    assert [title.split(",")[0].split(" (")[0] for title in titles(app)] == [
        "Loss", "‖∂L/∂h₀‖", "Singular values of W", "Gates", "Gap", "Gradient flow through time: ‖∂L/∂h_t‖"]
    specs = " ".join(chart.proto.spec for chart in charts(app))
    assert '"type": "log"' in specs and "log10" in specs
    data = b"".join(dataset.data.data for chart in charts(app) for dataset in chart.proto.datasets)
    assert b"always predict 1" in data and b"gate/alpha" in data and b"gate/beta" in data


def test_a_cell_without_gates_has_no_gate_chart(store):
    run_id = add_run(store, cell="rnn")
    app = run(run=run_id)
    assert not app.exception
    assert len(charts(app)) == 5
    assert "Gates" not in titles(app)


def test_live_panel_reads_only_new_rows_and_appends_them(store, monkeypatch):
    run_id = add_run(store, status="running", steps=(0, 10))
    reads = []
    metrics = RunStore.metrics

    def spy(self, run_id, names=None, since_step=None):
        reads.append(since_step)
        return metrics(self, run_id, names, since_step)

    monkeypatch.setattr(RunStore, "metrics", spy)
    app = run(run=run_id)
    log(store, run_id, (20, 30), gates=True)
    app.run()
    assert not app.exception
    assert reads == [None, 10]  # the rows after the last step read (only step 0 is read again)
    [rows] = app.session_state["_live_rows"].values()
    stored = store.metrics(run_id)
    assert len(rows.metrics) == len(stored) and list(rows.metrics["step"]) == list(stored["step"])
    assert sorted(set(rows.flow["step"])) == [0, 10, 20, 30]
    assert float(metric(app, "val mse")) == pytest.approx(0.31 / 31, rel=1e-3)


def test_a_run_that_finishes_is_read_in_full_once_and_polling_stops(store):
    run_id = add_run(store, status="running", steps=(0, 10))
    app = run(run=run_id)
    log(store, run_id, (100,))
    store.log(run_id, [(100, time.time(), "test/mse", 0.05)])
    store.update_run(run_id, step=100)
    set_status(store, run_id, "completed")
    app.run()
    assert not app.exception and not app.error
    [rows] = app.session_state["_live_rows"].values()
    assert rows.final and not rows.just_finished
    assert float(metric(app, "test mse")) == pytest.approx(0.05)
    assert button(app, "Stop").disabled
    assert any("completed" in block.value for block in app.markdown)


@pytest.mark.parametrize("status, error, shown", [
    ("diverged", "loss or gradient became non-finite at step 12", "diverged: loss or gradient became non-finite"),
    ("failed", "RuntimeError: out of memory", "failed: RuntimeError: out of memory"),
])
def test_a_diverged_or_failed_run_says_so_plainly(store, status, error, shown):
    run_id = add_run(store, status=status, steps=(0, 10), error=error)
    store.log(run_id, [(12, time.time(), "train/loss", math.nan)])
    app = run(run=run_id)
    assert not app.exception
    assert len(app.error) == 1 and shown in app.error[0].value
    assert button(app, "Stop").disabled


def test_stop_asks_the_runner_to_stop_the_watched_run(store, fake_runner):
    first = add_run(store, status="running")
    watched = add_run(store, status="running")
    app = run(run=first)
    app.selectbox(key="train_watch").set_value(watched).run()
    button(app, "Stop").click().run()
    assert not app.exception
    assert fake_runner["stop"] == [(watched, str(store.path))]
    assert any(f"Run {watched} was stopped" in info.value for info in app.info)
    assert button(app, "Stop").disabled
    assert app.query_params["run"] in (str(watched), [str(watched)])


def test_opening_a_run_by_link_loads_its_configuration_into_the_form(store):
    run_id = add_run(store, status="completed", cell="lstm")
    app = run(run=run_id)
    assert not app.exception
    assert app.selectbox(key="train_cell").value == "lstm"
    assert app.number_input(key="train_hidden").value == 16
    assert app.number_input(key="train_adding_seq_len").value == 20


def test_maso_panel_draws_A_h_and_the_recurrent_gradient_when_logged(store):
    run_id = add_run(store, cell="rnn", steps=(0, 10))
    now = time.time()
    store.flush(run_id, [(20, now, "grad/A_h_norm", 0.5), (20, now, "grad/recurrent_norm", 1e-3)], [],
                heartbeat_step=20)
    app = run(run=run_id)
    assert not app.exception
    [maso] = [chart for chart in charts(app) if "MASO" in json.loads(chart.proto.spec).get("title", "")]
    data = b"".join(dataset.data.data for dataset in maso.proto.datasets)
    assert b"grad/A_h_norm" in data and b"grad/recurrent_norm" in data


def test_freeze_checkbox_reaches_the_config(store, fake_runner):
    app = run()
    app.checkbox(key="train_freeze").check().run()
    button(app, "Start").click().run()
    assert not app.exception and not app.error
    [(config, _, _)] = fake_runner["start"]
    assert config.train.freeze_recurrent is True


def test_deterministic_checkbox_reaches_the_config(store, fake_runner):
    app = run()
    app.checkbox(key="train_deterministic").check().run()
    button(app, "Start").click().run()
    assert not app.exception and not app.error
    [(config, _, _)] = fake_runner["start"]
    assert config.train.deterministic is True and config.train.freeze_recurrent is False



def test_cuda_graphs_checkbox_reaches_the_config(store, fake_runner):
    """On by default (TrainConfig.cuda_graphs); unchecked, the run trains eagerly on a GPU too."""
    app = run()
    assert app.checkbox(key="train_cuda_graphs").value is True
    app.checkbox(key="train_cuda_graphs").uncheck().run()
    button(app, "Start").click().run()
    assert not app.exception and not app.error
    [(config, _, _)] = fake_runner["start"]
    assert config.train.cuda_graphs is False and config.train.deterministic is False

def test_vprnn_k_is_left_to_the_cells_rule_unless_typed(store, fake_runner):
    app = run()
    app.selectbox(key="train_cell").set_value("vprnn").run()
    field = app.number_input(key="train_vprnn_k")
    assert field.value is None  # empty: k = 2 ceil(log2 n)
    button(app, "Start").click().run()
    assert "k" not in fake_runner["start"][-1][0].cell.options
    app.number_input(key="train_vprnn_k").set_value(4).run()
    button(app, "Start").click().run()
    assert not app.exception and not app.error
    assert fake_runner["start"][-1][0].cell.options["k"] == 4


def chart_elements(app):
    """Every chart as Streamlit sends it: (spec JSON, {dataset name: Arrow bytes})."""
    return [(chart.proto.spec, {dataset.name: dataset.data.data for dataset in chart.proto.datasets})
            for chart in charts(app)]


def test_a_rerun_with_no_new_rows_reads_nothing_and_sends_the_same_charts(store, monkeypatch):
    """The same element at the same place is what the browser keeps as it is (stability/live/pace.py, Note
    [Watching cheaply]); and the panel looks at the run's row only, not at its metrics."""
    run_id = add_run(store, status="running", steps=(0, 10, 20))
    app = run(run=run_id)
    before = chart_elements(app)
    reads = []
    metrics = RunStore.metrics
    monkeypatch.setattr(RunStore, "metrics", lambda self, *args, **kwargs: reads.append(args) or
                        metrics(self, *args, **kwargs))
    app.run()
    assert not app.exception and reads == []
    assert len(before) == 6 and chart_elements(app) == before


def test_new_rows_change_only_the_charts_that_draw_them_and_never_their_specs(store, monkeypatch):
    """A new train/loss row redraws the loss chart with new data in the same spec (the browser swaps the
    rows of the view it has); the other charts go out exactly as they were."""
    import stability.live.specs

    monkeypatch.setattr(stability.live.specs, "REBUILD_FACTOR", 0.0)  # no throttle between two quick reruns
    run_id = add_run(store, status="running", cell="rnn", steps=(0, 10, 20))
    app = run(run=run_id)
    before = dict(zip(titles(app), chart_elements(app)))
    store.flush(run_id, [(30, time.time(), "train/loss", 0.01)], [], heartbeat_step=30)
    app.run()
    assert not app.exception
    after = dict(zip(titles(app), chart_elements(app)))
    assert after.keys() == before.keys()
    changed = [title for title in after if after[title] != before[title]]
    assert changed == ["Loss (train, validation)"]
    (spec_before, data_before), (spec_after, data_after) = before[changed[0]], after[changed[0]]
    assert spec_after == spec_before and data_after.keys() == data_before.keys() and data_after != data_before


@pytest.mark.parametrize("link, chosen, shown", [
    ({}, "auto", "looks for new rows every 1.5 s (Auto"),
    ({"refresh": "10"}, "10", "looks for new rows every 10 s;"),
    ({"refresh": "off"}, "off", "Live updates paused"),
])
def test_the_refresh_setting_comes_from_the_link_and_is_said_on_the_page(store, link, chosen, shown):
    run_id = add_run(store, status="running", steps=(0, 10))
    app = run(run=run_id, **link)
    assert not app.exception and not app.warning
    assert app.selectbox(key="train_refresh").value == chosen
    assert any(shown in caption.value for caption in app.caption)
    assert ("Refresh now" in [b.label for b in app.button]) == (chosen == "off")


def test_changing_the_refresh_setting_is_written_to_the_link_and_pausing_offers_refresh_now(store):
    run_id = add_run(store, status="running", steps=(0, 10))
    app = run(run=run_id)
    assert "refresh" not in app.query_params  # the default leaves the link as it was
    app.selectbox(key="train_refresh").set_value("30").run()
    assert app.query_params["refresh"] in ("30", ["30"])
    assert any("every 30 s" in caption.value for caption in app.caption)
    app.selectbox(key="train_refresh").set_value("off").run()
    assert app.query_params["refresh"] in ("off", ["off"])
    log(store, run_id, (20,))
    button(app, "Refresh now").click().run()  # paused: the rows come when asked for
    assert not app.exception
    [rows] = app.session_state["_live_rows"].values()
    assert int(rows.metrics["step"].max()) == 20


def test_a_bad_refresh_in_a_link_is_one_warning_line(store):
    run_id = add_run(store, status="running", steps=(0, 10))
    app = run(run=run_id, refresh="0.001")
    assert not app.exception
    [warning] = app.warning
    assert "refresh=0.001" in warning.value and "\n" not in warning.value
    assert app.selectbox(key="train_refresh").value == "auto"


def test_an_ended_run_says_it_is_not_polled(store):
    run_id = add_run(store, status="completed", steps=(0, 10))
    app = run(run=run_id)
    assert any("nothing more to poll" in caption.value for caption in app.caption)


def test_start_from_a_page_watching_another_run_watches_the_new_one(store, fake_runner):
    old = add_run(store, status="completed")
    app = run(run=old)
    button(app, "Start").click().run()
    assert not app.exception
    new = max(r.id for r in store.records(latest=False))
    assert new != old and app.selectbox(key="train_watch").value == new
    assert app.query_params["run"] in (str(new), [str(new)])


def test_a_sweeps_run_says_which_sweep_trial_and_values_with_a_link(store):
    sweep_id = store.create_sweep({"base": {}, "vary": []})
    config = RunConfig(cell=CellConfig("rnn", 16), task=TaskConfig("adding", {"seq_len": 20}),
                       train=TrainConfig(steps=100, lr=0.001))
    run_id = store.create_run(config.to_dict(), sweep_id=sweep_id, trial=3, params={"cell": "rnn", "train.lr": 0.001})
    set_status(store, run_id, "pruned")
    app = run(run=str(run_id))
    assert not app.exception
    tags = [markdown.value for markdown in app.markdown if "sweep #" in markdown.value]
    assert tags == [f"[sweep #{sweep_id}](sweep?sweep={sweep_id}) trial 3: cell=rnn lr=0.001"]
    assert any(f"Run {run_id} was pruned at step" in info.value for info in app.info)
    plain = add_run(store, status="completed")
    app = run(run=str(plain))
    assert not [markdown for markdown in app.markdown if "sweep #" in markdown.value]


def findings_text(app) -> str:
    [block] = [block.value for block in app.markdown if block.value.startswith("**What is happening**")]
    return block


def test_a_run_whose_gradient_vanished_is_said_so_in_words_with_its_step_and_chart(store):
    """‖∂L/∂h0‖ is 10^-step (add_run's rows): below 1e-10 from step 20 on, read at 20, 30 and 40; the
    validation loss has been well below the 1/6 baseline since step 10."""
    run_id = add_run(store, status="running", steps=(0, 10, 20, 30, 40))
    app = run(run=run_id)
    assert not app.exception and not app.error
    vanishing, learning = findings_text(app).split("  \n")[1:]  # the problem first
    assert "‖∂L/∂h₀‖ has been below 1e-10 since step 20" in vanishing and "the gradient vanishes" in vanishing
    assert vanishing.startswith(":red[:material/error:]") and vanishing.endswith(":gray[see ‖∂L/∂h₀‖]")
    assert learning.startswith(":green[:material/check_circle:]") and "since step 10" in learning
    assert learning.endswith(":gray[see Loss]")


def test_findings_are_computed_again_only_when_new_rows_came(store, monkeypatch):
    import pages.ui.diagnosis as page_diagnosis

    run_id = add_run(store, status="running", steps=(0, 10))
    calls = []
    monkeypatch.setattr(page_diagnosis, "diagnose", lambda rows, record: calls.append(len(rows)) or [])
    app = run(run=run_id)
    assert "Nothing stands out yet" in findings_text(app)
    app.run()  # no new rows: nothing to compute
    log(store, run_id, (20,))
    store.update_run(run_id, step=20)
    app.run()
    assert not app.exception
    assert len(calls) == 2 and calls[1] > calls[0]


def test_the_spectrum_over_training_is_a_heatmap_read_incrementally(store):
    run_id = add_run(store, cell="rnn", status="running", steps=(0, 10))

    def spectrum(steps):
        now = time.time()
        for step in steps:
            store.flush(run_id, [], [(step, now + step, "sv/spectrum", i, 2.0 ** -i * (1 + step / 100))
                                     for i in range(16)], heartbeat_step=step)

    spectrum((0, 10))
    app = run(run=run_id)
    assert not app.exception
    assert titles(app)[-1].startswith("Singular values of W over training")
    log(store, run_id, (20,))
    spectrum((20,))
    app.run()
    [rows] = app.session_state["_live_rows"].values()
    assert sorted(set(rows.spectrum["step"])) == [0, 10, 20] and len(rows.spectrum) == 48
    spec = charts(app)[-1]
    drawn = b"".join(dataset.data.data for dataset in spec.proto.datasets)
    assert b"sv/spectrum" in drawn and "log10" in spec.proto.spec


def test_after_start_the_panel_looks_quickly_until_the_first_point_then_at_its_usual_pace(store, fake_runner):
    """Notes [The first point] (stability/live/pace.py) and [Drawn in turn] (stability/live/specs.py): a started run
    is looked at every tenth of a second while it is queued and has no rows, with the loss chart drawn empty;
    the looks that find its first rows draw its charts, the loss first, and when all are drawn the page goes
    back to Auto."""
    app = run()
    button(app, "Start").click().run()
    assert not app.exception
    run_id = max(r.id for r in store.records(latest=False))
    assert any("first point" in caption.value for caption in app.caption)
    assert titles(app) == ["Loss (train, validation): waiting for the first rows"]
    set_status(store, run_id, "running")
    log(store, run_id, (0,))
    app.run()
    assert not app.exception
    assert titles(app)[0] == "Loss (train, validation)" and drawn_rows(charts(app)[0]) > 0
    for _ in range(10):  # a few charts a look, until every one is drawn
        if not any("first point" in caption.value for caption in app.caption):
            break
        app.run()
    assert any("every 1.5 s (Auto" in caption.value for caption in app.caption)
    every_chart = titles(run(run=run_id))  # a page opened on the run now draws every chart at once
    assert len(every_chart) >= 5 and titles(app) == every_chart


def test_a_deep_mlp_run_draws_the_gradient_reaching_each_layer_from_its_stored_rows(store):
    """A real tiny mlp run (spectral paper Fig. 5's cell): its probes store ‖∂L/∂a_l‖ for every layer, and the
    Train page draws them as a heatmap over layers and training steps, cell for cell the stored values."""
    from stability.execution.lifecycle import train_run

    layers = 4
    config = RunConfig(CellConfig("mlp", 16, {"layers": layers}),
                       TaskConfig("mnist", {"pixels_per_step": 784, "data": "standin", "train_size": 64,
                                            "test_size": 32, "val_size": 32}),
                       TrainConfig(steps=4, batch_size=8, log_every=1, eval_every=2, probe_every=2,
                                   eval_examples=16, probe_examples=4))
    run_id = store.create_run(config.to_dict())
    assert train_run(config, store, run_id).status == "completed"
    stored = store.series(run_id, "grad/layer_norm")
    assert set(stored["index"]) == set(range(layers + 1)) and len(set(stored["step"])) >= 2

    app = run(run=run_id)
    assert not app.exception
    [depth] = [chart for chart in charts(app)
               if json.loads(chart.proto.spec).get("title", "").startswith("Gradient reaching each layer")]
    import pyarrow

    frames = [pyarrow.ipc.open_stream(dataset.data.data).read_all().to_pandas() for dataset in depth.proto.datasets]
    drawn = [row for frame in frames if "log10" in frame for row in frame.to_dict("records")
             if math.isfinite(row["log10"])]
    assert {(row["step"], row["index"]) for row in drawn} == set(zip(stored["step"], stored["index"]))
    for row in drawn:
        value = stored[(stored["step"] == row["step"]) & (stored["index"] == row["index"])]["value"].item()
        assert row["log10"] == pytest.approx(math.log10(value), rel=1e-9)
