"""A student's sweeps (stability/access, Note [A student's sweep]): where the lecturer allows it
(``STABILITY_STUDENTS=sweep``) a signed-in student starts a sweep of their own, bounded in its runs, each run,
its operations in all, its workers and the sweeps of theirs at once; the sweep records its owner and its runs
carry it; a student stops or resumes only their own sweep, an operator any, a viewer none.  Every check is in
the action, against a real SQLite store: a refused action stores nothing.

No sweep worker trains here but one in this process (``sweeps.work``, two runs of a tiny model): a run claimed
by this live process holds the store's one slot, so the workers a start asks for wait for it."""
from __future__ import annotations

import os
import time

import pytest

from stability import access, sweeps
from stability.access import Limits, Policy
from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig
from stability.execution import lifecycle
from stability.runs.store import RunStore

BOB, EVE = "bob@school.example", "eve@school.example"


def tiny(steps: int = 4, hidden: int = 8, seq_len: int = 5) -> RunConfig:
    return RunConfig(CellConfig("rnn", hidden), TaskConfig("adding", {"seq_len": seq_len}),
                     TrainConfig(steps=steps, log_every=2, batch_size=4, eval_every=2, eval_examples=8,
                                 probe_examples=4))


def spec(vary=("lr=1e-3,1e-2",), seeds: int = 1, base: RunConfig | None = None, **options) -> sweeps.SweepSpec:
    return sweeps.build_spec(base or tiny(), list(vary), seeds=seeds, **options)


def policy(students: str = "sweep", **limits) -> Policy:
    env = {"STABILITY_STUDENTS": students, **{f"STABILITY_STUDENT_{name.upper()}": str(value)
                                             for name, value in limits.items()}}
    return Policy.from_environment("0.0.0.0", env)


OPERATOR = Policy.from_environment("127.0.0.1", {}).visitor(None)
VIEWER = Policy.from_environment("0.0.0.0", {}).visitor(None)


@pytest.fixture
def store_path(tmp_path, monkeypatch):
    """A store whose one slot is held by a run this live process claimed: a sweep's workers wait for it."""
    path = str(tmp_path / "runs.db")
    monkeypatch.setenv("STABILITY_STORE", path)
    monkeypatch.setenv("STABILITY_MAX_RUNS", "1")
    with RunStore(path) as store:
        store.create_run(tiny().to_dict(), claimed={"status": "running", "pid": os.getpid(),
                                                    "host": lifecycle.this_host(), "claim": "held"})
    return path


def stored(store_path):
    with RunStore(store_path) as store:
        return store.sweeps(), [run for run in store.records() if run.claim != "held"]


# ------------------------------------------------------------------------------------------ the rule
def test_students_sweep_only_where_the_lecturer_says_so():
    assert policy("sweep").visitor(BOB).may_sweep and policy("sweep").visitor(BOB).may_start
    assert not policy("run").visitor(BOB).may_sweep and policy("run").visitor(BOB).may_start  # run: as before
    assert OPERATOR.may_sweep and not VIEWER.may_sweep
    assert not policy("sweep").visitor(None).may_sweep  # a student signs in
    assert "runs and sweeps" in policy("sweep").visitor(BOB).reason


def test_a_bad_students_setting_is_one_line_naming_the_choices():
    with pytest.raises(ConfigError, match="'sweep'") as raised:
        Policy.from_environment("0.0.0.0", {"STABILITY_STUDENTS": "sweeps"})
    assert "\n" not in str(raised.value)


def test_the_sweep_limits_are_read_from_the_environment():
    limits = Limits.from_environment({"STABILITY_STUDENT_SWEEP_TRIALS": "6", "STABILITY_STUDENT_ACTIVE_SWEEPS": "2",
                                      "STABILITY_STUDENT_SWEEP_OPERATIONS": "1e9"})
    assert (limits.sweep_trials, limits.active_sweeps, limits.sweep_operations) == (6, 2, 1e9)
    assert Limits().sweep_trials == 20 and Limits().active_sweeps == 1
    with pytest.raises(ConfigError, match="STABILITY_STUDENT_SWEEP_TRIALS"):
        Limits.from_environment({"STABILITY_STUDENT_SWEEP_TRIALS": "0"})


