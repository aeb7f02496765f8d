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
field (``lr``, ``steps``, ``optimizer``, ``clip_grad_norm``, ...). Its type and choices come from
:func:`stability.config.fields.resolve_field` (``TrainConfig``'s annotations, the cells' and tasks'
declared options), and a setting is applied by :func:`stability.config.fields.apply`. Every value is
checked by ``RunConfig.validate()`` and ``check_buildable()`` applied to the base config, and so is
every combination of the varied values that a builder reads (the cell, the task, and the train
fields that size a run: every field but :data:`TRAINING_ONLY`); each distinct config is checked once.

Sizes are refused before anything is listed or built (Note [Bounded checks]): a ``--vary`` text of
more than :data:`MAX_VARY_CHARS` characters, a list or a range's COUNT of more values than the sweep
may have runs (:data:`MAX_RUNS`, or :data:`MAX_LARGE_RUNS` with ``allow_large``), a grid over more
runs, and (without ``allow_large``) a sweep whose checks would check more than :data:`MAX_BUILDS`
distinct models; of those a check builds at most :data:`MAX_CHECK_BUILDS` (issue 33).

What a page may vary is narrower than what the CLI may (Note [Offered fields]): ``offered``, an
:class:`Offered`, names the train fields its form shows; cell and task options must be ones a form
asks for (``in_form``), and ``cell``/``task`` values registered names, never ``package.module:Class``.

Seeds: a sweep runs each setting with seeds ``base.train.seed + i`` for ``i < seeds``. In a grid
study the seed is a grid parameter (``train.seed``); with random and TPE sampling each sampled
setting is asked once and the study enqueues the same setting for the other seeds. The objective is
the run's final ``val/loss`` (minimised). Optuna is imported only by the functions that need it.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

from ..admission.budget import build_cost
from ..admission.preflight import cell_checked, check_buildable, check_without_building
from ..config import ConfigError, RunConfig
from ..config import fields as config_fields
from ..config.fields import Field, apply, setting_label
from ..core import metric_names
from ..core.formatting import shown


SAMPLERS = ("grid", "random", "tpe")
MAX_RUNS = 10_000  # a grid over more runs needs allow_large=True (the CLI's --yes)
MAX_LARGE_RUNS = 1_000_000  # the most runs a sweep may have even with allow_large
MAX_BUILDS = 512  # distinct models SweepSpec.check may check without allow_large (Note [Bounded checks])
MAX_CHECK_BUILDS = 4  # of which it builds at most these (those built before in this process are free) ...
MAX_CHECK_WORK = 4e10  # ... costing at most these operations (budget.build_cost: a few seconds of a core)
MAX_VARY_CHARS = 200_000  # the longest --vary text read
SEED_PARAM = config_fields.SEED  # the seed's name among a grid trial's params
SWEEP_ATTR = "sweep"  # the study's user attribute holding SweepSpec.to_dict()
# Train fields that no builder reads: a combination of their values needs no check beyond each value's,
# and a value of one is built as the base is (the optimizer is not one: the memory budget counts its state).
TRAINING_ONLY = frozenset({"lr", "lr_schedule", "lr_step_size", "lr_gamma", "steps",
                           "clip_grad_norm", "weight_decay", "log_every", "eval_every", "probe_every",
                           "freeze_recurrent", "cuda_graphs"})
# The train fields that change neither a run's size nor its work: what :meth:`SweepSpec.cost_configs` leaves at
# the base's values (steps and the evaluation and probe cadences do change the work).
COSTLESS = TRAINING_ONLY - {"steps", "eval_every", "probe_every"}
MAX_COST_CONFIGS = 512  # distinct runs SweepSpec.cost_configs lists, at most
_NUMERIC = ("int", "float")
_NONE_TEXTS = ("none", "null")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


class SweepError(ValueError):
    """A sweep cannot be run as given; the one-line message names the field and the problem."""


