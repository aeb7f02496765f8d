"""Chart builders: pure functions DataFrame -> altair.Chart (no streamlit).

Log scales never choke: values at or below zero are clipped to the smallest
positive float64 and flagged as underflow, and infinities to the largest,
flagged as overflow, so a vanished or exploded gradient is drawn at the
edge of the plot and says so in its tooltip instead of disappearing.

The training dashboards (:func:`metric_chart`, :func:`singular_value_band_chart`,
:func:`gradient_flow_heatmap`) read the store's long metric rows; :func:`prepare`
smooths them like TensorBoard and decimates them so a long run stays cheap to draw.

The sweep charts (:func:`sweep_objective_chart`, :func:`sweep_heatmap`, :func:`parallel_coordinates`,
:func:`grouped_curves_chart`) read a sweep's per-run results and stability.analysis.groups' statistics over
seeds (Note [Sweep charts]).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import altair as alt
import numpy as np
import pandas as pd

from ..config.fields import field_label as field_title  # an axis title for a field: train.lr -> lr
from ..core.metric_names import H_T_NORM, SPECTRUM

TINY = float(np.finfo(np.float64).tiny)
HUGE = float(np.finfo(np.float64).max)
# The notes of clip_for_log.  A stored 0 is an exact zero (every ReLU of a step dead) or a value below
# float64's range: the trainer's norms cannot underflow above it (stability.training.probes.stable_norm).
NOTE_UNDERFLOW, NOTE_OVERFLOW = "0: exactly zero, or below float64's range (< 1e-308)", "overflow"
NOTE_NAN = "not a number"


def clip_for_log(values: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(values clipped into [TINY, HUGE], a label: '', 'underflow', 'overflow' or 'not a number').

    NaN (a diverged value) stays NaN, a gap in the line, and is labelled.
    """
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
    label = pd.Series("", index=numbers.index)
    label[numbers <= 0] = NOTE_UNDERFLOW
    label[np.isinf(numbers) | (numbers >= HUGE)] = NOTE_OVERFLOW
    label[numbers.isna()] = "not a number"
    clipped = numbers.where(~np.isinf(numbers), HUGE).clip(lower=TINY, upper=HUGE)
    return clipped, label


def gradient_flow_chart(per_step: pd.DataFrame, title: str = "") -> alt.Chart:
    """‖∂h_T/∂h_t‖ and the bound ‖W‖^(T−t) against t, log y.

    ``per_step`` is :attr:`stability.training.probes.GradientFlow.per_step`.
    """
    measured, measured_flag = clip_for_log(per_step["grad_norm"])
    bound, bound_flag = clip_for_log(per_step["bound"])
    long = pd.concat([
        pd.DataFrame({"t": per_step["t"], "steps_back": per_step["steps_back"], "value": measured,
                      "raw": per_step["grad_norm"], "flag": measured_flag, "series": "‖∂h_T/∂h_t‖ (measured)"}),
        pd.DataFrame({"t": per_step["t"], "steps_back": per_step["steps_back"], "value": bound,
                      "raw": per_step["bound"], "flag": bound_flag, "series": "‖W‖^(T−t) (bound)"}),
    ], ignore_index=True)
    colour = alt.Color("series:N", title=None,
                       scale=alt.Scale(domain=["‖∂h_T/∂h_t‖ (measured)", "‖W‖^(T−t) (bound)"],
                                       range=["#1f77b4", "#999999"]),
                       legend=alt.Legend(orient="top"))
    base = alt.Chart(long).encode(
        x=alt.X("t:Q", title="time step t (T = last)"),
        y=alt.Y("value:Q", title="gradient norm (log)", scale=alt.Scale(type="log"), axis=alt.Axis(format=".0e")),
        color=colour,
        strokeDash=alt.StrokeDash("series:N", legend=None,
                                  scale=alt.Scale(domain=["‖∂h_T/∂h_t‖ (measured)", "‖W‖^(T−t) (bound)"],
                                                  range=[[1, 0], [6, 4]])),
        tooltip=[alt.Tooltip("t:Q"), alt.Tooltip("steps_back:Q", title="T − t"),
                 alt.Tooltip("series:N"), alt.Tooltip("raw:Q", title="value", format=".3e"),
                 alt.Tooltip("flag:N", title="note")],
    )
    lines = base.mark_line(strokeWidth=2)
    flagged = base.transform_filter(alt.datum.flag != "").mark_point(shape="triangle-down", size=40, filled=True)
    return (lines + flagged).properties(title=title, height=320)


def singular_values_chart(sigma: np.ndarray, title: str = "") -> alt.Chart:
    """Singular values of W, largest first, with the orthogonal reference σ = 1."""
    frame = pd.DataFrame({"index": np.arange(1, len(sigma) + 1), "sigma": np.asarray(sigma, dtype=float)})
    frame["distance"] = (frame["sigma"] - 1.0).abs()
    points = alt.Chart(frame).mark_bar(width={"band": 0.8}).encode(
        x=alt.X("index:O", title="i (largest first)", axis=alt.Axis(labelOverlap=True)),
        y=alt.Y("sigma:Q", title="σ_i"),
        # A floor on the colour domain keeps rounding noise (|σ − 1| ~ 1e-15) from looking red.
        color=alt.Color("distance:Q", title="|σ_i − 1|", legend=alt.Legend(format=".2g"),
                        scale=alt.Scale(scheme="orangered", domain=[0.0, max(0.05, float(frame["distance"].max()))])),
        tooltip=[alt.Tooltip("index:O", title="i"), alt.Tooltip("sigma:Q", format=".5f"),
                 alt.Tooltip("distance:Q", title="|σ − 1|", format=".2e")],
    )
    reference = alt.Chart(pd.DataFrame({"sigma": [1.0]})).mark_rule(strokeDash=[4, 4], color="#555").encode(
        y="sigma:Q")
    return (points + reference).properties(title=title, height=320)


# --- Training dashboards: metric curves, singular-value bands, gradient-flow heatmaps ---------------------

# Note [Light charts]
# -------------------
# A live page redraws its charts while a worker trains beside it, and in the browser a redraw runs every
# row through Vega's dataflow with Streamlit's expression interpreter (pages/live.py, Note [Watching
# cheaply]).  What a chart costs there grows with rows x layers x fields, so a live chart sends what it
# draws and no more, hiding nothing:
# * at most ~2 points per pixel column a line (prepare's max_points), picked by min-max decimation, so a
#   one-step spike is never lost, and on a log axis a row of every decade the series visited, so a
#   gradient falling through 1e-10 still shows 1e-10; rows are picked, never averaged, so a tiny value is
#   drawn as it is, never as 0;
# * the lines get only the columns they draw; the tooltip fields go with the hover points, at most
#   hover_points a line (min-max picked again: a spike keeps its tooltip);
# * rows a log axis cannot show go in a small dataset of their own instead of a filter over every row;
# * the spec never depends on the rows (the heatmap's colour domain and axis labels come from Vega), so a
#   page can put new rows into the chart it has (metric_chart_rows, singular_value_band_rows,
#   gradient_flow_heatmap_rows give a chart's datasets, in the order its layers use them).

X_AXES = {"step": ("step", "step"), "wall_time": ("time_s", "wall time (s)")}
PREPARED_COLUMNS = ["run_id", "run", "name", "step", "wall_time", "time_s", "value", "smoothed"]
MAX_SMOOTHING = 0.99
# Distinct hues for runs (Vega's default puts neighbours in two blues, two reds).
RUN_COLOURS = alt.Scale(scheme="tableau10")
HEATMAP_MAX_STEPS = 40
HEATMAP_MAX_T = 120  # 40 x 120 cells stays under altair's 5000-row default limit
EMA_BLOCK = 128


def _check_x(x: str) -> None:
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")


