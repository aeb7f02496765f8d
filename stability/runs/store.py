"""The run store: runs, sweeps, scalar metric rows and vector series in one database, an SQLite
file (the embedded default) or a PostgreSQL database shared by several machines.

    store = RunStore()                      # $STABILITY_STORE, else ~/.stability/runs.db
    store = RunStore("postgresql://lab:secret@gpu-server/stability")   # Note [locations]
    run_id = store.create_run(config.to_dict())
    store.flush(run_id, [(step, time.time(), "train/loss", 0.12)],
                [(step, time.time(), "grad/h_t_norm", t, g) for t, g in enumerate(norms)],
                heartbeat_step=step)
    store.metrics(run_id, since_step=last_seen)   # DataFrame run_id,step,wall_time,name,value
    store.records()                         # every run as a RunRecord (typed config, latest values)
    store.latest_many()                     # {run_id: {name: value}}, every run in one query

Note [locations]
    A store is a path (``runs.db``, ``~/lab/runs.db``) or a URL: ``sqlite:///PATH`` names the same
    file as PATH, ``postgresql://USER:PASSWORD@HOST:PORT/DATABASE`` (or ``postgresql+psycopg://``)
    a PostgreSQL database, reached through the psycopg 3 driver. Both go through one
    implementation on SQLAlchemy Core; the few differences between the two SQL dialects are the
    column types and the write-order column of Note [write order] (``_DIALECTS``).
    ``store.url`` is the URL with its password, what Optuna's storage for a sweep's study is
    given; ``store.location`` (also ``str(store)``) masks the password and is what every message
    names. ``store.home`` is a folder on this machine for the files that belong with the store
    (``logs/``, ``checkpoints/``, ``runner.lock``): an SQLite file's own folder, and for a URL store
    ``~/.stability/stores/<host>-<port>-<database>/`` (``$STABILITY_HOME`` replaces
    ``~/.stability``), so each machine keeps its own workers' logs beside one shared database.

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
    older schema writes (Note [schema versions]).

Note [creating and refusing]
    A new SQLite store is built under a temporary name beside its path and linked into
    place (``os.link`` fails rather than overwrite), so a file found at the path
    is always a finished store: an existing file that is empty, not SQLite, or
    an SQLite database without the run tables is refused with a
    :class:`StoreError`, never turned into a store. A store that SQLite finds
    corrupted is a :class:`StoreError` naming the file and what to do; it is
    never written to. A PostgreSQL database gets the tables on first use, beside
    any others it holds (a sweep's Optuna tables live there too); processes that open
    a new database at once serialise on an advisory lock, and the second finds the
    tables made. A database with a ``runs`` table but no store ``meta`` is refused.
    A server that cannot be reached, a refused login, an unknown database: one
    line naming ``store.location``.

Note [interrupts]
    A ``KeyboardInterrupt`` can land anywhere, also between ``BEGIN IMMEDIATE``
    and the ``try`` that would roll it back. Every SQLite write therefore starts by
    rolling back a transaction an interrupted write left open on its connection,
    and a connection goes back to the pool rolled back, so the status written after
    a Ctrl-C always lands.

Note [durability]
    With WAL, ``synchronous=NORMAL`` loses no committed transaction when the
    writing *process* dies (SIGKILL included); only a power cut can drop the
    last few. ``flush`` writes a log interval's scalars, series and heartbeat in
    one transaction, so a killed worker leaves whole log intervals or nothing.

Note [NaN]
    SQLite stores a float NaN as NULL (infinities are kept as REAL), so a NULL
    ``value`` is read back as NaN: a diverging run's last rows survive the round
    trip. PostgreSQL's double precision keeps NaN itself; both read back NaN.

Note [schema versions]
    The ``meta`` table holds the schema version. A new store gets ``_SCHEMA``
    (the current tables) and ``SCHEMA_VERSION``; an older store is brought up
    to date when it is opened by the steps in ``_MIGRATIONS``, all in one write
    transaction that first re-reads the version (another process may have
    migrated it meanwhile). A store of a newer version is refused, never
    changed. Versions: 1 the first; 2 adds ``runs.resumes``; 3 adds
    ``latest_metrics``, filled from the stored rows (Note [latest]); 4 adds the
    ``sweeps`` table and the runs' ``sweep_id``, ``trial``, ``params`` and
    ``host`` (Note [sweeps]). PostgreSQL stores start at version 4.

Note [sweeps]
    A sweep is an Optuna study whose trials are ordinary runs
    (``stability/sweeps/spec.py``). The store keeps what the dashboard and the CLI
    need about it: a ``sweeps`` row (its spec as JSON, the study's name, its
    status of ``SWEEP_STATUSES``, how many workers its last start asked for,
    a stop request) and, on each of its runs, ``sweep_id``, the Optuna
    ``trial`` number and ``params``, the JSON object of the varied values
    (``{"cell": "rnn", "train.lr": 0.001}``). The trials themselves live in
    Optuna's own tables; nothing here mirrors them. A run records the
    ``host`` of the process that claimed it, since its ``pid`` only means
    something on that host. A pruned run (status ``pruned``) is terminal and
    keeps its rows, like a diverged one.

Note [latest]
    ``latest_metrics`` holds, per run and scalar name, the row at the run's
    highest step (of several rows at that step, the one written last), so the
    latest values of every run are one indexed read (:meth:`RunStore.latest_many`)
    instead of a scan of each run's rows. Every write of scalar rows (``flush``,
    ``log``) updates it in the same transaction with an upsert that only moves
    forward in step; ``discard_after`` recomputes a run's rows from ``metrics``
    and ``delete_run`` removes them, each in its own write's transaction, so it
    always equals a max-step read of ``metrics`` (tested against one). The
    recomputation breaks ties at one step by write order (Note [write order]).

Note [write order]
    Rows of one name at one step are ordered by when they were written: SQLite's
    ``rowid`` (every table has one, nothing to store), and on PostgreSQL a ``seq``
    identity column of ``metrics`` (a bigint drawn from a sequence at insert). A
    sequence is not gap-free and two transactions may commit out of draw order, but
    within one run rows come from one writer at a time, so draw order is write order.

Note [bulk rows]
    A flush writes a log interval's rows (25 scalars and a few series vectors) and
    the heartbeat on the training hot path. Its four statements go to the DBAPI
    cursor's ``executemany`` (SQLAlchemy's ``connection.connection.cursor()``, inside
    the transaction SQLAlchemy began) as SQL with positional markers (``?`` for
    sqlite3, ``%s`` for psycopg) and rows of tuples: through ``text()`` SQLAlchemy
    builds a parameter dict per row, which made a flush on SQLite 2.5x slower than
    the raw-sqlite3 store, and each ``exec_driver_sql`` still costs an execution
    context (~40 us). Reads of many rows take the DBAPI cursor's tuples for the same
    reason (``benchmarks/store.py`` has the numbers). Statements sent this way pass
    no SQLAlchemy events; driver errors are caught like SQLAlchemy's.

Note [since_step]
    ``metrics(..., since_step=s)`` returns rows with ``step > s``. Incremental
    polling is exact when every step's rows are committed in one transaction
    (``flush`` does this); rows added later to an already-seen step are only
    picked up by a full read.
"""
from __future__ import annotations

