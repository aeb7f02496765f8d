"""Log axes that never choke, and the scales the charts share.

A log axis cannot show zero, a negative value, an infinity or NaN.  Here values at or below zero are
clipped to the smallest positive float64 and flagged as underflow, and infinities to the largest, flagged
as overflow (:func:`clip_for_log`); a chart then draws them at the edge of its plot (:func:`log_edges`,
:func:`on_log_axis`) with a note in the tooltip, so a vanished or exploded gradient is seen and never
silently disappears.  NaN (a diverged value) stays a gap in the line and is noted as such.
"""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

TINY = float(np.finfo(np.float64).tiny)
HUGE = float(np.finfo(np.float64).max)
# The notes of clip_for_log.  A stored 0 is an exact zero (every ReLU of a step dead) or a value below
# float64's range: the trainer's norms cannot underflow above it (stability.training.probes.stable_norm).
NOTE_UNDERFLOW, NOTE_OVERFLOW = "0: exactly zero, or below float64's range (< 1e-308)", "overflow"
NOTE_NAN = "not a number"
# Distinct hues for runs (Vega's default puts neighbours in two blues, two reds).
RUN_COLOURS = alt.Scale(scheme="tableau10")
# The classes decades() gives what a log axis cannot show, far from any float64 decade (-324..308).
UNDER_DECADE, OVER_DECADE, NAN_DECADE = -10_000.0, 10_000.0, 20_000.0


def clip_for_log(values: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(values clipped into [TINY, HUGE], a label: '', 'underflow', 'overflow' or 'not a number').

    NaN (a diverged value) stays NaN, a gap in the line, and is labelled.
    """
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
    label = pd.Series("", index=numbers.index)
    label[numbers <= 0] = NOTE_UNDERFLOW
    label[np.isinf(numbers) | (numbers >= HUGE)] = NOTE_OVERFLOW
    label[numbers.isna()] = NOTE_NAN
    clipped = numbers.where(~np.isinf(numbers), HUGE).clip(lower=TINY, upper=HUGE)
    return clipped, label


def log_clip(values: pd.Series) -> tuple[pd.Series, pd.Series]:
    """:func:`clip_for_log`, except that NaN stays NaN (a gap) and is noted as such."""
    clipped, note = clip_for_log(values)
    missing = pd.to_numeric(values, errors="coerce").isna()
    return clipped.mask(missing), note.mask(missing, NOTE_NAN)


def log_edges(values: pd.Series) -> tuple[float, float]:
    """Where a log axis draws what it cannot show: a decade below the smallest positive finite value
    (underflow) and a decade above the largest (overflow), so one zero does not stretch the axis to 1e-308."""
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
    shown = numbers[np.isfinite(numbers) & (numbers > 0)]
    if shown.empty:
        return 0.1, 10.0
    return float(shown.min()) / 10.0, float(shown.max()) * 10.0


def on_log_axis(values: pd.Series, edges: tuple[float, float]) -> tuple[pd.Series, pd.Series]:
    """(y, note): positive finite values as they are, flagged ones (:func:`clip_for_log`) at the axis
    ``edges``, NaN as a gap."""
    clipped, note = log_clip(values)
    y = clipped.mask(note == NOTE_UNDERFLOW, edges[0]).mask(note == NOTE_OVERFLOW, edges[1])
    return y, note


def finite_or_nan(values: pd.Series) -> pd.Series:
    """The values as floats, anything not finite (a linear axis cannot show it) as NaN: a gap."""
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
    return numbers.where(np.isfinite(numbers))


def decades(values) -> np.ndarray:
    """The decade floor(log10 v) of every positive finite value; what a log axis cannot show gets one
    class each: zero or negative (:data:`UNDER_DECADE`), infinite (:data:`OVER_DECADE`), NaN (:data:`NAN_DECADE`)."""
    numbers = np.asarray(values, dtype=float)
    out = np.full(numbers.shape, NAN_DECADE)
    positive = np.isfinite(numbers) & (numbers > 0)
    out[positive] = np.floor(np.log10(numbers[positive]))
    out[numbers <= 0] = UNDER_DECADE
    out[np.isposinf(numbers)] = OVER_DECADE
    return out


def top_edge(values: pd.Series, log: bool) -> float:
    """Where a run without a finite objective is drawn: above every finite one (twice the largest on a
    log axis, 8 % of the span above it on a linear one; stability.charts.sweeps, Note [Sweep charts])."""
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
    shown = numbers[np.isfinite(numbers) & ((numbers > 0) if log else True)]
    if shown.empty:
        return 1.0
    if log:
        return float(shown.max()) * 2.0
    span = float(shown.max() - shown.min()) or abs(float(shown.max())) or 1.0
    return float(shown.max()) + 0.08 * span


def y_axis_scale(log_y: bool, y_range: tuple | None) -> alt.Scale:
    """A y scale: log or linear (not forced to include 0), fixed to ``y_range`` where one is given."""
    options = {"type": "log"} if log_y else {"zero": False}
    if y_range is not None:
        options.update(domain=[float(y_range[0]), float(y_range[1])], clamp=False)
    return alt.Scale(**options)


def clipped_to_plot(chart: alt.LayerChart) -> alt.LayerChart:
    """``chart`` with every mark clipped to the plot area (what a fixed y range leaves out is not drawn
    over the axes)."""
    for layer in chart.layer:
        mark = layer.mark if isinstance(layer.mark, str) else layer.mark.type
        options = {} if isinstance(layer.mark, str) else layer.mark.to_dict()
        options.pop("type", None)
        layer.mark = alt.MarkDef(type=mark, clip=True, **options)
    return chart
