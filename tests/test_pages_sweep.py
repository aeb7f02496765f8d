"""The Sweep page through Streamlit's AppTest, on a temp store holding sweeps written through RunStore.

``store_sweep`` writes a finished-looking sweep the way workers would (a sweeps row, one run per setting
and seed with its trial and varied values, metric rows through ``flush``, a final status); the browser
test (tests/test_browser.py) uses it too.
"""
import io
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import streamlit
from streamlit import dataframe_util
from streamlit.testing.v1 import AppTest

from stability import sweeps
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from statuses import set_status

PAGE = Path(__file__).resolve().parent.parent / "pages" / "sweep.py"
STEPS = range(0, 101, 10)


def base_config(steps=100):
    return RunConfig(cell=CellConfig("rnn", 16), task=TaskConfig("adding", {"seq_len": 20}),
                     train=TrainConfig(steps=steps, lr=1e-3, seed=0))


def final_loss(cell, lr, seed):
    """A made-up final validation loss: spectral indifferent to lr, rnn better at larger lr."""
    return (0.05 if cell == "spectral" else 0.15 - 0.4 * lr) * (1 + 0.1 * seed)


def store_sweep(store, cells=("rnn", "spectral"), lrs=(1e-3, 1e-2, 1e-1), seeds=2, diverge=(("rnn", 0.1, 0),),
                prune=(), running=(), status="completed"):
    """A sweep of cell x lr x seeds written through the store; ``diverge`` / ``prune`` / ``running`` list
    (cell, lr, seed) runs that diverged (NaN val/loss at the end), were pruned at step 50, or are still
    running at step 50. Returns (sweep id, spec)."""
    spec = sweeps.build_spec(base_config(), [f"cell={','.join(cells)}", f"lr={','.join(map(str, lrs))}"],
                             seeds=seeds)
    sweep_id = store.create_sweep(spec.to_dict(), name="lr x cell")
    trial = 0
    for setting in spec.settings():
        for seed in spec.seed_values():
            key = (setting["cell"], setting["train.lr"], seed)
            config = spec.config_for(setting, seed)
            run_id = store.create_run(config.to_dict(), sweep_id=sweep_id, trial=trial, params=setting)
            trial += 1
            last = 50 if key in prune or key in running else 100
            loss = final_loss(*key)
            rows = []
            for step in (s for s in STEPS if s <= last):
                wall = 1000.0 * run_id + step
                fraction = step / 100
                value = (0.17 - (0.17 - loss) * fraction) if key not in diverge or step < last else math.nan
                h0 = (1e-3 if setting["cell"] == "spectral" else 10.0 ** -(2 + 20 * fraction)) * (1 + seed)
                if setting["cell"] == "rnn" and setting["train.lr"] == 1e-3 and seed == 1 and step == 100:
                    h0 = 0.0  # vanished below float64's range: a zero the curves must keep honest
                rows += [(step, wall, "train/loss", value), (step, wall, "val/loss", value),
                         (step, wall, "grad/h0_norm", h0), (step, wall, "sv/min", 0.9 - 0.5 * fraction),
                         (step, wall, "sv/max", 1.1 + setting["train.lr"] * 10 * fraction)]
            store.flush(run_id, rows, heartbeat_step=last)
            store.update_run(run_id, total_steps=100, metric="mse", baseline=1 / 6, baseline_label="memoryless")
            if key in running:
                set_status(store, run_id, "running")
            else:
                set_status(store, run_id, "diverged" if key in diverge else "pruned" if key in prune else "completed")
    if not running:
        store.update_sweep(sweep_id, status=status)
    return sweep_id, spec


def run(**query):
    app = AppTest.from_file(str(PAGE), default_timeout=60)
    for key, value in query.items():
        app.query_params[key] = value
    return app.run()


def param(app, key):
    value = app.query_params[key]
    return value[0] if isinstance(value, list) else value


def charts_of(app):
    """The charts keyed by their title."""
    return {json.loads(chart.proto.spec).get("title"): chart for chart in app.get("vega_lite_chart")}


def chart_frames(chart):
    return [dataframe_util.convert_arrow_bytes_to_pandas_df(named.data.data) for named in chart.proto.datasets]


def settings_table(app):
    return next(frame.value for frame in app.dataframe if "mean" in frame.value.columns)


