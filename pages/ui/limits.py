"""The bounds of the form's number widgets, which are also the only values a link may set."""
from __future__ import annotations

from stability.charts import MAX_SMOOTHING

# Note [Limits]
# -------------
# The bounds of the form's number widgets, and the only values a URL may set: ?hidden=40000 once made the
# server build a 6 GB recurrent matrix just to draw the page.  A 2048-unit LSTM's four recurrent matrices
# take 64 MiB; the papers use at most 512 units and T = 1000 (copy at T = 2000 is the longest task).


LIMITS = {
    "hidden": (1, 2048),
    "seq_len": (1, 100_000),
    "steps": (1, 10_000_000),
    "batch": (1, 4096),
    "lr": (1e-8, 10.0),
    "seed": (0, 2**31 - 1),
    "run": (1, 2**63 - 1),  # SQLite's INTEGER
    "smooth": (0.0, MAX_SMOOTHING),
    "T": (10, 1000),  # the Gradient flow page's sequence length
}


def limited_input(container, label: str, limit: str, value, **kwargs):
    """A number input bounded by ``LIMITS[limit]`` (Note [Limits]), starting from ``value`` brought into range
    (a stored run's config may come from the command line, which has no such bounds)."""
    low, high = LIMITS[limit]
    return container.number_input(label, min_value=low, max_value=high, value=min(max(value, low), high), **kwargs)

