"""A sweep's charts: the objective against a varied field (:func:`sweep_objective_chart`), its mean over two
fields (:func:`sweep_heatmap`), parallel coordinates over every varied field (:func:`parallel_coordinates`)
and curves over seeds (:func:`grouped_curves_chart`).  They read a sweep's per-run results and
stability.analysis.groups' statistics over seeds (Note [Sweep charts]).
"""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from ..core.formatting import shown
from ..core.metric_names import is_log_metric
from .fields import axis_positions, category_order, field_title, is_numeric_field
from .legends import extra_height, legend_for
from .scales import RUN_COLOURS, finite_or_nan, log_axis, log_edges, on_log_axis, top_edge

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
#   its values (no clipping) is categorical, its values in the order given (stability.charts.fields);
# * the curves over seeds (group_curves' rows) are a mean line and a min-max band; on a log axis a
#   minimum of 0 is drawn at the bottom edge and marked, as metric_chart does.
SWEEP_SHAPES = {"completed": "circle", "running": "circle", "queued": "circle", "pruned": "cross",
                "stopped": "square", "failed": "diamond", "interrupted": "diamond", "diverged": "triangle-up"}
NOTE_DIVERGED = "diverged: no finite objective"
DIVERGED_COLOUR = "#d62728"
_RESULT_COLUMNS = ("run_id", "trial", "seed", "status", "objective", "step", "setting")


def sweep_objective_chart(results: pd.DataFrame, x_field: str, color_field: str | None = None, *,
                          log_x: bool = False, log_y: bool = False, objective: str = "val/loss",
                          direction: str = "minimize", title: str = "", height: int = 320) -> alt.LayerChart:
    """The sanity-check picture: the final ``objective`` against the varied field ``x_field``, one line per
    value of ``color_field``: the mean over seeds with a min-max band, every seed a point shaped by its
    status, diverged runs at the top edge (Note [Sweep charts]).

    ``results`` holds one row per run (stability.sweeps.results: run_id, status, objective, trial, seed,
    the varied fields); ``log_x`` / ``log_y`` put x / the objective on log axes (x only when it is numeric).
    """
    fields = [x_field] + ([color_field] if color_field and color_field != x_field else [])
    missing = [name for name in fields if name not in results]
    if missing:
        raise ValueError(f"results have no column {', '.join(missing)}; varied: "
                         f"{', '.join(c for c in results.columns if c not in _RESULT_COLUMNS) or 'nothing'}")
    numeric_x = is_numeric_field(results[x_field])
    log_x = log_x and numeric_x and bool((pd.to_numeric(results[x_field]) > 0).all())
    points, means = _objective_rows(results, fields, numeric_x, log_y, direction)
    x = _objective_x(results[x_field], field_title(x_field), numeric_x, log_x)
    y_scale = alt.Scale(type="log") if log_y else alt.Scale(zero=False)
    y_axis = log_axis(pd.concat([points["y"], means["min"], means["max"]])) if log_y else alt.Undefined
    y_title = f"final {objective}" + (" (log)" if log_y else "")
    groups_order = category_order(results[color_field]) if len(fields) > 1 else ["all runs"]
    colour = alt.Color("group:N", title=field_title(color_field) if len(fields) > 1 else None, sort=groups_order,
                       scale=RUN_COLOURS, legend=alt.Legend(orient="right", labelLimit=0, symbolLimit=0))
    pick = alt.selection_point(fields=["group"], bind="legend")
    faded = alt.condition(pick, alt.value(1.0), alt.value(0.15))
    base = alt.Chart(means).encode(x=x, color=colour)
    band = (base.mark_area(opacity=0.18) if numeric_x else base.mark_rule(strokeWidth=6, opacity=0.3)).encode(
        y=alt.Y("min:Q", title=y_title, scale=y_scale, axis=y_axis), y2="max:Q", tooltip=_setting_tooltip())
    line = base.mark_line(strokeWidth=2, point=alt.OverlayMarkDef(size=60, filled=True)).encode(
        y=alt.Y("mean:Q", title=y_title, scale=y_scale, axis=y_axis), opacity=faded,
        tooltip=_setting_tooltip()).add_params(pick)
    statuses = [status for status in SWEEP_SHAPES if status in set(points["status"])]
    seeds = alt.Chart(points).mark_point(size=45, filled=False, strokeWidth=1.5).encode(
        x=x, y=alt.Y("y:Q", title=y_title, scale=y_scale, axis=y_axis),
        color=alt.condition(alt.datum.note != "", alt.value(DIVERGED_COLOUR), colour),
        shape=alt.Shape("status:N", title="run", sort=statuses,
                        legend=alt.Legend(orient="right", labelLimit=0, symbolLimit=0),
                        scale=alt.Scale(domain=statuses, range=[SWEEP_SHAPES[s] for s in statuses])),
        opacity=faded,
        tooltip=[alt.Tooltip("run_id:Q", title="run"), alt.Tooltip("setting:N"), alt.Tooltip("seed:Q"),
                 alt.Tooltip("status:N"), alt.Tooltip("objective:Q", format=".4g"), alt.Tooltip("note:N")])
    return alt.layer(band, line, seeds).properties(title=title, height=height)


