"""Log axes that never choke, y ranges that early outliers do not set, and the scales the charts share.

A log axis cannot show zero, a negative value, an infinity or NaN.  Here values at or below zero are
clipped to the smallest positive float64 and flagged as underflow, and infinities to the largest, flagged
as overflow (:func:`clip_for_log`); a chart then draws them at the edge of its plot (:func:`log_edges`,
:func:`on_log_axis`) with a note in the tooltip, so a vanished or exploded gradient is seen and never
silently disappears.  NaN (a diverged value) stays a gap in the line and is noted as such.  A log axis
labels every decade up to a dozen, then every few (:func:`log_axis`, Note [Log ticks]).

On a linear axis a curve's first points, far outside the rest (a loss of 2 at step 0 that falls to 0.16
and 0.025), need not set the range: :func:`robust_range` leaves them out, as TensorBoard's "ignore
outliers in chart scaling" does, and :func:`clamp_to_range` draws them at the edge (Note [Ignoring
outliers]).
"""
from __future__ import annotations

import math

import altair as alt
import numpy as np
import pandas as pd

TINY = float(np.finfo(np.float64).tiny)
HUGE = float(np.finfo(np.float64).max)
# The notes of clip_for_log.  A stored 0 is an exact zero (every ReLU of a step dead) or a value below
# float64's range: the trainer's norms cannot underflow above it (stability.training.probes.stable_norm).
NOTE_UNDERFLOW, NOTE_OVERFLOW = "0: exactly zero, or below float64's range (< 1e-308)", "overflow"
NOTE_NAN = "not a number"
# The notes of clamp_to_range: an early point drawn at the edge of a range it does not set.
NOTE_ABOVE, NOTE_BELOW = "an early outlier above the range shown", "an early outlier below the range shown"
EDGE_ABOVE, EDGE_BELOW = "above", "below"
# Distinct hues for runs (Vega's default puts neighbours in two blues, two reds).
RUN_COLOURS = alt.Scale(scheme="tableau10")
# The classes decades() gives what a log axis cannot show, far from any float64 decade (-324..308).
UNDER_DECADE, OVER_DECADE, NAN_DECADE = -10_000.0, 10_000.0, 20_000.0