# ---------------------------------------------------------------------------------- what a page offers
@dataclass(frozen=True)
class Offered:
    """The fields a page's form offers to vary, and so the only ones its Vary may name.

    Note [Offered fields]
    ---------------------
    The CLI may vary any config path and name any cell or task, a ``package.module:Class`` included
    (importing it is the choice of whoever runs the command). A page is used by whoever can reach the
    server, so its Vary accepts what its form shows and nothing else: ``cell`` and ``task`` with
    registered names (``cells.available()`` / ``tasks.available()``, plugins being the server
    owner's choice, made through the environment), ``cell.hidden_size``, the cell and task options a
    form asks for (``OptionInfo.in_form``: not ``task.data_dir``, ``task.download``), and the train
    fields in :attr:`train`. A ``cell`` value is checked before any other field is looked up on it,
    so nothing is imported for a name the page refuses.
    """

    train: frozenset  # train field names (no ``train.`` prefix) the form shows

    def check_field(self, spec: Field, base: RunConfig, cells_varied: list[str] | None) -> None:
        """SweepError unless the form offers the field ``spec`` (resolved on ``base`` and the varied cells)."""
        section, _, rest = spec.path.partition(".")
        if section == "train":
            if rest not in self.train:
                raise SweepError(f"vary {spec.path}: not a field this page offers; it varies "
                                 f"cell, cell.hidden_size, cell.OPTION, task, task.OPTION, or "
                                 f"{', '.join(sorted(self.train))}")
        elif rest and rest != "hidden_size":
            names = (cells_varied or [base.cell.name]) if section == "cell" else [base.task.name]
            if any(not option.in_form for option in _declared_options(section, names, rest)):
                raise SweepError(f"vary {spec.path}: not an option this page offers (its form does not ask for it)")

    def check_names(self, vary: Vary) -> None:
        """SweepError unless every value of a ``cell`` or ``task`` vary is a registered name."""
        from .. import cells, tasks

        if vary.field not in ("cell", "task"):
            return
        known = set((cells if vary.field == "cell" else tasks).available())
        for value in vary.values:
            if not isinstance(value, str) or ":" in value or value not in known:
                raise SweepError(f"vary {vary.field}: {shown(value)!r} is not a registered {vary.field}; "
                                 f"this page offers {', '.join(sorted(known))}")


def _declared_options(section: str, names: list[str], option: str) -> list:
    """The option infos of ``option`` on each of the cells (tasks) ``names`` that declares it."""
    from .. import cells, tasks

    registry = cells if section == "cell" else tasks
    found = []
    for name in names:
        try:
            found.append(registry.describe(name).option(option))
        except ValueError:
            continue
    return found


# ---------------------------------------------------------------------------------- fields
def resolve_field(name: str, base: RunConfig, cells_varied: list[str] | None = None) -> Field:
    """The field a ``--vary`` FIELD names, with its type (:func:`stability.config.fields.resolve_field`:
    a cell option is looked up on the varied cells); SweepError for an unknown one or the seed."""
    if name.strip().replace("-", "_") in ("seed", SEED_PARAM):
        raise SweepError(f"vary {name}: the seeds come from --seeds N (from the base seed up), not from --vary")
    try:
        return config_fields.resolve_field(name, base, cells_varied)
    except ConfigError as error:
        raise SweepError(f"vary {error}") from None


# ---------------------------------------------------------------------------------- values
def convert(raw: Any, spec: Field) -> Any:
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


def _typed(raw: Any, text: str | None, spec: Field) -> Any:
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
        spec = Field(data["field"], data["kind"], bool(data.get("optional", False)))
        return cls(field=spec.path, kind=spec.kind, values=tuple(convert(v, spec) for v in data.get("values", ())),
                   low=data.get("low"), high=data.get("high"), log=bool(data.get("log", False)),
                   optional=spec.optional)

    @classmethod
    def parse(cls, text: str, base: RunConfig, cells_varied: list[str] | None = None, *,
              max_values: int = MAX_RUNS) -> Vary:
        """``FIELD=V1,V2,...`` or ``FIELD=LOW:HIGH[:COUNT][:log]`` (module docstring); the values
        are typed, not yet checked against the config (:func:`parse_varies` does that). More than
        ``max_values`` values (listed, or a range's COUNT) is refused before any is made."""
        if len(text) > MAX_VARY_CHARS:
            raise SweepError(f"vary {shown(text[:40])}...: {len(text):,} characters, over {MAX_VARY_CHARS:,}; "
                             f"give a range LOW:HIGH:COUNT instead of a long list")
        name, sep, rest = text.partition("=")
        if not sep or not name.strip():
            raise SweepError(f"vary {text!r}: expected FIELD=V1,V2,... or FIELD=LOW:HIGH:COUNT[:log]")
        spec = resolve_field(name, base, cells_varied)
        if not rest.strip():
            raise SweepError(f"vary {spec.path}: no values")
        if spec.kind in _NUMERIC and ":" in rest:
            return _parse_range(spec, rest, max_values)
        items = _split(rest)
        _check_count(spec, len(items), max_values)
        return _listed(spec, tuple(convert(item, spec) for item in items))


