"""Fewer rows, nothing lost: min-max decimation of a long series (Note [Light charts] in
stability.charts.lines), keeping on a log axis a row of every decade the series visited."""
from __future__ import annotations

import numpy as np

from .scales import decades


def check_max_points(max_points: int) -> None:
    """A row budget is an integer of at least 4: first, last, and one bucket's min and max."""
    if isinstance(max_points, bool) or not isinstance(max_points, (int, np.integer)) or max_points < 4:
        raise ValueError(f"max_points must be an integer >= 4 (first, last, one bucket's min and max), "
                         f"got {max_points!r}")


def downsample_indices(columns: list[np.ndarray], max_points: int, *, log: bool = False) -> np.ndarray:
    """Sorted row indices keeping at most ``max_points`` rows: first, last, and per bucket the argmin and
    argmax of every column, so spikes survive (min-max decimation over equal-count buckets).

    NaN counts as neither small nor large; infinities are kept as extremes. Rows are picked, never
    averaged, so a tiny value is drawn as it is, never as 0. With ``log`` (a log-scale axis) the first
    row of every distinct decade of every column is kept too (:func:`decades`), so no order of magnitude a
    series visited disappears. The buckets split the interior rows 1..n−2 into contiguous runs of equal
    length (±1), as many as the budget left after those rows allows: (max_points − kept) // (2 × columns),
    at least one; so only a series spanning more decades than ``max_points`` gets more rows.
    """
    n = len(columns[0]) if columns else 0
    if n <= max_points:
        return np.arange(n)
    keep = [np.array([0, n - 1])]
    if log:
        keep += [np.unique(decades(column), return_index=True)[1] for column in columns]
    spare = max_points - len(np.unique(np.concatenate(keep)))
    buckets = max(1, spare // (2 * len(columns)))
    inner = np.arange(1, n - 1)
    bucket = (inner - 1) * buckets // (n - 2)  # equal-count, contiguous buckets over the interior rows
    starts = np.searchsorted(bucket, np.arange(buckets))
    for column in columns:
        values = np.asarray(column, dtype=float)[inner]
        for key in (np.where(np.isnan(values), np.inf, values), -np.where(np.isnan(values), -np.inf, values)):
            hits = np.flatnonzero(key == np.minimum.reduceat(key, starts)[bucket])
            first = np.unique(bucket[hits], return_index=True)[1]  # the first extreme of each bucket
            keep.append(inner[hits[first]])
    return np.unique(np.concatenate(keep))
