"""A training run rides out a store that another process holds locked (issue 20; stability/training/sinks.py,
Note [A busy store]): its rows wait in memory and are written once the lock is gone, and it fails only when
the store stays unwritable for the sink's patience.  Real stores, a real second process holding the lock:
SQLite's write lock (BEGIN EXCLUSIVE), and on the real PostgreSQL the tables a flush writes, locked
EXCLUSIVE (reads go on, writes wait for the lock_timeout)."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.runs.store import RunStore, StoreBusy
from stability.training import sinks
from stability.training.hooks import Hook
from stability.execution.lifecycle import train_run

HOLDER = r"""
import sys, time
location, seconds = sys.argv[1], float(sys.argv[2])
if location.startswith("postgresql"):
    import psycopg
    connection = psycopg.connect(location.replace("postgresql+psycopg://", "postgresql://"))
    connection.execute("LOCK TABLE runs, metrics, series, latest_metrics IN EXCLUSIVE MODE")
else:
    import sqlite3
    connection = sqlite3.connect(location, isolation_level=None)
    connection.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(seconds)
connection.rollback() if location.startswith("postgresql") else connection.execute("ROLLBACK")
connection.close()
"""


def tiny(steps: int = 120) -> RunConfig:
    return RunConfig(CellConfig("rnn", 8), TaskConfig("adding", {"seq_len": 10}),
                     TrainConfig(steps=steps, batch_size=16, eval_examples=32, probe_examples=4, log_every=5,
                                 eval_every=20, probe_every=20))


class LockAt(Hook):
    """At step ``step``, another process takes the store's write lock and holds it ``seconds``."""

    def __init__(self, location: str, step: int, seconds: float):
        self.location, self.step, self.seconds = location, step, seconds
        self.holder: subprocess.Popen | None = None
        self.locked_at: float | None = None

    def on_step(self, trainer, result):
        if trainer.step == self.step and self.holder is None:
            self.holder = subprocess.Popen([sys.executable, "-c", HOLDER, self.location, str(self.seconds)],
                                           stdout=subprocess.PIPE, text=True)
            assert self.holder.stdout.readline().strip() == "locked"
            self.locked_at = time.monotonic()


def location_of(store: RunStore) -> str:
    return str(store.path) if store.dialect == "sqlite" else store.url


def test_a_run_rides_out_a_store_locked_for_15_s_and_keeps_every_row(store_location):
    config = tiny()
    with RunStore(store_location) as store:
        run_id = store.create_run(config.to_dict(), "busy")
        lock = LockAt(location_of(store), step=10, seconds=15.0)
        try:
            result = train_run(config, store, run_id, hooks=[lock])
        finally:
            if lock.holder is not None:
                lock.holder.wait(timeout=60)
        assert time.monotonic() - lock.locked_at >= 15.0 - 0.5  # the run outlived the lock: it did meet it
        assert result.status == "completed"
        run = store.record(run_id, latest=False)
        assert run.status == "completed" and run.step == config.train.steps
        stored = store.metrics(run_id)
    assert not stored.duplicated(["step", "name"]).any()  # nothing written twice
    alone = train_run(config)  # the same run, in memory, never blocked
    assert deterministic(stored)[["step", "name"]].values.tolist() == \
        deterministic(alone.metrics)[["step", "name"]].values.tolist()  # every row, in order
    assert deterministic(stored)["value"].tolist() == pytest.approx(deterministic(alone.metrics)["value"].tolist(),
                                                                    nan_ok=True)


def deterministic(rows):
    """The rows a run of a seed always records alike: not its clock's (progress/, speed/) nor the float64
    h0 gradient readings taken between probe steps as the time budget allows."""
    timed = rows["name"].str.startswith(("progress/", "speed/")) | (rows["name"] == "grad/h0_norm")
    return rows[~timed].reset_index(drop=True)


def test_a_run_fails_once_the_store_stays_locked_past_the_sinks_patience(tmp_path, monkeypatch):
    import stability.runs.engine as engine

    monkeypatch.setattr(engine, "BUSY_TIMEOUT_MS", 300)
    monkeypatch.setattr(sinks, "STORE_PATIENCE_S", 3.0)
    config = tiny(steps=400)
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(config.to_dict(), "busy")
        lock = LockAt(str(store.path), step=10, seconds=120.0)
        try:
            with pytest.raises(StoreBusy, match="locked by another writer"):
                train_run(config, store, run_id, hooks=[lock])
            waited = time.monotonic() - lock.locked_at
        finally:
            lock.holder.kill()
            lock.holder.wait()
        assert 3.0 <= waited < 60.0  # it waited its patience, not the lock's two minutes
        assert store.metrics(run_id)["step"].max() < 10 + config.train.log_every  # nothing after the lock landed
