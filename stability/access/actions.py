"""Every change a page can ask for, each behind the visitor's role (Note [Roles] in policy.py).

    run_id = start_run(visitor, config, store_path)   # Refused (one line) for a viewer or a student past a limit
    stop_run(visitor, run_id, store_path)              # an operator's, or a student's own run
    delete_run(visitor, store, run_id)

Note [Guarded in the action]
----------------------------
A page hides the controls a visitor may not use, but hiding is not the guard: a session can send any widget
state it likes over its websocket, and a link can carry any query.  So the functions the pages call to
change something take the visitor and check its role themselves, before anything is written: a forged
Start, Stop or Delete from a viewer reaches one of these and is refused.  Pages call nothing else that
writes (tests/test_access.py reads their source for it).
"""
from __future__ import annotations

from collections.abc import Callable

from stability.admission import budget
from stability.config import RunConfig
from stability.core.errors import ConfigError
from stability.execution import lifecycle
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
    limits = visitor.limits
    if config.train.steps > limits.steps:
        raise Refused(f"{config.train.steps:,} steps is more than a student's {limits.steps:,}: ask the lecturer.")
    used, checkpoint = budget.footprint(config), budget.checkpoint_bytes(config)
    operations = budget.work(config).per_step(config) * config.train.steps
    for value, limit, words in (
            (operations, limits.operations, f"{operations:.2g} operations"),
            (used.peak, limits.memory_bytes, f"{budget.format_bytes(used.peak)} of memory"),
            (checkpoint, limits.checkpoint_bytes, f"a checkpoint of {budget.format_bytes(checkpoint)}")):
        if value > limit:
            raise Refused(f"This run needs {words}, more than a student's limit: a smaller hidden size, "
                          "sequence or step count, or ask the lecturer.")
    mine = sum(run.owner == visitor.identity for run in store.active_runs())
    if mine >= limits.active_runs:
        raise Refused(f"You have {mine} runs queued or training (at most {limits.active_runs} at once): "
                      "wait for one to end or stop one.")


def start_run(visitor: Visitor, config: RunConfig, store_path: str) -> int:
    """Start ``config`` for ``visitor`` (owner: a student's identity); the queue's ``start_run``.  The store is
    read for a student's limits only."""
    require(visitor.may_start, visitor, "start runs")
    if visitor.role == STUDENT:
        with RunStore(store_path) as store:
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
    """For what only an operator does (a sweep's start, stop and resume; a preset's run): :class:`Refused`
    for anybody else."""
    require(visitor.may_operate, visitor, action)
