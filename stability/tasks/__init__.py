"""Sequence tasks of the papers: ``available()``, ``describe(name)``, ``build(name, seed, **options)``.

>>> task = build("adding", seed=0, seq_len=200)
>>> x, y = next(task.batches("train", 32))   # x (32, 200, 2), y (32, 1)

Generated tasks (any length, no download): ``adding``, ``adding_ternary``,
``copy``. Real data, downloaded once into a checksummed cache (see
:mod:`stability.tasks.download`): ``mnist``, ``permuted_mnist``,
``mnist_rows``, ``har2``, ``ptb_word``, ``ptb_char``, ``ucr``.

A task of your own (a :class:`Task` subclass) joins with ``register("parity",
ParityTask)``, an entry point in the group ``stability.tasks``, or by its import
path wherever a name is taken (``--task mylab.tasks:ParityTask``); see
:mod:`stability.core.registry`.  :func:`describe` reads what the dashboard and the
CLI show from the class: ``summary`` (else the description's first sentence),
``description``, ``paper``, ``metric``, ``equations``, and per option
``option_help``, ``option_choices``, ``option_ranges`` and
``form_hidden_options``, with types and defaults from the signature.
"""

from __future__ import annotations

import functools
import inspect
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from ..core.registry import (OptionInfo, PluginWarning, Registry, docstring_line, option_infos, option_parameters,
                             own_lines, own_text)
from .adding import AddingTask, AddingTernaryTask
from .base import HIGHER_IS_BETTER, SPLITS, Task
from .copy_memory import CopyTask
from .download import ChecksumMismatch, DatasetUnavailable, data_root
from .har import Har2Task
from .mnist import MnistRowsTask, MnistTask, PermutedMnistTask
from .ptb import PtbCharTask, PtbWordTask
from .synthetic import SyntheticTask
from .ucr import UcrTask

__all__ = [
    "HIGHER_IS_BETTER",
    "SPLITS",
    "ChecksumMismatch",
    "DatasetUnavailable",
    "OptionInfo",
    "PluginWarning",
    "Task",
    "TaskInfo",
    "available",
    "build",
    "check",
    "data_root",
    "describe",
    "get_class",
    "options",
    "register",
    "registry",
    "unregister",
]

TARGET_MODES = ("last", "every")


def check_task_class(name: str, cls: Any) -> None:
    """ValueError (one line) unless ``cls`` is a :class:`Task` with a known metric and target mode,
    built as ``cls(seed=..., **options)``."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ValueError(f"task {name!r} must be a subclass of stability.tasks.Task; got {cls!r}")
    for attribute, valid in (("metric", tuple(HIGHER_IS_BETTER)), ("target_mode", TARGET_MODES)):
        if getattr(cls, attribute) not in valid:
            raise ValueError(f"task {name!r} ({cls.__qualname__}): {attribute} must be one of "
                             f"{', '.join(valid)}; got {getattr(cls, attribute)!r}")
    parameters = inspect.signature(cls).parameters.values()
    if not any(p.name == "seed" or p.kind is p.VAR_KEYWORD for p in parameters):
        raise ValueError(f"task {name!r} ({cls.__qualname__}) must be built as cls(seed=..., **options)")


registry = Registry("task", check=check_task_class, builtins={
    cls.name: cls
    for cls in (
        AddingTask,
        AddingTernaryTask,
        CopyTask,
        MnistTask,
        PermutedMnistTask,
        MnistRowsTask,
        Har2Task,
        PtbWordTask,
        PtbCharTask,
        UcrTask,
    )
})


@dataclass(frozen=True)
class TaskInfo:
    """What a task says about itself (:func:`describe`); nothing is generated or downloaded."""

    name: str
    summary: str
    description: str
    paper: str
    metric: str
    target_mode: str
    stateful: bool
    equations: tuple[str, ...]
    options: tuple[OptionInfo, ...]

    @property
    def required_options(self) -> list[str]:
        return [option.name for option in self.options if option.required]

    def option(self, name: str) -> OptionInfo:
        for option in self.options:
            if option.name == name:
                return option
        raise ValueError(f"task {self.name!r} has no option {name!r}; valid options: "
                         f"{', '.join(option.name for option in self.options)}")

    def defaults(self) -> dict[str, Any]:
        """Each option's default, None for the required ones."""
        return {option.name: option.default for option in self.options}

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary, "description": self.description,
                "paper": self.paper, "metric": self.metric, "target_mode": self.target_mode,
                "stateful": self.stateful, "equations": list(self.equations),
                "options": [option.to_dict() for option in self.options]}