import json
import math
import operator
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import BigInteger, String, bindparam, create_engine, event, inspect, text
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import NullPool

from .records import RunRecord, parse_params, record_from_row, section_name
from .status import ACTIVE_STATUSES, STATUSES, SWEEP_STATUSES, TERMINAL  # noqa: F401  (the store's vocabulary)

SCHEMA_VERSION = 4
DEFAULT_PATH = Path("~/.stability/runs.db")
ENV_VAR = "STABILITY_STORE"
HOME_ENV_VAR = "STABILITY_HOME"
BUSY_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_S = 10
SMALLEST_DATABASE = 512  # bytes: an SQLite file holds at least one page
MAX_RUN_ID = 2**63 - 1  # SQLite's INTEGER and PostgreSQL's bigint range; any other id names no run
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE when lock_timeout ends a wait for a lock
ACCEPTED = "a file path, sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
_SCHEMA_LOCK = 0x5354414253544F52  # pg_advisory_xact_lock key for creating and migrating the tables


def _to_flag(value: Any) -> int:
    return int(bool(value))


# Fields update_run may set, with the Python type each value is coerced to
# (numpy/torch scalars would otherwise fail to bind; flags are stored as 0/1 integers).
_UPDATABLE = {
    "name": str, "status": str, "started_at": float, "finished_at": float, "device": str,
    "pid": int, "heartbeat": float, "error": str, "total_params": int, "recurrent_params": int,
    "baseline": float, "baseline_label": str, "metric": str, "total_steps": int, "step": int,
    "resumes": int, "stop_requested": _to_flag, "host": str, "sweep_id": int, "trial": int,
    "params": lambda value: _json_object(value, "params"),
}
# Fields update_sweep may set, coerced the same way.
_SWEEP_UPDATABLE = {"name": str, "status": str, "finished_at": float, "workers": int, "stop_requested": _to_flag}
METRIC_COLUMNS = ["run_id", "step", "wall_time", "name", "value"]
SERIES_COLUMNS = ["run_id", "step", "wall_time", "name", "index", "value"]
RUNS_COLUMNS = ["id", "name", "status", "created_at", "started_at", "finished_at", "device", "pid",
                "heartbeat", "error", "total_params", "recurrent_params", "step", "total_steps", "sweep_id",
                "trial"]
_NULLABLE_INTS = ["pid", "total_params", "recurrent_params", "step", "total_steps", "sweep_id", "trial"]

# What differs between the dialects (Notes [locations], [write order]): the column types, and the
# column that orders rows by when they were written.
_DIALECTS = {
    "sqlite": {"id": "INTEGER PRIMARY KEY AUTOINCREMENT", "int": "INTEGER", "real": "REAL",
               "seq": "", "order": "rowid"},
    "postgresql": {"id": "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", "int": "BIGINT",
                   "real": "DOUBLE PRECISION", "seq": ",\n    seq BIGINT GENERATED ALWAYS AS IDENTITY",
                   "order": "seq"},
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id {id},
    name TEXT,
    config TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at {real} NOT NULL,
    started_at {real},
    finished_at {real},
    device TEXT,
    pid {int},
    heartbeat {real},
    error TEXT,
    total_params {int},
    recurrent_params {int},
    baseline {real},
    baseline_label TEXT,
    metric TEXT,
    step {int},
    total_steps {int},
    stop_requested {int} NOT NULL DEFAULT 0,
    resumes {int} NOT NULL DEFAULT 0,
    sweep_id {int},
    trial {int},
    params TEXT,
    host TEXT
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id {int} NOT NULL, step {int} NOT NULL, wall_time {real} NOT NULL,
    name TEXT NOT NULL, value {real}{seq}
);
CREATE INDEX IF NOT EXISTS metrics_run_name_step ON metrics (run_id, name, step);
CREATE INDEX IF NOT EXISTS metrics_run_step ON metrics (run_id, step);
CREATE TABLE IF NOT EXISTS series (
    run_id {int} NOT NULL, step {int} NOT NULL, wall_time {real} NOT NULL,
    name TEXT NOT NULL, idx {int} NOT NULL, value {real}
);
CREATE INDEX IF NOT EXISTS series_run_name_step ON series (run_id, name, step);
"""
_LATEST_TABLE = """
CREATE TABLE IF NOT EXISTS latest_metrics (
    run_id {int} NOT NULL, name TEXT NOT NULL, step {int} NOT NULL, value {real},
    PRIMARY KEY (run_id, name)
);
"""
_SWEEPS_TABLE = """
CREATE TABLE IF NOT EXISTS sweeps (
    id {id},
    name TEXT,
    spec TEXT NOT NULL,
    study TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at {real} NOT NULL,
    finished_at {real},
    workers {int},
    stop_requested {int} NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_sweep ON runs (sweep_id);
"""
_SCHEMA += _LATEST_TABLE + _SWEEPS_TABLE
_META_TABLE = "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"

# The latest_metrics rows recomputed from the metrics rows that satisfy {where} (Note [latest]).
_LATEST_FROM_METRICS = """
INSERT INTO latest_metrics (run_id, name, step, value)
SELECT run_id, name, step, value FROM (
    SELECT run_id, name, step, value,
           ROW_NUMBER() OVER (PARTITION BY run_id, name ORDER BY step DESC, {order} DESC) AS position
    FROM metrics WHERE {where}
) AS ranked WHERE position = 1
"""
# Keeps latest_metrics current as scalar rows are written (the same statement on both dialects).
# The bulk statements of flush are sent to the driver's executemany as they are (Note [bulk rows]).
_UPSERT_LATEST = ("INSERT INTO latest_metrics (run_id, name, step, value) VALUES (?, ?, ?, ?)"
                  " ON CONFLICT (run_id, name) DO UPDATE SET step = excluded.step, value = excluded.value"
                  " WHERE excluded.step >= latest_metrics.step")
# The list parameters of ``IN :name`` (SQLAlchemy's expanding parameters) and their types.
_LIST_PARAMETERS = {"ids": BigInteger(), "names": String(), "statuses": String()}
_INSERT_METRIC = "INSERT INTO metrics (run_id, step, wall_time, name, value) VALUES (?, ?, ?, ?, ?)"
_INSERT_SERIES = "INSERT INTO series (run_id, step, wall_time, name, idx, value) VALUES (?, ?, ?, ?, ?, ?)"

# Statements that bring a store of schema version v to version v + 1 (Note [schema versions]).
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE runs ADD COLUMN resumes {int} NOT NULL DEFAULT 0",),
    2: (_LATEST_TABLE, _LATEST_FROM_METRICS.replace("{where}", "1 = 1")),
    3: (*(f"ALTER TABLE runs ADD COLUMN {column}" for column in
          ("sweep_id {int}", "trial {int}", "params TEXT", "host TEXT")),
        *filter(str.strip, _SWEEPS_TABLE.split(";"))),
}


class StoreError(RuntimeError):
    """The store cannot be used (a directory, unwritable, not a run store, corrupted, a newer schema,
    a server that cannot be reached)."""


class StoreBusy(StoreError):
    """Another process held the store's write lock for longer than the busy timeout."""


class RunNotFound(ValueError):
    """No run with the given id."""


class SweepNotFound(ValueError):
    """No sweep with the given id."""


def default_path() -> Path:
    """``$STABILITY_STORE`` if set, else ``~/.stability/runs.db`` (as a path; see :func:`default_location`)."""
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH).expanduser()


