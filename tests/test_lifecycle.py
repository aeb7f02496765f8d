"""The run lifecycle (stability/execution/lifecycle.py): one claim per run, won by one process; stops
that never mark a live process stopped; resumes that cannot train a run twice; a sweep's stop and
resume; a foreground run's host on a shared store; numbers refused before any run is stored.

Real SQLite files, the real PostgreSQL fixture, real CLI and worker processes, tiny configs and
bounded waits. The behaviour tests use only names the code had before the lifecycle (the CLI, the
runner, the sweeps, ``stability.train_run``), so each of them fails on that code.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from sqlalchemy import text

from stability import hooks, sweeps, train_run
from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig
from stability.runs.status import TERMINAL
from stability.runs.store import RunStore
from stability.workers import scheduler

from store_files import raw_connection

REPO = Path(__file__).resolve().parent.parent
WAIT_S = 120.0  # a fresh interpreter importing torch on a loaded 2-core machine, then a tiny run
LONG = ["--cell", "rnn", "--hidden-size", "8", "--seq-len", "10", "--steps", "100000", "--log-every", "20",
        "--batch-size", "8", "--eval-examples", "16", "--probe-examples", "4"]


def tiny(steps: int = 40, **train) -> RunConfig:
    settings = dict(steps=steps, log_every=5, batch_size=8, eval_examples=16, probe_examples=4)
    settings.update(train)
    return RunConfig(cell=CellConfig("rnn", 8), task=TaskConfig("adding", {"seq_len": 10}),
                     train=TrainConfig(**settings))


def wait_until(predicate, what: str, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")


def cli_process(*args: str, store, **popen) -> subprocess.Popen:
    env = {**os.environ, "STABILITY_STORE": str(store), "STABILITY_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "stability", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def cli(*args: str, store) -> subprocess.CompletedProcess:
    process = cli_process(*args, store=store)
    stdout, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


class StopAt(hooks.Hook):
    def __init__(self, step: int):
        self.step = step

    def on_step(self, trainer, result):
        if trainer.step >= self.step:
            trainer.stop("stopped")


@pytest.fixture
def processes_to_kill():
    """Processes a test starts; killed at teardown if still alive."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
        process.communicate()


def running_foreground(store_location, store, processes_to_kill) -> tuple[subprocess.Popen, int]:
    """A foreground ``train`` (a CLI process, not a worker the runner launched) that has logged a step."""
    process = cli_process("train", *LONG, store=store_location)
    processes_to_kill.append(process)

    def begun():
        records = store.records()
        return records and records[0].status == "running" and (records[0].step or 0) > 0 and records[0].id

    return process, wait_until(begun, "the foreground run to train")


