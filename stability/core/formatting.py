"""How a value is written where a person reads it: run names, labels, axes, tables, the CLI.

    shown(0.001)        # '0.001'   floats in %g (numpy's too)
    shown([2, 2])       # '[2, 2]'  lists and dicts as JSON
    shown(None)         # 'none'    as a --vary text writes it (stability/sweeps/spec.py)
"""
from __future__ import annotations

import json
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
