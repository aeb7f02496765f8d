"""What a run's stored rows say, in words: a short list of findings for the pages to show beside the charts.

    findings = diagnose(store.metrics(run_id), store.record(run_id))
    for finding in findings:               # most severe first
        print(finding.severity, finding.text, f"since step {finding.since_step}", finding.chart_title)

Every rule is a plain function of the long rows the store returns (run_id, step, wall_time, name, value)
and, where it needs one, the run's :class:`~stability.runs.records.RunRecord` (status, the task's metric and
memoryless baseline, the cell's options).  Each returns one :class:`Finding` or None; :func:`diagnose`
runs them all.  A finding names the rule, how bad it is, the step its condition started and has held
since, one sentence in plain words, and the chart to look at (a panel key of the Train page,
:data:`CHARTS`).

Note [Conditions that hold now]
-------------------------------
A finding describes the run *now*: its condition holds at the latest reading and has held at every
reading since ``since_step`` (a trailing run of readings, :func:`_trailing_start`).  A gradient that
dipped below the threshold and came back is not reported; a loss that sat at the baseline and then
left it is not either.  Each rule needs a few readings in that trailing run (:data:`MIN_READINGS`, or
more where noted) and says nothing rather than guess from fewer.  Missing names (a cell without gates, a
run whose W is frozen), NaN readings (dropped), and zeros on log quantities (kept where "below a
threshold" is asked: a stored 0 is an exact zero or below float64's range, docs/readings.md; dropped
where a logarithm is taken) never raise.

Note [Cheap enough for every redraw]
------------------------------------
The Train page runs :func:`diagnose` whenever its live panel has new rows, the Race page for every run
in the race.  The rows are split by name once (one numpy sort over a few thousand rows) and every rule
works on numpy arrays of one or three names: no per-row Python, no reads from the store; about 2 ms
for the ~4400 rows of a 2000-step run.

Imports neither torch nor streamlit at import time; the band of a spectral cell reads the cell's
option defaults from :mod:`stability.cells` when it is asked for (:func:`singular_value_band`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd

from ..core.metric_names import (GAP_LOSS, GATE_PREFIX, H0_NORM, RECURRENT_NORM, SV_MARGIN, SV_MAX, SV_MIN,
                                 TOTAL_NORM, TRAIN_LOSS, VAL_LOSS, is_loss_metric, split_name)

if TYPE_CHECKING:
    from ..runs.records import RunRecord

SEVERITIES = ("problem", "warning", "info")  # most severe first: the order diagnose() returns findings in

# The Train page's panels (pages/train.py, chart_panels), by key, with the start of their titles.
CHARTS = {
    "loss": "Loss",
    "metric": "the task metric",
    "h0": "‖∂L/∂h₀‖",
    "maso": "‖A_h‖ and ‖∂L/∂θ_W‖",
    "sv": "Singular values of W",
    "gates": "Gates",
    "gap": "Gap, val − train",
    "flow": "Gradient flow through time",
    "compare": "Compare (grad/total_norm)",  # not drawn on Train: the Compare page overlays it
}

MIN_READINGS = 3  # readings a condition must have held for before it is reported (Note [Conditions that hold now])


@dataclass(frozen=True)
class Finding:
    """One thing the rows say: ``rule`` (a stable id), ``severity`` ("problem", "warning" or "info"),
    ``since_step`` (the step the condition started and has held since), ``text`` (one sentence) and
    ``chart`` (a key of :data:`CHARTS`: the panel to look at)."""

    rule: str
    severity: str
    since_step: int
    text: str
    chart: str

    @property
    def chart_title(self) -> str:
        """The chart's name as the Train page titles it."""
        return CHARTS.get(self.chart, self.chart)


