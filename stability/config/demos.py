"""Where the dashboard's demos start, so that no page names a cell or a task.

    RACE_DEFAULTS, RACE_CELLS      # the Race page: the classroom demo
    GRADIENT_FLOW_CELL             # the Gradient flow page's first cell
    race_cells(available)          # RACE_CELLS that are registered here
"""
from __future__ import annotations

from . import CellConfig, RunConfig, TaskConfig, TrainConfig

# The classroom demo (spectral paper §7.1, Fig. 1; n = 128) at T = 200: long enough for the curves to part.
# Measured on 2 CPU cores: spectral and orthogonal pass below 0.1 MSE after ~800-1100 steps, the tanh RNN
# never does, and ‖∂L/∂h0‖ separates from the first logged step (rnn 1e-26..1e-17, lstm ~1e-17,
# sgornn ~7e-4, spectral ~1e-2).
RACE_CELLS = ("rnn", "lstm", "spectral", "sgornn")
RACE_DEFAULTS = RunConfig(cell=CellConfig("rnn", 128), task=TaskConfig("adding", {"seq_len": 200}),
                          train=TrainConfig(steps=2000, lr=1e-3, batch_size=64, seed=0))

# The plain Elman RNN: the vanishing gradient the other cells are measured against.
GRADIENT_FLOW_CELL = "rnn"


def race_cells(available: list[str]) -> list[str]:
    """The demo's cells among ``available`` (a replaced or missing built-in is simply left out)."""
    return [name for name in RACE_CELLS if name in available]
