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

This module is RunStore: what each of its methods reads and writes. Each other concern of the
store has its own module beside it, in the order they build on each other:

    errors.py       StoreError, StoreBusy, RunNotFound, SweepNotFound
    location.py     where a store lives: paths, URLs, $STABILITY_STORE, store.home (Note [locations])
    engine.py       SQLite and PostgreSQL connections, and their errors as one line
                    (Notes [concurrency], [interrupts], [durability])
    schema.py       the tables as SQLAlchemy metadata (Notes [write order], [NaN], [latest])
    queries.py      the statements run on every poll and write, built once
    migrations.py   the schema version and the steps that bring an older store up to date
                    (Note [schema versions])
    opening.py      creating a new store, refusing what is none (Note [creating and refusing])
    bulk_rows.py    a flush's rows and many-row reads through the driver's cursor (Note [bulk rows])
    sweep_rows.py   the sweeps' rows (Note [sweeps])

Note [since_step]
    ``metrics(..., since_step=s)`` returns rows with ``step > s``. Incremental
    polling is exact when every step's rows are committed in one transaction
    (``flush`` does this), and step 0 is the exception: its training readings
    are committed before the hooks' (Note [Step 0 first] in
    stability/training/trainer.py). A poller that reads the run again in full
    while step 0 is the last step it saw, as the pages' shared look does
    (stability/live/tail.py), misses none of its rows.
