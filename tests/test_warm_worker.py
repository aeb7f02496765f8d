"""Warm workers (stability/workers/warm.py): a real worker process waiting idle with torch imported takes
the next queued run itself (no new process), through the queue's claim; its run stops as any other does."""
from __future__ import annotations

import time

import psutil
import pytest

from stability.runs.status import TERMINAL
from stability.runs.store import RunStore
from stability.workers import processes, scheduler, warm

from test_runner import LONG, tiny, wait_until


@pytest.fixture
def warm_on(monkeypatch, tmp_path):
    """Warm workers on (conftest turns them off), a fresh store; every warm worker of this process and
    every run's worker ended at teardown."""
    monkeypatch.setenv(warm.WARM_ENV, "1")
    path = tmp_path / "runs.db"
    yield path
    warm.close_warm()
    with RunStore(path) as store:
        for run in store.records():
            if run.status not in TERMINAL and run.pid is not None:
                processes.terminate(run.pid, processes.read_identity(store, run.id))


def test_a_queued_run_is_taken_by_the_idle_warm_worker_and_stops_when_asked(warm_on):
    pid = scheduler.keep_warm(warm_on, max_concurrent=1)
    assert pid is not None and scheduler.keep_warm(warm_on, max_concurrent=1) == pid  # one per store
    worker = psutil.Process(pid)
    command = wait_until(worker.cmdline, what="the warm worker's exec")  # empty for a moment after the fork
    assert "--warm" in command and "--store" not in command  # the store comes from its environment
    wait_until(lambda: "ready" in (warm_on.parent / "logs" / "warm.log").read_text(), what="the warm import")
    assert worker.cpu_times().user + worker.cpu_times().system == pytest.approx(_cpu(worker), abs=0.05)

    run_id = scheduler.start_run(tiny(LONG), warm_on, max_concurrent=1)
    with RunStore(warm_on) as store:
        wait_until(lambda: store.record(run_id, latest=False).status == "running", what="the run to train")
        assert store.record(run_id, latest=False).pid == pid  # the warm worker's own process: none was started for it
        # a fresh warm worker waits for the next Start, started once the run has (Note [A replacement waits])
        replacement = wait_until(lambda: warm.idle_pid(store), what="the replacement warm worker")
        assert replacement != pid
        assert scheduler.stop_run(run_id, warm_on) == "stopped"
        assert store.record(run_id, latest=False).status == "stopped"
    worker.wait(timeout=30)  # one run a warm worker: it exits after its run


def test_each_run_of_a_race_is_taken_by_its_own_idle_warm_worker_and_one_replaces_them(warm_on):
    """Note [Warm slots]: a page about to start two runs together keeps two warm workers; each queued run
    goes to one of them (no new process for either), and only the last one handed starts a replacement."""
    first = scheduler.keep_warm(warm_on, max_concurrent=2, count=2)
    with RunStore(warm_on) as store:
        idle = warm.idle_pids(store)
        assert len(idle) == 2 and idle[0] == first
        assert scheduler.keep_warm(warm_on, max_concurrent=2, count=2) == first and warm.idle_pids(store) == idle
        runs = [scheduler.start_run(tiny(LONG, cell=cell), warm_on, max_concurrent=2) for cell in ("rnn", "lstm")]
        pids = [wait_until(lambda: store.record(run_id, latest=False).pid, what=f"run {run_id}'s claim") for run_id in runs]
        assert pids == idle  # the race's runs went to the idle warm workers, in order
        replacement = wait_until(lambda: warm.idle_pids(store) or None, what="the replacement warm worker")
        assert len(replacement) == 1 and replacement[0] not in idle
        for run_id in runs:
            wait_until(lambda: store.record(run_id, latest=False).status == "running", what=f"run {run_id} to train")
            assert scheduler.stop_run(run_id, warm_on) == "stopped"
    for pid in idle:
        psutil.Process(pid).wait(timeout=30)  # one run a warm worker: each exits after its run


def test_the_last_warm_worker_handed_a_run_is_replaced_only_after_a_while(warm_on, monkeypatch):
    """Note [A replacement waits]: no interpreter imports torch beside a run's first steps. Handed the last
    idle warm worker, the queue starts no replacement at once, nor does a page's periodic keep_warm; the
    timer does, REPLACE_AFTER_S later. A page about to start several runs still gets its warm workers."""
    monkeypatch.setattr(warm, "REPLACE_AFTER_S", 4.0)
    first = scheduler.keep_warm(warm_on, max_concurrent=2)
    run_id = scheduler.start_run(tiny(LONG), warm_on, max_concurrent=2)
    handed = time.monotonic()
    with RunStore(warm_on) as store:
        assert wait_until(lambda: store.record(run_id, latest=False).pid, what="the run's claim") == first
        assert warm.idle_pids(store) == []
        assert scheduler.keep_warm(warm_on, max_concurrent=2) is None and warm.idle_pids(store) == []
        replacement = wait_until(lambda: warm.idle_pid(store), what="the replacement warm worker")
        assert time.monotonic() - handed >= 3.5 and replacement != first
        assert scheduler.stop_run(run_id, warm_on) == "stopped"
        second = scheduler.start_run(tiny(LONG), warm_on, max_concurrent=2)  # the replacement is handed this one
        assert wait_until(lambda: store.record(second, latest=False).pid, what="the second run's claim") == replacement
        pair = scheduler.keep_warm(warm_on, max_concurrent=2, count=2)  # a Race about to start: served at once
        assert pair is not None and len(warm.idle_pids(store)) == 2
        assert scheduler.stop_run(second, warm_on) == "stopped"


def test_with_warm_workers_off_a_run_gets_a_fresh_worker(warm_on, monkeypatch):
    monkeypatch.setenv(warm.WARM_ENV, "0")
    assert scheduler.keep_warm(warm_on) is None
    run_id = scheduler.start_run(tiny(10), warm_on, max_concurrent=1)
    with RunStore(warm_on) as store:
        wait_until(lambda: store.record(run_id, latest=False).status in TERMINAL, what="the run to end")
        assert store.record(run_id, latest=False).status == "completed" and warm.idle_pid(store) is None


def test_a_bad_setting_is_one_line():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(warm.WARM_ENV, "lots")
        with pytest.raises(ValueError, match="STABILITY_WARM_WORKERS must be 0"):
            warm.warm_workers_on()


def _cpu(process: psutil.Process, wait_s: float = 1.0) -> float:
    """The process's CPU seconds after ``wait_s`` more seconds idle (the same as before: it blocks)."""
    time.sleep(wait_s)
    times = process.cpu_times()
    return times.user + times.system
