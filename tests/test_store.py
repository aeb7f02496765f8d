import dataclasses
import io
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import text

from stability.runs.store import SCHEMA_VERSION, RunNotFound, RunStore, StoreError, SweepNotFound
from stability.runs.status import STATUSES, SWEEP_STATUSES, TERMINAL

from store_files import corrupt, raw_connection, raw_rows, schema_layout, statements_while, write_order, write_v4_store
from statuses import set_status

REPO = Path(__file__).resolve().parent.parent
CONFIG = {"cell": {"name": "spectral", "hidden_size": 8, "options": {}},
          "task": {"name": "adding", "options": {"seq_len": 10}},
          "train": {"steps": 5}, "name": "tiny"}


@pytest.fixture
def store(store_location):
    """A fresh store on each backend: an SQLite file, a PostgreSQL database (conftest.store_location)."""
    with RunStore(store_location) as store:
        yield store


@pytest.fixture
def sqlite_store(tmp_path):
    """For what only an SQLite file has (WAL, its file locks, its pages)."""
    with RunStore(tmp_path / "runs.db") as store:
        yield store


def raw_count(store, table, run_id):
    return raw_rows(store, f"SELECT COUNT(*) FROM {table} WHERE run_id = :id", id=run_id)[0][0]


def start_writer(db, run_id, body):
    """A separate Python process that opens its own RunStore on ``db`` (a path or URL) and runs ``body``."""
    code = f"from stability.runs.store import RunStore\nstore = RunStore({str(db)!r})\nrun_id = {run_id}\n"
    code += textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)


# ----------------------------------------------------------------------------- runs
def test_create_and_read_run(store):
    run_id = store.create_run(CONFIG)
    run = store.record(run_id, latest=False)
    assert run.raw_config == CONFIG
    assert run.name == "tiny" and run.status == "queued"
    assert abs(run.created_at - time.time()) < 60
    assert run.stop_requested is False
    assert {"started_at", "finished_at", "device", "pid", "heartbeat", "error", "total_params",
            "recurrent_params", "baseline", "baseline_label", "metric", "step", "total_steps"} <= {
        field.name for field in dataclasses.fields(run)}
    assert store.record(store.create_run(CONFIG, name="other"), latest=False).name == "other"


def test_update_run_coerces_numpy_and_rejects_unknown_fields(store):
    run_id = store.create_run(CONFIG)
    store.update_run(run_id, pid=np.int64(123), total_params=np.int32(456), baseline=np.float32(0.5),
                     device="cpu", metric="mse", baseline_label="predict 1")
    run = store.record(run_id, latest=False)
    assert (run.pid, run.total_params, run.baseline, run.device) == (123, 456, 0.5, "cpu")
    assert type(run.pid) is int
    with pytest.raises(ValueError, match="unknown run field.*colour.*valid: name"):
        store.update_run(run_id, colour="red")
    for fields in ({"status": "running"}, {"status": "done"}):  # a status is the lifecycle's (compare_and_set)
        with pytest.raises(ValueError, match="status is written only by stability.execution.lifecycle"):
            store.update_run(run_id, **fields)
        with pytest.raises(ValueError, match="status is written only by stability.execution.lifecycle"):
            store.create_run(CONFIG, fields=fields)
    assert not hasattr(store, "set_status") and store.record(run_id, latest=False).status == "queued"


def test_a_run_is_created_in_one_insert_with_its_fields(store):
    made = []
    sent = statements_while(store, lambda: made.append(store.create_run(
        CONFIG, owner="ann", fields={"host": "gpu-1", "total_steps": np.int64(7)})))
    run_id = made[0]
    writes = [statement for statement in sent if statement.split()[0] in ("INSERT", "UPDATE", "DELETE")]
    assert len(writes) == 1 and writes[0].startswith("INSERT INTO runs")
    record = store.record(run_id, latest=False)
    assert (record.host, record.total_steps, record.owner, record.status) == ("gpu-1", 7, "ann", "queued")
    with pytest.raises(ValueError, match="unknown run field.*colour"):
        store.create_run(CONFIG, fields={"colour": "red"})


def test_status_transitions_set_timestamps(store):
    run_id = store.create_run(CONFIG)
    set_status(store, run_id, "running")
    run = store.record(run_id, latest=False)
    assert run.status == "running" and run.started_at is not None and run.finished_at is None
    started = run.started_at
    set_status(store, run_id, "failed", error="ValueError: boom")
    run = store.record(run_id, latest=False)
    assert run.status == "failed" and run.error == "ValueError: boom"
    assert run.finished_at >= started and run.started_at == started
    for status in TERMINAL:
        other = store.create_run(CONFIG)
        set_status(store, other, status)
        assert store.record(other, latest=False).finished_at is not None
    with pytest.raises(ValueError, match="unknown run status 'finished'"):
        set_status(store, run_id, "finished")


def test_a_record_without_its_latest_values_is_one_query_of_the_run(store):
    run_id = store.create_run(CONFIG)
    store.flush(run_id, [(0, 1.0, "train/loss", 0.5)], heartbeat_step=0)
    sent = statements_while(store, lambda: store.record(run_id, latest=False))
    cheap = store.record(run_id, latest=False)
    assert len([statement for statement in sent if statement.startswith("SELECT")]) == 1
    full = store.record(run_id)
    assert cheap.latest == {} and full.latest == {"train/loss": 0.5}
    assert cheap == dataclasses.replace(full, latest=cheap.latest)


def test_stop_flag_and_heartbeat(store):
    run_id, other = store.create_run(CONFIG), store.create_run(CONFIG)
    assert store.stop_requested(run_id) is False
    store.request_stop(run_id)
    assert store.stop_requested(run_id) is True and store.stop_requested(other) is False
    before = time.time()
    store.flush(run_id, [], heartbeat_step=7)
    run = store.record(run_id, latest=False)
    assert run.heartbeat >= before and run.step == 7
    store.flush(run_id, [])
    again = store.record(run_id, latest=False)
    assert again.step == 7 and again.heartbeat >= run.heartbeat


def test_records_newest_first_with_cell_and_task(store):
    first = store.create_run(CONFIG)
    second = store.create_run({**CONFIG, "cell": {"name": "rnn"}, "task": {"name": "copy"}})
    store.update_run(first, pid=42, total_steps=5)
    records = store.records(latest=False)
    assert [r.id for r in records] == [second, first]
    assert [r.cell for r in records] == ["rnn", "spectral"] and [r.task for r in records] == ["copy", "adding"]
    assert (records[1].pid, records[1].total_steps) == (42, 5)
    assert records[0].pid is None


def test_empty_store_reads(store):
    assert store.records(latest=False) == [] and store.records() == []
    run_id = store.create_run(CONFIG)
    assert store.metrics(run_id).empty and list(store.metrics(run_id).columns) == [
        "run_id", "step", "wall_time", "name", "value"]
    assert store.series(run_id, "sv/spectrum").empty
    assert store.latest(run_id) == {}
    assert store.metrics_many([]).empty


# --------------------------------------------------------------------------- sweeps
SPEC = {"base": CONFIG, "vary": [{"field": "train.lr", "values": [0.1, 0.01]}], "seeds": 2, "sampler": "grid"}


def test_pruned_is_a_terminal_status(store):
    assert "pruned" in STATUSES and "pruned" in TERMINAL
    run_id = store.create_run(CONFIG)
    set_status(store, run_id, "running")
    store.log(run_id, [(step, 0.0, "val/loss", 1.0 / (step + 1)) for step in range(3)])
    set_status(store, run_id, "pruned")
    run = store.record(run_id, latest=False)
    assert run.status == "pruned" and run.finished_at >= run.started_at
    assert len(store.metrics(run_id)) == 3  # its rows are kept
    assert store.active_runs() == []