def default_location() -> str:
    """``$STABILITY_STORE`` if set (a path or a URL), else ``~/.stability/runs.db``."""
    return os.environ.get(ENV_VAR) or str(DEFAULT_PATH.expanduser())


def parse_location(location: str | os.PathLike | None = None) -> URL:
    """The SQLAlchemy URL of a store location (Note [locations]): a path or an ``sqlite:///`` URL
    becomes ``sqlite:////absolute/path``, ``postgresql://`` gets the psycopg driver; anything else
    is a one-line :class:`StoreError`."""
    if location is None:
        location = default_location()
    if isinstance(location, str) and "://" in location:
        try:
            url = make_url(location)
        except (ArgumentError, ValueError):
            raise StoreError(f"cannot read the run store URL {_mask(location)!r}; give {ACCEPTED}") from None
        backend, _, driver = url.drivername.partition("+")
        if backend == "sqlite" and driver in ("", "pysqlite"):
            if not url.database or url.database == ":memory:":
                raise StoreError(f"run store URL {_mask(location)!r} names no file; give {ACCEPTED}")
            return URL.create("sqlite", database=str(Path(url.database).expanduser().absolute()))
        if backend in ("postgresql", "postgres") and driver in ("", "psycopg"):
            if not url.database:
                raise StoreError(f"run store URL {_mask(location)!r} names no database; give {ACCEPTED}")
            return url.set(drivername="postgresql+psycopg")
        raise StoreError(f"unsupported run store URL {_mask(location)!r}; give {ACCEPTED}")
    try:
        path = Path(location).expanduser().absolute()
    except TypeError:
        raise StoreError(f"cannot use {location!r} as a run store; give {ACCEPTED}") from None
    return URL.create("sqlite", database=str(path))


