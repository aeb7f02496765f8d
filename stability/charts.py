"""Chart builders: pure functions DataFrame -> altair.Chart (no streamlit).

Log scales never choke: values at or below zero are clipped to the smallest
positive float64 and flagged as underflow, and infinities to the largest,
flagged as overflow, so a vanished or exploded gradient is drawn at the
edge of the plot and says so in its tooltip instead of disappearing.
"""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

TINY = float(np.finfo(np.float64).tiny)
HUGE = float(np.finfo(np.float64).max)


def clip_for_log(values: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(values clipped into [TINY, HUGE], a label: '', 'underflow' or 'overflow')."""
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
    label = pd.Series("", index=numbers.index)
    label[numbers <= 0] = "underflow (0 in float64)"
    label[~np.isfinite(numbers) & numbers.notna()] = "overflow"
    label[numbers >= HUGE] = "overflow"
    clipped = numbers.where(np.isfinite(numbers), HUGE).clip(lower=TINY, upper=HUGE)
    return clipped, label


def gradient_flow_chart(per_step: pd.DataFrame, title: str = "") -> alt.Chart:
    """‖∂h_T/∂h_t‖ and the bound ‖W‖^(T−t) against t, log y.

    ``per_step`` is :attr:`stability.diagnostics.GradientFlow.per_step`.
    """
    measured, measured_flag = clip_for_log(per_step["grad_norm"])
    bound, bound_flag = clip_for_log(per_step["bound"])
    long = pd.concat([
        pd.DataFrame({"t": per_step["t"], "steps_back": per_step["steps_back"], "value": measured,
                      "raw": per_step["grad_norm"], "flag": measured_flag, "series": "‖∂h_T/∂h_t‖ (measured)"}),
        pd.DataFrame({"t": per_step["t"], "steps_back": per_step["steps_back"], "value": bound,
                      "raw": per_step["bound"], "flag": bound_flag, "series": "‖W‖^(T−t) (bound)"}),
    ], ignore_index=True)
    colour = alt.Color("series:N", title=None,
                       scale=alt.Scale(domain=["‖∂h_T/∂h_t‖ (measured)", "‖W‖^(T−t) (bound)"],
                                       range=["#1f77b4", "#999999"]),
                       legend=alt.Legend(orient="top"))
    base = alt.Chart(long).encode(
        x=alt.X("t:Q", title="time step t (T = last)"),
        y=alt.Y("value:Q", title="gradient norm (log)", scale=alt.Scale(type="log"), axis=alt.Axis(format=".0e")),
        color=colour,
        strokeDash=alt.StrokeDash("series:N", legend=None,
                                  scale=alt.Scale(domain=["‖∂h_T/∂h_t‖ (measured)", "‖W‖^(T−t) (bound)"],
                                                  range=[[1, 0], [6, 4]])),
        tooltip=[alt.Tooltip("t:Q"), alt.Tooltip("steps_back:Q", title="T − t"),
                 alt.Tooltip("series:N"), alt.Tooltip("raw:Q", title="value", format=".3e"),
                 alt.Tooltip("flag:N", title="note")],
    )
    lines = base.mark_line(strokeWidth=2)
    flagged = base.transform_filter(alt.datum.flag != "").mark_point(shape="triangle-down", size=40, filled=True)
    return (lines + flagged).properties(title=title, height=320)


def singular_values_chart(sigma: np.ndarray, title: str = "") -> alt.Chart:
    """Singular values of W, largest first, with the orthogonal reference σ = 1."""
    frame = pd.DataFrame({"index": np.arange(1, len(sigma) + 1), "sigma": np.asarray(sigma, dtype=float)})
    frame["distance"] = (frame["sigma"] - 1.0).abs()
    points = alt.Chart(frame).mark_bar(width={"band": 0.8}).encode(
        x=alt.X("index:O", title="i (largest first)", axis=alt.Axis(labelOverlap=True)),
        y=alt.Y("sigma:Q", title="σ_i"),
        # A floor on the colour domain keeps rounding noise (|σ − 1| ~ 1e-15) from looking red.
        color=alt.Color("distance:Q", title="|σ_i − 1|", legend=alt.Legend(format=".2g"),
                        scale=alt.Scale(scheme="orangered", domain=[0.0, max(0.05, float(frame["distance"].max()))])),
        tooltip=[alt.Tooltip("index:O", title="i"), alt.Tooltip("sigma:Q", format=".5f"),
                 alt.Tooltip("distance:Q", title="|σ − 1|", format=".2e")],
    )
    reference = alt.Chart(pd.DataFrame({"sigma": [1.0]})).mark_rule(strokeDash=[4, 4], color="#555").encode(
        y="sigma:Q")
    return (points + reference).properties(title=title, height=320)
