"""A sweep: one base config, some varied fields, N seeds; an Optuna study whose trials are runs.

    spec = build_spec(base, ["lr=1e-4:1e-1:4:log", "cell=rnn,spectral"], seeds=3)  # SweepError: one line
    spec.size(), spec.describe()                # 24 runs; "grid: train.lr (4) x cell (2) x 3 seeds = 24 runs ..."
    study = create_study(spec)                  # storage=None: in memory; an RDB URL is passed to Optuna
    while (asked := next_trial(study, spec)) is not None:
        trial, config = asked; tell(study, trial, final_val_loss(train(config)))

This is the engine's first slice of issue 12 ("Hyperparameter sanity checks: sweeps"): what comes
next builds on it and keeps the issue's CLI contract, ``python -m stability sweep [train flags]
--vary FIELD=V1,V2,... --seeds N [--sampler grid|random|tpe --trials N] [--prune] [--workers K]
[--background]``, with bad ``--vary`` input exiting 2 with one line before anything is stored.

The text of one ``--vary``:

- ``FIELD=V1,V2,...``: these values, converted to the field's type (a comma inside ``[...]`` does not
  split, so ``cell.factor_sizes=[2,2],[4,4]`` has two values; ``none`` is None where None is allowed);
- ``FIELD=LOW:HIGH:COUNT`` (int and float fields): COUNT values evenly spaced from LOW to HIGH, both
  included; ``FIELD=LOW:HIGH:COUNT:log`` spaces them evenly in log (``lr=1e-4:1e-1:4:log`` gives
  1e-4, 1e-3, 1e-2, 1e-1); an int field's values are rounded, repeats dropped;
- ``FIELD=LOW:HIGH`` or ``FIELD=LOW:HIGH:log``, random and TPE samplers only: any value in
  [LOW, HIGH] (log-uniform with ``log``), an Optuna Int/FloatDistribution.

FIELD is a config path: ``cell`` (the cell's name), ``cell.hidden_size``, ``cell.OPTION`` (an option
of the cell, or of every varied cell: ``cell.m1``, ``cell.nonlinearity``, ``cell.h0``,
``cell.h0_noise_std``), ``task``, ``task.OPTION`` (``task.seq_len``), ``train.FIELD`` or a bare train
field (``lr``, ``steps``, ``optimizer``, ``clip_grad_norm``, ...). Types, choices and ranges come
from :class:`~stability.config.TrainConfig`'s annotations and from ``cells.describe(name).options``
/ ``tasks.describe(name).options``; every value is checked by ``RunConfig.validate()`` and
``check_buildable()`` applied to the base config, and so is every combination of the varied values
that a builder reads (the cell, the task, and the train fields that size a run: every field but
:data:`TRAINING_ONLY`); each distinct config is checked once.

Seeds: a sweep runs each setting with seeds ``base.train.seed + i`` for ``i < seeds``. In a grid
study the seed is a grid parameter (``train.seed``); with random and TPE sampling each sampled
setting is asked once and the study enqueues the same setting for the other seeds. The objective is
the run's final ``val/loss`` (minimised). Optuna is imported only by the functions that need it.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import os
import socket
import time
import traceback
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from . import metric_names
from .config import RunConfig, TrainConfig

if TYPE_CHECKING:
    import pandas as pd

SAMPLERS = ("grid", "random", "tpe")
MAX_RUNS = 10_000  # a grid over more runs needs allow_large=True (the CLI's --yes)
SEED_PARAM = "train.seed"  # the seed's name among a grid trial's params
SWEEP_ATTR = "sweep"  # the study's user attribute holding SweepSpec.to_dict()
# Train fields that no builder reads: a combination of their values needs no check beyond each value's.
TRAINING_ONLY = frozenset({"optimizer", "lr", "lr_schedule", "lr_step_size", "lr_gamma", "steps",
                           "clip_grad_norm", "weight_decay", "log_every", "eval_every", "probe_every",
                           "freeze_recurrent"})
_NUMERIC = ("int", "float")
_NONE_TEXTS = ("none", "null")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


class SweepError(ValueError):
    """A sweep cannot be run as given; the one-line message names the field and the problem."""


# ---------------------------------------------------------------------------------- fields
@dataclass(frozen=True)
class _Field:
    path: str            # canonical: cell, cell.hidden_size, cell.m1, task, task.seq_len, train.lr
    kind: str            # int, float, bool, str, or the annotation of anything else (parsed as JSON)
    optional: bool = False
    choices: tuple | None = None


def _train_field(name: str) -> _Field | None:
    for item in fields(TrainConfig):
        if item.name == name:
            parts = [part.strip() for part in str(item.type).split("|")]
            kind = " | ".join(part for part in parts if part != "None")
            return _Field(f"train.{name}", kind, optional="None" in parts)
    return None


def _option_field(section: str, option: str, names: list[str]) -> _Field:
    """Option ``option`` of the cells (tasks) ``names``: its type from the first that declares it."""
    from . import cells, tasks

    registry = cells if section == "cell" else tasks
    for name in names:
        try:
            info = registry.describe(name).option(option)
        except ValueError:
            continue
        return _Field(f"{section}.{option}", info.base_type, info.optional, info.choices)
    valid = list(dict.fromkeys(o.name for name in names for o in _described(registry, name)))
    raise SweepError(f"vary {section}.{option}: {section} {' / '.join(names)} has no option {option!r}; "
                     f"valid options: {', '.join(valid) or 'none'}")


def _described(registry, name):
    try:
        return registry.describe(name).options
    except ValueError:
        return ()


def resolve_field(name: str, base: RunConfig, cells_varied: list[str] | None = None) -> _Field:
    """The field a ``--vary`` FIELD names, with its type; SweepError for an unknown one."""
    path = name.strip().replace("-", "_")
    section, dot, rest = path.partition(".")
    if path in ("cell", "cell.name"):
        return _Field("cell", "str")
    if path in ("task", "task.name"):
        return _Field("task", "str")
    if path in ("hidden_size", "cell.hidden_size"):
        return _Field("cell.hidden_size", "int")
    if path in ("seed", "train.seed"):
        raise SweepError(f"vary {name}: the seeds come from --seeds N (from the base seed up), not from --vary")
    if section == "cell" and dot and rest:
        return _option_field("cell", rest, cells_varied or [base.cell.name])
    if section == "task" and dot and rest:
        return _option_field("task", rest, [base.task.name])
    found = _train_field(rest if section == "train" and dot else path)
    if found is None or path == "train":
        trains = ", ".join(f.name for f in fields(TrainConfig) if f.name != "seed")
        raise SweepError(f"vary {name}: unknown field; valid: cell, cell.hidden_size, cell.OPTION, task, "
                         f"task.OPTION, or a train field ({trains})")
    return found


# ---------------------------------------------------------------------------------- values
def convert(raw: Any, spec: _Field) -> Any:
    """``raw`` (a text from the command line, or a value read back from JSON) as ``spec``'s type."""
    text = raw.strip() if isinstance(raw, str) else None
    if spec.optional and (raw is None or (text is not None and text.lower() in _NONE_TEXTS)):
        return None
    if text == "":
        raise SweepError(f"vary {spec.path}: an empty value")
    value = _typed(raw, text, spec)
    if spec.choices and value not in spec.choices:
        raise SweepError(f"vary {spec.path}: {value!r} is not one of {', '.join(map(str, spec.choices))}")
    return value


