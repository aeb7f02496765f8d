"""A logging library never kills its user's loop (issue 33, item 5): stability.watch rides out a store it
cannot write (stability/watch/run.py, Note [Your loop goes on]; stability/training/sinks.py, Note [An
unwritable store]); an external run records its process's start time, so a reused pid is not taken for
it (stability/execution/lifecycle.py); a silent external run can be marked ended and deleted
(lifecycle.mark_abandoned, ``stability delete``). Real parts: a real SQLite store whose write lock a
second process holds (BEGIN EXCLUSIVE stops root too, where a chmod does not), a real nn.LSTM loop, real
processes for the pids."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import pytest
import torch
from torch import nn

import stability.runs.engine as engine
import stability.watch as sw
import stability.watch.run as watch_run
from stability.runs.store import RunStore, StoreBusy
from statuses import set_status

HOLDER = r"""
import sys, sqlite3
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()  # held until the test says so
connection.execute("ROLLBACK")
connection.close()
"""


class Lock:
    """Another process holding an SQLite store's write lock until :meth:`release`."""

    def __init__(self, path):
        self.process = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "locked"

    def release(self):
        if self.process.poll() is None:
            self.process.stdin.write("\n")
            self.process.stdin.flush()
        self.process.wait(timeout=30)
        self.process.stdin.close()
        self.process.stdout.close()


class LstmLoop:
    """A small nn.LSTM trained on random data, one :meth:`step` a training step through ``run``."""

    def __init__(self, run, hidden=4):
        torch.manual_seed(0)
        self.lstm, self.head = nn.LSTM(3, hidden, batch_first=True), nn.Linear(hidden, 1)
        self.model = nn.ModuleDict({"lstm": self.lstm, "head": self.head})
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.run, self.hidden, self.steps = run, hidden, 0
        run.watch(self.model, every=1)

    def step(self):
        x, y = torch.randn(2, 5, 3), torch.randn(2, 1)
        h0 = torch.zeros(1, 2, self.hidden, requires_grad=True)
        out, _ = self.lstm(x, (h0, torch.zeros(1, 2, self.hidden)))
        loss = ((self.head(out[:, -1]) - y) ** 2).mean()
        self.run.step(loss, h0=h0)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.steps += 1


@pytest.fixture
def quick_store(tmp_path, monkeypatch):
    """A real SQLite store whose busy timeout is short (the engine's own constant), so each try on a locked
    store costs 0.3 s, not 10 s; every row written at once (no 1 s batching) so the loop meets the lock."""
    monkeypatch.setattr(engine, "BUSY_TIMEOUT_MS", 300)
    monkeypatch.setattr(watch_run, "WRITE_EVERY_S", 0.0)
    with RunStore(tmp_path / "runs.db") as store:
        yield store


def store_warnings(caught):
    return [str(w.message) for w in caught if issubclass(w.category, sw.StoreWarning)]


def test_a_locked_store_warns_once_keeps_the_newest_rows_and_writes_them_when_it_comes_back(quick_store,
                                                                                            monkeypatch):
    from stability.training import sinks

    store = quick_store
    monkeypatch.setattr(watch_run, "MAX_PENDING_ROWS", 120, raising=False)
    monkeypatch.setattr(sinks, "STORE_PATIENCE_S", 1.0)  # "raise" would give up after 1 s; "warn" never does
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = sw.init("locked", store=store)
        loop = LstmLoop(run)
        for _ in range(3):
            loop.step()
        per_step = len(store.metrics(run.id).query("step == 1")) + len(run.sink.series().query("step == 1"))
        lock = Lock(store.path)
        try:
            locked = time.monotonic()
            for _ in range(30):  # the whole outage: the loop goes on, nothing raised
                loop.step()
            while time.monotonic() - locked < 2.0:  # past the patience of "raise"
                time.sleep(0.05)
                loop.step()
            assert run.sink.pending_rows() > 0 and run.sink.dropped_rows > 0
            during = store_warnings(caught)
        finally:
            lock.release()
        for _ in range(200):  # a bounded wait: steps until a retry lands the rows kept
            loop.step()
            if run.sink.pending_rows() == 0:
                break
            time.sleep(0.05)
        assert run.sink.pending_rows() == 0
        run.finish()
    assert len(during) == 1 and "cannot be written" in during[0] and "training goes on" in during[0]
    rows = store.metrics(run.id)
    steps = sorted(set(rows["step"]))
    missing = sorted(set(range(1, loop.steps + 1)) - set(steps))
    assert missing and missing == list(range(missing[0], missing[-1] + 1))  # one gap: the oldest dropped
    assert 3 <= missing[0] < 33 and missing[-1] < loop.steps  # from the outage on; the newest kept and written
    assert run.sink.dropped_rows == len(missing) * per_step
    assert store.record(run.id).status == "completed" and store.record(run.id).step == loop.steps
    assert not rows.duplicated(["step", "name"]).any()
    end = store_warnings(caught)[len(during):]
    assert len(end) == 1 and f"{run.sink.dropped_rows:,} rows were dropped (the oldest" in end[0]


