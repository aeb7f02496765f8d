"""Every change a page can ask for, each behind the visitor's role (Note [Roles] in policy.py).

    run_id = start_run(visitor, config, store_path)   # Refused (one line) for a viewer or a student past a limit
    stop_run(visitor, run_id, store_path)              # an operator's, or a student's own run
    delete_run(visitor, store, run_id)
    sweep_id = start_sweep(visitor, spec, store_path, workers=2)   # an operator's, or a student's within limits
    stop_sweep(visitor, sweep_id, store_path); resume_sweep(visitor, sweep_id, store_path)

Note [Guarded in the action]
----------------------------
A page hides the controls a visitor may not use, but hiding is not the guard: a session can send any widget
state it likes over its websocket, and a link can carry any query.  So the functions the pages call to
change something take the visitor and check its role themselves, before anything is written: a forged
Start, Stop or Delete from a viewer reaches one of these and is refused.  Pages call nothing else that
writes (tests/test_access.py reads their source for it).
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

from stability import sweeps
from stability.admission import budget
from stability.config import RunConfig
from stability.core.errors import ConfigError
from stability.execution import lifecycle, locks
from stability.runs.store import RunStore
from stability.workers import scheduler

from .policy import STUDENT, Visitor, refusal


class Refused(ConfigError):
    """An action the visitor's role does not allow, or a student's limit: one line for the page."""


def require(allowed: bool, visitor: Visitor, action: str) -> None:
    """Raise :class:`Refused` naming ``action`` unless ``allowed``."""
    if not allowed:
        raise Refused(refusal(visitor, action))


def check_start(visitor: Visitor, config: RunConfig, store: RunStore) -> None:
    """A student's limits (:class:`stability.access.policy.Limits`) for one more run of ``config``: its
    steps, operations, memory and checkpoint, and the runs of theirs already queued or running."""
    require(visitor.may_start, visitor, "start runs")
    if visitor.role != STUDENT:
        return
    _check_run(visitor.limits, config, "This run")
    _runs_room(visitor, store)


def _operations(config: RunConfig) -> float:
    """The floating-point operations of a whole run of ``config`` (budget.work, its steps)."""
    return budget.work(config).per_step(config) * config.train.steps


def _check_run(limits, config: RunConfig, what: str) -> None:
    """One run's limits: steps, operations, memory, checkpoint; ``what`` names it in the refusal."""
    if config.train.steps > limits.steps:
        whose = "" if what == "This run" else f"{what}: "
        raise Refused(f"{whose}{config.train.steps:,} steps is more than a student's {limits.steps:,}: "
                      "ask the lecturer.")
    used, checkpoint, operations = budget.footprint(config), budget.checkpoint_bytes(config), _operations(config)
    for value, limit, words in (
            (operations, limits.operations, f"{operations:.2g} operations"),
            (used.peak, limits.memory_bytes, f"{budget.format_bytes(used.peak)} of memory"),
            (checkpoint, limits.checkpoint_bytes, f"a checkpoint of {budget.format_bytes(checkpoint)}")):
        if value > limit:
            raise Refused(f"{what} needs {words}, more than a student's limit: a smaller hidden size, "
                          "sequence or step count, or ask the lecturer.")


def _runs_room(visitor: Visitor, store: RunStore) -> int:
    """How many more runs the student may have queued or training at once; Refused where none."""
    limits = visitor.limits
    mine = sum(run.owner == visitor.identity for run in store.active_runs())
    if mine >= limits.active_runs:
        raise Refused(f"You have {mine} runs queued or training (at most {limits.active_runs} at once): "
                      "wait for one to end or stop one.")
    return limits.active_runs - mine


STUDENTS_LOCK_S = locks.STUDENTS_TIMEOUT_S


@contextlib.contextmanager
def _students_turn(visitor: Visitor, store: RunStore):
    """For a student, hold the store's lock of students' starts (execution.locks.students_lock: a file lock of
    this machine for SQLite, an advisory lock of the server for PostgreSQL) for the ``with`` block, so that their limits
    (active runs, active sweeps) are read and the start is stored without another start between: two starts
    at once (two tabs, a script) never both pass.  Nothing for anybody else.  Refused, one line, when the lock
    is not had within :data:`STUDENTS_LOCK_S`."""
    if visitor.role != STUDENT:
        yield
        return
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(locks.students_lock(store, STUDENTS_LOCK_S))
        except locks.LockBusy:
            raise Refused("Other starts are being checked right now: try again in a moment.") from None
        yield


