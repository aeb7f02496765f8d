"""Background workers: real worker processes on a tiny adding problem, each test with its own store."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig
from stability.execution import lifecycle
from stability.execution.pids import is_alive, process_start_time
from stability.execution.pids import is_alive, process_start_time
from stability.runs.status import TERMINAL
from stability.runs.store import RunStore
from stability.workers import threads as thread_policy
from stability.workers import processes, scheduler
from statuses import set_status

LONG = 100_000  # steps: a run that only ends when stopped or killed
WAIT_S = 60.0  # generous: a worker's start (fresh interpreter, torch import) on a loaded machine


def tiny(steps: int = 30, cell: str = "rnn", cell_options=None, task: str = "adding",
         task_options=None, **train) -> RunConfig:
    return RunConfig(cell=CellConfig(cell, 8, dict(cell_options or {})),
                     task=TaskConfig(task, {"seq_len": 10} if task_options is None else task_options),
                     train=TrainConfig(steps=steps, log_every=5, batch_size=16, eval_examples=32,
                                       probe_examples=4, **train))


def wait_until(predicate, timeout: float = WAIT_S, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value is not None and value is not False:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def store_path(tmp_path):
    """A fresh store; at teardown every worker still alive in it is killed."""
    path = tmp_path / "runs.db"
    yield path
    if not path.exists():
        return
    with RunStore(path) as store:
        for run in store.records(latest=False):
            pid = run.pid
            if run.status not in TERMINAL and pid is not None and is_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def store(store_path):
    with RunStore(store_path) as opened:
        yield opened


def status_of(store, run_id):
    return store.record(run_id, latest=False).status


def wait_for_status(store, run_id, statuses, timeout: float = WAIT_S) -> str:
    return wait_until(lambda: status_of(store, run_id) in statuses and status_of(store, run_id),
                      timeout, f"run {run_id} to reach {statuses} (it is {status_of(store, run_id)!r})")


def wait_for_rows(store, run_id, steps: int = 2):
    """Wait until the worker has committed rows at ``steps`` distinct logged steps after step 0."""
    def enough():
        frame = store.metrics(run_id, since_step=0)
        return frame if frame["step"].nunique() >= steps else None

    return wait_until(enough, what=f"metric rows of run {run_id}")


def test_background_run_completes_and_logs(store_path, store):
    run_id = scheduler.start_run(tiny(), store_path, name="tiny")
    assert wait_for_status(store, run_id, TERMINAL) == "completed"
    run = store.record(run_id, latest=False)
    assert run.name == "tiny" and run.error is None and run.step == 30
    metrics = store.metrics(run_id)
    assert {"train/loss", "val/loss", "test/mse", "grad/h0_norm"} <= set(metrics["name"])
    assert metrics["step"].max() == 30
    wait_until(lambda: not is_alive(run.pid), what="the worker to exit")
    log = store_path.parent / "logs" / f"run-{run_id}.log"
    assert f"run {run_id}: completed" in log.read_text()


def test_start_run_rejects_a_bad_config_and_stores_nothing(store_path, store):
    with pytest.raises(ConfigError, match="lr"):
        scheduler.start_run(tiny(lr=-1.0), store_path)
    with pytest.raises(ConfigError, match="vprnn"):
        scheduler.start_run(RunConfig(cell=CellConfig("vprnn", 7)), store_path)
    assert not store.records(latest=False)


def test_two_runs_train_at_once(store_path, store):
    first = scheduler.start_run(tiny(LONG), store_path, max_concurrent=2)
    second = scheduler.start_run(tiny(LONG, seed=1), store_path, max_concurrent=2)
    wait_until(lambda: status_of(store, first) == status_of(store, second) == "running", what="both running")
    pids = {store.record(first, latest=False).pid, store.record(second, latest=False).pid}
    assert len(pids) == 2 and all(is_alive(pid) for pid in pids)
    wait_for_rows(store, first)
    wait_for_rows(store, second)
    assert scheduler.stop_run(first, store_path) == scheduler.stop_run(second, store_path) == "stopped"


def test_a_full_slot_queues_the_next_run_until_it_frees(store_path, store):
    first = scheduler.start_run(tiny(LONG), store_path, max_concurrent=1)
    second = scheduler.start_run(tiny(20), store_path, max_concurrent=1)
    wait_for_status(store, first, ["running"])
    assert scheduler.reconcile(store_path, max_concurrent=1) == []
    time.sleep(1.0)
    assert status_of(store, second) == "queued" and store.record(second, latest=False).pid is None
    assert scheduler.stop_run(first, store_path) == "stopped"
    # the first worker launches the queued run as it exits
    assert wait_for_status(store, second, TERMINAL) == "completed"
    assert store.record(second, latest=False).started_at >= store.record(first, latest=False).finished_at


def test_concurrent_schedulers_never_launch_a_run_twice(store_path, store):
    run_ids = [store.create_run(tiny(LONG).to_dict()) for _ in range(3)]
    threads = [threading.Thread(target=scheduler.reconcile, args=(store_path, 1)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    claimed = [run_id for run_id in run_ids if store.record(run_id, latest=False).pid is not None]
    assert claimed == [run_ids[0]]  # the oldest, once
    assert scheduler.stop_run(run_ids[0], store_path) == "stopped"


def test_sigkilled_worker_is_interrupted_and_keeps_its_rows(store_path, store):
    run_id = scheduler.start_run(tiny(LONG), store_path)
    wait_for_status(store, run_id, ["running"])
    before = wait_for_rows(store, run_id, steps=3)
    pid = store.record(run_id, latest=False).pid
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not is_alive(pid), what="the killed worker to be gone")
    assert status_of(store, run_id) == "running"  # nobody has looked yet
    assert scheduler.reconcile(store_path) == [run_id]
    run = store.record(run_id, latest=False)
    assert run.status == "interrupted" and run.error == lifecycle.INTERRUPTED_ERROR
    after = store.metrics(run_id)
    seen = set(map(tuple, before[["step", "name", "value"]].values.tolist()))
    assert seen <= set(map(tuple, after[["step", "name", "value"]].values.tolist()))
    assert scheduler.reconcile(store_path) == []


def test_stop_ends_a_running_run_within_seconds(store_path, store):
    run_id = scheduler.start_run(tiny(LONG), store_path)
    wait_for_status(store, run_id, ["running"])
    wait_for_rows(store, run_id)
    started = time.monotonic()
    assert scheduler.stop_run(run_id, store_path, timeout=5.0) == "stopped"
    assert time.monotonic() - started < 5.0
    run = store.record(run_id, latest=False)
    assert run.error is None  # the worker saw the flag and ended the run itself
    assert store.checkpoint_path(run_id).exists()


def test_stop_terminates_a_worker_that_does_not_stop_in_time(store_path, store):
    run_id = scheduler.start_run(tiny(LONG), store_path)
    wait_for_status(store, run_id, ["running"])
    pid = store.record(run_id, latest=False).pid
    os.kill(pid, signal.SIGSTOP)  # a worker that does not heed the request (with timeout 0 one that reads it
    # within the few ms before stop_run looks again would end the run itself, and this test would not test this)
    assert scheduler.stop_run(run_id, store_path, timeout=0.0) == "stopped"
    assert not is_alive(pid)
    assert "terminated" in store.record(run_id, latest=False).error


@pytest.fixture
def innocent():
    """A process that is no worker, though its command line says 'stability.cli.worker --worker 1'."""
    def start(**env):
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "stability.cli.worker",
                                    "--worker", "1"], env={**os.environ, **env}, start_new_session=True)
        started.append(process)
        wait_until(lambda: b"stability.cli.worker" in open(f"/proc/{process.pid}/cmdline", "rb").read(),
                   timeout=10, what="the innocent process to exec")
        return process

    started: list[subprocess.Popen] = []
    yield start
    for process in started:
        process.kill()
        process.wait()


def crafted_running_run(store, pid: int) -> int:
    run_id = store.create_run(tiny(LONG).to_dict())
    set_status(store, run_id, "running", pid=pid, heartbeat=time.time())
    return run_id


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_stop_never_signals_a_process_that_a_crafted_store_names(store_path, store, innocent):
    # changed with the run lifecycle: such a run was marked 'stopped' though its process lived on; a
    # process that cannot be proven dead is now never marked stopped (the stop says so in one line)
    process = innocent()
    no_claim = crafted_running_run(store, process.pid)
    with_claim = crafted_running_run(store, process.pid)  # the right pid and start time, a guessed token
    processes.write_identity(store, with_claim, {"pid": process.pid, "token": "0" * 32,
                                                 "start": process_start_time(process.pid)})
    for run_id in (no_claim, with_claim):
        outcome = scheduler.stop_run(run_id, store_path, timeout=0.0)
        assert outcome.startswith(f"run {run_id} is still running") and "not signalled" in outcome
        assert "\n" not in outcome
        assert store.record(run_id, latest=False).status == "running" and store.record(run_id, latest=False).stop_requested
        time.sleep(0.2)
        assert process.poll() is None and is_alive(process.pid)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_a_worker_is_recognised_by_its_token_and_start_time_together(innocent):
    token = "ab" * 16
    process = innocent(**{processes.TOKEN_ENV: token})
    start = process_start_time(process.pid)
    assert processes.is_identified_worker(process.pid, {"pid": process.pid, "token": token, "start": start})
    assert not processes.is_identified_worker(process.pid, {"pid": process.pid, "token": token, "start": start - 1})
    assert not processes.is_identified_worker(process.pid, {"pid": process.pid, "token": "cd" * 16, "start": start})
    assert not processes.is_identified_worker(process.pid, {"pid": process.pid + 1, "token": token, "start": start})
    assert not processes.is_identified_worker(process.pid, None)
    assert processes.terminate(process.pid, {"pid": process.pid, "token": token, "start": start - 1}) is False
    assert process.poll() is None
    assert processes.terminate(process.pid, {"pid": process.pid, "token": token, "start": start}) is True
    assert process.wait(timeout=10) != 0


def test_a_launched_worker_records_a_claim_that_identifies_it(store_path, store):
    run_id = scheduler.start_run(tiny(LONG), store_path)
    wait_for_status(store, run_id, ["running"])
    pid = store.record(run_id, latest=False).pid
    claim = processes.read_identity(store, run_id)
    assert claim["pid"] == pid and len(claim["token"]) == 32
    assert (store_path.parent / "logs" / f"run-{run_id}.worker").stat().st_mode & 0o077 == 0
    if os.path.exists("/proc/self/stat"):
        assert claim["start"] == process_start_time(pid)
        assert processes.is_identified_worker(pid, claim)
    assert scheduler.stop_run(run_id, store_path, timeout=0.0) == "stopped"
    # stopped by its signals, or by itself when it read the request first (then stop_run returns once the
    # run is settled, while the process is still on its way out: CI saw it alive at the instant after)
    deadline = time.monotonic() + 30
    while is_alive(pid):
        assert time.monotonic() < deadline, f"worker {pid} still alive 30 s after its run was stopped"
        processes.reap_launched()
        time.sleep(0.05)


@pytest.mark.skipif(not os.path.exists("/proc/self/environ"), reason="needs /proc")
def test_a_worker_follows_the_thread_policy(store_path, store, monkeypatch):
    monkeypatch.delenv(thread_policy.THREADS_ENV, raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    run_id = scheduler.start_run(tiny(LONG), store_path, max_concurrent=1)
    wait_for_status(store, run_id, ["running"])
    run = store.record(run_id, latest=False)
    threads = thread_policy.worker_threads(1)
    assert run.device == f"cpu ({threads} threads)"
    environ = open(f"/proc/{run.pid}/environ", "rb").read().split(b"\0")
    assert b"OMP_WAIT_POLICY=PASSIVE" in environ and f"OMP_NUM_THREADS={threads}".encode() in environ
    assert scheduler.stop_run(run_id, store_path) == "stopped"


def test_a_finished_worker_starts_the_next_queued_run_itself(store_path, store):
    # only start_run touches the scheduler: no page, CLI or reconcile between the two runs
    first = scheduler.start_run(tiny(20), store_path, max_concurrent=1)
    second = scheduler.start_run(tiny(20, seed=1), store_path, max_concurrent=1)
    assert store.record(second, latest=False).pid is None
    assert wait_for_status(store, first, TERMINAL) == "completed"
    assert wait_for_status(store, second, TERMINAL) == "completed"
    assert store.record(second, latest=False).started_at >= store.record(first, latest=False).finished_at


def test_start_run_works_from_any_directory(store_path, store, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    run_id = scheduler.start_run(tiny(), store_path)
    pid = store.record(run_id, latest=False).pid
    wait_until(lambda: status_of(store, run_id) in TERMINAL or not is_alive(pid), what="the worker to end")
    scheduler.reconcile(store_path)  # a worker that could not even import stability reads as interrupted
    assert wait_for_status(store, run_id, TERMINAL) == "completed"


def test_stop_of_a_queued_run_is_immediate(store_path, store):
    first = scheduler.start_run(tiny(LONG), store_path, max_concurrent=1)
    second = scheduler.start_run(tiny(LONG), store_path, max_concurrent=1)
    assert scheduler.stop_run(second, store_path, timeout=0.0) == "stopped"
    assert store.record(second, latest=False).started_at is None and store.record(second, latest=False).pid is None
    assert scheduler.stop_run(first, store_path) == "stopped"


def test_a_failing_task_marks_the_run_failed_with_its_message(store_path, store, tmp_path, monkeypatch):
    monkeypatch.setenv("STABILITY_OFFLINE", "1")  # inherited by the worker
    empty = tmp_path / "no-data"
    empty.mkdir()
    config = tiny(task="mnist", task_options={"data_dir": str(empty)})
    run_id = scheduler.start_run(config, store_path)
    assert wait_for_status(store, run_id, TERMINAL) == "failed"
    error = store.record(run_id, latest=False).error
    assert error.startswith("DatasetUnavailable: ") and str(empty) in error and "\n" not in error


def test_a_nan_ends_the_run_as_diverged(store_path, store):
    config = tiny(200, cell_options={"nonlinearity": "relu"}, lr=1e6)
    run_id = scheduler.start_run(config, store_path)
    assert wait_for_status(store, run_id, TERMINAL) == "diverged"
    run = store.record(run_id, latest=False)
    assert run.step < 200 and "non-finite" in run.error


def test_is_alive_treats_exited_children_as_dead():
    assert is_alive(os.getpid())
    assert not is_alive(None)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    pid = child.pid
    wait_until(lambda: not is_alive(pid), timeout=10, what="the exited (zombie) child to read as dead")
    child.wait()
    assert not is_alive(pid)


def test_describe_error_is_one_line():
    assert lifecycle.describe_error(ValueError("bad value\nmore detail")) == "ValueError: bad value"
    assert lifecycle.describe_error(KeyboardInterrupt()) == "KeyboardInterrupt"


def test_max_concurrent_from_the_environment(monkeypatch):
    monkeypatch.setenv(processes.MAX_RUNS_ENV, "3")
    assert scheduler.max_concurrent_runs() == 3
    assert scheduler.max_concurrent_runs(2) == 2
    monkeypatch.setenv(processes.MAX_RUNS_ENV, "many")
    with pytest.raises(ValueError, match=processes.MAX_RUNS_ENV):
        scheduler.max_concurrent_runs()
    with pytest.raises(ValueError, match="max_concurrent"):
        scheduler.max_concurrent_runs(0)


def test_a_stopped_run_resumes_in_a_worker_and_appends_to_its_rows(store_path, store):
    run_id = scheduler.start_run(tiny(600), store_path)
    wait_for_status(store, run_id, ["running"])
    wait_for_rows(store, run_id, steps=3)
    assert scheduler.stop_run(run_id, store_path) == "stopped"
    stopped_at = store.metrics(run_id, ["train/loss"]).step.max()
    assert stopped_at < 600
    scheduler.resume_run(run_id, store_path)
    assert wait_for_status(store, run_id, ["completed", "failed"], timeout=120) == "completed", store.record(run_id, latest=False)
    run = store.record(run_id, latest=False)
    assert run.resumes == 1 and run.error is None and not run.stop_requested
    losses = store.metrics(run_id, ["train/loss"])
    assert sorted(losses.step) == list(range(0, 601, 5))  # step 0 (step_zero.py) and every log step once: nothing lost, nothing twice


def test_only_a_stopped_interrupted_or_failed_run_with_a_checkpoint_resumes(store_path, store):
    from stability.training.checkpoints import ResumeError
    done = scheduler.start_run(tiny(10), store_path)
    wait_for_status(store, done, ["completed"])
    with pytest.raises(ResumeError, match=f"run {done} is completed; only a stopped"):
        scheduler.resume_run(done, store_path)
    never_ran = store.create_run(tiny().to_dict())
    set_status(store, never_ran, "stopped")
    with pytest.raises(ResumeError, match=f"run {never_ran} has no checkpoint"):
        scheduler.resume_run(never_ran, store_path)
    assert [store.record(i, latest=False).resumes for i in (done, never_ran)] == [0, 0]
    assert store.record(never_ran, latest=False).status == "stopped"