# ------------------------------------------------------------------------------------------ each limit
def test_a_sweep_of_more_runs_than_a_students_is_refused(store_path):
    bob = policy(sweep_trials=4).visitor(BOB)
    with pytest.raises(access.Refused, match="This sweep is 6 runs, more than a student's 4") as raised:
        access.start_sweep(bob, spec(seeds=3), store_path)
    assert "\n" not in str(raised.value)
    assert stored(store_path) == ([], [])


@pytest.mark.parametrize("vary, limit, words", [
    (["steps=4,200"], {"steps": 100}, "200 steps is more than a student's 100"),
    (["cell.hidden_size=8,2048"], {"checkpoint_bytes": 1e6}, "checkpoint"),
    (["cell.hidden_size=8,2048"], {"memory_bytes": 1e6}, "memory"),
    (["task.seq_len=5,5000"], {"operations": 1e7}, "operations"),
])
def test_every_run_a_sweep_may_start_is_within_the_run_limits(store_path, vary, limit, words):
    bob = policy(**limit).visitor(BOB)
    with pytest.raises(access.Refused, match=f"A run of this sweep.*{words}"):
        access.start_sweep(bob, spec(vary), store_path)
    assert stored(store_path) == ([], [])
    access.start_sweep(OPERATOR, spec(vary), store_path)  # the lecturer's sweep: no student limit


def test_a_sampled_range_is_bounded_by_its_largest_end(store_path):
    bob = policy(memory_bytes=1e7, operations=1e15).visitor(BOB)
    sampled = spec(["cell.hidden_size=8:4096"], sampler="random", trials=2)
    with pytest.raises(access.Refused, match="memory"):
        access.start_sweep(bob, sampled, store_path)
    assert stored(store_path) == ([], [])


def test_a_sweeps_operations_in_all_are_bounded_though_each_run_is_within(store_path):
    one = spec().cost_configs()[0]
    per_run = access.actions._operations(one)
    bob = policy(sweep_operations=per_run * 3, operations=per_run * 2).visitor(BOB)
    with pytest.raises(access.Refused, match="operations in all"):
        access.start_sweep(bob, spec(["lr=1e-3,1e-2"], seeds=2), store_path)  # 4 runs
    sweep_id = access.start_sweep(bob, spec(["lr=1e-3,1e-2"], seeds=1), store_path)  # 2 runs
    assert [sweep.id for sweep in stored(store_path)[0]] == [sweep_id]


def test_one_active_sweep_a_student_and_the_next_once_it_ended(store_path):
    limited = policy()
    bob, eve = limited.visitor(BOB), limited.visitor(EVE)
    first = access.start_sweep(bob, spec(), store_path)
    with pytest.raises(access.Refused, match=f"Your sweep #{first} is still running"):
        access.start_sweep(bob, spec(["lr=1e-4,1e-3"]), store_path)
    access.start_sweep(eve, spec(), store_path)  # the limit is each student's own
    assert access.stop_sweep(bob, first, store_path) == "stopped"
    access.start_sweep(bob, spec(["lr=1e-4,1e-3"]), store_path)
    assert sorted(access.sweep_owner(sweep) for sweep in stored(store_path)[0]) == [BOB, BOB, EVE]


def test_a_students_sweep_counts_against_their_runs_at_once(store_path):
    bob = policy(active_runs=2).visitor(BOB)
    with RunStore(store_path) as store:
        assert access.check_sweep(bob, spec(), store, workers=4) == 2  # workers: at most the runs left them
        for _ in range(2):
            store.create_run(tiny().to_dict(), owner=BOB)  # queued: theirs
        with pytest.raises(access.Refused, match="2 runs queued or training"):
            access.check_sweep(bob, spec(), store, workers=1)


# ------------------------------------------------------------------------------------------ roles, owners
def test_a_forged_start_from_a_viewer_or_a_student_of_a_run_only_server_stores_nothing(store_path):
    for visitor, words in ((VIEWER, "View only"), (policy("run").visitor(BOB), "Not yours to start sweeps")):
        with pytest.raises(access.Refused, match=words):
            access.start_sweep(visitor, spec(), store_path)
    assert stored(store_path) == ([], [])


