"""A watched run's tail: its rows read once a refresh for every session of the server, only those logged since
the last read, and the rows of one session.

    runs = SharedRuns()                                     # one a server (pages/ui/shared.py keeps it)
    look = runs.look(store, run_id, series=True)            # the run, its record and its rows; <= 1 read a second
    rows = session_rows(look, before, memos)                # a session's LiveRows of that look
    memo = SharedMemo(); memo.get(key, build)               # computed once for every session that asks

Nothing here imports Streamlit; pages/ui/shared.py keeps the server's one SharedRuns and its memos, and
pages/ui/live.py a session's rows.

Note [Many watchers]
--------------------
A classroom watches one run together: thirty browsers on one Train page.  Each session's panel reruns on its
own timer (stability/live/pace.py), and when each read the run and its new rows itself, and built its own charts
and findings from them, the server's work grew with the number of watchers (1.3 % of a core a watcher at a
5-30 s refresh, 13 % with ten).  Here the server process keeps one :class:`Look` a run: the run's row, its
record and every row read so far, read again at most once every :data:`READ_EVERY_S` whatever the number of
sessions (a little under a second), and then only the rows after the last step read (step 0 in full again: Note [Step 0 again]; a run that ended is read in full once more; a run
whose step went back, resumed from a checkpoint, afresh).  A look is never changed once made: a new one
replaces it, so a session drawing the old one is never disturbed, and what is computed from it (chart specs,
findings) is memoised for all sessions by the look's version (:class:`SharedMemo`).  One lock a run makes the
sessions that find a look out of date wait for the one that reads it, instead of all reading.

Measured with headless watchers (benchmarks/headless_watchers.py: websocket clients asking the server for
what a tab asks, so that thirty fit beside a run on 2 cores; benchmarks/live-page-cpu-2026-11-26.md): one
watcher of the default run costs the server 8 % of a core at Auto, ten 21 %, thirty 98 %, the run keeping
0.95-1.03x of its speed. Beyond the first, a watcher costs ~3 % of a core: its own fragment rerun, ~20
elements built and sent by Streamlit, whatever the shared work. At thirty the server's one core is full and
the refresh seen stretches from 1.5 s to 2 s (median).

Its age is at most READ_EVERY_S plus a panel's own interval, so "Live" at a 1-2 s rhythm shows a run's rows
within 2-3 s of their logging. (At exactly one second, a panel timer that fired a few ms early found the look
still fresh and drew new rows only every other second: benchmarks/live-page-cpu-2026-11-26.md.)  The memory is that of one session's rows a run (sessions used to keep a copy
each); the :data:`KEPT_RUNS` runs looked at last are kept.

Note [The first rows]
---------------------
From Start, a warm worker stores a run's first rows about half a second later (benchmarks/first_point.py
--direct), while its panel looks every tenth of a second (stability/live/pace.py, Note [The first point]). A look
a little under a second old then held the first point back by up to READ_EVERY_S. A run whose look has no
rows yet, and has not ended, is read again every :data:`FIRST_ROWS_EVERY_S` instead: still once for every
session together (ten reads a second of one row and an empty row range, for the second or two it waits).

Note [Waiting for the first rows]
---------------------------------
From Start the Train panel used to rerun every tenth of a second until the run's first rows came: each
rerun a script run in the server and some fifteen messages the browser drew, ten times a second, on the two
cores the run's worker was starting on (a trace of one Start: the panel reran every 0.15-0.4 s, and the
first chart took 0.27 s to build where it takes 0.06 s on a quiet machine). Now a panel awaiting the first
rows waits for them inside its run (:meth:`SharedRuns.first_rows`, up to stability/live/pace.py's
FIRST_ROWS_WAIT_S): it looks at the shared look every 0.05 s, a few ms of SQL for every session together,
sends the browser nothing meanwhile, and draws as soon as the rows are read.
"""
from __future__ import annotations

import itertools
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Callable

import pandas as pd

from ..core.metric_names import H_T_NORM, LAYER_NORM, SPECTRUM
from ..runs.status import TERMINAL

READ_EVERY_S = 0.75  # a run's row and new rows are read at most this often, for every session together: under
                     # a second, so that a panel looking every second (a timer that may fire a little early)
                     # finds a new read at every look, not at every other one