def start_run(visitor: Visitor, config: RunConfig, store_path: str) -> int:
    """Start ``config`` for ``visitor`` (owner: a student's identity); the queue's ``start_run``.  The store is
    read for a student's limits only, under :func:`_students_turn`."""
    require(visitor.may_start, visitor, "start runs")
    if visitor.role != STUDENT:
        return scheduler.start_run(config, store_path)
    with RunStore(store_path) as store, _students_turn(visitor, store):
        check_start(visitor, config, store)
        return scheduler.start_run(config, store_path, owner=visitor.owner)


def _owned(visitor: Visitor, action: str, owner: Callable[[], str | None]) -> None:
    """Refuse ``action`` unless the visitor may change the run whose owner ``owner()`` reads: asked of
    students only (an operator changes every run, a viewer none)."""
    if visitor.may_operate:
        return
    require(visitor.may_start, visitor, action)
    require(visitor.may_change(owner()), visitor, action)


def _stored_owner(store_path: str, run_id: int) -> str | None:
    with RunStore(store_path) as store:
        return store.record(run_id).owner


def stop_run(visitor: Visitor, run_id: int, store_path: str) -> str:
    """Stop a run the visitor may change; its status after (the queue's ``stop_run``)."""
    _owned(visitor, f"stop run #{run_id}", lambda: _stored_owner(store_path, run_id))
    return scheduler.stop_run(run_id, store_path)


def resume_run(visitor: Visitor, run_id: int, store_path: str) -> None:
    """Resume a run the visitor may change (the queue's ``resume_run``)."""
    _owned(visitor, f"resume run #{run_id}", lambda: _stored_owner(store_path, run_id))
    scheduler.resume_run(run_id, store_path)


def delete_run(visitor: Visitor, store: RunStore, run_id: int) -> None:
    """Delete a run the visitor may change, with its rows and checkpoint."""
    _owned(visitor, f"delete run #{run_id}", lambda: store.record(run_id).owner)
    store.delete_run(run_id)


def mark_ended(visitor: Visitor, store: RunStore, run_id: int) -> bool:
    """Mark a silent external run ended, for a visitor who may change it (lifecycle.mark_abandoned: False
    where the run spoke or changed meanwhile)."""
    _owned(visitor, f"mark run #{run_id} ended", lambda: store.record(run_id).owner)
    return lifecycle.mark_abandoned(store, store.record(run_id))


def operate(visitor: Visitor, action: str) -> None:
    """For what only an operator does (a preset's run): :class:`Refused` for anybody else."""
    require(visitor.may_operate, visitor, action)


# ------------------------------------------------------------------------------------------------ sweeps
# Note [A student's sweep]
# ------------------------
# Where the lecturer allows it (STABILITY_STUDENTS=sweep), a student starts sweeps of their own, each bounded
# before anything is stored (check_sweep): its runs (trials x seeds) at most Limits.sweep_trials; every run it
# may start within the run limits (steps, operations, memory, checkpoint), checked over SweepSpec.cost_configs
# (each combination of the values that change a run's cost, a sampled range by its two ends); its runs'
# operations together at most Limits.sweep_operations (a grid's summed over its settings, a sampled sweep's
# counted as its runs times its costliest); at most Limits.active_sweeps of theirs active at once; and its
# workers at most the runs the student may still have queued or training (its runs are theirs: they count
# against Limits.active_runs like any other).  The spec records its owner (SweepSpec.owner, stored with the
# sweep's row and its Optuna study), and the sweep's workers give each of its runs that owner (runs.owner), so
# a student stops, resumes and deletes those runs as their own.  A student stops or resumes only their own
# sweep (a resume is checked again, as a start), an operator every one, a viewer none.  A student's start (run or
# sweep) and resume is checked and stored under one lock of the store (_students_turn), so two at once never
# both pass a limit.

