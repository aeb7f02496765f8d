"""The locks between processes that share a store: an exclusive ``flock`` on a file, the run
queue's scheduling lock, a sweep's claim lock and the students' start lock.

    with scheduling_lock(store): ...                 # the run queue (stability.workers.scheduler)
    with sweep_lock(store, sweep_id): ...            # a sweep's claims, on every machine
    with students_lock(store): ...                   # a student's start checked and stored, on every machine

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
STUDENTS_LOCK_SPACE = 0x5354  # PostgreSQL advisory lock of students' starts: (space, 0)
STUDENTS_TIMEOUT_S = 30.0    # a holder reads a student's runs and sweeps and stores one start


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
    with _store_wide(store, f"sweep-{int(sweep_id)}.lock", (SWEEP_LOCK_SPACE, int(sweep_id)), SWEEP_TIMEOUT_S,
                     f"sweep {int(sweep_id)}'s lock"):
        yield


def students_lock(store, timeout: float = STUDENTS_TIMEOUT_S):
    """The lock under which a student's start or resume is checked against their limits and stored
    (stability.access, Note [A student's sweep]): a ``flock`` on ``<store home>/locks/students.lock`` for an
    SQLite store, a PostgreSQL session advisory lock for a shared one, so that two servers on two machines
    over one PostgreSQL store never both let a student past a limit either."""
    return _store_wide(store, "students.lock", (STUDENTS_LOCK_SPACE, 0), timeout, "the students' start lock")


@contextlib.contextmanager
def _store_wide(store, name: str, key: tuple[int, int], timeout: float, what: str):
    """A lock every process of the store shares: ``<store home>/locks/NAME`` (:func:`store_lock`) for a store
    of this machine, the PostgreSQL session advisory lock ``key`` (space, id) for a shared one; LockBusy after
    ``timeout`` s (``$STABILITY_LOCK_TIMEOUT`` replaces it)."""
    if not store.shared:
        with store_lock(store, name, timeout):
            yield
        return
    import sqlalchemy

    engine = _lock_engine(store.url)
    key = {"space": key[0], "id": key[1]}
    timeout = lock_timeout(timeout)
    deadline = time.monotonic() + timeout
    with engine.connect() as connection:
        # asked again and again, never waited on in the server: a holder that never lets go (a stopped
        # process on another machine) is LockBusy after the timeout, as a file lock is
        try_lock = sqlalchemy.text("SELECT pg_try_advisory_lock(:space, :id)")
        while not connection.execute(try_lock, key).scalar():
            connection.rollback()  # no transaction left open between tries
            if time.monotonic() >= deadline:
                raise LockBusy(f"run store {store.location}: {what} is held by another process (waited {timeout:g} s)")
            time.sleep(POLL_S)
        try:
            yield
        finally:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:space, :id)"), key)
            connection.commit()


@functools.lru_cache(maxsize=4)
def _lock_engine(url: str):
    """The engine of a shared store's advisory locks: a connection of its own for each holder (NullPool), as
    a session's lock belongs to its connection and two holders in one process (two sessions of one server
    starting at once) must not queue for one pooled connection instead of for the lock."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    return sqlalchemy.create_engine(url, poolclass=NullPool)
