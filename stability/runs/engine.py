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

Note [A full disk]
    On a full disk a write fails with SQLite's "database or disk is full" (SQLITE_FULL) or its "disk
    I/O error" (an SQLITE_IOERR), PostgreSQL's disk_full (53100), or the OS's ENOSPC: each is
    :class:`StoreFull`, one line naming the disk and its free bytes (:func:`store_error`). Reading
    must keep working, and it does not by itself: the first connection to a WAL store makes its
    ``-shm`` index (32 KiB), which a full disk refuses, so even ``stability runs`` failed with
    "disk I/O error" while no other process had the store open. So every new connection first reads
    the header (``PRAGMA schema_version``); when that fails for want of space, the connection is
    replaced by a read-only snapshot of the file (``mode=ro&immutable=1``: no index, no locks, the
    rows of the last checkpoint of its WAL; a writer process that still holds it open keeps its
    index, and our connections then read through it as usual). A write on a snapshot fails and is
    StoreFull too. A snapshot is used for :data:`SNAPSHOT_FOR_S` at most, then a fresh connection
    is tried, so a store whose disk has room again is read and written as before.

Note [durability]
    With WAL, ``synchronous=NORMAL`` loses no committed transaction when the
    writing *process* dies (SIGKILL included); only a power cut can drop the
    last few. ``RunStore.flush`` writes a log interval's scalars, series and heartbeat in
    one transaction, so a killed worker leaves whole log intervals or nothing.
"""
from __future__ import annotations

import errno
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError

from .errors import StoreBusy, StoreError, StoreFull, not_a_store, not_readable

BUSY_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_S = 10
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE when lock_timeout ends a wait for a lock
WRITE = {"stability_write": True}  # the execution option that marks a write's connection (Note [concurrency])
DISK_FULL = "53100"  # PostgreSQL's SQLSTATE disk_full
NO_SPACE_BELOW = 1 << 20  # bytes free under which a failed write is taken for a full disk (Note [A full disk])
SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY = 13, 10, 8  # SQLite's primary result codes
SNAPSHOT_FOR_S = 2.0  # how long a read-only snapshot of a store on a full disk is reused (Note [A full disk])


class Snapshot(sqlite3.Connection):
    """A read-only connection to a store file on a full disk, that needs no index file (Note [A full disk])."""


def sqlite_engine(path: Path, **pool: Any) -> Engine:
    """An engine on one SQLite file: the driver's own transactions off, WAL-friendly pragmas on
    every new connection, ``BEGIN IMMEDIATE`` for writes (Note [concurrency])."""
    busy_ms = BUSY_TIMEOUT_MS
    engine = create_engine(URL.create("sqlite", database=str(path)), **pool,
                           creator=lambda: _connect(Path(path), busy_ms / 1000))

    @event.listens_for(engine, "connect")
    def _pragmas(connection, record) -> None:
        connection.execute(f"PRAGMA busy_timeout={busy_ms}")
        connection.execute("PRAGMA synchronous=NORMAL")
        record.info["since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _fresh_snapshots(connection, record, _proxy) -> None:
        if isinstance(connection, Snapshot) and time.monotonic() - record.info["since"] > SNAPSHOT_FOR_S:
            raise DisconnectionError("a snapshot of a store on a full disk: try a connection of its own")

    event.listen(engine, "begin", _begin)
    return engine


def _connect(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection to the store file at ``path``; a read-only :class:`Snapshot` of it when its first
    read fails for want of disk space (Note [A full disk])."""
    options = {"timeout": timeout, "isolation_level": None, "check_same_thread": False}
    connection = sqlite3.connect(str(path), **options)
    try:
        connection.execute("PRAGMA schema_version").fetchone()
    except sqlite3.OperationalError as error:
        if path.exists() and out_of_space(error, path.parent):
            connection.close()
            return sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro&immutable=1", uri=True,
                                   factory=Snapshot, **options)
    except sqlite3.DatabaseError:
        pass  # a damaged file: the query that meets it says so (store_error)
    return connection


def free_bytes(folder: Path) -> int | None:
    """Bytes free to this user on the disk holding ``folder``; None when it cannot be read."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def out_of_space(error: BaseException, folder: Path) -> bool:
    """Whether ``error`` is a write refused for want of disk space: SQLite's SQLITE_FULL, the OS's ENOSPC,
    or an SQLite I/O or read-only error while the disk holding ``folder`` has under
    :data:`NO_SPACE_BELOW` free (Note [A full disk]). The error's code where the driver gives it
    (Python 3.11), else its words."""
    code = getattr(error, "sqlite_errorcode", None)
    text = str(error)
    if (code & 0xFF if code is not None else None) == SQLITE_FULL or "database or disk is full" in text:
        return True
    if getattr(error, "errno", None) == errno.ENOSPC:
        return True
    lacking = (code & 0xFF in (SQLITE_IOERR, SQLITE_READONLY) if code is not None
               else "disk I/O error" in text or "readonly database" in text)
    free = free_bytes(folder) if lacking else None
    return free is not None and free < NO_SPACE_BELOW


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
    if getattr(original, "sqlstate", None) == DISK_FULL:
        return StoreFull(f"run store {location} cannot be written: the database server's disk is full "
                         f"({text}); reading it still works")
    unreachable = type(original).__name__ in ("OperationalError", "ConnectionTimeout")
    if unreachable or getattr(error, "connection_invalidated", False):
        return StoreError(f"cannot use run store {location}: {text}; check that the server is running, "
                          "the database exists and the user and password are right")
    return StoreError(f"run store {location}: {text}")


def _sqlite_error(original: BaseException, text: str, location: str, opening: bool) -> StoreError:
    if isinstance(original, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return _busy(location)
    if out_of_space(original, Path(location).parent):
        return full(location, Path(location).parent, text)
    if opening and "not a database" in text:
        return not_a_store(location, "not an SQLite database")
    if type(original) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text:
        return not_readable(location, text)
    return StoreError(f"run store {location}: {text}")


def full(location: str, folder: Path, text: str) -> StoreFull:
    """A write to the store at ``location`` refused for want of space on the disk holding ``folder``
    (SQLite's ``text``, kept where the disk has room: a size limit, not the disk)."""
    free = free_bytes(folder)
    room = f"{_size(free)} free in {folder}" if free is not None else f"in {folder}"
    cause = f"{text} ({room})" if free is not None and free >= NO_SPACE_BELOW else f"the disk is full ({room})"
    return StoreFull(f"run store {location} cannot be written: {cause}; free some space there (deleting "
                     "finished runs removes their checkpoints); reading it still works")


def _size(count: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:,} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count} bytes"


def _busy(location: str) -> StoreBusy:
    return StoreBusy(f"run store {location} is locked by another writer (waited "
                     f"{BUSY_TIMEOUT_MS / 1000:g} s); try again when it has finished")
