"""Curves over training: a metric's lines per run (:func:`metric_chart`), a statistic against a config
field (:func:`field_chart`), and the rows they draw (:func:`prepare`: one series per run and metric,
ordered, smoothed like TensorBoard, decimated so a long run stays cheap to draw).

On a log y axis zeros and infinities are drawn at the edge and flagged, and every decade up to a dozen is
labelled; on a linear one a curve's early outliers do not set the range (stability.charts.scales, Notes
[Log ticks] and [Ignoring outliers]).  Legends are never cut short (stability.charts.legends).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import altair as alt
import numpy as np
import pandas as pd

from ..core.formatting import shown
from .decimation import check_max_points, downsample_indices
from .fields import LOG_SPAN, is_numeric_field
from .legends import extra_height, legend_for
from .scales import (EDGE_ABOVE, EDGE_BELOW, NOTE_ABOVE, NOTE_BELOW, NOTE_NAN, NOTE_OVERFLOW, RUN_COLOURS,
                     clamp_to_range, clipped_to_plot, early_points, finite_or_nan, log_axis, log_axis_at, log_edges,
                     log_tick_step, on_log_axis, robust_range, y_axis_scale)
from .smoothing import check_smoothing, ema, log_ema

# Note [Light charts]
# -------------------
# A live page redraws its charts while a worker trains beside it, and in the browser a redraw runs every
# row through Vega's dataflow with Streamlit's expression interpreter (pages/ui/live.py, Note [Watching
# cheaply]).  What a chart costs there grows with rows x layers x fields, so a live chart sends what it
# draws and no more, hiding nothing:
# * at most ~2 points per pixel column a line (prepare's max_points), picked by min-max decimation, so a
#   one-step spike is never lost, and on a log axis a row of every decade the series visited, so a
#   gradient falling through 1e-10 still shows 1e-10; rows are picked, never averaged, so a tiny value is
#   drawn as it is, never as 0 (stability.charts.decimation);
# * the lines get only the columns they draw; the tooltip fields go with the hover points, at most
#   hover_points a line (min-max picked again: a spike keeps its tooltip);
# * rows a log axis cannot show go in a small dataset of their own instead of a filter over every row;
# * the spec never depends on the rows (the heatmap's colour domain and axis labels come from Vega; an early
#   outlier is clamped in the rows, not left out by a range in the spec), save a log axis's ticks, through
#   the step between labelled decades alone (metric_log_step: a live page keeps it among the chart's
#   controls), so a page can put new rows into the chart it has (metric_chart_rows here,
#   singular_value_band_rows and gradient_flow_heatmap_rows in stability.charts.spectra give a chart's
#   datasets, in the order its layers use them);
# * those rows are rebuilt at every look for every chart whose rows changed, a few hundred rows each, where
#   a pandas operation costs more than the rows: the series are split by a lexsort, the early outliers
#   clamped, the notes and the σ band's pivot made in numpy (a Train page's seven charts 71 -> 44 ms a look,
#   the server 11 -> 8-9 % of a core with one watcher; benchmarks/live-page-cpu-2026-11-26.md).

X_AXES = {"step": ("step", "step"), "wall_time": ("time_s", "wall time (s)")}
PREPARED_COLUMNS = ["run_id", "run", "name", "step", "wall_time", "time_s", "value", "smoothed"]


def check_x(x: str) -> None:
    """``x`` must name one of :data:`X_AXES`."""
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")


def with_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (reindexed 0..n−1) with the display label ``run`` and ``time_s``."""
    data = frame.reset_index(drop=True)
    codes, ids = pd.factorize(data["run_id"])
    if "run" in data:
        data["run"] = data["run"].astype(str)
    else:
        data["run"] = np.array([str(run_id) for run_id in ids], dtype=object)[codes]
    wall = data["wall_time"].to_numpy(dtype=float)
    first = np.full(len(ids), np.inf)
    np.minimum.at(first, codes, wall)  # each run's first wall time (NaN as groupby's min: skipped)
    data["time_s"] = wall - np.where(np.isinf(first), np.nan, first)[codes] if len(data) else wall
    return data


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
    check_x(x)
    check_smoothing(smoothing)
    check_max_points(max_points)
    if frame.empty:
        return pd.DataFrame({column: pd.Series(dtype=object if column in ("run", "name") else float)
                             for column in PREPARED_COLUMNS})
    data = with_labels(frame)
    along, values = data[X_AXES[x][0]].to_numpy(), data["value"].to_numpy(dtype=float)
    average = log_ema if log else ema
    rows, smoothed = [], []
    for positions in _series_positions(data, along):
        keep = downsample_indices([values[positions]], max_points, log=log)
        rows.append(positions[keep])
        smoothed.append(average(values[positions], float(smoothing))[keep])
    out = data[PREPARED_COLUMNS[:-1]].take(np.concatenate(rows)).reset_index(drop=True)
    out["smoothed"] = np.concatenate(smoothed)
    return out


