"""How the Reproduce page draws a preset: its figure's panels, laid out as the paper lays them out.

    layout = read_layout(data["layout"], configs, fail)   # a checked Layout (PresetError through fail)
    layout = default_layout(["val/loss", "grad/h0_norm"])   # a panel per metric, the runs overlaid

Note [Layout]
    How the page draws the preset, laid out as the paper lays out the figure (optional; without it, one
    panel per metric the claims read, the runs overlaid). The table is ``layout``, as ``figure`` already
    names the paper's figure::

        [layout]
        columns = "task.seq_len"      # optional: a config field (as --vary names them: cell, cell.OPTION,
                                      # cell.hidden_size, task, task.OPTION, lr, train.FIELD); one column
                                      # of panels per value, as Fig. 1's T = 100 / 200 / 300
        color   = "cell"              # optional: a config field naming each line; default the run's name
                                      # (a sweep's setting, with its seed where there are several)

        [[layout.panels]]             # the rows of the figure, top to bottom, as in the paper
        metric = "val/loss"           # a metric row name
        title  = "Validation MSE"     # optional (default: the metric)
        log    = false                # optional: a log y axis (zeros and infinities marked, never dropped)
        x      = "step"               # optional: "step" (the metric over training) or a config field: each
                                      # run's ``stat`` of the metric against that field (Fig. 5's depth L),
                                      # or "layer": a series over depth (grad/layer_norm, ‖∂L/∂a_l‖ for
                                      # l = 0..L), each run's line over l at its first or final reading
        stat   = "final"              # with a field x: as a claim's stat (mean_last with last = k); with
                                      # "layer": "first" or "final", the probe step whose reading is drawn
        marks  = ["baseline", { value = 0.01, label = "r" }]   # optional dashed reference lines: the
                                      # task's memoryless baseline, or a number (the paper's) with a label
        range  = [0, 0.25]            # optional: the y axis the paper's panel shows (what is outside is clipped)

    Fields are checked when the file loads (:func:`stability.config.fields.resolve_field` against the
    preset's cells and tasks) and read from each stored run's config by
    :func:`stability.config.fields.field_value`, the cell's or task's declared default where the config
    leaves an option out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import ConfigError, RunConfig
from ..config.fields import resolve_field
from ..core.metric_names import LAYER_NORM, is_log_metric
from .vocabulary import RUN_FIELDS, Fail, check_stat, is_number, number, table, unknown_keys

_LAYOUT_KEYS = {"columns", "color", "panels"}
_PANEL_KEYS = {"metric", "title", "log", "x", "stat", "last", "marks", "range"}
_MARKS = "\"baseline\" or { value = NUMBER, label = TEXT }"
LAYER = "layer"            # a panel's x over depth: the layers l of a series metric (Note [Layout])
OVER_LAYERS = (LAYER_NORM,)  # the series drawn over depth


@dataclass(frozen=True)
class Mark:
    """A dashed reference line of a panel: the task's baseline (``value`` None) or a number."""

    value: float | None
    label: str

    @property
    def baseline(self) -> bool:
        return self.value is None


@dataclass(frozen=True)
class Panel:
    """One row of a preset's layout (Note [Layout])."""

    metric: str
    title: str = ""
    log: bool = False
    x: str = "step"               # "step", or the canonical path of a config field
    stat: str = "final"
    last: int | None = None
    marks: tuple[Mark, ...] = ()
    range: tuple[float, float] | None = None   # the y axis (low, high); None: fitted to the data

    @property
    def over_training(self) -> bool:
        return self.x == "step"

    @property
    def over_layers(self) -> bool:
        return self.x == LAYER


@dataclass(frozen=True)
class Layout:
    """How the page draws a preset (Note [Layout]): rows of panels, a column per value of ``columns``."""

    panels: tuple[Panel, ...]
    columns: str | None = None    # canonical config field paths
    color: str | None = None