def available() -> list[str]:
    """Names of every task: the built-ins (generated ones first), then plugins and registered tasks."""
    return registry.names()


def get_class(name: str) -> type[Task]:
    """The class of task ``name`` (a ``package.module:Class`` name is imported); ValueError if unknown."""
    return registry.get(name)


def register(name: str, cls: type[Task] | None = None, *, replace: bool = False):
    """Register task class ``cls`` as ``name`` (also usable as ``@register("parity")``); ValueError on
    a name taken by another class, unless ``replace=True``, and on a class that is not a proper Task."""
    if cls is None:
        return lambda cls: registry.register(name, cls, replace=replace)
    return registry.register(name, cls, replace=replace)


def unregister(name: str) -> None:
    """Forget a registered task (a built-in that was replaced comes back)."""
    registry.unregister(name)


def options(name: str) -> dict[str, object]:
    """The options ``build(name, ...)`` takes, with their defaults (``inspect.Parameter.empty`` if required)."""
    return {option.name: option.default for option in option_parameters(get_class(name), positional=0, skip=("seed",))}


def describe(name: str) -> TaskInfo:
    """Summary, description, paper, metric and options of task ``name``, read from its class."""
    return _describe(name, get_class(name))


@functools.lru_cache(maxsize=256)
def _describe(name: str, cls: type[Task]) -> TaskInfo:
    description = own_text(cls, "description") or inspect.cleandoc(vars(cls).get("__doc__") or "")
    summary = own_text(cls, "summary") or (_first_sentence(description) if description else docstring_line(cls))
    return TaskInfo(name=name, summary=summary, description=description or summary, paper=own_text(cls, "paper"),
                    metric=cls.metric, target_mode=cls.target_mode, stateful=bool(cls.stateful),
                    equations=own_lines(cls, "equations"), options=option_infos(cls, positional=0, skip=("seed",)))


def _first_sentence(text: str) -> str:
    head, dot, _ = " ".join(text.split()).partition(". ")
    return head + dot.strip()


def build(name: str, seed: int = 0, **task_options: object) -> Task:
    """Build task ``name`` with ``seed``; unknown names and options raise ValueError naming the valid ones.

    Real-data tasks load (downloading on first use) when built, and raise
    :class:`DatasetUnavailable` with a one-line message when they cannot.
    """
    cls = _checked_class(name, seed, task_options)
    return cls(seed=seed, **task_options)


def check(name: str, seed: int = 0, **task_options: object) -> Task | None:
    """Check ``name`` and every option value as :func:`build` would, without generating or
    downloading anything; ValueError (one line) on the first problem.

    Returns the task where building it costs nothing (the generated tasks draw their
    examples only when batches are asked for), else None: a real-data task is built
    against an empty folder with downloads off, which runs every check its constructor
    makes before loading and stops where the data would be read.
    """
    cls = _checked_class(name, seed, task_options)
    if issubclass(cls, SyntheticTask):
        return cls(seed=seed, **task_options)
    valid = options(name)
    if not {"data_dir", "download"} <= set(valid):
        return None  # no way to stop it before it loads: checked when the run builds it
    data_dir = task_options.get("data_dir")
    if data_dir is not None and not (isinstance(data_dir, (str, os.PathLike)) and str(data_dir)):
        raise ValueError(f"data_dir must be a folder path, got {data_dir!r}")
    if not isinstance(task_options.get("download", True), bool):
        raise ValueError(f"download must be true or false, got {task_options['download']!r}")
    if task_options.get("progress") is not None and not callable(task_options["progress"]):
        raise ValueError(f"progress must be a function or None, got {task_options['progress']!r}")
    with tempfile.TemporaryDirectory(prefix="stability-check-") as empty:
        dry = {**task_options, "data_dir": empty, "download": False}
        if "progress" in valid:
            dry["progress"] = None
        try:
            return cls(seed=seed, **dry)
        except DatasetUnavailable:
            return None  # every option before the data is fine


def _checked_class(name: str, seed: object, task_options: dict[str, object]) -> type[Task]:
    """The class of task ``name`` once its option names, required options and seed are right."""
    cls = get_class(name)
    valid = options(name)
    unknown = sorted(set(task_options) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for task "
            f"{name!r}; valid options: {', '.join(valid)}"
        )
    missing = [
        option
        for option, default in valid.items()
        if default is inspect.Parameter.empty and option not in task_options
    ]
    if missing:
        raise ValueError(f"task {name!r} needs the option {', '.join(missing)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return cls