def _series_positions(data: pd.DataFrame, along: np.ndarray) -> list[np.ndarray]:
    """The row positions of each series (run_id, run, name) of ``data``, series in the order of their keys
    (what a sorted groupby gives) and each one's rows along ``along`` (ties in their order in ``data``)."""
    keys = [pd.factorize(data[column], sort=True)[0] for column in ("run_id", "run", "name")]
    order = np.lexsort((along, *keys[::-1]))  # stable: rows tied on every key keep their order
    starts = np.zeros(len(order), dtype=bool)
    starts[0] = True
    for key in keys:
        ordered = key[order]
        starts[1:] |= ordered[1:] != ordered[:-1]
    return np.split(order, np.flatnonzero(starts)[1:])


def metric_chart(frame: pd.DataFrame, *, names, baseline: float | None = None, baseline_label: str | None = None,
                 log_y: bool = False, x: str = "step", smoothing: float = 0.0, title: str = "",
                 height: int = 260, max_points: int = 2000, hover_points: int | None = None,
                 marks: tuple = (), y_range: tuple | None = None, legend: str = "fit",
                 ignore_outliers: bool = True) -> alt.LayerChart:
    """Curves of the metrics ``names`` for every run in ``frame`` (long metric rows, see :func:`prepare`).

    Colour = run label, stroke dash = metric name when there are several. With ``smoothing`` > 0 the
    smoothed curve is drawn over the faint raw one. Clicking a run in the legend highlights it; hovering
    shows the nearest points' values. On a log y scale zeros and infinities are flagged
    (:func:`clip_for_log`), drawn a decade beyond the data (:func:`log_edges`) and marked with a triangle.
    ``baseline`` (e.g. the task's chance-level loss) is a dashed rule labelled ``baseline_label``; on a log
    scale a baseline <= 0 has no place and is left out. ``marks``: more dashed rules, ``(value, label)``
    pairs (a paper's numbers), drawn as the baseline is. ``y_range`` ``(low, high)`` fixes the y axis
    (the range a paper's panel shows) and clips what falls outside it. At most ``max_points`` rows per
    curve (:func:`prepare`). ``ignore_outliers`` (TensorBoard's, on by default): a curve's early points far
    outside the rest do not set a linear range, drawn at its edge marked ▲ or ▼ (stability.charts.scales, Note
    [Ignoring outliers]). ``height``: with a one-row legend, a row more for every row more the legend takes
    (stability.charts.legends); ``legend``: ``"fit"`` (or ``"top"``) in the columns that fit, ``"wrap"`` in two.

    ``hover_points`` draws the chart lighter for a live panel (Note [Light charts]): the lines get a
    dataset of only the columns they draw, the hover points (the nearest-point tooltips) at most
    ``hover_points`` rows per curve, picked by :func:`downsample_indices` so a spike keeps its tooltip,
    and the flagged rows of a log scale a small dataset of their own (no layer while there are none)
    instead of a filter over every row. :func:`metric_chart_rows` gives the datasets alone.
    """
    names = [names] if isinstance(names, str) else list(names)
    rows = metric_chart_rows(frame, names=names, baseline=baseline, baseline_label=baseline_label, log_y=log_y,
                             x=x, smoothing=smoothing, max_points=max_points, hover_points=hover_points,
                             marks=marks, ignore_outliers=ignore_outliers and y_range is None)
    x_field, x_title = X_AXES[x]
    y_title = (names[0] if len(names) == 1 else "value") + (" (log)" if log_y else "")
    y_scale = y_axis_scale(log_y, y_range)
    references = [value for value, _ in ([(baseline, None)] if baseline is not None else []) + list(marks)]
    axis = log_axis_at(metric_log_step(frame, names, references)) if log_y else alt.Undefined
    legend_pick = alt.selection_point(fields=["run"], bind="legend")
    hover = alt.selection_point(fields=[x_field], nearest=True, on="pointerover", clear="pointerout", empty=False)
    runs = list(dict.fromkeys(rows.lines["run"]))
    encoding = _metric_encoding(x_field, x_title, runs, names, legend)
    lines = alt.Chart(rows.lines).encode(**encoding)
    points = lines if rows.hover is rows.lines else alt.Chart(rows.hover).encode(**encoding)
    y, y_raw = (alt.Y(f"{field}:Q", title=y_title, scale=y_scale, axis=axis) for field in ("y", "y_raw"))
    tooltip = _metric_tooltip(smoothing)

    layers = []
    if smoothing > 0:
        layers.append(lines.mark_line(strokeWidth=1).encode(
            y=y_raw, opacity=alt.condition(legend_pick, alt.value(0.25), alt.value(0.04))))
    layers.append(lines.mark_line(strokeWidth=2).encode(
        y=y, opacity=alt.condition(legend_pick, alt.value(1.0), alt.value(0.12))).add_params(legend_pick))
    layers.append(_hover_points(points, y, hover, tooltip, clamped="edge" in rows.hover))
    if log_y and (rows.flagged is None or len(rows.flagged)):
        marked = (points.transform_filter(alt.datum.note != "") if rows.flagged is None
                  else alt.Chart(rows.flagged).encode(**encoding))
        layers.append(marked.mark_point(shape="triangle-down", size=50, filled=True).encode(y=y_raw, tooltip=tooltip))
    if rows.baseline is not None:
        layers += _baseline_layers(rows.baseline, y_title, y_scale)
    grown = extra_height(runs, names if len(names) > 1 else []) if legend != "wrap" else 0
    chart = alt.layer(*layers).properties(title=title, height=height + grown)
    return chart if y_range is None else clipped_to_plot(chart)


