"""Charts: pure functions from DataFrames to Altair charts (no Streamlit).

    from stability import charts
    charts.metric_chart(frame, names=["train/loss", "val/loss"], log_y=True, smoothing=0.6)

One concern a module, their public names gathered here:

    scales       log axes that never choke and label enough decades (log_axis), linear ranges that early
                 outliers do not set (robust_range): clip_for_log, decades, the notes of what an axis cannot show
    legends      legends never cut short, wrapped into the columns that fit: legend_for
    fields       a varied config field as an axis: log_axis_for, log_fields, field_title
    smoothing    TensorBoard's debiased EMA (pandas' ewm): ema, log_ema
    decimation   min-max decimation that keeps spikes and decades: downsample_indices
    lines        curves over training and against a field: prepare, metric_chart(_rows), field_chart
    spectra      singular values, gradient flow and spectrum heatmaps (the Gradient flow page's charts)
    sweeps       a sweep's objective chart, heatmap, parallel coordinates, curves over seeds
    figures      a preset's figure laid out as the paper's (imported as ``stability.charts.figures``)
    classroom    the classroom view's words beside each chart, a cell's equations, a chart for a projector
"""
from .decimation import downsample_indices
from .classroom import cell_equations, explanation, projected
from .fields import LOG_FIELDS, LOG_SPAN, field_title, log_axis_for, log_fields
from .legends import legend_for
from .lines import (PREPARED_COLUMNS, X_AXES, MetricRows, field_chart, metric_chart, metric_chart_rows,
                    metric_log_step, prepare, reference_rows)
from .scales import (HUGE, NOTE_ABOVE, NOTE_BELOW, NOTE_NAN, NOTE_OVERFLOW, NOTE_UNDERFLOW, RUN_COLOURS, TINY,
                     clip_for_log, decades, log_axis, log_axis_at, robust_range)
from .smoothing import MAX_SMOOTHING, ema, log_ema
from .spectra import (HEATMAP_MAX_STEPS, HEATMAP_MAX_T, depth_heatmap, depth_heatmap_rows, gradient_flow_chart,
                      gradient_flow_heatmap, gradient_flow_heatmap_rows, series_heatmap, series_heatmap_rows,
                      singular_value_band_chart, singular_value_band_rows, singular_values_chart, spectrum_heatmap,
                      spectrum_heatmap_rows)
from .sweeps import (DIVERGED_COLOUR, NOTE_DIVERGED, SWEEP_SHAPES, curves_on_log, grouped_curves_chart,
                     parallel_coordinates, sweep_heatmap, sweep_objective_chart)
from ..core.faces import lazy

__all__ = [
    "DIVERGED_COLOUR", "HEATMAP_MAX_STEPS", "HEATMAP_MAX_T", "HUGE", "LOG_FIELDS", "LOG_SPAN", "MAX_SMOOTHING",
    "MetricRows", "NOTE_ABOVE", "NOTE_BELOW", "NOTE_DIVERGED", "NOTE_NAN", "NOTE_OVERFLOW", "NOTE_UNDERFLOW",
    "PREPARED_COLUMNS", "RUN_COLOURS", "SWEEP_SHAPES", "TINY", "X_AXES", "cell_equations", "clip_for_log",
    "curves_on_log", "decades", "explanation", "projected",
    "depth_heatmap", "depth_heatmap_rows", "downsample_indices", "ema", "field_chart", "field_title",
    "gradient_flow_chart", "gradient_flow_heatmap",
    "gradient_flow_heatmap_rows", "grouped_curves_chart", "legend_for", "log_axis", "log_axis_at",
    "log_axis_for", "log_ema", "log_fields", "metric_chart", "metric_chart_rows", "metric_log_step",
    "parallel_coordinates",
    "prepare", "reference_rows", "robust_range", "series_heatmap", "series_heatmap_rows",
    "singular_value_band_chart", "singular_value_band_rows", "singular_values_chart", "spectrum_heatmap",
    "spectrum_heatmap_rows", "sweep_heatmap", "sweep_objective_chart",
]

# The rest of the room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py
# and benchmarks/ may import from it beside the ones above, each -> the module here that holds it (None: that
# module itself), imported on first use.
_FACE = {
    "figures": None, "charts": "figures", "column_values": "figures", "grid_slots": "figures",
    "line_labels": "figures",
}
__all__ += sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
