"""Being split by job into pages/ui/ (issue 11): what is left here are the Compare and Race pages' live
reads, until they move to pages/ui/live.py; the other names are re-exported for the pages not yet moved.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from pages.ui.form import cell_about, cell_help, config_form, config_problem, option_widget  # noqa: F401
from pages.ui.limits import LIMITS, limited_input  # noqa: F401
from pages.ui.links import QueryReader, config_from_query, config_to_query  # noqa: F401
from pages.ui.router import require_router  # noqa: F401
from pages.ui.status import STATUS_COLOURS, describe_config, format_duration  # noqa: F401
from pages.ui.store import (  # noqa: F401
    STORE_ERRORS,
    open_store,
    open_store_quietly,
    reconcile_now_and_then,
    store_guard,
    store_path,
    store_problem,
)
from stability.store import TERMINAL, RunNotFound, RunStore

FLOW = "grad/h_t_norm"


def active_runs(store: RunStore) -> pd.DataFrame:
    """Runs queued or training (app.py's sidebar until it reads store.active_runs() itself)."""
    records = store.active_runs()
    return pd.DataFrame({"id": [r.id for r in records], "status": [r.status for r in records],
                         "step": [r.step for r in records], "total_steps": [r.total_steps for r in records],
                         "cell": [r.cell for r in records], "task": [r.task for r in records]})


def run_status_panel(store: RunStore, run_id: int, *, run: dict | None = None, rows=None) -> None:  # noqa: ARG001
    """pages/ui/status.py's panel for the Train page's old call (a run dict and its rows)."""
    from pages.ui.status import run_status_panel as panel

    try:
        record = store.record(run_id)
    except RunNotFound:
        st.warning(f"Run {run_id} is not in the store {store.path}.")
        return
    panel(store, record)


# --------------------------------------------------------------------------------- live reading
@dataclass
class RunRows:
    """A run's rows as read so far in this session: metric rows, and the 'grad/h_t_norm' series if asked.

    ``final``: read in full after the run ended, so never read again. ``just_finished``: the run ended
    since the previous look (a page reruns itself once, to stop polling and update its buttons).
    """

    metrics: pd.DataFrame
    flow: pd.DataFrame | None = None
    final: bool = False
    just_finished: bool = False


def run_rows(store: RunStore, run_id: int, status: str, *, flow: bool = False) -> RunRows:
    """This session's cached rows of ``run_id``, topped up with the rows logged since the last look.

    ``status`` must be read before calling, so a terminal status means every row is already stored: then
    everything is read once more in full (rows a worker added to an already-seen step included) and the
    cache is final.
    """
    cache = st.session_state.setdefault("_run_rows", {})
    key = (str(store.path), int(run_id))
    rows, terminal = cache.get(key), status in TERMINAL
    if rows is None or (terminal and not rows.final):
        was_live = rows is not None
        rows = RunRows(store.metrics(run_id), store.series(run_id, FLOW) if flow else None, final=terminal,
                       just_finished=was_live and terminal)
    elif not rows.final:
        rows.metrics = _appended(rows.metrics, store.metrics(run_id, since_step=_last_step(rows.metrics)))
        if flow and rows.flow is not None:
            rows.flow = _appended(rows.flow, store.series(run_id, FLOW, since_step=_last_step(rows.flow)))
    if flow and rows.flow is None:
        rows.flow = store.series(run_id, FLOW)
    cache[key] = rows
    return rows


def _last_step(frame: pd.DataFrame) -> int | None:
    return int(frame["step"].max()) if len(frame) else None


def _appended(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([old, new], ignore_index=True) if len(new) else old


# Note [Live charts]
# ------------------
# A live panel reruns every second, and a fragment rerun that draws nothing clears what it drew, so every
# chart must be sent again each time.  Building an Altair chart and converting it to a Vega-Lite spec
# with Arrow data (validation included) costs 0.1-1 s of CPU for a Train page's seven charts; a spec
# already converted costs almost nothing to send again.  So a panel keeps the converted specs of its
# charts per slot and rebuilds them only when its controls changed, or when new rows arrived and the
# last build lies at least REBUILD_FACTOR times its own CPU cost in the past: chart building then takes
# at most 1/REBUILD_FACTOR of a core, and a slow machine simply redraws less often.
REBUILD_FACTOR = 10.0


@dataclass
class _ChartSpecs:
    controls: object
    data_version: object
    specs: list
    built_at: float
    cost_s: float


def live_chart_specs(slot: str, controls, data_version, build, *, final: bool = False) -> list:
    """The Vega-Lite specs of the charts ``build()`` returns, kept in this session under ``slot``
    (Note [Live charts]); ``final``: the data will not change again, so it is drawn now."""
    cache = st.session_state.setdefault("_live_charts", {})
    entry, now = cache.get(slot), time.monotonic()
    stale = entry is None or entry.controls != controls or (
        entry.data_version != data_version and (final or now - entry.built_at >= REBUILD_FACTOR * entry.cost_s))
    if stale:
        started = time.thread_time()
        specs = [_vega_lite_spec(chart) for chart in build()]
        entry = cache[slot] = _ChartSpecs(controls, data_version, specs, now, time.thread_time() - started)
    return entry.specs


def show_chart(container, spec: dict) -> None:
    """Draw a spec from :func:`live_chart_specs` (Streamlit copies the spec before it takes the data out)."""
    container.vega_lite_chart(spec=spec, width="stretch")


def _vega_lite_spec(chart) -> dict:
    """The spec ``st.altair_chart`` would send, with its datasets already serialised to Arrow."""
    try:
        from streamlit.elements.vega_charts import _convert_altair_to_vega_lite_spec
    except ImportError:  # another Streamlit version: the public path, data inline (converted on each send)
        import altair as alt

        with alt.data_transformers.disable_max_rows():
            return chart.to_dict()
    return _convert_altair_to_vega_lite_spec(chart)


def latest_value(frame: pd.DataFrame, name: str) -> float:
    """The last logged value of metric ``name`` in long rows, NaN if there is none."""
    values = frame.loc[frame["name"] == name, "value"]
    return float(values.iloc[-1]) if len(values) else math.nan