def _legend(orient: str, labels) -> alt.Legend:
    """The run legend above the plot: in the columns that fit with no name cut short (``"fit"``, or
    ``"top"``: stability.charts.legends), or in two columns (``"wrap"``: a figure's choice for long names;
    the caller makes the chart taller by a row a pair)."""
    if orient == "wrap":
        return alt.Legend(orient="top", columns=2, labelLimit=400)
    return legend_for(labels)


def _metric_encoding(x_field: str, x_title: str, runs: list, names: list, legend: str) -> dict:
    """x, colour by run and, with several metrics, stroke dash by metric (its legend below the plot)."""
    encoding = {"x": alt.X(f"{x_field}:Q", title=x_title,  # steps are whole: no "0.000000" under one step
                           axis=alt.Axis(tickMinStep=1, format=",d") if x_field == "step" else alt.Undefined),
                "color": alt.Color("run:N", title=None, legend=_legend(legend, runs), scale=RUN_COLOURS)}
    if len(names) > 1:
        encoding["strokeDash"] = alt.StrokeDash("name:N", title=None, legend=legend_for(names, orient="bottom"))
    return encoding


def metric_log_step(frame: pd.DataFrame, names, references=()) -> int:
    """The decades between two labels of a log axis over the metrics ``names`` of ``frame`` (long metric rows)
    and the ``references`` (baseline, marks) drawn with them (stability.charts.scales, Note [Log ticks]): a
    zero or an infinity counts a decade beyond the rest, where the chart draws it (:func:`log_edges`).  The
    only part of a log chart's spec that its rows set: a live page rebuilds the chart when it changes."""
    names = [names] if isinstance(names, str) else list(names)
    values = frame.loc[frame["name"].isin(names), "value"] if len(frame) else pd.Series(dtype=float)
    drawn, _ = on_log_axis(values, log_edges(values))
    return log_tick_step(pd.concat([drawn.dropna(), pd.Series(list(references), dtype=float)]))