def _typed(raw: Any, text: str | None, spec: _Field) -> Any:
    def refuse(what):
        return SweepError(f"vary {spec.path}: {raw!r} is not {what}")

    if spec.kind == "int":
        number = _number(raw, text)
        if number is None or not float(number).is_integer():
            raise refuse("an integer")
        return int(number)
    if spec.kind == "float":
        number = _number(raw, text)
        if number is None or not math.isfinite(number):
            raise refuse("a finite number")
        return float(number)
    if spec.kind == "bool":
        if isinstance(raw, bool):
            return raw
        if text is not None and text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise refuse("true or false")
    if spec.kind == "str":
        if text is None:
            raise refuse("a name")
        return text
    if text is None:
        return raw
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _number(raw: Any, text: str | None) -> float | int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, (int, float)):
        return raw
    try:
        return int(text) if text is not None and text.lstrip("+-").isdigit() else float(text)
    except (TypeError, ValueError):
        return None


def _split(text: str) -> list[str]:
    """``text`` split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    return parts + [text[start:]]


def spaced(low: float, high: float, count: int, log: bool) -> list[float]:
    """``count`` values from ``low`` to ``high`` (both included), evenly spaced, in log if ``log``."""
    if count == 1:
        return [low]
    if log:
        return [low] + [low * (high / low) ** (i / (count - 1)) for i in range(1, count - 1)] + [high]
    return [low] + [low + (high - low) * i / (count - 1) for i in range(1, count - 1)] + [high]


# ---------------------------------------------------------------------------------- one --vary
@dataclass(frozen=True)
class Vary:
    """One varied field: its listed values, or (random/TPE only) a range [low, high] to sample."""

    field: str
    kind: str
    values: tuple = ()
    low: float | None = None
    high: float | None = None
    log: bool = False
    optional: bool = False

    @property
    def continuous(self) -> bool:
        return not self.values

    def points(self) -> tuple:
        """The values, or a continuous range's two ends (what the checks try)."""
        return self.values or (self.low, self.high)

    def choices(self) -> list:
        """The values as Optuna stores a categorical choice (None, bool, int, float, str; else JSON)."""
        return [v if v is None or isinstance(v, (bool, int, float, str)) else json.dumps(v) for v in self.values]

    def decode(self, param: Any) -> Any:
        """The typed value of an Optuna param of this field."""
        if self.continuous:
            return int(param) if self.kind == "int" else float(param)
        return self.values[self.choices().index(param)]

    def distribution(self):
        """The Optuna distribution this field's params are drawn from."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if not self.continuous:
            return CategoricalDistribution(self.choices())
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log)
        return FloatDistribution(self.low, self.high, log=self.log)

    def describe(self) -> str:
        if self.continuous:
            return f"{self.field} in [{self.low:g}, {self.high:g}]{' log' if self.log else ''}"
        return f"{self.field} ({len(self.values)})"

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "kind": self.kind, "values": [_jsonable(v) for v in self.values],
                "low": self.low, "high": self.high, "log": self.log, "optional": self.optional}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Vary:
        spec = _Field(data["field"], data["kind"], bool(data.get("optional", False)))
        return cls(field=spec.path, kind=spec.kind, values=tuple(convert(v, spec) for v in data.get("values", ())),
                   low=data.get("low"), high=data.get("high"), log=bool(data.get("log", False)),
                   optional=spec.optional)

    @classmethod
    def parse(cls, text: str, base: RunConfig, cells_varied: list[str] | None = None) -> Vary:
        """``FIELD=V1,V2,...`` or ``FIELD=LOW:HIGH[:COUNT][:log]`` (module docstring); the values
        are typed, not yet checked against the config (:func:`parse_varies` does that)."""
        name, sep, rest = text.partition("=")
        if not sep or not name.strip():
            raise SweepError(f"vary {text!r}: expected FIELD=V1,V2,... or FIELD=LOW:HIGH:COUNT[:log]")
        spec = resolve_field(name, base, cells_varied)
        if not rest.strip():
            raise SweepError(f"vary {spec.path}: no values")
        if spec.kind in _NUMERIC and ":" in rest:
            return _parse_range(spec, rest)
        values = tuple(convert(item, spec) for item in _split(rest))
        return _listed(spec, values)


def _listed(spec: _Field, values: tuple) -> Vary:
    seen = []
    for value in values:
        if value in seen:
            raise SweepError(f"vary {spec.path}: {value!r} is listed twice")
        seen.append(value)
    return Vary(spec.path, spec.kind, values, optional=spec.optional)


def _parse_range(spec: _Field, text: str) -> Vary:
    parts = [part.strip() for part in text.split(":")]
    log = parts[-1].lower() == "log"
    parts = parts[:-1] if log else parts
    if len(parts) not in (2, 3):
        raise SweepError(f"vary {spec.path}: a range is LOW:HIGH:COUNT, LOW:HIGH:COUNT:log, or (random/tpe) "
                         f"LOW:HIGH[:log]; got {text!r}")
    low, high = (convert(part, spec) for part in parts[:2])
    if not low < high:
        raise SweepError(f"vary {spec.path}: a range needs LOW < HIGH; got {low!r}:{high!r}")
    if log and low <= 0:
        raise SweepError(f"vary {spec.path}: a log range needs LOW > 0; got {low!r}")
    if len(parts) == 2:
        return Vary(spec.path, spec.kind, (), low=low, high=high, log=log, optional=spec.optional)
    count = convert(parts[2], _Field(f"{spec.path} COUNT", "int"))
    if count < 2:
        raise SweepError(f"vary {spec.path}: a range's COUNT must be at least 2; got {count}")
    values = [float(f"{value:.12g}") for value in spaced(float(low), float(high), count, log)]
    if spec.kind == "int":
        values = list(dict.fromkeys(round(value) for value in values))
    return Vary(spec.path, spec.kind, tuple(values), optional=spec.optional)


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# ---------------------------------------------------------------------------------- configs
def apply(base: RunConfig, setting: dict[str, Any]) -> RunConfig:
    """A new config: ``base`` with each field of ``setting`` (canonical path -> value) set.

    Where the setting changes the cell, the base cell's options that the new cell does not declare
    are dropped (``--cell spectral --cell-option m1=16 --vary cell=rnn,spectral``: m1 is
    spectral's), as are a changed task's; an option the setting names itself is always kept."""
    from . import cells, tasks

    data = base.to_dict()
    for path, value in setting.items():
        section, _, rest = path.partition(".")
        if not rest:
            data[section]["name"] = value
        elif section == "train" or rest == "hidden_size":
            data[section][rest] = value
        else:
            data[section]["options"][rest] = value
    for section, registry, before in (("cell", cells, base.cell.name), ("task", tasks, base.task.name)):
        name = data[section]["name"]
        if name != before:
            try:
                declared = {option.name for option in registry.describe(name).options}
            except ValueError:  # an unknown name: the checks say so
                continue
            named = {path.partition(".")[2] for path in setting if path.startswith(f"{section}.")}
            data[section]["options"] = {key: value for key, value in data[section]["options"].items()
                                        if key in declared or key in named}
    return RunConfig.from_dict(data)


class _Checks:
    """``validate()`` and ``check_buildable()`` of each distinct config, once (keyed by its JSON)."""

    def __init__(self):
        self.problems: dict[str, str | None] = {}

    def problem(self, config: RunConfig) -> str | None:
        key = config.to_json()
        if key not in self.problems:
            try:
                config.validate()
                config.check_buildable()
                self.problems[key] = None
            except ValueError as error:
                self.problems[key] = " ".join(str(error).split())
        return self.problems[key]


def field_label(path: str) -> str:
    """``train.lr`` -> ``lr``; every other path as it is (``cell``, ``cell.m1``, ``task.seq_len``)."""
    return path.removeprefix("train.")


def shown(value: Any) -> str:
    """A value as run names and labels show it: floats in ``%g``, lists as JSON."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


def _with_cell_for(base: RunConfig, vary: Vary, cells_varied: list[str]) -> dict[str, Any]:
    """The cell to check a cell option's values on: the base cell, else a varied cell declaring it."""
    from . import cells

    if not vary.field.startswith("cell.") or vary.field == "cell.hidden_size" or not cells_varied:
        return {}
    option = vary.field.partition(".")[2]
    for name in [base.cell.name, *cells_varied]:
        if option in cells.options(name):
            return {} if name == base.cell.name else {"cell": name}
    return {}


def parse_varies(texts: list[str], base: RunConfig) -> list[Vary]:
    """Each ``--vary`` text as a :class:`Vary`, typed (``cell`` first, so a cell option is looked
    up on the varied cells); SweepError for a field named twice. Values are checked by
    :meth:`SweepSpec.check`."""
    texts = list(texts)
    is_cell = [text.partition("=")[0].strip() in ("cell", "cell.name") for text in texts]
    cell_varies = [Vary.parse(text, base) for text, cell in zip(texts, is_cell) if cell]
    cells_varied = list(cell_varies[0].values) if cell_varies else None
    parsed = iter(cell_varies)
    varies = [next(parsed) if cell else Vary.parse(text, base, cells_varied) for text, cell in zip(texts, is_cell)]
    counts = {}
    for vary in varies:
        counts[vary.field] = counts.get(vary.field, 0) + 1
        if counts[vary.field] > 1:
            raise SweepError(f"vary {vary.field}: named twice; give all its values in one --vary")
    return varies


# ---------------------------------------------------------------------------------- the sweep
@dataclass
class SweepSpec:
    """What a sweep runs: ``base`` with the ``vary`` fields varied, each setting with ``seeds`` seeds
    (``base.train.seed``, +1, ...); ``sampler`` grid (every setting), random or tpe (``trials``
    settings); ``prune`` stops hopeless trials early (Optuna's MedianPruner)."""

    base: RunConfig
    vary: list[Vary] = field(default_factory=list)
    seeds: int = 1
    sampler: str = "grid"
    trials: int | None = None
    prune: bool = False

    def validate(self, allow_large: bool = False) -> SweepSpec:
        """The sweep's shape (no config is built); SweepError on the first problem. Returns self."""
        if self.sampler not in SAMPLERS:
            raise SweepError(f"sampler must be one of {', '.join(SAMPLERS)}; got {self.sampler!r}")
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise SweepError(f"seeds must be an integer >= 1; got {self.seeds!r}")
        if self.sampler == "grid":
            if self.trials is not None:
                raise SweepError("trials is for --sampler random or tpe; a grid runs every setting")
            for vary in self.vary:
                if vary.continuous:
                    raise SweepError(f"vary {vary.field}: a range without COUNT is sampled, for --sampler random "
                                     f"or tpe; a grid needs LOW:HIGH:COUNT")
        elif isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise SweepError(f"--sampler {self.sampler} needs --trials N (an integer >= 1); got {self.trials!r}")
        if len({vary.field for vary in self.vary}) < len(self.vary):
            raise SweepError("a field is varied twice; give all its values in one --vary")
        if self.size() > MAX_RUNS and not allow_large:
            raise SweepError(f"this sweep is {self.size():,} runs, over {MAX_RUNS:,}; pass --yes to run it anyway")
        return self

    def check(self, allow_large: bool = False) -> SweepSpec:
        """:meth:`validate`, then the base config, every varied value applied to it, and every
        combination of the values that builders read (not :data:`TRAINING_ONLY`), each distinct
        config checked once by ``validate()`` and ``check_buildable()``. Returns self."""
        self.validate(allow_large)
        checks = _Checks()
        problem = checks.problem(self.base)
        if problem:
            raise SweepError(f"the base config: {problem}")
        cells_varied = next((list(v.values) for v in self.vary if v.field == "cell"), [])
        for vary in self.vary:
            context = _with_cell_for(self.base, vary, cells_varied)
            for value in vary.points():
                problem = checks.problem(apply(self.base, {**context, vary.field: value}))
                if problem:
                    raise SweepError(f"vary {vary.field}={shown(value)}: {problem}")
        built = [vary for vary in self.vary if vary.field.removeprefix("train.") not in TRAINING_ONLY]
        for values in itertools.product(*(vary.points() for vary in built)):
            combination = dict(zip((vary.field for vary in built), values))
            problem = checks.problem(apply(self.base, combination))
            if problem:
                described = ", ".join(f"{path}={shown(value)}" for path, value in combination.items())
                raise SweepError(f"vary {described}: {problem}")
        return self

    def seed_values(self) -> list[int]:
        return [self.base.train.seed + index for index in range(self.seeds)]

    def size(self) -> int:
        """The number of runs: every setting (grid) or ``trials`` settings, times ``seeds``."""
        if self.sampler != "grid":
            return (self.trials or 0) * self.seeds
        return math.prod(len(vary.values) for vary in self.vary) * self.seeds

    def settings(self) -> list[dict[str, Any]]:
        """The grid's settings in order (the last field varying fastest), each ``{field: value}``."""
        if any(vary.continuous for vary in self.vary):
            raise SweepError("a sampled range has no list of settings; only a grid has")
        fields_ = [vary.field for vary in self.vary]
        return [dict(zip(fields_, values)) for values in itertools.product(*(vary.values for vary in self.vary))]

    def config_for(self, setting: dict[str, Any], seed: int) -> RunConfig:
        """The run of one trial: ``base`` with ``setting`` applied, ``train.seed = seed``, and a name
        naming the varied values."""
        if set(setting) != {vary.field for vary in self.vary}:
            raise SweepError(f"a setting gives {', '.join(setting) or 'nothing'}; this sweep varies "
                             f"{', '.join(vary.field for vary in self.vary) or 'nothing'}")
        config = apply(self.base, {**setting, SEED_PARAM: seed})
        config.name = " ".join(part for part in (self.base.name, setting_label(setting), f"seed={seed}") if part)
        return config

    def describe(self) -> str:
        """One line: sampler, varied fields, seeds, runs, task and objective."""
        over = " x ".join(vary.describe() for vary in self.vary) or "the base config"
        trials = f"{self.trials} trials over " if self.sampler != "grid" else ""
        return (f"{self.sampler}: {trials}{over} x {self.seeds} seed{'s' if self.seeds > 1 else ''} = "
                f"{self.size():,} runs of {self.base.cell.name} on {self.base.task.name}; "
                f"objective final {objective_name(self)} ({direction(self)}d)")

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base.to_dict(), "vary": [vary.to_dict() for vary in self.vary], "seeds": self.seeds,
                "sampler": self.sampler, "trials": self.trials, "prune": self.prune}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepSpec:
        try:
            return cls(base=RunConfig.from_dict(data["base"]), vary=[Vary.from_dict(v) for v in data["vary"]],
                       seeds=data["seeds"], sampler=data["sampler"], trials=data.get("trials"),
                       prune=bool(data.get("prune", False)))
        except (KeyError, TypeError) as error:
            raise SweepError(f"not a sweep description: {type(error).__name__} {error}") from None