def test_no_sweeps_yet_points_to_the_form(store):
    app = run()
    assert not app.exception and not app.error
    assert any("No sweeps yet" in info.value for info in app.info)


def test_watching_a_store_made_sweep_draws_the_four_charts_and_the_table(store):
    sweep_id, _ = store_sweep(store)
    app = run(sweep=str(sweep_id))
    assert not app.exception and not app.error
    assert set(charts_of(app)) == {"Final val/loss against lr", "Mean val/loss over seeds",
                                   "Every run, across the varied fields", "val/loss: mean over seeds, min-max band"}
    table = settings_table(app)
    assert len(table) == 6 and set(table["cell"]) == {"rnn", "spectral"}
    rnn = table[(table["cell"] == "rnn") & (table["train.lr"] == 0.1)].iloc[0]
    assert rnn["diverged"] == 1 and rnn["n"] == 1
    assert rnn["mean"] == pytest.approx(final_loss("rnn", 0.1, 1))
    best = table.iloc[0]
    assert best["cell"] == "spectral" and best["mean"] == pytest.approx(np.mean([final_loss("spectral", 0, s)
                                                                                  for s in (0, 1)]))
    assert best["best_run"].startswith("./?run=")
    assert "6 / 12" not in app.get("progress")[0].proto.text  # a finished sweep: every run done
    assert app.get("progress")[0].proto.text.startswith("12 / 12 runs done")
    assert param(app, "sweep") == str(sweep_id)


def test_the_objective_chart_places_every_seed_and_the_diverged_run_at_the_top(store):
    sweep_id, _ = store_sweep(store)
    app = run(sweep=str(sweep_id))
    chart = charts_of(app)["Final val/loss against lr"]
    spec = json.loads(chart.proto.spec)
    encodings = [layer["encoding"] for layer in spec["layer"]]
    assert all(e["x"]["scale"]["type"] == "log" for e in encodings)  # lr is drawn on a log axis
    seeds = next(frame for frame in chart_frames(chart) if "status" in frame)
    assert len(seeds) == 12
    diverged = seeds[seeds["status"] == "diverged"]
    assert len(diverged) == 1 and (diverged["y"] > seeds.loc[seeds["status"] != "diverged", "y"].max()).all()


def test_curves_follow_the_chosen_metric_and_average_seeds(store):
    sweep_id, _ = store_sweep(store)
    app = run(sweep=str(sweep_id))
    app.selectbox(key="sweep_metric").set_value("sv/max").run()
    assert not app.exception
    chart = charts_of(app)["sv/max: mean over seeds, min-max band"]
    rows = chart_frames(chart)[0]
    last = rows[(rows["group"] == "cell=rnn lr=0.1") & (rows["step"] == 100)].iloc[0]
    assert last["mean"] == pytest.approx(1.1 + 0.1 * 10) and last["n"] == 2
    app.selectbox(key="sweep_metric").set_value("grad/h0_norm").run()
    rows = chart_frames(charts_of(app)["grad/h0_norm: mean over seeds, min-max band"])[0]
    vanished = rows[(rows["group"] == "cell=rnn lr=0.001") & (rows["step"] == 100)].iloc[0]
    assert vanished["min"] == 0 and vanished["zeros"] == 1 and vanished["mean"] == pytest.approx(1e-22)


def test_controls_change_the_charts_axes(store):
    sweep_id, _ = store_sweep(store)
    app = run(sweep=str(sweep_id))
    app.selectbox(key="sweep_x").set_value("cell").run()
    assert not app.exception
    spec = json.loads(charts_of(app)["Final val/loss against cell"].proto.spec)
    assert spec["layer"][0]["encoding"]["x"]["type"] == "ordinal"
    assert spec["layer"][0]["encoding"]["color"]["title"] == "lr"
    app.toggle(key="sweep_log").set_value(False).run()
    spec = json.loads(charts_of(app)["Final val/loss against cell"].proto.spec)
    assert spec["layer"][1]["encoding"]["y"]["scale"].get("type") != "log"