def _hover_points(points: alt.Chart, y: alt.Y, hover, tooltip: list, clamped: bool) -> alt.Chart:
    """The nearest points' tooltips, shown on hover; with ``clamped`` the points drawn at the edge of a range
    they do not set (Note [Ignoring outliers]) shown always, as ▲ above and ▼ below."""
    lone = {"test": "datum.lone", "value": 1.0}  # a curve's only point (Note [Lone points])
    if not clamped:
        opacity = {"condition": [{"param": hover.name, "empty": False, "value": 1.0}, lone], "value": 0.0}
        return points.mark_point(size=40, filled=True).encode(y=y, opacity=opacity, tooltip=tooltip).add_params(hover)
    shape = alt.Shape("edge:N", legend=None, scale=alt.Scale(domain=["", EDGE_ABOVE, EDGE_BELOW],
                                                              range=["circle", "triangle-up", "triangle-down"]))
    opacity = {"condition": [{"param": hover.name, "empty": False, "value": 1.0},
                             {"test": "datum.edge !== ''", "value": 1.0}, lone], "value": 0.0}
    return points.mark_point(size=60, filled=True).encode(
        y=y, shape=shape, opacity=opacity, tooltip=tooltip).add_params(hover)


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
                      marks: tuple = (), ignore_outliers: bool = True) -> MetricRows:
    """The rows :func:`metric_chart` draws with these arguments, without building the chart (give
    ``ignore_outliers=False`` where the chart has a ``y_range``)."""
    names = [names] if isinstance(names, str) else list(names)
    references = reference_rows(([(baseline, baseline_label or "baseline")] if baseline is not None else [])
                                + list(marks), log_y)
    data = _metric_rows(frame, names, smoothing, x, log_y, max_points)
    series = _series_numbers(data)  # one number a curve, for every step below
    if ignore_outliers and not log_y:
        data = _clamp_early_outliers(data, series, X_AXES[x][0], smoothing,
                                     () if references is None else references["baseline"])
    data = data.assign(lone=np.bincount(series)[series] == 1 if len(data) else np.zeros(0, dtype=bool))
    rows = MetricRows(*_metric_sources(data, series, X_AXES[x][0], smoothing, log_y, hover_points))
    rows.baseline = references
    return rows


# Note [Lone points]
# ------------------
# A line needs two points: a curve of one row draws nothing, and a live chart's first point (step 0's loss,
# a run's first row; stability/live/pace.py, Note [The first point]) was an empty plot under its legend until the
# second row came. Each row says whether its curve has it alone (``lone``), and the hover points, drawn only
# under the pointer, always draw such a row: the spec does not change when the second row comes (Note
# [Stable specs] in pages/ui/live.py), only the rows do.


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
                legend: str = "fit") -> alt.LayerChart:
    """A statistic of each run against a config field (a preset's panel with a field x, e.g. the final
    accuracy against depth L): ``points`` has x (numbers, or texts drawn in first-seen order), run (the
    line's label), value and run_id. A line per label through its points sorted by x; on a log y scale
    a zero or an infinity is drawn at the edge as a triangle (:func:`clip_for_log`), a NaN is left out.
    ``marks``: dashed rules ``(value, label)``. Numbers spread over more than two decades are drawn
    evenly spaced in their order (a σ grid of 0, 0.01, 5 would otherwise crowd into one end). ``legend``
    and ``height`` as in :func:`metric_chart`."""
    data = points.copy()
    numeric_x, order = is_numeric_field(data["x"]), None
    if numeric_x:  # values over several decades (σ = 0, 0.01, 5): evenly spaced, in numeric order
        values_x = pd.to_numeric(data["x"]).astype(float)
        positive = values_x[values_x > 0]
        if len(positive) > 1 and positive.max() / positive.min() > LOG_SPAN:
            numeric_x, order = False, [shown(value) for value in sorted(set(values_x))]
    else:
        order = list(dict.fromkeys(data["x"].map(shown)))  # texts: first seen
    data["x"] = data["x"].astype(float) if numeric_x else data["x"].map(shown)
    values = data["value"].astype(float)
    if log_y:
        edges = log_edges(values)
        data["y"], data["note"] = on_log_axis(values, edges)
    else:
        data["y"] = finite_or_nan(values)
        data["note"] = np.where(np.isinf(values), NOTE_OVERFLOW, "")
    data = data.dropna(subset=["y"]).sort_values(["run", "x"], kind="stable")
    ticks = sorted(set(data["x"])) if numeric_x else []
    x = alt.X("x:Q" if numeric_x else "x:O", title=x_title, sort=order or alt.Undefined,
              scale=alt.Scale(zero=False) if numeric_x else alt.Undefined,
              axis=alt.Axis(values=ticks, format="~g") if numeric_x and 0 < len(ticks) <= 12 else
              (alt.Undefined if numeric_x else alt.Axis(labelAngle=0)))
    y_scale = y_axis_scale(log_y, y_range)
    y = alt.Y("y:Q", title=y_title + (" (log)" if log_y else ""), scale=y_scale,
              axis=log_axis(data["y"]) if log_y else alt.Undefined)
    runs = list(dict.fromkeys(data["run"].astype(str)))
    colour = alt.Color("run:N", title=None, legend=_legend(legend, runs), scale=RUN_COLOURS)
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
    chart = alt.layer(*layers).properties(title=title, height=height + (extra_height(runs) if legend != "wrap" else 0))
    return chart if y_range is None else clipped_to_plot(chart)


