"""stability — a lab for gradient stability in recurrent networks.

    streamlit run app.py
"""
import pandas as pd
import streamlit as st
import torch

from stability import runner
from stability.store import RunStore, StoreError

st.set_page_config(page_title="stability", page_icon="〰️", layout="wide")

pages = [
    st.Page("pages/train.py", title="Train", icon=":material/model_training:", default=True),
    st.Page("pages/race.py", title="Race", icon=":material/sports_score:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/stacked_line_chart:"),
    st.Page("pages/gradient_flow.py", title="Gradient flow", icon=":material/waves:"),
    st.Page("pages/runs.py", title="Runs", icon=":material/list_alt:"),
]
navigation = st.navigation(pages)


@st.fragment(run_every=2.0)
def runs_in_progress():
    """Runs queued or training, refreshed in place; dead workers are marked interrupted."""
    try:
        runner.reconcile()
        runs = RunStore().runs()
    except (StoreError, OSError) as error:
        st.caption(f"Run store unavailable: {error}")
        return
    active = runs[runs["status"].isin(["running", "queued"])]
    if active.empty:
        st.caption("No runs in progress.")
        return
    st.caption(f"**{len(active)}** run{'s' if len(active) > 1 else ''} in progress")
    for run in active.itertuples():
        total = None if pd.isna(run.total_steps) else int(run.total_steps)
        done = 0 if pd.isna(run.step) else int(run.step)
        label = f"#{run.id} {run.cell} on {run.task} · {run.status}"
        st.progress(min(1.0, done / total) if total else 0.0, text=label)


with st.sidebar:
    if torch.cuda.is_available():
        st.caption(f"Device: **{torch.cuda.get_device_name(0)}** (CUDA)")
    else:
        st.caption(f"Device: **CPU** ({torch.get_num_threads()} threads)")
    runs_in_progress()

navigation.run()
