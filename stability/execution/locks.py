"""The locks between processes that share a store: an exclusive ``flock`` on a file, the run
queue's scheduling lock, and a sweep's claim lock.

    with file_lock(store.home / "runner.lock"): ...   # one holder at a time, on this machine
    with scheduling_lock(store): ...                 # the run queue (stability.execution.scheduler)
    with sweep_lock(store, sweep_id): ...            # a sweep's claims, on every machine

A ``flock`` is held by an open file, so a process that dies releases it. It only serialises
processes of one machine (the lock file is in ``store.home``, this machine's folder); a sweep of a
shared PostgreSQL store is serialised across machines by a PostgreSQL session advisory lock
instead. Neither lock is what keeps two processes from training one run: the claim is
(:mod:`stability.execution.lifecycle`, Note [claims]); the locks keep a queue from launching more
workers than it has slots, and a sweep from asking more trials than its budget.
"""
from __future__ import annotations

import contextlib
import functools

from ..core.flock import file_lock

SWEEP_LOCK_SPACE = 0x5357  # PostgreSQL advisory locks of sweeps: (space, sweep id)


def scheduling_lock(store):
    """The store's scheduling lock (``<store home>/runner.lock``), between this machine's processes."""
    return file_lock(store.home / "runner.lock")


@contextlib.contextmanager
def sweep_lock(store, sweep_id: int):
    """Hold the sweep's claim lock for the ``with`` block (stability.sweeps.workers, Note [Claiming
    trials]): a ``flock`` on ``<store home>/sweep-<id>.lock`` for an SQLite store (one machine), a
    PostgreSQL session advisory lock for a shared one."""
    if not store.shared:
        with file_lock(store.home / f"sweep-{int(sweep_id)}.lock"):
            yield
        return
    import sqlalchemy

    engine = _lock_engine(store.url)
    key = {"space": SWEEP_LOCK_SPACE, "id": int(sweep_id)}
    with engine.connect() as connection:
        connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:space, :id)"), key)
        try:
            yield
        finally:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:space, :id)"), key)
            connection.commit()


@functools.lru_cache(maxsize=4)
def _lock_engine(url: str):
    import sqlalchemy

    return sqlalchemy.create_engine(url, pool_size=1, max_overflow=0, pool_pre_ping=True)
