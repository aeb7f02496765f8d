"""The run store: runs, scalar metric rows and vector series in one SQLite file.

    store = RunStore()                      # $STABILITY_STORE, else ~/.stability/runs.db
    run_id = store.create_run(config.to_dict())
    store.flush(run_id, [(step, time.time(), "train/loss", 0.12)],
                [(step, time.time(), "grad/h_t_norm", t, g) for t, g in enumerate(norms)],
                heartbeat_step=step)
    store.metrics(run_id, since_step=last_seen)   # DataFrame run_id,step,wall_time,name,value
    store.records()                         # every run as a RunRecord (typed config, latest values)
    store.latest_many()                     # {run_id: {name: value}}, every run in one query

Note [concurrency]
    WAL journal mode: readers never block the writer and never see half a
    transaction. ``busy_timeout`` (10 s) makes a second writer wait instead of
    failing with "database is locked". Every write is one ``BEGIN IMMEDIATE``
    transaction, so the write lock is taken up front (no deferred read-to-write
    upgrade that could fail with SQLITE_BUSY). Reads run outside any
    transaction, so no reader holds an old snapshot that stops the WAL from
    being checkpointed. One connection per ``RunStore``, guarded by a lock so a
    store may be shared between the threads of one process; each process opens
    its own ``RunStore``. Opening an existing store only reads (its schema
    version), so ``runs`` and ``show`` work while another process holds the
    write lock for longer than the busy timeout; only the first opening of a
    store of an older schema writes (Note [schema versions]).

Note [creating and refusing]
    A new store is built under a temporary name beside its path and linked into
    place (``os.link`` fails rather than overwrite), so a file found at the path
    is always a finished store: an existing file that is empty, not SQLite, or
    an SQLite database without the run tables is refused with a
    :class:`StoreError`, never turned into a store. A store that SQLite finds
    corrupted is a :class:`StoreError` naming the file and what to do; it is
    never written to.

Note [interrupts]
    A ``KeyboardInterrupt`` can land anywhere, also between ``BEGIN IMMEDIATE``
    and the ``try`` that would roll it back. Every write therefore starts by
    rolling back a transaction an interrupted write left open on this
    connection, so the status written after a Ctrl-C always lands.

Note [durability]
    With WAL, ``synchronous=NORMAL`` loses no committed transaction when the
    writing *process* dies (SIGKILL included); only a power cut can drop the
    last few. ``flush`` writes a log interval's scalars, series and heartbeat in
    one transaction, so a killed worker leaves whole log intervals or nothing.

Note [NaN]
    SQLite stores a float NaN as NULL (infinities are kept as REAL), so a NULL
    ``value`` is read back as NaN: a diverging run's last rows survive the round
    trip.

Note [schema versions]
    The ``meta`` table holds the schema version. A new store gets ``_SCHEMA``
    (the current tables) and ``SCHEMA_VERSION``; an older store is brought up
    to date when it is opened by the steps in ``_MIGRATIONS``, all in one write
    transaction that first re-reads the version (another process may have
    migrated it meanwhile). A store of a newer version is refused, never
    changed. Versions: 1 the first; 2 adds ``runs.resumes``; 3 adds
    ``latest_metrics``, filled from the stored rows (Note [latest]); 4 adds the
    ``sweeps`` table and the runs' ``sweep_id``, ``trial``, ``params`` and
    ``host`` (Note [sweeps]).

Note [sweeps]
    A sweep is an Optuna study whose trials are ordinary runs
    (``stability/sweeps.py``). The store keeps what the dashboard and the CLI
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
    recomputation breaks ties at one step by SQLite's ``rowid``, the order the
    rows were written in.

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
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from .records import RunRecord

SCHEMA_VERSION = 4
STATUSES = ("queued", "running", "completed", "stopped", "diverged", "failed", "interrupted", "pruned")
ACTIVE_STATUSES = ("queued", "running")  # a worker will still write to the run
TERMINAL = tuple(status for status in STATUSES if status not in ACTIVE_STATUSES)
SWEEP_STATUSES = ("running", "stopped", "completed")
DEFAULT_PATH = Path("~/.stability/runs.db")
ENV_VAR = "STABILITY_STORE"
BUSY_TIMEOUT_MS = 10_000
SMALLEST_DATABASE = 512  # bytes: an SQLite file holds at least one page
MAX_RUN_ID = 2**63 - 1  # SQLite's INTEGER range; any other id names no run

# Fields update_run may set, with the Python type each value is coerced to
# (numpy/torch scalars would otherwise fail to bind).
_UPDATABLE = {
    "name": str, "status": str, "started_at": float, "finished_at": float, "device": str,
    "pid": int, "heartbeat": float, "error": str, "total_params": int, "recurrent_params": int,
    "baseline": float, "baseline_label": str, "metric": str, "total_steps": int, "step": int,
    "resumes": int, "stop_requested": bool, "host": str, "sweep_id": int, "trial": int,
    "params": lambda value: _json_object(value, "params"),
}
# Fields update_sweep may set, coerced the same way.
_SWEEP_UPDATABLE = {"name": str, "status": str, "finished_at": float, "workers": int, "stop_requested": bool}
METRIC_COLUMNS = ["run_id", "step", "wall_time", "name", "value"]
SERIES_COLUMNS = ["run_id", "step", "wall_time", "name", "index", "value"]
RUNS_COLUMNS = ["id", "name", "status", "created_at", "started_at", "finished_at", "device", "pid",
                "heartbeat", "error", "total_params", "recurrent_params", "step", "total_steps", "sweep_id",
                "trial"]
_NULLABLE_INTS = ["pid", "total_params", "recurrent_params", "step", "total_steps", "sweep_id", "trial"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT,
    config TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    device TEXT,
    pid INTEGER,
    heartbeat REAL,
    error TEXT,
    total_params INTEGER,
    recurrent_params INTEGER,
    baseline REAL,
    baseline_label TEXT,
    metric TEXT,
    step INTEGER,
    total_steps INTEGER,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    resumes INTEGER NOT NULL DEFAULT 0,
    sweep_id INTEGER,
    trial INTEGER,
    params TEXT,
    host TEXT
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL,
    name TEXT NOT NULL, value REAL
);
CREATE INDEX IF NOT EXISTS metrics_run_name_step ON metrics (run_id, name, step);
CREATE INDEX IF NOT EXISTS metrics_run_step ON metrics (run_id, step);
CREATE TABLE IF NOT EXISTS series (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL,
    name TEXT NOT NULL, idx INTEGER NOT NULL, value REAL
);
CREATE INDEX IF NOT EXISTS series_run_name_step ON series (run_id, name, step);
"""
_LATEST_TABLE = """
CREATE TABLE IF NOT EXISTS latest_metrics (
    run_id INTEGER NOT NULL, name TEXT NOT NULL, step INTEGER NOT NULL, value REAL,
    PRIMARY KEY (run_id, name)
);
"""
_SWEEPS_TABLE = """
CREATE TABLE IF NOT EXISTS sweeps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT,
    spec TEXT NOT NULL,
    study TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    finished_at REAL,
    workers INTEGER,
    stop_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_sweep ON runs (sweep_id);
"""
_SCHEMA += _LATEST_TABLE + _SWEEPS_TABLE