# ------------------------------------------------------------------------------------ readings
class Readings:
    """The rows of one run split by name once: ``readings[name]`` is ``(steps, values)``, two numpy arrays
    ordered by step, one value per step (the last logged), NaN dropped; empty arrays for a missing name.
    ``readings.raw(name)`` keeps the NaN."""

    _EMPTY = (np.zeros(0, dtype=np.int64), np.zeros(0))

    def __init__(self, metrics: pd.DataFrame | None):
        self._series: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if metrics is None or metrics.empty:
            return
        codes, names = pd.factorize(metrics["name"])
        steps = metrics["step"].to_numpy(dtype=np.int64)
        values = metrics["value"].to_numpy(dtype=float)
        order = np.lexsort((np.arange(len(steps)), steps, codes))  # by name, step, then as logged
        codes, steps, values = codes[order], steps[order], values[order]
        last = np.ones(len(steps), dtype=bool)  # the last row logged at each (name, step)
        last[:-1] = (codes[1:] != codes[:-1]) | (steps[1:] != steps[:-1])
        codes, steps, values = codes[last], steps[last], values[last]
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
        for start, end in zip(starts, np.r_[starts[1:], len(codes)]):
            self._series[names[codes[start]]] = (steps[start:end], values[start:end])

    def raw(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        return self._series.get(name, self._EMPTY)

    def __getitem__(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        steps, values = self.raw(name)
        keep = ~np.isnan(values)
        return (steps, values) if keep.all() else (steps[keep], values[keep])

    def names(self) -> list[str]:
        return list(self._series)


def _trailing_start(mask: np.ndarray) -> int | None:
    """Index of the first element of the trailing run of True in ``mask``; None when the last is False."""
    if not len(mask) or not mask[-1]:
        return None
    false = np.flatnonzero(~mask)
    return int(false[-1]) + 1 if len(false) else 0


def _held(mask: np.ndarray, at_least: int = MIN_READINGS) -> int | None:
    """:func:`_trailing_start` when the trailing run has at least ``at_least`` readings, else None."""
    start = _trailing_start(mask)
    return start if start is not None and len(mask) - start >= at_least else None


def _suffix_slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of ``y`` against ``x`` over ``[i:]`` for every i (NaN for fewer than 2 points)."""
    x = (x - x[-1]).astype(float)  # centred at the last step: sums stay small
    n = np.arange(len(x), 0, -1, dtype=float)
    sx, sy = np.cumsum(x[::-1])[::-1], np.cumsum(y[::-1])[::-1]
    sxx, sxy = np.cumsum((x * x)[::-1])[::-1], np.cumsum((x * y)[::-1])[::-1]
    denominator = n * sxx - sx * sx
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (n * sxy - sx * sy) / denominator, np.nan)


def _window_slopes(x: np.ndarray, y: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares slope of ``y`` against ``x`` over the readings in ``[x[i], x[i] + span]`` for every i,
    and whether that window is complete (reaches ``x[i] + span``; the last readings' are not)."""
    x = (x - x[-1]).astype(float)
    ends = np.searchsorted(x, x + span, side="right")
    sums = [np.concatenate([[0.0], np.cumsum(terms)]) for terms in (np.ones_like(x), x, y, x * x, x * y)]
    n, sx, sy, sxx, sxy = (total[ends] - total[:-1] for total in sums)
    denominator = n * sxx - sx * sx
    with np.errstate(invalid="ignore", divide="ignore"):
        slopes = np.where(denominator > 0, (n * sxy - sx * sy) / denominator, np.nan)
    return slopes, x[ends - 1] - x >= span


def _norm(value: float) -> str:
    """A gradient norm as the Train page's summary shows it (``7.70e-20``); 0 as ``0``."""
    return "0" if value == 0 else f"{value:.2e}"


# ---------------------------------------------------------------------------------------- rules
VANISHING_BELOW = 1e-10


def vanishing_gradient(readings: Readings, run: RunRecord | None = None) -> Finding | None:
    """``grad/h0_norm`` (‖∂L/∂h0‖ on the probe batch in float64, docs/readings.md) below
    :data:`VANISHING_BELOW` at the latest reading and at every reading since ``since_step``
    (at least :data:`MIN_READINGS` of them).

    Why 1e-10 (the issue's number): the loss's gradient at the last steps is of order 0.1 to 1, and
    float32's relative precision is ~1e-7, so a contribution 1e-10 times smaller from the first steps is
    rounded away three decades over when the per-step terms of ∂L/∂W are summed in training: whatever the
    first steps hold, training cannot learn to use it (spectral paper Figs. 1 and 4: the tanh RNN).  A
    stored 0 counts as below: it is an exact zero or a value below float64's range (~1e-308)."""
    steps, values = readings[H0_NORM]
    start = _held(values < VANISHING_BELOW)
    if start is None:
        return None
    latest = values[-1]
    now = ("reads 0 (exactly zero, or below float64's range)" if latest == 0 else f"is {_norm(latest)}")
    return Finding("vanishing", "problem", int(steps[start]),
                   f"‖∂L/∂h₀‖ has been below {VANISHING_BELOW:g} since step {steps[start]:,} and {now}: "
                   "the gradient vanishes before it reaches the first steps.", "h0")


EXPLODING_GROWTH = 10.0  # at least this factor ...
EXPLODING_PER = 100      # ... per this many steps
EXPLODING_SPAN = 100     # the fit covers at least this many steps
EXPLODING_WINDOW = 200   # the recent window: the readings of the last 200 steps, ...
EXPLODING_POINTS = 8     # ... or the last 8 readings where those cover more steps
EXPLODING_MIN_POINTS = 5


def exploding_gradient(readings: Readings, run: RunRecord | None = None) -> Finding | None:
    """``grad/recurrent_norm`` (‖∂L/∂θ_W‖, drawn on Train beside ‖A_h‖), else ``grad/total_norm`` (every
    parameter, before clipping), growing by at least :data:`EXPLODING_GROWTH`× per
    :data:`EXPLODING_PER` steps: the slope of a least-squares line through log10 of the readings of the
    recent window (the last :data:`EXPLODING_WINDOW` steps, at least the last :data:`EXPLODING_POINTS`
    readings), which must span :data:`EXPLODING_SPAN` steps or more and hold
    :data:`EXPLODING_MIN_POINTS` readings; and the latest reading must be :data:`EXPLODING_GROWTH`
    times above every reading before the window (a norm climbing back to where it was is recovering,
    not exploding).  ``since_step``: the first reading of the trailing stretch whose forward fits (each
    over the next :data:`EXPLODING_SPAN` steps) all grow that fast.

    Why a fit over at least 100 steps: training-batch norms fluctuate by a factor of a few from step to
    step; a line through five or more readings spanning 100 steps at this slope has risen tenfold,
    which no fluctuation does.  A decade per 100 steps sustained reaches float32's range (~3e38) in a
    few thousand steps (spectral paper §7.2, Fig. 4: "LSTM's gradient explode after several epochs").
    Zeros and NaN are left out of the fit (no logarithm)."""
    for name, chart, label in ((RECURRENT_NORM, "maso", "‖∂L/∂θ_W‖"),
                               (TOTAL_NORM, "compare", "the gradient norm")):
        steps, values = readings[name]
        keep = np.isfinite(values) & (values > 0)
        steps, values = steps[keep], values[keep]
        if len(steps) < EXPLODING_MIN_POINTS:
            continue
        window = min(len(steps) - EXPLODING_POINTS, int(np.searchsorted(steps, steps[-1] - EXPLODING_WINDOW)))
        window = max(window, 0)
        if len(steps) - window < EXPLODING_MIN_POINTS or steps[-1] - steps[window] < EXPLODING_SPAN:
            continue
        slopes = _suffix_slopes(steps, np.log10(values))  # decades per step
        threshold = math.log10(EXPLODING_GROWTH) / EXPLODING_PER
        if not slopes[window] >= threshold or (window and values[-1] < EXPLODING_GROWTH * values[:window].max()):
            continue
        local, complete = _window_slopes(steps, np.log10(values), EXPLODING_SPAN)
        start = _trailing_start((local >= threshold) | ~complete)
        growth = 10.0 ** (slopes[window] * EXPLODING_PER)
        return Finding("exploding", "problem", int(steps[start]),
                       f"{label} grows {growth:.3g}× per {EXPLODING_PER} steps since step {steps[start]:,} "
                       f"(now {_norm(values[-1])}): exploding.", chart)
    return None


def diverged(readings: Readings, run: RunRecord | None = None) -> Finding | None:
    """The run's status is ``diverged`` (the trainer ends a run at a NaN loss or gradient, keeping the rows
    before it), or ``train/loss`` / ``val/loss`` read non-finite at the latest reading.  ``since_step``:
    the first non-finite loss reading of the trailing run, else the step the run stopped at."""
    nonfinite = []
    for name in (TRAIN_LOSS, VAL_LOSS):
        steps, values = readings.raw(name)
        start = _held(~np.isfinite(values), 1)
        if start is not None:
            nonfinite.append(int(steps[start]))
    status = getattr(run, "status", None)
    if status != "diverged" and not nonfinite:
        return None
    since = min(nonfinite) if nonfinite else int(getattr(run, "step", None) or _last_step(readings))
    reason = f" ({run.error})" if status == "diverged" and getattr(run, "error", None) else ""
    return Finding("diverged", "problem", since,
                   f"The loss or a gradient became infinite or NaN at step {since:,}{reason}: the run diverged.",
                   "loss")


def _last_step(readings: Readings) -> int:
    return max((int(readings[name][0][-1]) for name in readings.names() if len(readings[name][0])), default=0)


# Note [The spectral band]
# A cell whose options include the spectral paper's ``sigma_star`` and ``r`` keeps every singular value of W
# in [σ* − r, σ* + r] by construction (§4, eq. 4: σ_i = σ* + 2r (sigmoid(σ̂_i) − ½)).  Outside it, beyond
# the float32 SVD's error, the constraint does not hold: a problem.  At its edge (within BAND_EDGE · r) the
# sigmoid is saturated (within 0.01 of 0 or 1, its slope below 0.01), so σ̂ barely moves: the margin r, not the
# data, limits W ("we also explored the effect of different spectral constraints", §7.2).  A cell without such
# a band that started near orthogonal (IRNN at W = I, a plain RNN with an orthogonal init) may drift away from
# it as it trains: "Although IRNN has small spectral margin at first few iterations, it quickly deviates from
# being orthogonal" (§7.2, Fig. 4).
BAND_TOLERANCE = 1e-4    # relative: the SVD of a float32 W is good to ~1e-6
BAND_EDGE = 0.02         # of r
NEAR_ORTHOGONAL = 0.01   # max|σ − 1| at the first reading: the spectral cell's default r (§7)
DRIFTED = 0.1            # max|σ − 1| now: ten times that band


def singular_value_band(run: RunRecord | None) -> tuple[float, float] | None:
    """``(σ* − r, σ* + r)`` of the run's cell when it takes the options ``sigma_star`` and ``r`` (the
    config's values, else the cell's defaults); None otherwise, or when the cell cannot be looked up, or
    when its ``layer`` option says its layers are not spectral (the mlp's ``layer = "dense"``: σ*, r are
    then options it does not use, and no band holds its W)."""
    if run is None or run.cell is None:
        return None
    cell = run.raw_config.get("cell") if isinstance(run.raw_config, Mapping) else None
    options = cell.get("options") if isinstance(cell, Mapping) else None
    options = dict(options) if isinstance(options, Mapping) else {}
    if not {"sigma_star", "r", "layer"} <= set(options):
        try:
            from .. import cells  # the defaults are the cell's own (its signature)
            options = {**cells.options(run.cell), **options}
        except (ImportError, AttributeError, TypeError, ValueError):
            pass  # a cell that cannot be looked up: the config's own values, if it has them
    if options.get("layer", "spectral") != "spectral":
        return None
    try:
        centre, radius = float(options["sigma_star"]), float(options["r"])
    except (KeyError, TypeError, ValueError):
        return None
    return (centre - radius, centre + radius) if math.isfinite(centre) and math.isfinite(radius) else None


def _sv_frame(readings: Readings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps at which both ``sv/min`` and ``sv/max`` were read, and the two values there."""
    (min_steps, low), (max_steps, high) = readings[SV_MIN], readings[SV_MAX]
    steps, at_min, at_max = np.intersect1d(min_steps, max_steps, assume_unique=True, return_indices=True)
    return steps, low[at_min], high[at_max]


def singular_values_left_band(readings: Readings, run: RunRecord | None = None) -> Finding | None:
    """A spectral cell's ``sv/min`` below σ* − r or ``sv/max`` above σ* + r, by more than
    :data:`BAND_TOLERANCE` (relative), at the last two readings or more (Note [The spectral band])."""
    band = singular_value_band(run)
    if band is None:
        return None
    low, high = band
    steps, sv_min, sv_max = _sv_frame(readings)
    tolerance = BAND_TOLERANCE * max(abs(high), 1.0)
    start = _held((sv_min < low - tolerance) | (sv_max > high + tolerance), 2)
    if start is None:
        return None
    return Finding("band_left", "problem", int(steps[start]),
                   f"σ has left [σ* − r, σ* + r] = [{low:.4g}, {high:.4g}] since step {steps[start]:,} "
                   f"(σ from {sv_min[-1]:.4g} to {sv_max[-1]:.4g}): the spectral constraint does not hold.", "sv")


def singular_values_at_band_edge(readings: Readings, run: RunRecord | None = None) -> Finding | None:
    """A spectral cell's ``sv/max`` within :data:`BAND_EDGE` · r of σ* + r, or ``sv/min`` of σ* − r
    (inside the band), for :data:`MIN_READINGS` readings or more (Note [The spectral band]); never for
    r = 0, where every σ is fixed."""
    band = singular_value_band(run)
    if band is None or band[1] <= band[0]:
        return None
    low, high = band
    steps, sv_min, sv_max = _sv_frame(readings)
    edge = BAND_EDGE * (high - low) / 2
    tolerance = BAND_TOLERANCE * max(abs(high), 1.0)
    inside = (sv_min >= low - tolerance) & (sv_max <= high + tolerance)
    start = _held(inside & ((sv_max >= high - edge) | (sv_min <= low + edge)))
    if start is None:
        return None
    which = "σ* + r" if sv_max[-1] >= high - edge else "σ* − r"
    return Finding("band_edge", "info", int(steps[start]),
                   f"σ is at the edge of its band ({which}, [{low:.4g}, {high:.4g}]) since step {steps[start]:,}: "
                   "the margin r, not the data, now limits W.", "sv")


def drifted_from_orthogonal(readings: Readings, run: RunRecord | None = None) -> Finding | None:
    """A cell without a spectral band whose ``sv/margin`` (max|σ − 1|) read at most :data:`NEAR_ORTHOGONAL`
    at its first reading and above :data:`DRIFTED` at the last :data:`MIN_READINGS` readings or more
    (Note [The spectral band]; spectral paper §7.2, Fig. 4: IRNN)."""
    if singular_value_band(run) is not None:
        return None
    steps, margin = readings[SV_MARGIN]
    if not len(margin) or not margin[0] <= NEAR_ORTHOGONAL:
        return None
    start = _held(margin > DRIFTED)
    if start is None:
        return None
    return Finding("drifted", "warning", int(steps[start]),
                   f"W has drifted away from orthogonal since step {steps[start]:,}: max|σ − 1| is "
                   f"{margin[-1]:.3g}, from {margin[0]:.3g} at the start.", "sv")


# Note [Gates at a bound]
# SGORNN clips β into [0, 1 − 2α] after the sigmoid (SGORNN paper §2, eq. 3; stability/cells/fastrnn.py,
# Note [Clipping beta]) and logs β before the clip as ``gate/beta_raw``: where the raw β is above the clipped
# one the clip is active, β sits at its bound and its gradient goes to α instead.  Any gate logged as a value
# in [0, 1] (FastRNN's α and β, the LSTM's and GRU's mean gates) is saturated within GATE_SATURATION of 0 or 1:
# the sigmoid's slope s(1 − s) there is below 1e-3, so the gate passes less than a thousandth of its gradient.
CLIP_TOLERANCE = 1e-6   # raw β above the clipped β by more than float32 rounding
GATE_SATURATION = 1e-3
GATE_SYMBOLS = {"alpha": "α", "beta": "β"}


def beta_at_bound(readings: Readings, run: RunRecord | None = None) -> Finding | None:
    """``gate/beta_raw`` above ``gate/beta`` (the clip of SGORNN's eq. 3 is active) at the last
    :data:`MIN_READINGS` readings or more (Note [Gates at a bound]); the bound is max(0, 1 − 2α) from
    ``gate/alpha``."""
    (beta_steps, beta), (raw_steps, raw) = readings[GATE_PREFIX + "beta"], readings[GATE_PREFIX + "beta_raw"]
    steps, at_beta, at_raw = np.intersect1d(beta_steps, raw_steps, assume_unique=True, return_indices=True)
    start = _held(raw[at_raw] - beta[at_beta] > CLIP_TOLERANCE)
    if start is None:
        return None
    alpha_steps, alpha = readings[GATE_PREFIX + "alpha"]
    bound = (f"1 − 2α = {max(0.0, 1 - 2 * alpha[-1]):.4g}" if len(alpha) else f"{beta[at_beta][-1]:.4g}")
    return Finding("beta_clipped", "info", int(steps[start]),
                   f"β is pinned at its bound {bound} since step {steps[start]:,} (β before the clip: "
                   f"{raw[at_raw][-1]:.4g}): SGORNN's constraint holds it there.", "gates")


def gates_saturated(readings: Readings, run: RunRecord | None = None) -> Finding | None:
    """The first ``gate/*`` (other than ``beta_raw``; ``beta`` only where its clip is not active) whose
    readings all lie in [0, 1] and whose last :data:`MIN_READINGS` or more lie within
    :data:`GATE_SATURATION` of 0 or 1 (Note [Gates at a bound])."""
    clipped = beta_at_bound(readings, run) is not None
    for name in sorted(readings.names()):
        gate = name[len(GATE_PREFIX):]
        if not name.startswith(GATE_PREFIX) or gate == "beta_raw" or (gate == "beta" and clipped):
            continue
        steps, values = readings[name]
        if not len(values) or values.min() < 0 or values.max() > 1:
            continue
        start = _held((values <= GATE_SATURATION) | (values >= 1 - GATE_SATURATION))
        if start is None:
            continue
        end = "1" if values[-1] >= 0.5 else "0"
        return Finding("gate_saturated", "warning", int(steps[start]),
                       f"The {GATE_SYMBOLS.get(gate, gate)} gate has been stuck at {end} since step {steps[start]:,} "
                       f"(now {values[-1]:.4g}): it passes less than a thousandth of its gradient.", "gates")
    return None


# Note [Progress against the baseline]
# A task's memoryless baseline (its ``baseline``: what the best predictor that ignores the sequence scores, e.g.
# 1/6 for adding, spectral paper §7.1) and the metric's perfect score (0 for a loss, 1 for accuracy and
# perplexity) give every validation reading a progress p = (baseline − value) / (baseline − perfect): 0 at the
# baseline, 1 when perfect, negative when worse.  p ≤ AT_BASELINE: nothing is remembered yet; p ≥ LEARNING:
# clearly learning (a loss at 80 % of the baseline or below).  Between them the rules say nothing.  Tasks whose
# metric is the loss (MSE, cross-entropy) compare ``val/loss``; the others ``val/<metric>``.
AT_BASELINE = 0.1
LEARNING = 0.2
PERFECT = {"mse": 0.0, "cross_entropy": 0.0, "accuracy": 1.0, "perplexity": 1.0, "bpc": 0.0}


def _progress(readings: Readings, run: RunRecord | None):
    """``(steps, progress, values, name, chart, baseline)`` of the validation metric against the
    baseline (Note [Progress against the baseline]); None without a baseline or a known perfect score."""
    metric, baseline = getattr(run, "metric", None), getattr(run, "baseline", None)
    if metric not in PERFECT or baseline is None or not math.isfinite(baseline) or baseline == PERFECT[metric]:
        return None
    name, chart = (VAL_LOSS, "loss") if is_loss_metric(metric) else (split_name("val", metric), "metric")
    steps, values = readings[name]
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    return steps, (baseline - values) / (baseline - PERFECT[metric]), values, name, chart, baseline


def _reading(name: str) -> str:
    """``val/loss`` -> ``the validation loss``."""
    split, _, quantity = name.partition("/")
    return f"the {'validation' if split == 'val' else split} {quantity.replace('_', ' ')}"


def at_baseline(readings: Readings, run: RunRecord | None = None) -> Finding | None:
    """The validation metric at (or worse than) the task's memoryless baseline, progress ≤
    :data:`AT_BASELINE`, at the last :data:`MIN_READINGS` evaluations or more."""
    found = _progress(readings, run)
    if found is None:
        return None
    steps, progress, values, name, chart, baseline = found
    start = _held(progress <= AT_BASELINE)
    if start is None:
        return None
    where = "worse than" if progress[-1] < -AT_BASELINE else "at"
    return Finding("baseline", "warning", int(steps[start]),
                   f"{_reading(name).capitalize()} has been {where} the memoryless baseline ({baseline:.4g}) "
                   f"since step {steps[start]:,} (now {values[-1]:.4g}): nothing is remembered yet.", chart)


def learning(readings: Readings, run: RunRecord | None = None) -> Finding | None:
    """The validation metric clearly better than the memoryless baseline, progress ≥ :data:`LEARNING`,
    at the last :data:`MIN_READINGS` evaluations or more."""
    found = _progress(readings, run)
    if found is None:
        return None
    steps, progress, values, name, chart, baseline = found
    start = _held(progress >= LEARNING)
    if start is None:
        return None
    side = "above" if PERFECT[run.metric] > baseline else "below"
    return Finding("learning", "info", int(steps[start]),
                   f"{_reading(name).capitalize()} has been clearly {side} the memoryless baseline "
                   f"({baseline:.4g}) since step {steps[start]:,} (now {values[-1]:.4g}): the model is remembering.", chart)


# Note [A widening gap]
# ``gap/loss`` is val − train loss on fixed sets at each evaluation; it widens when the model fits its training
# data more than the task (SGORNN paper §3.2, Fig. 4).  Reported when the last GAP_RECENT evaluations' fitted
# slope is positive and the gap now (median of the last three) exceeds its floor by GAP_RISE of the validation
# loss now; the floor is the smallest gap before those three, or 0 where that was negative: early in training the
# training set's loss is often the higher one, and a gap closing from below to 0 is not overfitting.  The
# relative rise keeps a gap that wobbles by a few per cent of the loss quiet.
GAP_RECENT = 5
GAP_RISE = 0.2


def gap_widening(readings: Readings, run: RunRecord | None = None) -> Finding | None:
    """``gap/loss`` widening (Note [A widening gap]); ``since_step`` is the last evaluation before the last
    three at which the gap was at its floor."""
    steps, gap = readings[GAP_LOSS]
    keep = np.isfinite(gap)
    steps, gap = steps[keep], gap[keep]
    if len(gap) < GAP_RECENT:
        return None
    now = float(np.median(gap[-3:]))
    floor = max(float(gap[:-3].min()), 0.0)  # a negative gap closing to 0 is not overfitting
    lowest = int(np.flatnonzero(gap[:-3] <= floor)[-1])
    val_steps, val = readings[VAL_LOSS]
    scale = float(np.median(np.abs(val[-3:]))) if len(val) else abs(now)
    slope = _suffix_slopes(steps[-GAP_RECENT:], gap[-GAP_RECENT:])[0]
    if not (slope > 0 and now > 0 and now - floor >= GAP_RISE * scale):
        return None
    return Finding("gap_widening", "warning", int(steps[lowest]),
                   f"The train/test gap is widening: val − train loss rose from {max(gap[lowest], 0.0):.3g} at step "
                   f"{steps[lowest]:,} to {now:.3g}: the model fits its training data more than the task.", "gap")


RULES: tuple[Callable[[Readings, RunRecord | None], Finding | None], ...] = (
    diverged, vanishing_gradient, exploding_gradient, singular_values_left_band, singular_values_at_band_edge,
    drifted_from_orthogonal, beta_at_bound, gates_saturated, at_baseline, gap_widening, learning)


def diagnose(metrics: pd.DataFrame, run: RunRecord | None = None) -> list[Finding]:
    """Every rule of :data:`RULES` on a run's long metric rows (``RunStore.metrics``) and, where known, its
    record; the findings most severe first, then by the step they started."""
    readings = Readings(metrics)
    findings = [finding for rule in RULES if (finding := rule(readings, run)) is not None]
    return sorted(findings, key=lambda finding: (SEVERITIES.index(finding.severity), finding.since_step))


__all__ = ["CHARTS", "Finding", "RULES", "Readings", "SEVERITIES", "diagnose", "singular_value_band"]
