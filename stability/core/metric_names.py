"""The names of the stored metric rows, and the units a task's loss and metric are measured in.

One definition for what the trainer records and the pages, the CLI and the
charts read back. Names are paths ``<group>/<quantity>`` exactly as
docs/architecture.md ("Contracts other code relies on") and ``docs/readings.md``
give them::

    from stability import metric_names as names
    store.metrics(run_id, names=[names.TRAIN_LOSS, names.split_name("val", task.metric)])

A task's own metric (``mse``, ``accuracy``, ``cross_entropy``, ``perplexity``,
``bpc``; :data:`stability.tasks.base.HIGHER_IS_BETTER`) is recorded per split
as ``train/<metric>``, ``val/<metric>``, ``test/<metric>`` and as the gap
``gap/<metric>``; :func:`split_name` builds these names.
"""
from __future__ import annotations

# ----------------------------------------------------------------------- training and evaluation
TRAIN_LOSS = "train/loss"
TRAIN_LR = "train/lr"
TRAIN_PENALTY = "train/penalty"          # the cell's soft-constraint term (cell.penalty())
VAL_LOSS = "val/loss"
TEST_LOSS = "test/loss"
GAP_LOSS = "gap/loss"                    # val − train, at an evaluation step

# ------------------------------------------------------------- gradient readings (docs/readings.md)
H0_NORM = "grad/h0_norm"                 # ‖∂L/∂h0‖ on the probe batch in float64
H0_NORM_TRAIN = "grad/h0_norm_train"     # the same on the training batch, in the training dtype
A_H_NORM = "grad/A_h_norm"               # MASO §5.1, Thm. 3, Fig. 4: ‖A_h‖ = ‖∂z/∂h0‖
RECURRENT_NORM = "grad/recurrent_norm"   # over cell.recurrent_parameters()
TOTAL_NORM = "grad/total_norm"           # every parameter, before clipping
H_T_NORM = "grad/h_t_norm"               # series: ‖∂L/∂h_t‖ for t = 0..T
H_T_NORM_TRAIN = "grad/h_t_norm_train"   # series: the same on the training batch, in the training dtype (watch)
LAYER_NORM = "grad/layer_norm"           # series: ‖∂L/∂a_l‖ for l = 0..L, a deep step's layers (mlp; spectral Fig. 5)

# -------------------------------------------------------------- the recurrent matrix's spectrum
SV_MIN = "sv/min"
SV_MAX = "sv/max"
SV_MARGIN = "sv/margin"                  # max_i |σ_i − 1| (spectral paper, Fig. 4)
SV_CONDITION = "sv/condition"
SPECTRAL_RADIUS = "sv/spectral_radius"
SPECTRUM = "sv/spectrum"                 # series: every singular value, largest first

# -------------------------------------------------------------------------- speed and progress
STEPS_PER_S = "speed/steps_per_s"
EXAMPLES = "progress/examples"
ELAPSED_S = "progress/elapsed_s"
ETA_S = "progress/eta_s"

# ------------------------------------------------------ one block of a watched model (stability.watch)
# A model watched from someone's own loop may have many recurrent matrices (each layer, direction and
# gate block of an nn.LSTM): each block's readings are the names above with the block's place after
# them, sv/min/<place> (block_name); the names alone are read on the model's first recurrent unit, on
# the block our own cell of that kind calls its recurrent matrix (an LSTM's g block, a GRU's n).


def block_name(name: str, place: str) -> str:
    """``"sv/min/lstm.l1_reverse.f"``: the reading ``name`` of the recurrent block at ``place``."""
    return f"{name}/{place}"


def base_name(name: str) -> str:
    """The reading a row's name is of: ``sv/min`` for ``sv/min/lstm.l1.f`` (:func:`block_name`), the name
    itself for every other."""
    group, _, rest = name.partition("/")
    return f"{group}/{rest.partition('/')[0]}" if rest else name


HELD_OUT = ("val", "test")               # splits whose last values are a run's final results
FINAL_PREFIXES = tuple(f"{split}/" for split in HELD_OUT)
GATE_PREFIX = "gate/"                    # gate/<name>, one per entry of cell.gate_values()

# ------------------------------------------------------------------------ metrics that span decades
# Gradient norms and singular values: drawn on a log axis, averaged geometrically over seeds
# (stability.analysis.groups, Note [Geometric mean on a log axis]); not the margin |σ − 1|, which an
# orthogonal cell keeps near 0.
LOG_PREFIXES = ("grad/", "sv/")
LINEAR_SV = (SV_MARGIN,)

# ------------------------------------------------------------------------------------------ units
# Task metrics that are the mean loss itself, in the loss's own unit (MSE; cross-entropy in nats), so
# a baseline given in the metric's unit also fits the */loss curves. Every other metric is derived
# from the loss (perplexity = exp(loss), bits per character = loss / ln 2) or not at all (accuracy).
LOSS_METRICS = ("mse", "cross_entropy")


def split_name(split: str, metric: str) -> str:
    """``"<split>/<metric>"``: the row name of a task metric (or ``loss``) on ``split`` (or ``gap``)."""
    return f"{split}/{metric}"


def is_final(name: str) -> bool:
    """Whether ``name`` is a held-out result (``val/...``, ``test/...``): a run's final metrics."""
    return name.startswith(FINAL_PREFIXES)


def is_loss_metric(metric: str | None) -> bool:
    """Whether the task metric ``metric`` is the loss itself (:data:`LOSS_METRICS`)."""
    return metric in LOSS_METRICS


def is_log_metric(name: str) -> bool:
    """Whether a metric spans decades and is drawn on a log axis: gradient norms and the singular values
    (:data:`LOG_PREFIXES`), but not the margin |σ − 1| (:data:`LINEAR_SV`)."""
    return name.startswith(LOG_PREFIXES) and base_name(name) not in LINEAR_SV
