"""The recurrent matrix and the gradient through time: singular values (a bar chart of W's, and σ_min..σ_max
as a band over training), ‖∂h_T/∂h_t‖ against its bound, and heatmaps of a vector series over training
(‖∂L/∂h_t‖ over t, W's spectrum): the Gradient flow page's charts and the Train page's last panels.

The training dashboards here read the store's long metric rows (stability.charts.lines.prepare) or its
vector series, and are drawn light on a live page (Note [Light charts] in stability.charts.lines).
"""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from ..core.metric_names import H_T_NORM, LAYER_NORM, SPECTRUM
from .decimation import check_max_points, downsample_indices
from .legends import extra_height, legend_for
from .lines import X_AXES, check_x, with_labels
from .scales import NOTE_NAN, NOTE_OVERFLOW, NOTE_UNDERFLOW, RUN_COLOURS, clip_for_log, log_axis

HEATMAP_MAX_STEPS = 40
HEATMAP_MAX_T = 120  # 40 x 120 cells stays under altair's 5000-row default limit
SV_NAMES = {"sv/min": "sv_min", "sv/max": "sv_max", "sv/margin": "sv_margin"}


def gradient_flow_chart(per_step: pd.DataFrame, title: str = "", height: int = 320) -> alt.Chart:
    """‖∂h_T/∂h_t‖ and the bound ‖W‖^(T−t) against t, log y; ``height`` in px.

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
                       legend=legend_for(["‖∂h_T/∂h_t‖ (measured)", "‖W‖^(T−t) (bound)"]))
    base = alt.Chart(long).encode(
        x=alt.X("t:Q", title="time step t (T = last)"),
        y=alt.Y("value:Q", title="gradient norm (log)", scale=alt.Scale(type="log"), axis=log_axis(long["value"])),
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
    return (lines + flagged).properties(title=title, height=height)


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


def _singular_value_rows(frame: pd.DataFrame, x: str, max_points: int = 2000) -> pd.DataFrame:
    """One row per (run, step) with sv_min, sv_max, sv_margin (a step's last row of each; NaN where a step
    has none), its first wall_time and time_s, in order of run and ``x``, decimated per run.

    In numpy rather than a pandas pivot: a live page rebuilds these rows at every look (Note [Light charts])."""
    columns = ["run_id", "run", "step", "wall_time", "time_s", *SV_NAMES.values()]
    data = frame[frame["name"].isin(list(SV_NAMES))]
    if data.empty:
        return pd.DataFrame({column: pd.Series(dtype=object if column == "run" else float) for column in columns})
    data = with_labels(data)
    codes = [pd.factorize(data[key], sort=True)[0] for key in ("run_id", "run", "step")]
    combined = (codes[0] * (codes[1].max() + 1) + codes[1]) * (codes[2].max() + 1) + codes[2]
    keys, first, group = np.unique(combined, return_index=True, return_inverse=True)  # sorted: run_id, run, step
    group = group.reshape(-1)
    names, values = data["name"].to_numpy(dtype=object), data["value"].to_numpy(dtype=float)
    wide = {}
    for name, column in SV_NAMES.items():
        rows = np.flatnonzero(names == name)[::-1]  # the last row of a step wins, as a drop_duplicates does
        groups, last = np.unique(group[rows], return_index=True)
        wide[column] = np.full(len(keys), np.nan)
        wide[column][groups] = values[rows[last]]
    times = {}
    for column in ("wall_time", "time_s"):
        times[column] = np.full(len(keys), np.nan)
        np.fmin.at(times[column], group, data[column].to_numpy(dtype=float))  # the step's first, NaN skipped
    run_code, run_label = codes[0][first], codes[1][first]
    order = np.lexsort((times["time_s"] if x == "wall_time" else np.arange(len(keys)), run_label, run_code))
    runs = np.split(order, np.flatnonzero(np.diff(run_code[order] * (run_label.max() + 1) + run_label[order]))
                    + 1)
    kept = np.concatenate([positions[downsample_indices([wide[column][positions] for column in SV_NAMES.values()],
                                                        max_points)] for positions in runs])
    picked = first[kept]
    return pd.DataFrame({"run_id": data["run_id"].to_numpy()[picked], "run": data["run"].to_numpy(dtype=object)[picked],
                         "step": data["step"].to_numpy()[picked], "wall_time": times["wall_time"][kept],
                         "time_s": times["time_s"][kept], **{column: wide[column][kept] for column in SV_NAMES.values()}},
                        columns=columns)


def singular_value_band_chart(frame: pd.DataFrame, *, x: str = "step", title: str = "",
                              height: int = 260, max_points: int = 2000) -> alt.LayerChart:
    """σ_min..σ_max of the recurrent matrix as a band per run over training, the orthogonal reference σ = 1,
    and the margin max_i |σ_i − 1| (spectral paper Fig. 4) as a line on its own right-hand axis.

    ``frame`` holds long metric rows (see stability.charts.lines.prepare); only sv/min, sv/max and sv/margin
    are used, at most ``max_points`` steps per run (min-max decimated over all three);
    :func:`singular_value_band_rows` gives the datasets alone. ``height`` grows with the legend's rows, as
    :func:`stability.charts.lines.metric_chart`'s does.
    """
    data, unit_rows = singular_value_band_rows(frame, x=x, max_points=max_points)
    x_field, x_title = X_AXES[x]
    legend_pick = alt.selection_point(fields=["run"], bind="legend")
    runs = list(dict.fromkeys(data["run"]))
    base = alt.Chart(data).encode(x=alt.X(f"{x_field}:Q", title=x_title),
                                  color=alt.Color("run:N", title=None, legend=legend_for(runs), scale=RUN_COLOURS))
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
        title=title, height=height + extra_height(runs))


def singular_value_band_rows(frame: pd.DataFrame, *, x: str = "step", max_points: int = 2000) -> list[pd.DataFrame]:
    """The datasets of :func:`singular_value_band_chart`, in the order its layers first use them: one row per
    (run, step) with sv_min, sv_max, sv_margin, and the reference σ = 1."""
    check_x(x)
    check_max_points(max_points)
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


def depth_heatmap(series_frame: pd.DataFrame, *, title: str = "", height: int = 260) -> alt.LayerChart:
    """‖∂L/∂a_l‖ over layer l (x, 0 = the first layer's input) and training step (y, newest on top), coloured
    by log10 of the norm: :func:`series_heatmap` of the 'grad/layer_norm' series, what a deep step's cell
    (mlp) reads at every probe (spectral paper §7.2, Fig. 5: the gradient reaching each layer of a deep MLP
    vanishes towards the input, a Spectral-MLP's does not)."""
    return series_heatmap(series_frame, LAYER_NORM, x_title="layer l (0: the input side)",
                          value_title="‖∂L/∂a_l‖", title=title, height=height)


def depth_heatmap_rows(series_frame: pd.DataFrame) -> list[pd.DataFrame]:
    """The datasets of :func:`depth_heatmap` (:func:`series_heatmap_rows` of 'grad/layer_norm')."""
    return series_heatmap_rows(series_frame, LAYER_NORM)


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
        "log10:Q", title=f"log10 {value_title}", scale=alt.Scale(scheme="viridis"),
        legend=alt.Legend(format="~g")))  # -2e-7, not -0.0000002
    marked = alt.Chart(flagged_rows).mark_rect().encode(**encoding, color=alt.Color(
        "note:N", title=None, legend=legend_for([NOTE_UNDERFLOW, NOTE_OVERFLOW, NOTE_NAN], orient="bottom"),
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
    clipped, data["note"] = clip_for_log(data["value"])
    data["note"] = data["note"].fillna("")
    flagged = data["note"] != ""
    data["log10"] = np.log10(clipped).mask(flagged)  # what a log cannot show stays off the colour scale
    return [data[~flagged], data[flagged]]
