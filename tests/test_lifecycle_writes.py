"""One way through the lifecycle (issue 34, items 3 and 4): ``lifecycle.claimed`` and ``lifecycle.ending``
used by every claimant, a status written only by the lifecycle (read from the source), and what a Train
run writes before its first metric row, counted on a real SQLite store."""
from __future__ import annotations

import ast
import os
import re
import signal
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from stability import presets
from stability.cli import worker
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.execution import lifecycle
from stability.execution.pids import process_start_time
from stability.execution.pids import process_start_time
from stability.execution.signals import Terminated
from stability.runs.store import RunStore
from stability.workers import processes, threads

ROOT = Path(__file__).resolve().parents[1]
LIFECYCLE = "stability/execution/lifecycle.py"


def tiny(steps: int = 6) -> RunConfig:
    return RunConfig(cell=CellConfig("rnn", 8, {}), task=TaskConfig("adding", {"seq_len": 10}),
                     train=TrainConfig(steps=steps, log_every=3, batch_size=16, eval_examples=32, probe_examples=4))


# ------------------------------------------------------------------ ending: the one mapping
def test_ending_maps_an_interrupt_to_stopped_and_anything_else_to_failed_in_one_line():
    assert lifecycle.ending(KeyboardInterrupt()) == ("stopped", "interrupted from the keyboard")
    assert lifecycle.ending(Terminated()) == ("stopped", "terminated")
    assert lifecycle.ending(ValueError("bad value\nmore detail")) == ("failed", "ValueError: bad value")
    assert lifecycle.ending(RuntimeError()) == ("failed", "RuntimeError")