def test_a_trial_run_carries_its_sweep_trial_params_and_host(store):
    sweep_id = store.create_sweep(SPEC)
    plain = store.create_run(CONFIG)
    trial = store.create_run(CONFIG, sweep_id=sweep_id, trial=np.int64(3), params={"cell": "rnn", "train.lr": 0.001})
    run = store.record(trial, latest=False)
    assert (run.sweep_id, run.trial, run.params) == (sweep_id, 3, {"cell": "rnn", "train.lr": 0.001})
    assert type(run.trial) is int and run.host is None
    run = store.record(plain, latest=False)
    assert (run.sweep_id, run.trial, run.params) == (None, None, {})
    store.update_run(plain, host="gpu-box-2", sweep_id=sweep_id, trial=7, params={"train.lr": np.float64(0.5)})
    run = store.record(plain, latest=False)
    assert (run.host, run.sweep_id, run.trial, run.params) == ("gpu-box-2", sweep_id, 7, {"train.lr": 0.5})
    store.update_run(plain, sweep_id=None, trial=None, params=None, host=None)
    run = store.record(plain, latest=False)
    assert (run.host, run.sweep_id, run.trial, run.params) == (None, None, None, {})
    with pytest.raises(ValueError, match="params must be a dict; got list"):
        store.update_run(plain, params=[1, 2])
    with pytest.raises(ValueError, match="params must be a dict"):
        store.create_run(CONFIG, params="lr=1")
    by_id = {r.id: r for r in store.records(latest=False)}
    assert type(by_id[trial].trial) is int and type(by_id[trial].sweep_id) is int
    assert by_id[trial].trial == 3 and by_id[trial].sweep_id == sweep_id
    assert by_id[plain].trial is None and by_id[plain].sweep_id is None


def test_sweeps_are_created_read_listed_and_updated(store):
    first = store.create_sweep(SPEC, name="lr check")
    second = store.create_sweep({**SPEC, "seeds": 3}, study="my-study")
    sweep = store.sweep(first)
    assert sweep.spec == SPEC and sweep.name == "lr check" and sweep.study == f"stability-sweep-{first}"
    assert sweep.status == "running" and sweep.status in SWEEP_STATUSES
    assert abs(sweep.created_at - time.time()) < 60 and sweep.finished_at is None
    assert sweep.workers is None and sweep.stop_requested is False
    assert store.sweep(second).study == "my-study" and store.sweep(second).name == ""
    store.update_sweep(first, status="stopped", workers=np.int64(2), stop_requested=True, finished_at=12.5,
                       name="renamed")
    sweep = store.sweep(first)
    assert (sweep.status, sweep.workers, sweep.stop_requested, sweep.finished_at, sweep.name) == (
        "stopped", 2, True, 12.5, "renamed")
    assert type(sweep.workers) is int
    store.update_sweep(first, stop_requested=False, finished_at=None)
    assert store.sweep(first).stop_requested is False and store.sweep(first).finished_at is None
    with pytest.raises(ValueError, match="unknown sweep field.*colour.*valid: name"):
        store.update_sweep(first, colour="red")
    with pytest.raises(ValueError, match="unknown sweep status 'done'; valid: running, stopped, completed"):
        store.update_sweep(first, status="done")
    with pytest.raises(ValueError, match="spec must be a dict"):
        store.create_sweep(["not", "a", "dict"])
    assert [sweep.id for sweep in store.sweeps()] == [second, first]


def test_sweep_counts_equal_a_pandas_count_of_its_runs(store):
    rng = np.random.default_rng(0)
    sweep_ids = [store.create_sweep(SPEC) for _ in range(3)]
    for number in range(40):
        sweep_id = [None, *sweep_ids][rng.integers(4)]
        run_id = store.create_run(CONFIG, sweep_id=sweep_id, trial=number, params={"train.lr": 0.1})
        set_status(store, run_id, STATUSES[rng.integers(len(STATUSES))])
    frame = pd.DataFrame([(r.sweep_id, r.status) for r in store.records(latest=False)],
                         columns=["sweep_id", "status"]).astype({"sweep_id": "Int64"})
    expected = frame.dropna(subset=["sweep_id"]).groupby(["sweep_id", "status"]).size()
    listed = store.sweeps()
    assert [sweep.id for sweep in listed] == sorted(sweep_ids, reverse=True)
    for sweep in listed:
        counts = expected.loc[sweep.id].to_dict() if sweep.id in expected.index.get_level_values(0) else {}
        assert sweep.counts == counts
        assert sweep == store.sweep(sweep.id)  # one sweep read alone: the same record, its counts too
    empty = store.create_sweep(SPEC)
    assert store.sweeps()[0].id == empty and store.sweeps()[0].counts == {}


@pytest.mark.parametrize("sweep_id", [99, -1, "abc", 2**70])
def test_an_unknown_sweep_is_one_line(store, sweep_id):
    store.create_sweep(SPEC)
    for call in (lambda: store.sweep(sweep_id), lambda: store.update_sweep(sweep_id, status="stopped")):
        with pytest.raises(SweepNotFound) as info:
            call()
        assert str(info.value) == f"no sweep with id {sweep_id} in {store.location}"
    assert issubclass(SweepNotFound, ValueError)


# -------------------------------------------------------------------------- metrics
def test_metrics_round_trip_and_filters(store):
    run_id, other = store.create_run(CONFIG), store.create_run(CONFIG)
    rows = [(step, 100.0 + step, name, step * 10 + k) for step in range(5)
            for k, name in enumerate(["train/loss", "grad/h0_norm"])]
    store.log(run_id, rows)
    store.log(other, [(0, 1.0, "train/loss", -1.0)])
    frame = store.metrics(run_id)
    assert list(frame.itertuples(index=False, name=None)) == [(run_id, *row) for row in rows]
    assert frame["step"].is_monotonic_increasing
    loss = store.metrics(run_id, names=["train/loss"])
    assert list(loss["value"]) == [0.0, 10.0, 20.0, 30.0, 40.0]
    both = store.metrics_many([run_id, other], names=["train/loss"])
    assert list(both["run_id"]) == [run_id] * 5 + [other] and both["value"].iloc[-1] == -1.0
    assert store.latest(run_id) == {"train/loss": 40.0, "grad/h0_norm": 41.0}
    store.log(run_id, [(2, 0.0, "grad/h0_norm", -5.0)])  # written last, but not the highest step
    assert store.latest(run_id)["grad/h0_norm"] == 41.0


def test_since_step_returns_only_new_rows(store):
    run_id = store.create_run(CONFIG)
    store.log(run_id, [(step, 0.0, "train/loss", step) for step in range(3)])
    seen = store.metrics(run_id)
    last = int(seen["step"].max())
    assert store.metrics(run_id, since_step=last).empty
    store.log(run_id, [(step, 0.0, "train/loss", step) for step in range(3, 6)])
    new = store.metrics(run_id, since_step=last)
    assert list(new["step"]) == [3, 4, 5]
    assert list(store.metrics(run_id, names=["train/loss"], since_step=4)["step"]) == [5]
    store.flush(run_id, [], [(step, 0.0, "sv/spectrum", i, i) for step in range(4) for i in range(2)])
    assert list(store.series(run_id, "sv/spectrum", since_step=2)["step"]) == [3, 3]


def test_nan_and_inf_round_trip(store):
    run_id = store.create_run(CONFIG)
    values = [math.nan, math.inf, -math.inf, 1e-300, 0.5]
    store.log(run_id, [(i, 0.0, "train/loss", v) for i, v in enumerate(values)])
    store.flush(run_id, [], [(0, 0.0, "grad/h_t_norm", i, v) for i, v in enumerate(values)])
    np.testing.assert_array_equal(store.metrics(run_id)["value"].to_numpy(), values)
    np.testing.assert_array_equal(store.series(run_id, "grad/h_t_norm")["value"].to_numpy(), values)
    store.log(run_id, [(9, 0.0, "val/loss", math.nan)])
    only_nan = store.metrics(run_id, names=["val/loss"])["value"]  # all NULL: still a float column
    assert only_nan.dtype == np.float64 and only_nan.isna().all()
    latest = store.latest(run_id)
    assert math.isnan(latest["val/loss"]) and latest["train/loss"] == 0.5


def test_series_round_trip(store):
    run_id = store.create_run(CONFIG)
    rows = [(step, 1.0 + step, "grad/h_t_norm", t, 10.0 ** -t) for step in (0, 5) for t in range(4)]
    store.flush(run_id, [], rows)
    store.flush(run_id, [], [(0, 1.0, "sv/spectrum", 0, 1.0)])
    frame = store.series(run_id, "grad/h_t_norm")
    assert list(frame.columns) == ["run_id", "step", "wall_time", "name", "index", "value"]
    assert list(frame.itertuples(index=False, name=None)) == [(run_id, *row) for row in rows]


