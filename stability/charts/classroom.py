"""The classroom view's content: what to read out beside each chart, a cell's equations, and a chart made
for a projector. Data and pure functions; pages/ui/classroom.py draws them (Note [Classroom view] there).

    explanation("grad/h0_norm")     # the words of EXPLANATIONS for a metric row (or the first pattern it matches)
    cell_equations("spectral")      # (summary, paper, LaTeX equations) from the cell registry
    projected(spec)                 # a Vega-Lite spec (or an Altair chart) taller, its fonts larger

The words are keyed by the metric row names of ``stability.core.metric_names``; the maths is in the papers
(``../shared/papers/``).
"""
from __future__ import annotations

import fnmatch
import functools

from .legends import CLASSROOM_LABEL_PX

CHART_HEIGHT = 540           # px, title and legend included: a chart beside its explanation, one a row
CHART_FONTS = {              # Vega-Lite config merged into each chart in classroom view (sizes in px)
    "axis": {"labelFontSize": 20, "titleFontSize": 21},
    "legend": {"labelFontSize": CLASSROOM_LABEL_PX, "titleFontSize": 20, "symbolSize": 220},  # never cut:
    # every chart's legend is wrapped to fit at this size too (stability.charts.legends)
    "header": {"labelFontSize": 20, "titleFontSize": 21},
    "title": {"fontSize": 26},
    "text": {"fontSize": 18},  # text marks that set no size of their own (the baseline's label)
}

# ------------------------------------------------------------------------------ what to look at
_BASELINE = ("The dashed line is the memoryless baseline: the best score without remembering the sequence "
             "(adding task: always answer 1, 0.167; spectral paper §7.1, Fig. 1). On the line nothing is "
             "remembered yet; below it, information crosses the whole sequence.")
_BAND = ("The band spans all singular values of W, σ_min to σ_max. Held in [1 − r, 1 + r] (spectral paper §4, "
         "eq. 4), each multiplication by W, once per time step, can shrink or grow the gradient by at most that "
         "factor: nothing vanishes or explodes through W. A plain RNN's band spreads away from 1 as it trains.")
_GAP = ("Validation minus training. A loss gap above zero that keeps growing is overfitting (for accuracy the "
        "sign is reversed). In the SGORNN paper's Fig. 4 it grows for FastRNN, VPRNN and LSTM and stays nearly "
        "constant for SGORNN.")