def test_csv_download_holds_the_results(store, monkeypatch):
    downloads = []
    original = streamlit.download_button

    def recording(label, data, *args, **kwargs):
        downloads.append(data)
        return original(label, data, *args, **kwargs)

    monkeypatch.setattr(streamlit, "download_button", recording)
    sweep_id, _ = store_sweep(store)
    app = run(sweep=str(sweep_id))
    assert not app.exception
    data = downloads[-1]
    csv = pd.read_csv(io.BytesIO(data() if callable(data) else data))  # written when clicked
    assert len(csv) == 12 and {"run_id", "status", "objective", "cell", "train.lr"} <= set(csv.columns)
    assert csv.loc[csv["status"] == "diverged", "objective"].isna().all()
    expected = {run.id: run.latest["val/loss"] for run in store.records(sweep_id=sweep_id)}
    for row in csv[csv["status"] == "completed"].itertuples():
        assert row.objective == pytest.approx(expected[row.run_id])


def test_runs_of_the_sweep_link_to_their_train_page(store):
    sweep_id, _ = store_sweep(store)
    app = run(sweep=str(sweep_id))
    runs = next(frame.value for frame in app.dataframe if "run" in frame.value.columns)
    ids = sorted(record.id for record in store.records(sweep_id=sweep_id))
    assert sorted(int(link.split("=")[1]) for link in runs["run"]) == ids


def test_an_unknown_sweep_in_the_link_is_one_warning(store):
    sweep_id, _ = store_sweep(store)
    app = run(sweep="999")
    assert not app.exception
    assert any("sweep=999" in warning.value for warning in app.warning)
    assert param(app, "sweep") == str(sweep_id)


def test_a_finished_sweep_cannot_be_stopped_and_a_running_one_can(store):
    done, _ = store_sweep(store)
    app = run(sweep=str(done))
    assert app.button(key="sweep_stop").disabled and not app.button(key="sweep_resume").disabled
    live, _ = store_sweep(store, running=(("rnn", 0.01, 0),), diverge=())
    app = run(sweep=str(live))
    assert not app.exception
    assert not app.button(key="sweep_stop").disabled and app.button(key="sweep_resume").disabled
    assert "1 running" in app.get("progress")[0].proto.text


def test_the_form_describes_the_sweep_and_counts_its_runs_before_start(store):
    app = run()
    assert not app.exception and not app.error
    captions = [caption.value for caption in app.caption]
    assert any(text.startswith("grid: train.lr (4) x cell (2) x 3 seeds = 24 runs") for text in captions)
    assert any("**24 runs**" in markdown.value for markdown in app.markdown)
    app.number_input(key="sweep_seeds").set_value(2).run()
    assert any("**16 runs**" in markdown.value for markdown in app.markdown)


def test_the_rough_time_of_a_big_admitted_shape_builds_no_model_in_the_server(store, monkeypatch):
    """Issue 20: the rough time trained a few steps of each shape inside the server; an admitted rnn 1024 at
    T = 5,000, batch 16 takes many seconds a step there. Now the page makes no model (a SequenceModel: a cell
    joined to its task's output, as a run builds it) and no optimizer while it runs (the preflight's check of
    the cell's options builds a bare cell, as before), and says its basis: the operation count, the shape
    being too large to time apart."""
    import sys

    import torch

    made = []
    module_init, optimizer_init = torch.nn.Module.__init__, torch.optim.Optimizer.__init__

    def counted_module(module, *args, **kwargs):
        if type(module).__name__ == "SequenceModel":
            made.append(module)
        module_init(module, *args, **kwargs)

    def counted_optimizer(optimizer, *args, **kwargs):
        made.append(optimizer)
        optimizer_init(optimizer, *args, **kwargs)

    app = run()
    app.selectbox(key="sweep_cell").set_value("rnn")
    app.number_input(key="sweep_hidden").set_value(1024)
    app.number_input(key="sweep_adding_seq_len").set_value(5000)
    app.number_input(key="sweep_batch").set_value(16)
    app.button(key="sweep_vary_remove").click()
    monkeypatch.setattr(torch.nn.Module, "__init__", counted_module)
    monkeypatch.setattr(torch.optim.Optimizer, "__init__", counted_optimizer)
    try:
        app.run()
        assert not app.exception and not app.error
        [line] = [markdown.value for markdown in app.markdown if "**12 runs** ·" in markdown.value]
        assert made == [] and "about" in line and "1 shape from the operation count at" in line
        assert "separate process" not in line  # too large to time apart: no child times it either
    finally:
        timing = sys.modules.get("stability.workers.timing")
        if timing is not None:
            timing.stop_children()  # the default form's shape, timed apart at the first run


