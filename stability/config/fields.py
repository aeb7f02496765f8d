"""A config field by its path: ``cell``, ``cell.hidden_size``, ``cell.m1``, ``task.seq_len``, ``train.lr``.

    field_label("train.lr")                          # 'lr'
    setting_label({"cell": "rnn", "train.lr": 1e-3}) # 'cell=rnn lr=0.001'
"""
from __future__ import annotations

from typing import Any

from ..core.formatting import shown


def field_label(path: str) -> str:
    """``train.lr`` -> ``lr``; every other path as it is (``cell``, ``cell.m1``, ``task.seq_len``)."""
    return path.removeprefix("train.")


def setting_label(setting: dict[str, Any]) -> str:
    """``"cell=rnn lr=0.001"``: the varied values as the run names show them."""
    return " ".join(f"{field_label(path)}={shown(value)}" for path, value in setting.items())