def test_flush_writes_scalars_series_and_heartbeat_together(store):
    run_id = store.create_run(CONFIG)
    store.flush(run_id, [(3, 1.0, "train/loss", 0.1)], [(3, 1.0, "sv/spectrum", 0, 1.0)], heartbeat_step=3)
    assert len(store.metrics(run_id)) == 1 and len(store.series(run_id, "sv/spectrum")) == 1
    run = store.record(run_id, latest=False)
    assert run.step == 3 and run.heartbeat is not None
    with pytest.raises(ValueError):  # a bad row rolls the whole flush back
        store.flush(run_id, [(4, 1.0, "train/loss", 0.2)], [(4, 1.0, "sv/spectrum", 0, "not a number")], 4)
    assert len(store.metrics(run_id)) == 1 and store.record(run_id, latest=False).step == 3


def test_unknown_run_raises_one_line(store):
    store.create_run(CONFIG)
    calls = [lambda: store.record(99, latest=False), lambda: store.update_run(99, pid=1),
             lambda: store.discard_after(99, 0), lambda: store.request_stop(99), lambda: store.stop_requested(99),
             lambda: store.log(99, []), lambda: store.flush(99, [], []), lambda: store.record(99),
             lambda: store.metrics(99), lambda: store.series(99, "x"), lambda: store.latest(99),
             lambda: store.delete_run(99), lambda: store.export_csv(99, io.StringIO())]
    for call in calls:
        with pytest.raises(RunNotFound) as info:
            call()
        assert str(info.value) == f"no run with id 99 in {store.location}"
    assert issubclass(RunNotFound, ValueError)


# ------------------------------------------------------------------ delete / export
def test_delete_run_removes_rows_and_checkpoint(store):
    run_id, keep = store.create_run(CONFIG), store.create_run(CONFIG)
    for rid in (run_id, keep):
        store.flush(rid, [(0, 0.0, "train/loss", 1.0)], [(0, 0.0, "sv/spectrum", 0, 1.0)])
    checkpoint = store.checkpoint_path(run_id)
    assert checkpoint == store.home / "checkpoints" / f"run-{run_id}.pt" and checkpoint.parent.is_dir()
    checkpoint.write_bytes(b"weights")
    for rid in (run_id, keep):
        set_status(store, rid, "completed")  # a queued or running run is not deleted (Note [Guarded delete])
    store.delete_run(run_id)
    assert not checkpoint.exists()
    with pytest.raises(RunNotFound):
        store.record(run_id, latest=False)
    assert raw_count(store, "metrics", run_id) == 0 and raw_count(store, "series", run_id) == 0
    assert raw_count(store, "metrics", keep) == 1 and raw_count(store, "series", keep) == 1
    assert [r.id for r in store.records(latest=False)] == [keep]
    store.delete_run(keep)  # no checkpoint file: fine


def test_export_csv_to_path_and_buffer(store, tmp_path):
    run_id = store.create_run(CONFIG)
    rows = [(0, 10.5, "train/loss", 0.25), (0, 10.5, "sv/max", math.inf), (1, 11.5, "train/loss", math.nan)]
    store.log(run_id, rows)
    store.flush(run_id, [], [(0, 10.5, "sv/spectrum", 0, 3.0)])  # not part of the scalar export
    buffer = io.StringIO()
    store.export_csv(run_id, buffer)
    assert buffer.getvalue().splitlines()[0] == "run_id,step,wall_time,name,value"
    store.export_csv(run_id, tmp_path / "run.csv")
    for source in (io.StringIO(buffer.getvalue()), tmp_path / "run.csv"):
        frame = pd.read_csv(source)
        assert list(frame.columns) == ["run_id", "step", "wall_time", "name", "value"]
        assert list(frame["run_id"]) == [run_id] * 3 and list(frame["step"]) == [0, 0, 1]
        assert list(frame["wall_time"]) == [10.5, 10.5, 11.5]
        assert list(frame["name"]) == ["train/loss", "sv/max", "train/loss"]
        np.testing.assert_array_equal(frame["value"].to_numpy(), [0.25, math.inf, math.nan])


def test_discard_after_keeps_rows_up_to_the_step_of_this_run_only(store):
    run_id, other = store.create_run(CONFIG), store.create_run(CONFIG)
    for rid in (run_id, other):
        for step in range(10):
            store.flush(rid, [(step, 0.0, "train/loss", step), (step, 0.0, "val/loss", -step)],
                        [(step, 0.0, "sv/spectrum", i, step + i) for i in range(3)], heartbeat_step=step)
    store.discard_after(run_id, 4)
    assert sorted(set(store.metrics(run_id)["step"])) == list(range(5))
    assert sorted(set(store.series(run_id, "sv/spectrum")["step"])) == list(range(5))
    assert store.record(run_id, latest=False).step == 4
    assert len(store.metrics(other)) == 20 and len(store.series(other, "sv/spectrum")) == 30
    assert store.record(other, latest=False).step == 9
    store.flush(run_id, [(5, 0.0, "train/loss", 0.5)], [], heartbeat_step=5)  # the resumed run goes on
    assert list(store.metrics(run_id, names=["train/loss"])["value"]) == [0, 1, 2, 3, 4, 0.5]
    store.discard_after(run_id, 50)  # nothing after 50: nothing removed, the step is not raised
    assert len(store.metrics(run_id)) == 11 and store.record(run_id, latest=False).step == 5


def test_resumes_and_the_stop_request_are_settable(store):
    run_id = store.create_run(CONFIG)
    assert store.record(run_id, latest=False).resumes == 0
    store.request_stop(run_id)
    store.update_run(run_id, resumes=np.int64(2), stop_requested=False)  # what a resume does
    run = store.record(run_id, latest=False)
    assert run.resumes == 2 and type(run.resumes) is int
    assert run.stop_requested is False and store.stop_requested(run_id) is False


