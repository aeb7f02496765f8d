"""Which charts a run's live panel draws, and from which of its rows: the Train page's panels as data.

    charts = run_panels(rows, cell="rnn", metric="accuracy", baseline=0.5, baseline_label="chance", height=360)
    wide = heatmaps(rows)                      # the last charts, drawn across the page's width
    summary = summary_values("accuracy", rows)   # the numbers above the charts
    charts = sweep_panels(spec, results, controls, curves, height=360)   # a sweep's four charts

Every run gets the loss (train and validation, with the task's baseline where the metric is the loss itself:
``metric_names.is_loss_metric``), its task metric (with the baseline) when that is not the loss, ‖∂L/∂h₀‖ on a
log axis, the singular-value band with the margin, and the generalisation gap; a run that logs them adds MASO's
‖A_h‖ and ‖∂L/∂θ_W‖ (log), its gates, and the heatmaps over training of ‖∂L/∂h_t‖, of ‖∂L/∂a_l‖ (a deep step's
cell) and of the spectrum. Each is a :class:`~stability.live.specs.LiveChart` whose data version is the rows
it draws (Note [Live charts] in stability/live/specs.py). ``rows`` is a session's rows of the run
(pages/ui/live.py's LiveRows): its long metric rows, ``counts`` per name, ``version(names)``, ``memo(key,
compute)`` and the series ``flow``, ``depth``, ``spectrum`` with their versions.
"""
from __future__ import annotations

import math

from ..core.metric_names import GATE_PREFIX, H_T_NORM, LAYER_NORM, SPECTRUM, is_loss_metric
from .specs import HOVER_POINTS, LIVE_POINTS, LiveChart

LOSS = ["train/loss", "val/loss"]
SINGULAR_VALUES = ["sv/min", "sv/max", "sv/margin"]
MASO = ("grad/A_h_norm", "grad/recurrent_norm")
HEATMAP_HEIGHT = 300  # px: a heatmap over training, drawn across the page


def run_panels(rows, *, cell: str, metric: str | None, baseline: float | None = None,
               baseline_label: str | None = None, smoothing: float = 0.0, log_loss: bool = False,
               ignore_outliers: bool = True, height: int = 300) -> list[LiveChart]:
    """The live charts of a run of cell ``cell`` (the curves' label) whose task reports ``metric``, in the
    order they are drawn (module docstring); ``smoothing``, ``log_loss`` and ``ignore_outliers`` are the
    panel's controls, ``height`` a line chart's."""
    from .. import charts

    names = set(rows.counts)
    marks = {"baseline": baseline, "baseline_label": baseline_label}

    def drawn_rows(drawn: list):
        return rows.metrics[rows.metrics["name"].isin(drawn)].assign(run=cell)

    def curves(key: str, drawn: list, title: str, explains: str | None = None, **options) -> LiveChart:
        options.update(max_points=LIVE_POINTS, hover_points=HOVER_POINTS, ignore_outliers=ignore_outliers)
        # a log axis's labels follow the decades its rows span: a new step is a new spec, built at once
        references = [options["baseline"]] if options.get("baseline") is not None else []
        ticks = rows.memo(("log step", tuple(drawn), tuple(references)), lambda: charts.metric_log_step(
            drawn_rows(drawn), drawn, references)) if options.get("log_y") else None
        controls = (tuple(drawn), title, tuple(sorted(options.items(), key=str)), ticks)
        return LiveChart(key, controls, rows.version(drawn),
                         lambda: charts.metric_chart(drawn_rows(drawn), names=drawn, title=title, height=height,
                                                     **options),
                         lambda: charts.metric_chart_rows(drawn_rows(drawn), names=drawn, **options).datasets(),
                         metric=explains or drawn[0])

    panels = [curves("loss", LOSS, explains="val/loss", smoothing=smoothing, log_y=log_loss,
                     title="Loss (train, validation)", **(marks if is_loss_metric(metric) else {}))]
    if metric and not is_loss_metric(metric):
        panels.append(curves("metric", [f"train/{metric}", f"val/{metric}"], explains=f"val/{metric}",
                             smoothing=smoothing, title=f"{metric} (train, validation)", **marks))
    panels.append(curves("h0", ["grad/h0_norm"], log_y=True, smoothing=smoothing,
                         title="‖∂L/∂h₀‖, gradient at the first step (log)"))
    maso = [name for name in MASO if name in names]
    if maso:
        panels.append(curves("maso", maso, log_y=True, smoothing=smoothing,
                             title="‖A_h‖ = ‖∂z/∂h₀‖ and ‖∂L/∂θ_W‖ (MASO Fig. 4, log)"))
    panels.append(LiveChart("sv", (), rows.version(SINGULAR_VALUES), lambda: charts.singular_value_band_chart(
        drawn_rows(SINGULAR_VALUES), max_points=LIVE_POINTS, title="Singular values of W (band) and margin",
        height=height), lambda: charts.singular_value_band_rows(drawn_rows(SINGULAR_VALUES), max_points=LIVE_POINTS),
        metric="sv/min"))
    gates = sorted(name for name in names if name.startswith(GATE_PREFIX))
    if gates:
        panels.append(curves("gates", gates, smoothing=smoothing, title="Gates"))
    gap = f"gap/{metric}" if f"gap/{metric}" in names else "gap/loss"
    panels.append(curves("gap", [gap], title=f"Gap, val − train ({gap.split('/')[1]})"))
    return panels + _heatmaps(rows)


