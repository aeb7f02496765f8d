"""What every session of the server shares: each watched run's tail, read once a refresh for everyone, and the
values computed from it.

    look = shared_runs().look(store, run_id, series=True)   # the run, its record and its rows; <= 1 read a second
    spec = shared_memo("specs").get(key, build)             # computed once for every session that asks

The reading is stability/live/tail.py's (Notes [Many watchers], [The first rows], [Waiting for the first rows],
[Between log steps], [Step 0 again]); here the server process keeps one of each, Streamlit's resources.
"""
from __future__ import annotations

import streamlit as st

from stability.live import KEPT_MEMOS, SharedMemo, SharedRuns


@st.cache_resource(show_spinner=False)
def shared_runs() -> SharedRuns:
    """The server process's :class:`~stability.live.tail.SharedRuns` (one for all sessions and pages)."""
    return SharedRuns()


@st.cache_resource(show_spinner=False)
def shared_memo(name: str, kept: int = KEPT_MEMOS) -> SharedMemo:
    """The server process's :class:`~stability.live.tail.SharedMemo` called ``name``, keeping the ``kept``
    values used last."""
    return SharedMemo(kept)


__all__ = ["shared_memo", "shared_runs"]
