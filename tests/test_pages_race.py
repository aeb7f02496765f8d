"""The Race page through Streamlit's AppTest: one click starts every chosen cell with the same seed and
budget (through a fake runner), and the overlaid live panel reads runs written straight into a temp store."""
import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig
from stability.workers import scheduler
from statuses import set_status

PAGE = Path(__file__).resolve().parent.parent / "pages" / "race.py"


@pytest.fixture(autouse=True)
def read_at_every_rerun(monkeypatch):
    """The server reads a watched run at most once a second (stability/live/tail.py); these tests rerun at once."""
    import pages.ui.live
    import stability.live.tail

    monkeypatch.setattr(stability.live.tail, "READ_EVERY_S", 0.0)
    monkeypatch.setattr(pages.ui.live, "FIRST_ROWS_WAIT_S", 0.0)  # a race of queued runs draws at once



@pytest.fixture
def fake_runner(store, monkeypatch):
    calls = {"start": [], "stop": []}

    def start_run(config, store_path=None, name=None, max_concurrent=None, owner=None):
        calls["start"].append((config, store_path, max_concurrent))
        return store.create_run(config.to_dict(), owner=owner)

    def stop_run(run_id, store_path=None, timeout=5.0):
        calls["stop"].append(run_id)
        set_status(store, run_id, "stopped")
        return "stopped"

    monkeypatch.setattr(scheduler, "start_run", start_run)
    monkeypatch.setattr(scheduler, "stop_run", stop_run)
    return calls


def add_run(store, cell, status="running", error=None, h0_norm=1e-3):
    config = RunConfig(CellConfig(cell, 16), TaskConfig("adding", {"seq_len": 200}), TrainConfig(steps=100))
    run_id = store.create_run(config.to_dict())
    store.update_run(run_id, metric="mse", baseline=1 / 6, baseline_label="always predict 1", total_steps=100, step=20)
    set_status(store, run_id, status, error=error)
    now = time.time()
    for step in (0, 10, 20):
        store.log(run_id, [(step, now + step, name, value) for name, value in [
            ("train/loss", 0.2), ("val/loss", 0.19 - step / 1000), ("grad/h0_norm", h0_norm), ("sv/min", 0.9),
            ("sv/max", 1.1), ("sv/margin", 0.1), ("speed/steps_per_s", 12.5)]])
    return run_id


def run(**query):
    app = AppTest.from_file(str(PAGE), default_timeout=30)
    for key, value in query.items():
        app.query_params[key] = str(value)
    return app.run()


def button(app, label):
    return next(b for b in app.button if b.label == label)


def charts(app):
    return app.get("vega_lite_chart")


def test_defaults_are_the_classroom_demo(store):
    app = run()
    assert not app.exception and not app.error
    assert app.multiselect(key="race_cells").value == ["rnn", "lstm", "spectral", "sgornn"]
    assert app.selectbox(key="race_task").value == "adding"
    assert app.number_input(key="race_adding_seq_len").value == 200
    assert not button(app, "Start race").disabled and button(app, "Stop race").disabled


def test_start_race_starts_every_cell_with_the_same_seed_and_budget_at_once(store, fake_runner):
    app = run()
    app.number_input(key="race_hidden").set_value(32)
    app.number_input(key="race_steps").set_value(400)
    app.number_input(key="race_seed").set_value(5)
    app.number_input(key="race_lr").set_value(0.002)
    button(app, "Start race").click().run()
    assert not app.exception and not app.error

    started = fake_runner["start"]
    assert [config.cell.name for config, _, _ in started] == ["rnn", "lstm", "spectral", "sgornn"]
    for config, path, max_concurrent in started:
        assert max_concurrent is None and path == str(store.path)  # the server's slots (STABILITY_MAX_RUNS)
        assert config.cell.hidden_size == 32
        assert (config.task.name, config.task.options["seq_len"]) == ("adding", 200)
        assert (config.train.steps, config.train.seed, config.train.lr) == (400, 5, 0.002)
    ids = sorted(r.id for r in store.records(latest=False))
    assert app.query_params["runs"] in (",".join(map(str, ids)), [",".join(map(str, ids))])
    [table] = app.dataframe
    assert list(table.value["run"]) == ["rnn", "lstm", "spectral", "sgornn"]
    assert set(table.value["status"]) == {"queued"}
    assert not button(app, "Stop race").disabled