def _check_smoothing(smoothing: float) -> None:
    if not 0.0 <= float(smoothing) <= MAX_SMOOTHING:
        raise ValueError(f"smoothing must be in [0, {MAX_SMOOTHING}], got {smoothing!r}")


def _check_max_points(max_points: int) -> None:
    if isinstance(max_points, bool) or not isinstance(max_points, (int, np.integer)) or max_points < 4:
        raise ValueError(f"max_points must be an integer >= 4 (first, last, one bucket's min and max), "
                         f"got {max_points!r}")



def ema(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's debiased exponential moving average.

    s_k = w s_{k−1} + (1 − w) v_k with s_0 = 0, reported as s_k / (1 − w^n_k) where n_k counts the finite
    values so far, so the first point is not dragged towards zero. Non-finite values (a diverged NaN/inf)
    are passed through unsmoothed and skipped by the average, as TensorBoard does.

    Vectorised in blocks of ``EMA_BLOCK``: inside a block s = (1 − w) L v + w^(i+1) s_start with the
    lower-triangular L_ij = w^(i−j), so only the blocks' start values are carried in a Python loop and no
    power of w exceeds 1.
    """
    out = np.array(values, dtype=float)
    finite = np.isfinite(out)
    if weight == 0.0 or not finite.any():
        return out
    v = out[finite]
    n, block = len(v), EMA_BLOCK
    padded = np.zeros(-(-n // block) * block)
    padded[:n] = v
    lag = np.arange(block)[:, None] - np.arange(block)[None, :]
    decay = np.where(lag >= 0, weight ** np.maximum(lag, 0), 0.0)  # (B, B): L_ij = w^(i−j), j ≤ i
    decay[decay < TINY] = 0.0  # subnormal powers of a small w only slow the product down
    local = (1.0 - weight) * padded.reshape(-1, block) @ decay.T  # (n_blocks, B): each block started from 0
    starts = np.zeros(len(local))
    for m in range(1, len(local)):
        starts[m] = local[m - 1, -1] + weight ** block * starts[m - 1]
    smoothed = (local + starts[:, None] * weight ** np.arange(1, block + 1)).ravel()[:n]
    out[finite] = smoothed / -np.expm1(np.arange(1, n + 1) * np.log(weight))  # 1 − w^n_k
    return out


def downsample_indices(columns: list[np.ndarray], max_points: int, *, log: bool = False) -> np.ndarray:
    """Sorted row indices keeping at most ``max_points`` rows: first, last, and per bucket the argmin and
    argmax of every column, so spikes survive (min-max decimation over equal-count buckets).

    NaN counts as neither small nor large; infinities are kept as extremes. Rows are picked, never
    averaged, so a tiny value is drawn as it is, never as 0. With ``log`` (a log-scale axis) the first
    row of every distinct decade of every column is kept too (:func:`decades`), so no order of magnitude a
    series visited disappears. The buckets split the interior rows 1..n−2 into contiguous runs of equal
    length (±1), as many as the budget left after those rows allows: (max_points − kept) // (2 × columns),
    at least one; so only a series spanning more decades than ``max_points`` gets more rows.
    """
    n = len(columns[0]) if columns else 0
    if n <= max_points:
        return np.arange(n)
    keep = [np.array([0, n - 1])]
    if log:
        keep += [np.unique(decades(column), return_index=True)[1] for column in columns]
    spare = max_points - len(np.unique(np.concatenate(keep)))
    buckets = max(1, spare // (2 * len(columns)))
    inner = np.arange(1, n - 1)
    bucket = (inner - 1) * buckets // (n - 2)  # equal-count, contiguous buckets over the interior rows
    starts = np.searchsorted(bucket, np.arange(buckets))
    for column in columns:
        values = np.asarray(column, dtype=float)[inner]
        for key in (np.where(np.isnan(values), np.inf, values), -np.where(np.isnan(values), -np.inf, values)):
            hits = np.flatnonzero(key == np.minimum.reduceat(key, starts)[bucket])
            first = np.unique(bucket[hits], return_index=True)[1]  # the first extreme of each bucket
            keep.append(inner[hits[first]])
    return np.unique(np.concatenate(keep))


UNDER_DECADE, OVER_DECADE, NAN_DECADE = -10_000.0, 10_000.0, 20_000.0


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


def _with_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (reindexed 0..n−1) with the display label ``run`` and ``time_s``."""
    data = frame.reset_index(drop=True)
    if "run" in data:
        data["run"] = data["run"].astype(str)
    else:
        codes, ids = pd.factorize(data["run_id"])
        data["run"] = np.array([str(run_id) for run_id in ids], dtype=object)[codes]
    data["time_s"] = data["wall_time"] - data.groupby("run_id")["wall_time"].transform("min")
    return data


def log_ema(values: np.ndarray, weight: float) -> np.ndarray:
    """:func:`ema` of log10 of the values: the geometric moving average a log axis needs.

    On a log axis a linear average is dominated by the largest values: a gradient norm falling from
    1e-6 to 1e-22 would be drawn near 1e-7 for as long as the window remembers the early points.
    Positive finite values are averaged as exponents; zeros and non-finite values pass through as they
    are (the chart flags them) and are skipped by the average.
    """
    out = np.array(values, dtype=float)
    positive = np.isfinite(out) & (out > 0)
    exponents = np.full(len(out), np.nan)
    exponents[positive] = np.log10(out[positive])
    out[positive] = 10.0 ** ema(exponents, weight)[positive]
    return out


def prepare(frame: pd.DataFrame, *, smoothing: float = 0.0, x: str = "step", max_points: int = 2000,
            log: bool = False) -> pd.DataFrame:
    """Metric rows ready to plot: one series per (run, name), ordered along ``x``, smoothed and decimated.

    ``frame`` has columns run_id, step, wall_time, name, value and optionally ``run`` (a display label,
    default ``str(run_id)``). Returns columns run_id, run, name, step, wall_time, time_s (seconds since the
    run's first row in ``frame``), value (raw) and smoothed (:func:`ema` with weight ``smoothing``, or
    :func:`log_ema` with ``log``, computed on the full series before decimation), sorted by run, name and
    ``x``, at most ``max_points`` rows per series (:func:`downsample_indices` on the raw values, so the
    first, last, smallest and largest rows survive, and with ``log`` every decade the series visited).
    """
    _check_x(x)
    _check_smoothing(smoothing)
    _check_max_points(max_points)
    if frame.empty:
        return pd.DataFrame({column: pd.Series(dtype=object if column in ("run", "name") else float)
                             for column in PREPARED_COLUMNS})
    data = _with_labels(frame)
    along, values = data[X_AXES[x][0]].to_numpy(), data["value"].to_numpy(dtype=float)
    average = log_ema if log else ema
    rows, smoothed = [], []
    for positions in data.groupby(["run_id", "run", "name"], sort=True).indices.values():
        positions = positions[np.argsort(along[positions], kind="stable")]
        keep = downsample_indices([values[positions]], max_points, log=log)
        rows.append(positions[keep])
        smoothed.append(average(values[positions], float(smoothing))[keep])
    out = data.iloc[np.concatenate(rows)][PREPARED_COLUMNS[:-1]].reset_index(drop=True)
    out["smoothed"] = np.concatenate(smoothed)
    return out


def _log_clip(values: pd.Series) -> tuple[pd.Series, pd.Series]:
    """:func:`clip_for_log`, except that NaN stays NaN (a gap) and is noted as such."""
    clipped, note = clip_for_log(values)
    missing = pd.to_numeric(values, errors="coerce").isna()
    return clipped.mask(missing), note.mask(missing, NOTE_NAN)


def _log_edges(values: pd.Series) -> tuple[float, float]:
    """Where a log axis draws what it cannot show: a decade below the smallest positive finite value
    (underflow) and a decade above the largest (overflow), so one zero does not stretch the axis to 1e-308."""
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
    shown = numbers[np.isfinite(numbers) & (numbers > 0)]
    if shown.empty:
        return 0.1, 10.0
    return float(shown.min()) / 10.0, float(shown.max()) * 10.0


def _on_log_axis(values: pd.Series, edges: tuple[float, float]) -> tuple[pd.Series, pd.Series]:
    """(y, note): positive finite values as they are, flagged ones (:func:`clip_for_log`) at the axis
    ``edges``, NaN as a gap."""
    clipped, note = _log_clip(values)
    y = clipped.mask(note == NOTE_UNDERFLOW, edges[0]).mask(note == NOTE_OVERFLOW, edges[1])
    return y, note


def _finite_or_nan(values: pd.Series) -> pd.Series:
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
    return numbers.where(np.isfinite(numbers))


def metric_chart(frame: pd.DataFrame, *, names, baseline: float | None = None, baseline_label: str | None = None,
                 log_y: bool = False, x: str = "step", smoothing: float = 0.0, title: str = "",
                 height: int = 260, max_points: int = 2000, hover_points: int | None = None,
                 marks: tuple = (), y_range: tuple | None = None, legend: str = "top") -> alt.LayerChart:
    """Curves of the metrics ``names`` for every run in ``frame`` (long metric rows, see :func:`prepare`).

    Colour = run label, stroke dash = metric name when there are several. With ``smoothing`` > 0 the
    smoothed curve is drawn over the faint raw one. Clicking a run in the legend highlights it; hovering
    shows the nearest points' values. On a log y scale zeros and infinities are flagged
    (:func:`clip_for_log`), drawn a decade beyond the data (:func:`_log_edges`) and marked with a triangle.
    ``baseline`` (e.g. the task's chance-level loss) is a dashed rule labelled ``baseline_label``; on a log
    scale a baseline <= 0 has no place and is left out. ``marks``: more dashed rules, ``(value, label)``
    pairs (a paper's numbers), drawn as the baseline is. ``y_range`` ``(low, high)`` fixes the y axis
    (the range a paper's panel shows) and clips what falls outside it. At most ``max_points`` rows per
    curve (:func:`prepare`).

    ``hover_points`` draws the chart lighter for a live panel (Note [Light charts]): the lines get a
    dataset of only the columns they draw, the hover points (the nearest-point tooltips) at most
    ``hover_points`` rows per curve, picked by :func:`downsample_indices` so a spike keeps its tooltip,
    and the flagged rows of a log scale a small dataset of their own (no layer while there are none)
    instead of a filter over every row. :func:`metric_chart_rows` gives the datasets alone.
    """
    names = [names] if isinstance(names, str) else list(names)
    rows = metric_chart_rows(frame, names=names, baseline=baseline, baseline_label=baseline_label, log_y=log_y,
                             x=x, smoothing=smoothing, max_points=max_points, hover_points=hover_points,
                             marks=marks)
    x_field, x_title = X_AXES[x]
    y_title = (names[0] if len(names) == 1 else "value") + (" (log)" if log_y else "")
    y_scale = _y_scale(log_y, y_range)
    legend_pick = alt.selection_point(fields=["run"], bind="legend")
    hover = alt.selection_point(fields=[x_field], nearest=True, on="pointerover",
                                clear="pointerout", empty=False)
    encoding = {"x": alt.X(f"{x_field}:Q", title=x_title),
                "color": alt.Color("run:N", title="run", legend=_legend(legend), scale=RUN_COLOURS)}
    if len(names) > 1:
        encoding["strokeDash"] = alt.StrokeDash("name:N", title="metric", legend=alt.Legend(orient="top"))
    lines = alt.Chart(rows.lines).encode(**encoding)
    points = lines if rows.hover is rows.lines else alt.Chart(rows.hover).encode(**encoding)
    y, y_raw = alt.Y("y:Q", title=y_title, scale=y_scale), alt.Y("y_raw:Q", title=y_title, scale=y_scale)
    tooltip = _metric_tooltip(smoothing)

    layers = []
    if smoothing > 0:
        layers.append(lines.mark_line(strokeWidth=1).encode(
            y=y_raw, opacity=alt.condition(legend_pick, alt.value(0.25), alt.value(0.04))))
    layers.append(lines.mark_line(strokeWidth=2).encode(
        y=y, opacity=alt.condition(legend_pick, alt.value(1.0), alt.value(0.12))).add_params(legend_pick))
    layers.append(points.mark_point(size=40, filled=True).encode(
        y=y, opacity=alt.condition(hover, alt.value(1.0), alt.value(0.0)), tooltip=tooltip).add_params(hover))
    if log_y and (rows.flagged is None or len(rows.flagged)):
        marked = (points.transform_filter(alt.datum.note != "") if rows.flagged is None
                  else alt.Chart(rows.flagged).encode(**encoding))
        layers.append(marked.mark_point(shape="triangle-down", size=50, filled=True).encode(y=y_raw, tooltip=tooltip))
    if rows.baseline is not None:
        layers += _baseline_layers(rows.baseline, y_title, y_scale)
    chart = alt.layer(*layers).properties(title=title, height=height)
    return chart if y_range is None else _clipped(chart)


def _legend(orient: str) -> alt.Legend:
    """The run legend above the plot: in one row (``"top"``, a few short names), or in two columns with no
    name cut short (``"wrap"``: many or long names; the caller makes the chart taller by a row a pair)."""
    return alt.Legend(orient="top") if orient == "top" else alt.Legend(orient="top", columns=2, labelLimit=400)


def _y_scale(log_y: bool, y_range: tuple | None) -> alt.Scale:
    """A y scale: log or linear (not forced to include 0), fixed to ``y_range`` where one is given."""
    options = {"type": "log"} if log_y else {"zero": False}
    if y_range is not None:
        options.update(domain=[float(y_range[0]), float(y_range[1])], clamp=False)
    return alt.Scale(**options)


def _clipped(chart: alt.LayerChart) -> alt.LayerChart:
    """``chart`` with every mark clipped to the plot area (what a fixed y range leaves out is not drawn
    over the axes)."""
    for layer in chart.layer:
        mark = layer.mark if isinstance(layer.mark, str) else layer.mark.type
        options = {} if isinstance(layer.mark, str) else layer.mark.to_dict()
        options.pop("type", None)
        layer.mark = alt.MarkDef(type=mark, clip=True, **options)
    return chart


@dataclass
class MetricRows:
    """The datasets of a :func:`metric_chart`: the lines', the hover points' (the same frame unless the
    chart is light), the flagged rows of a light log chart (None: filtered from the hover rows), the baseline."""

    lines: pd.DataFrame
    hover: pd.DataFrame
    flagged: pd.DataFrame | None = None
    baseline: pd.DataFrame | None = None

    def datasets(self) -> list[pd.DataFrame]:
        """The distinct frames in the order the chart's layers first use them (tests/test_charts.py checks
        the order against the chart's own)."""
        frames = [self.lines] + ([self.hover] if self.hover is not self.lines else [])
        frames += [self.flagged] if self.flagged is not None and len(self.flagged) else []
        return frames + ([self.baseline] if self.baseline is not None else [])


def metric_chart_rows(frame: pd.DataFrame, *, names, baseline: float | None = None,
                      baseline_label: str | None = None, log_y: bool = False, x: str = "step",
                      smoothing: float = 0.0, max_points: int = 2000, hover_points: int | None = None,
                      marks: tuple = ()) -> MetricRows:
    """The rows :func:`metric_chart` draws with these arguments, without building the chart."""
    names = [names] if isinstance(names, str) else list(names)
    data = _metric_rows(frame, names, smoothing, x, log_y, max_points)
    rows = MetricRows(*_metric_sources(data, X_AXES[x][0], smoothing, log_y, hover_points))
    rows.baseline = reference_rows(([(baseline, baseline_label or "baseline")] if baseline is not None else [])
                                   + list(marks), log_y)
    return rows


def reference_rows(marks, log_y: bool = False) -> pd.DataFrame | None:
    """The dashed reference lines ``(value, label)`` a chart draws (:func:`_baseline_layers`); on a log
    scale a value <= 0 has no place and is left out; None when none is left."""
    kept = [(float(value), label) for value, label in marks
            if value is not None and math.isfinite(float(value)) and not (log_y and float(value) <= 0)]
    if not kept:
        return None
    return pd.DataFrame({"baseline": [value for value, _ in kept], "label": [label for _, label in kept]})


def field_chart(points: pd.DataFrame, *, x_title: str, y_title: str, log_y: bool = False, title: str = "",
                marks: tuple = (), height: int = 260, y_range: tuple | None = None,
                legend: str = "top") -> alt.LayerChart:
    """A statistic of each run against a config field (a preset's panel with a field x, e.g. the final
    accuracy against depth L): ``points`` has x (numbers, or texts drawn in first-seen order), run (the
    line's label), value and run_id. A line per label through its points sorted by x; on a log y scale
    a zero or an infinity is drawn at the edge as a triangle (:func:`clip_for_log`), a NaN is left out.
    ``marks``: dashed rules ``(value, label)``. Numbers spread over more than two decades are drawn
    evenly spaced in their order (a σ grid of 0, 0.01, 5 would otherwise crowd into one end)."""
    data = points.copy()
    numeric_x, order = _is_numeric_field(data["x"]), None
    if numeric_x:  # values over several decades (σ = 0, 0.01, 5): evenly spaced, in numeric order
        values_x = pd.to_numeric(data["x"]).astype(float)
        positive = values_x[values_x > 0]
        if len(positive) > 1 and positive.max() / positive.min() > LOG_SPAN:
            numeric_x, order = False, [_value_label(value) for value in sorted(set(values_x))]
    else:
        order = list(dict.fromkeys(data["x"].map(_value_label)))  # texts: first seen
    data["x"] = data["x"].astype(float) if numeric_x else data["x"].map(_value_label)
    values = data["value"].astype(float)
    if log_y:
        edges = _log_edges(values)
        data["y"], data["note"] = _on_log_axis(values, edges)
    else:
        data["y"] = _finite_or_nan(values)
        data["note"] = np.where(np.isinf(values), NOTE_OVERFLOW, "")
    data = data.dropna(subset=["y"]).sort_values(["run", "x"], kind="stable")
    ticks = sorted(set(data["x"])) if numeric_x else []
    x = alt.X("x:Q" if numeric_x else "x:O", title=x_title, sort=order or alt.Undefined,
              scale=alt.Scale(zero=False) if numeric_x else alt.Undefined,
              axis=alt.Axis(values=ticks, format="~g") if numeric_x and 0 < len(ticks) <= 12 else
              (alt.Undefined if numeric_x else alt.Axis(labelAngle=0)))
    y_scale = _y_scale(log_y, y_range)
    y = alt.Y("y:Q", title=y_title + (" (log)" if log_y else ""), scale=y_scale)
    colour = alt.Color("run:N", title="run", legend=_legend(legend), scale=RUN_COLOURS)
    tooltip = [alt.Tooltip("run:N"), alt.Tooltip("x:N" if not numeric_x else "x:Q", title=x_title),
               alt.Tooltip("value:Q", format=".4g"), alt.Tooltip("run_id:Q", title="run id"), alt.Tooltip("note:N")]
    base = alt.Chart(data).encode(x=x, y=y, color=colour)
    layers = [base.mark_line(strokeWidth=2), base.mark_point(size=60, filled=True).encode(tooltip=tooltip)]
    flagged = data[data["note"] != ""]
    if len(flagged):
        layers.append(alt.Chart(flagged).mark_point(shape="triangle-down", size=80, filled=True).encode(
            x=x, y=y, color=colour, tooltip=tooltip))
    reference = reference_rows(marks, log_y)
    if reference is not None:
        layers += _baseline_layers(reference, y_title, y_scale)
    chart = alt.layer(*layers).properties(title=title, height=height)
    return chart if y_range is None else _clipped(chart)


def _metric_rows(frame: pd.DataFrame, names: list, smoothing: float, x: str, log_y: bool,
                 max_points: int) -> pd.DataFrame:
    """:func:`prepare`'s rows of ``names`` with what the chart draws: y (smoothed or raw), y_raw and note."""
    data = prepare(frame[frame["name"].isin(names)], smoothing=smoothing, x=x, log=log_y, max_points=max_points)
    shown = "smoothed" if smoothing > 0 else "value"
    if log_y:
        edges = _log_edges(pd.concat([data[shown], data["value"]]))
        data["y"], _ = _on_log_axis(data[shown], edges)
        data["y_raw"], data["note"] = _on_log_axis(data["value"], edges)
    else:
        data["y"], data["y_raw"] = _finite_or_nan(data[shown]), _finite_or_nan(data["value"])
        data["note"] = np.where(data["y_raw"].isna(), NOTE_NAN, "")
        data.loc[np.isinf(data["value"].astype(float)), "note"] = NOTE_OVERFLOW
    return data


def _metric_sources(data: pd.DataFrame, x_field: str, smoothing: float, log_y: bool,
                    hover_points: int | None) -> tuple:
    """(rows of the lines, rows of the hover points, flagged rows or None): ``data`` shared by every layer,
    or with ``hover_points`` the light split of Note [Light charts]."""
    if hover_points is None:
        return data, data, None
    drawn = list(dict.fromkeys([x_field, "y", *(["y_raw"] if smoothing > 0 else []), "run", "name"]))
    series = data.groupby(["run_id", "run", "name"], sort=False).indices.values()
    y = data["y"].to_numpy(dtype=float)
    picked = [positions[downsample_indices([y[positions]], hover_points, log=log_y)] for positions in series]
    hovered = data.iloc[np.sort(np.concatenate(picked))] if picked else data
    return data[drawn], hovered, data[data["note"] != ""] if log_y else None


def _metric_tooltip(smoothing: float) -> list:
    tooltip = [alt.Tooltip("run:N"), alt.Tooltip("name:N", title="metric"), alt.Tooltip("step:Q"),
               alt.Tooltip("time_s:Q", title="time (s)", format=".1f"),
               alt.Tooltip("value:Q", title="raw", format=".4g")]
    if smoothing > 0:
        tooltip.append(alt.Tooltip("smoothed:Q", format=".4g"))
    return tooltip + [alt.Tooltip("note:N")]


def _baseline_layers(reference: pd.DataFrame, y_title: str, y_scale: alt.Scale) -> list:
    """A dashed rule at ``reference``'s baseline and its label at the left edge."""
    base = alt.Chart(reference)
    y = alt.Y("baseline:Q", title=y_title, scale=y_scale)
    return [base.mark_rule(strokeDash=[6, 4], color="#666").encode(
                y=y, tooltip=[alt.Tooltip("label:N"), alt.Tooltip("baseline:Q", format=".4g")]),
            base.mark_text(align="left", baseline="bottom", dx=4, dy=-2, color="#666").encode(
                x=alt.value(0), y=y, text="label:N")]


SV_NAMES = {"sv/min": "sv_min", "sv/max": "sv_max", "sv/margin": "sv_margin"}


def _singular_value_rows(frame: pd.DataFrame, x: str, max_points: int = 2000) -> pd.DataFrame:
    """One row per (run, step) with sv_min, sv_max, sv_margin, decimated per run."""
    columns = ["run_id", "run", "step", "wall_time", "time_s", *SV_NAMES.values()]
    data = frame[frame["name"].isin(list(SV_NAMES))]
    if data.empty:
        return pd.DataFrame({column: pd.Series(dtype=object if column == "run" else float) for column in columns})
    data = _with_labels(data)
    keys = ["run_id", "run", "step"]
    wide = data.drop_duplicates([*keys, "name"], keep="last").set_index([*keys, "name"])["value"].unstack("name")
    wide = wide.rename(columns=SV_NAMES).reindex(columns=list(SV_NAMES.values()))
    times = data.groupby(keys)[["wall_time", "time_s"]].min()
    wide = wide.join(times).reset_index().sort_values(["run_id", "run", X_AXES[x][0]], kind="stable")
    pieces = []
    for _, run in wide.groupby(["run_id", "run"], sort=False):
        extremes = [run[column].to_numpy(dtype=float) for column in SV_NAMES.values()]
        pieces.append(run.iloc[downsample_indices(extremes, max_points)])
    return pd.concat(pieces)[columns].reset_index(drop=True)


def singular_value_band_chart(frame: pd.DataFrame, *, x: str = "step", title: str = "",
                              height: int = 260, max_points: int = 2000) -> alt.LayerChart:
    """σ_min..σ_max of the recurrent matrix as a band per run over training, the orthogonal reference σ = 1,
    and the margin max_i |σ_i − 1| (spectral paper Fig. 4) as a line on its own right-hand axis.

    ``frame`` holds long metric rows (see :func:`prepare`); only sv/min, sv/max and sv/margin are used, at
    most ``max_points`` steps per run (min-max decimated over all three); :func:`singular_value_band_rows`
    gives the datasets alone.
    """
    data, unit_rows = singular_value_band_rows(frame, x=x, max_points=max_points)
    x_field, x_title = X_AXES[x]
    legend_pick = alt.selection_point(fields=["run"], bind="legend")
    base = alt.Chart(data).encode(x=alt.X(f"{x_field}:Q", title=x_title),
                                  color=alt.Color("run:N", title="run", legend=alt.Legend(orient="top"),
                                                  scale=RUN_COLOURS))
    tooltip = [alt.Tooltip("run:N"), alt.Tooltip("step:Q"), alt.Tooltip("time_s:Q", title="time (s)", format=".1f"),
               alt.Tooltip("sv_min:Q", title="σ_min", format=".4g"), alt.Tooltip("sv_max:Q", title="σ_max", format=".4g"),
               alt.Tooltip("sv_margin:Q", title="max|σ − 1|", format=".3g")]
    sigma = alt.Y("sv_min:Q", title="singular values σ_min..σ_max", scale=alt.Scale(zero=False))
    band = base.mark_area(line={"strokeWidth": 1}).encode(
        y=sigma, y2="sv_max:Q", opacity=alt.condition(legend_pick, alt.value(0.35), alt.value(0.05)),
        tooltip=tooltip).add_params(legend_pick)
    unit = alt.Chart(unit_rows).mark_rule(strokeDash=[4, 4], color="#555").encode(
        y=alt.Y("sigma:Q", title="singular values σ_min..σ_max"))
    margin = base.mark_line(strokeDash=[2, 2], strokeWidth=1.5).encode(
        y=alt.Y("sv_margin:Q", title="margin max|σ − 1|", axis=alt.Axis(orient="right")),
        opacity=alt.condition(legend_pick, alt.value(1.0), alt.value(0.12)), tooltip=tooltip)
    return alt.layer(alt.layer(band, unit), margin).resolve_scale(y="independent").properties(
        title=title, height=height)


def singular_value_band_rows(frame: pd.DataFrame, *, x: str = "step", max_points: int = 2000) -> list[pd.DataFrame]:
    """The datasets of :func:`singular_value_band_chart`, in the order its layers first use them: one row per
    (run, step) with sv_min, sv_max, sv_margin, and the reference σ = 1."""
    _check_x(x)
    _check_max_points(max_points)
    return [_singular_value_rows(frame, x, max_points), pd.DataFrame({"sigma": [1.0]})]


def _evenly(values: np.ndarray, limit: int) -> np.ndarray:
    """At most ``limit`` of the sorted distinct ``values``, evenly spaced, always with the first and last."""
    distinct = np.unique(values)
    if len(distinct) <= limit:
        return distinct
    return distinct[np.unique(np.linspace(0, len(distinct) - 1, limit).round().astype(int))]


def gradient_flow_heatmap(series_frame: pd.DataFrame, *, title: str = "", height: int = 260) -> alt.LayerChart:
    """‖∂L/∂h_t‖ over time step t (x) and training step (y, newest on top), coloured by log10 of the norm:
    :func:`series_heatmap` of the 'grad/h_t_norm' series (spectral paper Fig. 4, the gradient reaching
    back through time, drawn over the whole of training)."""
    return series_heatmap(series_frame, H_T_NORM, x_title="time step t", value_title="‖∂L/∂h_t‖",
                          title=title, height=height)


def gradient_flow_heatmap_rows(series_frame: pd.DataFrame) -> list[pd.DataFrame]:
    """The datasets of :func:`gradient_flow_heatmap` (:func:`series_heatmap_rows` of 'grad/h_t_norm')."""
    return series_heatmap_rows(series_frame, H_T_NORM)


def spectrum_heatmap(series_frame: pd.DataFrame, *, title: str = "", height: int = 260) -> alt.LayerChart:
    """Every singular value σ_i of the recurrent matrix (x: i, largest first) over training steps (y,
    newest on top), coloured by log10 σ: :func:`series_heatmap` of the 'sv/spectrum' series.  A band
    that stays one colour is a spectrum held near 1 (Spectral-RNN's σ ∈ [σ* − r, σ* + r], spectral
    paper §4); a tanh RNN's spreads into decades as it trains."""
    return series_heatmap(series_frame, SPECTRUM, x_title="singular value i (largest first)", value_title="σ_i",
                          title=title, height=height)


def spectrum_heatmap_rows(series_frame: pd.DataFrame) -> list[pd.DataFrame]:
    """The datasets of :func:`spectrum_heatmap` (:func:`series_heatmap_rows` of 'sv/spectrum')."""
    return series_heatmap_rows(series_frame, SPECTRUM)


def series_heatmap(series_frame: pd.DataFrame, name: str, *, x_title: str, value_title: str, title: str = "",
                   height: int = 260) -> alt.LayerChart:
    """A vector series over training: its component index (x) against training step (y, newest on top),
    coloured by log10 of the value.

    ``series_frame`` holds rows of the series ``name`` (run_id, step, wall_time, name, index, value; one
    run). Zeros (underflow), infinities and NaNs are drawn grey in a layer of their own, with a note in the
    tooltip (:func:`clip_for_log`); the colour scale spans the finite positive values only. At most
    ``HEATMAP_MAX_STEPS`` training steps and ``HEATMAP_MAX_T`` components are drawn, evenly spaced. The
    spec does not depend on the rows (axis labels thinned by Vega, the colour domain taken from the data),
    so a live page swaps the rows of the chart it has instead of building a new one
    (:func:`series_heatmap_rows` gives them alone).
    """
    cell_rows, flagged_rows = series_heatmap_rows(series_frame, name)
    encoding = dict(
        x=alt.X("index:O", title=x_title, axis=alt.Axis(labelAngle=0, labelOverlap="greedy")),
        y=alt.Y("step:O", title="training step", sort="descending", axis=alt.Axis(labelOverlap="greedy")),
        tooltip=[alt.Tooltip("step:O", title="training step"), alt.Tooltip("index:O", title=x_title),
                 alt.Tooltip("value:Q", title=value_title, format=".3e"), alt.Tooltip("log10:Q", format=".2f"),
                 alt.Tooltip("note:N")])
    cells = alt.Chart(cell_rows).mark_rect().encode(**encoding, color=alt.Color(
        "log10:Q", title=f"log10 {value_title}", scale=alt.Scale(scheme="viridis")))
    marked = alt.Chart(flagged_rows).mark_rect().encode(**encoding, color=alt.Color(
        "note:N", title=None, legend=alt.Legend(orient="bottom", direction="horizontal"),
        scale=alt.Scale(domain=[NOTE_UNDERFLOW, NOTE_OVERFLOW, NOTE_NAN], range=["#d9d9d9", "#636363", "#f4a6a6"])))
    return alt.layer(cells, marked).resolve_scale(color="independent").properties(title=title, height=height)


def series_heatmap_rows(series_frame: pd.DataFrame, name: str) -> list[pd.DataFrame]:
    """The datasets of :func:`series_heatmap`, in the order its layers use them: the cells coloured by
    log10 of the value, and the cells a log cannot show (log10 NaN, a note saying why)."""
    data = series_frame
    if "name" in data:
        data = data[data["name"] == name]
    data = data[data["step"].isin(_evenly(data["step"].to_numpy(), HEATMAP_MAX_STEPS))
                & data["index"].isin(_evenly(data["index"].to_numpy(), HEATMAP_MAX_T))].copy()
    clipped, data["note"] = _log_clip(data["value"])
    data["note"] = data["note"].fillna("")
    flagged = data["note"] != ""
    data["log10"] = np.log10(clipped).mask(flagged)  # what a log cannot show stays off the colour scale
    return [data[~flagged], data[flagged]]


# --- Sweeps: the objective against a varied field, heatmap, parallel coordinates, curves over seeds ------

# Note [Sweep charts]
# -------------------
# A sweep's charts answer "where does it stop learning, and does the other cell care?" at a glance, so
# nothing a run did may vanish from them:
# * the statistics over seeds are stability.analysis.groups.setting_table's (Note [Which runs count]: completed
#   runs with a finite objective); every seed is also drawn as a point, shaped by its status, so a mean
#   over one seed of three says so;
# * a diverged run has no finite objective: it is drawn at the top edge of the axis (twice the largest
#   objective on a log axis, 8 % of the span above it on a linear one) as a red triangle whose
#   tooltip says "diverged"; a pruned run is drawn at the validation loss it was pruned at, as a cross;
# * a field whose values span decades (lr) is drawn on a log axis (the page decides, from the values or
#   the --vary's log, and passes ``log_x`` / ``log_fields``); a field of names (cell) or with None among
#   its values (no clipping) is categorical, its values in the order given;
# * the curves over seeds (group_curves' rows) are a mean line and a min-max band; on a log axis a
#   minimum of 0 is drawn at the bottom edge and marked, as metric_chart does.
SWEEP_SHAPES = {"completed": "circle", "running": "circle", "queued": "circle", "pruned": "cross",
                "stopped": "square", "failed": "diamond", "interrupted": "diamond", "diverged": "triangle-up"}
NOTE_DIVERGED = "diverged: no finite objective"
DIVERGED_COLOUR = "#d62728"


def _is_numeric_field(values: pd.Series) -> bool:
    """Numbers only (no None, no bools, no names): a quantitative axis."""
    present = list(values)
    return bool(present) and all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                                 and not (isinstance(v, float) and math.isnan(v)) for v in present)


