"""What the command line writes: the one-line error, tables, durations, the progress line, a run's summary.

    print_error("no run with id 9")       # stderr: stability: error: no run with id 9
    print_rows([("id", "status"), ("1", "completed")])   # columns padded to their widest cell
"""
from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING

from ..core.formatting import duration

if TYPE_CHECKING:  # the parser imports this module: no pandas, no store at import (stability/cli/main.py)
    from ..runs.store import RunStore

PROG = "stability"


def printable(text) -> str:
    """``text`` with every character a terminal would act on written as its Python escape: escape
    sequences (``\\x1b``), carriage returns and backspaces, bidirectional overrides (``\\u202e``), any
    character that is not printable.  Names come from whoever made a run or a sweep (the Sweep page's
    name field included), so a name printed here must not rewrite the terminal of whoever lists it."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text)


def print_error(message) -> None:
    """``stability: error: MESSAGE`` on stderr, the message's whitespace folded into one line and
    what is not printable escaped (:func:`printable`)."""
    print(f"{PROG}: error: {printable(' '.join(str(message).split()))}", file=sys.stderr)


def print_rows(rows: list[tuple]) -> None:
    """A table of strings, the first row its header; each column as wide as its widest cell; every cell
    through :func:`printable`."""
    rows = [tuple(printable(cell) for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def or_blank(value) -> str:
    """``value`` as text, ``-`` where there is none (None or NaN)."""
    import pandas as pd  # already imported by the store whose values these are

    return "-" if value is None or pd.isna(value) else str(value)


class ProgressLine:
    """The trainer's ``progress`` callback: one line on stderr, rewritten in place on a
    terminal (``\\r``), else printed every 10% of the steps."""

    def __init__(self, metric: str, stream=None):
        self.metric = metric
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.next_fraction = 0.0
        self.width = 0
        self.val = None

    def __call__(self, info: dict) -> None:
        step, total = info["step"], info["total_steps"]
        self.val = info.get(f"val/{self.metric}", self.val)
        if not self.tty:
            if step < total and step / total < self.next_fraction:
                return
            self.next_fraction = math.floor(step / total * 10 + 1) / 10
        parts = [f"step {step}/{total}", f"loss {info.get('train/loss', math.nan):.4g}",
                 f"{self.metric} {info.get(f'train/{self.metric}', math.nan):.4g}"]
        if self.val is not None:
            parts.append(f"val {self.metric} {self.val:.4g}")
        parts += [f"{info['steps_per_s']:.1f} steps/s", f"ETA {duration(info['eta_s'])}"]
        text = "  ".join(parts)
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()


def print_summary(store: RunStore, run_id: int) -> None:
    """A run's status, step and time, its error if any, its test metrics (against the baseline) and its store."""
    run = store.record(run_id)
    took = (run.finished_at or time.time()) - (run.started_at or run.created_at)
    print(f"run {run_id} {run.status} at step {or_blank(run.step)}/{or_blank(run.total_steps)} "
          f"in {duration(took)}")
    if run.error:
        print(f"  {printable(run.error)}")
    finals = {name: value for name, value in sorted(run.latest.items()) if name.startswith("test/")}
    for name, value in finals.items():
        line = f"  {printable(name)} {value:.4g}"
        if run.baseline is not None and name == f"test/{run.metric}":
            line += f"  (baseline {run.baseline:.4g}: {printable(run.baseline_label or 'memoryless')})"
        print(line)
    print(f"  store: {printable(store)}  (python -m stability show {run_id})")
