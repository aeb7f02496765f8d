"""The classroom view: a page for a projector, every chart with what to look at beside it.

    classroom_switch()                        # the "Classroom view" toggle; ?classroom=1 in the URL
    classroom_style()                         # larger type, no sidebar or controls, wide charts
    explained(spec, "grad/h0_norm", "rnn")    # the chart; in classroom view taller, beside it the words
                                              # of stability.charts.classroom and the cell's equations

Note [Classroom view]
---------------------
A lecturer opens a link with ``?classroom=1`` (or flips the switch, which writes that parameter, so the
link can be shared) and gets the same live page without what a class does not need: the configuration
forms, the buttons and the sidebar are gone, the type is larger (the root font size: Streamlit sizes its
text in rem), the charts are one a row, taller and with larger axis and legend fonts, and beside each
chart stand a few sentences a lecturer can read out (``EXPLANATIONS`` in stability/charts/classroom.py, one
table, keyed by the metric row names of ``stability.core.metric_names``) and the cell's update equations as
the cell registry gives them (``stability.cells.describe(name).equations``, the same LaTeX ``python -m stability cells``
prints).  Without the parameter nothing changes: :func:`explained` draws just the chart.

The switch stays reachable in classroom view: with the sidebar hidden it is drawn at the top right of
the page instead.  The URL is the one truth (:func:`classroom_on`): the toggle only writes it, and takes
its state from it at every run, so a page that clears its query parameters also leaves the view.

A live chart is still the spec :func:`pages.ui.live.live_chart_specs` keeps (Note [Watching cheaply] in
stability/live/pace.py): in classroom view it is sent with a larger height and fonts set on a shallow copy
of that spec (``stability.charts.projected``), the same copy at every rerun, so an unchanged chart still
reaches the browser as the same element.  Nothing here reads rows.

Streamlit only: the words, the equations and the projector's chart sizes are stability/charts/classroom.py's.
"""
from __future__ import annotations

import streamlit as st

from stability.charts import cell_equations, explanation, projected

PARAM = "classroom"          # ?classroom=1
SWITCH_KEY = "classroom_view"
ON_VALUES = ("1", "true", "yes", "on")
ROOT_FONT_PX = 22            # Streamlit's 1rem (16 px by default)
SPLIT = (2, 1)               # chart column : words column


# ----------------------------------------------------------------------------------- the switch
def classroom_on() -> bool:
    """Whether the URL asks for the classroom view: ``?classroom=1``."""
    return str(st.query_params.get(PARAM, "")).strip().lower() in ON_VALUES


def _follow_switch() -> None:
    """The toggle's callback (before the page runs): write its new state into the URL."""
    if st.session_state.get(SWITCH_KEY):
        st.query_params[PARAM] = "1"
    else:
        st.query_params.pop(PARAM, None)


def classroom_switch() -> bool:
    """The "Classroom view" toggle: in the sidebar, or at the top right of the page while the view is on
    (its sidebar is hidden); flipping it sets or removes ``?classroom=1``. Returns :func:`classroom_on`."""
    on = classroom_on()
    st.session_state[SWITCH_KEY] = on  # the URL is the truth (Note [Classroom view])
    if on:
        container = st.columns([4, 1])[1]
    else:
        container = st.sidebar
    container.toggle("Classroom view", key=SWITCH_KEY, on_change=_follow_switch,
                     help="For a projector: hides the controls, enlarges charts and type, and explains each "
                          "chart beside it. Adds ?classroom=1 to the link, so it can be shared.")
    return classroom_on()


def classroom_style() -> None:
    """The projector's CSS: a larger root font, no sidebar, the page's full width. Nothing when the
    classroom view is off."""
    if not classroom_on():
        return
    st.html(f"""<style>
html {{ font-size: {ROOT_FONT_PX}px; }}
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stExpandSidebarButton"]
    {{ display: none !important; }}
[data-testid="stMainBlockContainer"] {{ max-width: 100%; padding: 3.5rem 2rem 3rem 2rem; }}
h1 {{ font-size: 2.2rem !important; }}
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li {{ line-height: 1.45; }}
.katex {{ font-size: 1.15em; }}
</style>""")


def _draw(container, chart, key: str | None) -> None:
    if chart is None:  # a live chart not built yet holds its place (Note [Drawn in turn] in stability/live/specs.py)
        container.empty()
    elif isinstance(chart, dict):  # a spec from pages.ui.live.live_chart_specs: as show_chart draws it
        container.vega_lite_chart(spec=chart, width="stretch", **({"key": key} if key else {}))
    else:
        container.altair_chart(chart, width="stretch", **({"key": key} if key else {}))


def explained(chart, metric: str, cell: str | None = None, *, key: str | None = None) -> None:
    """Draw ``chart`` (an Altair chart, or a Vega-Lite spec from ``live_chart_specs``). In classroom view it
    is taller, and beside it stand :func:`explanation` of ``metric`` and the equations of ``cell``; in the
    normal view it is just the chart, as before."""
    if not classroom_on():
        _draw(st, chart, key)
        return
    left, right = st.columns(SPLIT, gap="large")
    _draw(left, projected(chart), key)
    with right:
        text = explanation(metric)
        if text:
            st.markdown(text)
        show_equations(cell)


def show_equations(cell: str | None) -> None:
    """The cell's name and paper in a caption, then its update equations in one KaTeX block."""
    summary, paper, equations = cell_equations(cell)
    if not equations:
        return
    st.caption(f"**{cell}** · {paper or summary}")
    st.latex(r"\begin{gathered}" + r" \\[0.4em] ".join(equations) + r"\end{gathered}")


def show_cells(names) -> None:
    """The equations of several cells side by side (a race: one chart overlays them all)."""
    names = [name for name in dict.fromkeys(names) if cell_equations(name)[2]]
    for column, name in zip(st.columns(len(names)) if names else (), names):
        with column:
            show_equations(name)


__all__ = [
    "classroom_on",
    "classroom_style",
    "classroom_switch",
    "explained",
    "show_cells",
    "show_equations",
]