def _check_count(spec: Field, count: int, max_values: int) -> None:
    """SweepError when a field would list more values than the sweep may have runs (each is a run at least)."""
    if count > max_values:
        more = " without --yes" if max_values == MAX_RUNS else ""
        raise SweepError(f"vary {spec.path}: {count:,} values, over the {max_values:,} runs a sweep may have{more}")


def _listed(spec: Field, values: tuple) -> Vary:
    """The Vary of listed ``values``; SweepError for a value listed twice (found in linear time)."""
    seen = set()
    for value in values:
        key = _identity(value)
        if key in seen:
            raise SweepError(f"vary {spec.path}: {value!r} is listed twice")
        seen.add(key)
    return Vary(spec.path, spec.kind, values, optional=spec.optional)


def _identity(value: Any) -> Any:
    """What two equal values share: the value itself where it hashes (1e-3 and 0.001 alike), else its JSON."""
    try:
        hash(value)
        return value
    except TypeError:
        return ("json", json.dumps(value, sort_keys=True, default=str))


def _parse_range(spec: Field, text: str, max_values: int = MAX_RUNS) -> Vary:
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
    count = convert(parts[2], Field(f"{spec.path} COUNT", "int"))
    if count < 2:
        raise SweepError(f"vary {spec.path}: a range's COUNT must be at least 2; got {count}")
    _check_count(spec, count, max_values)  # before a single value is made
    values = [float(f"{value:.12g}") for value in spaced(float(low), float(high), count, log)]
    if spec.kind == "int":
        values = list(dict.fromkeys(round(value) for value in values))
    return Vary(spec.path, spec.kind, tuple(values), optional=spec.optional)


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# ---------------------------------------------------------------------------------- configs
class _Checks:
    """``validate()`` of each distinct config and ``check_buildable()`` of each distinct model, once.

    A config is built as :func:`built_as` makes it: its :data:`TRAINING_ONLY` fields at the base's
    values, so the values of a learning rate share the base's build."""

    def __init__(self, base: RunConfig):
        self.base = base
        self.problems: dict[str, str | None] = {}
        self.builds: dict[str, str | None] = {}
        self.built = 0        # cells this check had built (Note [Bounded checks])
        self.unbuilt = 0      # distinct models it checked without building their cells
        self.build_work = 0   # their cost in operations (budget.build_cost)

    def problem(self, config: RunConfig) -> str | None:
        key = config.to_json()
        if key not in self.problems:
            self.problems[key] = self._problem(config)
        return self.problems[key]

    def _problem(self, config: RunConfig) -> str | None:
        try:
            config.validate()
        except ValueError as error:
            return " ".join(str(error).split())
        built = built_as(config, self.base)
        key = built.to_json()
        if key not in self.builds:
            try:
                if self._may_build(built):
                    check_buildable(built)
                else:
                    check_without_building(built)
                self.builds[key] = None
            except ValueError as error:
                self.builds[key] = " ".join(str(error).split())
        return self.builds[key]

    def _may_build(self, config: RunConfig) -> bool:
        """Whether the check may build ``config``'s cell: one built before costs nothing; else while this
        check has built fewer than :data:`MAX_CHECK_BUILDS` cells and :data:`MAX_CHECK_WORK` operations."""
        try:
            if cell_checked(config):
                return True
            operations = build_cost(config)[0]
        except ValueError:  # an unknown cell: check_buildable says so in one line
            return True
        if self.built >= MAX_CHECK_BUILDS or self.build_work + operations > MAX_CHECK_WORK:
            self.unbuilt += 1
            return False
        self.built, self.build_work = self.built + 1, self.build_work + operations
        return True


def built_as(config: RunConfig, base: RunConfig) -> RunConfig:
    """``config`` with its :data:`TRAINING_ONLY` train fields at ``base``'s values: what the builders
    read of it is unchanged, and configs differing only in those fields build alike."""
    if all(getattr(config.train, name) == getattr(base.train, name) for name in TRAINING_ONLY):
        return config
    return replace(config, train=replace(config.train, **{name: getattr(base.train, name) for name in TRAINING_ONLY}))


