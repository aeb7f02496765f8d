"""What every page shares (pages/ui/, app.py): the store is the server's, never the URL's; a bad link
is one warning line and the defaults; a broken store is one error line; opening pages leaks nothing."""
import os
import sqlite3
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from stability import cells
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from statuses import set_status

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "pages"
HUGE = "1180591620717411303424"  # 2**70: no SQLite integer


def run(page, **query):
    app = AppTest.from_file(str(page), default_timeout=60)
    for key, value in query.items():
        app.query_params[key] = str(value)
    return app.run()


def add_run(store, status="completed", cell="rnn", pid=None):
    """A finished (or running) run with a few metric rows, so every page has something to draw."""
    config = RunConfig(CellConfig(cell, 16), TaskConfig("adding", {"seq_len": 20}), TrainConfig(steps=100))
    run_id = store.create_run(config.to_dict())
    store.update_run(run_id, metric="mse", baseline=1 / 6, baseline_label="always predict 1", total_steps=100,
                     step=100, pid=pid)
    set_status(store, run_id, status)
    now = time.time()
    store.log(run_id, [(step, now + step, name, value) for step in (0, 50, 100)
                       for name, value in (("train/loss", 0.2), ("val/loss", 0.21), ("val/mse", 0.21),
                                           ("grad/h0_norm", 1e-5), ("sv/min", 0.9), ("sv/max", 1.1))])
    return run_id


@pytest.fixture
def builds(monkeypatch):
    """The hidden sizes of every cell the pages build."""
    sizes = []
    original = cells.build

    def recording(name, input_size, hidden_size, **options):
        sizes.append(hidden_size)
        return original(name, input_size, hidden_size, **options)

    monkeypatch.setattr(cells, "build", recording)
    return sizes


BAD_LINKS = {
    "train": [{"run": HUGE}, {"run": "-1"}, {"run": "abc"}, {"run": "999"}, {"lr": "inf"}, {"lr": "nan"},
              {"lr": "-1"}, {"hidden": "40000"}, {"hidden": "1e3"}, {"seq_len": "0"}, {"steps": "0"},
              {"seed": "-5"}, {"cell": "nope"}, {"task": "nope"}],
    "race": [{"runs": "1,abc"}, {"runs": HUGE}, {"runs": "-1"}, {"lr": "inf"}, {"hidden": "40000"},
             {"seq_len": "0"}, {"cells": "rnn,nope"}],
    "compare": [{"runs": "1,abc"}, {"runs": HUGE}, {"runs": "-1"}, {"smooth": "nan"}, {"smooth": "5"},
                {"smooth": "inf"}, {"log": "x"}, {"x": "bad"}, {"metrics": "val/loss,nope"}],
    "gradient_flow": [{"hidden": "40000"}, {"T": "0"}, {"T": "nan"}, {"seed": "-1"}, {"seed": HUGE},
                      {"cell": "nope"}],
    "sweep": [{"sweep": HUGE}, {"sweep": "-1"}, {"sweep": "abc"}, {"sweep": "999"}, {"refresh": "sideways"}],
}


@pytest.mark.parametrize("page, query", [(page, query) for page, queries in BAD_LINKS.items() for query in queries],
                         ids=lambda value: value if isinstance(value, str) else ",".join(map("=".join, value.items())))
def test_a_bad_link_is_one_warning_line_and_the_defaults(store, builds, page, query):
    add_run(store)
    app = run(PAGES / f"{page}.py", **query)
    assert not app.exception
    assert not app.error
    [warning] = app.warning
    key = next(iter(query))
    assert warning.value.startswith("Ignored in this link:") and key in warning.value and "\n" not in warning.value
    assert all(size <= 2048 for size in builds)  # ?hidden=40000 builds no 40000-unit model


def test_a_link_within_the_limits_gives_no_warning(store):
    add_run(store)
    app = run(PAGES / "train.py", run=1, hidden=24, lr="0.005", seq_len=150, steps=500, seed=3)
    assert not app.exception and not app.warning and not app.error
    assert app.number_input(key="train_hidden").value == 24


def test_the_store_is_never_chosen_by_the_url(store, tmp_path):
    """?store= is ignored: nothing is created at the path it names, and the page shows STABILITY_STORE's runs."""
    add_run(store)
    elsewhere = tmp_path / "elsewhere" / "other.db"
    for page in ("train", "race", "compare", "runs", "sweep"):
        app = run(PAGES / f"{page}.py", store=elsewhere)
        assert not app.exception and not app.error and not app.warning
    assert not elsewhere.parent.exists()
    app = run(PAGES / "train.py", store=elsewhere)
    assert app.selectbox(key="train_watch").options == ["#1 · rnn on adding"]
    for source in [ROOT / "app.py", *PAGES.glob("*.py")]:
        text = source.read_text()
        assert 'query_params["store"]' not in text and 'query_params.get("store"' not in text, source


