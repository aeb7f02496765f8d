"""Gradient flow: how far back a gradient reaches through a freshly built cell.

Widgets -> cell options (finite, within their bounds) -> its cost (budget.flow_work, refused past
:data:`MAX_FLOW_OPERATIONS`) -> stability.training.probes.gradient_flow -> charts.
No training: this is where a class sees why Spectral-RNN and SGORNN exist.

Note [A bounded measurement]
----------------------------
The measurement runs in the server, for whoever opens the page, so its cost is counted before anything is
built (budget.flow_work: T x layers x hidden² products and hidden³ singular values) and a setting over
:data:`MAX_FLOW_OPERATIONS` (a few seconds of a core) is refused in one line saying what to lower (issue 33:
mlp with layers = 1000 took minutes at T = 1000). Whatever building or measuring raises is one line too,
its traceback in the server's log, never on the page.
"""
import logging

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
from stability.admission.budget import DEPTH_OPTIONS, flow_work, step_depth
from stability.config import CellConfig, ConfigError, RunConfig
from stability.config.demos import GRADIENT_FLOW_CELL
from stability.config.run_config import check_options
from stability.core.errors import one_line
from stability.training import probes as diagnostics

require_router(__file__)

log = logging.getLogger(__name__)
HIDDEN_SIZES = [8, 16, 32, 64, 128, 256]
UNUSED_HERE = ("h0", "h0_noise_std")  # the measurement starts every cell from h0 = 0
MAX_FLOW_OPERATIONS = 3.5e10  # about 5 s of a core (Note [A bounded measurement])


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


class TooCostly(ConfigError):
    """A measurement over :data:`MAX_FLOW_OPERATIONS`: its one line says what to lower."""


def bounded_measure(name: str, hidden: int, seq_len: int, seed: int, chosen: dict) -> diagnostics.GradientFlow:
    """:func:`measure`, once the options are within their bounds and the cost under :data:`MAX_FLOW_OPERATIONS`
    (Note [A bounded measurement]); ConfigError (one line) otherwise, TooCostly past the cost."""
    check_options("cell", name, chosen)
    config = RunConfig(cell=CellConfig(name, hidden, chosen))
    operations = flow_work(config, seq_len)
    if operations > MAX_FLOW_OPERATIONS:
        option = DEPTH_OPTIONS.get(name)  # a step of several layers: an mlp's layers, a VPRNN's k
        depth = f", {option} {step_depth(config)}" if option else ""
        raise TooCostly(f"Not measured: {name} at hidden size {hidden}{depth} and T = {seq_len} would take "
                        f"~{operations:.1g} operations, over the {MAX_FLOW_OPERATIONS:.2g} this page allows: lower T, "
                        f"the hidden size{f' or {option}' if option else ''}")
    return measure(name, hidden, seq_len, seed, tuple(sorted(chosen.items())))


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
    flow = bounded_measure(name, hidden, seq_len, seed, chosen)
except TooCostly as error:
    plots.error(str(error))
    st.stop()
except ValueError as error:  # ConfigError too
    plots.error(f"Cannot build {name}: {' '.join(str(error).split())}")
    st.stop()
except Exception as error:  # noqa: BLE001 - a cell's own code: one line here, the traceback in the server's log
    log.exception("measuring the gradient flow of %r", name)
    plots.error(f"Cannot measure {name}: {one_line(error, named=True)}")
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
