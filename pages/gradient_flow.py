"""Gradient flow: how far back a gradient reaches through a freshly built cell.

Widgets -> cell options -> stability.diagnostics.gradient_flow -> charts.
No training: this is where a class sees why Spectral-RNN and SGORNN exist.
"""
import streamlit as st
import torch

from pages.common import LIMITS, QueryReader, require_router
from stability import cells, charts, diagnostics
from stability.cells.base import H0_MODES
from stability.cells.rnn import RECURRENT_INITS
from stability.cells.scan import ACTIVATIONS
from stability.parametrizations.exponential import SKEW_INITS

require_router(__file__)

HIDDEN_SIZES = [8, 16, 32, 64, 128, 256]
CHOICES = {"nonlinearity": ACTIVATIONS, "h0": H0_MODES}
INIT_CHOICES = {"rnn": RECURRENT_INITS, "exponential": SKEW_INITS}


@st.cache_data(show_spinner=False, max_entries=64)
def measure(name: str, hidden: int, seq_len: int, seed: int, options: tuple) -> diagnostics.GradientFlow:
    """Build the cell and measure its gradient flow, once per setting and server process: moving a slider
    back, or a rerun that changes nothing here, builds no model."""
    torch.manual_seed(seed)
    cell = cells.build(name, 1, hidden, **dict(options))
    return diagnostics.gradient_flow(cell, seq_len, seed=seed)


def option_widget(cell_name, option, default):
    """One widget per cell option, typed from its default."""
    key = f"gf_{cell_name}_{option}"
    choices = INIT_CHOICES.get(cell_name) if option == "init" else CHOICES.get(option)
    if choices:
        return st.selectbox(option, choices, index=list(choices).index(default), key=key)
    if isinstance(default, bool):
        return st.checkbox(option, value=default, key=key)
    if isinstance(default, int):
        return int(st.number_input(option, value=default, step=1, key=key))
    if isinstance(default, float):
        return st.number_input(option, value=default, format="%.4g", key=key)
    return default  # tuples / None: keep the cell's default


st.title("Gradient flow")
st.caption("How strongly does the last state depend on each earlier one, before any training? "
           "Measured in float64 with the cell's state probe; the dashed line is the bound "
           "‖W‖^(T−t) (KRU paper eq. 3), which holds for Elman cells but not for gated ones.")

names = cells.available()
query = QueryReader()
initial_cell = query.choice("cell", names, "rnn")
initial_hidden = query.choice("hidden", [str(size) for size in HIDDEN_SIZES], "64")
initial_length = query.number("T", 200, "T")
initial_seed = query.number("seed", 0)
query.warn()
controls, plots = st.columns([1, 3], gap="large")
with controls:
    name = st.selectbox("Cell", names, index=names.index(initial_cell),
                        key="gf_cell", help="\n".join(f"**{n}**: {cells.DESCRIPTIONS[n]}" for n in names))
    st.caption(cells.DESCRIPTIONS[name])
    hidden = st.select_slider("Hidden size", HIDDEN_SIZES, value=int(initial_hidden), key="gf_hidden")
    seq_len = st.slider("Sequence length T", *LIMITS["T"], initial_length, step=10, key="gf_T")
    seed = int(st.number_input("Seed", min_value=LIMITS["seed"][0], max_value=LIMITS["seed"][1], value=initial_seed,
                               step=1, key="gf_seed"))
    with st.expander("Cell options", expanded=True):
        chosen = {option: option_widget(name, option, default)
                  for option, default in cells.options(name).items() if option not in ("h0", "h0_noise_std")}

st.query_params.update({"cell": name, "hidden": str(hidden), "T": str(seq_len), "seed": str(seed)})

try:
    flow = measure(name, hidden, seq_len, seed, tuple(sorted(chosen.items())))
except ValueError as error:
    plots.error(f"Cannot build {name}: {error}")
    st.stop()

with plots:
    first = flow.per_step["grad_norm"].iloc[0]
    a, b, c, d = st.columns(4)
    a.metric("‖∂h_T/∂h_0‖", f"{first:.2e}")
    b.metric("‖W‖₂ (largest σ)", f"{flow.spectral_norm:.4f}")
    c.metric("spectral radius", f"{flow.spectral_radius:.4f}")
    d.metric("margin max|σ−1|", f"{flow.margin:.2e}")
    st.altair_chart(charts.gradient_flow_chart(flow.per_step, title=f"{name}: gradient reaching step t from T"),
                    width="stretch")
    st.altair_chart(charts.singular_values_chart(flow.singular_values, title="Singular values of W"),
                    width="stretch")