def test_the_sidebar_and_the_page_read_the_servers_store(store, tmp_path):
    running = add_run(store, status="running", pid=os.getpid())
    app = run(ROOT / "app.py", store=tmp_path / "other.db")
    assert not app.exception and not app.error
    assert app.sidebar.get("progress")[0].proto.text == f"#{running} rnn on adding · running"
    assert app.selectbox(key="train_watch").value == running
    assert not (tmp_path / "other.db").exists()


def test_the_server_owner_may_name_the_store_after_double_dash(store, tmp_path, monkeypatch):
    """``streamlit run app.py -- --store PATH`` gives the script ``sys.argv == ['app.py', '--store', PATH]``."""
    from pages.ui.store import store_path
    from stability.runs.store import RunStore

    chosen = tmp_path / "chosen.db"
    with RunStore(chosen) as other:
        add_run(other, cell="lstm")
    monkeypatch.setattr("sys.argv", ["app.py", "--store", str(chosen)])
    assert store_path() == str(chosen)
    app = run(ROOT / "app.py")
    assert not app.exception and not app.error
    assert app.selectbox(key="train_watch").options == ["#1 · lstm on adding"]


def open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts open files through /proc")
def test_opening_pages_many_times_leaks_no_file_descriptors(store, tmp_path):
    add_run(store)
    for page in ("train", "compare", "runs"):  # warm up: the store is opened once per server process
        run(PAGES / f"{page}.py")
    before = open_fds()
    for number in range(12):
        run(PAGES / "train.py", run=number, lr=f"1e-{number % 5 + 1}", store=tmp_path / f"url-s{number}.db")
        run(PAGES / "compare.py", runs=f"1,{number}", smooth=str(number / 20), store=tmp_path / f"url-c{number}.db")
        run(PAGES / "runs.py", store=tmp_path / f"url-r{number}.db")
    assert open_fds() - before <= 2
    assert not list(tmp_path.glob("url-*"))


def corrupt(path, how):
    if how == "random bytes":
        path.write_bytes(os.urandom(64 * 1024))
    else:  # a real SQLite header, then garbage: it opens, and a query fails
        data = bytearray(path.read_bytes())
        data[4096:] = os.urandom(len(data) - 4096)
        path.write_bytes(bytes(data))


@pytest.fixture
def broken_store(tmp_path, monkeypatch):
    from stability.runs.store import RunStore

    path = tmp_path / "runs.db"
    with RunStore(path) as store:
        for _ in range(30):
            add_run(store)
    with sqlite3.connect(path) as connection:  # every row in the file itself, none left in the WAL
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    monkeypatch.setenv("STABILITY_STORE", str(path))
    return path


@pytest.mark.parametrize("how", ["random bytes", "garbage after the header"])
@pytest.mark.parametrize("page", ["app.py", "pages/train.py", "pages/race.py", "pages/compare.py", "pages/runs.py",
                                  "pages/sweep.py"])
def test_a_corrupted_store_is_one_error_line_naming_the_file(broken_store, page, how):
    from pages.ui.store import _open_store

    _open_store.clear()
    corrupt(broken_store, how)
    app = run(ROOT / page, runs="1,2")
    assert not app.exception
    [error] = app.error
    assert str(broken_store) in error.value and "\n" not in error.value


def test_a_store_that_is_not_sqlite_raises_what_the_pages_catch(tmp_path):
    from pages.ui.store import STORE_ERRORS
    from stability.runs.store import RunStore

    path = tmp_path / "runs.db"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(STORE_ERRORS):
        RunStore(path).records(latest=False)
    assert issubclass(sqlite3.DatabaseError, STORE_ERRORS)


def test_a_store_url_is_shown_with_its_password_masked():
    from pages.ui.store import shown_location

    assert shown_location("postgresql://lab:secret@gpu-server:5432/stability") == \
        "postgresql://lab:***@gpu-server:5432/stability"
    assert shown_location("/tmp/runs.db") == "/tmp/runs.db"
    assert "secret" not in shown_location("postgresql://lab:secret@[bad")


def test_the_sidebar_shows_a_running_sweep_with_a_link_to_its_page(store):
    from stability.sweeps import build_spec

    spec = build_spec(RunConfig(CellConfig("rnn", 16), TaskConfig("adding", {"seq_len": 20}), TrainConfig(steps=100)),
                      ["lr=1e-3,1e-2"], seeds=2)
    sweep_id = store.create_sweep(spec.to_dict())
    done = store.create_run(spec.config_for({"train.lr": 1e-3}, 0).to_dict(), sweep_id=sweep_id, trial=0,
                            params={"train.lr": 1e-3})
    set_status(store, done, "completed")
    app = run(ROOT / "app.py")
    assert not app.exception
    texts = [bar.proto.text for bar in app.sidebar.get("progress")]
    assert f"[Sweep #{sweep_id}](sweep?sweep={sweep_id}) · 1/4 runs" in texts
    store.update_sweep(sweep_id, status="completed")
    app = run(ROOT / "app.py")
    assert not [bar for bar in app.sidebar.get("progress") if "Sweep" in bar.proto.text]
