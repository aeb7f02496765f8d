"""Legends that are never cut short: every name whole, every entry there, wrapped into rows that fit.

    legend = legend_for(names)            # alt.Legend above the plot, in as many columns as fit
    height = base + extra_height(names)   # the chart keeps its plot height however many rows the legend takes

Note [Legends that fit]
-----------------------
Vega draws a legend above the plot in one row unless told how many columns to use, and a row wider than
the chart simply runs off its edge (four cells in a 300-px chart showed "spect"); it also shortens each
label to ``labelLimit`` (160 px) and drops the entries after ``symbolLimit`` (30).  The spec cannot ask the
browser how wide a chart is, so the columns are computed here from the labels against the narrowest chart
a page draws (:data:`NARROWEST_CHART_PX`: the pages' grid puts two charts a row only where each gets
that much, pages/ui/chart_view.py) at both label sizes a page uses: Streamlit's 14 px, and the classroom view's
:data:`CLASSROOM_LABEL_PX` on its own narrowest chart (:data:`CLASSROOM_CHART_PX`; pages/ui/classroom.py
takes its font size from here).  A label's width is estimated from its length at :data:`CHAR_EM` of the
font size a character (Streamlit's Source Sans, measured in Chromium: 0.40 to 0.50 em on run and metric
names); an entry adds its symbol, the gap after it and the column padding, and a column is as wide as
its widest entry.  No label is shortened (``labelLimit`` 0) and no entry
dropped (``symbolLimit`` 0); a chart grows by a legend row for every row past the first
(:func:`extra_height`), so its plot keeps its height.  The columns depend on the names only, never on the
rows, so a live chart's spec stays the same as rows arrive (stability.charts.lines, Note [Light charts]).
"""
from __future__ import annotations

import math

import altair as alt

NARROWEST_CHART_PX = 480    # a chart's narrowest width on a page (pages/ui/chart_view.py: GRID_CHART_REM at 16 px)
CLASSROOM_CHART_PX = 700    # the classroom view's chart: 2/3 of a 1,280-px projector, less the page's padding
CLASSROOM_LABEL_PX = 20     # the classroom view's legend label size (pages/ui/classroom.py, CHART_FONTS)
LABEL_PX = 14               # Streamlit's theme sets legend labels in its small size, 14 px
CHAR_EM = 0.5               # a character's average width in ems: Source Sans measured 0.40-0.50 on names
SYMBOL_EM = 1.2             # the symbol and the gap after it, in ems of the label size
COLUMN_PADDING_PX = 10      # between legend columns (Streamlit's theme: 8 px)
AXIS_ALLOWANCE_PX = 70      # what the y axis (labels and title) takes of a chart's width
ROW_PX = 30                 # a legend row under Streamlit's theme, measured in Chromium (the classroom's: taller)
LEGEND_GAP_PX = 12          # between a second legend (below the plot) and what is above it


def entry_width(label: str, font_px: float = LABEL_PX) -> float:
    """The estimated width in px of one legend entry: symbol, gap, label (Note [Legends that fit])."""
    return (SYMBOL_EM + CHAR_EM * len(str(label))) * font_px + COLUMN_PADDING_PX


def columns_for(labels, width_px: float = NARROWEST_CHART_PX, font_px: float = LABEL_PX) -> int:
    """How many legend columns of ``labels`` fit across a chart ``width_px`` wide, labels at ``font_px``:
    the most whose widths add up within it, each column as wide as its widest entry (Vega's ``gridAlign``
    "each", its default)."""
    labels = list(dict.fromkeys(str(label) for label in labels))
    widths = [entry_width(label, font_px) for label in labels]
    room = width_px - AXIS_ALLOWANCE_PX
    for columns in range(len(labels), 1, -1):
        if sum(max(widths[start::columns]) for start in range(columns)) <= room:
            return columns
    return 1


def legend_columns(labels) -> int:
    """The columns a legend of ``labels`` takes: as many as fit both on the narrowest chart of a page and
    in the classroom view (Note [Legends that fit])."""
    return min(columns_for(labels), columns_for(labels, CLASSROOM_CHART_PX, CLASSROOM_LABEL_PX))


def legend_rows(labels) -> int:
    """The rows a legend of ``labels`` takes in :func:`legend_columns` columns."""
    labels = list(dict.fromkeys(str(label) for label in labels))
    return max(1, math.ceil(len(labels) / legend_columns(labels)))


def extra_height(*label_sets) -> int:
    """The px a chart grows by so that its plot keeps its height: a legend row for every row its legends take
    (one label set a legend; an empty one has none) past the first legend's first, and a gap between two."""
    rows = [legend_rows(labels) for labels in label_sets if len(list(labels))]
    return ROW_PX * (sum(rows) - 1) + LEGEND_GAP_PX * (len(rows) - 1) if rows else 0


def legend_for(labels, *, orient: str = "top", title=None) -> alt.Legend:
    """A legend of ``labels`` at ``orient`` (above the plot, or below it for a second legend), wrapped into
    :func:`legend_columns` columns, no label shortened and no entry dropped."""
    return alt.Legend(orient=orient, title=title, columns=legend_columns(labels), labelLimit=0, symbolLimit=0)


__all__ = ["CLASSROOM_LABEL_PX", "NARROWEST_CHART_PX", "columns_for", "entry_width", "extra_height", "legend_columns",
           "legend_for", "legend_rows"]