def _with_cell_for(base: RunConfig, vary: Vary, cells_varied: list[str]) -> dict[str, Any]:
    """The cell to check a cell option's values on: the base cell, else a varied cell declaring it."""
    from .. import cells

    if not vary.field.startswith("cell.") or vary.field == "cell.hidden_size" or not cells_varied:
        return {}
    option = vary.field.partition(".")[2]
    for name in [base.cell.name, *cells_varied]:
        if option in cells.options(name):
            return {} if name == base.cell.name else {"cell": name}
    return {}


def parse_varies(texts: list[str], base: RunConfig, *, offered: Offered | None = None,
                 max_values: int = MAX_RUNS) -> list[Vary]:
    """Each ``--vary`` text as a :class:`Vary`, typed (``cell`` first, so a cell option is looked
    up on the varied cells); SweepError for a field named twice, more than ``max_values`` values of
    one field, or (with ``offered``, a page's) a field or a name its form does not offer: the
    ``cell`` values are checked before any option is looked up on them (Note [Offered fields]).
    Values are checked by :meth:`SweepSpec.check`."""
    texts = list(texts)
    is_cell = [text.partition("=")[0].strip() in ("cell", "cell.name") for text in texts]
    cell_varies = [Vary.parse(text, base, max_values=max_values) for text, cell in zip(texts, is_cell) if cell]
    if offered is not None:
        for vary in cell_varies:
            offered.check_names(vary)
    cells_varied = list(cell_varies[0].values) if cell_varies else None
    parsed = iter(cell_varies)
    varies = [next(parsed) if cell else Vary.parse(text, base, cells_varied, max_values=max_values)
              for text, cell in zip(texts, is_cell)]
    counts = {}
    for vary in varies:
        counts[vary.field] = counts.get(vary.field, 0) + 1
        if counts[vary.field] > 1:
            raise SweepError(f"vary {vary.field}: named twice; give all its values in one --vary")
        if offered is not None:
            offered.check_field(Field(vary.field, vary.kind, vary.optional), base, cells_varied)
            offered.check_names(vary)
    return varies


# ---------------------------------------------------------------------------------- the sweep
def objective_name(spec: SweepSpec) -> str:
    """The metric whose final value a trial reports: the validation loss."""
    return metric_names.VAL_LOSS