def build_spec(base: RunConfig, vary: list[str], *, seeds: int = 1, sampler: str = "grid",
               trials: int | None = None, prune: bool = False, allow_large: bool = False) -> SweepSpec:
    """The checked sweep of the CLI's flags (``--vary`` texts, ``--seeds``, ...); SweepError (one
    line) on the first problem, before anything is stored or trained."""
    return SweepSpec(base, parse_varies(vary, base), seeds=seeds, sampler=sampler, trials=trials,
                     prune=prune).check(allow_large)


# ---------------------------------------------------------------------------------- the study
def objective_name(spec: SweepSpec) -> str:
    """The metric whose final value a trial reports: the validation loss."""
    return metric_names.VAL_LOSS


def direction(spec: SweepSpec) -> str:
    """``"minimize"`` for a loss, ``"maximize"`` for an accuracy."""
    return "maximize" if objective_name(spec).endswith("accuracy") else "minimize"


def make_sampler(spec: SweepSpec):
    """The Optuna sampler of ``spec``, seeded with the base seed (the same sweep asks the same trials)."""
    import optuna

    seed = spec.base.train.seed
    if spec.sampler == "grid":
        space = {vary.field: vary.choices() for vary in spec.vary}
        return optuna.samplers.GridSampler({**space, SEED_PARAM: spec.seed_values()}, seed=seed)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def create_study(spec: SweepSpec, storage: str | None = None, study_name: str | None = None, *,
                 load_if_exists: bool = False):
    """A new ``optuna.Study`` for ``spec`` (or the existing one named ``study_name`` with
    ``load_if_exists``); ``storage`` is Optuna's (an RDB URL, or None: in memory). The spec is kept
    as the study's user attribute ``"sweep"`` (:func:`load_study` reads it)."""
    import optuna

    spec.validate(allow_large=True)
    pruner = optuna.pruners.MedianPruner() if spec.prune else optuna.pruners.NopPruner()
    study = optuna.create_study(storage=storage, sampler=make_sampler(spec), pruner=pruner,
                                study_name=study_name, direction=direction(spec), load_if_exists=load_if_exists)
    if SWEEP_ATTR not in study.user_attrs:
        study.set_user_attr(SWEEP_ATTR, spec.to_dict())
    return study


