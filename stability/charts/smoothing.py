"""Smoothing a metric's curve like TensorBoard: its debiased exponential moving average, on a log axis of
the exponents (a geometric average), computed by pandas' ``Series.ewm``."""
from __future__ import annotations

import numpy as np
import pandas as pd

MAX_SMOOTHING = 0.99


def check_smoothing(smoothing: float) -> None:
    """A smoothing weight must lie in [0, :data:`MAX_SMOOTHING`]."""
    if not 0.0 <= float(smoothing) <= MAX_SMOOTHING:
        raise ValueError(f"smoothing must be in [0, {MAX_SMOOTHING}], got {smoothing!r}")


def ema(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's debiased exponential moving average.

    s_k = w s_{k−1} + (1 − w) v_k with s_0 = 0, reported as s_k / (1 − w^n_k) where n_k counts the finite
    values so far, so the first point is not dragged towards zero. Non-finite values (a diverged NaN/inf)
    are passed through unsmoothed and skipped by the average, as TensorBoard does.

    This is pandas' ``ewm(alpha=1 − w, adjust=True).mean()`` over the finite values: its weighted mean
    Σ_{i<n} w^i v_{k−i} / Σ_{i<n} w^i has the denominator (1 − w^n) / (1 − w), so it equals
    (1 − w) Σ_{i<n} w^i v_{k−i} / (1 − w^n) = s_k / (1 − w^n_k).  The non-finite values are taken out
    before, so they neither enter the average nor age it.
    """
    out = np.array(values, dtype=float)
    finite = np.isfinite(out)
    if weight == 0.0 or not finite.any():
        return out
    out[finite] = pd.Series(out[finite]).ewm(alpha=1.0 - weight, adjust=True).mean().to_numpy()
    return out


def log_ema(values: np.ndarray, weight: float) -> np.ndarray:
    """:func:`ema` of log10 of the values: the geometric moving average a log axis needs.

    On a log axis a linear average is dominated by the largest values: a gradient norm falling from
    1e-6 to 1e-22 would be drawn near 1e-7 for as long as the window remembers the early points.
    Positive finite values are averaged as exponents; zeros and non-finite values pass through as they
    are (the chart flags them) and are skipped by the average.
    """
    out = np.array(values, dtype=float)
    positive = np.isfinite(out) & (out > 0)
    exponents = np.full(len(out), np.nan)
    exponents[positive] = np.log10(out[positive])
    out[positive] = 10.0 ** ema(exponents, weight)[positive]
    return out