def _value_label(value) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{float(value):g}"
    return "none" if value is None else str(value)


def _category_order(values: pd.Series) -> list[str]:
    """Distinct labels of ``values``: numbers in ascending order, names in the order they first appear."""
    distinct = list(dict.fromkeys(values))
    if _is_numeric_field(pd.Series(distinct, dtype=object)):
        distinct = sorted(distinct)
    return list(dict.fromkeys(_value_label(v) for v in distinct))


def _top_edge(values: pd.Series, log: bool) -> float:
    """Where a run without a finite objective is drawn: above every finite one (Note [Sweep charts])."""
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
    shown = numbers[np.isfinite(numbers) & ((numbers > 0) if log else True)]
    if shown.empty:
        return 1.0
    if log:
        return float(shown.max()) * 2.0
    span = float(shown.max() - shown.min()) or abs(float(shown.max())) or 1.0
    return float(shown.max()) + 0.08 * span


LOG_FIELDS = ("train.lr", "train.weight_decay")  # drawn on a log axis whenever their values are positive
LOG_SPAN = 100.0  # other numeric fields: a log axis when their positive values span this factor or more


def log_axis_for(field: str, values, log: bool = False) -> bool:
    """Whether a varied field belongs on a log axis: its ``--vary`` said ``log``, or it is a learning rate
    (:data:`LOG_FIELDS`), or its values span :data:`LOG_SPAN` or more; always positive numbers."""
    present = pd.Series(list(values), dtype=object)
    if not _is_numeric_field(present):
        return False
    numbers = present.astype(float)
    if not (numbers > 0).all():
        return False
    return bool(log or field in LOG_FIELDS or numbers.max() / numbers.min() >= LOG_SPAN)