def load_study(study_name: str, storage: str):
    """``(study, spec)`` of a sweep's study stored in ``storage``, with its sampler and pruner."""
    import optuna

    stored = optuna.load_study(study_name=study_name, storage=storage)
    if SWEEP_ATTR not in stored.user_attrs:
        raise SweepError(f"study {study_name!r} is not a sweep (no {SWEEP_ATTR!r} attribute)")
    spec = SweepSpec.from_dict(stored.user_attrs[SWEEP_ATTR])
    return create_study(spec, storage, study_name, load_if_exists=True), spec


def next_trial(study, spec: SweepSpec):
    """``(trial, config)``: the study's next trial (``study.ask()``) and the run it stands for, or
    None when the sweep has asked all its runs. An enqueued (waiting) trial is always taken first:
    random and TPE sampling enqueue each new setting's other seeds. Report the run's final
    :func:`objective_name` with :func:`tell`."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    if not any(t.state == TrialState.WAITING for t in trials) and len(trials) >= spec.size():
        return None
    distributions = {vary.field: vary.distribution() for vary in spec.vary}
    if spec.sampler == "grid":
        distributions[SEED_PARAM] = CategoricalDistribution(spec.seed_values())
    trial = study.ask(distributions)
    setting = setting_of(trial.params, spec)
    if spec.sampler == "grid":
        seed = trial.params[SEED_PARAM]
    else:
        seed = trial.user_attrs.get("seed")
        if seed is None:
            seed = spec.seed_values()[0]
            for other in spec.seed_values()[1:]:
                study.enqueue_trial(trial.params, user_attrs={"seed": other})
    trial.set_user_attr("seed", seed)
    return trial, spec.config_for(setting, seed)


def tell(study, trial, value: float | None = None, state=None):
    """``study.tell(trial, value, state)``, also for a grid's last trial: Optuna's GridSampler then
    calls ``study.stop()``, which raises RuntimeError outside ``study.optimize`` (a documented
    limit of ask-and-tell with GridSampler; the trial's result is stored before it raises).
    Returns the finished ``FrozenTrial``."""
    import optuna

    try:
        return study.tell(trial, value, state)
    except RuntimeError:
        sampler = study.sampler
        if not (isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(study)):
            raise
        number = trial if isinstance(trial, int) else trial.number
        return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


def setting_of(params: dict[str, Any], spec: SweepSpec) -> dict[str, Any]:
    """The typed setting (``{field: value}``) of a trial's Optuna ``params``."""
    return {vary.field: vary.decode(params[vary.field]) for vary in spec.vary}


# ---------------------------------------------------------------------------------- running a sweep
# Note [Sweep lifecycle]
#     A sweep is a row of the store's ``sweeps`` table (its spec, its Optuna study's name, a status)
#     and an Optuna study in the same database (``store.url``: the SQLite file or the PostgreSQL
#     database), so one URL carries everything and every machine pointed at it sees the same sweep.
#     Workers (:func:`work`, one process each, started by :func:`start_sweep`, :func:`resume_sweep`
#     or :func:`join_sweep` through :mod:`stability.runner`) loop: under the sweep's lock
#     (Note [Claiming trials]) take the next job, train it in-process with ``train_run``, report
#     the run's final objective to its trial, until the study has asked all its runs or the sweep's
#     stop flag is set.  Every trial is an ordinary run of the store, tagged with the sweep's id,
#     the trial's number and the varied values (``runs.sweep_id``, ``trial``, ``params``).
#
#     A trial's state says what became of its run: COMPLETE (the run completed; its value is the
#     final objective), PRUNED (Optuna's pruner stopped it: run status ``pruned``), FAIL (the run
#     diverged or failed), RUNNING (being trained, or stopped or interrupted: not yet told).  A run
#     that was stopped stays its trial's run: resuming the sweep requeues it (status ``queued``,
#     never taken by the ordinary run queue, which skips sweep runs) and a worker continues it from
#     its checkpoint, exactly (``train_run(..., resume=True)``), or from step 0 with its rows
#     discarded where this machine has no checkpoint of it (a run started on another machine, or
#     stopped before its first checkpoint): training is seeded, so the rows come back the same.
#     A run whose worker died (its pid gone on this host, or no heartbeat for
#     :data:`SHARED_STALE_S` from another host) is taken over the same way by any live worker.
#
# Note [Claiming trials]
#     Two workers must never train the same setting and seed, and a random or TPE sweep must ask
#     exactly its budget of trials.  Optuna pops an enqueued trial atomically on PostgreSQL
#     (``SELECT ... FOR UPDATE``) but not on SQLite (pysqlite runs the read outside the write's
#     transaction), and a GridSampler asked from two processes at once may hand both the same grid
#     point (a documented limit of parallel grid search); so every claim (requeued run, orphaned run
#     or new trial, and the new run's row) happens under one lock per sweep: an exclusive ``flock``
#     on a file in ``store.home`` for SQLite (one machine), a PostgreSQL session advisory lock for a
#     shared store.  Training happens outside the lock.
SHARED_STALE_S = 600.0  # a run of a shared store with no heartbeat from its host for this long is orphaned
_LOCK_SPACE = 0x5357  # PostgreSQL advisory locks of sweeps: (space, sweep id)


def storage(store):
    """The Optuna RDB storage of ``store``'s database (a sweep's study lives beside its runs)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not store.shared:  # SQLite: wait for the writer (WAL) instead of failing at once
        engine = {"connect_args": {"timeout": 60}}
    else:
        engine = {"pool_pre_ping": True}
    return optuna.storages.RDBStorage(store.url, engine_kwargs=engine)


@contextlib.contextmanager
def sweep_lock(store, sweep_id: int):
    """Hold the sweep's claim lock for the ``with`` block (Note [Claiming trials])."""
    if not store.shared:
        import fcntl

        path = store.home / f"sweep-{int(sweep_id)}.lock"
        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    import sqlalchemy

    engine = _lock_engine(store.url)
    with engine.connect() as connection:
        connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:space, :id)"),
                           {"space": _LOCK_SPACE, "id": int(sweep_id)})
        try:
            yield
        finally:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:space, :id)"),
                               {"space": _LOCK_SPACE, "id": int(sweep_id)})
            connection.commit()