def test_a_started_race_draws_its_charts_in_turn_from_the_first_rows_then_looks_at_its_pace(store, fake_runner):
    """Notes [The first point] (stability/live/pace.py) and [Drawn in turn] (stability/live/specs.py): before any run
    has rows the loss chart is drawn empty; the first look that finds rows draws the training loss (a run's
    first point) alone, the next looks the others, and then the race goes back to its usual pace."""
    from test_pages_train import drawn_rows, log

    app = run()
    button(app, "Start race").click().run()
    assert not app.exception
    titles = lambda: [json.loads(chart.proto.spec).get("title", "") for chart in charts(app)]  # noqa: E731
    assert titles() == ["Loss (train, validation): waiting for the first rows"] and drawn_rows(charts(app)[0]) == 0
    first = min(r.id for r in store.records(latest=False))
    set_status(store, first, "running")
    log(store, first, (0,))
    app.run()
    assert not app.exception
    assert titles() == ["Training loss"] and drawn_rows(charts(app)[0]) > 0
    for _ in range(10):  # a chart a look, until every one is drawn
        if len(titles()) == 4:
            break
        app.run()
    assert titles() == ["Training loss", "Validation loss", "‖∂L/∂h₀‖, gradient at the first step (log)",
                        "Singular values of W (band) and margin"]


def test_the_chosen_cells_and_their_options_go_into_their_own_configs(store, fake_runner):
    app = run(cells="rnn,spectral")
    assert app.multiselect(key="race_cells").value == ["rnn", "spectral"]
    app.number_input(key="race_spectral_r").set_value(0.1)
    button(app, "Start race").click().run()
    assert not app.exception
    configs = [config for config, _, _ in fake_runner["start"]]
    assert [config.cell.name for config in configs] == ["rnn", "spectral"]
    assert configs[1].cell.options["r"] == 0.1 and "r" not in configs[0].cell.options
    assert {max_concurrent for _, _, max_concurrent in fake_runner["start"]} == {None}


@pytest.mark.parametrize("change, message", [
    (lambda app: app.multiselect(key="race_cells").set_value([]), "pick at least one cell"),
    (lambda app: app.number_input(key="race_spectral_r").set_value(2.0), "cell 'spectral'"),
    (lambda app: app.number_input(key="race_spectral_m1").set_value(-1), "cell 'spectral'"),
    (lambda app: app.number_input(key="race_spectral_sigma_star").set_value(0.001), "r must be <= sigma_star"),
])
def test_a_bad_value_shows_one_error_and_starts_nothing(store, fake_runner, change, message):
    app = run()
    change(app)
    app.run()
    assert not app.exception
    assert len(app.error) == 1 and message in app.error[0].value
    assert button(app, "Start race").disabled
    assert fake_runner["start"] == []


def test_a_config_the_runner_rejects_shows_its_message(store, monkeypatch):
    def start_run(config, store_path=None, name=None, max_concurrent=None, owner=None):
        raise ConfigError("device 'mps' was asked for but MPS is not available; use auto or cpu")

    monkeypatch.setattr(scheduler, "start_run", start_run)
    app = run()
    button(app, "Start race").click().run()
    assert not app.exception
    assert [error.value for error in app.error] == [
        "device 'mps' was asked for but MPS is not available; use auto or cpu"]


