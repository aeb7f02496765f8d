"""A store's schema version, and bringing an older store up to date.

    version, tables = schema_version(conn)     # None: no run store (yet)
    create_or_migrate(conn)                    # in a write transaction

Note [schema versions]
    The ``meta`` table holds the schema version. A new store gets the tables of
    :mod:`stability.runs.schema` (``metadata.create_all``) and ``SCHEMA_VERSION``; an older
    store is brought up to date when it is opened by the steps in ``MIGRATIONS``, all in
    one write transaction that first re-reads the version (another process may have
    migrated it meanwhile). A store of a newer version is refused, never changed.
    Versions: 1 the first; 2 adds ``runs.resumes``; 3 adds ``latest_metrics``, filled from
    the stored rows (Note [latest] in stability.runs.schema); 4 adds the ``sweeps`` table
    and the runs' ``sweep_id``, ``trial``, ``params`` and ``host`` (Note [sweeps] in
    stability.runs.sweep_rows); 5 adds ``runs.claim``, the token of the process that claimed a
    run (Note [claims] in stability.execution.lifecycle); 6 adds ``runs.external``, the flag of a run
    logged from someone's own training loop (stability.watch), 0 for every run stored before; 7 adds
    ``runs.owner`` (who started a run where a classroom names its users, stability.access) and
    ``runs.pid_started`` (the claimant process's start time, so that a reused pid is not taken for it).
    PostgreSQL stores start at version 4.

Note [frozen steps]
    A step is the SQL that made its version, kept as written then, like an Alembic revision
    file: it must go on making the tables of *its* version after the metadata has moved on
    (a step 3 -> 4 that created ``sweeps`` from the metadata of a later version would create
    that version's table, and the later step would then fail). Only SQLite stores were ever
    older than version 4, so the steps before it are SQLite statements; steps 4 -> 5, 5 -> 6 and 6 -> 7 run
    on PostgreSQL stores too, in SQL both dialects take. tests/test_store.py checks that a version-1
    store and a version-4 store (of either dialect) brought up to date have the tables a new store gets.
"""
from __future__ import annotations

from sqlalchemy import func, inspect, select
from sqlalchemy.engine import Connection

from .queries import upsert
from .schema import SCHEMA_VERSION, meta_table, metadata

SCHEMA_LOCK = 0x5354414253544F52  # pg_advisory_xact_lock key for creating and migrating the tables

# The latest_metrics rows of every run, recomputed from its metric rows (version 3; Note [latest]).
_LATEST_FROM_METRICS = """
INSERT INTO latest_metrics (run_id, name, step, value)
SELECT run_id, name, step, value FROM (
    SELECT run_id, name, step, value,
           ROW_NUMBER() OVER (PARTITION BY run_id, name ORDER BY step DESC, rowid DESC) AS position
    FROM metrics
) AS ranked WHERE position = 1
"""

# The statements that bring a store of schema version v to version v + 1 (Note [frozen steps]).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE runs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0",),
    2: ("""CREATE TABLE IF NOT EXISTS latest_metrics (
    run_id INTEGER NOT NULL, name TEXT NOT NULL, step INTEGER NOT NULL, value REAL,
    PRIMARY KEY (run_id, name)
)""", _LATEST_FROM_METRICS),
    3: ("ALTER TABLE runs ADD COLUMN sweep_id INTEGER",
        "ALTER TABLE runs ADD COLUMN trial INTEGER",
        "ALTER TABLE runs ADD COLUMN params TEXT",
        "ALTER TABLE runs ADD COLUMN host TEXT",
        """CREATE TABLE IF NOT EXISTS sweeps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT,
    spec TEXT NOT NULL,
    study TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    finished_at REAL,
    workers INTEGER,
    stop_requested INTEGER NOT NULL DEFAULT 0
)""",
        "CREATE INDEX IF NOT EXISTS runs_sweep ON runs (sweep_id)"),
    4: ("ALTER TABLE runs ADD COLUMN claim TEXT",),
    5: ("ALTER TABLE runs ADD COLUMN external {integer} NOT NULL DEFAULT 0",),
    6: ("ALTER TABLE runs ADD COLUMN owner TEXT",
        "ALTER TABLE runs ADD COLUMN pid_started {real}"),
}
# The dialect's words a step's statement names in braces (SQLite INTEGER, PostgreSQL BIGINT: schema.INTEGER).
_WORDS = {"sqlite": {"integer": "INTEGER", "real": "REAL"},
          "postgresql": {"integer": "BIGINT", "real": "DOUBLE PRECISION"}}


def schema_version(conn: Connection) -> tuple[int | None, set[str]]:
    """The schema version of an existing store (None where there is none: a database that is no run
    store, or a new one) and the tables found. Every store has had a ``meta`` table since its first
    transaction. Only reads: a store locked by a writer can still be opened (``engine``'s Note
    [concurrency])."""
    tables = set(inspect(conn).get_table_names())
    if not {"runs", "meta"} <= tables:
        return None, tables
    value = conn.execute(select(meta_table.c.value).where(meta_table.c.key == "schema_version")).scalar()
    return (None if value is None else int(value)), tables


def create_or_migrate(conn: Connection) -> int | None:
    """Create the tables of a new store, or bring an older store to ``SCHEMA_VERSION``, in the write
    transaction of ``conn``; return the version found, None for a new store (a newer one is left
    untouched; Note [schema versions])."""
    dialect = conn.dialect.name
    if dialect == "postgresql":  # processes opening a new database at once take turns (stability.runs.opening)
        conn.execute(select(func.pg_advisory_xact_lock(SCHEMA_LOCK)))
    if "runs" not in inspect(conn).get_table_names():
        metadata.create_all(conn)
        version = None
    else:
        version, _ = schema_version(conn)
        if version is None:  # someone else's runs table appeared meanwhile: leave it be
            return None
        for step in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS.get(step, ()):
                conn.exec_driver_sql(statement.format_map(_WORDS[dialect]) if "{" in statement
                                     else statement)
    if version is None or version <= SCHEMA_VERSION:
        write = upsert(dialect, meta_table).values(key="schema_version", value=str(SCHEMA_VERSION))
        conn.execute(write.on_conflict_do_update(index_elements=[meta_table.c.key],
                                                 set_={"value": write.excluded.value}))
    return version