def sweep_objective_chart(results: pd.DataFrame, x_field: str, color_field: str | None = None, *,
                          log_x: bool = False, log_y: bool = False, objective: str = "val/loss",
                          direction: str = "minimize", title: str = "", height: int = 320) -> alt.LayerChart:
    """The sanity-check picture: the final ``objective`` against the varied field ``x_field``, one line per
    value of ``color_field``: the mean over seeds with a min-max band, every seed a point shaped by its
    status, diverged runs at the top edge (Note [Sweep charts]).

    ``results`` holds one row per run (stability.sweeps.results: run_id, status, objective, trial, seed,
    the varied fields); ``log_x`` / ``log_y`` put x / the objective on log axes (x only when it is numeric).
    """
    from ..analysis.groups import setting_table

    fields = [x_field] + ([color_field] if color_field and color_field != x_field else [])
    missing = [name for name in fields if name not in results]
    if missing:
        raise ValueError(f"results have no column {', '.join(missing)}; varied: "
                         f"{', '.join(c for c in results.columns if c not in _RESULT_COLUMNS) or 'nothing'}")
    numeric_x = _is_numeric_field(results[x_field])
    log_x = log_x and numeric_x and bool((pd.to_numeric(results[x_field]) > 0).all())
    table = setting_table(results, fields, direction)
    colour_of = (lambda frame: frame[color_field].map(_value_label)) if len(fields) > 1 else (
        lambda frame: pd.Series("all runs", index=frame.index))
    x_of = (lambda frame: frame[x_field].astype(float)) if numeric_x else (
        lambda frame: frame[x_field].map(_value_label))

    runs = results.reset_index(drop=True)
    values = pd.to_numeric(runs["objective"], errors="coerce").astype(float)
    top = _top_edge(pd.concat([values, table["max"]]), log_y)
    diverged = (runs["status"] == "diverged") & ~np.isfinite(values)
    points = pd.DataFrame({
        "x": x_of(runs), "group": colour_of(runs), "run_id": runs["run_id"].astype("int64"),
        "status": runs["status"].astype(str), "objective": values,
        "y": values.where(np.isfinite(values) & ((values > 0) if log_y else True)).mask(diverged, top),
        "seed": runs["seed"] if "seed" in runs else pd.NA,
        "setting": runs["setting"] if "setting" in runs else "",
        "note": np.where(diverged, NOTE_DIVERGED, "")}).dropna(subset=["y"])
    means = pd.DataFrame({"x": x_of(table), "group": colour_of(table), "setting": table["setting"],
                          "mean": table["mean"], "min": table["min"], "max": table["max"], "n": table["n"],
                          "seeds": table["seeds"], "diverged": table["diverged"], "pruned": table["pruned"]})
    means = means.dropna(subset=["mean"]).sort_values(["group", "x"], kind="stable")

    order = None if numeric_x else _category_order(results[x_field])
    ticks = sorted(set(results[x_field].astype(float))) if numeric_x else []
    x = alt.X("x:Q" if numeric_x else "x:O", title=field_title(x_field),
              scale=alt.Scale(type="log") if log_x else (alt.Scale(zero=False) if numeric_x else alt.Undefined),
              sort=order if order else alt.Undefined,
              axis=(alt.Axis(values=ticks, format="~g") if 0 < len(ticks) <= 12 else alt.Undefined) if numeric_x
              else alt.Axis(labelAngle=0))
    y_scale = alt.Scale(type="log") if log_y else alt.Scale(zero=False)
    y_title = f"final {objective}" + (" (log)" if log_y else "")
    groups_order = _category_order(results[color_field]) if len(fields) > 1 else ["all runs"]
    colour = alt.Color("group:N", title=field_title(color_field) if len(fields) > 1 else None, sort=groups_order,
                       scale=RUN_COLOURS, legend=alt.Legend(orient="right"))
    pick = alt.selection_point(fields=["group"], bind="legend")
    faded = alt.condition(pick, alt.value(1.0), alt.value(0.15))
    mean_tooltip = [alt.Tooltip("setting:N"), alt.Tooltip("mean:Q", format=".4g"), alt.Tooltip("min:Q", format=".4g"),
                    alt.Tooltip("max:Q", format=".4g"), alt.Tooltip("n:Q", title="completed seeds"),
                    alt.Tooltip("seeds:Q", title="runs"), alt.Tooltip("diverged:Q"), alt.Tooltip("pruned:Q")]
    base = alt.Chart(means).encode(x=x, color=colour)
    band = (base.mark_area(opacity=0.18) if numeric_x else base.mark_rule(strokeWidth=6, opacity=0.3)).encode(
        y=alt.Y("min:Q", title=y_title, scale=y_scale), y2="max:Q", tooltip=mean_tooltip)
    line = base.mark_line(strokeWidth=2, point=alt.OverlayMarkDef(size=60, filled=True)).encode(
        y=alt.Y("mean:Q", title=y_title, scale=y_scale), opacity=faded, tooltip=mean_tooltip).add_params(pick)
    statuses = [status for status in SWEEP_SHAPES if status in set(points["status"])]
    seeds = alt.Chart(points).mark_point(size=45, filled=False, strokeWidth=1.5).encode(
        x=x, y=alt.Y("y:Q", title=y_title, scale=y_scale),
        color=alt.condition(alt.datum.note != "", alt.value(DIVERGED_COLOUR), colour),
        shape=alt.Shape("status:N", title="run", sort=statuses, legend=alt.Legend(orient="right"),
                        scale=alt.Scale(domain=statuses, range=[SWEEP_SHAPES[s] for s in statuses])),
        opacity=faded,
        tooltip=[alt.Tooltip("run_id:Q", title="run"), alt.Tooltip("setting:N"), alt.Tooltip("seed:Q"),
                 alt.Tooltip("status:N"), alt.Tooltip("objective:Q", format=".4g"), alt.Tooltip("note:N")])
    return alt.layer(band, line, seeds).properties(title=title, height=height)


