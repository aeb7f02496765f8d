"""The words a preset file is written in, its error, and the checks of one value that every part shares.

    PresetError                      # one line naming the file and the key
    SCALES, STATS, OPS, RUN_FIELDS   # what a scale, a stat, an op, a run's stored field may be
    check_stat(stat, last, where, fail)
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, NoReturn

from ..core.errors import one_line  # noqa: F401 - the presets' modules read it from here

PRESETS_DIR = Path(__file__).resolve().parent  # the shipped presets, one file each
SCALES = ("classroom", "paper")
SUFFIXES = (".toml", ".json")
STATS = ("final", "first", "min", "max", "mean", "mean_last")
OPS = ("<", "<=", ">", ">=", "within", "==", "!=")
RUN_FIELDS = ("total_params", "recurrent_params", "trainable_params", "status")  # the run's stored fields
NAME_SEPARATOR = "/"  # a stored run's name is <preset>/<run>

Fail = Callable[[str], NoReturn]  # raises PresetError naming the file


class PresetError(ValueError):
    """A preset cannot be found, read or run as written; the message is one line naming the key."""


def table(value: Any, where: str, fail: Fail) -> dict:
    if not isinstance(value, dict):
        fail(f"{where!r} must be a table (an object); got {type(value).__name__}")
    return value


def unknown_keys(data: dict, valid: set[str], fail: Fail, where: str = "", kind: str = "key(s)") -> None:
    """Fail on a key of ``data`` not in ``valid``, e.g. "unknown key(s) x in layout; valid: ..."."""
    unknown = sorted(set(data) - valid)
    if unknown:
        fail(f"unknown {kind} {', '.join(unknown)}{f' in {where}' if where else ''}; valid: {', '.join(sorted(valid))}")


def vary_texts(value: Any, where: str, fail: Fail) -> None:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        fail(f"{where!r} must be a non-empty list of --vary texts (FIELD=V1,V2,...)")


def check_stat(stat: Any, last: Any, where: str, fail: Fail) -> None:
    """A claim's or a panel's ``stat`` is one of :data:`STATS`, with ``last = k`` exactly when it is
    ``mean_last``."""
    if stat not in STATS:
        fail(f"{where}: stat must be one of {', '.join(STATS)}; got {stat!r}")
    if (stat == "mean_last") != (last is not None) or (last is not None and not is_count(last)):
        fail(f"{where}: stat mean_last needs last = k (an integer >= 1), and only it takes 'last'")


def is_count(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1


def is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def number(value: float) -> str:
    """A value in a verdict's line or a mark's label: a whole number in full (16,899), else 4 digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