def test_a_students_sweep_records_its_owner_and_its_runs_carry_it(store_path):
    bob = policy().visitor(BOB)
    sweep_id = access.start_sweep(bob, spec(), store_path)
    with RunStore(store_path) as store:
        assert access.sweep_owner(store.sweep(sweep_id)) == BOB
        assert sweeps.work(store, sweep_id) == 2  # a worker in this process: both trials
        runs = store.records(sweep_id=sweep_id)
        assert [(run.owner, run.status) for run in runs] == [(BOB, "completed")] * 2
        assert access.sweep_owner(store.sweep(access.start_sweep(OPERATOR, spec(), store_path))) is None
    eve = policy().visitor(EVE)
    with RunStore(store_path) as store:
        with pytest.raises(access.Refused, match="Not yours to delete"):
            access.delete_run(eve, store, runs[0].id)
        access.delete_run(bob, store, runs[0].id)  # their sweep's run is theirs


def test_a_student_stops_and_resumes_only_their_own_sweep(store_path):
    limited = policy()
    bob, eve = limited.visitor(BOB), limited.visitor(EVE)
    sweep_id = access.start_sweep(bob, spec(), store_path)
    operators = access.start_sweep(OPERATOR, spec(["lr=1e-4,1e-3"]), store_path)
    for visitor, target, words in ((eve, sweep_id, "Not yours to stop"), (VIEWER, sweep_id, "View only"),
                                   (bob, operators, "Not yours to stop")):
        with pytest.raises(access.Refused, match=words):
            access.stop_sweep(visitor, target, store_path)
    with RunStore(store_path) as store:
        assert not store.sweep(sweep_id).stop_requested and not store.sweep(operators).stop_requested
    assert access.stop_sweep(bob, sweep_id, store_path) == "stopped"
    for visitor, words in ((eve, "Not yours to resume"), (VIEWER, "View only")):
        with pytest.raises(access.Refused, match=words):
            access.resume_sweep(visitor, sweep_id, store_path)
    with RunStore(store_path) as store:
        assert store.sweep(sweep_id).status == "stopped"
    access.resume_sweep(bob, sweep_id, store_path)
    with RunStore(store_path) as store:
        assert store.sweep(sweep_id).status == "running"
    assert access.stop_sweep(OPERATOR, sweep_id, store_path) == "stopped"  # an operator stops any


def test_a_resume_is_held_to_the_limits_of_a_start(store_path):
    bob = policy().visitor(BOB)
    stopped = access.start_sweep(bob, spec(), store_path)
    access.stop_sweep(bob, stopped, store_path)
    running = access.start_sweep(bob, spec(["lr=1e-4,1e-3"]), store_path)
    with pytest.raises(access.Refused, match=f"Your sweep #{running} is still running"):
        access.resume_sweep(bob, stopped, store_path)
    with RunStore(store_path) as store:
        assert store.sweep(stopped).status == "stopped"


def test_two_starts_at_once_from_one_student_store_one_sweep(store_path):
    """Two tabs, or a script, pressing Start together: the limits are read and the sweep stored under one lock,
    so the second start sees the first sweep and is refused."""
    import threading

    bob = policy().visitor(BOB)
    barrier, outcomes = threading.Barrier(2), []

    def start(values):
        barrier.wait()
        try:
            outcomes.append(access.start_sweep(bob, spec([values]), store_path))
        except access.Refused as refused:
            outcomes.append(str(refused))

    threads = [threading.Thread(target=start, args=(values,)) for values in ("lr=1e-3,1e-2", "lr=1e-4,1e-3")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(type(outcome).__name__ for outcome in outcomes) == ["int", "str"], outcomes
    assert len(stored(store_path)[0]) == 1


def test_the_students_lock_is_one_for_every_process_of_a_store_sqlite_or_postgresql(store_location):
    """The lock a student's start is checked under (execution.locks.students_lock): held through one opening of
    the store, another opening (another server; on PostgreSQL another machine's) waits and gets LockBusy, then
    has it once it is let go.  Before, it was a file of this machine's, which two servers on two machines over one
    PostgreSQL store did not share."""
    from stability.execution import locks

    with RunStore(store_location) as first, RunStore(store_location) as second:
        with locks.students_lock(first):
            if first.shared:  # the server holds it, not a file of this machine: another machine's server waits too
                import sqlalchemy

                with sqlalchemy.create_engine(store_location).connect() as connection:
                    held = connection.execute(sqlalchemy.text(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = :space"),
                        {"space": locks.STUDENTS_LOCK_SPACE}).scalar()
                assert held == 1
            started = time.monotonic()
            with pytest.raises(locks.LockBusy, match="is held by another process"):
                with locks.students_lock(second, timeout=0.5):
                    pass
            assert time.monotonic() - started >= 0.5
        with locks.students_lock(second, timeout=0.5):
            pass
