"""How the live pages lay out their charts, how tall they are, and the "Ignore outliers" setting.

    chart_grid_style()                                 # once a page: the grid's CSS
    chart_grid(st, specs, "race")                      # one chart a row below GRID_TWO_REM, two above
    ignore = outliers_control(column, outliers_from_query(query), key="race_outliers")   # ?outliers=show

Note [Chart grid]
-----------------
A chart two a row beside a page's form was about 300 px wide on a 1,400-px screen: a plot too small to
read a curve off.  Python cannot ask the browser how wide a column is, so the grid leaves the decision
to the browser: the charts go into one wrapping row (``st.container(horizontal=True)``) whose CSS makes
it a size container; below :data:`GRID_TWO_REM` each chart takes the whole width, above it two share a
row.  Two charts a row thus never get less than :data:`GRID_CHART_REM` each, the narrowest chart the
legends are fitted to (stability.charts.legends, Note [Legends that fit]): on a 1,400-px screen beside the
form that is one column of ~650-px charts, on a wide screen two of 500 px and more.  Each chart is
:data:`CHART_HEIGHT` tall with a one-row legend (Streamlit fits title, legend, axes and plot into it),
which leaves its plot ~230 px.  The classroom view lays out its charts itself, one a row beside their words
(pages/ui/classroom.py).

Streamlit only.
"""
from __future__ import annotations

import streamlit as st

from pages.ui.live import show_chart

GRID_CHART_REM = 30          # a chart's narrowest width in the grid: 480 px at Streamlit's 16-px rem
GRID_GAP_REM = 1             # between two charts of a row
GRID_TWO_REM = 2 * GRID_CHART_REM + GRID_GAP_REM  # the grid's width from which two charts share a row
CHART_HEIGHT = 400           # px, a chart with its title, a one-row legend and its axes
GRID_KEY = "chart_grid_"     # the grids' keys start so: their CSS class is st-key-chart_grid_<page>
OUTLIERS_PARAM = "outliers"  # ?outliers=show: every point sets the y range; absent: early outliers do not
OUTLIERS_SHOWN = "show"


def chart_grid_style() -> None:
    """The grid's CSS (Note [Chart grid]): a size container whose charts take the whole width, or half of it
    less the gap from :data:`GRID_TWO_REM` on."""
    grid = f'[class*="st-key-{GRID_KEY}"]'
    chart = f'{grid} > [data-testid="stElementContainer"]'
    half = f"calc(50% - {GRID_GAP_REM / 2}rem)"
    st.html(f"""<style>
{grid} {{ container-type: inline-size; gap: {GRID_GAP_REM}rem !important; }}
{chart} {{ flex: 1 1 100% !important; width: 100% !important; max-width: 100% !important; }}
@container (min-width: {GRID_TWO_REM}rem) {{
  {chart} {{ flex: 0 0 {half} !important; width: {half} !important; max-width: {half} !important; }}
}}
</style>""")


def chart_grid(container, specs: list, key: str, places: bool = False) -> list:
    """Draw ``specs`` (from :func:`pages.ui.live.live_chart_specs`) in a grid of one or two charts a row
    (Note [Chart grid]); ``key`` names the grid within its page. ``places``: each chart drawn in a placeholder
    of its own, the placeholders returned in order (for :func:`pages.ui.live.drawn_in_turn`); else []."""
    grid = container.container(horizontal=True, key=GRID_KEY + key)
    drawn = []
    for spec in specs:
        place = grid.empty() if places else grid
        show_chart(place, spec)
        drawn.append(place)
    return drawn if places else []


def outliers_from_query(query) -> bool:
    """Whether the link asks to ignore early outliers (the default): ``?outliers=show`` turns it off.
    ``query``: a :class:`pages.ui.links.QueryReader`, which notes a malformed value."""
    return query.choice(OUTLIERS_PARAM, ("ignore", OUTLIERS_SHOWN), "ignore") != OUTLIERS_SHOWN


def outliers_control(container, default: bool = True, key: str = "ignore_outliers") -> bool:
    """The "Ignore outliers" toggle (TensorBoard's "ignore outliers in chart scaling"), starting at
    ``default`` (:func:`outliers_from_query`), written back to the URL when it is off."""
    ignore = container.toggle(
        "Ignore outliers", value=default, key=key,
        help="A curve's first points far outside the rest (a loss of 2 at step 0) do not set the y range: they "
             "are drawn at its edge as ▲ or ▼, their value in the tooltip. Off: every point sets the range. "
             "Log axes always show every decade.")
    if ignore:
        st.query_params.pop(OUTLIERS_PARAM, None)
    else:
        st.query_params[OUTLIERS_PARAM] = OUTLIERS_SHOWN
    return ignore


__all__ = ["CHART_HEIGHT", "GRID_CHART_REM", "chart_grid", "chart_grid_style", "outliers_control",
           "outliers_from_query"]