def test_a_store_locked_at_the_end_is_a_warning_and_the_rows_come_with_the_next_write(quick_store,
                                                                                     monkeypatch):
    """The loop ends while the store is still locked: finish waits its patience, warns, never raises."""
    store = quick_store
    monkeypatch.setattr(watch_run, "FINISH_PATIENCE_S", 1.0, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lock = None
        try:
            with sw.init("locked at the end", store=store) as run:
                loop = LstmLoop(run)
                loop.step()
                lock = Lock(store.path)
                for _ in range(5):
                    loop.step()
        finally:
            if lock is not None:
                lock.release()
    texts = store_warnings(caught)
    assert len(texts) == 2 and "rows could not be written in 1 s" in texts[1]
    assert "shows 'running' until it is marked ended" in texts[1]
    assert store.record(run.id).status == "running"  # not settled: the store never took it


def test_a_postgresql_server_stopped_mid_loop_and_started_again_gets_the_rows_kept(monkeypatch):
    """A real PostgreSQL server of its own (tests/postgres.py), stopped under the loop and started again."""
    from postgres import REQUIRE_ENV, Cluster, ClusterUnavailable

    from stability.training import sinks

    monkeypatch.setattr(watch_run, "WRITE_EVERY_S", 0.0)
    monkeypatch.setattr(sinks, "STORE_PATIENCE_S", 1.0)  # "raise" would give up after 1 s; "warn" never does
    try:
        cluster = Cluster.start()
    except ClusterUnavailable as reason:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"PostgreSQL tests required ({REQUIRE_ENV}=1) but {reason}")
        pytest.skip(str(reason))
    try:
        options = (f"-h 127.0.0.1 -p {cluster.port} -k {cluster.root} -c fsync=off -c synchronous_commit=off"
                   " -c full_page_writes=off")
        with RunStore(cluster.new_database()) as store, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run = sw.init("server gone", store=store)
            loop = LstmLoop(run)
            for _ in range(3):
                loop.step()
            cluster._run("pg_ctl", "-D", str(cluster.data), "-m", "fast", "-w", "stop")
            gone = time.monotonic()
            while time.monotonic() - gone < 2.0:  # the server is gone, past the patience of "raise"
                loop.step()
                time.sleep(0.05)
            assert run.sink.pending_rows() > 0
            during = store_warnings(caught)
            cluster._run("pg_ctl", "-D", str(cluster.data), "-l", str(cluster.log), "-o", options, "-w", "start")
            for _ in range(300):  # a bounded wait: steps until a retry lands the rows kept
                loop.step()
                if run.sink.pending_rows() == 0:
                    break
                time.sleep(0.05)
            run.finish()
            assert len(during) == 1 and "cannot be written" in during[0]
            assert store_warnings(caught) == during  # nothing dropped, nothing left: no second warning
            assert store.record(run.id).status == "completed"
            assert sorted(set(store.metrics(run.id)["step"])) == list(range(1, loop.steps + 1))  # every step
    finally:
        cluster.stop()


def test_on_store_error_raise_keeps_the_old_rule(quick_store, monkeypatch):
    from stability.training import sinks

    store = quick_store
    monkeypatch.setattr(sinks, "STORE_PATIENCE_S", 1.5)
    run = sw.init("raise", store=store, on_store_error="raise")
    loop = LstmLoop(run)
    loop.step()
    lock = Lock(store.path)
    try:
        with pytest.raises(StoreBusy, match="locked by another writer"):
            for _ in range(200):  # bounded: the patience runs out long before
                loop.step()
                time.sleep(0.05)
    finally:
        lock.release()
    with pytest.raises(ValueError, match="on_store_error must be one of 'raise', 'warn'"):
        sw.init("bad", store=store, on_store_error="ignore")


def test_a_run_deleted_under_its_loop_is_one_warning_and_the_loop_goes_on(quick_store):
    store = quick_store
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with sw.init("deleted", store=store) as run:
            loop = LstmLoop(run)
            loop.step()
            # as the Runs page's "Mark ended" then Delete do, its process alive all the while
            assert store.compare_and_set(run.id, statuses=["running"], fields={"status": "interrupted", "claim": None})
            store.delete_run(run.id)
            for _ in range(5):
                loop.step()
                time.sleep(0.12)  # past the sink's stop poll
    texts = store_warnings(caught)
    assert loop.steps == 6 and len(texts) == 1 and "it was deleted from the store" in texts[0]


