"""Many rows to and from the database driver's own cursor, past SQLAlchemy's work per row: the
statements of a flush on the training hot path, and the reads that return many rows.

    statements = driver_statements("sqlite")                # once a process
    execute_rows(conn, statements.insert_metrics, [(run_id, step, wall_time, name, value), ...])
    fetch_tuples(conn.execute(select(...)))                  # [(...), ...]

Note [bulk rows]
    A flush writes a log interval's rows (25 scalars and a few series vectors) and
    the heartbeat on the training hot path. Its four statements are Core statements
    compiled once per dialect with positional markers (``?`` for sqlite3, ``%s`` for
    psycopg; ``driver_statements``) and go to the DBAPI cursor's ``executemany``
    (SQLAlchemy's ``connection.connection.cursor()``, inside the transaction SQLAlchemy
    began) with rows of tuples: executed through SQLAlchemy, each row becomes a parameter
    dict, which made a flush on SQLite 2.5x slower than the raw-sqlite3 store, and each
    execution still costs an execution context (~40 us). Reads of many rows take the DBAPI
    cursor's tuples for the same reason (``benchmarks/store.py`` has the numbers).
    Statements sent this way pass no SQLAlchemy events; driver errors are caught like
    SQLAlchemy's (``engine.driver_errors``).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

from sqlalchemy import bindparam, func, insert, update
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.dialects.sqlite.base import SQLiteDialect
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.sql.expression import Executable, Insert

from .queries import upsert
from .schema import latest_table, metrics_table, runs_table, series_table

# Compiling for the drivers' positional markers: sqlite3 takes ``?``, psycopg ``%s``.
_POSITIONAL = {"sqlite": SQLiteDialect(paramstyle="qmark"), "postgresql": PGDialect(paramstyle="format")}


class DriverStatements(NamedTuple):
    """The statements of a flush as SQL for the driver's executemany (Note [bulk rows]), each
    with the order of the values in its rows of tuples."""

    insert_metrics: str  # (run_id, step, wall_time, name, value)
    upsert_latest: str  # (run_id, name, step, value)
    insert_series: str  # (run_id, step, wall_time, name, idx, value)
    heartbeat: str  # (heartbeat, step or None, run id)


@functools.cache
def driver_statements(dialect: str) -> DriverStatements:
    """The flush's statements compiled for ``dialect``'s driver, once a process (Note [bulk rows]).
    The upsert keeps ``latest_metrics`` moving forward in step only (schema's Note [latest]); the
    heartbeat sets ``runs.heartbeat`` and, given one, the run's ``step``."""
    latest, runs = upsert(dialect, latest_table), runs_table.c
    upsert_latest = latest.on_conflict_do_update(index_elements=[latest_table.c.run_id, latest_table.c.name],
                                                 set_={"step": latest.excluded.step, "value": latest.excluded.value},
                                                 where=latest.excluded.step >= latest_table.c.step)
    heartbeat = update(runs_table).where(runs.id == bindparam("run")).values(
        heartbeat=bindparam("beat"), step=func.coalesce(bindparam("reached"), runs.step))
    return DriverStatements(
        insert_metrics=_positional(insert(metrics_table), dialect, "run_id", "step", "wall_time", "name", "value"),
        upsert_latest=_positional(upsert_latest, dialect, "run_id", "name", "step", "value"),
        insert_series=_positional(insert(series_table), dialect, "run_id", "step", "wall_time", "name", "idx", "value"),
        heartbeat=_positional(heartbeat, dialect, "beat", "reached", "run"))


def _positional(statement: Executable, dialect: str, *parameters: str) -> str:
    """``statement`` as the driver's SQL with positional markers, its values in the order ``parameters``
    (an INSERT's columns are those named)."""
    columns = list(parameters) if isinstance(statement, Insert) else None
    compiled = statement.compile(dialect=_POSITIONAL[dialect], column_keys=columns)
    if tuple(compiled.positiontup) != parameters:
        raise AssertionError(f"{compiled.string} takes {compiled.positiontup}, not {parameters}")
    return compiled.string


def execute_rows(conn: Connection, statement: str, rows: list[tuple]) -> int:
    """Rows of tuples through the DBAPI cursor's executemany, in the transaction of ``conn``;
    returns the rows changed (Note [bulk rows])."""
    cursor = conn.connection.cursor()
    try:
        cursor.executemany(statement, rows)
        return cursor.rowcount
    finally:
        cursor.close()


def fetch_tuples(result: CursorResult) -> list[tuple]:
    """The rows of a query as plain tuples, from the DBAPI cursor's own ``fetchall``: pandas builds a
    frame from tuples about 3x faster than from SQLAlchemy's Row objects, and the store's column
    types have no result processing to skip (benchmarks/store.py)."""
    return result.cursor.fetchall() if result.returns_rows else []