def clip_for_log(values: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(values clipped into [TINY, HUGE], a label: '', 'underflow', 'overflow' or 'not a number').

    NaN (a diverged value) stays NaN, a gap in the line, and is labelled. (In numpy: a live page calls this
    for every log chart at every refresh, and a dozen pandas operations cost more than the rows do.)
    """
    numbers, index, name = _as_floats(values)
    label = np.full(numbers.shape, "", dtype=object)
    label[numbers <= 0] = NOTE_UNDERFLOW
    label[np.isinf(numbers) | (numbers >= HUGE)] = NOTE_OVERFLOW
    label[np.isnan(numbers)] = NOTE_NAN
    clipped = np.clip(np.where(np.isinf(numbers), HUGE, numbers), TINY, HUGE)  # NaN stays NaN
    return pd.Series(clipped, index=index, name=name), pd.Series(label, index=index)


def _as_floats(values) -> tuple[np.ndarray, pd.Index, object]:
    """``values`` as float64 numbers (what is not a number: NaN), with the index and name of a Series."""
    if isinstance(values, pd.Series):
        if values.dtype.kind in "fiub":
            numbers = values.to_numpy(dtype=float, na_value=np.nan)
        else:
            numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        return numbers, values.index, values.name
    numbers = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    return numbers, pd.RangeIndex(len(numbers)), None


def log_edges(values: pd.Series) -> tuple[float, float]:
    """Where a log axis draws what it cannot show: a decade below the smallest positive finite value
    (underflow) and a decade above the largest (overflow), so one zero does not stretch the axis to 1e-308."""
    numbers = _as_floats(values)[0]
    shown = numbers[np.isfinite(numbers) & (numbers > 0)]
    if not len(shown):
        return 0.1, 10.0
    return float(shown.min()) / 10.0, float(shown.max()) * 10.0


def on_log_axis(values: pd.Series, edges: tuple[float, float]) -> tuple[pd.Series, pd.Series]:
    """(y, note): positive finite values as they are, flagged ones (:func:`clip_for_log`) at the axis
    ``edges``, NaN as a gap."""
    clipped, note = clip_for_log(values)
    labels = note.to_numpy()
    y = np.where(labels == NOTE_UNDERFLOW, edges[0], np.where(labels == NOTE_OVERFLOW, edges[1], clipped.to_numpy()))
    return pd.Series(y, index=clipped.index, name=clipped.name), note


def finite_or_nan(values: pd.Series) -> pd.Series:
    """The values as floats, anything not finite (a linear axis cannot show it) as NaN: a gap."""
    numbers, index, name = _as_floats(values)
    return pd.Series(np.where(np.isfinite(numbers), numbers, np.nan), index=index, name=name)


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


# Note [Log ticks]
# ----------------
# Left to itself Vega labels a log axis by d3's log ticks, thinned to one per 40 px of height: on a chart of
# ‖∂L/∂h₀‖ spanning 35 decades it labelled "1" and "1e-35" and nothing between, so an LSTM's 2e-16 could
# not be read off it.  Here the tick values are given: 1, 2 and 5 times every decade while the data span
# less than LOG_FINE_DECADES (a curve within a decade or two still crosses labels), every decade up to
# LOG_LABELLED_DECADES, else every k-th decade with k = ceil(span / LOG_LABELLED_DECADES): at most about a
# dozen labels, never fewer than every third decade up to 36.  The values run over the whole float64 range:
# Vega draws those within the scale's domain and drops the rest, so the spec depends on the data only
# through the step and stays the same while rows arrive and the curves move through the decades (a live
# chart then gets new rows, not a new spec: stability.charts.lines, Note [Light charts]).  The axis's tick
# count is the number of values (Vega thins given values down to it), labels may not be dropped for
# overlapping (at a dozen they do not overlap on a chart of a page's height) nor shifted inwards at the
# axis's ends (Streamlit's theme sets labelFlush, which pushed "1" onto "0.001").  Labels read "1e-16" below
# 0.001 and above 10,000, plainly between.
LOG_FINE_DECADES = 3
LOG_LABELLED_DECADES = 12
FLOAT64_DECADES = (-323, 308)   # 10**-323 is the smallest decade a float64 holds (subnormal), 10**308 the largest
LOG_LABEL_EXPR = ("datum.value >= 0.001 && datum.value <= 10000 ? format(datum.value, '~g') "
                  ": replace(format(datum.value, '.0e'), 'e+', 'e')")


def decade_span(values) -> float:
    """How many decades the positive finite ``values`` span (0 for none or one)."""
    numbers = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce"), dtype=float)
    shown = numbers[np.isfinite(numbers) & (numbers > 0)]
    return float(np.log10(shown.max()) - np.log10(shown.min())) if shown.size else 0.0


def log_tick_step(values) -> int:
    """Decades between two labels of a log axis over ``values``: 0 (1, 2 and 5 times every decade) under
    :data:`LOG_FINE_DECADES` decades, 1 up to :data:`LOG_LABELLED_DECADES`, then
    ceil(span / LOG_LABELLED_DECADES) (Note [Log ticks])."""
    span = decade_span(values)
    return 0 if span < LOG_FINE_DECADES else max(1, math.ceil(span / LOG_LABELLED_DECADES - 1e-9))


def log_tick_values(step: int) -> list[float]:
    """Every ``step``-th power of ten a float64 holds (the multiples of ``step``), or with ``step`` 0 every
    power of ten and its doubles and fives (Note [Log ticks])."""
    low, high = FLOAT64_DECADES
    if step == 0:
        return [float(f"{digit}e{exponent}") for exponent in range(low, high) for digit in (1, 2, 5)]
    return [float(f"1e{exponent}") for exponent in range(low, high + 1) if exponent % step == 0]


def log_axis(values, **options) -> alt.Axis:
    """A log y axis for ``values`` (what the chart draws, edges included) labelled as Note [Log ticks] says."""
    return log_axis_at(log_tick_step(values), **options)


def log_axis_at(step: int, **options) -> alt.Axis:
    """A log y axis labelling every ``step``-th decade (0: 1, 2 and 5 times every decade; :func:`log_tick_step`)."""
    ticks = log_tick_values(step)
    return alt.Axis(values=ticks, tickCount=len(ticks), labelExpr=LOG_LABEL_EXPR, labelOverlap=False,
                    labelFlush=False, **options)


# Note [Ignoring outliers]
# ------------------------
# TensorBoard's "ignore outliers in chart scaling" (on by default) sets a chart's y range to the 5th..95th
# percentile of the points it shows (d3.quantile, interpolating between two points) instead of their
# extremes, so a loss of 2 at step 0 does not squash a race between 0.16 and 0.025 into one line at the
# bottom.  Here the same percentiles of every point drawn set the range, taken at a point rather than
# between two (numpy's "lower" 95th, "higher" 5th: with a live run's first few points, interpolating
# would carry most of an outlier into the range), widened to every point after the first EARLY_SHARE of
# its curve's x span: only a curve's early points are ever left out (a late drop below
# the baseline, or a late divergence, is exactly what a chart must show), and only those outside the
# central 90 % of all the points.  An early point is an outlier only when it lies more than OUTLIER_ROOM
# of that range's span beyond it: the range is widened to every point within that room (a loss curve's
# natural fall from 1.2 to 0.2 is drawn whole, a 4.0 beside a 3.9 is no outlier, a spike of 100 or a first
# 2.0 above a race between 0.16 and 0.025 is).  With RANGE_MARGIN of its span added on either side, a point still
# outside the range is drawn at its edge (:func:`clamp_to_range`), marked there (▲ above, ▼ below) and
# noted in its tooltip with its true value: nothing is dropped, and nothing moves the range.  Since the
# points are clamped in the rows rather than the range written into the spec, a live chart's spec does
# not change as the range moves (stability.charts.lines, Note [Light charts]).  Three points or fewer
# are all shown, as TensorBoard does; so is everything on a log axis, whose decades hold any spike.
OUTLIER_QUANTILES = (0.05, 0.95)
EARLY_SHARE = 0.1
OUTLIER_ROOM = 0.5
RANGE_MARGIN = 0.05


def early_points(along: np.ndarray, series: np.ndarray) -> np.ndarray:
    """Whether each point lies in the first :data:`EARLY_SHARE` of its own curve's x span (``series``: a
    curve id per point)."""
    along = np.asarray(along, dtype=float)
    codes, kinds = pd.factorize(np.asarray(series))
    first, last = np.full(len(kinds), np.nan), np.full(len(kinds), np.nan)
    np.fmin.at(first, codes, along)  # each curve's smallest and largest x, a NaN skipped
    np.fmax.at(last, codes, along)
    first, last = first[codes], last[codes]
    return along <= first + EARLY_SHARE * (last - first)


def robust_range(values, early, references=()) -> tuple[float, float] | None:
    """The y range of Note [Ignoring outliers], or None when every point fits (or there are three or fewer).

    ``values``: every y a chart draws (a 2-D array: one column per drawn line of each point, raw and
    smoothed); ``early``: per point (row), whether it is in its curve's early part; ``references``: values
    that must stay in range (a baseline).
    """
    if len(early) == 0:
        return None
    numbers = np.asarray(values, dtype=float).reshape(len(early), -1)
    finite = np.isfinite(numbers)
    shown = numbers[finite]
    if shown.size <= 3:
        return None
    low = np.quantile(shown, OUTLIER_QUANTILES[0], method="higher")
    high = np.quantile(shown, OUTLIER_QUANTILES[1], method="lower")
    settled = numbers[finite & ~np.asarray(early, dtype=bool)[:, None]]
    kept = [low, high, *settled[[settled.argmin(), settled.argmax()]]] if settled.size else [low, high]
    kept += [float(value) for value in references if value is not None and math.isfinite(float(value))]
    low, high = min(kept), max(kept)
    room = OUTLIER_ROOM * (high - low)
    near = shown[(shown >= low - room) & (shown <= high + room)]  # not far enough out to be an outlier
    low, high = min(low, near.min(initial=low)), max(high, near.max(initial=high))
    margin = RANGE_MARGIN * (high - low) if high > low else RANGE_MARGIN * abs(high) or 1.0
    low, high = low - margin, high + margin
    return None if shown.min() >= low and shown.max() <= high else (float(low), float(high))


def clamp_to_range(values: np.ndarray, bounds: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """(float ``values`` clamped into ``bounds``, each point's edge: "" inside, :data:`EDGE_ABOVE` or
    :data:`EDGE_BELOW`); NaN stays NaN. Arrays in and out: a live chart clamps at every look."""
    values = np.asarray(values, dtype=float)
    edge = np.where(values > bounds[1], EDGE_ABOVE, np.where(values < bounds[0], EDGE_BELOW, ""))
    return np.clip(values, bounds[0], bounds[1]), edge
