"""Gradient flow: how far back a gradient reaches through a freshly built cell.

Widgets -> cell options -> stability.training.probes.gradient_flow -> charts.
No training: this is where a class sees why Spectral-RNN and SGORNN exist.
"""
import streamlit as st
import torch

from pages.ui.chart_view import CHART_HEIGHT
from pages.ui.form import cell_about, cell_help, option_widget
from pages.ui.limits import LIMITS
from pages.ui.links import QueryReader
from pages.ui.classroom import classroom_style, classroom_switch
from pages.ui.router import require_router
from stability import cells
from stability import charts
from stability.training import probes as diagnostics
from stability.config.demos import GRADIENT_FLOW_CELL

require_router(__file__)

HIDDEN_SIZES = [8, 16, 32, 64, 128, 256]
UNUSED_HERE = ("h0", "h0_noise_std")  # the measurement starts every cell from h0 = 0


@st.cache_data(show_spinner=False, max_entries=64)
def measure(name: str, hidden: int, seq_len: int, seed: int, options: tuple) -> diagnostics.GradientFlow:
    """Build the cell and measure its gradient flow, once per setting and server process: moving a slider
    back, or a rerun that changes nothing here, builds no model."""
    torch.manual_seed(seed)
    cell = cells.build(name, 1, hidden, **dict(options))
    return diagnostics.gradient_flow(cell, seq_len, seed=seed)


def cell_options(name: str) -> dict:
    """One widget per option the measurement uses (:func:`pages.ui.form.option_widget`); an option left
    empty, or one the form cannot edit, keeps the cell's default."""
    chosen = {}
    for option in cells.describe(name).options:
        if option.in_form and option.name not in UNUSED_HERE:
            value = option_widget(option, option.default, f"gf_{name}_{option.name}")
            if value is not None:
                chosen[option.name] = value
    return chosen


classroom_switch()  # ?classroom=1: the projector's view on every page (pages/ui/classroom.py)
classroom_style()
st.title("Gradient flow")
st.caption("How strongly does the last state depend on each earlier one, before any training? "
           "Measured in float64 with the cell's state probe; the dashed line is the bound "
           "‖W‖^(T−t) (KRU paper eq. 3), which holds for Elman cells but not for gated ones; for the deep "
           "mlp cell, whose step is L layers, it is the per-step bound ‖W‖^L (a residual block: 1 + ‖W‖²) "
           "to the T − t, with ‖W‖ the largest layer's norm.")

names = cells.available()
query = QueryReader()
initial_cell = query.choice("cell", names, GRADIENT_FLOW_CELL if GRADIENT_FLOW_CELL in names else names[0])
initial_hidden = query.choice("hidden", [str(size) for size in HIDDEN_SIZES], "64")
initial_length = query.number("T", 200, "T")
initial_seed = query.number("seed", 0)
query.warn()
controls, plots = st.columns([1, 3], gap="large")
with controls:
    name = st.selectbox("Cell", names, index=names.index(initial_cell), key="gf_cell", help=cell_help(names))
    cell_about(name)
    hidden = st.select_slider("Hidden size", HIDDEN_SIZES, value=int(initial_hidden), key="gf_hidden")
    seq_len = st.slider("Sequence length T", *LIMITS["T"], initial_length, step=10, key="gf_T")
    seed = int(st.number_input("Seed", min_value=LIMITS["seed"][0], max_value=LIMITS["seed"][1], value=initial_seed,
                               step=1, key="gf_seed"))
    with st.expander("Cell options", expanded=True):
        chosen = cell_options(name)

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
    st.altair_chart(charts.gradient_flow_chart(flow.per_step, title=f"{name}: gradient reaching step t from T",
                                               height=CHART_HEIGHT), width="stretch")  # decades need the room
    st.altair_chart(charts.singular_values_chart(flow.singular_values, title="Singular values of W"),
                    width="stretch")
