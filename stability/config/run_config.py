"""One typed configuration for a run, from the page or the CLI to the worker and the store.

    config = RunConfig(cell=CellConfig("spectral", 128, {"m1": 16}),
                       task=TaskConfig("adding", {"seq_len": 200}),
                       train=TrainConfig(steps=2000, lr=1e-3))
    config.validate()                      # ConfigError: one line, what and what is allowed
    check_buildable(config)                # what only the builders know (stability.admission.preflight)
    RunConfig.from_json(config.to_json()) == config

Nothing re-parses it along the way: the worker receives exactly what the
page built, and the store keeps ``to_dict()``.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ..core.errors import ConfigError

# The registries (stability.cells, stability.tasks), the optimizers and the devices import torch, so
# they are imported by the checks that use them: the CLI's parser and its `runs` and `show` read this
# module without torch (Note [A command line without torch] in stability/cli/main.py).

# The names of stability.models.optimizers' registry, in its order, written here so that the choices
# are known without torch (tests/test_cli_startup.py checks that they are the registry's names):
# adam, rmsprop (torch), sgd, rmsprop_tf, rmsprop_keras.
OPTIMIZERS: tuple[str, ...] = ("adam", "rmsprop", "sgd", "rmsprop_tf", "rmsprop_keras")

# none; step: lr *= lr_gamma every lr_step_size steps; linear: to zero at the last step
# (SGORNN §3.1); plateau: lr *= lr_gamma when the validation loss stops improving.
LR_SCHEDULES = ("none", "step", "linear", "plateau")
DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("float32", "float64")

# The largest value validate() takes for each kind of number, so that nothing it accepts fails later
# in torch or the store, after the run's row is stored: a seed is what both torch.manual_seed and
# the store's BIGINT take (torch up to 2**64 - 1, the store up to 2**63 - 1); steps (and
# lr_step_size and the *_every fields, each a number of steps) a billion, beyond any run here;
# batch_size, eval_examples and probe_examples a billion too, far past memory; epochs a million
# (and the steps they come to at most MAX_STEPS). hidden_size has no maximum here: the preflight
# check (stability.admission.budget, before any run is stored) refuses whatever does not fit in
# memory, with the bytes it would need, whatever its size. Floats are finite.
MAX_SEED = 2**63 - 1
MAX_STEPS = 10**9
MAX_SIZE = 10**9
MAX_EPOCHS = 10**6


@dataclass
class CellConfig:
    """Which recurrent cell (``stability.cells.build(name, input_size, hidden_size, **options)``);
    ``name`` is a registered name or a ``package.module:Class`` import path."""

    name: str = "spectral"
    hidden_size: int = 128
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskConfig:
    """Which task (``stability.tasks.build(name, seed, **options)``); ``options`` carries e.g. ``seq_len``."""

    name: str = "adding"
    options: dict[str, Any] = field(default_factory=lambda: {"seq_len": 100})


@dataclass
class TrainConfig:
    """How to train.  ``None`` for the ``*_every`` fields means "choose from ``steps``":
    ``log_every`` so a run logs about 200 points, ``eval_every`` 20 evaluations,
    ``probe_every`` 20 gradient-through-time probes."""

    optimizer: str = "adam"
    lr: float = 1e-3
    lr_schedule: str = "none"
    lr_step_size: int = 1000
    lr_gamma: float = 0.5
    batch_size: int = 64
    steps: int = 2000
    epochs: float | None = None  # if set: passes over a fixed training set, instead of steps
    clip_grad_norm: float | None = None  # off by default: the point is to see explosions
    weight_decay: float = 0.0
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    log_every: int | None = None
    eval_every: int | None = None
    probe_every: int | None = None
    eval_examples: int = 256  # examples of each fixed set used for val/train-gap evaluation (benchmarks/training.py)
    probe_examples: int = 32  # the fixed probe batch for dL/dh0 and dL/dh_t (float64)
    freeze_recurrent: bool = False  # keep the parameters that build W fixed (KRU paper §4.1)
    deterministic: bool = False  # deterministic GPU algorithms, slower (stability.core.determinism)
    cuda_graphs: bool = True  # on CUDA, each step replayed as one CUDA graph where it can be (training/graphed.py)

    def with_epochs_as_steps(self, train_size: int | None) -> TrainConfig:
        """This config with ``steps`` = ceil(epochs * train_size / batch_size) when ``epochs`` is set."""
        if self.epochs is None:
            return self
        if train_size is None:
            raise ConfigError("epochs needs a fixed training set; this task draws fresh examples every step "
                              "(give it a train_size, or use steps)")
        steps = max(1, math.ceil(self.epochs * train_size / self.batch_size))
        if steps > MAX_STEPS:
            raise ConfigError(f"epochs {self.epochs!r} of {train_size} examples in batches of {self.batch_size} "
                              f"are {steps} steps; at most {MAX_STEPS} are allowed")
        return replace(self, steps=steps)

    def resolved_log_every(self) -> int:
        return self.log_every or max(1, self.steps // 200)

    def resolved_eval_every(self) -> int:
        return self.eval_every or max(1, self.steps // 20)

    def resolved_probe_every(self) -> int:
        return self.probe_every or max(1, self.steps // 20)


@dataclass
class RunConfig:
    cell: CellConfig = field(default_factory=CellConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    name: str = ""

    # ------------------------------------------------------------ (de)serialise
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"a run configuration must be a JSON object; got {type(data).__name__}")
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown configuration section(s) {', '.join(sorted(unknown))}; "
                              f"valid: cell, task, train, name")
        return cls(cell=_section(CellConfig, data.get("cell", {}), "cell"),
                   task=_section(TaskConfig, data.get("task", {}), "task"),
                   train=_section(TrainConfig, data.get("train", {}), "train"),
                   name=str(data.get("name", "")))

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"the run configuration is not valid JSON: {error}") from None
        return cls.from_dict(data)

    # ---------------------------------------------------------------- validate
    def validate(self) -> RunConfig:
        """Check every field, each number within its bound (``MAX_*`` above); raise
        :class:`ConfigError` (one line) on the first problem. Returns self."""
        _check_train(self.train)  # first: without torch (a device named: its dtype asks torch), so a
        # number out of bounds is answered before the registries are imported
        from .. import cells, tasks  # the registries know the valid names and options (torch)

        _check_registered("cell", self.cell.name, cells)
        _check_int("cell.hidden_size", self.cell.hidden_size, minimum=1, maximum=math.inf)  # memory: preflight
        check_options("cell", self.cell.name, self.cell.options)
        _check_registered("task", self.task.name, tasks)
        check_options("task", self.task.name, self.task.options)
        return self


def _check_train(train: TrainConfig) -> None:
    """Every field of ``train``: names among their choices, numbers finite and within their bounds."""
    _check_choice("optimizer", train.optimizer, OPTIMIZERS)
    _check_number("lr", train.lr, positive=True)
    _check_choice("lr_schedule", train.lr_schedule, LR_SCHEDULES)
    _check_int("lr_step_size", train.lr_step_size, minimum=1, maximum=MAX_STEPS)
    _check_number("lr_gamma", train.lr_gamma, positive=True)
    _check_int("batch_size", train.batch_size, minimum=1, maximum=MAX_SIZE)
    _check_int("steps", train.steps, minimum=1, maximum=MAX_STEPS)
    if train.epochs is not None:
        _check_number("epochs", train.epochs, positive=True)
        if train.epochs > MAX_EPOCHS:
            raise ConfigError(f"epochs must be at most {MAX_EPOCHS}; got {train.epochs!r}")
    if train.clip_grad_norm is not None:
        _check_number("clip_grad_norm", train.clip_grad_norm, positive=True)
    _check_number("weight_decay", train.weight_decay)
    _check_int("seed", train.seed, minimum=0, maximum=MAX_SEED)
    _check_choice("device", train.device, DEVICES)
    _check_choice("dtype", train.dtype, DTYPES)
    if train.device != "auto":
        from ..core.devices import dtype_problem  # torch

        if dtype_problem(train.device, train.dtype):  # float64 on mps
            raise ConfigError(dtype_problem(train.device, train.dtype))
    for name in ("log_every", "eval_every", "probe_every"):
        if getattr(train, name) is not None:
            _check_int(name, getattr(train, name), minimum=1, maximum=MAX_STEPS)
    _check_int("eval_examples", train.eval_examples, minimum=1, maximum=MAX_SIZE)
    _check_int("probe_examples", train.probe_examples, minimum=1, maximum=MAX_SIZE)
    for name in ("freeze_recurrent", "deterministic", "cuda_graphs"):
        if not isinstance(getattr(train, name), bool):
            raise ConfigError(f"{name} must be true or false; got {getattr(train, name)!r}")


def _section(kind, data, label):
    if not isinstance(data, dict):
        raise ConfigError(f"'{label}' must be an object with fields {', '.join(f.name for f in fields(kind))}")
    valid = {f.name for f in fields(kind)}
    unknown = set(data) - valid
    if unknown:
        raise ConfigError(f"unknown {label} field(s) {', '.join(sorted(unknown))}; valid: {', '.join(sorted(valid))}")
    return kind(**data)


def _check_choice(label, value, choices):
    if value not in choices:
        raise ConfigError(f"{label} must be one of {', '.join(map(str, choices))}; got {value!r}")


def _check_registered(label, name, registry):
    """``name`` is registered in ``registry`` (``stability.cells`` or ``tasks``); a
    ``package.module:Class`` name is imported and registered first (one line if it cannot be)."""
    if isinstance(name, str) and ":" in name:
        try:
            registry.get_class(name)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    _check_choice(label, name, registry.available())


def _check_int(label, value, minimum, maximum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{label} must be an integer >= {minimum}; got {value!r}")
    if value > maximum:
        raise ConfigError(f"{label} must be at most {maximum}; got {value!r}")


def _check_number(label, value, positive=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        raise ConfigError(f"{label} must be a {'positive' if positive else 'non-negative'} number; got {value!r}")


def check_options(kind: str, name: str, given) -> None:
    """ConfigError (one line) unless ``given`` names only options of the cell (``kind`` "cell") or task
    ``name`` and each float option's number is finite and within its bounds (OptionInfo.bounds,
    Note [Finite options] in stability.core.registry); the class's own check judges the rest."""
    from .. import cells, tasks  # torch

    infos = {option.name: option for option in (cells if kind == "cell" else tasks).describe(name).options}
    if not isinstance(given, dict):
        raise ConfigError(f"{kind} options must be a mapping of option names to values; got {given!r}")
    unknown = sorted(set(given) - set(infos))
    if unknown:
        raise ConfigError(f"unknown {kind} option(s) {', '.join(unknown)} for {kind} {name!r}; "
                          f"valid options: {', '.join(infos) or 'none'}")
    for option, value in given.items():
        problem = infos[option].number_problem(value)
        if problem:
            raise ConfigError(f"{kind} option {option} of {kind} {name!r} {problem}")
