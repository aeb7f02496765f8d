"""Disk (issue 33): a completed run drops its checkpoint, a start whose checkpoints would not fit is refused
in one line, a full disk is one line for a write while reading goes on, and a damaged store is one line at
once, never waited out as a busy store (the CLI's train, the Compare page).

The full disk is a real one: a small tmpfs mounted for the test, which needs root (CI runs as root); where
it cannot be mounted those tests skip and say why. The damage is real too: a store's pages overwritten in
the file, found with SQLite's dbstat table."""
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stability import sweeps
from stability.admission.preflight import DISK_RESERVE_ENV
from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig
from stability.execution import lifecycle
from stability.execution.lifecycle import train_run
from stability.runs.errors import StoreDamaged, StoreFull
from stability.runs.store import RunStore
from stability.training.checkpoints import ResumeError
from stability.workers import scheduler
from stopping import StopAt
from statuses import set_status

ROOT = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 120  # a subprocess that waits a damaged store out (5 minutes) fails the test here


def tiny(steps: int = 6, cell: str = "rnn", hidden: int = 8, **train) -> RunConfig:
    settings = dict(steps=steps, log_every=2, batch_size=4, eval_every=3, eval_examples=8, probe_examples=4)
    settings.update(train)
    return RunConfig(cell=CellConfig(cell, hidden), task=TaskConfig("adding", {"seq_len": 5}),
                     train=TrainConfig(**settings))