def sweep_owner(sweep) -> str | None:
    """The student who started a sweep (a SweepRecord, as ``store.sweep(id)`` reads it); None: an operator's."""
    return sweeps.SweepSpec.from_dict(sweep.spec).owner


def check_sweep(visitor: Visitor, spec: sweeps.SweepSpec, store: RunStore, workers: int = 1,
                resuming: int | None = None) -> int:
    """The workers the visitor's sweep of ``spec`` may have (a student's at most the runs they may still start);
    :class:`Refused`, one line, for a visitor who may not sweep or a student's sweep past a limit (Note [A
    student's sweep]).  ``resuming``: the id of the sweep being resumed, not counted among the active ones."""
    require(visitor.may_sweep, visitor, "start sweeps")
    if visitor.role != STUDENT:
        return workers
    limits = visitor.limits
    spec.validate()
    if spec.size() > limits.sweep_trials:
        raise Refused(f"This sweep is {spec.size():,} runs, more than a student's {limits.sweep_trials:,}: "
                      "fewer values, trials or seeds, or ask the lecturer.")
    configs = spec.cost_configs()
    if configs is None:
        raise Refused("This sweep varies too many values at once to be checked: vary fewer, or ask the lecturer.")
    for config in configs:
        _check_run(limits, config, "A run of this sweep")
    if spec.sampler == "grid":
        total = spec.seeds * sum(_operations(spec.config_for(setting, spec.base.train.seed))
                                 for setting in spec.settings())
    else:
        total = spec.size() * max(_operations(config) for config in configs)
    if total > limits.sweep_operations:
        raise Refused(f"This sweep needs {total:.2g} operations in all, more than a student's "
                      f"{limits.sweep_operations:.2g}: fewer or smaller runs, or ask the lecturer.")
    active = [sweep.id for sweep in store.sweeps() if sweep.id != resuming and sweeps.is_active(sweep)
              and sweep_owner(sweep) == visitor.identity]
    if len(active) >= limits.active_sweeps:
        raise Refused(f"Your sweep #{active[0]} is still running (at most {limits.active_sweeps} at once): "
                      "wait for it to end or stop it.")
    return min(workers, _runs_room(visitor, store))


def start_sweep(visitor: Visitor, spec: sweeps.SweepSpec, store_path: str, *, workers: int = 1,
                name: str = "") -> int:
    """Start ``spec`` for ``visitor`` (owner: a student's identity; within their limits: :func:`check_sweep`);
    the sweep's id (sweeps.start_sweep)."""
    require(visitor.may_sweep, visitor, "start sweeps")
    with RunStore(store_path) as store, _students_turn(visitor, store):
        workers = check_sweep(visitor, spec, store, workers)
        return sweeps.start_sweep(dataclasses.replace(spec, owner=visitor.owner), store_path, workers=workers,
                                  name=name)


def _stored_sweep_owner(store_path: str, sweep_id: int) -> str | None:
    with RunStore(store_path) as store:
        return sweep_owner(store.sweep(sweep_id))


def stop_sweep(visitor: Visitor, sweep_id: int, store_path: str) -> str:
    """Stop a sweep the visitor may change (an operator's any, a student's their own); its status after, or the
    one line of sweeps.stop_sweep."""
    _owned(visitor, f"stop sweep #{sweep_id}", lambda: _stored_sweep_owner(store_path, sweep_id))
    return sweeps.stop_sweep(sweep_id, store_path)


def resume_sweep(visitor: Visitor, sweep_id: int, store_path: str, *, workers: int = 1) -> int:
    """Resume a sweep the visitor may change, a student's within their limits again (:func:`check_sweep`); how
    many runs were requeued (sweeps.resume_sweep)."""
    _owned(visitor, f"resume sweep #{sweep_id}", lambda: _stored_sweep_owner(store_path, sweep_id))
    if visitor.role != STUDENT:
        return sweeps.resume_sweep(sweep_id, store_path, workers=workers)
    with RunStore(store_path) as store, _students_turn(visitor, store):
        spec = sweeps.SweepSpec.from_dict(store.sweep(sweep_id).spec)
        workers = check_sweep(visitor, spec, store, workers, resuming=sweep_id)
        return sweeps.resume_sweep(sweep_id, store_path, workers=workers)