EXPLANATIONS = {  # metric row name, or a pattern (fnmatch; the first that matches wins) -> words to read out
    "val/loss": "The loss on held-out examples, never trained on. " + _BASELINE,
    "train/loss": "The loss on the training batches. " + _BASELINE,
    "test/loss": "The loss on the test split, never trained on. " + _BASELINE,
    "gap/loss": _GAP,
    "grad/h0_norm": (
        "How much of the error signal gets back to the first time step. Backpropagation multiplies by one "
        "Jacobian per step, so it scales like ‖W‖ to the power T (KRU paper §2.2, eq. 3): many decades down "
        "on this log axis, it has vanished and the first inputs teach nothing. Spectral-RNN's stays level; an "
        "RNN's sinks (spectral paper Fig. 4)."),
    "grad/h0_norm_train": (
        "‖∂L/∂h₀‖ on the training batch, in the training precision: what the optimiser really receives. In "
        "float32 it reads exactly 0 once the true value is below about 1e-38."),
    "grad/h_t_norm": (
        "‖∂L/∂h_t‖ for every time step t (across) at every probe of training (down, newest on top), log colour. "
        "Each step back multiplies by one Jacobian (KRU paper Appendix A, eq. 11), so colour fading steadily "
        "towards t = 0 is a gradient shrinking by the same factor every step: exponential vanishing. An even "
        "colour means the gradient reaches the first steps."),
    "grad/layer_norm": (
        "‖∂L/∂a_l‖ for every layer l of the deep network (across, 0 at the input side) at every probe of "
        "training (down, newest on top), log colour. Each layer back multiplies by one weight matrix and "
        "activation slope, so a plain MLP's colour fades towards layer 0: the first layers barely learn "
        "(spectral paper §7.2, Fig. 5). A Spectral-MLP keeps every layer's singular values near 1, and the "
        "colour stays even."),
    "grad/A_h_norm": (
        "‖A_h‖ = ‖∂z/∂h₀‖: how much the output still depends on the initial state, the gradient term with the "
        "most matrix products (MASO paper §5.2, eq. 10). Noise in h₀ penalises exactly this term (Thm. 3), so "
        "noisy runs keep it smaller (MASO Fig. 4, top)."),
    "grad/recurrent_norm": (
        "The gradient of the recurrent weights on the training batch. Spikes of several decades are exploding "
        "gradients; a noisy h₀ keeps it smaller (MASO paper Fig. 4, middle)."),
    "grad/total_norm": (
        "The whole gradient, every parameter, before clipping. Spikes of several decades are exploding "
        "gradients: the steps gradient clipping would cut short."),
    "sv/min": _BAND,
    "sv/max": _BAND,
    "sv/margin": (
        "The spectral margin max|σᵢ − 1|: how far W is from orthogonal (spectral paper §7.2, Fig. 4). "
        "Spectral-RNN keeps it below r by construction (eq. 4); an IRNN starts at 0 and quickly drifts away."),
    "sv/condition": (
        "σ_max / σ_min, the condition number of W. Near 1, W treats every direction alike; large, it crushes "
        "some directions, and the gradient along them vanishes (KRU paper §2.2)."),
    "sv/spectral_radius": (
        "The largest |eigenvalue| of W: above 1, repeated multiplication by W grows states and gradients "
        "exponentially, below 1 they fade (KRU paper §2.2). KRU's soft unitary penalty pulls it to 1 (§4.7, "
        "Fig. 6)."),
    "sv/spectrum": (
        "Every singular value of W (across, largest first) at every probe of training (down, newest on top), "
        "log colour. One even colour is a spectrum held near 1, as Spectral-RNN's eq. 4 holds it; colours "
        "spreading apart are singular values leaving 1, where gradients vanish (below) or explode (above)."),
    "gate/*": (
        "The cell's gates. In FastRNN and SGORNN, h_t = α σ(…) + β h_{t−1} (SGORNN paper eq. 1): β near 1 and α "
        "small make each step nearly the identity, so the gradient passes many steps. For an LSTM or GRU, the "
        "gates' averages: a forget gate near 1 keeps the memory."),
    "train/lr": "The learning rate at each step: its schedule, if it has one.",
    "train/penalty": (
        "The soft-constraint term added to the loss, such as KRU's λ Σ‖W_fᴴ W_f − I‖² (KRU paper §3.1, eq. 7): "
        "the larger λ, the closer W is held to unitary (§4.7, Fig. 6)."),
    "gap/*": _GAP,
    "*/accuracy": (
        "The fraction of examples classified correctly. The dashed line is the task's baseline: the score "
        "without using what was seen. A training curve pulling away from the validation curve is overfitting "
        "(SGORNN paper Fig. 4a)."),
    "*/mse": "The mean squared error of the prediction. " + _BASELINE,
    "*/cross_entropy": ("The cross-entropy of the predicted symbols, in nats. The dashed line is the memoryless "
                        "baseline: guessing without remembering. Below it, the network remembers."),
    "*/perplexity": ("exp(cross-entropy): how many equally likely choices the model still hesitates between at "
                     "each symbol; lower is better."),
    "*/bpc": "Bits per character: the cross-entropy in bits (nats / ln 2); lower is better.",
}


def explanation(metric: str) -> str | None:
    """The words to read out beside a chart of ``metric`` (a metric row name such as ``grad/h0_norm``, or a
    series name), from :data:`EXPLANATIONS`: its own entry, else the first pattern it matches; None if none."""
    if metric in EXPLANATIONS:
        return EXPLANATIONS[metric]
    for pattern, text in EXPLANATIONS.items():
        if any(mark in pattern for mark in "*?[") and fnmatch.fnmatchcase(metric, pattern):
            return text
    return None


@functools.lru_cache(maxsize=64)
def cell_equations(cell: str | None) -> tuple[str, str, tuple[str, ...]]:
    """(summary, paper, LaTeX equations) of a registered cell, from ``stability.cells.describe``; empty for
    None or a cell the registry cannot describe (a plugin that failed to import)."""
    if not cell:
        return "", "", ()
    from stability import cells

    try:
        info = cells.describe(cell)
    except Exception:  # noqa: BLE001 - a cell of one's own may not describe itself: then just no equations
        return "", "", ()
    return info.summary, info.paper, tuple(info.equations)


# ---------------------------------------------------------------------------------------- charts
def projected(chart):
    """``chart`` (a Vega-Lite spec dict, or an Altair chart) taller and with larger fonts, for the projector;
    a spec is copied shallowly (its datasets are shared, not copied). None (a live chart not built yet:
    Note [Drawn in turn] in stability/live/specs.py) stays None."""
    if chart is None:
        return None
    if isinstance(chart, dict):
        config = dict(chart.get("config", {}))
        for part, sizes in CHART_FONTS.items():
            config[part] = {**config.get(part, {}), **sizes}
        spec = {**chart, "config": config}
        if not any(key in spec for key in ("vconcat", "hconcat", "concat", "facet")):
            spec["height"] = CHART_HEIGHT
        return spec
    import altair as alt

    if isinstance(chart, (alt.Chart, alt.LayerChart)):
        chart = chart.properties(height=CHART_HEIGHT)
    return (chart.configure_axis(**CHART_FONTS["axis"]).configure_legend(**CHART_FONTS["legend"])
            .configure_title(**CHART_FONTS["title"]))


__all__ = ["CHART_FONTS", "CHART_HEIGHT", "EXPLANATIONS", "cell_equations", "explanation", "projected"]