def test_the_lightning_callback_takes_on_store_error_through(quick_store):
    from types import SimpleNamespace

    from stability.watch.lightning import StabilityCallback

    for option in ("raise", "warn"):
        callback = StabilityCallback("lightning", store=quick_store, on_store_error=option)
        callback.on_fit_start(SimpleNamespace(max_steps=3), nn.ModuleDict({"lstm": nn.LSTM(3, 4)}))
        assert callback.run.on_store_error == option and callback.run.sink.on_store_error == option
        callback.on_fit_end(None, None)
    assert StabilityCallback("default").on_store_error == "warn"


# ------------------------------------------------------------------ a pid and its start time
def test_every_claim_records_its_pids_start_time(tmp_path):
    import psutil

    from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
    from stability.execution import lifecycle

    mine = psutil.Process().create_time()
    config = RunConfig(CellConfig("rnn", 4), TaskConfig("adding", {"seq_len": 5}), TrainConfig(steps=2))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with RunStore(tmp_path / "runs.db") as store:
            with sw.init("external", store=store) as run:
                assert store.record(run.id).pid_started == mine  # at birth
            born = lifecycle.create_claimed(store, config)
            assert store.record(born.run_id).pid_started == mine
            queued = store.create_run(config.to_dict(), "queued")
            claim = lifecycle.claim_for_worker(store, queued)
            assert store.record(queued).pid_started == mine
            lifecycle.hand_over(store, claim, child.pid)  # the worker launched for it
            assert store.record(queued).pid_started == psutil.Process(child.pid).create_time()
            assert lifecycle.adopt(store, queued, claim.token) is not None
            assert store.record(queued).pid_started == mine
            lifecycle.release(store, lifecycle.Claim(queued, claim.token, 0, ""))
            assert (store.record(queued).pid, store.record(queued).pid_started) == (None, None)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("external", [True, False])
def test_a_live_pid_with_another_start_time_is_not_the_claimant(tmp_path, external):
    """A pid reused by another process (alive, started after the claimant): the claimant is gone."""
    import psutil

    from stability.execution import lifecycle

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = psutil.Process(child.pid).create_time()
        with RunStore(tmp_path / "runs.db") as store:
            def run_with(pid_started):
                run_id = store.create_run({"name": "x"}, "x", external=external, claimed={
                    "status": "running", "pid": child.pid, "pid_started": pid_started,
                    "host": lifecycle.this_host(), "claim": "token"})
                return store.record(run_id)

            assert not lifecycle.claimant_gone(run_with(started))  # the claimant itself, alive
            assert lifecycle.claimant_gone(run_with(started - 3600.0))  # its pid, now another process's
            assert not lifecycle.claimant_gone(run_with(None))  # an older claim: its pid alone
    finally:
        child.kill()
        child.wait()


# ------------------------------------------------------------------ a silent external run: marked ended, deleted
def external_run(store, *, host="notebook-container", silent_min=11.0, pid=None):
    """An external run as a loop on ``host`` leaves it when its process dies there: 'running', claimed,
    its last word ``silent_min`` minutes ago (the times written back into the real store's row)."""
    import sqlite3

    from stability.execution import lifecycle

    claim = lifecycle.create_external(store, {"name": "notebook", "external": True}, "notebook")
    store.update_run(claim.run_id, host=host, **({} if pid is None else {"pid": pid}))
    store.flush(claim.run_id, [(1, time.time(), "train/loss", 0.5)], [], heartbeat_step=1)
    then = time.time() - silent_min * 60
    if store.dialect == "sqlite":
        with sqlite3.connect(store.path) as connection:
            connection.execute("UPDATE runs SET created_at = ?, started_at = ?, heartbeat = ? WHERE id = ?",
                               (then, then, then, claim.run_id))
    else:
        import psycopg

        with psycopg.connect(store.url.replace("postgresql+psycopg://", "postgresql://")) as connection:
            connection.execute("UPDATE runs SET created_at = %s, started_at = %s, heartbeat = %s WHERE id = %s",
                               (then, then, then, claim.run_id))
    return claim.run_id


def delete(store, *args):
    from stability.cli.main import main

    return main(["delete", "--store", str(store.path), *map(str, args)])


