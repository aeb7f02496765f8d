"""The locks between processes that share a store: an exclusive ``flock`` on a file, the run
queue's scheduling lock, and a sweep's claim lock.

    with scheduling_lock(store): ...                 # the run queue (stability.workers.scheduler)
    with sweep_lock(store, sweep_id): ...            # a sweep's claims, on every machine

A ``flock`` is held by an open file, so a process that dies releases it. It only serialises
processes of one machine (the lock files are in ``<store home>/locks/``, this machine's folder, private
to its user: Note [Lock files] in stability.core.flock); a sweep of a shared PostgreSQL store is
serialised across machines by a PostgreSQL session advisory lock instead. A lock not had within its
timeout is :class:`LockBusy`, one line (a :class:`~stability.runs.errors.StoreBusy`: the CLI and the
pages answer it as a busy store), and the periodic reconcile skips its turn instead
(stability.workers.scheduler.reconcile). Neither lock is what keeps two processes from training one run: the claim is
(:mod:`stability.execution.lifecycle`, Note [claims]); the locks keep a queue from launching more
workers than it has slots, and a sweep from asking more trials than its budget.
"""
from __future__ import annotations

import contextlib
import functools
import time

from ..core.flock import POLL_S, LockRefused, LockTimeout, file_lock, lock_timeout
from ..runs.errors import StoreBusy, StoreError

SWEEP_LOCK_SPACE = 0x5357  # PostgreSQL advisory locks of sweeps: (space, sweep id)
SCHEDULING_TIMEOUT_S = 60.0  # a holder launches a few workers: seconds at most
SWEEP_TIMEOUT_S = 300.0      # a holder asks Optuna for a trial, which may read a long study


class LockBusy(StoreBusy):
    """A lock of the store was held by another process past its timeout (one line)."""


def lock_path(store, name: str):
    """``<store home>/locks/NAME``: the folder made 0700 and refused unless it is this user's
    (``store.private_subfolder``), so nobody else makes, swaps or holds the file."""
    return store.private_subfolder("locks") / name


@contextlib.contextmanager
def store_lock(store, name: str, timeout: float):
    """Hold ``<store home>/locks/NAME`` for the ``with`` block; :class:`LockBusy` after ``timeout`` s
    (``$STABILITY_LOCK_TIMEOUT`` replaces it), StoreError for a link where the file belongs."""
    path = lock_path(store, name)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(file_lock(path, timeout))
        except LockTimeout as error:
            raise LockBusy(f"run store {store.location}: {error}") from None
        except LockRefused as error:
            raise StoreError(f"run store {store.location}: {error}") from None
        yield


def scheduling_lock(store, timeout: float = SCHEDULING_TIMEOUT_S):
    """The store's scheduling lock (``<store home>/locks/runner.lock``), between this machine's processes."""
    return store_lock(store, "runner.lock", timeout)


@contextlib.contextmanager
def sweep_lock(store, sweep_id: int):
    """Hold the sweep's claim lock for the ``with`` block (stability.sweeps.workers, Note [Claiming
    trials]): a ``flock`` on ``<store home>/locks/sweep-<id>.lock`` for an SQLite store (one machine), a
    PostgreSQL session advisory lock for a shared one."""
    if not store.shared:
        with store_lock(store, f"sweep-{int(sweep_id)}.lock", SWEEP_TIMEOUT_S):
            yield
        return
    import sqlalchemy

    engine = _lock_engine(store.url)
    key = {"space": SWEEP_LOCK_SPACE, "id": int(sweep_id)}
    timeout = lock_timeout(SWEEP_TIMEOUT_S)
    deadline = time.monotonic() + timeout
    with engine.connect() as connection:
        # asked again and again, never waited on in the server: a holder that never lets go (a stopped
        # process on another machine) is LockBusy after the timeout, as a file lock is
        try_lock = sqlalchemy.text("SELECT pg_try_advisory_lock(:space, :id)")
        while not connection.execute(try_lock, key).scalar():
            connection.rollback()  # no transaction left open between tries
            if time.monotonic() >= deadline:
                raise LockBusy(f"run store {store.location}: sweep {int(sweep_id)}'s lock is held by another "
                               f"process (waited {timeout:g} s)")
            time.sleep(POLL_S)
        try:
            yield
        finally:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:space, :id)"), key)
            connection.commit()


@functools.lru_cache(maxsize=4)
def _lock_engine(url: str):
    import sqlalchemy

    return sqlalchemy.create_engine(url, pool_size=1, max_overflow=0, pool_pre_ping=True)