def _mask(text: str) -> str:
    """A URL as typed, its password (if any) replaced by ***."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", text)


class RunStore:
    """Runs, sweeps, metric rows and series rows in one SQLite file or PostgreSQL database (see the
    notes in the module docstring)."""

    def __init__(self, location: str | os.PathLike | None = None):
        url = parse_location(location)
        self._url = url
        self.dialect = url.get_backend_name()
        self.path = Path(url.database) if self.dialect == "sqlite" else None
        self.location = str(self.path) if self.path is not None else url.render_as_string(hide_password=True)
        self._sql_cache: dict[str, Any] = {}
        # SQLAlchemy's errors, and the driver's own where rows are read (Note [bulk rows]) or a
        # write's BEGIN is sent (Note [concurrency]) past SQLAlchemy
        self._errors: tuple[type[BaseException], ...] = (DBAPIError, sqlite3.Error)
        if self.dialect == "postgresql":
            import psycopg

            self._errors += (psycopg.Error,)
        self._engine = self._open()
        self._writer = self._engine.execution_options(stability_write=True)
        self._reader = (self._engine if self.dialect == "sqlite"
                        else self._engine.execution_options(isolation_level="AUTOCOMMIT"))

    # ------------------------------------------------------------------ locations
    @property
    def url(self) -> str:
        """The SQLAlchemy URL, password included: what Optuna's RDBStorage is given (Note [locations])."""
        return self._url.render_as_string(hide_password=False)

    @property
    def shared(self) -> bool:
        """True for a server database several machines may use at once."""
        return self.dialect != "sqlite"

    @property
    def home(self) -> Path:
        """This machine's folder for the store's logs, checkpoints and runner lock (Note [locations])."""
        if self.path is not None:
            return self.path.parent
        root = Path(os.environ.get(HOME_ENV_VAR) or "~/.stability").expanduser().absolute()
        name = f"{self._url.host or 'localhost'}-{self._url.port or 5432}-{self._url.database}"
        folder = root / "stores" / re.sub(r"[^A-Za-z0-9._-]", "_", name)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create the folder {folder} for run store {self.location}: "
                             f"{error.strerror or error}") from None
        return folder

    def __str__(self) -> str:
        return self.location

    def __repr__(self) -> str:
        return f"RunStore({self.location!r})"

    # ------------------------------------------------------------------ connection
    def _open(self) -> Engine:
        if self.dialect == "sqlite":
            self._prepare_file()
            engine = _sqlite_engine(self.path, pool_size=2, max_overflow=8)
        else:
            # a write waits for another writer's row locks as long as SQLite's busy timeout, then is StoreBusy
            engine = create_engine(self._url, pool_size=2, max_overflow=6, pool_pre_ping=True,
                                   connect_args={"connect_timeout": CONNECT_TIMEOUT_S,
                                                 "options": f"-c lock_timeout={BUSY_TIMEOUT_MS}"})
        try:
            version = self._open_tables(engine)
        except BaseException as error:
            engine.dispose()
            if isinstance(error, self._errors):
                raise self._error(error, opening=True) from None
            raise
        if version > SCHEMA_VERSION:
            engine.dispose()
            raise StoreError(f"run store {self.location} has schema version {version}, newer than the "
                             f"{SCHEMA_VERSION} this version of stability reads; "
                             "upgrade stability or use another store")
        return engine

    def _open_tables(self, engine: Engine) -> int:
        """Read the schema version; create the tables of a new PostgreSQL store, migrate an older
        store, switch an SQLite file to WAL. Returns the version found."""
        with engine.connect() as conn:
            version, tables = _schema_version(conn)
        if version is None:
            if self.dialect == "sqlite" or "runs" in tables or "meta" in tables:
                raise self._not_a_store("a database without the run store's tables")
        if version is None or version < SCHEMA_VERSION:
            with engine.execution_options(stability_write=True).begin() as conn:
                found = _migrate(conn)
            version = SCHEMA_VERSION if found is None else found
        if self.dialect == "sqlite":
            with engine.connect() as conn:
                if conn.exec_driver_sql("PRAGMA journal_mode").scalar().lower() != "wal":
                    conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        return version

    def _prepare_file(self) -> None:
        """The SQLite file's folder, a new store linked into place, a file that is no store refused."""
        if self.path.is_dir():
            raise StoreError(f"run store {self.path} is a directory; "
                             f"give a file path such as {self.path / 'runs.db'}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create the run store's folder {self.path.parent}: {error.strerror}") from None
        if not self.path.exists():
            self._create()
        self._check_is_store_file()

    def _create(self) -> None:
        """Build a new store under a temporary name and link it into place (Note [creating and refusing])."""
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.new")
        try:
            temporary.unlink(missing_ok=True)
            engine = _sqlite_engine(temporary, poolclass=NullPool)
            try:
                with engine.execution_options(stability_write=True).begin() as conn:
                    _migrate(conn)  # in a rollback journal: WAL is switched on under the final name
            finally:
                engine.dispose()
            try:
                os.link(temporary, self.path)
            except FileExistsError:
                pass  # another process created the store first: use theirs
        except DBAPIError as error:
            raise StoreError(f"cannot create run store {self.path}: {error.orig}") from None
        except OSError as error:
            raise StoreError(f"cannot create run store {self.path}: {error.strerror or error}") from None
        finally:
            for leftover in (temporary, Path(f"{temporary}-wal"), Path(f"{temporary}-shm")):
                leftover.unlink(missing_ok=True)

    def _check_is_store_file(self) -> None:
        """Refuse an existing empty file before SQLite would take it for a new database.

        Only ``stat``: opening and closing the file here would drop the POSIX locks that
        SQLite connections of this process hold on it (SQLite's "How to corrupt" §2.2), and a
        file that is not SQLite at all is recognised by SQLite's first read, which writes nothing.
        """
        try:
            size = self.path.stat().st_size
        except OSError as error:
            raise StoreError(f"cannot read run store {self.path}: {error.strerror or error}") from None
        if size == 0:
            raise self._not_a_store("an empty file")
        if size < SMALLEST_DATABASE:  # SQLite would read it as an empty database
            raise self._not_a_store(f"not an SQLite database: {size} byte{'s' * (size != 1)}")

    def _not_a_store(self, what: str) -> StoreError:
        if self.path is not None and what.startswith("a database"):
            what = "an SQLite database without a runs table"
        return StoreError(f"{self.location} is not a run store ({what}); it was left untouched: "
                          "move it aside or choose another --store (or $STABILITY_STORE)")

    def _error(self, error: DBAPIError | sqlite3.Error, opening: bool = False) -> StoreError:
        """One line for a database error (SQLAlchemy's, or the driver's own from a write's BEGIN):
        a busy store, a corrupted file, a server that cannot be reached, anything else."""
        original = getattr(error, "orig", None) or error
        text = " ".join(str(original).split("\n")[0].split()) or type(original).__name__
        if self.dialect == "sqlite":
            if isinstance(original, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
                return StoreBusy(f"run store {self.location} is locked by another writer (waited "
                                 f"{BUSY_TIMEOUT_MS / 1000:g} s); try again when it has finished")
            if opening and "not a database" in text:
                return self._not_a_store("not an SQLite database")
            if type(original) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text:
                return StoreError(f"{self.location} is not a readable run store ({text}); it was left untouched: "
                                  "move it aside or choose another --store (or $STABILITY_STORE)")
            return StoreError(f"run store {self.location}: {text}")
        if getattr(original, "sqlstate", None) == LOCK_NOT_AVAILABLE:  # lock_timeout ran out
            return StoreBusy(f"run store {self.location} is locked by another writer (waited "
                             f"{BUSY_TIMEOUT_MS / 1000:g} s); try again when it has finished")
        unreachable = type(original).__name__ in ("OperationalError", "ConnectionTimeout")
        if unreachable or getattr(error, "connection_invalidated", False):
            return StoreError(f"cannot use run store {self.location}: {text}; check that the server is running, "
                              "the database exists and the user and password are right")
        return StoreError(f"run store {self.location}: {text}")

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _sql(self, template: str, **parts: str):
        """The dialect's text() of a statement, built once (Note [write order])."""
        key = template if not parts else f"{template}\0{sorted(parts.items())}"
        statement = self._sql_cache.get(key)
        if statement is None:
            sql = template.replace("{order}", _DIALECTS[self.dialect]["order"])
            for name, part in parts.items():
                sql = sql.replace("{" + name + "}", part)
            statement = text(sql)
            expanding = [name for name in _LIST_PARAMETERS if f":{name}" in sql]
            if expanding:  # typed, so that an empty list compares with the column's type
                statement = statement.bindparams(*(bindparam(name, expanding=True, type_=_LIST_PARAMETERS[name])
                                                   for name in expanding))
            self._sql_cache[key] = statement
        return statement

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One write transaction, the write lock taken at BEGIN (Notes [concurrency], [interrupts])."""
        try:
            with self._writer.begin() as conn:
                yield conn
        except self._errors as error:
            raise self._error(error) from None

    def _query(self, sql: str, params: Mapping[str, Any] | None = None, **parts: str) -> list[tuple]:
        try:
            with self._reader.connect() as conn:
                return _tuples(conn.execute(self._sql(sql, **parts), params or {}))
        except self._errors as error:
            raise self._error(error) from None

    def _dicts(self, sql: str, params: Mapping[str, Any] | None = None, **parts: str) -> list[dict]:
        try:
            with self._reader.connect() as conn:
                result = conn.execute(self._sql(sql, **parts), params or {})
                columns = list(result.keys())
                return [dict(zip(columns, row)) for row in _tuples(result)]
        except self._errors as error:
            raise self._error(error) from None

    def _run_id(self, run_id) -> int:
        """``run_id`` as an int; anything that cannot be a stored id (a number outside the
        integer range, a negative number, not a number) is :class:`RunNotFound`."""
        try:
            value = operator.index(run_id)
        except TypeError:
            value = int(run_id) if isinstance(run_id, str) and run_id.strip().isdigit() else -1
        if not 0 <= value <= MAX_RUN_ID:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")
        return value

    def _require(self, conn: Connection, run_id) -> int:
        run_id = self._run_id(run_id)
        if conn.execute(self._sql("SELECT 1 FROM runs WHERE id = :id"), {"id": run_id}).first() is None:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")
        return run_id

    def _require_read(self, run_id) -> int:
        run_id = self._run_id(run_id)
        if not self._query("SELECT 1 FROM runs WHERE id = :id", {"id": run_id}):
            raise RunNotFound(f"no run with id {run_id} in {self.location}")
        return run_id

    # ------------------------------------------------------------------------ runs
    def create_run(self, config: dict, name: str | None = None, *, sweep_id: int | None = None,
                   trial: int | None = None, params: dict | None = None) -> int:
        """A new run in status 'queued'; ``name`` defaults to ``config['name']``; a sweep's trial
        also gets its sweep, trial number and varied values (Note [sweeps]). Returns its id."""
        if not isinstance(config, dict):
            raise TypeError(f"config must be a dict (RunConfig.to_dict()); got {type(config).__name__}")
        values = {"name": name if name is not None else str(config.get("name") or ""),
                  "config": json.dumps(config), "created_at": time.time(),
                  "sweep_id": None if sweep_id is None else int(sweep_id),
                  "trial": None if trial is None else int(trial),
                  "params": None if params is None else _json_object(params, "params")}
        with self._write() as conn:
            return int(conn.execute(self._sql(
                "INSERT INTO runs (name, config, status, created_at, sweep_id, trial, params) VALUES"
                " (:name, :config, 'queued', :created_at, :sweep_id, :trial, :params) RETURNING id"), values).scalar())

    def update_run(self, run_id: int, **fields: Any) -> None:
        """Set any of the columns in ``_UPDATABLE``; ``None`` clears a column."""
        unknown = sorted(set(fields) - set(_UPDATABLE))
        if unknown:
            raise ValueError(f"unknown run field(s) {', '.join(unknown)}; valid: {', '.join(_UPDATABLE)}")
        if "status" in fields:
            _check_status(fields["status"])
        if not fields:
            return
        values = {key: None if value is None else _UPDATABLE[key](value) for key, value in fields.items()}
        assignments = ", ".join(f"{key} = :{key}" for key in sorted(fields))
        with self._write() as conn:
            values["id"] = self._require(conn, run_id)
            conn.execute(self._sql(f"UPDATE runs SET {assignments} WHERE id = :id"), values)

    def set_status(self, run_id: int, status: str, error: str | None = None) -> None:
        """Set the status (and error, if given); terminal statuses set ``finished_at``,
        'running' sets ``started_at`` unless already set."""
        _check_status(status)
        now = time.time()
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            conn.execute(self._sql(
                "UPDATE runs SET status = :status, error = COALESCE(:error, error),"
                " finished_at = COALESCE(:finished, finished_at), started_at = COALESCE(started_at, :started)"
                " WHERE id = :id"),
                {"status": status, "error": error, "finished": now if status in TERMINAL else None,
                 "started": now if status == "running" else None, "id": run_id})

    def _heartbeat(self, conn: Connection, run_id: int, step: int | None) -> None:
        run_id = self._run_id(run_id)
        updated = self._driver_execute(conn, "UPDATE runs SET heartbeat = ?, step = COALESCE(?, step) WHERE id = ?",
                                       [(time.time(), None if step is None else int(step), run_id)])
        if updated == 0:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")

    def request_stop(self, run_id: int) -> None:
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            conn.execute(self._sql("UPDATE runs SET stop_requested = 1 WHERE id = :id"), {"id": run_id})

    def stop_requested(self, run_id: int) -> bool:
        rows = self._query("SELECT stop_requested FROM runs WHERE id = :id", {"id": self._run_id(run_id)})
        if not rows:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")
        return bool(rows[0][0])

    def _run_rows(self, where: str = "", params: Mapping[str, Any] | None = None) -> list[dict]:
        """Every column of the runs ``where`` selects, as dicts (``config`` as the stored JSON text)."""
        return self._dicts(f"SELECT * FROM runs {where} ORDER BY id DESC", params)

    def run(self, run_id: int) -> dict[str, Any]:
        """Every column of the run, ``config`` and ``params`` parsed back to dicts (:meth:`record`
        types it all)."""
        rows = self._run_rows("WHERE id = :id", {"id": self._run_id(run_id)})
        if not rows:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")
        run = rows[0]
        run["config"] = json.loads(run["config"])
        run["params"] = parse_params(run["params"])
        run["stop_requested"] = bool(run["stop_requested"])
        return run

    def record(self, run_id: int) -> RunRecord:
        """The run as a :class:`~stability.runs.records.RunRecord`, with its latest metric values."""

        rows = self._run_rows("WHERE id = :id", {"id": self._run_id(run_id)})
        if not rows:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")
        return record_from_row(rows[0], self.latest_many([rows[0]["id"]]).get(rows[0]["id"], {}))

    def records(self, statuses: Iterable[str] | None = None, sweep_id: int | None = None) -> list[RunRecord]:
        """Every run (or those in one of ``statuses``, or of one sweep) as a
        :class:`~stability.runs.records.RunRecord`, newest first, in two queries: the runs, then all
        their latest values (Note [latest])."""

        where, params = [], {}
        if statuses is not None:
            statuses = [statuses] if isinstance(statuses, str) else list(statuses)
            for status in statuses:
                _check_status(status)
            where.append("status IN :statuses")
            params["statuses"] = statuses
        if sweep_id is not None:
            where.append("sweep_id = :sweep_id")
            params["sweep_id"] = int(sweep_id)
        if not where:
            rows = self._run_rows()
            latest = self.latest_many()
        else:
            rows = self._run_rows(f"WHERE {' AND '.join(where)}", params)
            latest = self.latest_many(row["id"] for row in rows)
        return [record_from_row(row, latest.get(row["id"], {})) for row in rows]

    def active_runs(self) -> list[RunRecord]:
        """The runs a worker will still write to (``ACTIVE_STATUSES``: queued or running), oldest
        first, the order the runner starts queued runs in."""
        return self.records(ACTIVE_STATUSES)[::-1]

    def runs(self) -> pd.DataFrame:
        """One row per run, newest first; ``cell`` and ``task`` are the config's cell and task names,
        ``sweep_id`` and ``trial`` empty (``<NA>``) for a run of no sweep."""
        rows = self._query(f"SELECT {', '.join(RUNS_COLUMNS)}, config FROM runs ORDER BY id DESC")
        frame = pd.DataFrame([row[:-1] for row in rows], columns=RUNS_COLUMNS)
        configs = [json.loads(row[-1]) for row in rows]
        frame["cell"] = pd.Series([section_name(config, "cell") for config in configs], dtype=object)
        frame["task"] = pd.Series([section_name(config, "task") for config in configs], dtype=object)
        float_columns = ["created_at", "started_at", "finished_at", "heartbeat"]
        return frame.astype({"id": "int64", **{c: "Int64" for c in _NULLABLE_INTS},
                             **{c: "float64" for c in float_columns}})

    def delete_run(self, run_id: int) -> None:
        """Remove the run, its metric and series rows, and its checkpoint file if there is one."""
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            for table in ("metrics", "series", "latest_metrics"):
                conn.execute(self._sql(f"DELETE FROM {table} WHERE run_id = :id"), {"id": run_id})
            conn.execute(self._sql("DELETE FROM runs WHERE id = :id"), {"id": run_id})
        self.checkpoint_path(run_id).unlink(missing_ok=True)

    def discard_after(self, run_id: int, step: int) -> None:
        """Delete the run's scalar and series rows with a step after ``step``, and lower its
        reported ``step`` to ``step``, in one transaction: a run resuming from a checkpoint
        taken at ``step`` then appends to exactly the rows it had at that step. Its latest
        values become those at or before ``step`` (Note [latest])."""
        step = int(step)
        with self._write() as conn:
            values = {"id": self._require(conn, run_id), "step": step}
            conn.execute(self._sql("DELETE FROM metrics WHERE run_id = :id AND step > :step"), values)
            conn.execute(self._sql("DELETE FROM series WHERE run_id = :id AND step > :step"), values)
            conn.execute(self._sql("UPDATE runs SET step = :step WHERE id = :id AND step > :step"), values)
            if conn.execute(self._sql("DELETE FROM latest_metrics WHERE run_id = :id AND step > :step"),
                            values).rowcount:
                conn.execute(self._sql("DELETE FROM latest_metrics WHERE run_id = :id"), values)
                conn.execute(self._sql(_LATEST_FROM_METRICS, where="run_id = :id"), values)

    def checkpoint_path(self, run_id: int) -> Path:
        """``<store home>/checkpoints/run-<id>.pt`` (the folder is created; Note [locations])."""
        folder = self.home / "checkpoints"
        folder.mkdir(exist_ok=True)
        return folder / f"run-{int(run_id)}.pt"

    # ---------------------------------------------------------------------- sweeps
    def create_sweep(self, spec: dict, name: str = "", study: str | None = None) -> int:
        """A new sweep in status 'running'; its Optuna study's name defaults to
        ``stability-sweep-<id>`` (Note [sweeps]). Returns its id."""
        values = {"name": str(name or ""), "spec": _json_object(spec, "spec"), "study": study or "",
                  "created_at": time.time()}
        with self._write() as conn:
            sweep_id = int(conn.execute(self._sql(
                "INSERT INTO sweeps (name, spec, study, status, created_at)"
                " VALUES (:name, :spec, :study, 'running', :created_at) RETURNING id"), values).scalar())
            if study is None:
                conn.execute(self._sql("UPDATE sweeps SET study = :study WHERE id = :id"),
                             {"study": f"stability-sweep-{sweep_id}", "id": sweep_id})
            return sweep_id

    def sweep(self, sweep_id: int) -> dict[str, Any]:
        """Every column of the sweep, ``spec`` parsed back to a dict."""
        rows = self._sweep_rows("WHERE id = :id", {"id": self._sweep_id(sweep_id)})
        if not rows:
            raise SweepNotFound(f"no sweep with id {sweep_id} in {self.location}")
        return rows[0]

    def sweeps(self) -> list[dict[str, Any]]:
        """Every sweep, newest first, as :meth:`sweep` gives it plus ``counts``: run status -> how
        many of the sweep's runs are in it (two queries however many sweeps)."""
        sweeps = self._sweep_rows()
        counts: dict[int, dict[str, int]] = {sweep["id"]: {} for sweep in sweeps}
        for sweep_id, status, count in self._query("SELECT sweep_id, status, COUNT(*) FROM runs WHERE sweep_id"
                                                   " IS NOT NULL GROUP BY sweep_id, status ORDER BY sweep_id, status"):
            if sweep_id in counts:
                counts[sweep_id][status] = int(count)
        return [{**sweep, "counts": counts[sweep["id"]]} for sweep in sweeps]

    def update_sweep(self, sweep_id: int, **fields: Any) -> None:
        """Set any of ``name``, ``status``, ``finished_at``, ``workers``, ``stop_requested``;
        ``None`` clears a column."""
        unknown = sorted(set(fields) - set(_SWEEP_UPDATABLE))
        if unknown:
            raise ValueError(f"unknown sweep field(s) {', '.join(unknown)}; valid: {', '.join(_SWEEP_UPDATABLE)}")
        if "status" in fields and fields["status"] not in SWEEP_STATUSES:
            raise ValueError(f"unknown sweep status {fields['status']!r}; valid: {', '.join(SWEEP_STATUSES)}")
        if not fields:
            return
        values = {key: None if value is None else _SWEEP_UPDATABLE[key](value) for key, value in fields.items()}
        assignments = ", ".join(f"{key} = :{key}" for key in sorted(fields))
        values["id"] = self._sweep_id(sweep_id)
        with self._write() as conn:
            if conn.execute(self._sql(f"UPDATE sweeps SET {assignments} WHERE id = :id"), values).rowcount == 0:
                raise SweepNotFound(f"no sweep with id {sweep_id} in {self.location}")

    def _sweep_rows(self, where: str = "", params: Mapping[str, Any] | None = None) -> list[dict]:
        sweeps = self._dicts(f"SELECT * FROM sweeps {where} ORDER BY id DESC", params)
        for sweep in sweeps:
            sweep["spec"] = json.loads(sweep["spec"])
            sweep["stop_requested"] = bool(sweep["stop_requested"])
        return sweeps

    def _sweep_id(self, sweep_id) -> int:
        try:
            return self._run_id(sweep_id)
        except RunNotFound:
            raise SweepNotFound(f"no sweep with id {sweep_id} in {self.location}") from None

    # --------------------------------------------------------------------- writes
    def log(self, run_id: int, rows: Iterable[tuple[int, float, str, float]]) -> None:
        """Scalar rows ``(step, wall_time, name, value)``, in one transaction."""
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            self._insert_scalars(conn, run_id, rows)

    def flush(self, run_id: int, scalars: Iterable[tuple], series: Iterable[tuple] = (),
              heartbeat_step: int | None = None) -> None:
        """Scalar rows ``(step, wall_time, name, value)``, series rows ``(step, wall_time, name,
        index, value)``, ``heartbeat = time.time()`` and the run's ``step`` (if ``heartbeat_step``
        is given) in one transaction."""
        run_id = self._run_id(run_id)
        with self._write() as conn:
            self._heartbeat(conn, run_id, heartbeat_step)
            self._insert_scalars(conn, run_id, scalars)
            self._insert_series(conn, run_id, series)

    def _insert_scalars(self, conn: Connection, run_id: int, rows: Iterable[tuple]) -> None:
        """Insert the rows and move the run's latest values forward (Note [latest])."""
        rows = [(run_id, int(step), float(wall), str(name), float(value)) for step, wall, name, value in rows]
        if not rows:
            return
        self._driver_execute(conn, _INSERT_METRIC, rows)
        newest: dict[str, tuple] = {}
        for row in rows:  # the last row written at the highest step of each name
            if row[3] not in newest or row[1] >= newest[row[3]][1]:
                newest[row[3]] = row
        self._driver_execute(conn, _UPSERT_LATEST, [(run_id, name, step, value) for run_id, step, _, name, value
                                                    in newest.values()])

    def _insert_series(self, conn: Connection, run_id: int, rows: Iterable[tuple]) -> None:
        rows = [(run_id, int(step), float(wall), str(name), int(index), float(value))
                for step, wall, name, index, value in rows]
        if rows:
            self._driver_execute(conn, _INSERT_SERIES, rows)

    def _driver_execute(self, conn: Connection, statement: str, rows: list[tuple]) -> int:
        """Rows of tuples through the DBAPI cursor's executemany, in the transaction of ``conn``;
        returns the rows changed (Note [bulk rows])."""
        cursor = conn.connection.cursor()
        try:
            cursor.executemany(statement if self.dialect == "sqlite" else statement.replace("?", "%s"), rows)
            return cursor.rowcount
        finally:
            cursor.close()

    # ---------------------------------------------------------------------- reads
    def metrics(self, run_id: int, names: list[str] | None = None,
                since_step: int | None = None) -> pd.DataFrame:
        """Scalar rows of one run with ``step > since_step``, ordered by step (Note [since_step])."""
        run_id = self._run_id(run_id)
        where, params = ["run_id = :id"], {"id": run_id}
        _filter_names(where, params, names)
        if since_step is not None:
            where.append("step > :since")
            params["since"] = int(since_step)
        try:
            with self._reader.connect() as conn:
                if conn.execute(self._sql("SELECT 1 FROM runs WHERE id = :id"), {"id": run_id}).first() is None:
                    raise RunNotFound(f"no run with id {run_id} in {self.location}")
                rows = conn.execute(self._sql(f"SELECT {', '.join(METRIC_COLUMNS)} FROM metrics"
                                              f" WHERE {' AND '.join(where)} ORDER BY step, {{order}}"), params)
                rows = _tuples(rows)
        except self._errors as error:
            raise self._error(error) from None
        return _metric_frame(rows)

    def metrics_many(self, run_ids: Iterable[int], names: list[str] | None = None) -> pd.DataFrame:
        """Scalar rows of several runs (ids that do not exist contribute no rows), ordered by run and step."""
        run_ids = [int(run_id) for run_id in run_ids if 0 <= int(run_id) <= MAX_RUN_ID]
        where, params = ["run_id IN :ids"], {"ids": run_ids}
        _filter_names(where, params, names)
        rows = self._query(f"SELECT {', '.join(METRIC_COLUMNS)} FROM metrics WHERE {' AND '.join(where)}"
                           " ORDER BY run_id, step, {order}", params) if run_ids else []
        return _metric_frame(rows)

    def series(self, run_id: int, name: str, since_step: int | None = None) -> pd.DataFrame:
        """Rows of one vector diagnostic with ``step > since_step``: run_id,step,wall_time,name,index,value."""
        run_id = self._run_id(run_id)
        where, params = ["run_id = :id", "name = :name"], {"id": run_id, "name": name}
        if since_step is not None:
            where.append("step > :since")
            params["since"] = int(since_step)
        self._require_read(run_id)
        rows = self._query("SELECT run_id, step, wall_time, name, idx, value FROM series"
                           f" WHERE {' AND '.join(where)} ORDER BY step, idx", params)
        frame = pd.DataFrame(rows, columns=SERIES_COLUMNS)
        return frame.astype({"run_id": "int64", "step": "int64", "wall_time": "float64",
                             "index": "int64", "value": "float64"})

    def latest(self, run_id: int) -> dict[str, float]:
        """The value at the highest step of every scalar name (a run's 'final' metrics; Note [latest])."""
        run_id = self._require_read(run_id)
        rows = self._query("SELECT run_id, name, value FROM latest_metrics WHERE run_id = :id ORDER BY name",
                           {"id": run_id})
        return _latest_by_run(rows, [run_id])[run_id]

    def latest_many(self, run_ids: Iterable[int] | None = None) -> dict[int, dict[str, float]]:
        """:meth:`latest` of every run (or of those of ``run_ids`` that exist), in one query:
        run id -> {name: value}, ``{}`` for a run without scalar rows."""
        where, params = "", {}
        if run_ids is not None:
            params = {"ids": [int(run_id) for run_id in run_ids if 0 <= int(run_id) <= MAX_RUN_ID]}
            where = "WHERE runs.id IN :ids"
        rows = self._query("SELECT runs.id, latest_metrics.name, latest_metrics.value FROM runs"
                           " LEFT JOIN latest_metrics ON latest_metrics.run_id = runs.id"
                           f" {where} ORDER BY runs.id, latest_metrics.name", params)
        return _latest_by_run([row for row in rows if row[1] is not None], dict.fromkeys(row[0] for row in rows))

    def export_csv(self, run_id: int, path_or_buffer) -> None:
        """Write the run's scalar rows as CSV with columns exactly run_id,step,wall_time,name,value."""
        self.metrics(run_id).to_csv(path_or_buffer, index=False)


def _tuples(result) -> list[tuple]:
    """The rows of a text() query as plain tuples, from the DBAPI cursor's own ``fetchall``: pandas
    builds a frame from tuples about 3x faster than from SQLAlchemy's Row objects, and text()
    columns have no result processing to skip (benchmarks/store.py)."""
    return result.cursor.fetchall() if result.returns_rows else []


def _sqlite_engine(path: Path, **pool: Any) -> Engine:
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


def _begin(conn: Connection) -> None:
    """A write's BEGIN (Notes [concurrency], [interrupts]): on SQLite ``BEGIN IMMEDIATE``, after
    rolling back what an interrupted write left open (PostgreSQL's driver begins on its own)."""
    if not conn.get_execution_options().get("stability_write"):
        return
    driver = conn.connection.driver_connection
    if driver.in_transaction:  # left open by a write that was interrupted
        driver.execute("ROLLBACK")
    driver.execute("BEGIN IMMEDIATE")


def _schema_version(conn: Connection) -> tuple[int | None, set[str]]:
    """The schema version of an existing store (None where there is none: a database that is no run
    store, or a new one) and the tables found. Every store has had a ``meta`` table since its first
    transaction. Only reads: a store locked by a writer can still be opened (Note [concurrency])."""
    tables = set(inspect(conn).get_table_names())
    if not {"runs", "meta"} <= tables:
        return None, tables
    value = conn.execute(text("SELECT value FROM meta WHERE key = 'schema_version'")).scalar()
    return (None if value is None else int(value)), tables


def _migrate(conn: Connection) -> int | None:
    """Create the tables of a new store, or bring an older store to ``SCHEMA_VERSION``, in the write
    transaction of ``conn``; return the version found, None for a new store (a newer one is left
    untouched; Note [schema versions])."""
    dialect = conn.dialect.name
    if dialect == "postgresql":  # processes opening a new database at once take turns (Note [creating and refusing])
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK})
    tables = set(inspect(conn).get_table_names())
    if "runs" not in tables:
        templates, version = [*_SCHEMA.split(";"), _META_TABLE], None
    else:
        version, _ = _schema_version(conn)
        if version is None:  # someone else's runs table appeared meanwhile: leave it be
            return None
        templates = [sql for step in range(version, SCHEMA_VERSION) for sql in _MIGRATIONS.get(step, ())]
    for template in templates:
        if template.strip():
            conn.exec_driver_sql(template.format_map({**_DIALECTS[dialect], "where": "{where}"}))
    if version is None or version <= SCHEMA_VERSION:
        conn.execute(text("INSERT INTO meta (key, value) VALUES ('schema_version', :version) ON CONFLICT (key)"
                          " DO UPDATE SET value = excluded.value"), {"version": str(SCHEMA_VERSION)})
    return version