def _objective_rows(results: pd.DataFrame, fields: list[str], numeric_x: bool, log_y: bool,
                    direction: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(a point per run, a mean per setting) of :func:`sweep_objective_chart`: x, group (the value of
    ``fields[1]``, else "all runs"), and a run's y, where one without a finite objective that diverged sits
    at the top edge and any other is left out (Note [Sweep charts])."""
    from ..analysis.groups import setting_table

    x_field, color_field = fields[0], fields[-1]
    table = setting_table(results, fields, direction)
    colour_of = (lambda frame: frame[color_field].map(shown)) if len(fields) > 1 else (
        lambda frame: pd.Series("all runs", index=frame.index))
    x_of = (lambda frame: frame[x_field].astype(float)) if numeric_x else (
        lambda frame: frame[x_field].map(shown))
    runs = results.reset_index(drop=True)
    values = pd.to_numeric(runs["objective"], errors="coerce").astype(float)
    top = top_edge(pd.concat([values, table["max"]]), log_y)
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
    return points, means.dropna(subset=["mean"]).sort_values(["group", "x"], kind="stable")


def _objective_x(values: pd.Series, title: str, numeric_x: bool, log_x: bool) -> alt.X:
    """The x of :func:`sweep_objective_chart`: numbers to scale (every value a tick when there are at most
    12), anything else ordinal in :func:`category_order`."""
    order = None if numeric_x else category_order(values)
    ticks = sorted(set(values.astype(float))) if numeric_x else []
    return alt.X("x:Q" if numeric_x else "x:O", title=title,
                 scale=alt.Scale(type="log") if log_x else (alt.Scale(zero=False) if numeric_x else alt.Undefined),
                 sort=order if order else alt.Undefined,
                 axis=(alt.Axis(values=ticks, format="~g") if 0 < len(ticks) <= 12 else alt.Undefined) if numeric_x
                 else alt.Axis(labelAngle=0))


def _setting_tooltip() -> list:
    """The tooltip of a setting's statistics over seeds (stability.analysis.groups.setting_table's columns)."""
    return [alt.Tooltip("setting:N"), alt.Tooltip("mean:Q", format=".4g"), alt.Tooltip("min:Q", format=".4g"),
            alt.Tooltip("max:Q", format=".4g"), alt.Tooltip("n:Q", title="completed seeds"),
            alt.Tooltip("seeds:Q", title="runs"), alt.Tooltip("diverged:Q"), alt.Tooltip("pruned:Q")]


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
        "x": table[x_field].map(shown), "y": table[y_field].map(shown),
        "setting": table["setting"], "mean": table["mean"].astype(float), "min": table["min"],
        "max": table["max"], "n": table["n"], "seeds": table["seeds"], "diverged": table["diverged"],
        "pruned": table["pruned"]})
    coloured = np.isfinite(data["mean"]) & ((data["mean"] > 0) if log_color else True)
    data["label"] = [
        (f"{mean:.3g}" if ok else ("diverged" if diverged == seeds else "—"))
        + (f"\n{diverged}/{seeds} diverged" if 0 < diverged < seeds else "")
        for mean, ok, diverged, seeds in zip(data["mean"], coloured, data["diverged"], data["seeds"])]
    encoding = dict(
        x=alt.X("x:O", title=field_title(x_field), axis=alt.Axis(labelAngle=0),
                sort=category_order(pd.Series(list(x_order) if x_order is not None else table[x_field]))),
        y=alt.Y("y:O", title=field_title(y_field),
                sort=category_order(pd.Series(list(y_order) if y_order is not None else table[y_field]))),
        tooltip=_setting_tooltip())
    cells = alt.Chart(data[coloured]).mark_rect().encode(**encoding, color=alt.Color(
        "mean:Q", title=f"mean {objective}", legend=alt.Legend(format=".3~g"),
        scale=alt.Scale(type="log" if log_color else "linear", scheme="viridis", reverse=True)))
    empty = alt.Chart(data[~coloured]).mark_rect(color="#d9d9d9").encode(**encoding)
    data["dark"] = _dark_cells(data["mean"].where(coloured), log_color)
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
            drawn = values[finite]
            position, marks = axis_positions(drawn, log_objective) if len(drawn) else (drawn, [])
            position = position.reindex(runs.index).fillna(1.08)
            ends = {shown(v) for v in (drawn.min(), drawn.max())}
            marks = [(p, f"{float(text):.3g}") for p, text in marks if text in ends]
            marks.append((1.08, "no finite value"))
        else:
            position, marks = axis_positions(runs[name], name in log_fields)
        axis = field_title(name)
        axes.append(axis)
        long.append(pd.DataFrame({"run_id": runs["run_id"].astype("int64"), "axis": axis, "position": position,
                                  "value": (runs[name].map(shown) if name != objective else
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


def curves_on_log(metric: str, log_y: bool) -> bool:
    """Whether :func:`grouped_curves_chart` draws ``metric`` on a log axis: gradient norms and singular values
    always, the margin |σ − 1| never (``metric_names.is_log_metric``, the one rule); a loss when "Log y" is on
    (it falls over decades, and a log axis keeps the first steps' large values from flattening the rest); a
    gap never (it may be negative)."""
    is_loss = metric.endswith("/loss") and not metric.startswith("gap/")
    return is_log_metric(metric) or (log_y and is_loss)


def grouped_curves_chart(curves: pd.DataFrame, metric: str, log_y: bool = False, *, x_title: str = "step",
                         title: str = "", height: int = 300) -> alt.LayerChart:
    """One line per group (the mean over its runs, geometric on a log axis) with a min-max band: the rows of
    stability.analysis.groups.group_curves.  On a log axis a minimum of 0 (or a mean of 0) is drawn a decade below
    the smallest positive value, marked with a triangle; its tooltip gives the count of zeros."""
    data = curves.reset_index(drop=True).copy()
    data["group"] = data["group"].astype(str)
    if log_y:
        edges = log_edges(pd.concat([data["mean"], data["min"], data["max"]]))
        data["y_mean"], note_mean = on_log_axis(data["mean"], edges)
        data["y_min"], note_min = on_log_axis(data["min"], edges)
        data["y_max"], _ = on_log_axis(data["max"], edges)
        data["note"] = np.where(note_min != "", note_min.fillna(""), note_mean.fillna(""))
    else:
        data["y_mean"], data["y_min"], data["y_max"] = (finite_or_nan(data[c]) for c in ("mean", "min", "max"))
        data["note"] = ""
    y_scale = alt.Scale(type="log") if log_y else alt.Scale(zero=False)
    y_axis = log_axis(pd.concat([data["y_mean"], data["y_min"], data["y_max"]])) if log_y else alt.Undefined
    y_title = metric + (" (log)" if log_y else "")
    pick = alt.selection_point(fields=["group"], bind="legend")
    hover = alt.selection_point(fields=["step"], nearest=True, on="pointerover", clear="pointerout", empty=False)
    groups = list(dict.fromkeys(data["group"]))
    base = alt.Chart(data).encode(
        x=alt.X("step:Q", title=x_title),
        color=alt.Color("group:N", title=None, scale=RUN_COLOURS, sort=groups,
                        legend=legend_for(groups)))  # above the plot, wrapped: the plot keeps the chart's width
    tooltip = [alt.Tooltip("group:N"), alt.Tooltip("step:Q"),
               alt.Tooltip("mean:Q", title="geometric mean" if log_y else "mean", format=".4g"),
               alt.Tooltip("min:Q", format=".4g"), alt.Tooltip("max:Q", format=".4g"),
               alt.Tooltip("n:Q", title="runs"), alt.Tooltip("zeros:Q", title="zeros (left out of the mean)"),
               alt.Tooltip("note:N")]
    y = alt.Y("y_mean:Q", title=y_title, scale=y_scale, axis=y_axis)
    band = base.mark_area(opacity=0.2).encode(
        y=alt.Y("y_min:Q", title=y_title, scale=y_scale, axis=y_axis), y2="y_max:Q",
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
                x=alt.X("step:Q", title=x_title), y=alt.Y("y_min:Q", title=y_title, scale=y_scale, axis=y_axis),
                color=alt.Color("group:N", scale=RUN_COLOURS, sort=groups, legend=None), tooltip=tooltip))
    return alt.layer(*layers).properties(title=title, height=height + extra_height(groups))
