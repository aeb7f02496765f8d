"""The run store a page reads: the server's own, opened once per process, and its failures as one line.

    store = open_store()                      # or st.error + st.stop, naming the file
    draw = store_guard(draw)                  # a live panel whose store breaks shows one error line
    store.active_runs()                       # what the sidebar lists

Note [Store choice] (store_path) says who chooses the store: whoever starts the server, never a URL.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path

import streamlit as st

from pages.ui.access import current_visitor
from stability.runs.errors import not_readable
from stability.runs.location import masked
from stability.runs.store import ENV_VAR, RunStore, StoreError, default_path
from stability.workers import scheduler

RECONCILE_EVERY_S = 10.0


def store_path() -> str:
    """The run store of this server: ``streamlit run app.py -- --store PATH``, else ``$STABILITY_STORE``,
    else ``~/.stability/runs.db``; a file path made absolute (a URL is passed through).

    Note [Store choice]
    -------------------
    Whoever starts the server chooses the store; a URL never does.  A ``?store=`` query parameter
    used to open or create any path the server could write, tell whether a path existed, and keep
    one open connection per path named.  Nothing here reads the query string, so a link carries a
    view of this server's runs and nothing else.
    """
    text = _store_option() or os.environ.get(ENV_VAR) or None
    if text and "://" in text:
        return text
    return str(Path(text).expanduser().absolute() if text else default_path().absolute())


def _store_option() -> str | None:
    """``--store PATH`` among the script's own arguments (those after ``--`` in ``streamlit run``)."""
    return _parsed_store_option(tuple(sys.argv[1:]))


@functools.lru_cache(maxsize=4)
def _parsed_store_option(arguments: tuple[str, ...]) -> str | None:
    """``--store PATH`` in ``arguments``, parsed once (a live panel opens its store at every rerun)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--store")
    try:
        return parser.parse_known_args(list(arguments))[0].store
    except SystemExit:  # '--store' without a value
        return None


@st.cache_resource(show_spinner=False, max_entries=8)
def _open_store(path: str) -> RunStore:
    """One connection per store and server process (RunStore is thread-safe). What else opening a damaged
    store raises (a ``schema_version`` of ``'abc'`` is a ValueError of ``int()``) is a StoreError here,
    so every page, the sidebar included, answers it in one line."""
    try:
        return RunStore(path)
    except StoreError:
        raise
    except (ValueError, TypeError, LookupError) as error:
        raise not_readable(shown_location(path), " ".join(f"{type(error).__name__}: {error}".split())) from None

STORE_ERRORS = (StoreError, sqlite3.DatabaseError)


def store_problem(error: Exception) -> str:
    """One line naming the store file and what is wrong with it; the cached connection is dropped so a
    repaired file is opened afresh."""
    _open_store.clear()
    if isinstance(error, StoreError):
        return str(error)
    return (f"The run store {shown_location(store_path())} cannot be read ({error}). Point STABILITY_STORE at "
            "another file or move this one aside; a new store is created on the next start.")


def shown_location(location: str) -> str:
    """A store path as it is, a URL with everything between ``://`` and the last ``@`` but the user
    masked (:func:`stability.runs.location.masked`; what a page may show)."""
    return masked(location) if "://" in location else location


def open_store() -> RunStore:
    """The store at :func:`store_path`, opened once per server process; a store that cannot be opened
    stops the page with one error line naming the file."""
    try:
        return _open_store(store_path())
    except STORE_ERRORS as error:
        st.error(store_problem(error))
        st.stop()


def open_store_quietly() -> RunStore:
    """The store at :func:`store_path`, or a :data:`STORE_ERRORS` exception for the caller to show."""
    return _open_store(store_path())


def store_guard(draw):
    """``draw`` (a live panel) with a store that breaks while the page is open shown as one error line."""
    @functools.wraps(draw)
    def guarded(*args, **kwargs):
        try:
            return draw(*args, **kwargs)
        except STORE_ERRORS as error:
            st.error(store_problem(error))
    return guarded

_reconciled: dict[str, float] = {}

_reconcile_lock = threading.Lock()


def reconcile_now_and_then(path: str, every_s: float = RECONCILE_EVERY_S) -> None:
    """``scheduler.reconcile`` (dead workers -> interrupted, queued runs -> free slots) at most once every
    ``every_s`` seconds per store and server process, however many pages poll: a worker that ends
    launches the next queued run itself, so this only catches workers that died.  A viewer's page writes
    nothing (Note [Roles] in stability/access/policy.py): the operators' server reconciles the same store."""
    if not current_visitor().may_write:
        return
    with _reconcile_lock:
        now = time.monotonic()
        if now - _reconciled.get(path, -math.inf) < every_s:
            return
        _reconciled[path] = now
    scheduler.reconcile(path)
    scheduler.keep_warm(path)  # an idle worker with torch imported takes the next Start at once (workers/warm.py)


def keep_warm_slots(count: int) -> None:
    """Idle warm workers for ``count`` runs about to start together (a Race's cells; Note [Warm slots] in
    stability/workers/warm.py), as many as the server's slots let start at once (the others wait queued):
    each of those runs then starts in a worker that has already imported torch.  None for a viewer."""
    if not current_visitor().may_write:
        return
    scheduler.keep_warm(store_path(), count=min(count, scheduler.max_concurrent_runs()))