# ------------------------------------------------------------------------------ the claim
def test_two_claimants_never_both_win_a_run(store_location, contenders=8):
    """Threads with their own store connections race for each run at once: the compare-and-set lets
    exactly one win, and the run holds the winner's pid, host and token (SQLite and PostgreSQL)."""
    from stability.execution import lifecycle

    with RunStore(store_location) as store:
        run_ids = [store.create_run(tiny().to_dict()) for _ in range(4)]
    for run_id in run_ids:
        barrier, claims = threading.Barrier(contenders), []

        def contend():
            with RunStore(store_location) as mine:
                barrier.wait()
                claims.append(lifecycle.claim_queued(mine, run_id))

        threads = [threading.Thread(target=contend) for _ in range(contenders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = [claim for claim in claims if claim is not None]
        assert len(claims) == contenders and len(winners) == 1
        with RunStore(store_location) as store:
            run = store.record(run_id)
        assert (run.claim, run.pid, run.host) == (winners[0].token, os.getpid(), socket.gethostname())


def test_a_settle_after_the_claim_was_taken_over_writes_nothing(store_location):
    """The claimant's final status is a compare-and-set on its token: once another process has taken
    the run over, the first one's 'completed' does not land."""
    from stability.execution import lifecycle

    with RunStore(store_location) as store:
        run_id = store.create_run(tiny().to_dict())
        first = lifecycle.claim_queued(store, run_id)
        store.update_run(run_id, pid=2**22 + 12345)  # a pid no process has: its claimant is gone
        assert lifecycle.claimant_gone(store.record(run_id))
        assert lifecycle.mark_interrupted(store, store.record(run_id))
        second = lifecycle.take_over(store, store.record(run_id))
        assert second is not None and second.token != first.token
        assert not lifecycle.settle(store, first, "completed")
        assert lifecycle.settle(store, second, "stopped", "a test")
        run = store.record(run_id)
        assert (run.status, run.error, run.claim) == ("stopped", "a test", second.token)


# ------------------------------------------------------------------------------ resume
def test_two_foreground_resumes_at_once_train_the_run_once(tmp_path):
    store_path = tmp_path / "runs.db"
    with RunStore(store_path) as store:
        stopped = train_run(tiny(600, log_every=10), store, hooks=[StopAt(100)])
        assert stopped.status == "stopped" and store.checkpoint_path(stopped.run_id).exists()
    run_id = stopped.run_id
    both = [cli_process("resume", str(run_id), "--json", store=store_path) for _ in range(2)]
    outcomes = sorted((*process.communicate(timeout=300), process.returncode)[::-1] for process in both)
    (won, won_err, won_out), (lost, lost_err, lost_out) = outcomes
    assert won == 0 and json.loads(won_out.splitlines()[-1])["status"] == "completed", won_err
    assert lost == 2 and lost_out == "" and len(lost_err.splitlines()) == 1, lost_err
    assert f"run {run_id} is " in lost_err and "only a stopped, interrupted or failed run" in lost_err
    with RunStore(store_path) as store:
        assert store.record(run_id, latest=False).resumes == 1 and store.record(run_id, latest=False).status == "completed"
        steps = store.metrics(run_id, ["train/loss"]).step.tolist()
    assert sorted(steps) == list(range(0, 601, 10))  # step 0 (step_zero.py) and every log step once: one trainer


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_a_stop_that_times_out_leaves_a_live_unprovable_process_running_and_resume_refuses(
        tmp_path, processes_to_kill):
    """A foreground CLI run is not a worker the runner can prove it launched, so a stop it does not
    heed (here: the process is paused) never marks it stopped; a resume cannot take it while it lives,
    and once the process goes on it stops itself, as requested."""
    store_path = tmp_path / "runs.db"
    with RunStore(store_path) as store:
        process, run_id = running_foreground(store_path, store, processes_to_kill)
        os.kill(process.pid, signal.SIGSTOP)
        outcome = scheduler.stop_run(run_id, store_path, timeout=1.0)
        assert outcome.startswith(f"run {run_id} is still running") and "\n" not in outcome, outcome
        assert store.record(run_id, latest=False).status == "running" and store.record(run_id, latest=False).stop_requested
        with pytest.raises(ValueError, match=f"run {run_id} is running; only a stopped"):
            scheduler.resume_run(run_id, store_path)
        stop = cli("stop", str(run_id), store=store_path)
        assert stop.returncode == 1 and stop.stdout == "" and len(stop.stderr.splitlines()) == 1, stop.stderr
        assert "not provably this run's worker" in stop.stderr
        assert store.record(run_id, latest=False).stop_requested
        os.kill(process.pid, signal.SIGCONT)
        assert process.wait(timeout=WAIT_S) == 0
        run = store.record(run_id, latest=False)
        assert (run.status, run.error, run.resumes) == ("stopped", None, 0)


def test_sigterm_stops_a_foreground_run_and_keeps_its_rows(tmp_path, processes_to_kill):
    store_path = tmp_path / "runs.db"
    with RunStore(store_path) as store:
        process, run_id = running_foreground(store_path, store, processes_to_kill)
        rows = len(store.metrics(run_id))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT_S) == 0
        run = store.record(run_id, latest=False)
        assert (run.status, run.error) == ("stopped", "terminated")
        assert len(store.metrics(run_id)) >= rows > 0


# ------------------------------------------------------------------------------ sweeps
def tiny_sweep(store, settings: str = "lr=1e-3,1e-2", steps: int = 8):
    spec = sweeps.build_spec(tiny(steps, log_every=2, eval_every=2), [settings], seeds=1)
    sweep_id = sweeps.store_sweep(store, spec)
    study = sweeps.create_study(spec, sweeps.storage(store), store.sweep(sweep_id).study, load_if_exists=True)
    return spec, sweep_id, study


def trial_states(store, sweep_id):
    study = optuna.load_study(study_name=store.sweep(sweep_id).study, storage=sweeps.storage(store))
    return {trial.number: trial.state for trial in study.get_trials()}


def test_a_trial_asked_without_its_run_is_given_one_and_the_sweep_completes(store):
    """A worker killed between asking a trial and storing its run leaves the trial RUNNING with no run;
    the next worker's claim gives it its run, so the sweep still asks each setting once and completes."""
    spec, sweep_id, study = tiny_sweep(store)
    trial, _ = sweeps.next_trial(study, spec)  # what the killed worker left behind
    assert sweeps.work(store, sweep_id) == 2
    assert store.sweep(sweep_id).status == "completed"
    frame = sweeps.results(store, sweep_id)
    assert sorted(frame["train.lr"]) == [1e-3, 1e-2] and (frame["status"] == "completed").all()
    assert trial.number in set(frame["trial"])
    assert set(trial_states(store, sweep_id).values()) == {optuna.trial.TrialState.COMPLETE}


def test_a_stopped_sweep_asks_no_trial_however_late_its_worker_claims(store):
    """The stop flag is read under the sweep's lock, where trials are asked: a worker that claims after
    stop_sweep set it asks nothing (no trial left without its run)."""
    spec, sweep_id, study = tiny_sweep(store)
    assert sweeps.stop_sweep(sweep_id, store.path, timeout=0.0) == "stopped"
    with sweeps.sweep_lock(store, sweep_id):
        assert sweeps.claim(store, study, spec, sweep_id) is None
    assert trial_states(store, sweep_id) == {} and store.records(sweep_id=sweep_id) == []


def test_resuming_a_sweeps_run_holds_the_sweeps_lock_and_tells_its_trial(store):
    spec, sweep_id, study = tiny_sweep(store, "lr=1e-3", steps=400)
    with sweeps.sweep_lock(store, sweep_id):
        job = sweeps.claim(store, study, spec, sweep_id)
    store.request_stop(job.run_id)  # read by its trainer within half a second
    assert sweeps.train_trial(store, study, spec, job) == "stopped"
    assert store.checkpoint_path(job.run_id).exists()
    resumer = threading.Thread(target=scheduler.resume_run, args=(job.run_id, store.path))
    with sweeps.sweep_lock(store, sweep_id):  # as a sweep's worker claiming its next trial holds it
        resumer.start()
        time.sleep(2.0)
        assert resumer.is_alive() and store.record(job.run_id, latest=False).status == "stopped"
    resumer.join(timeout=WAIT_S)
    assert not resumer.is_alive()
    wait_until(lambda: store.record(job.run_id, latest=False).status in TERMINAL, "the resumed run to end")
    assert store.record(job.run_id, latest=False).status == "completed" and store.record(job.run_id, latest=False).resumes == 1
    assert trial_states(store, sweep_id) == {job.trial: optuna.trial.TrialState.COMPLETE}
    with sweeps.sweep_lock(store, sweep_id):
        assert sweeps.claim(store, study, spec, sweep_id) is None  # its one run is done
    sweeps.work(store, sweep_id)
    assert store.sweep(sweep_id).status == "completed"


# ------------------------------------------------------------------------------ hosts
def test_a_foreground_run_records_its_host_and_another_hosts_reconcile_goes_by_its_heartbeat(
        postgres_url, tmp_path, monkeypatch, processes_to_kill):
    monkeypatch.setenv("STABILITY_HOME", str(tmp_path / "home"))
    with RunStore(postgres_url) as store:
        process, run_id = running_foreground(postgres_url, store, processes_to_kill)
        assert store.record(run_id, latest=False).host == socket.gethostname()
        monkeypatch.setattr(socket, "gethostname", lambda: "another-machine")
        assert scheduler.reconcile(postgres_url) == []  # its heartbeat is fresh: alive, wherever its pid is
        assert store.record(run_id, latest=False).status == "running"
        process.kill()
        process.wait()
        long_ago = time.time() - 3600  # as the run looks from another machine an hour after its host died
        with raw_connection(store) as conn:
            conn.execute(text("UPDATE runs SET heartbeat = :t, started_at = :t, created_at = :t WHERE id = :id"),
                         {"t": long_ago, "id": run_id})
        assert scheduler.reconcile(postgres_url) == [run_id]
        assert store.record(run_id, latest=False).status == "interrupted"


# ------------------------------------------------------------------------------ numbers
@pytest.mark.parametrize("flags", [["--seed", "18446744073709551616"], ["--seed", "9223372036854775808"],
                                   ["--steps", "100000000000000000000"], ["--steps", "1e20"],
                                   ["--log-every", "100000000000000000000"],
                                   ["--seed", "18446744073709551616", "--background"]])
def test_a_number_out_of_bounds_is_one_line_and_stores_no_run(tmp_path, flags):
    store_path = tmp_path / "runs.db"
    result = cli("train", "--cell", "rnn", "--hidden-size", "8", "--seq-len", "10", *flags, store=store_path)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("stability: error: ")
    listed = cli("runs", store=store_path)
    assert listed.returncode == 0 and listed.stdout.startswith("no runs in"), listed.stdout


BOUNDS = [("seed", 2**63 - 1), ("steps", 10**9), ("lr_step_size", 10**9), ("log_every", 10**9),
          ("eval_every", 10**9), ("probe_every", 10**9), ("batch_size", 10**9), ("eval_examples", 10**9),
          ("probe_examples", 10**9)]


@pytest.mark.parametrize("field, largest", BOUNDS)
def test_every_count_of_the_train_config_has_a_largest_value(field, largest):
    tiny(**{field: largest}).validate()
    with pytest.raises(ConfigError, match=f"^{field} must be at most {largest}; got {largest + 1}$"):
        tiny(**{field: largest + 1}).validate()


def test_epochs_and_floats_are_bounded_too():
    with pytest.raises(ConfigError, match="epochs must be at most"):
        tiny(epochs=1e7).validate()
    for field in ("lr", "lr_gamma", "weight_decay", "clip_grad_norm", "epochs"):
        with pytest.raises(ConfigError, match=field):
            tiny(**{field: float("inf")}).validate()