def default_layout(metrics: list[str]) -> Layout:
    """A panel per metric, as the papers draw them: a loss with the task's baseline, gradients and
    singular values on a log axis, the margin |σ − 1| not (:func:`~stability.core.metric_names.is_log_metric`)."""
    panels = []
    for name in metrics:
        marks = (Mark(None, "baseline"),) if name.endswith("/loss") else ()
        panels.append(Panel(name, name, is_log_metric(name), marks=marks))
    return Layout(tuple(panels))


def read_layout(data: Any, configs: list[RunConfig], fail: Fail) -> Layout:
    """A checked :class:`Layout` (Note [Layout]); fields resolved against every config the preset runs."""
    data = table(data, "layout", fail)
    unknown_keys(data, _LAYOUT_KEYS, fail, "layout")
    cells_used = list(dict.fromkeys(config.cell.name for config in configs))

    def field(value: Any, where: str) -> str:
        if not isinstance(value, str) or not value.strip():
            fail(f"{where} must be a config field (cell, cell.OPTION, task.OPTION, lr, ...); got {value!r}")
        try:
            return resolve_field(value, configs[0], cells_used).path
        except ConfigError as error:
            fail(f"{where}: {error}")

    columns = field(data["columns"], "layout.columns") if "columns" in data else None
    color = field(data["color"], "layout.color") if "color" in data else None
    if not isinstance(data.get("panels"), list) or not data["panels"]:
        fail("layout.panels must be a non-empty list of panels, each with a 'metric'")
    panels = [_panel(raw, f"layout.panels[{index}]", field, fail) for index, raw in enumerate(data["panels"])]
    return Layout(tuple(panels), columns, color)


def _panel(raw: Any, where: str, field, fail: Fail) -> Panel:
    raw = table(raw, where, fail)
    unknown_keys(raw, _PANEL_KEYS, fail, where)
    metric = raw.get("metric")
    if not isinstance(metric, str) or not metric.strip() or metric in RUN_FIELDS:
        fail(f"{where} needs 'metric' (a metric row name such as val/loss)")
    if not isinstance(raw.get("title", ""), str) or not isinstance(raw.get("log", False), bool):
        fail(f"{where}: title is a text and log is true or false")
    x = raw.get("x", "step")
    x = x if x in ("step", LAYER) else field(x, f"{where}.x")
    stat, last = raw.get("stat", "final"), raw.get("last")
    if ("stat" in raw or "last" in raw) and x == "step":
        fail(f"{where}: stat and last go with a config field as x (a value per run); over steps every row is drawn")
    if x == LAYER and (metric not in OVER_LAYERS or stat not in ("first", "final") or last is not None):
        fail(f"{where}: x = \"layer\" draws a series over depth ({', '.join(OVER_LAYERS)}) at its "
             f"\"first\" or \"final\" reading (stat)")
    check_stat(stat, last, where, fail)
    marks = _marks(raw.get("marks", []), where, fail)
    shown = raw.get("range")
    if shown is not None and not (isinstance(shown, list) and len(shown) == 2 and all(map(is_number, shown))
                                  and shown[0] < shown[1] and (not raw.get("log") or shown[0] > 0)):
        fail(f"{where}.range must be [low, high] with low < high (and low > 0 on a log axis); got {shown!r}")
    return Panel(metric, raw.get("title", "") or metric, raw.get("log", False), x, stat, last, marks,
                 None if shown is None else (float(shown[0]), float(shown[1])))


def _marks(data: Any, where: str, fail: Fail) -> tuple[Mark, ...]:
    if not isinstance(data, list):
        fail(f"{where}.marks must be a list of {_MARKS}")
    marks = []
    for mark in data:
        if mark == "baseline":
            marks.append(Mark(None, "baseline"))
        elif isinstance(mark, dict) and set(mark) <= {"value", "label"} and is_number(mark.get("value")) \
                and isinstance(mark.get("label", ""), str):
            marks.append(Mark(float(mark["value"]), mark.get("label") or number(mark["value"])))
        else:
            fail(f"{where}.marks: each mark is {_MARKS}; got {mark!r}")
    return tuple(marks)
