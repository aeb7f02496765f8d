"""Connections to a store's database, SQLite or PostgreSQL, and what their errors mean to a user.

    engine = sqlite_engine(path, pool_size=2, max_overflow=8)    # or postgresql_engine(url)
    with engine.execution_options(**WRITE).begin() as conn: ...  # a write: the lock taken at BEGIN
    except driver_errors(dialect) as error:
        raise store_error(error, location, dialect) from None    # one line, never a traceback

Note [concurrency]
    SQLite: WAL journal mode, so readers never block the writer and never see
    half a transaction. ``busy_timeout`` (10 s) makes a second writer wait instead of
    failing with "database is locked". Every write is one ``BEGIN IMMEDIATE``
    transaction, so the write lock is taken up front (no deferred read-to-write
    upgrade that could fail with SQLITE_BUSY): the driver's own transaction handling
    is switched off (``isolation_level=None``) and the ``begin`` event of a write
    emits ``BEGIN IMMEDIATE``, SQLAlchemy's recipe for SQLite ("Serializable isolation /
    Savepoints / Transactional DDL"). Reads run outside any transaction, so no reader
    holds an old snapshot that stops the WAL from being checkpointed. PostgreSQL: writes
    are READ COMMITTED transactions, reads run in autocommit; a write waits for another
    writer's row locks at most ``lock_timeout`` (the same 10 s) and is then StoreBusy
    (SQLSTATE 55P03), as on SQLite.
    Each ``RunStore`` holds a small pool of connections (SQLAlchemy's), so it may be
    shared by the threads of one process, each checking out its own connection per
    call; each process opens its own ``RunStore``. Opening an existing store only reads
    (its schema version), so ``runs`` and ``show`` work while another process holds the
    write lock for longer than the busy timeout; only the first opening of a store of an
    older schema writes (:mod:`stability.runs.migrations`).

Note [interrupts]
    A ``KeyboardInterrupt`` can land anywhere, also between ``BEGIN IMMEDIATE``
    and the ``try`` that would roll it back. Every SQLite write therefore starts by
    rolling back a transaction an interrupted write left open on its connection,
    and a connection goes back to the pool rolled back, so the status written after
    a Ctrl-C always lands.

Note [durability]
    With WAL, ``synchronous=NORMAL`` loses no committed transaction when the
    writing *process* dies (SIGKILL included); only a power cut can drop the
    last few. ``RunStore.flush`` writes a log interval's scalars, series and heartbeat in
    one transaction, so a killed worker leaves whole log intervals or nothing.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError

from .errors import StoreBusy, StoreError, not_a_store, not_readable

BUSY_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_S = 10
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE when lock_timeout ends a wait for a lock
WRITE = {"stability_write": True}  # the execution option that marks a write's connection (Note [concurrency])


def sqlite_engine(path: Path, **pool: Any) -> Engine:
    """An engine on one SQLite file: the driver's own transactions off, WAL-friendly pragmas on
    every new connection, ``BEGIN IMMEDIATE`` for writes (Note [concurrency])."""
    busy_ms = BUSY_TIMEOUT_MS
    engine = create_engine(URL.create("sqlite", database=str(path)), **pool,
                           connect_args={"timeout": busy_ms / 1000, "isolation_level": None,
                                         "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _pragmas(connection, _record) -> None:
        connection.execute(f"PRAGMA busy_timeout={busy_ms}")
        connection.execute("PRAGMA synchronous=NORMAL")

    event.listen(engine, "begin", _begin)
    return engine


def postgresql_engine(url: URL) -> Engine:
    """An engine on a PostgreSQL database: a write waits for another writer's row locks as long as
    SQLite's busy timeout, then is StoreBusy; a dropped connection is replaced (Note [concurrency])."""
    return create_engine(url, pool_size=2, max_overflow=6, pool_pre_ping=True,
                         connect_args={"connect_timeout": CONNECT_TIMEOUT_S,
                                       "options": f"-c lock_timeout={BUSY_TIMEOUT_MS}"})


def _begin(conn: Connection) -> None:
    """A write's BEGIN (Notes [concurrency], [interrupts]): on SQLite ``BEGIN IMMEDIATE``, after
    rolling back what an interrupted write left open (PostgreSQL's driver begins on its own)."""
    if not conn.get_execution_options().get("stability_write"):
        return
    driver = conn.connection.driver_connection
    if driver.in_transaction:  # left open by a write that was interrupted
        driver.execute("ROLLBACK")
    driver.execute("BEGIN IMMEDIATE")


def driver_errors(dialect: str) -> tuple[type[BaseException], ...]:
    """SQLAlchemy's database errors, and the driver's own where rows go to or come from its cursor
    past SQLAlchemy (bulk_rows.py, Note [bulk rows]) or a write's BEGIN is sent (Note [concurrency])."""
    if dialect == "postgresql":
        import psycopg

        return DBAPIError, sqlite3.Error, psycopg.Error
    return DBAPIError, sqlite3.Error


def store_error(error: BaseException, location: str, dialect: str, opening: bool = False) -> StoreError:
    """One line for a database error (SQLAlchemy's, or the driver's own): a busy store, a corrupted
    file, a server that cannot be reached, anything else."""
    original = getattr(error, "orig", None) or error
    text = " ".join(str(original).split("\n")[0].split()) or type(original).__name__
    if dialect == "sqlite":
        return _sqlite_error(original, text, location, opening)
    if getattr(original, "sqlstate", None) == LOCK_NOT_AVAILABLE:  # lock_timeout ran out
        return _busy(location)
    unreachable = type(original).__name__ in ("OperationalError", "ConnectionTimeout")
    if unreachable or getattr(error, "connection_invalidated", False):
        return StoreError(f"cannot use run store {location}: {text}; check that the server is running, "
                          "the database exists and the user and password are right")
    return StoreError(f"run store {location}: {text}")


def _sqlite_error(original: BaseException, text: str, location: str, opening: bool) -> StoreError:
    if isinstance(original, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return _busy(location)
    if opening and "not a database" in text:
        return not_a_store(location, "not an SQLite database")
    if type(original) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text:
        return not_readable(location, text)
    return StoreError(f"run store {location}: {text}")


def _busy(location: str) -> StoreBusy:
    return StoreBusy(f"run store {location} is locked by another writer (waited "
                     f"{BUSY_TIMEOUT_MS / 1000:g} s); try again when it has finished")
