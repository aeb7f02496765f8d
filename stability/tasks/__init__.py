"""Sequence tasks of the papers: ``available()``, ``describe(name)``, ``build(name, seed, **options)``.

>>> task = build("adding", seed=0, seq_len=200)
>>> x, y = next(task.batches("train", 32))   # x (32, 200, 2), y (32, 1)

Generated tasks (any length, no download): ``adding``, ``adding_ternary``,
``copy``. Real data, downloaded once into a checksummed cache (see
:mod:`stability.tasks.download`): ``mnist``, ``permuted_mnist``,
``mnist_rows``, ``har2``, ``ptb_word``, ``ptb_char``, ``ucr``.
"""

from __future__ import annotations

import inspect
import os
import tempfile

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
    "Task",
    "available",
    "build",
    "check",
    "data_root",
    "describe",
]

_TASKS: dict[str, type[Task]] = {
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
}


def available() -> list[str]:
    """Names of every task, generated ones first."""
    return list(_TASKS)


def options(name: str) -> dict[str, object]:
    """The options ``build(name, ...)`` takes, with their defaults (``inspect.Parameter.empty`` if required)."""
    signature = inspect.signature(_task_class(name).__init__)
    return {
        option.name: option.default
        for option in signature.parameters.values()
        if option.kind is inspect.Parameter.KEYWORD_ONLY and option.name != "seed"
    }


def describe(name: str) -> dict[str, object]:
    """What the dashboard shows before building (nothing is generated or downloaded).

    ``options`` maps each option to its default (None for the ``required_options``).
    """
    cls = _task_class(name)
    defaults = options(name)
    return {
        "name": cls.name,
        "paper": cls.paper,
        "description": cls.description,
        "metric": cls.metric,
        "target_mode": cls.target_mode,
        "stateful": cls.stateful,
        "options": {key: None if value is inspect.Parameter.empty else value for key, value in defaults.items()},
        "required_options": [key for key, value in defaults.items() if value is inspect.Parameter.empty],
    }


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
    cls = _task_class(name)
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


def _task_class(name: str) -> type[Task]:
    try:
        return _TASKS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(_TASKS)}") from None