# The latest_metrics rows recomputed from the metrics rows that satisfy {where} (Note [latest]).
_LATEST_FROM_METRICS = """
INSERT INTO latest_metrics (run_id, name, step, value)
SELECT run_id, name, step, value FROM (
    SELECT run_id, name, step, value,
           ROW_NUMBER() OVER (PARTITION BY run_id, name ORDER BY step DESC, rowid DESC) AS position
    FROM metrics WHERE {where}
) AS ranked WHERE position = 1
"""
# Keeps latest_metrics current as scalar rows are written (the same statement runs on PostgreSQL).
_UPSERT_LATEST = ("INSERT INTO latest_metrics (run_id, name, step, value) VALUES (?, ?, ?, ?)"
                  " ON CONFLICT (run_id, name) DO UPDATE SET step = excluded.step, value = excluded.value"
                  " WHERE excluded.step >= latest_metrics.step")

# Statements that bring a store of schema version v to version v + 1 (Note [schema versions]).
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE runs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0",),
    2: (_LATEST_TABLE, _LATEST_FROM_METRICS.format(where="1 = 1")),
    3: (*(f"ALTER TABLE runs ADD COLUMN {column}" for column in
          ("sweep_id INTEGER", "trial INTEGER", "params TEXT", "host TEXT")),
        *filter(str.strip, _SWEEPS_TABLE.split(";"))),
}


