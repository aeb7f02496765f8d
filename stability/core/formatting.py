"""How a value is written where a person reads it: run names, labels, axes, tables, the CLI.

    shown(0.001)        # '0.001'   floats in %g (numpy's too)
    shown([2, 2])       # '[2, 2]'  lists and dicts as JSON
    shown(None)         # 'none'    as a --vary text writes it (stability/sweeps/spec.py)
    duration(75.0)      # '1:15'          a terminal's clock: the CLI's progress line and summaries
    format_duration(75) # '1 min 15 s'    words in a sentence: the pages' status lines and estimates

Two ways to write a duration, on purpose, each in one place: a terminal line is read as a clock (as
``time``, tqdm and git print one), a page's sentence in words; both say under a minute in seconds.
"""
from __future__ import annotations

import json
import math
import numbers
from typing import Any


def shown(value: Any) -> str:
    """A value as run names, labels and chart axes show it: floats in ``%g``, lists as JSON, None as
    ``none`` (the word a sweep's values and a form take for it)."""
    if value is None:
        return "none"
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):  # float, numpy floats
        return f"{float(value):g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return str(value)


def duration(seconds: float) -> str:
    """``12.3 s`` under a minute, then ``M:SS`` and ``H:MM:SS``; ``?`` when not finite (the CLI's)."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 60:
        return f"{seconds:.1f} s"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def format_duration(seconds: float | None) -> str:
    """``"45 s"``, ``"3 min 05 s"``, ``"1 h 02 min"``; an em dash when unknown (the pages')."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "\u2014"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