_RESULT_COLUMNS = ("run_id", "trial", "seed", "status", "objective", "step", "setting")


def sweep_heatmap(table: pd.DataFrame, x_field: str, y_field: str, *, log_color: bool = False,
                  objective: str = "val/loss", title: str = "", height: int = 300, x_order=None,
                  y_order=None) -> alt.LayerChart:
    """The mean objective over two varied fields: one cell per setting of ``table`` (stability.analysis.groups.
    setting_table(results, [x_field, y_field])), coloured by its mean (log colour scale with
    ``log_color``), labelled with the mean and, where seeds diverged, how many; a setting without a
    completed seed is grey, its label saying what happened.  ``x_order`` / ``y_order`` (the values, e.g.
    as the sweep lists them) order the axes; by default numbers ascend and names keep their order in
    ``table``."""
    for name in (x_field, y_field):
        if name not in table:
            raise ValueError(f"the settings table has no column {name!r}")
    data = pd.DataFrame({
        "x": table[x_field].map(_value_label), "y": table[y_field].map(_value_label),
        "setting": table["setting"], "mean": table["mean"].astype(float), "min": table["min"],
        "max": table["max"], "n": table["n"], "seeds": table["seeds"], "diverged": table["diverged"],
        "pruned": table["pruned"]})
    shown = np.isfinite(data["mean"]) & ((data["mean"] > 0) if log_color else True)
    data["label"] = [
        (f"{mean:.3g}" if ok else ("diverged" if diverged == seeds else "—"))
        + (f"\n{diverged}/{seeds} diverged" if 0 < diverged < seeds else "")
        for mean, ok, diverged, seeds in zip(data["mean"], shown, data["diverged"], data["seeds"])]
    encoding = dict(
        x=alt.X("x:O", title=field_title(x_field), axis=alt.Axis(labelAngle=0),
                sort=_category_order(pd.Series(list(x_order) if x_order is not None else table[x_field]))),
        y=alt.Y("y:O", title=field_title(y_field),
                sort=_category_order(pd.Series(list(y_order) if y_order is not None else table[y_field]))),
        tooltip=[alt.Tooltip("setting:N"), alt.Tooltip("mean:Q", format=".4g"), alt.Tooltip("min:Q", format=".4g"),
                 alt.Tooltip("max:Q", format=".4g"), alt.Tooltip("n:Q", title="completed seeds"),
                 alt.Tooltip("seeds:Q", title="runs"), alt.Tooltip("diverged:Q"), alt.Tooltip("pruned:Q")])
    cells = alt.Chart(data[shown]).mark_rect().encode(**encoding, color=alt.Color(
        "mean:Q", title=f"mean {objective}", legend=alt.Legend(format=".3~g"),
        scale=alt.Scale(type="log" if log_color else "linear", scheme="viridis", reverse=True)))
    empty = alt.Chart(data[~shown]).mark_rect(color="#d9d9d9").encode(**encoding)
    data["dark"] = _dark_cells(data["mean"].where(shown), log_color)
    text = alt.Chart(data).mark_text(fontSize=12, lineBreak="\n").encode(
        **encoding, text="label:N", color=alt.condition(alt.datum.dark, alt.value("white"), alt.value("black")))
    return alt.layer(cells, empty, text).properties(title=title, height=height)


