"""The Runs page through Streamlit's AppTest, on a temp store filled directly through RunStore.

No worker process is ever started: every 'running' run has a pid (so reconcile never launches a
worker for it), and Stop goes to a fake scheduler.stop_run.
"""
import io
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from streamlit.delta_generator import DeltaGenerator
from streamlit.testing.v1 import AppTest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.execution import lifecycle
from stability.workers import scheduler
from statuses import set_status

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "pages" / "runs.py"


def add_run(store, cell, status, pid=None, step=40):
    config = RunConfig(cell=CellConfig(cell, 16), task=TaskConfig("adding", {"seq_len": 30}),
                       train=TrainConfig(steps=100))
    run_id = store.create_run(config.to_dict())
    store.update_run(run_id, pid=pid, step=step, total_steps=100, metric="mse")
    set_status(store, run_id, status)
    store.log(run_id, [(s, 100.0 + s, name, 1.0 / (1 + s)) for s in range(0, step + 1, 10)
                       for name in ("train/loss", "val/loss")])
    return run_id


def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid



@pytest.fixture
def three_runs(store):
    """#1 completed, #2 'running' but its worker is gone, #3 running in a live process (this one)."""
    completed = add_run(store, "rnn", "completed", step=100)
    lost = add_run(store, "lstm", "running", pid=dead_pid())
    live = add_run(store, "spectral", "running", pid=os.getpid())
    return completed, lost, live


def run(page=PAGE, **query):
    app = AppTest.from_file(str(page), default_timeout=30)
    for key, value in query.items():
        app.query_params[key] = value
    return app.run()


def select(app, *run_ids):
    """Select rows the way a click does: by position in the table."""
    ids = app.dataframe[0].value["id"].tolist()
    app.session_state["runs_table"] = {"selection": {"rows": [ids.index(run_id) for run_id in run_ids]}}
    return app.run()


def button(app, key):
    return next(b for b in app.button if b.key == key)


def test_table_lists_every_run_and_a_dead_worker_shows_interrupted(store, three_runs):
    app = run()
    assert not app.exception and not app.error
    table = app.dataframe[0].value
    assert table["id"].tolist() == [3, 2, 1]
    assert table["status"].tolist() == ["running", "interrupted", "completed"]
    assert store.record(2, latest=False).status == "interrupted" and store.record(2, latest=False).error == lifecycle.INTERRUPTED_ERROR
    assert table["cell"].tolist() == ["spectral", "lstm", "rnn"] and set(table["task"]) == {"adding"}
    assert table["progress"].tolist() == [0.4, 0.4, 1.0]
    assert table["steps_done"].tolist() == ["40 / 100", "40 / 100", "100 / 100"]
    assert table.loc[table["id"] == 1, "val/loss"].item() == pytest.approx(1 / 101)
    assert table.loc[table["id"] == 2, "error"].item() == lifecycle.INTERRUPTED_ERROR


def test_empty_store_points_to_train(store):
    app = run()
    assert not app.exception and not app.error
    assert "Train" in app.info[0].value
    assert not app.dataframe


def test_delete_needs_the_confirm_step(store, three_runs):
    app = select(run(), 1)
    button(app, "runs_delete").click().run()
    assert not app.exception
    assert 1 in [r.id for r in store.records(latest=False)]  # only asked
    assert any("Delete #1" in warning.value for warning in app.warning)
    button(app, "runs_delete_confirm").click().run()
    assert not app.exception
    assert [r.id for r in store.records(latest=False)] == [3, 2]
    assert app.dataframe[0].value["id"].tolist() == [3, 2]
    assert "Deleted #1" in app.success[0].value
    assert store.metrics(2).shape[0] > 0  # the other runs keep their rows


def test_cancel_keeps_the_runs(store, three_runs):
    app = select(run(), 1, 2)
    button(app, "runs_delete").click().run()
    button(app, "runs_delete_cancel").click().run()
    assert not app.exception
    assert [r.id for r in store.records(latest=False)] == [3, 2, 1]
    assert not [b for b in app.button if b.key == "runs_delete_confirm"]


def test_a_training_run_is_not_deleted(store, three_runs):
    app = select(run(), 3)
    button(app, "runs_delete").click().run()
    assert any("still training" in warning.value for warning in app.warning)
    assert button(app, "runs_delete_confirm").disabled
    assert 3 in [r.id for r in store.records(latest=False)]


def test_stop_calls_the_runner_for_the_selected_active_runs(store, three_runs, monkeypatch):
    stopped = []

    def fake_stop(run_id, store_path=None, timeout=5.0):
        stopped.append((run_id, store_path))
        return "stopped"

    monkeypatch.setattr(scheduler, "stop_run", fake_stop)
    app = run()
    assert button(app, "runs_stop").disabled  # nothing selected
    app = select(app, 1)
    assert button(app, "runs_stop").disabled  # a finished run cannot be stopped
    app = select(app, 1, 3)
    button(app, "runs_stop").click().run()
    assert not app.exception
    assert stopped == [(3, store.url)]
    assert "#3 stopped" in app.success[0].value