@pytest.mark.parametrize("row, field, values, message", [
    (0, "lr", "fast,slow", "vary train.lr: 'fast' is not a finite number"),
    (0, "no_such_field", "1,2", "vary no_such_field: unknown field"),
    (1, "cell", "rnn,no_such_cell", "no_such_cell"),
    (0, "lr", "1e-1:1e-4:3:log", "LOW < HIGH"),
])
def test_bad_vary_input_is_one_error_line_and_no_start(store, row, field, values, message):
    app = run()
    box = app.selectbox(key=f"sweep_vary_field_{row}")
    if field not in box.options:  # typed in (accept_new_options): AppTest only sends a listed option's text
        box.options.append(field)
    box.set_value(field)
    app.text_input(key=f"sweep_vary_values_{row}").input(values).run()
    assert not app.exception
    errors = [error.value for error in app.error]
    assert len(errors) == 1 and message in errors[0] and "\n" not in errors[0]
    assert not [button for button in app.button if button.key == "sweep_start"]


def test_sampled_ranges_need_random_or_tpe_and_a_trial_budget(store):
    app = run()
    app.text_input(key="sweep_vary_values_0").input("1e-4:1e-1:log").run()
    assert "a grid needs LOW:HIGH:COUNT" in app.error[0].value
    app.selectbox(key="sweep_sampler").set_value("random").run()
    assert not app.error
    assert any("random: 8 trials over" in caption.value for caption in app.caption)


def test_vary_rows_can_be_added_and_removed(store):
    app = run()
    app.button(key="sweep_vary_add").click().run()
    app.selectbox(key="sweep_vary_field_2").set_value("task.seq_len")
    app.text_input(key="sweep_vary_values_2").input("10,20").run()
    assert any("= 48 runs" in caption.value for caption in app.caption)
    app.button(key="sweep_vary_remove").click().run()
    assert any("= 24 runs" in caption.value for caption in app.caption)


def test_start_stores_the_sweep_its_workers_run_and_the_page_watches_it(store):
    app = run()
    app.selectbox(key="sweep_cell").set_value("rnn")
    app.number_input(key="sweep_hidden").set_value(8)
    app.number_input(key="sweep_adding_seq_len").set_value(10)
    app.number_input(key="sweep_steps").set_value(20)
    app.text_input(key="sweep_vary_values_0").input("1e-3,1e-2")
    app.number_input(key="sweep_seeds").set_value(1)
    app.number_input(key="sweep_workers").set_value(1)
    app.button(key="sweep_vary_remove").click().run()
    assert not app.exception and not app.error
    for _ in range(80):  # the shape is timed in a separate process: the line fills in when it answers
        line = next(markdown.value for markdown in app.markdown if "**2 runs** · about" in markdown.value)
        if "separate process" not in line:
            break
        time.sleep(0.5)
        app.run()
    # timed, or (a machine too loaded to time it within the limit) left to its operation count
    assert "1 shape timed by 3 training steps" in line or "1 shape from the operation count" in line
    app.button(key="sweep_start").click().run()
    assert not app.exception and not app.error
    [started] = store.sweeps()
    try:
        spec = sweeps.SweepSpec.from_dict(started.spec)
        assert [(vary.field, vary.values) for vary in spec.vary] == [("train.lr", (1e-3, 1e-2))]
        assert (spec.base.cell.name, spec.base.cell.hidden_size, spec.base.train.steps) == ("rnn", 8, 20)
        assert spec.seeds == 1 and started.workers == 1
        assert param(app, "sweep") == str(started.id) and app.selectbox(key="sweep_watch").value == started.id
    finally:
        sweeps.stop_sweep(started.id, store.url)
    assert store.sweep(started.id).status in ("stopped", "completed")
    app.run()
    assert not app.exception and app.button(key="sweep_stop").disabled


def test_stop_stops_a_running_sweep_and_offers_resume(store):
    sweep_id, _ = store_sweep(store, running=(("rnn", 0.01, 0), ("spectral", 0.1, 1)), diverge=())
    app = run(sweep=str(sweep_id))
    app.button(key="sweep_stop").click().run()  # no worker is alive to answer: the runs are marked stopped
    assert not app.exception
    assert store.sweep(sweep_id).status == "stopped"
    assert {run.status for run in store.records(sweep_id=sweep_id)} == {"completed", "stopped"}
    assert any(f"Sweep #{sweep_id}: stopped" in info.value for info in app.info)
    assert app.button(key="sweep_stop").disabled and not app.button(key="sweep_resume").disabled
    assert "2 stopped" in app.get("progress")[0].proto.text