def cli(*args, store, env=None, timeout=HANG_GUARD_S):
    """``python -m stability ARGS --store STORE`` in a process of its own."""
    return subprocess.run([sys.executable, "-m", "stability", *args, "--store", str(store)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def one_error_line(result) -> str:
    """The command's stderr, checked to be exactly one ``stability: error:`` line and no traceback."""
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("step ")]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and lines[0].startswith("stability: error: "), result.stderr
    return lines[0]


# ---------------------------------------------------------------------------------------------- checkpoints kept
@pytest.fixture
def any_store(store_location, tmp_path, monkeypatch):
    """A store on SQLite or on the real PostgreSQL server; its checkpoints under tmp_path either way."""
    monkeypatch.setenv("STABILITY_HOME", str(tmp_path / "home"))
    with RunStore(store_location) as opened:
        yield opened


def test_a_completed_run_drops_its_checkpoint_and_a_resumable_one_keeps_it(any_store):
    store = any_store
    completed = train_run(tiny(), store)
    assert completed.status == "completed" and not store.checkpoint_path(completed.run_id).exists()
    stopped = train_run(tiny(), store, hooks=[StopAt(2)])
    assert stopped.status == "stopped" and store.checkpoint_path(stopped.run_id).exists()
    resumed = train_run(tiny(), store, stopped.run_id, resume=True)  # the checkpoint it continued from goes too
    assert resumed.status == "completed" and not store.checkpoint_path(stopped.run_id).exists()
    kept = train_run(tiny(), store, keep_checkpoint=True)  # whoever wants the trained weights asks for them
    assert kept.status == "completed" and store.checkpoint_path(kept.run_id).exists()


def test_a_sweeps_completed_trials_drop_their_checkpoints(store):
    spec = sweeps.build_spec(tiny(4), ["lr=1e-3,1e-2"], seeds=1)
    sweep_id = sweeps.store_sweep(store, spec)
    assert sweeps.work(store, sweep_id) == 2
    runs = store.records(sweep_id=sweep_id)
    assert [run.status for run in runs] == ["completed", "completed"]
    assert not any(store.checkpoint_path(run.id).exists() for run in runs)


def test_the_clis_train_leaves_no_checkpoint_of_a_completed_run(tmp_path):
    store = tmp_path / "runs.db"
    result = cli("train", "--cell", "lstm", "--hidden-size", "64", "--seq-len", "2", "--batch-size", "1",
                 "--steps", "1", "--dtype", "float64", store=store)
    assert result.returncode == 0, result.stderr
    assert "completed" in result.stdout
    assert (tmp_path / "checkpoints").is_dir() and not list((tmp_path / "checkpoints").iterdir())


# ---------------------------------------------------------------------------------------------- room to start
@pytest.fixture
def no_room(tmp_path, monkeypatch):
    """A reserve larger than the whole disk of tmp_path: no new run fits beside it."""
    reserve = shutil.disk_usage(tmp_path).total + 1
    monkeypatch.setenv(DISK_RESERVE_ENV, str(reserve))
    return str(reserve)


def test_a_start_without_room_for_its_checkpoints_is_refused_in_one_line_by_every_start(tmp_path, no_room):
    path = tmp_path / "runs.db"
    result = cli("train", "--cell", "rnn", "--hidden-size", "8", "--steps", "2", store=path)
    assert result.returncode == 2
    line = one_error_line(result)
    assert "not enough free disk" in line and DISK_RESERVE_ENV in line and str(tmp_path / "checkpoints") in line
    with pytest.raises(ConfigError, match="not enough free disk"):  # the queue: the pages' Start, --background
        scheduler.start_run(tiny(), path)
    with RunStore(path) as store:
        with pytest.raises(ConfigError, match="not enough free disk"):
            train_run(tiny(), store)
        with pytest.raises(sweeps.SweepError, match="not enough free disk"):
            sweeps.start_sweep(sweeps.build_spec(tiny(), ["lr=1e-3,1e-2"]), path)
        assert store.records() == [] and store.sweeps() == []  # nothing refused was stored


def test_a_start_on_a_shared_store_is_refused_by_the_disk_of_its_checkpoint_folder(any_store, no_room):
    with pytest.raises(ConfigError, match="not enough free disk") as raised:
        train_run(tiny(), any_store)
    assert str(any_store.home / "checkpoints") in str(raised.value) and any_store.records() == []


def test_the_same_start_with_room_is_taken(any_store, monkeypatch):
    monkeypatch.setenv(DISK_RESERVE_ENV, "0")
    assert train_run(tiny(), any_store).status == "completed"


def test_a_disk_reserve_that_is_no_count_of_bytes_is_one_line(tmp_path):
    result = cli("train", "--cell", "rnn", "--steps", "2", store=tmp_path / "runs.db", env={DISK_RESERVE_ENV: "lots"})
    assert result.returncode == 2 and DISK_RESERVE_ENV in one_error_line(result)


# ---------------------------------------------------------------------------------------------- a full disk
@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs at tmp_path/disk, unmounted at the end; skipped where it cannot be mounted."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4M", "tmpfs", str(folder)],
                             capture_output=True, text=True) if shutil.which("mount") else None
    if mounted is None or mounted.returncode != 0:
        pytest.skip("a full disk needs a small tmpfs, and mounting one needs root: "
                    + (mounted.stderr.strip() if mounted is not None else "no mount command"))
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> None:
    """Write a file into ``folder`` until its disk refuses even a byte more (ENOSPC)."""
    descriptor = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (65536, 4096, 512, 1):
            try:
                while True:
                    os.write(descriptor, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(descriptor)
    assert shutil.disk_usage(folder).free < 65536


def test_a_run_whose_checkpoints_do_not_fit_on_a_real_small_disk_is_refused(small_disk, monkeypatch):
    """LSTM hidden 256, float32, Adam: ~3 MiB a checkpoint, twice that while it is replaced; 4 MiB of disk."""
    monkeypatch.setenv(DISK_RESERVE_ENV, "0")
    result = cli("train", "--cell", "lstm", "--hidden-size", "256", "--steps", "1", store=small_disk / "runs.db")
    assert result.returncode == 2 and "not enough free disk" in one_error_line(result)


def test_on_a_full_disk_every_command_reads_and_a_write_is_one_line(small_disk, monkeypatch):
    monkeypatch.setenv(DISK_RESERVE_ENV, "0")
    path = small_disk / "runs.db"
    with RunStore(path) as store:
        run_id = train_run(tiny(), store).run_id
    fill(small_disk)
    listed = cli("runs", store=path)
    assert listed.returncode == 0 and listed.stderr == "" and f"{run_id} " in listed.stdout
    shown = cli("show", str(run_id), store=path)
    assert shown.returncode == 0 and "completed" in shown.stdout
    exported = cli("export", str(run_id), store=path)
    assert exported.returncode == 0 and "train/loss" in exported.stdout
    trained = cli("train", "--cell", "rnn", "--hidden-size", "8", "--steps", "2", store=path)
    assert trained.returncode == 2 and "disk" in one_error_line(trained)
    with RunStore(path) as store:  # a write: one line naming the full disk; the reads go on
        with pytest.raises(StoreFull) as raised:
            store.create_run(tiny().to_dict())
        message = str(raised.value)
        assert "\n" not in message and "the disk is full" in message and str(small_disk) in message
        assert store.record(run_id).status == "completed"


def test_on_a_full_disk_the_runs_page_still_shows_the_runs(small_disk, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from pages.ui.store import _open_store

    path = small_disk / "runs.db"
    monkeypatch.setenv(DISK_RESERVE_ENV, "0")
    with RunStore(path) as store:
        train_run(tiny(), store)
    fill(small_disk)
    monkeypatch.setenv("STABILITY_STORE", str(path))
    _open_store.clear()
    app = AppTest.from_file(str(ROOT / "pages" / "runs.py"), default_timeout=60).run()
    assert not app.exception and not app.error
    assert len(app.dataframe) == 1 and len(app.dataframe[0].value) == 1


# ---------------------------------------------------------------------------------------------- a damaged store
def damage(path: Path, tables: tuple[str, ...]) -> int:
    """Overwrite every page of ``tables`` (and their indexes) in the store file at ``path`` with garbage, as a
    bad disk or a stray write would; returns how many pages. Skips where SQLite has no dbstat table."""
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every row in the file itself
        try:
            rows = connection.execute("SELECT pageno FROM dbstat WHERE name IN (SELECT name FROM sqlite_schema "
                                      f"WHERE tbl_name IN ({','.join('?' * len(tables))}))", tables).fetchall()
        except sqlite3.OperationalError as error:
            pytest.skip(f"this SQLite has no dbstat table to find a table's pages: {error}")
        size = connection.execute("PRAGMA page_size").fetchone()[0]
    with open(path, "r+b") as file:
        for (page,) in rows:
            file.seek((page - 1) * size)
            file.write(bytes((page * 31 + i * 7) % 256 for i in range(size)))
    return len(rows)


def stored_runs(path: Path, count: int) -> None:
    now = time.time()
    with RunStore(path) as store:
        for _ in range(count):
            run_id = store.create_run(tiny().to_dict())
            store.update_run(run_id, metric="mse", baseline=1 / 6, total_steps=100, step=100)
            store.log(run_id, [(step, now + step, name, 0.5) for step in range(0, 101, 5)
                               for name in ("train/loss", "val/loss", "val/mse", "grad/h0_norm")])
            set_status(store, run_id, "completed")


def test_train_on_a_damaged_store_is_one_line_at_once_not_a_busy_store_waited_out(tmp_path):
    """Its metric pages damaged: the run is made, its first rows meet the damage. A sink that took that
    for a busy store retried for 5 minutes (issue 33: still running after 120 s)."""
    path = tmp_path / "runs.db"
    stored_runs(path, 3)
    assert damage(path, ("metrics", "series", "latest_metrics")) > 0
    result = cli("train", "--cell", "rnn", "--hidden-size", "8", "--seq-len", "5", "--steps", "4",
                 "--batch-size", "2", store=path)
    assert result.returncode != 0
    line = one_error_line(result)
    assert f"{path} is not a readable run store" in line and "malformed" in line
    with pytest.raises(StoreDamaged):  # the error a page or a caller meets: lasting, never waited out
        RunStore(path).metrics(1)


def test_the_compare_page_shows_a_damaged_store_as_its_one_error_line(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from pages.ui.store import _open_store

    path = tmp_path / "runs.db"
    stored_runs(path, 30)
    damage(path, ("latest_metrics",))  # the table of runs reads; their latest values do not
    monkeypatch.setenv("STABILITY_STORE", str(path))
    _open_store.clear()
    app = AppTest.from_file(str(ROOT / "pages" / "compare.py"), default_timeout=60)
    app.query_params["runs"] = "1,2"
    app.run()
    assert not app.exception
    [error] = app.error
    assert str(path) in error.value and "not a readable run store" in error.value and "\n" not in error.value


# ---------------------------------------------------------------------------------------------- sweep trials, resumes
def held_slot(store) -> int:
    """A run claimed by this live process: the store's one slot is held, so a resumed sweep's workers wait."""
    return store.create_run(tiny().to_dict(), claimed={"status": "running", "pid": os.getpid(),
                                                       "host": lifecycle.this_host(), "claim": "held"})


def test_a_sweep_trial_without_room_ends_the_sweep_in_one_line_and_loses_nothing(store, tmp_path, monkeypatch):
    """A sweep's start checks its base; a worker checks each trial it claims (Note [A full disk ends the sweep]):
    without room the trial's run is stopped with one line, the sweep stops, and a resume with room runs it all."""
    monkeypatch.setenv("STABILITY_MAX_RUNS", "1")
    held = held_slot(store)  # the sweep's workers wait: the one trained here is this process's
    sweep_id = sweeps.start_sweep(sweeps.build_spec(tiny(4), ["lr=1e-3,1e-2"]), tmp_path / "runs.db")
    monkeypatch.setenv(DISK_RESERVE_ENV, str(shutil.disk_usage(tmp_path).total + 1))  # the disk fills meanwhile
    assert sweeps.work(store, sweep_id) == 0
    [run] = store.records(sweep_id=sweep_id)
    assert run.status == "stopped" and run.step is None
    assert run.error.startswith("the sweep stopped: not enough free disk") and "\n" not in run.error
    assert store.sweep(sweep_id).status == "stopped"
    assert sweeps.watching.halted(store.records(("stopped",), sweep_id)) == run.error
    from streamlit.testing.v1 import AppTest

    from pages.ui.store import _open_store

    _open_store.clear()
    page = AppTest.from_file(str(ROOT / "pages" / "sweep.py"), default_timeout=60)  # the Sweep page says why
    page.query_params["sweep"] = str(sweep_id)
    page.run()
    assert not page.exception and [f"Sweep #{sweep_id}: {run.error}"] == [w.value for w in page.warning]
    with pytest.raises(ResumeError, match="not enough free disk"):  # the run on its own: the same check
        scheduler.resume_run(run.id, tmp_path / "runs.db")
    monkeypatch.setenv(DISK_RESERVE_ENV, "0")  # room again
    sweeps.resume_sweep(sweep_id, tmp_path / "runs.db")
    set_status(store, held, "completed")
    assert sweeps.work(store, sweep_id) == 2
    assert [run.status for run in store.records(sweep_id=sweep_id)] == ["completed", "completed"]
    assert store.sweep(sweep_id).status == "completed"


def test_a_resume_without_room_for_its_checkpoints_is_refused_in_one_line(store, tmp_path, monkeypatch):
    from stability import access

    stopped = train_run(tiny(), store, hooks=[StopAt(2)])
    monkeypatch.setenv(DISK_RESERVE_ENV, str(shutil.disk_usage(tmp_path).total + 1))
    operator = access.Policy.from_environment("127.0.0.1", {}).visitor(None)
    for resume in (lambda: scheduler.resume_run(stopped.run_id, tmp_path / "runs.db"),  # the CLI's --background
                   lambda: access.resume_run(operator, stopped.run_id, str(tmp_path / "runs.db"))):  # the pages
        with pytest.raises(ResumeError, match="not enough free disk") as raised:
            resume()
        assert "\n" not in str(raised.value) and DISK_RESERVE_ENV in str(raised.value)
    run = store.record(stopped.run_id)
    assert (run.status, run.resumes) == ("stopped", 0) and store.checkpoint_path(run.id).exists()


def test_the_clis_own_resume_without_room_is_one_line_too(store, tmp_path):
    """`stability resume ID` in the foreground trains here; it now checks the room the queue's resume checks
    (before, only the queue's did, and the run trained on towards a full disk)."""
    stopped = train_run(tiny(), store, hooks=[StopAt(2)])
    result = cli("resume", str(stopped.run_id), store=tmp_path / "runs.db",
                 env={DISK_RESERVE_ENV: str(shutil.disk_usage(tmp_path).total + 1)})
    assert result.returncode == 2 and "not enough free disk" in one_error_line(result)
    run = store.record(stopped.run_id)
    assert (run.status, run.resumes) == ("stopped", 0) and store.checkpoint_path(run.id).exists()