def _heatmaps(rows) -> list[LiveChart]:
    """The heatmaps over training the run has rows for: the gradient through time, over depth, the spectrum."""
    from .. import charts

    drawn = []
    if rows.flow is not None and len(rows.flow):
        drawn.append(LiveChart("flow", (), rows.flow_version(), lambda: charts.gradient_flow_heatmap(
            rows.flow, title="Gradient flow through time: ‖∂L/∂h_t‖", height=HEATMAP_HEIGHT),
            lambda: charts.gradient_flow_heatmap_rows(rows.flow), metric=H_T_NORM))
    if rows.depth is not None and len(rows.depth):  # a deep step's cell (mlp): the gradient reaching each layer
        drawn.append(LiveChart("depth", (), rows.depth_version(), lambda: charts.depth_heatmap(
            rows.depth, title="Gradient reaching each layer: ‖∂L/∂a_l‖ (spectral Fig. 5)", height=HEATMAP_HEIGHT),
            lambda: charts.depth_heatmap_rows(rows.depth), metric=LAYER_NORM))
    if rows.spectrum is not None and len(rows.spectrum):
        drawn.append(LiveChart("spectrum", (), rows.spectrum_version(), lambda: charts.spectrum_heatmap(
            rows.spectrum, title="Singular values of W over training: σ_i (log colour)", height=HEATMAP_HEIGHT),
            lambda: charts.spectrum_heatmap_rows(rows.spectrum), metric=SPECTRUM))
    return drawn


def heatmaps(rows) -> int:
    """How many of :func:`run_panels`' last charts are heatmaps over training (drawn across the page)."""
    return sum(frame is not None and len(frame) > 0 for frame in (rows.flow, rows.depth, rows.spectrum))


def sweep_panels(spec, results, controls: dict, curves, *, height: int = 360) -> list[LiveChart]:
    """A sweep's live charts (pages/sweep.py, Note [Watching a sweep]): the final objective against a varied
    field, a heatmap over two, parallel coordinates (each rebuilt only when a run's status or objective moved:
    ``watching.objective_version``), and ``curves`` (the rows of ``controls["metric"]`` of its runs) as means over
    seeds with a min-max band (rebuilt when a run reached a new step). ``results``: ``sweeps.results`` in the
    spec's order; ``controls``: the page's (fields, x, colour, heat_x, heat_y, metric, log_y, log_fields)."""
    from .. import charts
    from ..analysis import groups
    from ..sweeps import direction as direction_of, objective_name, watching

    version, moved = watching.objective_version(results), watching.results_version(results)
    objective, direction = objective_name(spec), direction_of(spec)
    fields, log_y = controls["fields"], controls["log_y"]
    drawn = []
    if fields:
        x, colour, log_fields = controls["x"], controls["colour"], controls["log_fields"]
        drawn.append(LiveChart("objective", (x, colour, log_y, log_fields), version,
                               lambda: charts.sweep_objective_chart(results, x, colour,
                                   log_x=x in log_fields, log_y=log_y, objective=objective, direction=direction,
                                   height=height, title=f"Final {objective} against {charts.field_title(x)}")))
        if len(fields) > 1 and controls["heat_x"] != controls["heat_y"]:
            heat = (controls["heat_x"], controls["heat_y"])
            drawn.append(LiveChart("heatmap", (heat, log_y), version, lambda: charts.sweep_heatmap(
                groups.setting_table(results, list(heat), direction), *heat, log_color=log_y, objective=objective,
                height=height, title=f"Mean {objective} over seeds",
                x_order=watching.listed_values(spec, heat[0]) or None,
                y_order=watching.listed_values(spec, heat[1]) or None)))
        drawn.append(LiveChart("parallel", (tuple(fields), log_fields, log_y), version,
                               lambda: charts.parallel_coordinates(results, fields,
                                   log_fields=log_fields, log_objective=log_y, objective=objective, height=height,
                                   title="Every run, across the varied fields")))
    metric = controls["metric"]
    labels = dict(zip(results["run_id"], results["setting"]))
    log_metric = charts.curves_on_log(metric, log_y)
    drawn.append(LiveChart("curves", (metric, log_metric), moved, lambda: charts.grouped_curves_chart(
        groups.group_curves(curves, labels, metric, log=log_metric), metric, log_metric, height=height,
        title=f"{metric}: mean over seeds, min-max band")))
    return drawn


def summary_values(metric: str | None, rows) -> list[tuple[str, str]]:
    """The numbers above a run's charts, as (label, text): its last validation metric, ‖∂L/∂h₀‖, margin and
    test metric, "—" where none is logged yet."""
    metric = metric or "loss"
    values = [(f"val {metric}", rows.last(f"val/{metric}"), ".4g"), ("‖∂L/∂h₀‖", rows.last("grad/h0_norm"), ".2e"),
              ("max |σ − 1|", rows.last("sv/margin"), ".2e"), (f"test {metric}", rows.last(f"test/{metric}"), ".4g")]
    return [(label, "—" if math.isnan(value) else f"{value:{spec}}") for label, value, spec in values]


__all__ = ["heatmaps", "run_panels", "summary_values", "sweep_panels"]