def _dark_cells(means: pd.Series, log: bool) -> pd.Series:
    """Whether a heatmap cell is dark (the upper half of the reversed viridis scale): white text there."""
    values = np.log10(means) if log else means
    low, high = values.min(), values.max()
    if not np.isfinite(low) or high <= low:
        return pd.Series(False, index=means.index)
    return ((values - low) / (high - low) > 0.55).fillna(False)


def _axis_positions(values: pd.Series, log: bool) -> tuple[pd.Series, list[tuple[float, str]]]:
    """Positions in [0, 1] of one parallel axis and its tick labels: numbers linearly (log10 with
    ``log``), anything else as ordinal positions in :func:`_category_order`."""
    if _is_numeric_field(values):
        numbers = values.astype(float)
        log = log and bool((numbers > 0).all())
        scaled = np.log10(numbers) if log else numbers
        low, high = float(scaled.min()), float(scaled.max())
        position = (scaled - low) / (high - low) if high > low else pd.Series(0.5, index=values.index)
        distinct = np.unique(numbers)
        if len(distinct) > 6:
            distinct = distinct[np.unique(np.linspace(0, len(distinct) - 1, 6).round().astype(int))]
        ticks = [(float((np.log10(v) if log else v) - low) / (high - low) if high > low else 0.5, _value_label(v))
                 for v in distinct]
        return position.astype(float), ticks
    order = _category_order(values)
    step = 1.0 / (len(order) - 1) if len(order) > 1 else 0.0
    where = {label: (index * step if len(order) > 1 else 0.5) for index, label in enumerate(order)}
    return values.map(_value_label).map(where).astype(float), [(where[label], label) for label in order]