class StoreError(RuntimeError):
    """The store file cannot be used (a directory, unwritable, not a run store, corrupted, a newer schema)."""


class StoreBusy(StoreError):
    """Another process held the store's write lock for longer than the busy timeout."""


class RunNotFound(ValueError):
    """No run with the given id."""


class SweepNotFound(ValueError):
    """No sweep with the given id."""


def default_path() -> Path:
    """``$STABILITY_STORE`` if set, else ``~/.stability/runs.db``."""
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH).expanduser()


class RunStore:
    """Runs, metric rows and series rows in one SQLite file (see the notes in the module docstring)."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path if path is not None else default_path()).expanduser().absolute()
        self._lock = threading.RLock()
        self._conn = self._open()

    # ------------------------------------------------------------------ connection
    def _open(self) -> sqlite3.Connection:
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
        conn = None
        try:
            conn = self._connect(self.path)
            version = _schema_version(conn)
            if version is None:
                raise self._not_a_store("an SQLite database without a runs table")
            if version < SCHEMA_VERSION:
                _migrate(conn)
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
        except BaseException as error:
            if conn is not None:
                conn.close()
            if isinstance(error, sqlite3.DatabaseError) and "not a database" in str(error):
                raise self._not_a_store("not an SQLite database") from None
            if isinstance(error, sqlite3.Error):
                raise self._error(error) from None
            raise
        if version > SCHEMA_VERSION:
            conn.close()
            raise StoreError(f"run store {self.path} has schema version {version}, newer than the "
                             f"{SCHEMA_VERSION} this version of stability reads; "
                             "upgrade stability or use another store")
        return conn

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _create(self) -> None:
        """Build a new store under a temporary name and link it into place (Note [creating and refusing])."""
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.new")
        try:
            temporary.unlink(missing_ok=True)
            conn = self._connect(temporary)
            try:
                _migrate(conn)  # in a rollback journal: WAL is switched on under the final name
            finally:
                conn.close()
            try:
                os.link(temporary, self.path)
            except FileExistsError:
                pass  # another process created the store first: use theirs
        except sqlite3.Error as error:
            raise StoreError(f"cannot create run store {self.path}: {error}") from None
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
        return StoreError(f"{self.path} is not a run store ({what}); it was left untouched: "
                          "move it aside or choose another --store (or $STABILITY_STORE)")

    def _error(self, error: sqlite3.Error) -> StoreError:
        """One line for an SQLite error: a busy store, a corrupted file, anything else."""
        text = str(error)
        if isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            return StoreBusy(f"run store {self.path} is locked by another writer (waited "
                             f"{BUSY_TIMEOUT_MS / 1000:g} s); try again when it has finished")
        if type(error) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text:
            return StoreError(f"{self.path} is not a readable run store ({text}); it was left untouched: "
                              "move it aside or choose another --store (or $STABILITY_STORE)")
        return StoreError(f"run store {self.path}: {text}")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r})"

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, the write lock taken at BEGIN (Notes [concurrency], [interrupts])."""
        with self._lock:
            try:
                if self._conn.in_transaction:  # left open by a write that was interrupted
                    self._conn.execute("ROLLBACK")
                self._conn.execute("BEGIN IMMEDIATE")
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as error:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if isinstance(error, sqlite3.Error):
                    raise self._error(error) from None
                raise

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as error:
                raise self._error(error) from None

    def _run_id(self, run_id) -> int:
        """``run_id`` as an int; anything that cannot be a stored id (a number outside SQLite's
        integer range, a negative number, not a number) is :class:`RunNotFound`."""
        try:
            value = operator.index(run_id)
        except TypeError:
            value = int(run_id) if isinstance(run_id, str) and run_id.strip().isdigit() else -1
        if not 0 <= value <= MAX_RUN_ID:
            raise RunNotFound(f"no run with id {run_id} in {self.path}")
        return value

    def _require(self, conn: sqlite3.Connection, run_id) -> int:
        run_id = self._run_id(run_id)
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            raise RunNotFound(f"no run with id {run_id} in {self.path}")
        return run_id

    def _require_read(self, run_id) -> int:
        run_id = self._run_id(run_id)
        if not self._query("SELECT 1 FROM runs WHERE id = ?", (run_id,)):
            raise RunNotFound(f"no run with id {run_id} in {self.path}")
        return run_id

    # ------------------------------------------------------------------------ runs
    def create_run(self, config: dict, name: str | None = None, *, sweep_id: int | None = None,
                   trial: int | None = None, params: dict | None = None) -> int:
        """A new run in status 'queued'; ``name`` defaults to ``config['name']``; a sweep's trial
        also gets its sweep, trial number and varied values (Note [sweeps]). Returns its id."""
        if not isinstance(config, dict):
            raise TypeError(f"config must be a dict (RunConfig.to_dict()); got {type(config).__name__}")
        name = name if name is not None else str(config.get("name") or "")
        text = json.dumps(config)
        values = (None if sweep_id is None else int(sweep_id), None if trial is None else int(trial),
                  None if params is None else _json_object(params, "params"))
        with self._write() as conn:
            cursor = conn.execute("INSERT INTO runs (name, config, status, created_at, sweep_id, trial, params)"
                                  " VALUES (?, ?, 'queued', ?, ?, ?, ?)", (name, text, time.time(), *values))
            return int(cursor.lastrowid)

    def update_run(self, run_id: int, **fields: Any) -> None:
        """Set any of the columns in ``_UPDATABLE``; ``None`` clears a column."""
        unknown = sorted(set(fields) - set(_UPDATABLE))
        if unknown:
            raise ValueError(f"unknown run field(s) {', '.join(unknown)}; valid: {', '.join(_UPDATABLE)}")
        if "status" in fields:
            _check_status(fields["status"])
        if not fields:
            return
        values = [None if value is None else _UPDATABLE[key](value) for key, value in fields.items()]
        assignments = ", ".join(f"{key} = ?" for key in fields)
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            conn.execute(f"UPDATE runs SET {assignments} WHERE id = ?", (*values, run_id))

    def set_status(self, run_id: int, status: str, error: str | None = None) -> None:
        """Set the status (and error, if given); terminal statuses set ``finished_at``,
        'running' sets ``started_at`` unless already set."""
        _check_status(status)
        now = time.time()
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            conn.execute(
                "UPDATE runs SET status = ?, error = COALESCE(?, error),"
                " finished_at = CASE WHEN ? THEN ? ELSE finished_at END,"
                " started_at = CASE WHEN ? = 'running' THEN COALESCE(started_at, ?) ELSE started_at END"
                " WHERE id = ?",
                (status, error, status in TERMINAL, now, status, now, run_id))

    def _heartbeat(self, conn: sqlite3.Connection, run_id: int, step: int | None) -> None:
        run_id = self._run_id(run_id)
        cursor = conn.execute("UPDATE runs SET heartbeat = ?, step = COALESCE(?, step) WHERE id = ?",
                              (time.time(), None if step is None else int(step), run_id))
        if cursor.rowcount == 0:
            raise RunNotFound(f"no run with id {run_id} in {self.path}")

    def request_stop(self, run_id: int) -> None:
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            conn.execute("UPDATE runs SET stop_requested = 1 WHERE id = ?", (run_id,))

    def stop_requested(self, run_id: int) -> bool:
        rows = self._query("SELECT stop_requested FROM runs WHERE id = ?", (self._run_id(run_id),))
        if not rows:
            raise RunNotFound(f"no run with id {run_id} in {self.path}")
        return bool(rows[0][0])

    def _run_rows(self, where: str = "", params: Iterable[Any] = (), order: str = "id DESC") -> list[dict]:
        """Every column of the runs ``where`` selects, as dicts (``config`` as the stored JSON text)."""
        with self._lock:
            try:
                cursor = self._conn.execute(f"SELECT * FROM runs {where} ORDER BY {order}", tuple(params))
                rows = cursor.fetchall()
            except sqlite3.Error as error:
                raise self._error(error) from None
        columns = [description[0] for description in cursor.description]
        return [dict(zip(columns, row)) for row in rows]

    def run(self, run_id: int) -> dict[str, Any]:
        """Every column of the run, ``config`` parsed back to a dict (:meth:`record` types it all)."""
        rows = self._run_rows("WHERE id = ?", (self._run_id(run_id),))
        if not rows:
            raise RunNotFound(f"no run with id {run_id} in {self.path}")
        run = rows[0]
        run["config"] = json.loads(run["config"])
        run["params"] = parse_params(run["params"])
        run["stop_requested"] = bool(run["stop_requested"])
        return run

    def record(self, run_id: int) -> RunRecord:
        """The run as a :class:`~stability.records.RunRecord`, with its latest metric values."""
        from .records import record_from_row

        rows = self._run_rows("WHERE id = ?", (self._run_id(run_id),))
        if not rows:
            raise RunNotFound(f"no run with id {run_id} in {self.path}")
        return record_from_row(rows[0], self.latest_many([rows[0]["id"]]).get(rows[0]["id"], {}))

    def records(self, statuses: Iterable[str] | None = None, sweep_id: int | None = None) -> list[RunRecord]:
        """Every run (or those in one of ``statuses``, or of one sweep) as a
        :class:`~stability.records.RunRecord`, newest first, in two queries: the runs, then all
        their latest values (Note [latest])."""
        from .records import record_from_row

        where, params = [], []
        if statuses is not None:
            statuses = [statuses] if isinstance(statuses, str) else list(statuses)
            for status in statuses:
                _check_status(status)
            where.append(f"status IN ({', '.join('?' * len(statuses))})" if statuses else "0 = 1")
            params.extend(statuses)
        if sweep_id is not None:
            where.append("sweep_id = ?")
            params.append(int(sweep_id))
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
        frame["cell"] = pd.Series([_section_name(config, "cell") for config in configs], dtype=object)
        frame["task"] = pd.Series([_section_name(config, "task") for config in configs], dtype=object)
        float_columns = ["created_at", "started_at", "finished_at", "heartbeat"]
        return frame.astype({"id": "int64", **{c: "Int64" for c in _NULLABLE_INTS},
                             **{c: "float64" for c in float_columns}})

    def delete_run(self, run_id: int) -> None:
        """Remove the run, its metric and series rows, and its checkpoint file if there is one."""
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            conn.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM series WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM latest_metrics WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        self.checkpoint_path(run_id).unlink(missing_ok=True)

    def discard_after(self, run_id: int, step: int) -> None:
        """Delete the run's scalar and series rows with a step after ``step``, and lower its
        reported ``step`` to ``step``, in one transaction: a run resuming from a checkpoint
        taken at ``step`` then appends to exactly the rows it had at that step. Its latest
        values become those at or before ``step`` (Note [latest])."""
        step = int(step)
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            conn.execute("DELETE FROM metrics WHERE run_id = ? AND step > ?", (run_id, step))
            conn.execute("DELETE FROM series WHERE run_id = ? AND step > ?", (run_id, step))
            conn.execute("UPDATE runs SET step = ? WHERE id = ? AND step > ?", (step, run_id, step))
            if conn.execute("DELETE FROM latest_metrics WHERE run_id = ? AND step > ?", (run_id, step)).rowcount:
                conn.execute("DELETE FROM latest_metrics WHERE run_id = ?", (run_id,))
                conn.execute(_LATEST_FROM_METRICS.format(where="run_id = ?"), (run_id,))

    def checkpoint_path(self, run_id: int) -> Path:
        """``<store dir>/checkpoints/run-<id>.pt`` (the folder is created)."""
        folder = self.path.parent / "checkpoints"
        folder.mkdir(exist_ok=True)
        return folder / f"run-{int(run_id)}.pt"

    # ---------------------------------------------------------------------- sweeps
    def create_sweep(self, spec: dict, name: str = "", study: str | None = None) -> int:
        """A new sweep in status 'running'; its Optuna study's name defaults to
        ``stability-sweep-<id>`` (Note [sweeps]). Returns its id."""
        text = _json_object(spec, "spec")
        with self._write() as conn:
            cursor = conn.execute("INSERT INTO sweeps (name, spec, study, status, created_at)"
                                  " VALUES (?, ?, ?, 'running', ?)", (str(name or ""), text, study or "", time.time()))
            sweep_id = int(cursor.lastrowid)
            if study is None:
                conn.execute("UPDATE sweeps SET study = ? WHERE id = ?", (f"stability-sweep-{sweep_id}", sweep_id))
            return sweep_id

    def sweep(self, sweep_id: int) -> dict[str, Any]:
        """Every column of the sweep, ``spec`` parsed back to a dict."""
        rows = self._sweep_rows("WHERE id = ?", (self._sweep_id(sweep_id),))
        if not rows:
            raise SweepNotFound(f"no sweep with id {sweep_id} in {self.path}")
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
        values = [None if value is None else _SWEEP_UPDATABLE[key](value) for key, value in fields.items()]
        assignments = ", ".join(f"{key} = ?" for key in fields)
        with self._write() as conn:
            sweep_id = self._sweep_id(sweep_id)
            if conn.execute(f"UPDATE sweeps SET {assignments} WHERE id = ?", (*values, sweep_id)).rowcount == 0:
                raise SweepNotFound(f"no sweep with id {sweep_id} in {self.path}")

    def _sweep_rows(self, where: str = "", params: Iterable[Any] = ()) -> list[dict]:
        with self._lock:
            try:
                cursor = self._conn.execute(f"SELECT * FROM sweeps {where} ORDER BY id DESC", tuple(params))
                rows = cursor.fetchall()
            except sqlite3.Error as error:
                raise self._error(error) from None
        columns = [description[0] for description in cursor.description]
        sweeps = [dict(zip(columns, row)) for row in rows]
        for sweep in sweeps:
            sweep["spec"] = json.loads(sweep["spec"])
            sweep["stop_requested"] = bool(sweep["stop_requested"])
        return sweeps

    def _sweep_id(self, sweep_id) -> int:
        try:
            return self._run_id(sweep_id)
        except RunNotFound:
            raise SweepNotFound(f"no sweep with id {sweep_id} in {self.path}") from None

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

    @staticmethod
    def _insert_scalars(conn: sqlite3.Connection, run_id: int, rows: Iterable[tuple]) -> None:
        """Insert the rows and move the run's latest values forward (Note [latest])."""
        rows = [(run_id, int(step), float(wall), str(name), float(value)) for step, wall, name, value in rows]
        conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?)", rows)
        newest: dict[str, tuple] = {}
        for row in rows:  # the last row written at the highest step of each name
            if row[3] not in newest or row[1] >= newest[row[3]][1]:
                newest[row[3]] = row
        conn.executemany(_UPSERT_LATEST, ((run_id, name, step, value) for run_id, step, _, name, value
                                          in newest.values()))

    @staticmethod
    def _insert_series(conn: sqlite3.Connection, run_id: int, rows: Iterable[tuple]) -> None:
        conn.executemany("INSERT INTO series VALUES (?, ?, ?, ?, ?, ?)",
                         ((run_id, int(step), float(wall), str(name), int(index), float(value))
                          for step, wall, name, index, value in rows))

    # ---------------------------------------------------------------------- reads
    def metrics(self, run_id: int, names: list[str] | None = None,
                since_step: int | None = None) -> pd.DataFrame:
        """Scalar rows of one run with ``step > since_step``, ordered by step (Note [since_step])."""
        run_id = self._run_id(run_id)
        where, params = ["run_id = ?"], [run_id]
        _filter_names(where, params, names)
        if since_step is not None:
            where.append("step > ?")
            params.append(int(since_step))
        with self._lock:
            self._require_read(run_id)
            rows = self._query(f"SELECT {', '.join(METRIC_COLUMNS)} FROM metrics WHERE {' AND '.join(where)}"
                               " ORDER BY step, rowid", params)
        return _metric_frame(rows)

    def metrics_many(self, run_ids: Iterable[int], names: list[str] | None = None) -> pd.DataFrame:
        """Scalar rows of several runs (ids that do not exist contribute no rows), ordered by run and step."""
        run_ids = [int(run_id) for run_id in run_ids if 0 <= int(run_id) <= MAX_RUN_ID]
        where, params = [f"run_id IN ({', '.join('?' * len(run_ids))})"], list(run_ids)
        _filter_names(where, params, names)
        rows = self._query(f"SELECT {', '.join(METRIC_COLUMNS)} FROM metrics WHERE {' AND '.join(where)}"
                           " ORDER BY run_id, step, rowid", params) if run_ids else []
        return _metric_frame(rows)

    def series(self, run_id: int, name: str, since_step: int | None = None) -> pd.DataFrame:
        """Rows of one vector diagnostic with ``step > since_step``: run_id,step,wall_time,name,index,value."""
        run_id = self._run_id(run_id)
        where, params = ["run_id = ?", "name = ?"], [run_id, name]
        if since_step is not None:
            where.append("step > ?")
            params.append(int(since_step))
        with self._lock:
            self._require_read(run_id)
            rows = self._query("SELECT run_id, step, wall_time, name, idx, value FROM series"
                               f" WHERE {' AND '.join(where)} ORDER BY step, idx", params)
        frame = pd.DataFrame(rows, columns=SERIES_COLUMNS)
        return frame.astype({"run_id": "int64", "step": "int64", "wall_time": "float64",
                             "index": "int64", "value": "float64"})

    def latest(self, run_id: int) -> dict[str, float]:
        """The value at the highest step of every scalar name (a run's 'final' metrics; Note [latest])."""
        with self._lock:
            run_id = self._require_read(run_id)
            rows = self._query("SELECT run_id, name, value FROM latest_metrics WHERE run_id = ? ORDER BY name",
                               (run_id,))
        return _latest_by_run(rows, [run_id])[run_id]

    def latest_many(self, run_ids: Iterable[int] | None = None) -> dict[int, dict[str, float]]:
        """:meth:`latest` of every run (or of those of ``run_ids`` that exist), in one query:
        run id -> {name: value}, ``{}`` for a run without scalar rows."""
        where, params = "", []
        if run_ids is not None:
            params = [int(run_id) for run_id in run_ids if 0 <= int(run_id) <= MAX_RUN_ID]
            where = f"WHERE runs.id IN ({', '.join('?' * len(params))})" if params else "WHERE 0 = 1"
        rows = self._query("SELECT runs.id, latest_metrics.name, latest_metrics.value FROM runs"
                           " LEFT JOIN latest_metrics ON latest_metrics.run_id = runs.id"
                           f" {where} ORDER BY runs.id, latest_metrics.name", params)
        return _latest_by_run([row for row in rows if row[1] is not None], dict.fromkeys(row[0] for row in rows))

    def export_csv(self, run_id: int, path_or_buffer) -> None:
        """Write the run's scalar rows as CSV with columns exactly run_id,step,wall_time,name,value."""
        self.metrics(run_id).to_csv(path_or_buffer, index=False)


