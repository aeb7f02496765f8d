"""A preset's figure, laid out as the paper lays it out (Note [Layout] in :mod:`stability.presets.layout`).

    lines = figures.line_labels(layout, runs, names)      # run id -> the name of its line
    columns = figures.column_values(layout, runs)         # run id -> its column's value (None: one column)
    slots = figures.grid_slots(layout, columns)           # [(panel, column value)], row by row
    drawn = figures.charts(layout, slots, runs, metrics, lines, columns, depth)   # an Altair chart per slot

``runs`` maps run ids to stored records (``RunStore.record``), ``metrics`` run ids to their metric rows
(the long frame of ``RunStore.metrics``), ``depth`` (for panels over layers only) run ids to their
``grad/layer_norm`` series rows (``RunStore.series``: step, index l, value). Plain functions of those, so a test checks them on
hand-written rows; the Reproduce page draws their charts live.
"""
from __future__ import annotations

import pandas as pd

from ..config.fields import field_label, field_value
from ..core.formatting import shown
from ..presets import Layout, Panel, statistic
from .lines import field_chart, metric_chart

# Fields that tell apart two runs a layout would draw under one name (besides a sweep's varied fields).
FIELDS_TOLD = ("cell", "cell.hidden_size", "task.seq_len", "train.lr", "train.optimizer", "train.freeze_recurrent")
PANEL_HEIGHT = 320     # px, title and a one-row legend included: the plot keeps ~220 px


def line_labels(layout: Layout, runs: dict, labels: dict) -> dict:
    """Each run's line label: the layout's colour field's value (``cell``: the cell's name), else the run's
    name (``labels``); :func:`distinct` tells apart runs that one panel would draw under one name."""
    if layout.color is None:
        return dict(labels)
    named = {}
    for run_id, run in runs.items():
        value = field_value(run.config, layout.color)
        named[run_id] = (shown(value) if layout.color in ("cell", "task")
                         else f"{field_label(layout.color, short=True)}={shown(value)}")
    return named


def column_values(layout: Layout, runs: dict) -> dict:
    """Each run's column value (the layout's columns field), or None where the figure has one column."""
    if layout.columns is None:
        return {run_id: None for run_id in runs}
    return {run_id: field_value(run.config, layout.columns) for run_id, run in runs.items()}


def grid_slots(layout: Layout, columns: dict) -> list[tuple]:
    """The slots of the figure's grid: ``(panel, column value)`` of every chart, row by row (the paper's
    panels top to bottom), the columns in increasing order (numbers) or first seen (texts)."""
    values = list(dict.fromkeys(columns.values()))
    try:
        values = sorted(values)
    except TypeError:
        pass
    return [(panel, value) for panel in layout.panels for value in values]


def charts(layout: Layout, slots: list[tuple], runs: dict, metrics: dict, lines: dict, columns: dict,
           depth: dict | None = None) -> list:
    """The charts of the layout (Note [Layout] in stability/presets/layout.py): over training, every run of the
    column overlaid, its line named by ``lines`` (made distinct where two would share a name); against a
    config field, each run's statistic of the metric, a line per name; over layers, each run's series
    (``depth``) at its first or final reading against l."""
    drawn = []
    for panel, value in slots:
        members = [run_id for run_id in runs if columns[run_id] == value]
        # the column's value first: a narrow column cuts a long title at its end, and the value is what
        # tells the columns apart (the panel's title is the same in each)
        title = panel.title if layout.columns is None else \
            f"{field_label(layout.columns, short=True)} = {shown(value)} · {panel.title}"
        marks = [(mark.value, mark.label) for mark in panel.marks if not mark.baseline]
        baseline = next((runs[run_id] for run_id in members if runs[run_id].baseline is not None), None)
        if baseline is not None and any(mark.baseline for mark in panel.marks):
            marks.insert(0, (baseline.baseline, baseline.baseline_label or "baseline"))
        shared = {"title": title, "log_y": panel.log, "marks": tuple(marks), "y_range": panel.range}
        if panel.over_training:
            named = distinct({run_id: lines[run_id] for run_id in members}, runs,
                             skip=tuple(path for path in (layout.color, layout.columns) if path))
            frame = pd.concat([metrics[run_id].assign(run=named[run_id]) for run_id in members],
                              ignore_index=True)
            drawn.append(metric_chart(frame, names=[panel.metric], hover_points=60,
                                      **shared, **_legend(named.values())))
        elif panel.over_layers:
            drawn.append(field_chart(layer_points(panel, members, depth or {}, lines),
                                     x_title="layer l (0: the first hidden layer's input)",
                                     y_title=f"{panel.metric} at the {panel.stat} reading",
                                     **shared, **_legend(lines[run_id] for run_id in members)))
        else:
            drawn.append(field_chart(field_points(panel, members, runs, metrics, lines),
                                     x_title=field_label(panel.x, short=True), y_title=f"{panel.stat} {panel.metric}",
                                     **shared, **_legend(lines[run_id] for run_id in members)))
    return drawn