def parallel_coordinates(results: pd.DataFrame, fields: list[str], *, log_fields=(), log_objective: bool = False,
                         objective: str = "val/loss", title: str = "", height: int = 320) -> alt.LayerChart:
    """Parallel coordinates over the varied ``fields`` and the objective: one line per run, coloured by its
    objective.  Names (and fields with None among their values) are ordinal positions; numbers are placed
    by value, on a log position for the fields in ``log_fields``; the objective axis is log with
    ``log_objective``.  A run without a finite objective is drawn grey and dashed, its objective at the
    top of that axis (Note [Sweep charts])."""
    missing = [name for name in fields if name not in results]
    if missing:
        raise ValueError(f"results have no column {', '.join(missing)}")
    runs = results.reset_index(drop=True)
    values = pd.to_numeric(runs["objective"], errors="coerce").astype(float)
    finite = np.isfinite(values) & ((values > 0) if log_objective else True)
    axes, long, ticks = [], [], []
    for name in [*fields, objective]:
        if name == objective:
            shown = values[finite]
            position, marks = _axis_positions(shown, log_objective) if len(shown) else (shown, [])
            position = position.reindex(runs.index).fillna(1.08)
            ends = {_value_label(v) for v in (shown.min(), shown.max())}
            marks = [(p, f"{float(text):.3g}") for p, text in marks if text in ends]
            marks.append((1.08, "no finite value"))
        else:
            position, marks = _axis_positions(runs[name], name in log_fields)
        axis = field_title(name)
        axes.append(axis)
        long.append(pd.DataFrame({"run_id": runs["run_id"].astype("int64"), "axis": axis, "position": position,
                                  "value": (runs[name].map(_value_label) if name != objective else
                                            values.map(lambda v: f"{v:.4g}")),
                                  "objective": values.where(finite), "status": runs["status"].astype(str),
                                  "setting": runs["setting"] if "setting" in runs else ""}))
        ticks += [{"axis": axis, "position": p, "label": text} for p, text in marks]
    data = pd.concat(long, ignore_index=True) if long else pd.DataFrame(
        columns=["run_id", "axis", "position", "value", "objective", "status", "setting"])
    x = alt.X("axis:N", sort=axes, title=None, axis=alt.Axis(orient="top", labelAngle=0, domain=False, ticks=False))
    y = alt.Y("position:Q", axis=None, scale=alt.Scale(domain=[-0.04, 1.12]))
    tooltip = [alt.Tooltip("run_id:Q", title="run"), alt.Tooltip("setting:N"), alt.Tooltip("status:N"),
               alt.Tooltip("objective:Q", format=".4g")]
    hover = alt.selection_point(fields=["run_id"], on="pointerover", clear="pointerout")
    rules = alt.Chart(pd.DataFrame({"axis": axes})).mark_rule(color="#bbb").encode(x=x)
    good = data[data["objective"].notna()]
    lines = alt.Chart(good).mark_line(strokeWidth=1.6).encode(
        x=x, y=y, detail="run_id:N", tooltip=tooltip,
        color=alt.Color("objective:Q", title=objective, legend=alt.Legend(format=".3~g"), scale=alt.Scale(
            type="log" if log_objective else "linear", scheme="viridis", reverse=True)),
        opacity=alt.condition(hover, alt.value(0.95), alt.value(0.55))).add_params(hover)
    bad = alt.Chart(data[data["objective"].isna()]).mark_line(strokeWidth=1.2, strokeDash=[4, 3],
                                                             color="#999").encode(
        x=x, y=y, detail="run_id:N", tooltip=tooltip)
    labels = alt.Chart(pd.DataFrame(ticks, columns=["axis", "position", "label"])).mark_text(
        align="left", dx=4, fontSize=11, color="#333").encode(x=x, y=y, text="label:N")
    return alt.layer(rules, bad, lines, labels).properties(title=title, height=height)