"""
from __future__ import annotations

import json
import math
import operator
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.expression import Executable

from .bulk_rows import driver_statements, execute_rows, fetch_tuples
from .engine import WRITE, driver_errors, store_error
from .errors import RunNotFound, StoreBusy, StoreError, SweepNotFound
from .location import DEFAULT_PATH, ENV_VAR, default_path, described, parse_location, private_folder, store_home
from .opening import open_engine
from .queries import (CONTROL, LATEST_OF_RUN, REQUEST_STOP, RUN_BY_ID, RUN_EXISTS, STOP_REQUESTED,
                      latest_from_metrics, latest_many_query, metrics_query, runs_query, series_query, update_by_id)
from .records import RunRecord, record_from_row
from .schema import SCHEMA_VERSION, as_flag, json_object, latest_table, metrics_table, runs_table, series_table
from .status import ACTIVE_STATUSES, STATUSES, SWEEP_STATUSES, TERMINAL
from .sweep_rows import SweepRows

# What callers import from here: the store, its errors and vocabulary, wherever each is defined.
__all__ = ["RunStore", "StoreError", "StoreBusy", "RunNotFound", "RunActive", "SweepNotFound", "ENV_VAR", "DEFAULT_PATH",
           "default_path", "SCHEMA_VERSION", "STATUSES", "ACTIVE_STATUSES", "TERMINAL", "SWEEP_STATUSES",
           "METRIC_COLUMNS", "SERIES_COLUMNS", "MAX_RUN_ID"]

MAX_RUN_ID = 2**63 - 1  # SQLite's INTEGER and PostgreSQL's bigint range; any other id names no run


class RunActive(ValueError):
    """A run asked to be deleted is queued or running: it was not deleted (Note [Guarded delete])."""


# Fields update_run may set, with the Python type each value is coerced to
# (numpy/torch scalars would otherwise fail to bind; flags are stored as 0/1 integers).
_UPDATABLE = {
    "name": str, "status": str, "started_at": float, "finished_at": float, "device": str,
    "pid": int, "heartbeat": float, "error": str, "total_params": int, "recurrent_params": int,
    "baseline": float, "baseline_label": str, "metric": str, "total_steps": int, "step": int,
    "resumes": int, "stop_requested": as_flag, "host": str, "sweep_id": int, "trial": int,
    "params": lambda value: json_object(value, "params"), "claim": str, "owner": str, "pid_started": float,
    "config": lambda value: json.dumps(dict(value)),  # an external run's: what its model turned out to be
}
ANY = object()  # compare_and_set: no condition on this column
METRIC_COLUMNS = ["run_id", "step", "wall_time", "name", "value"]
SERIES_COLUMNS = ["run_id", "step", "wall_time", "name", "index", "value"]
_RUNS, _METRICS, _SERIES, _LATEST = runs_table.c, metrics_table.c, series_table.c, latest_table.c


class RunStore(SweepRows):
    """Runs, sweeps, metric rows and series rows in one SQLite file or PostgreSQL database (see the
    notes in the module docstring and in the modules it names)."""

    def __init__(self, location: str | os.PathLike | None = None):
        url = parse_location(location)
        self._url = url
        self.dialect = url.get_backend_name()
        self.path = Path(url.database) if self.dialect == "sqlite" else None
        self.location = described(url)
        self._errors = driver_errors(self.dialect)
        self._engine = open_engine(url)
        self._writer = self._engine.execution_options(**WRITE)
        self._reader = (self._engine if self.dialect == "sqlite"
                        else self._engine.execution_options(isolation_level="AUTOCOMMIT"))
        self._driver = driver_statements(self.dialect)

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
        return store_home(self._url)

    def __str__(self) -> str:
        return self.location

    def __repr__(self) -> str:
        return f"RunStore({self.location!r})"

    # ------------------------------------------------------------------ connection
    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _error(self, error: BaseException) -> StoreError:
        return store_error(error, self.location, self.dialect)

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One write transaction, the write lock taken at BEGIN (engine's Notes [concurrency], [interrupts])."""
        try:
            with self._writer.begin() as conn:
                yield conn
        except self._errors as error:
            raise self._error(error) from None

    def _query(self, statement: Executable, params: Mapping[str, Any] | None = None) -> list[tuple]:
        try:
            with self._reader.connect() as conn:
                return fetch_tuples(conn.execute(statement, params))
        except self._errors as error:
            raise self._error(error) from None

    def _dicts(self, statement: Executable, params: Mapping[str, Any] | None = None) -> list[dict]:
        try:
            with self._reader.connect() as conn:
                result = conn.execute(statement, params)
                columns = list(result.keys())
                return [dict(zip(columns, row)) for row in fetch_tuples(result)]
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
        if conn.execute(RUN_EXISTS, {"id": run_id}).first() is None:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")
        return run_id

    def _require_read(self, run_id) -> int:
        run_id = self._run_id(run_id)
        if not self._query(RUN_EXISTS, {"id": run_id}):
            raise RunNotFound(f"no run with id {run_id} in {self.location}")
        return run_id

    # ------------------------------------------------------------------------ runs
    def create_run(self, config: dict, name: str | None = None, *, sweep_id: int | None = None,
                   trial: int | None = None, params: dict | None = None,
                   claimed: Mapping[str, Any] | None = None, external: bool = False,
                   owner: str | None = None, fields: Mapping[str, Any] | None = None) -> int:
        """A new run in status 'queued', in one INSERT; ``name`` defaults to ``config['name']``; a sweep's
        trial also gets its sweep, trial number and varied values (Note [sweeps]). ``claimed``
        (``status``, ``pid``, ``pid_started``, ``host``, ``claim``: what a claim sets) makes it a run
        claimed at birth (stability.execution.lifecycle, the one caller that gives a status).
        ``external``: a run logged from someone's own loop (stability.watch), whose ``config`` is theirs,
        no RunConfig. ``owner``: who started it, where a classroom names its users (stability.access).
        ``fields``: other columns :meth:`update_run` may set (its ``host``, an external run's
        ``total_steps`` ...), written in the same INSERT. Returns its id."""
        if not isinstance(config, dict):
            raise TypeError(f"config must be a dict (RunConfig.to_dict()); got {type(config).__name__}")
        fields = _checked_fields(fields or {})
        now = time.time()
        values = {"name": name if name is not None else str(config.get("name") or ""),
                  "config": json.dumps(config), "status": "queued", "created_at": now,
                  "sweep_id": None if sweep_id is None else int(sweep_id),
                  "trial": None if trial is None else int(trial),
                  "params": None if params is None else json_object(params, "params"),
                  "external": as_flag(external), "owner": None if owner is None else str(owner),
                  **_coerced(fields)}
        if claimed:
            values.update(_coerced({key: claimed[key] for key in ("status", "pid", "host", "claim", "pid_started")
                                    if key in claimed}))
            _check_status(values["status"])
            values["started_at"] = now if values["status"] == "running" else None
        with self._write() as conn:
            return int(conn.execute(insert(runs_table).values(values).returning(_RUNS.id)).scalar())

    def update_run(self, run_id: int, **fields: Any) -> None:
        """Set any of the columns in ``_UPDATABLE`` but the status (a status changes only by a
        compare-and-set of stability.execution.lifecycle: :meth:`compare_and_set`); ``None`` clears a
        column."""
        fields = _checked_fields(fields)
        if not fields:
            return
        values = {f"new_{key}": value for key, value in _coerced(fields).items()}
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            conn.execute(update_by_id(runs_table, tuple(sorted(fields))), {**values, "row_id": run_id})

    def compare_and_set(self, run_id: int, *, statuses: Iterable[str], fields: Mapping[str, Any],
                        unclaimed: bool = False, claim: Any = ANY, pid: Any = ANY, heartbeat: Any = ANY) -> bool:
        """``UPDATE runs SET fields WHERE id = run_id AND status IN statuses`` (``AND pid IS NULL`` with
        ``unclaimed``; the claim, the pid and the heartbeat as given unless ANY, NULL compared as a value) in one
        statement; True when it changed the run, False when the run was not as expected (another
        process won). A ``status`` among ``fields`` sets ``finished_at`` (a terminal one) or clears it
        and keeps the first ``started_at`` ('running'). This is the claim and every status change of
        stability.execution.lifecycle (Note [claims] there), the one caller that gives a status."""
        unknown = sorted(set(fields) - set(_UPDATABLE))
        if unknown:
            raise ValueError(f"unknown run field(s) {', '.join(unknown)}; valid: {', '.join(_UPDATABLE)}")
        statuses = [statuses] if isinstance(statuses, str) else list(statuses)
        for status in statuses + ([fields["status"]] if "status" in fields else []):
            _check_status(status)
        values: dict[str, Any] = _coerced(fields)
        if "status" in fields:
            now = time.time()
            values["finished_at"] = now if fields["status"] in TERMINAL else None
            if fields["status"] == "running":
                values["started_at"] = func.coalesce(_RUNS.started_at, now)
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            where = [_RUNS.id == run_id, _RUNS.status.in_(statuses)]
            where += [_RUNS.pid.is_(None)] if unclaimed else []
            where += [] if claim is ANY else [_RUNS.claim.is_not_distinct_from(claim)]
            where += [] if pid is ANY else [_RUNS.pid.is_not_distinct_from(pid)]
            where += [] if heartbeat is ANY else [_RUNS.heartbeat.is_not_distinct_from(heartbeat)]
            return conn.execute(update(runs_table).where(*where).values(values)).rowcount == 1

    def _heartbeat(self, conn: Connection, run_id: int, step: int | None) -> None:
        run_id = self._run_id(run_id)
        updated = execute_rows(conn, self._driver.heartbeat,
                                       [(time.time(), None if step is None else int(step), run_id)])
        if updated == 0:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")

    def request_stop(self, run_id: int) -> None:
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            conn.execute(REQUEST_STOP, {"run": run_id})

    def stop_requested(self, run_id: int) -> bool:
        rows = self._query(STOP_REQUESTED, {"id": self._run_id(run_id)})
        if not rows:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")
        return bool(rows[0][0])

    def control(self, run_id: int) -> dict[str, Any]:
        """What a run's trainer polls: ``stop_requested``, ``claim`` (the claim's token) and ``status``."""
        rows = self._query(CONTROL, {"id": self._run_id(run_id)})
        if not rows:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")
        return {"stop_requested": bool(rows[0][0]), "claim": rows[0][1], "status": rows[0][2]}

    def record(self, run_id: int, *, latest: bool = True) -> RunRecord:
        """The run as a :class:`~stability.runs.records.RunRecord`, with its latest metric values, or
        (``latest=False``: one query of one row, what a live poll and a claimant read) without them:
        ``record.latest`` is then empty."""
        rows = self._dicts(RUN_BY_ID, {"id": self._run_id(run_id)})
        if not rows:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")
        values = self.latest_many([rows[0]["id"]]).get(rows[0]["id"], {}) if latest else {}
        return record_from_row(rows[0], values)

    def records(self, statuses: Iterable[str] | None = None, sweep_id: int | None = None, *,
                latest: bool = True, limit: int | None = None) -> list[RunRecord]:
        """Every run (or those in one of ``statuses``, or of one sweep; the newest ``limit``) as a
        :class:`~stability.runs.records.RunRecord`, newest first, in two queries: the runs, then all
        their latest values (Note [latest]); with ``latest=False`` one query, ``record.latest`` empty
        (a page's list of runs to choose from)."""
        params = {}
        if statuses is not None:
            params["statuses"] = [statuses] if isinstance(statuses, str) else list(statuses)
            for status in params["statuses"]:
                _check_status(status)
        if sweep_id is not None:
            params["sweep_id"] = int(sweep_id)
        statement = runs_query(statuses is not None, sweep_id is not None)
        rows = self._dicts(statement if limit is None else statement.limit(max(0, int(limit))), params)
        if not latest:
            return [record_from_row(row, {}) for row in rows]
        values = self.latest_many() if not params and limit is None else self.latest_many(row["id"] for row in rows)
        return [record_from_row(row, values.get(row["id"], {})) for row in rows]

    def active_runs(self) -> list[RunRecord]:
        """The runs a worker will still write to (``ACTIVE_STATUSES``: queued or running), oldest
        first, the order the queue starts queued runs in."""
        return self.records(ACTIVE_STATUSES)[::-1]

    def delete_run(self, run_id: int) -> None:
        """Remove the run, its metric and series rows, and its checkpoint file if there is one, unless it
        is queued or running when the delete is written (Note [Guarded delete]): :class:`RunActive` (one
        line) then, :class:`RunNotFound` for an id the store has not."""
        run_id = self._run_id(run_id)
        deleted, kept = self.delete_runs([run_id])
        if kept:
            raise RunActive(f"run {run_id} is {kept[run_id]} now; it was not deleted (stop it first)")
        if not deleted:
            raise RunNotFound(f"no run with id {run_id} in {self.location}")

    def delete_runs(self, run_ids: Iterable[int]) -> tuple[list[int], dict[int, str]]:
        """Delete the runs of ``run_ids`` that are not queued or running, in one write: ``(deleted ids,
        {id: status} of those kept as active)``; an id the store has not is in neither.

        Note [Guarded delete]
            A page decides "finished" when it draws its Delete button, and a run may be resumed (queued,
            then claimed and running) before the click. So the delete itself says which runs it deletes:
            ``DELETE FROM runs WHERE id = :id AND status NOT IN ('queued', 'running')``, then the rows of
            the runs it deleted, in the same transaction. SQLite's write lock, or PostgreSQL's row lock
            (the WHERE read again after a concurrent resume commits), keeps a run from being resumed
            between the two, so a run is either deleted whole or kept whole, never under its worker."""
        deleted, kept = [], {}
        with self._write() as conn:
            for run_id in dict.fromkeys(run_ids):
                try:
                    run_id = self._run_id(run_id)
                except RunNotFound:
                    continue
                if conn.execute(delete(runs_table).where(_RUNS.id == run_id,
                                                         _RUNS.status.not_in(ACTIVE_STATUSES))).rowcount:
                    for table in (metrics_table, series_table, latest_table):
                        conn.execute(delete(table).where(table.c.run_id == run_id))
                    deleted.append(run_id)
                elif (status := conn.execute(select(_RUNS.status).where(_RUNS.id == run_id)).scalar()) is not None:
                    kept[run_id] = status
        for run_id in deleted:
            self.checkpoint_path(run_id).unlink(missing_ok=True)
        return deleted, kept

    def discard_after(self, run_id: int, step: int) -> None:
        """Delete the run's scalar and series rows with a step after ``step``, and lower its
        reported ``step`` to ``step``, in one transaction: a run resuming from a checkpoint
        taken at ``step`` then appends to exactly the rows it had at that step. Its latest
        values become those at or before ``step`` (Note [latest])."""
        step = int(step)
        with self._write() as conn:
            run_id = self._require(conn, run_id)
            conn.execute(delete(metrics_table).where(_METRICS.run_id == run_id, _METRICS.step > step))
            conn.execute(delete(series_table).where(_SERIES.run_id == run_id, _SERIES.step > step))
            conn.execute(update(runs_table).where(_RUNS.id == run_id, _RUNS.step > step).values(step=step))
            if conn.execute(delete(latest_table).where(_LATEST.run_id == run_id, _LATEST.step > step)).rowcount:
                conn.execute(delete(latest_table).where(_LATEST.run_id == run_id))
                conn.execute(latest_from_metrics(_METRICS.run_id == run_id))

    def checkpoint_path(self, run_id: int) -> Path:
        """``<store home>/checkpoints/run-<id>.pt`` (Note [locations]), in :meth:`private_subfolder`.
        The files are opened without following links (:mod:`stability.training.checkpoints`)."""
        return self.private_subfolder("checkpoints") / f"run-{int(run_id)}.pt"

    def private_subfolder(self, name: str) -> Path:
        """``<store home>/NAME`` (``checkpoints``, ``logs``), created 0700, and refused (StoreError, one
        line) unless it is this user's: a store in a shared folder (``--store /tmp/runs.db``) must not
        write its checkpoints and worker logs into, or read them from, a folder another user made,
        where that user could swap a file or plant a link (:func:`location.private_folder`)."""
        folder = self.home / name
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            private_folder(folder)
        except OSError as error:
            raise StoreError(f"cannot use the folder {folder} of run store {self.location}: "
                             f"{error.strerror or error}") from None
        return folder

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
        execute_rows(conn, self._driver.insert_metrics, rows)
        newest: dict[str, tuple] = {}
        for row in rows:  # the last row written at the highest step of each name
            if row[3] not in newest or row[1] >= newest[row[3]][1]:
                newest[row[3]] = row
        execute_rows(conn, self._driver.upsert_latest,
                     [(run_id, name, step, value) for run_id, step, _, name, value in newest.values()])

    def _insert_series(self, conn: Connection, run_id: int, rows: Iterable[tuple]) -> None:
        rows = [(run_id, int(step), float(wall), str(name), int(index), float(value))
                for step, wall, name, index, value in rows]
        if rows:
            execute_rows(conn, self._driver.insert_series, rows)

    # ---------------------------------------------------------------------- reads
    def metrics(self, run_id: int, names: list[str] | None = None,
                since_step: int | None = None) -> pd.DataFrame:
        """Scalar rows of one run with ``step > since_step``, ordered by step (Note [since_step])."""
        run_id = self._run_id(run_id)
        params = {"id": run_id, **_names(names), **({} if since_step is None else {"since": int(since_step)})}
        try:
            with self._reader.connect() as conn:
                if conn.execute(RUN_EXISTS, {"id": run_id}).first() is None:
                    raise RunNotFound(f"no run with id {run_id} in {self.location}")
                rows = fetch_tuples(conn.execute(metrics_query(False, names is not None, since_step is not None),
                                                 params))
        except self._errors as error:
            raise self._error(error) from None
        return _metric_frame(rows)

    def metrics_many(self, run_ids: Iterable[int], names: list[str] | None = None) -> pd.DataFrame:
        """Scalar rows of several runs (ids that do not exist contribute no rows), ordered by run and step."""
        run_ids = [int(run_id) for run_id in run_ids if 0 <= int(run_id) <= MAX_RUN_ID]
        statement = metrics_query(True, names is not None, False)
        rows = self._query(statement, {"ids": run_ids, **_names(names)}) if run_ids else []
        return _metric_frame(rows)

    def series(self, run_id: int, name: str, since_step: int | None = None) -> pd.DataFrame:
        """Rows of one vector diagnostic with ``step > since_step``: run_id,step,wall_time,name,index,value."""
        params = {"id": self._require_read(run_id), "name": name}
        if since_step is not None:
            params["since"] = int(since_step)
        return _typed_frame(self._query(series_query(since_step is not None), params), SERIES_COLUMNS,
                            {"run_id": np.int64, "step": np.int64, "wall_time": np.float64, "index": np.int64,
                             "value": np.float64})

    def latest(self, run_id: int) -> dict[str, float]:
        """The value at the highest step of every scalar name (a run's 'final' metrics; Note [latest])."""
        run_id = self._require_read(run_id)
        return _latest_by_run(self._query(LATEST_OF_RUN, {"id": run_id}), [run_id])[run_id]

    def latest_many(self, run_ids: Iterable[int] | None = None) -> dict[int, dict[str, float]]:
        """:meth:`latest` of every run (or of those of ``run_ids`` that exist), in one query:
        run id -> {name: value}, ``{}`` for a run without scalar rows."""
        if run_ids is None:
            rows = self._query(latest_many_query(False))
        else:
            ids = [int(run_id) for run_id in run_ids if 0 <= int(run_id) <= MAX_RUN_ID]
            rows = self._query(latest_many_query(True), {"ids": ids})
        return _latest_by_run([row for row in rows if row[1] is not None], dict.fromkeys(row[0] for row in rows))

    def export_csv(self, run_id: int, path_or_buffer) -> None:
        """Write the run's scalar rows as CSV with columns exactly run_id,step,wall_time,name,value."""
        self.metrics(run_id).to_csv(path_or_buffer, index=False)