# --------------------------------------------------------------------- file / path
def test_default_path_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("STABILITY_STORE", str(tmp_path / "nested" / "dir" / "env.db"))
    with RunStore() as store:
        assert store.path == tmp_path / "nested" / "dir" / "env.db" and store.path.is_file()
    monkeypatch.delenv("STABILITY_STORE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with RunStore() as store:
        assert store.path == tmp_path / "home" / ".stability" / "runs.db"


def test_wal_mode_and_schema_version(sqlite_store):
    store = sqlite_store
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_schema_version_and_reopening(store):
    assert raw_rows(store, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    run_id = store.create_run(CONFIG)
    with RunStore(store.url) as again:  # reopening keeps the data
        assert again.record(run_id, latest=False).raw_config == CONFIG


def test_newer_schema_is_refused(store_location):
    store = RunStore(store_location)
    store.close()
    newer = SCHEMA_VERSION + 1
    with raw_connection(store) as conn:
        conn.execute(text("UPDATE meta SET value = :v WHERE key = 'schema_version'"), {"v": str(newer)})
    with pytest.raises(StoreError) as info:
        RunStore(store_location)
    message = str(info.value)
    assert "\n" not in message and store.location in message and f"schema version {newer}" in message


@pytest.mark.parametrize("kind", ["directory", "not a database", "parent is a file"])
def test_unusable_path_raises_store_error(tmp_path, kind):
    if kind == "directory":
        path = tmp_path
    elif kind == "not a database":
        path = tmp_path / "runs.db"
        path.write_bytes(b"this is not sqlite" * 100)
    else:
        (tmp_path / "file").write_text("x")
        path = tmp_path / "file" / "runs.db"
    with pytest.raises(StoreError) as info:
        RunStore(path)
    assert "\n" not in str(info.value) and str(path.parent if kind == "parent is a file" else path) in str(info.value)


# --------------------------------------------------------------------- concurrency
def test_threads_share_one_store(store):
    run_ids = [store.create_run(CONFIG) for _ in range(4)]

    def work(run_id):
        for step in range(25):
            store.flush(run_id, [(step, 0.0, "train/loss", step)], [(step, 0.0, "v", 0, step)], step)
            store.metrics(run_id, since_step=step - 1)

    with ThreadPoolExecutor(len(run_ids)) as pool:
        for future in [pool.submit(work, run_id) for run_id in run_ids]:
            future.result()  # re-raises a worker thread's error
    for run_id in run_ids:
        assert list(store.metrics(run_id)["step"]) == list(range(25))


def test_reader_polls_while_another_process_writes(store):
    batches, per_batch, series_per_batch = 150, 8, 16
    run_id, busy = store.create_run(CONFIG), store.create_run(CONFIG)
    writer = start_writer(store.url, run_id, f"""
        import time
        for step in range({batches}):
            time.sleep(0.005)  # a training step; without it the writer may finish between two polls
            now = time.time()
            store.flush(run_id, [(step, now, f"m{{k}}", step + k / 10) for k in range({per_batch})],
                        [(step, now, "vec", i, i) for i in range({series_per_batch})], heartbeat_step=step)
    """)
    frames, last, polls = [], None, 0
    deadline = time.time() + 60
    while time.time() < deadline:
        done = writer.poll() is not None
        new = store.metrics(run_id, since_step=last)
        store.flush(busy, [], heartbeat_step=polls)  # this process writes too: writer/writer contention
        polls += 1
        if not new.empty:
            frames.append(new)
            last = int(new["step"].max())
            assert len(new) % per_batch == 0  # a poll never sees half a flush
        if done and new.empty:
            break
    assert writer.wait() == 0, writer.stderr.read()
    assert "locked" not in writer.stderr.read()
    rows = pd.concat(frames)
    assert len(rows) == batches * per_batch and not rows.duplicated(["step", "name"]).any()
    assert sorted(set(rows["step"])) == list(range(batches))
    assert len(store.series(run_id, "vec")) == batches * series_per_batch
    assert len(frames) > 1 and polls > 2  # it really was incremental


def test_sigkilled_writer_keeps_every_completed_flush(store):
    per_flush, series_per_flush, min_flushes = 20, 300, 30
    run_id = store.create_run(CONFIG)
    writer = start_writer(store.url, run_id, f"""
        import time
        step = 0
        while True:
            now = time.time()
            store.flush(run_id, [(step, now, f"m{{k}}", k) for k in range({per_flush})],
                        [(step, now, "vec", i, i) for i in range({series_per_flush})], heartbeat_step=step)
            step += 1
    """)
    deadline = time.time() + 60
    while len(store.metrics(run_id, names=["m0"])) < min_flushes and time.time() < deadline:
        assert writer.poll() is None, writer.stderr.read()
        time.sleep(0.01)
    writer.send_signal(signal.SIGKILL)
    assert writer.wait() == -signal.SIGKILL
    with RunStore(store.url) as after:  # a fresh connection recovers the WAL (SQLite)
        metrics = after.metrics(run_id)
        series = after.series(run_id, "vec")
        steps = int(metrics["step"].max()) + 1
        assert steps >= min_flushes
        assert len(metrics) == steps * per_flush and len(series) == steps * series_per_flush
        assert sorted(set(metrics["step"])) == sorted(set(series["step"])) == list(range(steps))
        assert after.record(run_id, latest=False).step == steps - 1  # heartbeat committed with its rows
    if store.path is not None:
        with sqlite3.connect(store.path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()


# ------------------------------------------------------------ refusing and faults
def _sqlite_without_runs(path):
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()


@pytest.mark.parametrize("kind", ["empty", "one byte", "text", "another sqlite database"])
def test_an_existing_file_that_is_no_run_store_is_refused_and_left_untouched(tmp_path, kind):
    path = tmp_path / "runs.db"
    if kind == "another sqlite database":
        _sqlite_without_runs(path)
    else:
        path.write_bytes({"empty": b"", "one byte": b"x", "text": b"my notes\n" * 50}[kind])
    before = path.read_bytes()
    with pytest.raises(StoreError) as info:
        RunStore(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "not a run store" in message
    assert "choose another --store" in message
    assert path.read_bytes() == before


def test_a_new_path_becomes_a_store_and_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "new" / "runs.db"
    with RunStore(path) as store:
        store.create_run(CONFIG)
    # the store (with SQLite's -wal and -shm while open) and the lock its creators take, nothing else
    assert sorted(p.name for p in path.parent.iterdir() if not p.name.startswith("runs.db")) == []
    assert (path.parent / "runs.db.create.lock").exists()


def test_a_deleted_stores_journal_files_do_not_come_back_in_a_new_store_at_its_path(tmp_path):
    """A store deleted while its -wal and -shm stayed (a process had it open): SQLite would replay that WAL into
    a new file at the same path, and the new store would hold the old one's runs (Note [creating and
    refusing] in stability/runs/opening.py)."""
    import shutil

    path = tmp_path / "runs.db"
    old = RunStore(path)
    old.create_run(CONFIG)
    kept = {suffix: tmp_path / f"kept{suffix}" for suffix in ("-wal", "-shm")}
    assert Path(f"{path}-wal").stat().st_size > 0  # the run is in the WAL, not yet in the file
    for suffix, copy in kept.items():
        shutil.copy(f"{path}{suffix}", copy)
    old.close()
    path.unlink()
    for suffix, copy in kept.items():  # the journal files of the deleted store, left behind
        shutil.copy(copy, f"{path}{suffix}")
    with RunStore(path) as new:
        assert new.records() == [] and new.create_run(CONFIG) == 1


def test_processes_creating_one_store_at_once_all_get_it(store_location):
    path = store_location  # a new file, or a new empty database: its tables are made by the first to open it
    code = f"from stability.runs.store import RunStore\nRunStore({str(path)!r}).create_run({{}})\n"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    processes = [subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
                 for _ in range(6)]
    for process in processes:
        assert process.wait(timeout=60) == 0, process.stderr.read()
    with RunStore(path) as store:
        assert len(store.records(latest=False)) == 6


@pytest.mark.parametrize("run_id", [1180591620717411303424, 2**63, -1, "abc", 1.5])
def test_run_ids_that_cannot_exist_are_not_found(store, run_id):
    store.create_run(CONFIG)
    for call in (lambda: store.record(run_id, latest=False), lambda: store.metrics(run_id), lambda: store.latest(run_id),
                 lambda: store.series(run_id, "x"),
                 lambda: store.request_stop(run_id), lambda: store.stop_requested(run_id),
                 lambda: store.flush(run_id, [], []), lambda: store.delete_run(run_id),
                 lambda: store.record(run_id), lambda: store.discard_after(run_id, 0),
                 lambda: store.export_csv(run_id, io.StringIO())):
        with pytest.raises(RunNotFound, match=f"no run with id {run_id} in "):
            call()
    assert store.metrics_many([2**70, -1]).empty and store.latest_many([2**70, -1]) == {}


def test_a_keyboard_interrupt_right_after_begin_still_lets_the_status_land(store):
    """KeyboardInterrupt right after a write's BEGIN (IMMEDIATE, on SQLite) has run: the moment
    between taking the write lock and entering the code that would roll it back."""
    from sqlalchemy import event

    run_id = store.create_run(CONFIG)
    set_status(store, run_id, "running")
    armed = [True]

    def interrupt(conn):  # listens after the store's own begin listener, which sent the BEGIN
        if armed and conn.get_execution_options().get("stability_write"):
            armed.clear()
            raise KeyboardInterrupt

    event.listen(store._engine, "begin", interrupt)
    with pytest.raises(KeyboardInterrupt):
        store.flush(run_id, [(0, 0.0, "train/loss", 1.0)], [], heartbeat_step=0)
    assert not armed
    set_status(store, run_id, "stopped", error="interrupted from the keyboard")  # what the CLI does
    with RunStore(store.url) as other:  # another process's view: committed, nothing half-written
        assert other.record(run_id, latest=False).status == "stopped"
        assert other.metrics(run_id).empty
        other.flush(run_id, [(1, 0.0, "train/loss", 2.0)])  # and no write lock was left behind


def test_a_keyboard_interrupt_inside_a_write_rolls_it_back(store, monkeypatch):
    run_id = store.create_run(CONFIG)

    def interrupted(self, conn, run_id, rows):
        conn.execute(text("INSERT INTO metrics (run_id, step, wall_time, name, value)"
                          " VALUES (:id, 0, 0.0, 'half', 1.0)"), {"id": run_id})
        raise KeyboardInterrupt

    monkeypatch.setattr(RunStore, "_insert_series", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.flush(run_id, [(0, 0.0, "train/loss", 1.0)], [(0, 0.0, "v", 0, 1.0)])
    set_status(store, run_id, "stopped")
    with RunStore(store.url) as other:
        assert other.record(run_id, latest=False).status == "stopped" and other.metrics(run_id).empty


@pytest.mark.parametrize("where", ["all but the header", "the metric pages"])
def test_a_corrupted_store_is_one_line_naming_the_file_and_never_written(tmp_path, where):
    path = tmp_path / "runs.db"
    with RunStore(path) as store:
        run_id = store.create_run(CONFIG)
        store.log(run_id, [(step, 0.0, "train/loss", step) for step in range(2000)])
    corrupt(path, where)
    before = path.read_bytes()
    with pytest.raises(StoreError) as info:
        with RunStore(path) as store:
            store.records(latest=False)
            store.metrics(run_id)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "move it aside or choose another --store" in message
    assert path.read_bytes() == before


def test_reads_do_not_wait_for_a_writer_holding_the_lock(sqlite_store, monkeypatch):
    import stability.runs.engine as engine_module
    import stability.runs.store as store_module

    store = sqlite_store
    run_id = store.create_run(CONFIG)
    store.log(run_id, [(0, 0.0, "train/loss", 1.0)])
    monkeypatch.setattr(engine_module, "BUSY_TIMEOUT_MS", 300)
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        with RunStore(store.path) as reader:
            assert [r.id for r in reader.records(latest=False)] == [run_id]
            assert reader.record(run_id, latest=False).status == "queued"
            assert reader.latest(run_id) == {"train/loss": 1.0}
            assert len(reader.metrics(run_id)) == 1
            assert time.monotonic() - started < 0.3
            with pytest.raises(store_module.StoreBusy, match="locked by another writer") as info:
                set_status(reader, run_id, "running")
            assert "\n" not in str(info.value) and str(store.path) in str(info.value)
            holder.execute("ROLLBACK")
            set_status(reader, run_id, "running")  # the connection is usable again
            assert reader.record(run_id, latest=False).status == "running"
    finally:
        holder.close()


def test_opening_another_store_in_this_process_keeps_the_first_one_coherent(sqlite_store):
    """Opening a RunStore must not open and close the file outside SQLite: that drops the POSIX
    locks of every connection of this process, and another process's last close then
    checkpoints and removes the WAL under the first connection, which reads stale rows."""
    store = sqlite_store
    run_id = store.create_run(CONFIG)
    for round in range(3):
        RunStore(store.path).close()
        writer = start_writer(store.path, run_id, f"""
            for step in range({round} * 50, {round + 1} * 50):
                store.flush(run_id, [(step, 0.0, "train/loss", step)], [], heartbeat_step=step)
            store.close()
        """)
        while writer.poll() is None:
            store.metrics(run_id)
        assert writer.wait() == 0, writer.stderr.read()
        assert len(store.metrics(run_id)) == 50 * (round + 1) and store.record(run_id, latest=False).step == 50 * round + 49


# ------------------------------------------------------------------------ migration
# The tables of schema version 1, as `git show 03ba6e2:stability/runs/store.py` created them.
SCHEMA_V1 = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, config TEXT NOT NULL, status TEXT NOT NULL,
    created_at REAL NOT NULL, started_at REAL, finished_at REAL, device TEXT, pid INTEGER, heartbeat REAL,
    error TEXT, total_params INTEGER, recurrent_params INTEGER, baseline REAL, baseline_label TEXT,
    metric TEXT, step INTEGER, total_steps INTEGER, stop_requested INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE metrics (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL, name TEXT NOT NULL, value REAL
);
CREATE INDEX metrics_run_name_step ON metrics (run_id, name, step);
CREATE INDEX metrics_run_step ON metrics (run_id, step);
CREATE TABLE series (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL,
    name TEXT NOT NULL, idx INTEGER NOT NULL, value REAL
);
CREATE INDEX series_run_name_step ON series (run_id, name, step);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
"""


def write_v1_store(path, runs=2, steps=6):
    """A store file as the version-1 code left it (WAL mode), with runs, metric and series rows
    (two rows for one name at one step, the second written last, and a NaN)."""
    import json

    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA_V1)
    conn.execute("PRAGMA journal_mode=WAL")
    for run_id in range(1, runs + 1):
        conn.execute("INSERT INTO runs (name, config, status, created_at, step, stop_requested)"
                     " VALUES (?, ?, 'completed', ?, ?, 1)", (f"old {run_id}", json.dumps(CONFIG), 1.0e9, steps - 1))
        conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?)",
                         [(run_id, step, 0.0, name, run_id * 100 + step + k / 10)
                          for step in range(steps) for k, name in enumerate(["train/loss", "val/loss"])])
        conn.execute("INSERT INTO metrics VALUES (?, ?, 0.0, 'val/loss', -1.0)", (run_id, steps - 1))
        conn.execute("INSERT INTO metrics VALUES (?, 2, 0.0, 'gap/loss', NULL)", (run_id,))
        conn.execute("INSERT INTO series VALUES (?, 0, 0.0, 'sv/spectrum', 0, 1.5)", (run_id,))
    conn.commit()
    conn.close()


def test_a_version_1_store_opens_and_gains_the_new_columns(tmp_path):
    path = tmp_path / "runs.db"
    write_v1_store(path)
    with sqlite3.connect(path) as conn:
        before = {table: conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
                  for table in ("metrics", "series")}
    with RunStore(path) as store:
        run = store.record(1, latest=False)
        assert run.resumes == 0 and run.name == "old 1" and run.raw_config == CONFIG
        assert run.stop_requested is True
        store.update_run(1, resumes=1, stop_requested=False)
        assert store.record(1, latest=False).resumes == 1 and store.record(2, latest=False).resumes == 0
        new = store.create_run(CONFIG)
        assert new == 3 and store.record(new, latest=False).resumes == 0
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for table, rows in before.items():
            assert conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall() == rows
    with RunStore(path) as again:  # opening a migrated store again changes nothing
        assert again.record(1, latest=False).resumes == 1
        latest = again.latest_many()
        assert comparable(latest) == comparable(brute_force_latest(again))
        assert comparable({1: latest[1]}) == comparable({1: {"gap/loss": math.nan, "train/loss": 105.0,
                                                             "val/loss": -1.0}})  # the tie: written last


# The tables of schema version 3, as `git show 0525f64:stability/runs/store.py` created them.
SCHEMA_V3 = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, config TEXT NOT NULL, status TEXT NOT NULL,
    created_at REAL NOT NULL, started_at REAL, finished_at REAL, device TEXT, pid INTEGER, heartbeat REAL,
    error TEXT, total_params INTEGER, recurrent_params INTEGER, baseline REAL, baseline_label TEXT,
    metric TEXT, step INTEGER, total_steps INTEGER, stop_requested INTEGER NOT NULL DEFAULT 0,
    resumes INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE metrics (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL, name TEXT NOT NULL, value REAL
);
CREATE INDEX metrics_run_name_step ON metrics (run_id, name, step);
CREATE INDEX metrics_run_step ON metrics (run_id, step);
CREATE TABLE series (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL,
    name TEXT NOT NULL, idx INTEGER NOT NULL, value REAL
);
CREATE INDEX series_run_name_step ON series (run_id, name, step);
CREATE TABLE latest_metrics (
    run_id INTEGER NOT NULL, name TEXT NOT NULL, step INTEGER NOT NULL, value REAL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '3');
"""


def test_a_version_3_store_gains_the_sweep_columns_and_table(tmp_path):
    import json

    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA_V3)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("INSERT INTO runs (name, config, status, created_at, step, resumes)"
                 " VALUES ('old', ?, 'completed', 1.0e9, 4, 2)", (json.dumps(CONFIG),))
    conn.executemany("INSERT INTO metrics VALUES (1, ?, 0.0, 'val/loss', ?)", [(step, step / 10) for step in range(5)])
    conn.execute("INSERT INTO latest_metrics VALUES (1, 'val/loss', 4, 0.4)")
    conn.commit()
    before = conn.execute("SELECT * FROM runs").fetchall()
    conn.close()
    with RunStore(path) as store:
        run = store.record(1, latest=False)
        assert (run.sweep_id, run.trial, run.params, run.host) == (None, None, {}, None)
        assert (run.name, run.resumes, run.raw_config) == ("old", 2, CONFIG)
        assert store.latest(1) == {"val/loss": 0.4} and store.sweeps() == []
        sweep_id = store.create_sweep(SPEC)
        trial = store.create_run(CONFIG, sweep_id=sweep_id, trial=0, params={"train.lr": 0.1})
        assert trial == 2 and store.sweeps()[0].counts == {"queued": 1}
        assert [record.id for record in store.records(sweep_id=sweep_id)] == [trial]
    with sqlite3.connect(path) as conn:  # (version 5 since: a fifth new column, runs.claim; 6: runs.external, 0; 7: owner, pid_started)
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT * FROM runs WHERE id = 1").fetchall() == [(*before[0], None, None, None, None, None, 0, None, None)]
        assert {row[1] for row in conn.execute("PRAGMA index_list(runs)")} >= {"runs_sweep"}
    conn.close()


def test_a_new_store_has_the_tables_of_a_migrated_one(tmp_path):
    """Creating at version 4 and migrating 1 -> 4 give the same columns, types and indexes."""
    def layout(path):
        with sqlite3.connect(path) as conn:
            tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"
                                                     " AND name NOT LIKE 'sqlite_%' ORDER BY name")]
            columns = {table: [row[1:] for row in conn.execute(f"PRAGMA table_info({table})")] for table in tables}
            indexes = sorted(row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'"
                                                              " AND name NOT LIKE 'sqlite_%'"))
        conn.close()
        return columns, indexes

    write_v1_store(tmp_path / "old.db")
    RunStore(tmp_path / "old.db").close()
    RunStore(tmp_path / "new.db").close()
    assert layout(tmp_path / "old.db") == layout(tmp_path / "new.db")


def two_new_locations(dialect, tmp_path, request):
    """Two places for a store that do not hold one yet: SQLite paths, or empty PostgreSQL databases."""
    if dialect == "sqlite":
        return str(tmp_path / "old.db"), str(tmp_path / "new.db")
    cluster = request.getfixturevalue("postgres_cluster")
    return cluster.new_database(), cluster.new_database()


def sqlalchemy_url(location):
    return location if "://" in location else f"sqlite:///{location}"


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_store_made_from_the_metadata_has_the_tables_the_version_4_ddl_made(dialect, tmp_path, request):
    """stability/runs/schema.py against the DDL strings it replaced (tests/store_files.py keeps
    them): the same tables, columns, types, defaults, keys, identities and indexes, but for version
    5's runs.claim, version 6's runs.external and version 7's runs.owner and runs.pid_started, added last; a store made by that DDL, opened, is
    brought to the current version and then has exactly the tables of a new store, and takes every
    kind of row. (Changed with schema version 5: the DDL-made store was left unchanged at version 4.)"""
    old, new = two_new_locations(dialect, tmp_path, request)
    write_v4_store(old)
    RunStore(new).close()
    made_by_ddl = schema_layout(sqlalchemy_url(old))
    assert set(made_by_ddl) >= {"runs", "metrics", "series", "latest_metrics", "sweeps", "meta"}
    made_new = schema_layout(sqlalchemy_url(new))
    claim, external, owner, pid_started = made_new["runs"]["columns"][-4:]
    assert claim["name"] == "claim" and claim["nullable"] and "TEXT" in claim["type"]
    assert external["name"] == "external" and not external["nullable"] and "INT" in external["type"]
    assert owner["name"] == "owner" and owner["nullable"] and "TEXT" in owner["type"]
    assert pid_started["name"] == "pid_started" and pid_started["nullable"] and (
        "REAL" in pid_started["type"] or "DOUBLE" in pid_started["type"])
    without_claim = {**made_new, "runs": {**made_new["runs"], "columns": made_new["runs"]["columns"][:-4]}}
    assert without_claim == made_by_ddl
    with RunStore(old) as store:  # the DDL-made store is brought up to date and takes every kind of row
        sweep_id = store.create_sweep(SPEC)
        run_id = store.create_run(CONFIG, sweep_id=sweep_id, trial=0, params={"train.lr": 0.1})
        store.flush(run_id, [(0, 1.0, "train/loss", 0.5), (0, 1.0, "train/loss", 0.25)],
                    [(0, 1.0, "sv/spectrum", 0, 2.0)], heartbeat_step=0)
        store.discard_after(run_id, 0)
        assert (run_id, sweep_id) == (1, 1) and store.latest(run_id) == {"train/loss": 0.25}
        assert list(store.metrics(run_id)["value"]) == [0.5, 0.25] and len(store.series(run_id, "sv/spectrum")) == 1
    assert schema_layout(sqlalchemy_url(old)) == made_new
    assert raw_rows(store, "SELECT key, value FROM meta") == [("schema_version", str(SCHEMA_VERSION))]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_version_4_store_gains_the_claim_column_and_keeps_its_runs(dialect, tmp_path, request):
    """Schema version 5 adds runs.claim (stability.execution.lifecycle, Note [Claims]) to SQLite and
    PostgreSQL stores alike; the runs a version-4 store held keep every column, unclaimed, and the
    claim's compare-and-set works on them as on new ones."""
    old, _ = two_new_locations(dialect, tmp_path, request)
    write_v4_store(old, with_runs=True)
    columns = "id, name, status, created_at, started_at, finished_at, pid, host, heartbeat, step, resumes"
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(sqlalchemy_url(old), poolclass=NullPool)  # read before any RunStore opens it
    with engine.connect() as conn:
        before = [tuple(row) for row in conn.exec_driver_sql(f"SELECT {columns} FROM runs ORDER BY id")]
    engine.dispose()
    with RunStore(old) as store:
        assert raw_rows(store, f"SELECT {columns} FROM runs ORDER BY id") == before
        assert raw_rows(store, "SELECT claim FROM runs ORDER BY id") == [(None,), (None,), (None,)]
        assert raw_rows(store, "SELECT key, value FROM meta") == [("schema_version", str(SCHEMA_VERSION))]
        assert [record.claim for record in store.records()] == [None, None, None]
        assert store.latest(1) == {"train/loss": 0.5}
        # the old worker's run, judged as any: still as read, so marked once; the queued run claimed once
        running = store.record(2)
        assert store.compare_and_set(2, statuses=["running"], claim=running.claim, pid=running.pid,
                                     fields={"status": "interrupted"})
        assert not store.compare_and_set(2, statuses=["running"], claim=None, pid=4243, fields={"status": "stopped"})
        won = [store.compare_and_set(3, statuses=["queued"], unclaimed=True,
                                     fields={"status": "running", "pid": 1, "host": "h", "claim": token})
               for token in ("first", "second")]
        assert won == [True, False] and store.record(3).claim == "first"


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_version_5_store_gains_the_external_flag_and_keeps_its_runs(dialect, tmp_path, request):
    """Schema version 6 adds runs.external (a run logged by stability.watch from someone's own loop):
    a version-5 store's runs read as ours (0, RunConfigs parsed), and the store takes an external
    run, whose config is its logger's dict and no RunConfig, beside them."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from stability.runs.migrations import MIGRATIONS

    old, _ = two_new_locations(dialect, tmp_path, request)
    write_v4_store(old, with_runs=True)
    engine = create_engine(sqlalchemy_url(old), poolclass=NullPool)
    with engine.begin() as conn:  # the version-5 store: 4 -> 5 as that version made it
        for statement in MIGRATIONS[4]:  # (no dialect's words in it)
            conn.exec_driver_sql(statement)
        conn.exec_driver_sql("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
        before = [tuple(row) for row in conn.exec_driver_sql("SELECT * FROM runs ORDER BY id")]
    engine.dispose()
    with RunStore(old) as store:
        assert raw_rows(store, "SELECT key, value FROM meta") == [("schema_version", str(SCHEMA_VERSION))]
        assert raw_rows(store, "SELECT * FROM runs ORDER BY id") == [(*row, 0, None, None) for row in before]
        assert [(r.external, r.config is not None) for r in store.records()] == [(False, True)] * 3
        mine = store.create_run({"name": "mine", "config": {"lr": 0.1}}, external=True)
        record = store.record(mine)
        assert (record.external, record.config, record.config_problem) == (True, None, None)
        assert record.raw_config["config"] == {"lr": 0.1}


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_version_6_store_gains_owner_and_pid_start_and_keeps_its_runs(dialect, tmp_path, request):
    """Schema version 7 adds runs.owner (who started a run where a classroom names its users) and
    runs.pid_started (its claimant's start time): a version-6 store's runs read with neither (the
    operator's, no start time), and the store then takes both, at birth and by update."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from stability.runs.migrations import _WORDS, MIGRATIONS

    old, _ = two_new_locations(dialect, tmp_path, request)
    write_v4_store(old, with_runs=True)
    engine = create_engine(sqlalchemy_url(old), poolclass=NullPool)
    with engine.begin() as conn:  # the version-6 store: 4 -> 5 -> 6 as those versions made it
        for version in (4, 5):
            for statement in MIGRATIONS[version]:
                conn.exec_driver_sql(statement.format_map(_WORDS[dialect]))
        conn.exec_driver_sql("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
        before = [tuple(row) for row in conn.exec_driver_sql("SELECT * FROM runs ORDER BY id")]
    engine.dispose()
    with RunStore(old) as store:
        assert raw_rows(store, "SELECT * FROM runs ORDER BY id") == [(*row, None, None) for row in before]
        assert [(r.owner, r.pid_started) for r in store.records()] == [(None, None)] * 3
        theirs = store.create_run(CONFIG, owner="student@school.example",
                                  claimed={"status": "running", "pid": 7, "host": "h", "claim": "t",
                                           "pid_started": 1.5e9})
        assert (store.record(theirs).owner, store.record(theirs).pid_started) == ("student@school.example", 1.5e9)
        store.update_run(theirs, pid_started=1.6e9)
        assert store.record(theirs).pid_started == 1.6e9


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_layout_tells_apart_the_id_columns_the_metadata_must_match(dialect, tmp_path, request):
    """What the comparison above rests on: declarations of an id that behave alike for most
    inserts but are not the same table read as different layouts."""
    variants = {"sqlite": ["INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT",
                           "INTEGER PRIMARY KEY", "BIGINT PRIMARY KEY"],
                "postgresql": ["BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
                               "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "BIGSERIAL PRIMARY KEY",
                               "INTEGER GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"]}[dialect]
    layouts = []
    for number, declaration in enumerate(variants):
        if dialect == "sqlite":
            location = f"sqlite:///{tmp_path / f'{number}.db'}"
        else:
            location = request.getfixturevalue("postgres_cluster").new_database()
        from sqlalchemy import create_engine

        engine = create_engine(location)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE TABLE runs (id {declaration}, name TEXT)")
        engine.dispose()
        layouts.append(schema_layout(location))
    assert all(layouts[i] != layouts[j] for i in range(len(layouts)) for j in range(i))


def test_processes_opening_an_old_store_at_once_migrate_it_once(tmp_path):
    path = tmp_path / "runs.db"
    write_v1_store(path)
    code = f"from stability.runs.store import RunStore\nRunStore({str(path)!r}).update_run(1, resumes=1)\n"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    processes = [subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
    for process in processes:
        assert process.wait(timeout=60) == 0, process.stderr.read()
    with RunStore(path) as store:
        assert store.record(1, latest=False).resumes == 1 and len(store.records(latest=False)) == 2


def test_an_sqlite_file_with_a_runs_table_but_no_store_meta_is_refused(tmp_path):
    path = tmp_path / "runs.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, what TEXT)")
        conn.execute("INSERT INTO runs VALUES (1, 'my morning runs')")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a run store"):
        RunStore(path)
    assert path.read_bytes() == before


# ----------------------------------------------------------------- latest values
def brute_force_latest(store):
    """Run id -> {name: value} from a plain read of every run and metric row: per run and name the
    row with the highest step, the last written (highest rowid or seq) where several share that step."""
    run_ids = [row[0] for row in raw_rows(store, "SELECT id FROM runs")]
    rows = raw_rows(store, f"SELECT {write_order(store)}, run_id, name, step, value FROM metrics")
    best = {}
    for rowid, run_id, name, step, value in rows:
        if (run_id, name) not in best or (step, rowid) > best[run_id, name][0]:
            best[run_id, name] = ((step, rowid), value)
    latest = {run_id: {} for run_id in run_ids}
    for (run_id, name), (_, value) in best.items():
        latest[run_id][name] = math.nan if value is None else value
    return latest


def comparable(latest):
    """NaN != NaN: compare through repr."""
    return {run_id: {name: repr(value) for name, value in values.items()} for run_id, values in latest.items()}


def random_rows(rng, high_step):
    names = ["train/loss", "val/loss", "grad/h0_norm", "sv/margin"]
    values = [0.5, -1.0, math.nan, math.inf, 1e-300, 7.0]
    return [(int(rng.integers(0, high_step + 1)), 0.0, names[rng.integers(len(names))],
             float(values[rng.integers(len(values))]) if rng.random() < 0.3 else float(rng.normal()))
            for _ in range(rng.integers(0, 6))]


@pytest.mark.parametrize("seed", range(4))
def test_latest_values_equal_a_brute_force_read_after_random_writes_discards_and_deletes(store, seed):
    rng = np.random.default_rng(seed)
    runs, high = [store.create_run(CONFIG) for _ in range(3)], {}
    for _ in range(120):
        run_id, action = runs[rng.integers(len(runs))], rng.random()
        high[run_id] = high.get(run_id, 0) + int(rng.integers(0, 3))
        if action < 0.5:  # steps move forward, but rows may land at or below earlier steps too
            store.flush(run_id, random_rows(rng, high[run_id]), [], heartbeat_step=high[run_id])
        elif action < 0.7:
            store.log(run_id, random_rows(rng, high[run_id]))
        elif action < 0.9:
            high[run_id] = int(rng.integers(0, high[run_id] + 1))
            store.discard_after(run_id, high[run_id])
        else:
            set_status(store, run_id, "completed")  # a queued run is not deleted (Note [Guarded delete])
            store.delete_run(run_id)
            runs[runs.index(run_id)] = store.create_run(CONFIG)
        expected = comparable(brute_force_latest(store))
        assert comparable(store.latest_many()) == expected
        subset = runs[:2] + [10**6]
        assert comparable(store.latest_many(subset)) == {run_id: expected[run_id] for run_id in runs[:2]}
        assert comparable({run_id: store.latest(run_id) for run_id in runs}) == expected
    assert raw_rows(store, "SELECT COUNT(*) FROM latest_metrics WHERE run_id NOT IN (SELECT id FROM runs)") == [(0,)]


def test_a_failed_flush_leaves_the_latest_values_as_they_were(store):
    run_id = store.create_run(CONFIG)
    store.flush(run_id, [(1, 0.0, "train/loss", 1.0)])
    with pytest.raises(ValueError):
        store.flush(run_id, [(2, 0.0, "train/loss", 2.0)], [(2, 0.0, "v", 0, "not a number")])
    assert store.latest(run_id) == {"train/loss": 1.0} == brute_force_latest(store)[run_id]


# ------------------------------------------------------------- locations and URLs
def test_a_sqlite_url_names_the_same_file_as_its_path(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    with RunStore(path) as by_path:
        run_id = by_path.create_run(CONFIG)
        assert by_path.url == f"sqlite:///{path}" and by_path.url.startswith("sqlite:////")
        assert by_path.location == str(path) == str(by_path) and by_path.home == tmp_path
        assert by_path.shared is False and repr(by_path) == f"RunStore({str(path)!r})"
    with RunStore(f"sqlite:///{path}") as by_url:
        assert by_url.path == path and by_url.record(run_id, latest=False).raw_config == CONFIG
    monkeypatch.chdir(tmp_path)
    with RunStore("sqlite:///runs.db") as relative:  # relative to the working folder, as a path is
        assert relative.path == path
    monkeypatch.setenv("STABILITY_STORE", f"sqlite:///{path}")
    with RunStore() as from_env:
        assert from_env.path == path and from_env.record(run_id, latest=False).name == "tiny"


@pytest.mark.parametrize("location, complaint", [
    ("mysql://user@host/db", "unsupported run store URL 'mysql://user@host/db'"),
    ("postgresql+psycopg2://user@host/db", "unsupported run store URL"),
    ("postgresql://user:secret@host:5432", "names no database"),
    ("sqlite://", "names no file"),
    ("sqlite:///:memory:", "names no file"),
    ("postgresql://user:secret@host:notaport/db", "cannot read the run store URL"),
])
def test_a_url_the_store_cannot_use_is_one_line_naming_the_accepted_forms(location, complaint):
    with pytest.raises(StoreError) as info:
        RunStore(location)
    message = str(info.value)
    assert complaint in message and "\n" not in message and "secret" not in message
    assert "sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DATABASE" in message


def test_a_postgresql_store_names_itself_without_its_password(postgres_cluster, tmp_path, monkeypatch):
    url = postgres_cluster.new_database()
    with_password = url.replace("stability@", "stability:s3cret@")  # trust auth: any password is let in
    monkeypatch.setenv("STABILITY_HOME", str(tmp_path / "home"))
    with RunStore(with_password.replace("postgresql+psycopg://", "postgresql://")) as store:
        assert store.url == with_password  # what Optuna is given: the driver named, the password kept
        assert "s3cret" not in store.location and "***" in store.location and str(store) == store.location
        assert "s3cret" not in repr(store)
        assert store.path is None and store.shared is True
        database = url.rsplit("/", 1)[1]
        assert store.home == tmp_path / "home" / "stores" / f"127.0.0.1-{postgres_cluster.port}-{database}"
        assert store.home.is_dir()
        assert store.checkpoint_path(3) == store.home / "checkpoints" / "run-3.pt"
        with pytest.raises(RunNotFound) as info:
            store.record(5, latest=False)
        assert "s3cret" not in str(info.value) and store.location in str(info.value)


def test_a_postgresql_stores_home_defaults_to_one_folder_per_database_under_the_home(postgres_url, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.delenv("STABILITY_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with RunStore(postgres_url) as store, RunStore(postgres_url) as same:
        folder = tmp_path / ".stability" / "stores" / f"127.0.0.1-{store._url.port}-{postgres_url.rsplit('/', 1)[1]}"
        assert not folder.exists()  # created on first use, not by opening the store
        assert store.home == folder == same.home and folder.is_dir()


def test_an_unreachable_server_is_one_line_naming_the_store():
    from postgres import free_port

    url = f"postgresql://someone:s3cret@127.0.0.1:{free_port()}/stability"
    with pytest.raises(StoreError) as info:
        RunStore(url)
    message = str(info.value)
    assert "\n" not in message and "s3cret" not in message and "someone:***@127.0.0.1" in message
    assert "cannot use run store" in message and "server is running" in message


@pytest.mark.parametrize("what", ["database", "user", "password"])
def test_an_unknown_database_or_user_or_a_wrong_password_is_one_line(postgres_cluster, what):
    from postgres import PASSWORD, PASSWORD_USER

    url = {"database": postgres_cluster.url("no_such_database"),
           "user": postgres_cluster.url("postgres").replace("stability@", "nobody_here:pw@"),
           "password": postgres_cluster.url("postgres").replace("stability@", f"{PASSWORD_USER}:wrong-pw@")}[what]
    with pytest.raises(StoreError) as info:
        RunStore(url)
    message = str(info.value)
    assert "\n" not in message and "cannot use run store" in message and "pw@" not in message
    assert {"database": 'database "no_such_database" does not exist', "user": "nobody_here",
            "password": "password authentication failed"}[what] in message
    fresh = postgres_cluster.new_database()
    postgres_cluster.execute(f"GRANT CREATE ON SCHEMA public TO {PASSWORD_USER}", database=fresh.rsplit("/", 1)[1])
    right = fresh.replace("stability@", f"{PASSWORD_USER}:{PASSWORD}@")
    with RunStore(right) as store:  # the right password is let in
        assert not store.records(latest=False)


def test_a_server_that_goes_away_is_one_line_and_the_store_recovers_when_it_is_back(postgres_cluster, postgres_url):
    with RunStore(postgres_url) as store:
        run_id = store.create_run(CONFIG)
        postgres_cluster.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                 f" WHERE datname = '{postgres_url.rsplit('/', 1)[1]}' AND pid <> pg_backend_pid()")
        store.flush(run_id, [(0, 0.0, "train/loss", 1.0)])  # pool_pre_ping: a dropped connection is replaced
        assert store.latest(run_id) == {"train/loss": 1.0}


def test_a_postgresql_database_with_someone_elses_runs_table_is_refused(postgres_cluster, postgres_url):
    from sqlalchemy import create_engine

    engine = create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE runs (id INTEGER PRIMARY KEY, what TEXT)"))
        conn.execute(text("INSERT INTO runs VALUES (1, 'my morning runs')"))
    try:
        with pytest.raises(StoreError, match="is not a run store.*left untouched"):
            RunStore(postgres_url)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT what FROM runs")).all() == [("my morning runs",)]
            assert "meta" not in {row[0] for row in conn.execute(text(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))}
    finally:
        engine.dispose()


def test_a_store_lives_beside_an_optuna_study_in_its_database(store_location):
    """A sweep's Optuna study shares the database (store.url): its tables and ours do not get in
    each other's way, on either backend."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with RunStore(store_location) as store:
        study = optuna.create_study(storage=store.url, study_name="stability-sweep-1")
        study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
        run_id = store.create_run(CONFIG, sweep_id=store.create_sweep(SPEC), trial=0, params={"x": 0.5})
    with RunStore(store_location) as again:
        assert again.record(run_id, latest=False).params == {"x": 0.5}
        assert len(optuna.load_study(storage=again.url, study_name="stability-sweep-1").trials) == 2


def test_two_processes_writing_one_run_at_once_lose_no_rows(store):
    run_id = store.create_run(CONFIG)
    writers = [start_writer(store.url, run_id, f"""
        for step in range({offset}, 400, 2):
            store.flush(run_id, [(step, 0.0, f"m{{k}}", step + k) for k in range(5)],
                        [(step, 0.0, "vec", i, i) for i in range(4)], heartbeat_step=step)
        store.request_stop(run_id)
        store.close()
    """) for offset in (0, 1)]
    for writer in writers:
        assert writer.wait(timeout=300) == 0, writer.stderr.read()
    metrics = store.metrics(run_id)
    assert len(metrics) == 400 * 5 and not metrics.duplicated(["step", "name"]).any()
    assert sorted(set(metrics["step"])) == list(range(400)) and metrics["step"].is_monotonic_increasing
    assert (metrics["value"] == metrics["step"] + metrics["name"].str[1:].astype(int)).all()
    assert len(store.series(run_id, "vec")) == 400 * 4
    assert store.latest(run_id) == {f"m{k}": 399 + k for k in range(5)} and store.stop_requested(run_id)


@pytest.mark.parametrize("required", [False, True])
def test_without_postgresql_binaries_its_tests_skip_with_the_reason_or_fail_when_required(tmp_path, required):
    (tmp_path / "empty").mkdir()
    env = {**os.environ, "STABILITY_POSTGRES_BIN": str(tmp_path / "empty"), "PYTHONPATH": str(REPO)}
    env.pop("STABILITY_REQUIRE_POSTGRES", None)
    if required:
        env["STABILITY_REQUIRE_POSTGRES"] = "1"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/test_store.py", "-k", "test_nan_and_inf_round_trip"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    reason = "PostgreSQL binaries (initdb, pg_ctl) not found"
    assert reason in done.stdout, done.stdout[-2000:]
    if required:
        assert done.returncode == 1 and "1 passed" in done.stdout and "1 error" in done.stdout
        assert "STABILITY_REQUIRE_POSTGRES=1" in done.stdout
    else:
        assert done.returncode == 0 and "1 passed, 1 skipped" in done.stdout


def test_a_postgresql_write_blocked_by_another_writers_lock_is_store_busy_after_the_timeout(postgres_url, monkeypatch):
    import psycopg

    import stability.runs.engine as engine_module
    import stability.runs.store as store_module

    monkeypatch.setattr(engine_module, "BUSY_TIMEOUT_MS", 300)
    with RunStore(postgres_url) as store:
        run_id = store.create_run(CONFIG)
        holder = psycopg.connect(postgres_url.replace("postgresql+psycopg://", "postgresql://"))
        try:
            holder.execute("SELECT * FROM runs WHERE id = %s FOR UPDATE", (run_id,))  # holds the row's lock
            with pytest.raises(store_module.StoreBusy, match="locked by another writer") as info:
                set_status(store, run_id, "running")
            assert "\n" not in str(info.value) and store.location in str(info.value)
            holder.rollback()
            set_status(store, run_id, "running")  # the store is usable again
            assert store.record(run_id, latest=False).status == "running"
        finally:
            holder.close()
