"""A config field a sweep or a preset varies, drawn as an axis: numbers or names, in which order, on a
linear or a log scale, and with what title.

A field of numbers only is quantitative; a field of names (cell), or with None among its values (no
clipping), is categorical, its values in the order given (numbers ascending).  A field whose values span
decades (lr) belongs on a log axis (:func:`log_axis_for`).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..config.fields import field_label
from ..core.formatting import shown

LOG_FIELDS = ("train.lr", "train.weight_decay")  # drawn on a log axis whenever their values are positive
LOG_SPAN = 100.0  # other numeric fields: a log axis when their positive values span this factor or more


def is_numeric_field(values: pd.Series) -> bool:
    """Numbers only (no None, no bools, no names): a quantitative axis."""
    present = list(values)
    return bool(present) and all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                                 and not (isinstance(v, float) and math.isnan(v)) for v in present)


def category_order(values: pd.Series) -> list[str]:
    """Distinct labels of ``values``: numbers in ascending order, names in the order they first appear."""
    distinct = list(dict.fromkeys(values))
    if is_numeric_field(pd.Series(distinct, dtype=object)):
        distinct = sorted(distinct)
    return list(dict.fromkeys(shown(v) for v in distinct))


def field_title(path: str | None) -> str:
    """An axis title for a varied field: ``train.lr`` -> ``lr`` (the field's label, one definition)."""
    return field_label(path or "")


def log_axis_for(field: str, values, log: bool = False) -> bool:
    """Whether a varied field belongs on a log axis: its ``--vary`` said ``log``, or it is a learning rate
    (:data:`LOG_FIELDS`), or its values span :data:`LOG_SPAN` or more; always positive numbers."""
    present = pd.Series(list(values), dtype=object)
    if not is_numeric_field(present):
        return False
    numbers = present.astype(float)
    if not (numbers > 0).all():
        return False
    return bool(log or field in LOG_FIELDS or numbers.max() / numbers.min() >= LOG_SPAN)


def log_fields(varies) -> frozenset[str]:
    """The varied fields of a sweep (its ``Vary`` list: ``field``, ``points()``, ``log``) that belong on a log
    axis (:func:`log_axis_for` of each field's listed values, or its sampled range's two ends)."""
    return frozenset(vary.field for vary in varies if log_axis_for(vary.field, vary.points(), vary.log))


def axis_positions(values: pd.Series, log: bool) -> tuple[pd.Series, list[tuple[float, str]]]:
    """Positions in [0, 1] of one parallel axis and its tick labels: numbers linearly (log10 with
    ``log``), anything else as ordinal positions in :func:`category_order`."""
    if is_numeric_field(values):
        numbers = values.astype(float)
        log = log and bool((numbers > 0).all())
        scaled = np.log10(numbers) if log else numbers
        low, high = float(scaled.min()), float(scaled.max())
        position = (scaled - low) / (high - low) if high > low else pd.Series(0.5, index=values.index)
        distinct = np.unique(numbers)
        if len(distinct) > 6:
            distinct = distinct[np.unique(np.linspace(0, len(distinct) - 1, 6).round().astype(int))]
        ticks = [(float((np.log10(v) if log else v) - low) / (high - low) if high > low else 0.5, shown(v))
                 for v in distinct]
        return position.astype(float), ticks
    order = category_order(values)
    step = 1.0 / (len(order) - 1) if len(order) > 1 else 0.0
    where = {label: (index * step if len(order) > 1 else 0.5) for index, label in enumerate(order)}
    return values.map(shown).map(where).astype(float), [(where[label], label) for label in order]
