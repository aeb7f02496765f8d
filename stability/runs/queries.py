"""The statements RunStore runs again and again, as SQLAlchemy Core on the tables of
:mod:`stability.runs.schema`, built once with bound parameters.

    conn.execute(RUN_EXISTS, {"id": run_id})
    conn.execute(metrics_query(many=False, named=True, since=True), {"id": 3, "names": [...], "since": 40})
    conn.execute(update_by_id(runs_table, ("pid", "status")), {"row_id": 3, "new_pid": 7, "new_status": ...})

Built once, a statement's compiled form is found in SQLAlchemy's cache without building the
statement and its cache key again on every call, which cost a live page's poll (``metrics`` since
a step) a quarter of its time (benchmarks/store.py). A statement with optional parts is one
function of which parts it has, cached. Parameters: ``:id`` a run's id in a SELECT, ``:row_id``
and ``:run`` in an UPDATE (whose bound parameters may not share a column's name), ``:ids``,
``:names`` and ``:statuses`` lists (expanding parameters of the column's type, so an empty list
compares too), ``:since`` a step.
"""
from __future__ import annotations

import functools

from sqlalchemy import Table, bindparam, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql.expression import ColumnElement, Insert, Select, Update

from .schema import latest_table, metrics_table, runs_table, series_table, write_order

_RUNS, _METRICS, _SERIES, _LATEST = runs_table.c, metrics_table.c, series_table.c, latest_table.c


def in_list(column, name: str) -> ColumnElement:
    """``column IN :name``, a list parameter of the column's type (an empty list compares too)."""
    return column.in_(bindparam(name, expanding=True, type_=column.type))


RUN_EXISTS = select(_RUNS.id).where(_RUNS.id == bindparam("id"))
RUN_BY_ID = select(runs_table).where(_RUNS.id == bindparam("id"))
STOP_REQUESTED = select(_RUNS.stop_requested).where(_RUNS.id == bindparam("id"))
CONTROL = select(_RUNS.stop_requested, _RUNS.claim, _RUNS.status).where(_RUNS.id == bindparam("id"))
LATEST_OF_RUN = select(_LATEST.run_id, _LATEST.name, _LATEST.value).where(_LATEST.run_id == bindparam("id")) \
    .order_by(_LATEST.name)
REQUEST_STOP = update(runs_table).where(_RUNS.id == bindparam("run")).values(stop_requested=1)

@functools.cache
def runs_query(by_status: bool, of_sweep: bool) -> Select:
    """Every column of the runs (in one of the ``:statuses`` if ``by_status``, of sweep ``:sweep_id``
    if ``of_sweep``), newest first."""
    where = [in_list(_RUNS.status, "statuses")] if by_status else []
    where += [_RUNS.sweep_id == bindparam("sweep_id")] if of_sweep else []
    return select(runs_table).where(*where).order_by(_RUNS.id.desc())


@functools.cache
def metrics_query(many: bool, named: bool, since: bool) -> Select:
    """Metric rows of run ``:id`` (of the runs ``:ids`` if ``many``), of the ``:names`` if ``named``,
    after step ``:since`` if ``since``; by run, step and write order (schema's Note [write order])."""
    where = [in_list(_METRICS.run_id, "ids") if many else _METRICS.run_id == bindparam("id")]
    where += [in_list(_METRICS.name, "names")] if named else []
    where += [_METRICS.step > bindparam("since")] if since else []
    order = [_METRICS.run_id] if many else []
    return (select(_METRICS.run_id, _METRICS.step, _METRICS.wall_time, _METRICS.name, _METRICS.value)
            .where(*where).order_by(*order, _METRICS.step, write_order()))


@functools.cache
def series_query(since: bool) -> Select:
    """Series rows of run ``:id`` and name ``:name`` (after step ``:since`` if ``since``), by step and index."""
    where = [_SERIES.run_id == bindparam("id"), _SERIES.name == bindparam("name")]
    where += [_SERIES.step > bindparam("since")] if since else []
    return (select(_SERIES.run_id, _SERIES.step, _SERIES.wall_time, _SERIES.name, _SERIES.idx, _SERIES.value)
            .where(*where).order_by(_SERIES.step, _SERIES.idx))


@functools.cache
def latest_many_query(subset: bool) -> Select:
    """Every run's id (of the runs ``:ids`` if ``subset``) with its latest values, a NULL name for a
    run that has none (schema's Note [latest])."""
    statement = (select(_RUNS.id, _LATEST.name, _LATEST.value)
                 .select_from(runs_table.outerjoin(latest_table, _LATEST.run_id == _RUNS.id))
                 .order_by(_RUNS.id, _LATEST.name))
    return statement.where(in_list(_RUNS.id, "ids")) if subset else statement


@functools.lru_cache(maxsize=128)
def update_by_id(table: Table, columns: tuple[str, ...]) -> Update:
    """``UPDATE table SET column = :new_column, ... WHERE id = :row_id`` for these columns, built once
    for each set of them."""
    return update(table).where(table.c.id == bindparam("row_id")).values(
        {column: bindparam(f"new_{column}", type_=table.c[column].type) for column in columns})


def latest_from_metrics(*where: ColumnElement) -> Insert:
    """INSERT into ``latest_metrics`` the rows recomputed from the ``metrics`` rows ``where`` selects:
    per run and name the row at the highest step, the last written of several (schema's Note [latest])."""
    position = func.row_number().over(partition_by=(_METRICS.run_id, _METRICS.name),
                                      order_by=(_METRICS.step.desc(), write_order().desc()))
    ranked = select(_METRICS.run_id, _METRICS.name, _METRICS.step, _METRICS.value,
                    position.label("position")).where(*where).subquery("ranked")
    latest = select(ranked.c.run_id, ranked.c.name, ranked.c.step, ranked.c.value).where(ranked.c.position == 1)
    return insert(latest_table).from_select(["run_id", "name", "step", "value"], latest)


def upsert(dialect: str, table: Table):
    """The dialect's INSERT that takes ``on_conflict_do_update`` (the same clause on both)."""
    return (sqlite_insert if dialect == "sqlite" else postgresql_insert)(table)