def direction(spec: SweepSpec) -> str:
    """``"minimize"`` for a loss, ``"maximize"`` for an accuracy."""
    return "maximize" if objective_name(spec).endswith("accuracy") else "minimize"


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
    unbuilt: int = field(default=0, compare=False)  # models the last check left to their runs: not stored
    owner: str | None = field(default=None, compare=False)  # the student who started it (stability.access), or None

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
        if self.size() > MAX_LARGE_RUNS:
            raise SweepError(f"this sweep is {self.size():,} runs, over the {MAX_LARGE_RUNS:,} any sweep may have")
        return self

    def check(self, allow_large: bool = False) -> SweepSpec:
        """:meth:`validate`, then the base config, every varied value applied to it, and every
        combination of the values that builders read (not :data:`TRAINING_ONLY`), each distinct
        config checked once by ``validate()`` and each distinct model once by ``check_buildable()``.
        Returns self.

        Note [Bounded checks]
        ---------------------
        A page hands this whatever its form holds, and the server does the work, so every size is
        refused before the work it would cost: a ``--vary`` text's length and its number of values
        (:meth:`Vary.parse`, before a value is made: ``lr=1e-4:1e-1:1000000:log`` is one line, not
        a million floats), the runs (:meth:`validate`, a product of counts), and the distinct models
        checked (:meth:`builds_needed`, counted from the counts, at most :data:`MAX_BUILDS`). Of those
        models a check builds (to run the cell's own checks) at most :data:`MAX_CHECK_BUILDS`, costing
        at most :data:`MAX_CHECK_WORK` operations by their sizes (a build is up to a second at hidden
        2048: issue 33 timed 22 at 22.7 s), in the order checked (the base, each value alone, then the
        combinations), each cell once per process (stability.admission.preflight, Note [Checks that
        build]); the others are checked without building (validation, task, memory, device) and their
        runs build them. Listed values are told apart in linear time. ``allow_large`` (the CLI's
        ``--yes``, in the user's own process) lifts the runs to :data:`MAX_LARGE_RUNS` and the models
        checked to every combination."""
        self.validate(allow_large)
        builds = self.builds_needed()
        if builds > MAX_BUILDS and not allow_large:
            fields_ = ", ".join(vary.field for vary in self._built()) or "no field"
            raise SweepError(f"checking this sweep would build up to {builds:,} models (every combination of "
                             f"{fields_}), over {MAX_BUILDS:,}; vary fewer of their values at once, or pass "
                             f"--yes to check them all")
        checks = _Checks(self.base)
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
        built = self._built()
        for values in itertools.product(*(vary.points() for vary in built)):
            combination = dict(zip((vary.field for vary in built), values))
            problem = checks.problem(apply(self.base, combination))
            if problem:
                described = ", ".join(f"{path}={shown(value)}" for path, value in combination.items())
                raise SweepError(f"vary {described}: {problem}")
        self.unbuilt = checks.unbuilt
        return self

    def check_note(self) -> str | None:
        """One line when the last :meth:`check` left some models' cells to their runs (Note [Bounded checks])."""
        if not self.unbuilt:
            return None
        return (f"{self.unbuilt:,} of this sweep's models were checked without building their cells (at most "
                f"{MAX_CHECK_BUILDS} are built to check a sweep): a cell that refuses its options fails its run")

    def _built(self) -> list[Vary]:
        """The varied fields a builder reads (every one but :data:`TRAINING_ONLY`)."""
        return [vary for vary in self.vary if vary.field.removeprefix("train.") not in TRAINING_ONLY]

    def builds_needed(self) -> int:
        """At most how many distinct models :meth:`check` checks (building a few), counted without building or listing
        any: the base, each value of a field a builder reads, and every combination of them."""
        counts = [len(vary.points()) for vary in self._built()]
        return 1 + sum(counts) + (math.prod(counts) if counts else 0)

    def cost_configs(self) -> list[RunConfig] | None:
        """The runs that bound what this sweep's runs cost (steps, operations, memory, checkpoint): every
        combination of the varied values (a sampled range by its two ends) but those of :data:`COSTLESS` fields,
        which are left at the base's; the seed changes no cost.  None when that is more than
        :data:`MAX_COST_CONFIGS` runs (counted without listing them).  A student's sweep is checked over these
        (stability.access, Note [A student's sweep])."""
        costly = [vary for vary in self.vary if vary.field.removeprefix("train.") not in COSTLESS]
        if math.prod(len(vary.points()) for vary in costly) > MAX_COST_CONFIGS:
            return None
        configs = {}
        for values in itertools.product(*(vary.points() for vary in costly)):
            config = apply(self.base, dict(zip((vary.field for vary in costly), values)))
            configs.setdefault(config.to_json(), config)
        return list(configs.values())

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
        data = {"base": self.base.to_dict(), "vary": [vary.to_dict() for vary in self.vary], "seeds": self.seeds,
                "sampler": self.sampler, "trials": self.trials, "prune": self.prune}
        return data if self.owner is None else {**data, "owner": self.owner}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepSpec:
        try:
            return cls(base=RunConfig.from_dict(data["base"]), vary=[Vary.from_dict(v) for v in data["vary"]],
                       seeds=data["seeds"], sampler=data["sampler"], trials=data.get("trials"),
                       prune=bool(data.get("prune", False)),
                       owner=None if data.get("owner") is None else str(data["owner"]))
        except (KeyError, TypeError) as error:
            raise SweepError(f"not a sweep description: {type(error).__name__} {error}") from None


def build_spec(base: RunConfig, vary: list[str], *, seeds: int = 1, sampler: str = "grid",
               trials: int | None = None, prune: bool = False, allow_large: bool = False,
               offered: Offered | None = None) -> SweepSpec:
    """The checked sweep of the CLI's flags (``--vary`` texts, ``--seeds``, ...); SweepError (one
    line) on the first problem, before anything is stored or trained. ``offered``: a page's
    :class:`Offered` fields (Note [Offered fields]); None for the CLI, which may vary any field."""
    max_values = MAX_LARGE_RUNS if allow_large else MAX_RUNS
    return SweepSpec(base, parse_varies(vary, base, offered=offered, max_values=max_values), seeds=seeds,
                     sampler=sampler, trials=trials, prune=prune).check(allow_large)