def test_resume_of_a_completed_sweep_says_there_is_nothing_to_resume(store):
    sweep_id, _ = store_sweep(store)
    app = run(sweep=str(sweep_id))
    app.button(key="sweep_resume").click().run()
    assert not app.exception
    assert any("nothing to resume" in info.value for info in app.info)
    assert store.sweep(sweep_id).status == "completed"


def chart_elements(app):
    """Every chart as Streamlit sends it, by title: (spec JSON, {dataset name: Arrow bytes})."""
    return {json.loads(chart.proto.spec).get("title"): (chart.proto.spec, {d.name: d.data.data
                                                                          for d in chart.proto.datasets})
            for chart in app.get("vega_lite_chart")}


def test_an_unchanged_rerun_reads_no_curve_rows_and_sends_the_same_charts(store, monkeypatch):
    """Note [Watching a sweep]: nothing moved, nothing read but the results, every chart the same element."""
    from stability.runs.store import RunStore

    sweep_id, _ = store_sweep(store, running=(("rnn", 0.01, 0),), diverge=())
    app = run(sweep=str(sweep_id))
    before = chart_elements(app)
    reads = []
    metrics_many = RunStore.metrics_many
    monkeypatch.setattr(RunStore, "metrics_many", lambda self, *args, **kwargs: reads.append(args) or
                        metrics_many(self, *args, **kwargs))
    app.run()
    assert not app.exception and reads == []
    assert len(before) == 4 and chart_elements(app) == before


def test_a_training_step_redraws_the_curves_only_and_an_evaluation_the_objective_charts(store, monkeypatch):
    import stability.live.specs

    monkeypatch.setattr(stability.live.specs, "REBUILD_FACTOR", 0.0)  # no throttle between two quick reruns
    sweep_id, _ = store_sweep(store, running=(("rnn", 0.01, 0),), diverge=())
    running = next(run.id for run in store.records(sweep_id=sweep_id) if run.status == "running")
    app = run(sweep=str(sweep_id))
    app.selectbox(key="sweep_metric").set_value("train/loss").run()
    before = chart_elements(app)
    store.flush(running, [(60, 1e9, "train/loss", 0.01)], heartbeat_step=60)
    app.run()
    after = chart_elements(app)
    assert [title for title in after if after[title] != before[title]] == ["train/loss: mean over seeds, min-max band"]
    store.flush(running, [(70, 1e9, "val/loss", 0.001)], heartbeat_step=70)
    app.run()
    changed = [title for title, element in chart_elements(app).items() if element != after[title]]
    # the run's point moved; the heatmap's means are over completed seeds only (stability.analysis.groups, Note
    # [Which runs count]), and train/loss has no row at step 70
    assert set(changed) == {"Final val/loss against lr", "Every run, across the varied fields"}


def test_names_and_lines_follow_the_order_the_sweep_lists_its_values(store):
    sweep_id, _ = store_sweep(store, cells=("spectral", "rnn"), lrs=(1e-1, 1e-3))
    app = run(sweep=str(sweep_id))
    objective = json.loads(charts_of(app)["Final val/loss against lr"].proto.spec)
    assert objective["layer"][0]["encoding"]["color"]["sort"] == ["spectral", "rnn"]
    curves = chart_frames(charts_of(app)["val/loss: mean over seeds, min-max band"])[0]
    assert list(dict.fromkeys(curves["group"])) == ["cell=spectral lr=0.1", "cell=spectral lr=0.001",
                                                    "cell=rnn lr=0.1", "cell=rnn lr=0.001"]