def _schema_version(conn: sqlite3.Connection) -> int | None:
    """The schema version of an existing store; None for an SQLite file that is no run store
    (every store has had a ``meta`` table since its first transaction).
    Only reads: a store locked by a writer can still be opened (Note [concurrency])."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"runs", "meta"} <= tables:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return None if row is None else int(row[0])


def _migrate(conn: sqlite3.Connection) -> int:
    """Create the tables of a new store, or bring an older store to ``SCHEMA_VERSION``, in one
    transaction; return the version found (a newer one is left untouched; Note [schema versions])."""
    conn.execute("BEGIN IMMEDIATE")  # not executescript: it would COMMIT on its own
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "runs" not in tables:
            statements, version = filter(str.strip, _SCHEMA.split(";")), SCHEMA_VERSION
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        else:
            version = _schema_version(conn)
            statements = [sql for step in range(version, SCHEMA_VERSION) for sql in _MIGRATIONS[step]]
        for statement in statements:
            conn.execute(statement)
        if version <= SCHEMA_VERSION:
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?) ON CONFLICT (key)"
                         " DO UPDATE SET value = excluded.value", (str(SCHEMA_VERSION),))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
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


def parse_params(text: str | None) -> dict[str, Any]:
    """A run's stored varied values (Note [sweeps]); {} for a run of no sweep, and for text that is
    no JSON object (the run stays readable)."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _check_status(status: str) -> None:
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}; valid: {', '.join(STATUSES)}")


def _section_name(config: dict, section: str) -> str | None:
    value = config.get(section)
    return value.get("name") if isinstance(value, dict) else None


def _filter_names(where: list[str], params: list, names: list[str] | None) -> None:
    if names is None:
        return
    names = [names] if isinstance(names, str) else list(names)
    where.append(f"name IN ({', '.join('?' * len(names))})")
    params.extend(names)


def _metric_frame(rows: list[tuple]) -> pd.DataFrame:
    """Scalar rows as a DataFrame; NULL values (stored NaNs, Note [NaN]) come back as NaN."""
    frame = pd.DataFrame(rows, columns=METRIC_COLUMNS)
    return frame.astype({"run_id": "int64", "step": "int64", "wall_time": "float64", "value": "float64"})
