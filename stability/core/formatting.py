"""How a value is written where a person reads it: run names, labels, tables, the CLI.

    shown(0.001)        # '0.001'   floats in %g
    shown([2, 2])       # '[2, 2]'  lists and dicts as JSON
"""
from __future__ import annotations

import json
from typing import Any


def shown(value: Any) -> str:
    """A value as run names and labels show it: floats in ``%g``, lists as JSON."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)
