"""stability — a lab for gradient stability in recurrent networks.

    streamlit run app.py                              # the store: $STABILITY_STORE, else ~/.stability/runs.db
    streamlit run app.py -- --store PATH              # or this one

Whoever starts the server chooses the run store; a URL never does (pages/ui/store.py, Note [Store choice]).
"""
import gc

import streamlit as st

from pages.ui.access import current_visitor, sidebar_role_line
from pages.ui.live import polled
from pages.ui.store import STORE_ERRORS, open_store_quietly, reconcile_now_and_then, store_problem
from pages.ui.router import app_pages, routed
from stability.core import gpus
from stability.core.devices import describe_device, resolve_device
from stability.core.errors import ConfigError
from stability.sweeps import SweepSpec, watching

# Note [Garbage collector]
# Streamlit runs a full gc.collect() after every script run, a live panel's fragment reruns included.
# With torch, pandas and Altair loaded that walks ~250,000 objects: 0.15-0.25 s of CPU, once a second per
# open live page, ten times what the panel itself costs.  Those objects live as long as the server, so
# the first run moves them out of the collector's sight (gc.freeze); what pages create later is
# collected as before.  The pages' own imports (Altair's schema classes, the charts) come after that first
# freeze, and thirty headless watchers still spent 39 % of the server's core in that collection (py-spy,
# 2026-11-28), so .streamlit/config.toml also switches it off (runner.postScriptGC = false); the freeze
# stays for a server started with another config, and for Python's own rare full collections.
if gc.get_freeze_count() == 0:
    gc.collect()
    gc.freeze()

st.set_page_config(page_title="stability", page_icon="〰️", layout="wide")

navigation = st.navigation(app_pages())

# Note [Sidebar refresh]
# Every fragment rerun, this one included, re-renders the page's whole React tree in the browser: ~50 ms
# of Chromium's renderer on the Train page, whatever the fragment draws.  At 2 s the sidebar alone cost
# a watched page ~1.5 CPU s a minute, as much as the live panel itself (pages/ui/live.py, Note [Watching
# cheaply]); its progress bars moving every 10 s lose nothing, and the Train page shows its run live.
ACTIVE_REFRESH_S = 10.0  # while runs are in progress
IDLE_REFRESH_S = 10.0    # otherwise: a run started from a page shows at once (a full rerun), others within 10 s


def runs_in_progress() -> None:
    """Running sweeps (their runs done of their total, a link to the Sweep page) and the runs queued or
    training in the pages' store (``store.sweeps()`` and ``store.active_runs()``: four indexed queries);
    dead workers are marked interrupted now and then (at most every 10 s per server, however many pages
    poll)."""
    try:  # every read: a store whose later pages are damaged fails here, not at opening
        store = open_store_quietly()
        reconcile_now_and_then(store.url)
        active = store.active_runs()
        running_sweeps = [sweep for sweep in store.sweeps() if sweep.status == "running"]
    except (*STORE_ERRORS, OSError) as error:
        st.caption(f"Run store unavailable: {store_problem(error)}")
        return
    if not active and not running_sweeps:
        st.caption("No runs in progress.")
        return
    shown = 5  # bars a list, then "and N more": 1,000 queued runs drew 1,001 bars in every sidebar
    for sweep in running_sweeps[:shown]:  # the runs it has not asked for yet are not in the store: from its spec
        done, total = watching.done_and_total(SweepSpec.from_dict(sweep.spec), sweep.counts)
        st.progress(done / max(total, 1), text=f"[Sweep #{sweep.id}](sweep?sweep={sweep.id}) · {done}/{total} runs")
    if len(running_sweeps) > shown:
        st.caption(f"and {len(running_sweeps) - shown:,} more sweeps running ([Sweep](sweep))")
    if active:
        training = sum(run.status == "running" for run in active)
        st.caption(f"**{len(active):,}** run{'s' if len(active) > 1 else ''} in progress: {training:,} training, "
                   f"{len(active) - training:,} queued")
    for run in sorted(active, key=lambda run: run.status != "running")[:shown]:  # training first, then oldest
        st.progress(run.progress, text=f"#{run.id} {run.cell} on {run.task} · {run.status}")
    if len(active) > shown:
        st.caption(f"and {len(active) - shown:,} more ([Runs](runs))")


@st.cache_data(ttl=300, show_spinner=False)
def device_line() -> str:
    """Where a run with device auto trains: "**cuda (NVIDIA H100)**", "**mps (Apple GPU)**", "**cpu (4 threads)**".
    A GPU's name comes from nvidia-smi (stability.core.gpus), not from torch.cuda, which would make
    this server hold a CUDA context of its own for its whole life (hundreds of MB of the GPU)."""
    try:
        device = resolve_device("auto")
    except ConfigError as error:  # a mistyped $STABILITY_DEVICE
        return str(error)
    if device.type == "cuda":
        listed = gpus.gpu_memory()
        return f"**cuda ({listed[0].name if listed else 'a CUDA GPU'})**"
    return f"**{describe_device(device)}**"


def any_run_in_progress() -> bool:
    try:
        store = open_store_quietly()
        return bool(store.active_runs()) or any(sweep.status == "running" for sweep in store.sweeps())
    except (*STORE_ERRORS, OSError):
        return False


with st.sidebar:
    sidebar_role_line(current_visitor())
    st.caption(f"Device: {device_line()}")
    polled(runs_in_progress, ACTIVE_REFRESH_S if any_run_in_progress() else IDLE_REFRESH_S)

try:
    with routed():
        navigation.run()
except STORE_ERRORS as error:  # a store that breaks while a page reads it: one line, not a traceback
    st.error(store_problem(error))