def test_a_race_link_overlays_every_run_with_standings_and_errors(store):
    ids = [add_run(store, "rnn", h0_norm=1e-30), add_run(store, "lstm"), add_run(store, "spectral", status="completed"),
           add_run(store, "sgornn", status="diverged", error="loss or gradient became non-finite at step 20")]
    app = run(runs=",".join(map(str, ids)))
    assert not app.exception
    [table] = app.dataframe
    assert list(table.value["run"]) == ["rnn", "lstm", "spectral", "sgornn"]
    assert list(table.value["status"]) == ["running", "running", "completed", "diverged"]
    assert list(table.value["progress"]) == [0.2] * 4
    assert table.value["‖∂L/∂h₀‖"].iloc[0] == pytest.approx(1e-30)
    assert len(app.error) == 1 and "sgornn (run 4) diverged: loss or gradient became non-finite" in app.error[0].value
    assert [json.loads(chart.proto.spec)["title"] for chart in charts(app)] == [
        "Training loss", "Validation loss", "‖∂L/∂h₀‖, gradient at the first step (log)",
        "Singular values of W (band) and margin"]
    data = b"".join(dataset.data.data for chart in charts(app) for dataset in chart.proto.datasets)
    assert all(cell.encode() in data for cell in ("rnn", "lstm", "spectral", "sgornn"))
    assert b"always predict 1" in data


def test_stop_race_stops_only_the_runs_still_going(store, fake_runner):
    ids = [add_run(store, "rnn"), add_run(store, "lstm", status="completed"), add_run(store, "spectral")]
    app = run(runs=",".join(map(str, ids)))
    button(app, "Stop race").click().run()
    assert not app.exception
    assert fake_runner["stop"] == [ids[0], ids[2]]
    assert button(app, "Stop race").disabled
    assert list(app.dataframe[0].value["status"]) == ["stopped", "completed", "stopped"]


def test_real_runs_draw_four_gradient_lines_with_the_vanishing_ones_far_below(store):
    """Four real (tiny) runs of the race's cells on adding at T = 300 through the trainer: the float32
    training batch of the tanh RNN holds exactly 0, yet its ‖∂L/∂h₀‖ line is drawn (a value, not a gap)
    and sits decades below SGORNN's.  (At hidden 16 and T = 300, Spectral-RNN's leaky ReLU, slope 0.01,
    shrinks its gradient too; the race's hidden 128 at T = 200 is where it keeps ~1e-2.)"""
    import pandas as pd
    from streamlit import dataframe_util

    from stability.execution.lifecycle import train_run

    ids = []
    for cell in ("rnn", "lstm", "spectral", "sgornn"):
        config = RunConfig(CellConfig(cell, 16), TaskConfig("adding", {"seq_len": 300}),
                           TrainConfig(steps=6, batch_size=8, log_every=2, eval_every=6, probe_every=6,
                                       eval_examples=16, probe_examples=8))
        run_id = store.create_run(config.to_dict())
        assert train_run(config, store, run_id).status == "completed"
        ids.append(run_id)
    zeros = store.metrics(ids[0], ["grad/h0_norm_train"])["value"]
    assert (zeros == 0).any()  # what the charts used to draw: nothing
    app = run(runs=",".join(map(str, ids)))
    assert not app.exception
    [gradient] = [chart for chart in charts(app) if "‖∂L/∂h₀‖" in json.loads(chart.proto.spec)["title"]]
    rows = pd.concat([dataframe_util.convert_arrow_bytes_to_pandas_df(named.data.data)
                      for named in gradient.proto.datasets], ignore_index=True).dropna(subset=["run"])
    latest = rows.sort_values("step").groupby("run")["value"].last()
    assert set(latest.index) == {"rnn", "lstm", "spectral", "sgornn"}
    assert (rows["value"] > 0).all() and (rows["note"] == "").all()
    assert latest["rnn"] < 1e-6 * latest["sgornn"] and latest["lstm"] < 1e-3 * latest["sgornn"]


def test_each_run_of_a_race_gets_one_line_saying_what_is_happening(store):
    """The rnn's ‖∂L/∂h0‖ reads 1e-30 at all three steps: vanishing since step 0; the lstm's 1e-3 does not."""
    ids = [add_run(store, "rnn", h0_norm=1e-30), add_run(store, "lstm")]
    app = run(runs=",".join(map(str, ids)))
    assert not app.exception
    [block] = [block.value for block in app.markdown if block.value.startswith("**What is happening**")]
    rnn, lstm = block.split("  \n")[1:]
    assert rnn.startswith("**rnn**") and "below 1e-10 since step 0" in rnn and "see ‖∂L/∂h₀‖" in rnn
    assert lstm.startswith("**lstm**") and "vanish" not in lstm