def test_cli_delete_deletes_finished_runs_and_says_in_one_line_why_not_the_others(quick_store, capsys):
    from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig

    store = quick_store
    config = RunConfig(CellConfig("rnn", 4), TaskConfig("adding", {"seq_len": 5}), TrainConfig(steps=2))
    done = store.create_run(config.to_dict(), "done")
    set_status(store, done, "completed")
    training = store.create_run(config.to_dict(), "training")
    store.update_run(training, pid=os.getpid())
    set_status(store, training, "running")
    silent = external_run(store)
    speaking = external_run(store, silent_min=1.0)
    assert delete(store, done, training, silent, speaking, 999) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"deleted run {done}"]
    lines = err.splitlines()
    assert len(lines) == 4 and all(line.startswith("stability: error: ") for line in lines)
    assert f"run {training} is running; stop it first" in lines[0]
    assert f"--mark-ended {silent}` marks it ended and deletes it" in lines[1]
    assert f"run {speaking} is an external run that spoke 1 min ago" in lines[2]
    assert "no run with id 999" in lines[3]
    assert sorted(run.id for run in store.records()) == sorted([training, silent, speaking])
    assert delete(store, "--mark-ended", silent) == 0  # the run of a process that died elsewhere
    assert capsys.readouterr().out.splitlines() == [f"deleted run {silent}"]
    assert sorted(run.id for run in store.records()) == sorted([training, speaking])


def test_mark_ended_leaves_a_run_that_spoke_meanwhile_and_one_alive_on_this_host(store_location):
    from stability.execution import lifecycle

    with RunStore(store_location) as store:
        check_mark_ended(store, lifecycle)


def check_mark_ended(store, lifecycle):
    run_id = external_run(store)
    read = store.record(run_id)
    assert lifecycle.abandoned(read) is None
    store.flush(run_id, [(2, time.time(), "train/loss", 0.4)], [], heartbeat_step=2)  # it speaks after the read
    assert not lifecycle.mark_abandoned(store, read)  # the compare-and-set on the heartbeat read
    assert store.record(run_id).status == "running"
    here = external_run(store, host=lifecycle.this_host(), pid=os.getpid())  # silent, but its process lives here
    assert "is alive on this host" in lifecycle.abandoned(store.record(here))
    assert not lifecycle.mark_abandoned(store, store.record(here))
    gone = external_run(store)
    assert lifecycle.mark_abandoned(store, store.record(gone))
    record = store.record(gone)
    assert (record.status, record.claim) == ("interrupted", None) and "marked ended" in record.error


def test_a_loop_whose_run_was_marked_ended_is_warned_once_and_goes_on(quick_store):
    """The loop was only thinking (its process alive elsewhere): marked ended, it logs no more, never raises."""
    store = quick_store
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with sw.init("thinking", store=store) as run:
            loop = LstmLoop(run)
            loop.step()
            record = store.record(run.id)
            assert store.compare_and_set(run.id, statuses=["running"], fields={"claim": None})  # as marked ended
            for _ in range(5):
                loop.step()
                time.sleep(0.12)  # past the sink's stop poll
    texts = store_warnings(caught)
    assert loop.steps == 6 and len(texts) == 1 and "it was marked ended" in texts[0]
    assert record.status == "running"


def test_the_runs_page_marks_a_silent_external_run_ended_then_deletes_it(quick_store, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from pathlib import Path

    store = quick_store
    monkeypatch.setenv("STABILITY_STORE", str(store.path))
    silent = external_run(store)
    speaking = external_run(store, silent_min=1.0)
    app = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "pages" / "runs.py"),
                            default_timeout=30).run()
    ids = app.dataframe[0].value["id"].tolist()
    app.session_state["runs_table"] = {"selection": {"rows": [ids.index(speaking)]}}
    app.run()
    assert not [b for b in app.button if b.key == "runs_mark_ended"]  # it spoke a minute ago
    app.session_state["runs_table"] = {"selection": {"rows": [ids.index(silent), ids.index(speaking)]}}
    app.run()
    next(b for b in app.button if b.key == "runs_mark_ended").click().run()
    assert not app.exception
    assert store.record(silent).status == "interrupted" and store.record(speaking).status == "running"
    assert f"#{silent} marked ended" in app.success[0].value
    app.session_state["runs_table"] = {"selection": {"rows": [app.dataframe[0].value["id"].tolist().index(silent)]}}
    app.run()
    next(b for b in app.button if b.key == "runs_delete").click().run()
    next(b for b in app.button if b.key == "runs_delete_confirm").click().run()
    assert not app.exception
    assert sorted(run.id for run in store.records()) == [speaking]
