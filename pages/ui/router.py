"""The router guard: every page runs inside ``app.py``'s ``st.navigation``, also after a fresh start.

    with routed():            # app.py, around navigation.run()
        navigation.run()
    require_router(__file__)  # first line of every page

Note [Direct links on a fresh server]
-------------------------------------
Streamlit decides once per server process whether the app uses the legacy
``pages/`` folder: it does while a folder of that name sits beside the entry
script, until some session calls ``st.navigation`` ("As soon as any session
of your app executes the st.navigation command, your app will ignore the
pages/ directory (across all sessions)", from its documentation).  So the
first visitor after a restart who opens a page link (``/compare?runs=1,2``)
gets legacy routing: the page runs without ``app.py`` (no sidebar, no page
config) and every file in ``pages/`` is listed.  Our layout keeps the
top-level ``pages/`` folder, so a page finds out whether ``app.py`` routed
this very script run (:func:`routed` marks it, per thread: each session's
script runs in its own thread).  If not, and the server's entry script is
``app.py``, the page itself calls ``st.navigation`` with the app's pages,
hidden, which switches the legacy mode off for the whole server, and then
``st.switch_page`` to itself with its query parameters: the rerun goes
through ``app.py``'s router.  Only documented calls are used; the
private ``PagesManager`` flag this once flipped is left alone.

Streamlit's own navigation cannot do this by itself while ``pages/`` is kept:
checked again on Streamlit 1.67 (issue 34), ``PagesManager`` still sets
``uses_pages_directory`` from that folder's existence when the first session
starts, and its script runner then runs ``_mpa_v1``, which runs the linked
page alone.  Renaming the folder would end the legacy mode, and so this
module, but every ``pages.`` import and link would move with it.

A page run directly as the entry script (``streamlit run pages/train.py``,
or AppTest in the tests) has no router to go through and is left as it is.
tests/test_browser.py opens a page link first on a fresh server to check
the redirect.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parents[2] / "app.py"
PAGES = (  # (file under pages/, title, icon); app.py's navigation and the redirect both use this list
    ("train.py", "Train", ":material/model_training:"),
    ("race.py", "Race", ":material/sports_score:"),
    ("compare.py", "Compare", ":material/stacked_line_chart:"),
    ("gradient_flow.py", "Gradient flow", ":material/waves:"),
    ("runs.py", "Runs", ":material/list_alt:"),
    ("sweep.py", "Sweep", ":material/tune:"),
    ("reproduce.py", "Reproduce", ":material/science:"),
)
_routing = threading.local()


def app_pages() -> list:
    """The ``st.Page`` objects of the app, the first one the default."""
    folder = APP.parent / "pages"
    return [st.Page(str(folder / name), title=title, icon=icon, default=index == 0)
            for index, (name, title, icon) in enumerate(PAGES)]


@contextlib.contextmanager
def routed():
    """Mark the page run inside this block as routed by ``app.py``."""
    _routing.active = True
    try:
        yield
    finally:
        _routing.active = False


def require_router(page_file: str) -> None:
    """Make sure ``app.py``'s router runs this page (Note [Direct links on a fresh server]); call it
    first on every page with the page's ``__file__``."""
    if getattr(_routing, "active", False) or not _served_by_app():
        return
    st.navigation(app_pages(), position="hidden")  # documented: from now on pages/ is ignored, server-wide
    st.switch_page(Path(page_file), query_params=st.query_params.to_dict())


def _served_by_app() -> bool:
    """Whether this server's entry script is ``app.py`` (``streamlit run`` puts it in ``sys.argv[0]``)."""
    return bool(sys.argv) and Path(sys.argv[0]).resolve() == APP