def grouped_curves_chart(curves: pd.DataFrame, metric: str, log_y: bool = False, *, x_title: str = "step",
                         title: str = "", height: int = 300) -> alt.LayerChart:
    """One line per group (the mean over its runs, geometric on a log axis) with a min-max band: the rows of
    stability.analysis.groups.group_curves.  On a log axis a minimum of 0 (or a mean of 0) is drawn a decade below
    the smallest positive value, marked with a triangle; its tooltip gives the count of zeros."""
    data = curves.reset_index(drop=True).copy()
    data["group"] = data["group"].astype(str)
    if log_y:
        edges = _log_edges(pd.concat([data["mean"], data["min"], data["max"]]))
        data["y_mean"], note_mean = _on_log_axis(data["mean"], edges)
        data["y_min"], note_min = _on_log_axis(data["min"], edges)
        data["y_max"], _ = _on_log_axis(data["max"], edges)
        data["note"] = np.where(note_min != "", note_min.fillna(""), note_mean.fillna(""))
    else:
        data["y_mean"], data["y_min"], data["y_max"] = (_finite_or_nan(data[c]) for c in ("mean", "min", "max"))
        data["note"] = ""
    y_scale = alt.Scale(type="log") if log_y else alt.Scale(zero=False)
    y_title = metric + (" (log)" if log_y else "")
    pick = alt.selection_point(fields=["group"], bind="legend")
    hover = alt.selection_point(fields=["step"], nearest=True, on="pointerover", clear="pointerout", empty=False)
    base = alt.Chart(data).encode(
        x=alt.X("step:Q", title=x_title),
        color=alt.Color("group:N", title=None, scale=RUN_COLOURS, sort=list(dict.fromkeys(data["group"])),
                        legend=alt.Legend(orient="right", labelLimit=220)))
    tooltip = [alt.Tooltip("group:N"), alt.Tooltip("step:Q"),
               alt.Tooltip("mean:Q", title="geometric mean" if log_y else "mean", format=".4g"),
               alt.Tooltip("min:Q", format=".4g"), alt.Tooltip("max:Q", format=".4g"),
               alt.Tooltip("n:Q", title="runs"), alt.Tooltip("zeros:Q", title="zeros (left out of the mean)"),
               alt.Tooltip("note:N")]
    y = alt.Y("y_mean:Q", title=y_title, scale=y_scale)
    band = base.mark_area(opacity=0.2).encode(
        y=alt.Y("y_min:Q", title=y_title, scale=y_scale), y2="y_max:Q",
        opacity=alt.condition(pick, alt.value(0.2), alt.value(0.03)))
    line = base.mark_line(strokeWidth=2).encode(
        y=y, opacity=alt.condition(pick, alt.value(1.0), alt.value(0.12))).add_params(pick)
    points = base.mark_point(size=40, filled=True).encode(
        y=y, opacity=alt.condition(hover, alt.value(1.0), alt.value(0.0)), tooltip=tooltip).add_params(hover)
    layers = [band, line, points]
    if log_y:
        flagged = data[data["note"] != ""]
        if len(flagged):
            layers.append(alt.Chart(flagged).mark_point(shape="triangle-down", size=50, filled=True).encode(
                x=alt.X("step:Q", title=x_title), y=alt.Y("y_min:Q", title=y_title, scale=y_scale),
                color=alt.Color("group:N", scale=RUN_COLOURS, sort=list(dict.fromkeys(data["group"])),
                                legend=None), tooltip=tooltip))
    return alt.layer(*layers).properties(title=title, height=height)