@functools.lru_cache(maxsize=4)
def _lock_engine(url: str):
    import sqlalchemy

    return sqlalchemy.create_engine(url, pool_size=1, max_overflow=0, pool_pre_ping=True)


@dataclass
class Job:
    """A run a worker is to train: a new trial's, or one to continue (``resume``)."""

    run_id: int
    trial: int
    config: RunConfig
    resume: bool


def start_sweep(spec: SweepSpec, store_location=None, *, workers: int = 1, name: str = "") -> int:
    """Store the sweep and its Optuna study, launch ``workers`` background worker processes, return
    the sweep's id (SweepError, one line, when it cannot start; nothing is stored then)."""
    from . import runner
    from .store import RunStore

    spec.validate(allow_large=True)
    workers = check_workers(workers)
    with RunStore(store_location) as store:
        sweep_id = store_sweep(store, spec, workers=workers, name=name)
        runner.launch_sweep_workers(store, sweep_id, workers)
    return sweep_id


def store_sweep(store, spec: SweepSpec, *, workers: int = 1, name: str = "") -> int:
    """The sweep's row and its Optuna study in ``store``'s database, no worker started: what
    :func:`start_sweep` launches workers on, and what a process that runs :func:`work` itself (a
    preset, stability.reproduce) starts from. Returns the sweep's id."""
    sweep_id = store.create_sweep(spec.to_dict(), name=name or spec.base.name)
    create_study(spec, storage(store), store.sweep(sweep_id)["study"])
    store.update_sweep(sweep_id, workers=workers)
    return sweep_id