def _latest_by_run(rows: Iterable[tuple], run_ids: Iterable[int]) -> dict[int, dict[str, float]]:
    """``(run_id, name, value)`` rows as run id -> {name: value}, every id of ``run_ids`` present;
    a NULL value (a stored NaN, Note [NaN]) is NaN."""
    latest: dict[int, dict[str, float]] = {run_id: {} for run_id in run_ids}
    for run_id, name, value in rows:
        latest[run_id][name] = math.nan if value is None else float(value)
    return latest


def _json_object(value: Any, what: str) -> str:
    """A mapping as JSON object text (``params``, a sweep's ``spec``); anything else is a ValueError."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a dict; got {type(value).__name__}")
    return json.dumps(dict(value))


def _check_status(status: str) -> None:
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}; valid: {', '.join(STATUSES)}")


def _filter_names(where: list[str], params: dict, names: list[str] | None) -> None:
    if names is None:
        return
    where.append("name IN :names")
    params["names"] = [names] if isinstance(names, str) else list(names)


def _metric_frame(rows: list) -> pd.DataFrame:
    """Scalar rows as a DataFrame; NULL values (stored NaNs, Note [NaN]) come back as NaN."""
    frame = pd.DataFrame(rows, columns=METRIC_COLUMNS)
    return frame.astype({"run_id": "int64", "step": "int64", "wall_time": "float64", "value": "float64"})