FIRST_ROWS_EVERY_S = 0.1  # a run with no rows yet is read this often instead (Note [The first rows])
KEPT_RUNS = 64      # runs whose rows the server keeps (the least recently looked at go first)
KEPT_MEMOS = 512    # memoised values a memo keeps (chart specs, findings)
SERIES = {"flow": H_T_NORM, "spectrum": SPECTRUM, "depth": LAYER_NORM}  # Look attribute -> the series it holds
clock = time.monotonic  # tests put a hand-moved clock here
_tokens = itertools.count(1)


@dataclass(frozen=True)
class Look:
    """One read of a run, shared by every session: its ``record`` (:meth:`RunStore.record` without its
    latest values, one query of one row; its ``latest`` filled from the rows read), every metric row read so
    far and, once a
    session asked for them, the ``grad/h_t_norm`` (``flow``), ``sv/spectrum`` and ``grad/layer_norm``
    (``depth``: a deep step's layers, the mlp cell's) series.

    ``final``: the rows were read in full after the run ended. ``position``: (status, step, heartbeat) at
    this read. ``counts``: per metric name, (rows, last step); ``latest``: per metric name, its last value.
    ``token``: new (unique in the process) with every read that changed the rows: what memos of the rows
    are keyed by."""

    record: object
    metrics: pd.DataFrame
    flow: pd.DataFrame | None = None
    spectrum: pd.DataFrame | None = None
    depth: pd.DataFrame | None = None
    final: bool = False
    position: tuple = ()
    counts: dict = field(default_factory=dict)
    latest: dict = field(default_factory=dict)
    token: int = 0


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    look: Look | None = None
    read_at: float = -float("inf")
    series: bool = False


class SharedRuns:
    """Every watched run's :class:`Look`, by (store location, run id), thread-safe (Note [Many watchers])."""

    def __init__(self, read_every_s: float | None = None, kept: int = KEPT_RUNS):
        self.read_every_s, self.kept = read_every_s, kept
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def look(self, store, run_id: int, *, series: bool = False, now: bool = False) -> Look:
        """The run's latest look, read now only if the last read is :data:`READ_EVERY_S` old (or the series
        are asked for the first time, or ``now``: a session that has just changed the run, by stopping it,
        reads it at once). Raises ``RunNotFound`` for a run the store does not have."""
        entry = self._entry((store.location, int(run_id)))
        every = READ_EVERY_S if self.read_every_s is None else self.read_every_s
        with entry.lock:  # the sessions that find it out of date wait for the one that reads it
            if entry.look is not None and entry.look.metrics.empty and not entry.look.final:
                every = min(every, FIRST_ROWS_EVERY_S)  # a run awaiting its first rows (Note [The first rows])
            entry.series = entry.series or series
            fresh = entry.look is not None and clock() - entry.read_at < every and not now
            if not fresh or (entry.series and entry.look.flow is None):
                entry.look, entry.read_at = _read(store, int(run_id), entry.look, entry.series), clock()
            return entry.look

    def first_rows(self, store, run_id: int, *, series: bool = False, wait_s: float = 0.0) -> Look:
        """The run's look as :meth:`look` gives it, but while the run has no rows and has not ended, looked at
        again every half :data:`FIRST_ROWS_EVERY_S` for up to ``wait_s`` (Note [Waiting for the first rows])."""
        return awaited(lambda: self.look(store, run_id, series=series),
                       lambda look: look.metrics.empty and not look.final and look.record.status not in TERMINAL,
                       wait_s)

    def _entry(self, key) -> _Entry:
        with self._lock:
            entry = self._entries.pop(key, None) or _Entry()
            self._entries[key] = entry  # most recently looked at last
            while len(self._entries) > self.kept:
                self._entries.popitem(last=False)
            return entry


def awaited(read: Callable[[], object], waiting: Callable[[object], bool], wait_s: float):
    """``read()``, read again every half :data:`FIRST_ROWS_EVERY_S` while ``waiting`` of it, for up to
    ``wait_s`` (Note [Waiting for the first rows])."""
    deadline = time.monotonic() + wait_s
    value = read()
    while waiting(value) and time.monotonic() < deadline:
        time.sleep(FIRST_ROWS_EVERY_S / 2)
        value = read()
    return value