def test_export_csv_holds_every_metric_row_of_the_selected_runs(store, three_runs, monkeypatch):
    downloads = []
    original = DeltaGenerator.download_button

    def recording(self, label, data, *args, **kwargs):
        downloads.append(data)
        return original(self, label, data, *args, **kwargs)

    monkeypatch.setattr(DeltaGenerator, "download_button", recording)  # the page draws it in a row container
    app = select(run(), 1, 3)
    assert not app.exception
    csv = pd.read_csv(io.BytesIO(downloads[-1]()))
    expected = pd.concat([store.metrics(1), store.metrics(3)], ignore_index=True)
    assert list(csv.columns) == ["run_id", "step", "wall_time", "name", "value"]
    pd.testing.assert_frame_equal(csv, expected, check_dtype=False)


@pytest.fixture
def two_pages(tmp_path):
    """A two-page app like app.py's (st.switch_page needs st.navigation), next to a link to pages/."""
    (tmp_path / "pages").symlink_to(ROOT / "pages")
    (tmp_path / "app.py").write_text(
        "import streamlit as st\n"
        "st.navigation([st.Page('pages/runs.py', title='Runs'), st.Page('pages/compare.py', title='Compare')]).run()\n")
    return tmp_path / "app.py"


def test_open_in_compare_switches_page_with_the_selection(store, three_runs, two_pages):
    app = select(run(two_pages), 1, 3)
    button(app, "runs_compare").click().run()
    assert not app.exception
    assert app.title[0].value == "Compare"
    assert app.query_params["runs"] in ("1,3", ["1,3"])
    assert app.dataframe[0].value["id"].tolist() == [3, 2, 1]
    assert len(app.get("vega_lite_chart")) >= 1


def test_open_in_compare_replaces_an_earlier_compare_selection(store, three_runs, two_pages):
    app = run(two_pages)
    app.switch_page("pages/compare.py").run()
    app.session_state["cmp_table"] = {"selection": {"rows": [1]}}  # run 2
    app.run()
    assert app.title[0].value == "Compare" and app.query_params["runs"] in ("2", ["2"])
    app.switch_page("pages/runs.py").run()
    app = select(app, 1, 3)
    button(app, "runs_compare").click().run()
    assert not app.exception
    assert app.query_params["runs"] in ("1,3", ["1,3"])


def test_a_store_path_that_is_a_folder_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.setenv("STABILITY_STORE", str(tmp_path))
    app = run()
    assert not app.exception
    assert len(app.error) == 1 and "is a directory" in app.error[0].value


def test_a_run_whose_stored_config_no_longer_parses_is_listed_with_the_reason(store, three_runs):
    old = store.create_run({"cell": {"name": "rnn", "hidden_size": 16, "retired_option": 1},
                            "task": {"name": "adding"}, "train": {"steps": 100}}, name="from an old version")
    set_status(store, old, "completed")
    app = run()
    assert not app.exception and not app.error
    table = app.dataframe[0].value
    row = table[table["id"] == old].iloc[0]
    assert (row["cell"], row["task"], row["status"]) == ("rnn", "adding", "completed")
    assert "retired_option" in row["error"]
    def reason_shown(app):
        return any(f"#{old} completed" in caption.value and "retired_option" in caption.value
                   for caption in app.caption)

    assert not reason_shown(app)  # the caption under the table is for selected rows
    assert reason_shown(select(app, old))



def test_resume_is_offered_for_runs_that_can_continue_and_says_why_one_cannot(store, three_runs):
    completed, lost, live = three_runs
    app = select(run(), completed, live)
    assert button(app, "runs_resume").disabled  # a completed and a running run: nothing to resume
    app = select(app, lost)  # interrupted (its worker is gone) but it never wrote a checkpoint
    assert not button(app, "runs_resume").disabled
    button(app, "runs_resume").click()
    app.run()
    assert not app.exception
    assert any(f"run {lost} has no checkpoint to resume from" in s.value for s in app.success)
    assert store.record(lost, latest=False).status == "interrupted" and store.record(lost, latest=False).resumes == 0


def test_a_sweeps_runs_show_their_sweep_and_varied_values(store):
    plain = add_run(store, "rnn", "completed", step=100)
    sweep_id = store.create_sweep({"base": {}, "vary": []}, name="lr x cell")
    config = RunConfig(cell=CellConfig("lstm", 16), task=TaskConfig("adding", {"seq_len": 30}),
                       train=TrainConfig(steps=100, lr=0.01))
    tagged = store.create_run(config.to_dict(), sweep_id=sweep_id, trial=4, params={"cell": "lstm", "train.lr": 0.01})
    set_status(store, tagged, "completed")
    app = AppTest.from_file(str(PAGE), default_timeout=30).run()
    assert not app.exception
    table = app.dataframe[0].value.set_index("id")
    assert table.loc[tagged, "sweep"] == f"sweep?sweep={sweep_id}" and table.loc[tagged, "varied"] == "cell=lstm lr=0.01"
    assert pd.isna(table.loc[plain, "sweep"]) and table.loc[plain, "varied"] == ""
