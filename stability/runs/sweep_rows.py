"""The sweeps' rows of the run store: ``RunStore.create_sweep``, ``sweep``, ``sweeps`` and
``update_sweep`` (RunStore inherits them from :class:`SweepRows`, which uses its connections).

    sweep_id = store.create_sweep(spec.to_dict(), name="lr check")   # study stability-sweep-<id>
    store.create_run(config, sweep_id=sweep_id, trial=3, params={"train.lr": 0.001})
    store.sweep(sweep_id)   # a SweepRecord (stability.runs.records): .status, .spec, .counts
    store.sweeps()          # every SweepRecord, newest first

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
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.expression import ColumnElement

from .errors import RunNotFound, SweepNotFound
from .queries import update_by_id
from .records import SweepRecord, sweep_from_row
from .schema import as_flag, json_object, runs_table, sweeps_table
from .status import SWEEP_STATUSES


# Fields update_sweep may set, with the Python type each value is coerced to (numpy/torch scalars
# would otherwise fail to bind; flags are stored as 0/1 integers).
_SWEEP_UPDATABLE = {"name": str, "status": str, "finished_at": float, "workers": int, "stop_requested": as_flag}
_SWEEPS, _RUNS = sweeps_table.c, runs_table.c


class SweepRows:
    """The sweep queries of :class:`~stability.runs.store.RunStore` (Note [sweeps]), written on the
    store's write transactions, reads and run ids, which RunStore provides."""

    location: str
    _write: Callable[[], AbstractContextManager[Connection]]
    _query: Callable[..., list[tuple]]  # (statement, params=None)
    _dicts: Callable[..., list[dict]]
    _run_id: Callable[[Any], int]

    def create_sweep(self, spec: dict, name: str = "", study: str | None = None) -> int:
        """A new sweep in status 'running'; its Optuna study's name defaults to
        ``stability-sweep-<id>`` (Note [sweeps]). Returns its id."""
        values = {"name": str(name or ""), "spec": json_object(spec, "spec"), "study": study or "",
                  "status": "running", "created_at": time.time()}
        with self._write() as conn:
            sweep_id = int(conn.execute(insert(sweeps_table).values(values).returning(_SWEEPS.id)).scalar())
            if study is None:
                conn.execute(update(sweeps_table).where(_SWEEPS.id == sweep_id)
                             .values(study=f"stability-sweep-{sweep_id}"))
            return sweep_id

    def sweep(self, sweep_id: int) -> SweepRecord:
        """The sweep as a :class:`~stability.runs.records.SweepRecord`, with the counts of its runs'
        statuses; SweepNotFound (one line) for an id that names none."""
        row_id = self._sweep_id(sweep_id)
        rows = self._dicts(select(sweeps_table).where(_SWEEPS.id == row_id))
        if not rows:
            raise SweepNotFound(f"no sweep with id {sweep_id} in {self.location}")
        return sweep_from_row(rows[0], self._counts(_RUNS.sweep_id == row_id).get(row_id, {}))

    def sweeps(self) -> list[SweepRecord]:
        """Every sweep as :meth:`sweep` gives it, newest first (two queries however many sweeps)."""
        rows = self._dicts(select(sweeps_table).order_by(_SWEEPS.id.desc()))
        counts = self._counts(_RUNS.sweep_id.is_not(None))
        return [sweep_from_row(row, counts.get(row["id"], {})) for row in rows]

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
        values = {f"new_{key}": None if value is None else _SWEEP_UPDATABLE[key](value)
                  for key, value in fields.items()}
        values["row_id"] = self._sweep_id(sweep_id)
        with self._write() as conn:
            if conn.execute(update_by_id(sweeps_table, tuple(sorted(fields))), values).rowcount == 0:
                raise SweepNotFound(f"no sweep with id {sweep_id} in {self.location}")

    def _counts(self, where: ColumnElement) -> dict[int, dict[str, int]]:
        """sweep id -> run status -> how many of the sweep's runs (those ``where`` selects) have it."""
        counts: dict[int, dict[str, int]] = {}
        statement = (select(_RUNS.sweep_id, _RUNS.status, func.count()).where(where)
                     .group_by(_RUNS.sweep_id, _RUNS.status).order_by(_RUNS.sweep_id, _RUNS.status))
        for sweep_id, status, count in self._query(statement):
            counts.setdefault(sweep_id, {})[status] = int(count)
        return counts

    def _sweep_id(self, sweep_id) -> int:
        try:
            return self._run_id(sweep_id)
        except RunNotFound:
            raise SweepNotFound(f"no sweep with id {sweep_id} in {self.location}") from None
