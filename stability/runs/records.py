"""A stored run, and a stored sweep, as one typed value each: what the store returns to pages, the
CLI, the queue and the sweeps' workers (the one way to read them).

    record = store.record(run_id)          # RunRecord
    record.config.cell.hidden_size         # a RunConfig, parsed once here
    record.latest["val/loss"]              # the value at the run's highest step of every metric
    record.sweep_id, record.params         # a sweep's trial: its sweep and varied values
    [r.id for r in store.active_runs()]    # queued or running
    sweep = store.sweep(sweep_id)          # SweepRecord: sweep.status, sweep.spec["vary"], sweep.counts

A config the current code no longer parses (a renamed option, a field a later
version dropped) does not make the run unreadable: ``config`` is None,
``raw_config`` keeps the stored dict and ``config_problem`` says, in one
line, what is wrong with it.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .status import ACTIVE_STATUSES

if TYPE_CHECKING:
    from ..config import RunConfig


@dataclass(frozen=True)
class RunRecord:
    """One run: its stored columns, its config as a :class:`~stability.config.RunConfig`, and the
    latest value of every scalar metric (``latest``: name -> value at the highest step). An
    ``external`` run (logged by :mod:`stability.watch` from someone's own loop) has no RunConfig:
    ``config`` is None, ``raw_config`` the dict its logger gave, ``config_problem`` None."""

    id: int
    name: str
    status: str
    config: RunConfig | None
    raw_config: Mapping[str, Any]
    config_problem: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    heartbeat: float | None
    device: str | None
    pid: int | None
    total_params: int | None
    recurrent_params: int | None
    metric: str | None                   # the task's metric (mse, accuracy, ...), once a worker built it
    baseline: float | None               # its memoryless baseline, where the task has one
    baseline_label: str | None
    step: int | None                     # the last step a worker reported
    total_steps: int | None              # the budget: as the worker reported it, else the config's
    error: str | None
    resumes: int
    stop_requested: bool
    sweep_id: int | None = None          # the sweep the run is a trial of (store Note [sweeps])
    trial: int | None = None             # its Optuna trial number
    params: Mapping[str, Any] = field(default_factory=dict)  # the sweep's varied values: {"train.lr": 0.001}
    host: str | None = None              # the host of the process that claimed it (pid means something there)
    claim: str | None = None             # the claim's token (execution.lifecycle, Note [claims]); None: unclaimed
    external: bool = False               # logged from someone's own loop (stability.watch): no RunConfig
    owner: str | None = None             # who started it where a classroom names its users; None: the operator
    pid_started: float | None = None     # the claimant process's start time (psutil.Process.create_time)
    latest: Mapping[str, float] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        """Queued or running."""
        return self.status in ACTIVE_STATUSES

    @property
    def cell(self) -> str | None:
        """The cell's name (read from the stored dict when the config no longer parses)."""
        return section_name(self.raw_config, "cell")

    @property
    def task(self) -> str | None:
        """The task's name (read from the stored dict when the config no longer parses)."""
        return section_name(self.raw_config, "task")

    @property
    def progress(self) -> float:
        """``step / total_steps`` in [0, 1]; 0 before the first report or without a budget."""
        return min(1.0, (self.step or 0) / self.total_steps) if self.total_steps else 0.0


@dataclass(frozen=True)
class SweepRecord:
    """One sweep (store Note [sweeps]): its stored columns, ``spec`` parsed from its JSON (the
    :class:`~stability.sweeps.spec.SweepSpec` as a dict: ``SweepSpec.from_dict(sweep.spec)``), and
    ``counts``: run status -> how many of its runs are in it ({} for a sweep with no run yet)."""

    id: int
    name: str
    spec: Mapping[str, Any]
    study: str                           # its Optuna study's name
    status: str                          # one of SWEEP_STATUSES
    created_at: float
    finished_at: float | None
    workers: int | None                  # how many workers its last start asked for
    stop_requested: bool
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        """How many runs the sweep has in the store (trials not asked for yet have none)."""
        return sum(self.counts.values())


def sweep_from_row(row: Mapping[str, Any], counts: Mapping[str, int]) -> SweepRecord:
    """The :class:`SweepRecord` of a ``sweeps`` row (column name -> value, ``spec`` as stored JSON)."""
    return SweepRecord(
        id=int(row["id"]), name=row["name"] or "", spec=MappingProxyType(json.loads(row["spec"])),
        study=row["study"], status=row["status"], created_at=row["created_at"], finished_at=row["finished_at"],
        workers=None if row["workers"] is None else int(row["workers"]),
        stop_requested=bool(row["stop_requested"]), counts=MappingProxyType(dict(counts)))


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


def section_name(config: dict, section: str) -> str | None:
    value = config.get(section)
    return value.get("name") if isinstance(value, dict) else None


def record_from_row(row: Mapping[str, Any], latest: Mapping[str, float]) -> RunRecord:
    """The :class:`RunRecord` of a ``runs`` row (column name -> value, ``config`` as stored JSON)."""
    external = bool(row.get("external"))
    raw, config, problem = parse_config(row["config"], external)
    budget = row["total_steps"]
    if budget is None and config is not None:
        budget = config.train.steps
    return RunRecord(
        id=int(row["id"]), name=row["name"] or "", status=row["status"],
        config=config, raw_config=MappingProxyType(raw), config_problem=problem,
        created_at=row["created_at"], started_at=row["started_at"], finished_at=row["finished_at"],
        heartbeat=row["heartbeat"], device=row["device"], pid=row["pid"],
        total_params=row["total_params"], recurrent_params=row["recurrent_params"],
        metric=row["metric"], baseline=row["baseline"], baseline_label=row["baseline_label"],
        step=row["step"], total_steps=budget, error=row["error"],
        resumes=int(row["resumes"] or 0), stop_requested=bool(row["stop_requested"]),
        sweep_id=row["sweep_id"], trial=row["trial"], params=MappingProxyType(parse_params(row["params"])),
        host=row["host"], claim=row.get("claim"), external=external,
        owner=row.get("owner"), pid_started=row.get("pid_started"), latest=MappingProxyType(dict(latest)))


def parse_config(text: str, external: bool = False) -> tuple[dict, RunConfig | None, str | None]:
    """``(stored dict, RunConfig or None, one-line problem or None)`` of a stored config; an external
    run's (stability.watch) is its logger's own dict, no RunConfig and no problem."""
    from ..config import ConfigError, RunConfig  # config imports torch; the store alone does not need it

    try:
        raw = json.loads(text)
    except (TypeError, ValueError) as error:
        return {}, None, f"the stored config is not JSON ({error})"
    if external:
        return (raw if isinstance(raw, dict) else {}), None, None
    try:
        return raw, RunConfig.from_dict(raw), None
    except (ConfigError, TypeError) as error:
        lines = str(error).strip().splitlines()
        problem = f"the stored config no longer parses: {lines[0] if lines else type(error).__name__}"
        return (raw if isinstance(raw, dict) else {}), None, problem