def test_a_race_line_says_a_problem_first_and_whether_a_run_learns_before_other_news():
    from pages.ui.diagnosis import race_line
    from stability.analysis.diagnosis import Finding

    clipped = Finding("beta_clipped", "info", 20, "β is pinned.", "gates")
    learning = Finding("learning", "info", 40, "It learns.", "loss")
    vanishing = Finding("vanishing", "problem", 60, "It vanishes.", "h0")
    line = race_line("sgornn", [clipped, learning])
    assert "It learns." in line and "(+1 more)" in line
    assert "It vanishes." in race_line("rnn", [clipped, learning, vanishing])
    assert "nothing stands out" in race_line("rnn", [])


def drawn_values(chart):
    """The y the chart's curve layer draws, with the run's true value: its first dataset."""
    from streamlit import dataframe_util

    first = chart.proto.datasets[0].data.data
    return dataframe_util.convert_arrow_bytes_to_pandas_df(first)


def test_an_early_outlier_does_not_set_the_loss_range_unless_the_link_asks_to_show_all(store):
    run_id = add_run(store, "rnn")
    store.log(run_id, [(-10, time.time(), "val/loss", 20.0)])  # a first reading 100x the rest
    app = run(runs=run_id)
    assert not app.exception and app.toggle(key="race_outliers").value and "outliers" not in app.query_params
    validation = charts(app)[1]  # after the training loss
    rows = drawn_values(validation)
    assert rows["value"].max() == 20.0 and rows["y"].max() < 1.0  # drawn at the edge, its value kept

    app.toggle(key="race_outliers").set_value(False).run()
    assert app.query_params["outliers"] == "show"
    assert drawn_values(charts(app)[1])["y"].max() == 20.0
    shown = run(runs=run_id, outliers="show")  # the link keeps the view
    assert not shown.toggle(key="race_outliers").value and drawn_values(charts(shown)[1])["y"].max() == 20.0
    bad = run(runs=run_id, outliers="maybe")
    assert bad.toggle(key="race_outliers").value and "outliers=maybe" in bad.warning[0].value


def slot_holding_workers(store):
    """This store's live run workers whose run is still active: the processes holding a run slot (a worker
    whose run has ended only hands its slot on and exits)."""
    import psutil

    from stability.runs.status import ACTIVE_STATUSES
    from stability.workers.processes import WORKER_MODULE

    holding = []
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if WORKER_MODULE not in command or "--worker" not in command:
            continue
        try:
            if process.environ().get("STABILITY_STORE") != store.url or process.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        run_id = int(command[command.index("--worker") + 1])
        if store.record(run_id).status in ACTIVE_STATUSES:
            holding.append(run_id)
    return holding


def test_a_race_beyond_the_run_slots_queues_its_runs_and_trains_them_one_at_a_time(store, monkeypatch):
    """Issue 20: Race passed max_concurrent=len(configs), overriding the operator's STABILITY_MAX_RUNS. With one
    slot, three real runs are started, two wait 'queued', and never more than one worker holds a slot
    (psutil, every 50 ms, of the workers of this store); all three complete."""
    monkeypatch.setenv("STABILITY_MAX_RUNS", "1")
    app = run(cells="rnn,lstm,gru")
    app.number_input(key="race_hidden").set_value(4)
    app.number_input(key="race_adding_seq_len").set_value(5)
    app.number_input(key="race_steps").set_value(5)
    button(app, "Start race").click().run()
    assert not app.exception and not app.error
    ids = sorted(r.id for r in store.records(latest=False))
    assert len(ids) == 3
    most, deadline = 0, time.monotonic() + 180
    while time.monotonic() < deadline and any(store.record(run_id).status not in ("completed", "failed")
                                              for run_id in ids):
        most = max(most, len(slot_holding_workers(store)))
        time.sleep(0.05)
    assert most == 1 and [store.record(run_id).status for run_id in ids] == ["completed"] * 3
    assert any("2 of these runs wait 'queued'" in info.value for info in app.info)