def check_workers(workers) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SweepError(f"workers must be an integer >= 1; got {workers!r}")
    return workers


def stop_sweep(sweep_id: int, store_location=None, timeout: float = 10.0) -> str:
    """Stop a sweep: no new trials, and its runs in progress stop (status ``stopped``, rows and
    checkpoints kept, their trials left open for :func:`resume_sweep`). Returns the sweep's status."""
    from . import runner
    from .store import ACTIVE_STATUSES, RunStore

    with RunStore(store_location) as store:
        sweep = store.sweep(sweep_id)
        if sweep["status"] == "completed":
            return "completed"
        store.update_sweep(sweep_id, stop_requested=True)
        for run in store.records(ACTIVE_STATUSES, sweep_id=sweep_id):
            store.request_stop(run.id)
        deadline = time.monotonic() + timeout
        while store.records(ACTIVE_STATUSES, sweep_id=sweep_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        lingering = store.records(ACTIVE_STATUSES, sweep_id=sweep_id)
        if lingering:
            runner.terminate_sweep_workers(store, sweep_id)
            for run in store.records(ACTIVE_STATUSES, sweep_id=sweep_id):
                store.set_status(run.id, "stopped", error=f"its sweep was stopped; the worker did not stop within "
                                                          f"{timeout:g} s")
        if store.sweep(sweep_id)["status"] != "completed":
            store.update_sweep(sweep_id, status="stopped", finished_at=time.time())
        return store.sweep(sweep_id)["status"]


def resume_sweep(sweep_id: int, store_location=None, *, workers: int = 1) -> int:
    """Continue a stopped sweep (or one whose workers all died): its stopped and interrupted runs are
    requeued to continue from their checkpoints and the trials it has not asked yet follow; launches
    ``workers`` workers. Returns how many runs were requeued. SweepError when nothing is left."""
    from . import runner
    from .store import RunStore

    workers = check_workers(workers)
    with RunStore(store_location) as store:
        sweep = store.sweep(sweep_id)
        spec = SweepSpec.from_dict(sweep["spec"])
        if sweep["status"] == "completed":
            raise SweepError(f"sweep {sweep_id} is completed; there is nothing to resume")
        if sweep["status"] == "running" and workers_alive(store, sweep_id):
            raise SweepError(f"sweep {sweep_id} is running; add workers with `python -m stability sweeps join "
                             f"{sweep_id}`")
        study = create_study(spec, storage(store), sweep["study"], load_if_exists=True)
        with sweep_lock(store, sweep_id):
            requeued = _requeue(store, study, sweep_id)
            if not requeued and _asked(study) >= spec.size() and not _open_trials(study):
                store.update_sweep(sweep_id, status="completed", stop_requested=False)
                raise SweepError(f"sweep {sweep_id} has run all its {spec.size()} runs; there is nothing to resume")
            store.update_sweep(sweep_id, status="running", stop_requested=False, finished_at=None, workers=workers)
        runner.launch_sweep_workers(store, sweep_id, workers)
        return requeued


def join_sweep(sweep_id: int, store_location=None, *, workers: int = 1, gpus: list[str] | None = None) -> list:
    """Add ``workers`` workers on this machine to a running sweep (one per GPU of ``gpus``, each
    seeing only its own through ``CUDA_VISIBLE_DEVICES``). Returns the worker processes."""
    from . import runner
    from .store import RunStore

    with RunStore(store_location) as store:
        sweep = store.sweep(sweep_id)
        if sweep["status"] != "running":
            verb = f"resume it with `python -m stability sweeps resume {sweep_id}`" if sweep["status"] == "stopped" \
                else "there is nothing left to run"
            raise SweepError(f"sweep {sweep_id} is {sweep['status']}; {verb}")
        if gpus:
            workers = len(gpus)
        return runner.launch_sweep_workers(store, sweep_id, check_workers(workers), gpus=gpus)


def workers_alive(store, sweep_id: int) -> bool:
    """Whether any worker still works on the sweep: a run of it in progress whose worker lives."""
    from .store import ACTIVE_STATUSES

    return any(not _orphaned(run) for run in store.records(ACTIVE_STATUSES, sweep_id=sweep_id))


def work(store, sweep_id: int, *, max_runs: int | None = None) -> int:
    """The worker loop (Note [Sweep lifecycle]): claim a job, train it, report it; until nothing is
    left, the sweep is stopped, or ``max_runs`` runs were trained. Returns the number trained."""
    sweep = store.sweep(sweep_id)
    spec = SweepSpec.from_dict(sweep["spec"])
    study = create_study(spec, storage(store), sweep["study"], load_if_exists=True)
    trained = 0
    while max_runs is None or trained < max_runs:
        if store.sweep(sweep_id)["stop_requested"]:
            break
        with sweep_lock(store, sweep_id):
            job = claim(store, study, spec, sweep_id)
        if job is None:
            break
        train_trial(store, study, spec, job)
        trained += 1
    with sweep_lock(store, sweep_id):
        _settle(store, study, spec, sweep_id)
    return trained


def claim(store, study, spec: SweepSpec, sweep_id: int) -> Job | None:
    """Under the sweep's lock: a requeued run, else an orphaned one, else a new trial's new run,
    claimed by this process (pid and host); None when the sweep has nothing left to start."""
    from .store import ACTIVE_STATUSES

    open_trials = _open_trials(study)
    runs = sorted(store.records(sweep_id=sweep_id), key=lambda run: run.id)
    taken = next((run for run in runs if run.trial in open_trials and run.status == "queued" and run.pid is None),
                 None)
    if taken is None:
        taken = next((run for run in runs if run.trial in open_trials and (
            run.status == "interrupted" or (run.status in ACTIVE_STATUSES and _orphaned(run)))), None)
    if taken is not None:
        _claim_run(store, taken.id)
        return Job(taken.id, taken.trial, RunConfig.from_dict(dict(taken.raw_config)), resume=True)
    asked = next_trial(study, spec)
    if asked is None:
        return None
    trial, config = asked
    params = {path: _jsonable(value) for path, value in setting_of(trial.params, spec).items()}
    run_id = store.create_run(config.to_dict(), config.name, sweep_id=sweep_id, trial=trial.number, params=params)
    _claim_run(store, run_id)
    return Job(run_id, trial.number, config, resume=False)


def _claim_run(store, run_id: int) -> None:
    store.update_run(run_id, pid=os.getpid(), host=socket.gethostname(), stop_requested=False)


def _orphaned(run) -> bool:
    """A run in progress whose worker is gone: its pid dead on this host, or (another host's run)
    no heartbeat for :data:`SHARED_STALE_S`."""
    from .runner import is_alive

    if run.host in (None, socket.gethostname()):
        return run.pid is not None and not is_alive(run.pid)
    beats = [t for t in (run.heartbeat, run.started_at, run.created_at) if t is not None]
    return not beats or time.time() - max(beats) > SHARED_STALE_S


def train_trial(store, study, spec: SweepSpec, job: Job) -> str:
    """Train ``job``'s run in this process (continuing it when it can) and tell its trial how it
    ended; returns the run's status. A run stopped by a request stays its trial's (not told)."""
    from optuna.trial import TrialState

    from .hooks import Pruning
    from .runner import describe_error
    from .train import train_run

    resume = job.resume and _resumable(store, job.run_id)
    if job.resume:
        run = store.record(job.run_id)
        if resume:
            store.update_run(job.run_id, resumes=run.resumes + 1, error=None)
        else:  # no checkpoint here: from step 0, its rows discarded (training is seeded)
            store.discard_after(job.run_id, -1)
            store.update_run(job.run_id, error=None)
    trial = _trial(study, job.trial)
    hooks = [Pruning(trial, objective_name(spec))] if spec.prune else []
    try:
        status = train_run(job.config, store, job.run_id, hooks=hooks, resume=resume)
    except Exception as error:
        traceback.print_exc()
        store.set_status(job.run_id, "failed", error=describe_error(error))
        status = "failed"
    if status == "completed":
        value = store.latest(job.run_id).get(objective_name(spec))
        if value is not None and math.isfinite(value):
            tell(study, job.trial, value)
        else:
            tell(study, job.trial, state=TrialState.FAIL)
    elif status == "pruned":
        tell(study, job.trial, state=TrialState.PRUNED)
    elif status in ("diverged", "failed"):
        trial.set_user_attr("status", status)
        tell(study, job.trial, state=TrialState.FAIL)
    return status  # stopped: the trial stays open for resume_sweep


def _resumable(store, run_id: int) -> bool:
    """Whether this machine holds a checkpoint of the run that ``train_run(resume=True)`` reads."""
    from .train import CHECKPOINT_FORMAT, load_checkpoint

    path = store.checkpoint_path(run_id)
    if not path.exists():
        return False
    try:
        return load_checkpoint(path).get("format") == CHECKPOINT_FORMAT
    except Exception:  # a truncated or foreign file: start over instead
        return False


def _trial(study, number: int):
    """The ``optuna.Trial`` of an open trial (this process may not be the one that asked it)."""
    import optuna

    frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    return optuna.trial.Trial(study, frozen._trial_id)


def _open_trials(study) -> set[int]:
    from optuna.trial import TrialState

    return {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}


def _asked(study) -> int:
    from optuna.trial import TrialState

    return sum(t.state != TrialState.WAITING for t in study.get_trials(deepcopy=False))


def _requeue(store, study, sweep_id: int) -> int:
    """Requeue the sweep's stopped and interrupted runs whose trials are open; return how many."""
    from .store import ACTIVE_STATUSES

    open_trials, count = _open_trials(study), 0
    for run in store.records(sweep_id=sweep_id):
        dead = run.status in ACTIVE_STATUSES and _orphaned(run)
        if run.trial in open_trials and (run.status in ("stopped", "interrupted") or dead):
            store.update_run(run.id, status="queued", pid=None, stop_requested=False)
            count += 1
    return count


def _settle(store, study, spec: SweepSpec, sweep_id: int) -> None:
    """When a worker leaves: the sweep is completed once every run was asked and told."""
    if _asked(study) >= spec.size() and not _open_trials(study):
        store.update_sweep(sweep_id, status="completed", finished_at=time.time())


# ---------------------------------------------------------------------------------- results
def results(store, sweep_id: int) -> pd.DataFrame:
    """One row per run of the sweep: run_id, trial, seed, status, objective (the run's final
    :func:`objective_name`; NaN without one), step, setting (a label of the varied values,
    the same for runs that differ only in seed), then one column per varied field (``spec.vary``'s
    order), named by its path."""
    import pandas as pd

    spec = SweepSpec.from_dict(store.sweep(sweep_id)["spec"])
    objective = objective_name(spec)
    fields_ = [vary.field for vary in spec.vary]
    rows = []
    for run in sorted(store.records(sweep_id=sweep_id), key=lambda run: (run.trial is None, run.trial, run.id)):
        params = {path: run.params.get(path) for path in fields_}
        seed = (run.raw_config.get("train") or {}).get("seed")
        rows.append({"run_id": run.id, "trial": run.trial, "seed": seed, "status": run.status,
                     "objective": run.latest.get(objective, math.nan), "step": run.step,
                     "setting": setting_label(params), **params})
    frame = pd.DataFrame(rows, columns=["run_id", "trial", "seed", "status", "objective", "step", "setting", *fields_])
    return frame.astype({"run_id": "int64", "trial": "Int64", "seed": "int64", "status": "object",
                         "objective": "float64", "step": "Int64", "setting": "object"})


def setting_label(setting: dict[str, Any]) -> str:
    """``"cell=rnn lr=0.001"``: the varied values as the run names show them."""
    return " ".join(f"{field_label(path)}={shown(value)}" for path, value in setting.items())


def setting_rows(frame: pd.DataFrame, spec: SweepSpec) -> list[dict[str, Any]]:
    """One dict per setting of :func:`results` (in the order its first run was asked): ``setting``
    (field path -> value), ``runs`` (each seed's run_id, seed, status, objective), and ``mean``,
    ``min``, ``max`` of the objective over the setting's completed runs (None when none completed),
    ``completed``, ``diverged``, ``pruned`` (counts). What ``sweeps show --json`` prints, a line each."""
    fields_ = [vary.field for vary in spec.vary]
    rows = []
    for _, group in frame.groupby("setting", sort=False):
        finals = group.loc[(group["status"] == "completed") & group["objective"].notna(), "objective"]
        finals = finals[finals.map(math.isfinite)]
        first = group.iloc[0]
        rows.append({
            "setting": {path: _json_value(first[path]) for path in fields_},
            "runs": [{"run_id": int(run.run_id), "seed": int(run.seed), "status": run.status,
                      "objective": _json_value(run.objective)} for run in group.itertuples()],
            "mean": float(finals.mean()) if len(finals) else None,
            "min": float(finals.min()) if len(finals) else None,
            "max": float(finals.max()) if len(finals) else None,
            **{status: int((group["status"] == status).sum()) for status in ("completed", "diverged", "pruned")}})
    return rows


def _json_value(value: Any) -> Any:
    """A cell of a results frame as JSON: numpy scalars as Python numbers, NaN/missing as None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):
        value = value.item()
        return None if isinstance(value, float) and math.isnan(value) else value
    return value


# ---------------------------------------------------------------------------------- time estimate
# Note [Rough time]
#     What a sweep will take, before Start: each run's steps times the seconds a step of its shape
#     (cell, hidden size, task and its options, batch size, dtype) takes.  A shape the store has
#     completed runs of is timed from them (wall time over steps: evaluation, probes and store
#     writes included); any other is timed here, a few training steps of a freshly built model,
#     times :data:`STEP_OVERHEAD` for what those steps leave out.  ``workers`` runs share the
#     machine's cores (stability.devices), so K workers finish about min(K, cores) times sooner.
#     Rough, and said so: the first steps of a model are slower than its average, a GPU is not a CPU.
STEP_OVERHEAD = 1.3     # evaluation, probes, store writes on top of bare training steps (benchmarks/training.py)
TIMED_STEPS = 3
MAX_TIMED_SHAPES = 6    # shapes timed by training; the rest take the mean of those


def _shape(config: RunConfig) -> str:
    train = config.train
    return json.dumps([config.cell.name, config.cell.hidden_size, config.cell.options, config.task.name,
                       config.task.options, train.batch_size, train.dtype, train.device], sort_keys=True, default=str)


def _run_configs(spec: SweepSpec) -> tuple[list[RunConfig], float]:
    """One config per setting the sweep can train (a sampled range at its base value), and the
    number of runs each stands for."""
    if spec.sampler == "grid":
        settings = spec.settings()
    else:  # random/tpe: every listed value equally likely; a range at the base config's value
        listed = [vary for vary in spec.vary if not vary.continuous]
        settings = [dict(zip((v.field for v in listed), values))
                    for values in itertools.product(*(v.values for v in listed))] or [{}]
    configs = [apply(spec.base, setting) for setting in settings]
    runs_each = spec.size() / max(1, len(configs))
    return configs, runs_each


def estimate(spec: SweepSpec, store, workers: int = 1) -> dict[str, Any] | None:
    """``{"seconds": ..., "basis": one line}``: a rough wall time of the whole sweep (Note [Rough
    time]); None when no shape could be timed."""
    from .devices import available_cores

    configs, runs_each = _run_configs(spec)
    history = _history_seconds_per_step(store)
    per_step, timed, remembered = {}, 0, 0
    for config in configs:
        shape = _shape(config)
        if shape in per_step:
            continue
        if shape in history:
            per_step[shape] = history[shape]
            remembered += 1
        elif timed < MAX_TIMED_SHAPES:
            seconds = _time_steps(config)
            if seconds is not None:
                per_step[shape] = seconds * STEP_OVERHEAD
                timed += 1
    if not per_step:
        return None
    fallback = sum(per_step.values()) / len(per_step)
    total = sum(per_step.get(_shape(config), fallback) * config.train.steps for config in configs) * runs_each
    parallel = max(1, min(check_workers(workers), available_cores()))
    basis = []
    if remembered:
        basis.append(f"{remembered} shape{'s' * (remembered > 1)} from completed runs in the store")
    if timed:
        basis.append(f"{timed} timed by {TIMED_STEPS} training steps here")
    return {"seconds": total / parallel,
            "basis": f"{' and '.join(basis)}; {parallel} run{'s' * (parallel > 1)} at a time"}


def _history_seconds_per_step(store) -> dict[str, float]:
    """Median wall seconds a step of each shape took in the store's completed runs."""
    times: dict[str, list[float]] = {}
    for run in store.records(("completed",)):
        if run.config is None or not run.step or not run.started_at or not run.finished_at:
            continue
        times.setdefault(_shape(run.config), []).append((run.finished_at - run.started_at) / run.step)
    return {shape: sorted(values)[len(values) // 2] for shape, values in times.items()}


def _time_steps(config: RunConfig) -> float | None:
    """Seconds one training step of ``config``'s model takes here (the median of a few, after one
    warm-up step); None when the model or task cannot be built."""
    import torch

    from . import tasks
    from .train import _to, build_model, build_optimizer
    from .devices import resolve_device

    try:
        device = resolve_device(config.train.device)
        dtype = torch.float64 if config.train.dtype == "float64" else torch.float32
        task = tasks.build(config.task.name, seed=config.train.seed, **config.task.options)
        model = build_model(config, task).to(device=device, dtype=dtype)
        optimizer = build_optimizer(model, config)
        batches = task.batches("train", config.train.batch_size)
        seconds = []
        for _ in range(TIMED_STEPS + 1):
            x, y = _to(*next(batches), device, dtype)
            started = time.perf_counter()
            optimizer.zero_grad()
            pred, _ = model(x)
            task.loss(pred, y).backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds.append(time.perf_counter() - started)
    except Exception:  # noqa: BLE001 - an estimate is optional; the sweep's own checks say what is wrong
        return None
    return sorted(seconds[1:])[len(seconds[1:]) // 2]