def field_points(panel: Panel, members: list[int], runs: dict, metrics: dict, lines: dict) -> pd.DataFrame:
    """One point per run with rows of the panel's metric: its field value, its line's name, its statistic."""
    points = []
    for run_id in members:
        metric = metrics[run_id]
        own = metric[metric["name"] == panel.metric].sort_values("step", kind="stable")["value"]
        if len(own):
            points.append({"x": field_value(runs[run_id].config, panel.x), "run": lines[run_id],
                           "value": statistic(own, panel.stat, panel.last), "run_id": run_id})
    return pd.DataFrame(points, columns=["x", "run", "value", "run_id"])


def layer_points(panel: Panel, members: list[int], depth: dict, lines: dict) -> pd.DataFrame:
    """One point per layer l of each run's series at its first or final reading (``panel.stat``): x = l."""
    frames = []
    for run_id in members:
        rows = depth.get(run_id)
        if rows is None or rows.empty:
            continue
        step = rows["step"].min() if panel.stat == "first" else rows["step"].max()
        at = rows[rows["step"] == step].sort_values("index", kind="stable")
        frames.append(pd.DataFrame({"x": at["index"].astype(int).to_numpy(), "run": lines[run_id],
                                    "value": at["value"].to_numpy(), "run_id": run_id}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["x", "run", "value", "run_id"])


def _legend(names) -> dict:
    """The ``legend`` and ``height`` arguments of a panel whose lines have ``names``: a legend that fits
    (``"fit"``: one row for a few short names, wrapped uncut into rows for long or many), above a panel of
    :data:`PANEL_HEIGHT` that the chart grows by a row for each row its legend wraps into
    (stability.charts.legends, Note [Legends that fit])."""
    return {"legend": "fit", "height": PANEL_HEIGHT}


def distinct(lines: dict, runs: dict, skip: tuple = ()) -> dict:
    """``lines`` where no two runs share a name. Runs sharing one are told apart by what differs between
    them: the config fields among ``FIELDS_TOLD`` (and a sweep's varied fields) whose values differ, less
    the fields in ``skip`` (the layout's own), else their seed, else their run id."""
    named = dict(lines)
    shared: dict[str, list[int]] = {}
    for run_id, label in lines.items():
        shared.setdefault(label, []).append(run_id)
    for label, ids in shared.items():
        if len(ids) < 2:
            continue
        configs = [runs[run_id].config for run_id in ids]
        fields = list(dict.fromkeys([path for run_id in ids for path in dict(runs[run_id].params or {})]
                                    + list(FIELDS_TOLD)))
        values = {path: [field_value(config, path) for config in configs] for path in fields
                  if path not in skip and path != "train.seed"}
        differ = [path for path, seen in values.items() if len({shown(v) for v in seen}) > 1]
        for index, run_id in enumerate(ids):
            parts = [f"{field_label(path, short=True)}={shown(values[path][index])}" for path in differ]
            named[run_id] = f"{label} {' '.join(parts)}" if parts else label
        if len({named[run_id] for run_id in ids}) < len(ids):
            seeds = [config.train.seed if config else None for config in configs]
            by_seed = None not in seeds and len(set(seeds)) == len(seeds)
            for run_id, seed in zip(ids, seeds):
                named[run_id] = f"{named[run_id]} seed={seed}" if by_seed else f"{named[run_id]} run {run_id}"
    return named