def test_every_claimant_maps_an_exception_with_ending_and_composes_with_claimed():
    """Nothing but the lifecycle maps an exception to a status; no claimant composes signals, the claim
    and the settling itself (the functions that did, train_claimed and settled_on_error, are gone)."""
    assert not hasattr(lifecycle, "train_claimed") and not hasattr(lifecycle, "settled_on_error")
    for path in sorted((ROOT / "stability").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        source = path.read_text(encoding="utf-8")
        if relative != LIFECYCLE:
            assert "describe_error(" not in source, f"{relative} maps an exception itself: use lifecycle.ending"
        if relative not in (LIFECYCLE, "stability/execution/signals.py", "stability/cli/sweeps.py"):
            # a call, not the name: a room's face names it (stability/execution/__init__.py) without calling it
            assert "signals_deferred(" not in source, f"{relative} holds signals back itself: use lifecycle.claimed"
    for relative in ("stability/workers/scheduler.py", "stability/sweeps/workers.py", "stability/presets/running.py",
                     "stability/cli/runs.py"):
        assert "lifecycle.claimed(" in (ROOT / relative).read_text(encoding="utf-8"), relative
    for relative in ("stability/watch/run.py", "stability/watch/lightning.py"):
        assert "ending(" in (ROOT / relative).read_text(encoding="utf-8"), relative


# ------------------------------------------------------------------ claimed: the one composition
def test_an_exception_in_the_block_settles_the_run_failed_in_one_line_and_is_raised_again(store):
    with pytest.raises(ValueError, match="no such option"):
        with lifecycle.claimed(store, lambda: lifecycle.create_claimed(store, tiny())) as run:
            raise ValueError("no such option\nthe rest of the story")
    record = store.record(run.run_id, latest=False)
    assert (record.status, record.error) == ("failed", "ValueError: no such option") == (run.status, run.error)


@pytest.mark.parametrize("interrupt, error", [(KeyboardInterrupt, "interrupted from the keyboard"),
                                              (Terminated, "terminated")])
def test_an_interrupt_in_the_block_stops_the_run(store, interrupt, error):
    with pytest.raises(interrupt):
        with lifecycle.claimed(store, lambda: lifecycle.create_claimed(store, tiny())) as run:
            raise interrupt()
    assert (store.record(run.run_id, latest=False).status, run.error) == ("stopped", error)


def test_sigterm_in_the_block_raises_terminated_and_stops_the_run(store):
    with pytest.raises(Terminated):
        with lifecycle.claimed(store, lambda: lifecycle.create_claimed(store, tiny())) as run:
            os.kill(os.getpid(), signal.SIGTERM)  # raised as Terminated inside the block, not the default death
    assert store.record(run.run_id, latest=False).status == "stopped"


def claimed_while_interrupted(store):
    def take():
        claim = lifecycle.create_claimed(store, tiny())
        os.kill(os.getpid(), signal.SIGINT)  # arrives while the claim is being written: held back
        return claim

    return lifecycle.claimed(store, take)


def test_a_signal_during_the_claim_is_held_back_then_stops_the_run_where_it_would_train(store):
    with pytest.raises(KeyboardInterrupt):
        with claimed_while_interrupted(store) as run:
            assert store.record(run.run_id, latest=False).status == "queued"  # claimed, the caller knows it
            run.train(tiny())
    record = store.record(run.run_id)
    assert (record.status, record.error) == ("stopped", "interrupted from the keyboard") and record.latest == {}
    with pytest.raises(KeyboardInterrupt):  # a block that never trains it: stopped at its end
        with claimed_while_interrupted(store) as other:
            pass
    assert (store.record(other.run_id, latest=False).status, other.error) == ("stopped", "interrupted from the keyboard")


def test_a_block_that_ends_without_training_settles_its_run_and_nothing_claimed_is_none(store):
    with lifecycle.claimed(store, lambda: lifecycle.create_claimed(store, tiny())) as run:
        pass
    assert (store.record(run.run_id, latest=False).status, run.error) == ("failed", lifecycle.NOT_TRAINED_ERROR)
    queued = lifecycle.create_queued(store, tiny())
    assert lifecycle.claim_queued(store, queued) is not None
    with lifecycle.claimed(store, lambda: lifecycle.claim_queued(store, queued)) as nothing:  # another has it
        assert nothing is None
    assert store.record(queued, latest=False).status == "queued"


def test_a_trained_run_is_settled_once_by_its_training(store):
    with lifecycle.claimed(store, lambda: lifecycle.create_claimed(store, tiny())) as run:
        result = run.train(tiny())
    record = store.record(run.run_id)
    assert result.status == record.status == run.status == "completed" and record.latest
    assert not store.checkpoint_path(run.run_id).exists()  # Note [Checkpoints kept]


# ------------------------------------------------------------------ presets: a failure said, the next run trained
def test_a_preset_says_a_failed_runs_one_line_error_and_trains_its_next_run(store, monkeypatch):
    from stability.training import run as training

    real, calls = training.build_and_train, []

    def first_fails(config, **kwargs):
        calls.append(config)
        if len(calls) == 1:
            raise RuntimeError("the data went away\ntraceback-ish detail")
        return real(config, **kwargs)

    monkeypatch.setattr(training, "build_and_train", first_fails)
    lines = []
    override = {"cell": {"hidden_size": 8}, "task": {"options": {"seq_len": 5}},
                "train": {"steps": 3, "log_every": 1, "eval_every": 3, "eval_examples": 16, "probe_examples": 4,
                          "batch_size": 8}}
    run_ids = presets.run(presets.load("sgornn-table1"), store, override=override, progress=lines.append)
    assert len(run_ids) >= 2 and len(calls) == len(run_ids)
    first = store.record(run_ids[0], latest=False)
    assert (first.status, first.error) == ("failed", "RuntimeError: the data went away")
    assert any(f"run {run_ids[0]} " in line and "failed (RuntimeError: the data went away)" in line for line in lines)
    assert store.record(run_ids[1], latest=False).status == "completed"


# ------------------------------------------------------------------ only the lifecycle writes a status
STATUS_SOURCES = ["stability", "pages"]  # and app.py: what ships and what the server runs
STORE_ROOM = "stability/runs/"  # the store itself: its INSERT, its compare-and-set, its migrations


def status_writes(source: str) -> list[str]:
    """What in ``source`` writes a run's status (or may): ``set_status``; ``update_run(status=...)``; a new
    run (``create_run``: its status is born 'queued' or claimed); ``compare_and_set`` unless its ``fields``
    are a dict literal without ``status`` (the sink's step beat); the runs' table imported (SQL on the runs)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and any(alias.name == "runs_table" for alias in node.names):
            found.append(f"line {node.lineno}: runs_table")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, keywords = node.func.attr, {keyword.arg: keyword.value for keyword in node.keywords}
        fields = keywords.get("fields")
        literal_without_status = isinstance(fields, ast.Dict) and None not in fields.keys and not any(
            isinstance(key, ast.Constant) and key.value == "status" for key in fields.keys)
        if name == "set_status" or name == "create_run" or (name == "update_run" and "status" in keywords) \
                or (name == "compare_and_set" and not literal_without_status):
            found.append(f"line {node.lineno}: {name}")
    return found


def test_the_status_scan_finds_each_kind_of_write():
    planted = ("store.set_status(1, 'failed')\nstore.update_run(1, status='running')\nstore.create_run({})\n"
               "store.compare_and_set(1, statuses=['queued'], fields={'status': 'stopped'})\n"
               "store.compare_and_set(1, statuses=['queued'], fields=fields)\n"
               "from stability.runs.schema import runs_table\n")
    assert len(status_writes(planted)) == 6
    assert status_writes("store.compare_and_set(1, statuses=('running',), fields={'step': 3, 'heartbeat': 1.0})\n"
                         "store.update_run(1, step=3)\n") == []


def test_nothing_outside_the_lifecycle_writes_a_runs_status():
    paths = [ROOT / "app.py"] + [path for folder in STATUS_SOURCES for path in sorted((ROOT / folder).rglob("*.py"))]
    writers = {}
    for path in paths:
        relative = path.relative_to(ROOT).as_posix()
        if relative == LIFECYCLE or relative.startswith(STORE_ROOM) or not path.exists():
            continue
        found = status_writes(path.read_text(encoding="utf-8"))
        if found:
            writers[relative] = found
    assert writers == {}, f"a status written outside {LIFECYCLE}: {writers}"


def test_the_store_refuses_a_status_outside_a_compare_and_set(store):
    run_id = lifecycle.create_queued(store, tiny())
    for call in (lambda: store.update_run(run_id, status="completed"),
                 lambda: store.create_run(tiny().to_dict(), fields={"status": "running"})):
        with pytest.raises(ValueError, match="written only by stability.execution.lifecycle"):
            call()
    assert [record.status for record in store.records()] == ["queued"]


# ------------------------------------------------------------------ what a Train run writes before its first row
@pytest.fixture
def statements():
    """Every statement the SQLite connections opened meanwhile send (the driver's own inserts too)."""
    sent: list[str] = []

    def trace(connection, record):
        connection.set_trace_callback(lambda statement: sent.append(" ".join(statement.split())))

    event.listen(Engine, "connect", trace)
    try:
        yield sent
    finally:
        event.remove(Engine, "connect", trace)


@pytest.fixture
def counted(monkeypatch):
    """The stores opened and the configs validated meanwhile; this process's threads left as they are."""
    opened, validated = [], []
    real_open, real_validate = RunStore.__init__, RunConfig.validate
    monkeypatch.setattr(RunStore, "__init__", lambda self, *a, **k: (opened.append(1), real_open(self, *a, **k))[1])
    monkeypatch.setattr(RunConfig, "validate", lambda self: (validated.append(1), real_validate(self))[1])
    monkeypatch.setattr(threads, "apply_worker_threads", lambda *args: None)
    return opened, validated


class Process:
    """A worker process as the queue sees it: this test's process, which then runs the worker's code."""
    pid = os.getpid()


def identity() -> dict:
    return {"pid": os.getpid(), "token": "test", "start": process_start_time(os.getpid())}


def writes_before_the_first_row(statements: list[str]) -> list[str]:
    first_row = next(index for index, statement in enumerate(statements) if statement.startswith("INSERT INTO metrics"))
    return [statement for statement in statements[:first_row] if re.match(r"(INSERT INTO|UPDATE) runs\b", statement)]


def train_from_the_page(path, monkeypatch, handed: dict) -> int:
    """access.start_run's path (scheduler.start_run: stored, claimed and launched under the scheduling lock) in
    a server, here another live process (this one's parent: its pid is the queue's claim's), then the
    worker's entry point in this process with the claim it was handed."""
    from stability.workers import scheduler

    with monkeypatch.context() as server:
        server.setattr(os, "getpid", os.getppid)
        run_id = scheduler.start_run(tiny(), path)
    monkeypatch.setenv(processes.CLAIM_ENV, handed["token"])
    assert worker._run_worker(run_id, str(path)) == 0
    return run_id


def test_a_train_runs_row_is_written_five_times_before_its_first_metric_row(tmp_path, statements, monkeypatch,
                                                                            counted):
    """The Train page's path to a fresh worker: the run's INSERT with its host; the queue's claim; the
    worker's pid handed over; 'running' with what the pages show; the heartbeat in the first rows' own
    transaction. The worker adopts its claim by a read, opens the store once and validates the config once
    (issue 34: 7 writes, 3 stores opened, 2 validations before)."""
    path = tmp_path / "runs.db"
    RunStore(path).close()
    handed = {}

    def spawn(store, arguments, name, limit, extra_env=None, *, waiting=False):
        handed["token"] = extra_env[processes.CLAIM_ENV]
        return Process(), identity()

    monkeypatch.setattr(processes, "spawn", spawn)
    opened, validated = counted
    opened.clear(), validated.clear(), statements.clear()
    run_id = train_from_the_page(path, monkeypatch, handed)
    writes = writes_before_the_first_row(statements)
    assert len(writes) == 5, "\n".join(writes)
    assert writes[0].startswith("INSERT INTO runs") and "host" in writes[0]
    assert "claim=" in writes[1] and writes[2].startswith("UPDATE runs SET pid=") and "status='running'" in writes[3]
    assert writes[4].startswith("UPDATE runs SET heartbeat=")  # in the transaction of the first rows
    assert (len(opened), len(validated)) == (2, 2)  # one each in the server, one each in the worker
    with RunStore(path) as store:
        assert store.record(run_id, latest=False).status == "completed"


def test_a_run_handed_to_a_warm_worker_is_claimed_with_its_pid_and_written_four_times(tmp_path, statements,
                                                                                     monkeypatch, counted):
    """A server's usual path (a warm worker idle on a pipe, stability.workers.warm): the queue claims the
    run with the warm worker's pid, so neither a hand-over nor the worker's adoption writes."""
    from stability.workers import warm

    path = tmp_path / "runs.db"
    RunStore(path).close()
    handed = {}

    def hand_run(store, run_id, token, environment, limit):
        handed["token"] = token
        return Process(), identity()

    monkeypatch.setattr(warm, "idle_pid", lambda store: Process.pid)  # this process: the worker
    monkeypatch.setattr(warm, "hand_run", hand_run)
    monkeypatch.setattr(processes, "spawn", lambda *args, **kwargs: pytest.fail("a warm worker was idle"))
    statements.clear()
    run_id = train_from_the_page(path, monkeypatch, handed)
    writes = writes_before_the_first_row(statements)
    assert len(writes) == 4, "\n".join(writes)
    assert f"pid={Process.pid}" in writes[1] and "claim=" in writes[1] and "status='running'" in writes[2]
    with RunStore(path) as store:
        assert store.record(run_id, latest=False).status == "completed"