def _read(store, run_id: int, old: Look | None, series: bool) -> Look:
    """A new look at the run after ``old``: its record, and its rows topped up (module docstring)."""
    look = _read_rows(store, run_id, old, series, store.record(run_id, latest=False))
    return replace(look, record=replace(look.record, latest=look.latest))  # the rows' own last values


def _read_rows(store, run_id: int, old: Look | None, series: bool, record) -> Look:
    position = (record.status, record.step, record.heartbeat)
    terminal = record.status in TERMINAL
    if old is not None and not old.final and len(old.metrics) and record.step is not None \
            and record.step < int(old.metrics["step"].iat[-1]):
        old = None  # its step went back (resumed from a checkpoint): read afresh
    # new, ended since (read in full once more), resumed, or with step 0 its last step (Note [Step 0 again])
    if old is None or terminal != old.final or (old.position != position and _last_step(old.metrics) == 0):
        metrics = store.metrics(run_id)
        if old is not None and terminal == old.final and len(metrics) == len(old.metrics):
            look = replace(old, record=record, position=position)  # step 0 was whole (Note [Between log steps])
        else:
            look = Look(record, metrics, final=terminal, position=position, counts=_counts(metrics),
                        latest=_latest(metrics), token=next(_tokens))
    elif old.final or old.position == position:
        look = replace(old, record=record, position=position)
    else:
        new = store.metrics(run_id, since_step=_last_step(old.metrics))
        look = replace(old, record=record, position=position)  # Note [Between log steps]
        if len(new):
            look = replace(look, metrics=_appended(old.metrics, new), counts=_counts(new, old.counts),
                           latest={**old.latest, **_latest(new)}, token=next(_tokens))
        if series and len(new):
            look = replace(look, **{attribute: _appended(getattr(old, attribute), store.series(
                run_id, name, since_step=_last_step(getattr(old, attribute))))
                for attribute, name in SERIES.items() if getattr(old, attribute) is not None})
    if series and look.flow is None:
        look = replace(look, token=next(_tokens),
                       **{attribute: store.series(run_id, name) for attribute, name in SERIES.items()})
    return look


# Note [Between log steps]
# ------------------------
# A run writes its step and heartbeat once a second between its log steps (stability/training/sinks.py, Note
# [A moving step]), so a look finds the run moved at nearly every read while its rows come only at log steps.
# A read that finds no metric row after the last step read keeps the rows, the series (a step's series rows
# are stored in the transaction of its metric rows) and the token: what is computed from the rows (chart
# specs, findings, log-axis ticks) is not computed again for a step that only moved. So does a read of step 0
# again (Note [Step 0 again]) that finds as many rows as before.

# Note [Step 0 again]
# --------------------
# A look tops its rows up with those after the last step it read (RunStore, Note [since_step]), which is
# exact while every step is stored in one transaction. Step 0 is stored in two: the training readings a
# page draws as its first point, then the slower evaluation and probe (Note [Step 0 first] in
# stability/training/trainer.py). So while step 0 is the last step a look has, a read that finds the run
# moved reads it in full again (a few dozen rows): a step 0 that came in two parts is whole at the next
# read. Later steps come whole and are only topped up.
def _latest(new: pd.DataFrame) -> dict:
    """Per metric name, the value of its last row in ``new`` (rows in step order; a NaN is a value)."""
    last = new.drop_duplicates("name", keep="last")
    return dict(zip(last["name"], last["value"].astype(float)))


def _counts(new: pd.DataFrame, counts: dict | None = None) -> dict:
    """``counts`` (name -> (rows, last step)) with the rows of ``new`` added."""
    counts = dict(counts or {})
    if len(new):
        for name, (size, last) in new.groupby("name", sort=False)["step"].agg(["size", "max"]).iterrows():
            counts[name] = (counts.get(name, (0, None))[0] + int(size), int(last))
    return counts


def _last_step(frame: pd.DataFrame) -> int | None:
    return int(frame["step"].max()) if len(frame) else None