def test_a_sweep_in_a_postgresql_store_is_watched_as_one_in_a_file(postgres_url, tmp_path, monkeypatch):
    """One dashboard for a sweep spread over machines (issue 12): the page reads a PostgreSQL store as it
    reads a file."""
    from pages.ui.store import _open_store
    from stability.runs.store import RunStore

    monkeypatch.setenv("STABILITY_STORE", postgres_url)
    monkeypatch.setenv("STABILITY_HOME", str(tmp_path / "home"))
    _open_store.clear()
    try:
        with RunStore(postgres_url) as shared:
            sweep_id, _ = store_sweep(shared)
            ids = {run.id for run in shared.records(sweep_id=sweep_id)}
        app = run(sweep=str(sweep_id))
        assert not app.exception and not app.error
        assert len(charts_of(app)) == 4 and len(settings_table(app)) == 6
        runs = next(frame.value for frame in app.dataframe if "run" in frame.value.columns)
        assert {int(link.split("=")[1]) for link in runs["run"]} == ids
    finally:
        _open_store.clear()  # no connection to a dropped database left for the next test


def test_a_random_search_over_a_sampled_range_is_drawn_by_its_sampled_values(store):
    spec = sweeps.build_spec(base_config(), ["lr=1e-4:1e-1:log", "cell=rnn,spectral"], sampler="random",
                             trials=4, seeds=2)
    sweep_id = store.create_sweep(spec.to_dict())
    rng = np.random.default_rng(0)
    for trial in range(4):
        setting = {"train.lr": float(10 ** rng.uniform(-4, -1)), "cell": ("rnn", "spectral")[trial % 2]}
        for seed in spec.seed_values():
            run_id = store.create_run(spec.config_for(setting, seed).to_dict(), sweep_id=sweep_id,
                                      trial=2 * trial + seed, params=setting)
            store.flush(run_id, [(100, 1.0, "val/loss", final_loss(setting["cell"], setting["train.lr"], seed))],
                        heartbeat_step=100)
            set_status(store, run_id, "completed")
    app = run(sweep=str(sweep_id))
    assert not app.exception and not app.error
    table = settings_table(app)
    assert len(table) == 4 and (table["n"] == 2).all()
    objective = json.loads(charts_of(app)["Final val/loss against lr"].proto.spec)
    assert objective["layer"][0]["encoding"]["x"]["scale"]["type"] == "log"  # the range was sampled in log


def test_the_sweeps_runs_open_in_compare_with_their_seeds_grouped(store):
    sweep_id, _ = store_sweep(store)
    app = run(sweep=str(sweep_id))
    ids = ",".join(str(run_id) for run_id in sorted(run.id for run in store.records(sweep_id=sweep_id)))
    assert any(f"(compare?runs={ids}&group=1&" in markdown.value for markdown in app.markdown)


def test_switching_to_a_sweep_that_varies_other_fields_resets_the_chart_controls(store):
    first, _ = store_sweep(store)
    spec = sweeps.build_spec(base_config(), ["task.seq_len=10,20", "cell.hidden_size=8,16"], seeds=1)
    other = store.create_sweep(spec.to_dict())
    for trial, setting in enumerate(spec.settings()):
        run_id = store.create_run(spec.config_for(setting, 0).to_dict(), sweep_id=other, trial=trial, params=setting)
        store.flush(run_id, [(100, 1.0, "val/loss", 0.1 + trial / 100)], heartbeat_step=100)
        set_status(store, run_id, "completed")
    app = run(sweep=str(first))
    app.selectbox(key="sweep_x").set_value("cell").run()
    app.selectbox(key="sweep_watch").set_value(other).run()
    assert not app.exception and not app.error
    assert app.selectbox(key="sweep_x").value in ("task.seq_len", "cell.hidden_size")
    x = app.selectbox(key="sweep_x").value
    assert f"Final val/loss against {x}" in charts_of(app)


def test_a_sweep_of_seeds_only_shows_its_one_setting_and_its_curves(store):
    spec = sweeps.build_spec(base_config(), [], seeds=3)
    sweep_id = store.create_sweep(spec.to_dict())
    for seed in spec.seed_values():
        run_id = store.create_run(spec.config_for({}, seed).to_dict(), sweep_id=sweep_id, trial=seed, params={})
        store.flush(run_id, [(step, 1.0, "val/loss", 0.2 / (1 + step + seed)) for step in STEPS], heartbeat_step=100)
        set_status(store, run_id, "completed")
    app = run(sweep=str(sweep_id))
    assert not app.exception and not app.error
    assert list(charts_of(app)) == ["val/loss: mean over seeds, min-max band"]
    table = settings_table(app)
    assert len(table) == 1 and table["n"].item() == 3
    assert table["mean"].item() == pytest.approx(np.mean([0.2 / (101 + seed) for seed in range(3)]))