def _names(names: list[str] | str | None) -> dict[str, list[str]]:
    """The ``:names`` parameter (a name alone is a list of one); none for None."""
    if names is None:
        return {}
    return {"names": [names] if isinstance(names, str) else list(names)}


def _latest_by_run(rows: Iterable[tuple], run_ids: Iterable[int]) -> dict[int, dict[str, float]]:
    """``(run_id, name, value)`` rows as run id -> {name: value}, every id of ``run_ids`` present;
    a NULL value (a stored NaN, Note [NaN]) is NaN."""
    latest: dict[int, dict[str, float]] = {run_id: {} for run_id in run_ids}
    for run_id, name, value in rows:
        latest[run_id][name] = math.nan if value is None else float(value)
    return latest


def _coerced(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Values of ``_UPDATABLE`` fields as their columns take them (None stays None)."""
    return {key: None if value is None else _UPDATABLE[key](value) for key, value in fields.items()}


def _checked_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` if all are columns :meth:`RunStore.update_run` may set: ValueError for an unknown one,
    and for ``status``, which only stability.execution.lifecycle writes (:meth:`RunStore.compare_and_set`)."""
    if "status" in fields:
        raise ValueError("a run's status is written only by stability.execution.lifecycle "
                         "(RunStore.compare_and_set); update_run does not set it")
    unknown = sorted(set(fields) - set(_UPDATABLE))
    if unknown:
        raise ValueError(f"unknown run field(s) {', '.join(unknown)}; valid: "
                         f"{', '.join(key for key in _UPDATABLE if key != 'status')}")
    return dict(fields)


def _check_status(status: str) -> None:
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}; valid: {', '.join(STATUSES)}")


def _metric_frame(rows: list) -> pd.DataFrame:
    """Scalar rows as a DataFrame; NULL values (stored NaNs, Note [NaN]) come back as NaN."""
    return _typed_frame(rows, METRIC_COLUMNS, {"run_id": np.int64, "step": np.int64, "wall_time": np.float64,
                                               "value": np.float64})


def _typed_frame(rows: list, columns: list[str], dtypes: dict) -> pd.DataFrame:
    """Rows (tuples in ``columns``' order) as a DataFrame with ``dtypes`` (a NULL float is NaN), built column
    by column in numpy: a live page reads a few rows at a time, where a DataFrame of tuples and an astype
    cost ten times what the rows do. Text columns are as pandas makes them from tuples (object when empty)."""
    values = list(zip(*rows)) if rows else [()] * len(columns)
    return pd.DataFrame({column: np.array(value, dtype=dtypes[column]) if column in dtypes
                         else (list(value) if rows else pd.Series(dtype=object))
                         for column, value in zip(columns, values)}, columns=columns)