def _appended(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([old, new], ignore_index=True) if len(new) else old


class SharedMemo:
    """Values computed once for every session that asks with the same key (a chart spec, the findings of
    one look), the :data:`KEPT_MEMOS` used last kept; thread-safe, one computation at a time."""

    def __init__(self, kept: int = KEPT_MEMOS):
        self.kept = kept
        self._values: OrderedDict = OrderedDict()
        self._lock = threading.RLock()

    def get(self, key, compute: Callable[[], object]):
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            value = self._values[key] = compute()
            while len(self._values) > self.kept:
                self._values.popitem(last=False)
            return value

    def peek(self, key, default=None):
        with self._lock:
            return self._values.get(key, default)

    def put(self, key, value) -> None:
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self.kept:
                self._values.popitem(last=False)

    def lock(self):
        """The memo's lock, for a caller that reads and writes several keys as one step."""
        return self._lock



# ------------------------------------------------------------------------- a session's rows
@dataclass
class LiveRows:
    """A run's rows as read so far in this session: metric rows, and the 'grad/h_t_norm' and 'sv/spectrum'
    series if asked.

    ``final``: read in full after the run ended, so never read again. ``just_finished``: the run ended
    since the previous look (a page reruns itself once, to stop polling and update its buttons).
    ``seen``: the run's (status, step, heartbeat) at the last read; rows are read again only when it moved.
    ``counts``: per metric name, (rows, last step): what a chart's data version is made of.
    """

    metrics: pd.DataFrame
    flow: pd.DataFrame | None = None
    spectrum: pd.DataFrame | None = None  # the 'sv/spectrum' series, read with the flow (both at probe steps)
    depth: pd.DataFrame | None = None     # the 'grad/layer_norm' series (a deep step's layers: mlp), with the flow
    final: bool = False
    just_finished: bool = False
    seen: tuple = ()
    counts: dict = field(default_factory=dict)
    latest: dict | None = None  # per metric name, its last value (None: not known, read from ``metrics``)
    token: object = None        # the server's shared rows these are (Look.token)
    memos: object = None        # where what is computed from them is kept for every session (a SharedMemo)

    def last(self, name: str) -> float:
        """The last logged value of metric ``name``, NaN if there is none."""
        if self.latest is None:
            return latest_value(self.metrics, name)
        return float(self.latest.get(name, math.nan))

    def memo(self, key, compute: Callable[[], object]):
        """``compute()``, done once for every session with these rows (by their ``token``) and ``key``."""
        if self.token is None or self.memos is None:
            return compute()
        return self.memos.get((self.token, key), compute)

    def version(self, names) -> tuple:
        """Changes whenever a row of one of ``names`` is added."""
        return tuple(self.counts.get(name, (0, None)) for name in names)

    def flow_version(self) -> tuple:
        return _series_version(self.flow)

    def spectrum_version(self) -> tuple:
        return _series_version(self.spectrum)

    def depth_version(self) -> tuple:
        return _series_version(self.depth)


def _series_version(frame: pd.DataFrame | None) -> tuple:
    return (0, None) if frame is None or frame.empty else (len(frame), int(frame["step"].iat[-1]))


def latest_value(frame: pd.DataFrame, name: str) -> float:
    """The last logged value of metric ``name`` in long rows, NaN if there is none."""
    values = frame.loc[frame["name"] == name, "value"]
    return float(values.iloc[-1]) if len(values) else math.nan


def session_rows(look: Look, before: LiveRows | None = None, memos: SharedMemo | None = None) -> LiveRows:
    """A session's :class:`LiveRows` of ``look``: ``before``, the rows it had (``just_finished`` when the run
    ended since), ``memos`` where what is computed from them is kept for every session."""
    return LiveRows(look.metrics, look.flow, look.spectrum, look.depth, final=look.final,
                    just_finished=before is not None and not before.final and look.final, seen=look.position,
                    counts=look.counts, latest=look.latest, token=look.token, memos=memos)


def not_in_store(run_ids: list) -> str:
    """One line for the runs a link names that the store does not have, however many."""
    shown = ", ".join(map(str, run_ids[:10])) + (f" and {len(run_ids) - 10:,} more" if len(run_ids) > 10 else "")
    return f"Run{'s' * (len(run_ids) > 1)} {shown} {'are' if len(run_ids) > 1 else 'is'} not in this store."


__all__ = ["FIRST_ROWS_EVERY_S", "KEPT_MEMOS", "KEPT_RUNS", "READ_EVERY_S", "LiveRows", "Look", "SharedMemo",
           "SharedRuns", "awaited", "latest_value", "not_in_store", "session_rows"]