def _metric_rows(frame: pd.DataFrame, names: list, smoothing: float, x: str, log_y: bool,
                 max_points: int) -> pd.DataFrame:
    """:func:`prepare`'s rows of ``names`` with what the chart draws: y (smoothed or raw), y_raw and note."""
    data = prepare(frame[frame["name"].isin(names)], smoothing=smoothing, x=x, log=log_y, max_points=max_points)
    column = "smoothed" if smoothing > 0 else "value"
    if log_y:
        edges = log_edges(pd.concat([data[column], data["value"]]))
        data["y"], _ = on_log_axis(data[column], edges)
        data["y_raw"], data["note"] = on_log_axis(data["value"], edges)
    else:
        y, raw = data[column].to_numpy(dtype=float), data["value"].to_numpy(dtype=float)
        data["y"] = np.where(np.isfinite(y), y, np.nan)
        data["y_raw"] = np.where(np.isfinite(raw), raw, np.nan)
        data["note"] = np.where(np.isinf(raw), NOTE_OVERFLOW, np.where(np.isfinite(raw), "", NOTE_NAN))
    return data


def _clamp_early_outliers(data: pd.DataFrame, series: np.ndarray, x_field: str, smoothing: float,
                          references) -> pd.DataFrame:
    """``data`` with y and y_raw clamped into :func:`robust_range` (when some point falls outside it), and an
    ``edge`` column: where the drawn line (y) was clamped (Note [Ignoring outliers]). ``series``: each row's
    curve (:func:`_series_numbers`)."""
    drawn = ["y", "y_raw"] if smoothing > 0 else ["y"]
    early = early_points(data[x_field].to_numpy(dtype=float), series) if len(data) else np.zeros(0, dtype=bool)
    bounds = robust_range(data[drawn].to_numpy(dtype=float), early, references)
    data = data.assign(edge="")
    if bounds is None:
        return data
    y, edge = clamp_to_range(data["y"].to_numpy(dtype=float), bounds)
    note = data["note"].to_numpy(dtype=object)
    data["y"], data["edge"] = y, edge
    data["y_raw"] = clamp_to_range(data["y_raw"].to_numpy(dtype=float), bounds)[0]
    data["note"] = np.where(edge == EDGE_ABOVE, NOTE_ABOVE, np.where(edge == EDGE_BELOW, NOTE_BELOW, note))
    return data


def _series_numbers(data: pd.DataFrame) -> np.ndarray:
    """The series (run_id, run, name) of each row of :func:`prepare`'s rows, numbered 0, 1, ... in order: each
    series' rows are together there, so a change of any of the three starts the next (what a groupby's
    ``ngroup`` gives them, without factorising the text columns again at every refresh)."""
    if not len(data):
        return np.zeros(0, dtype=int)
    starts = np.zeros(len(data), dtype=bool)
    starts[0] = True
    for column in ("run_id", "run", "name"):
        values = data[column].to_numpy()
        starts[1:] |= values[1:] != values[:-1]
    return np.cumsum(starts) - 1


def _metric_sources(data: pd.DataFrame, numbers: np.ndarray, x_field: str, smoothing: float, log_y: bool,
                    hover_points: int | None) -> tuple:
    """(rows of the lines, rows of the hover points, flagged rows or None): ``data`` shared by every layer,
    or with ``hover_points`` the light split of Note [Light charts]."""
    if hover_points is None:
        return data, data, None
    drawn = list(dict.fromkeys([x_field, "y", *(["y_raw"] if smoothing > 0 else []), "run", "name"]))
    series = np.split(np.arange(len(data)), np.flatnonzero(np.diff(numbers)) + 1) if len(data) else []
    y = data["y"].to_numpy(dtype=float)
    picked = [positions[downsample_indices([y[positions]], hover_points, log=log_y)] for positions in series]
    if "edge" in data:  # every point drawn at an edge keeps its mark (Note [Ignoring outliers])
        picked.append(np.flatnonzero(data["edge"].to_numpy() != ""))
    hovered = data.iloc[np.unique(np.concatenate(picked))] if picked else data
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
