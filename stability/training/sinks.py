"""Where a run's rows go: a sink, the one hook the trainer writes through.

The trainer hands its sink the rows the hooks recorded at every flush and
asks it where checkpoints go; the sink also says what a run is called in a
one-line error and, as a hook, may end the run (a stop request).  The
contract, called by :class:`stability.training.trainer.Trainer` (a sink is a
:class:`~stability.training.hooks.Hook`, so it may use the hook methods too):

``begin(trainer, resumed)``
    before ``on_start``; ``resumed``: the trainer has restored the checkpoint
    of ``trainer.step``, and the rows logged after that step are to be discarded.
``write(step, scalars, series)``
    rows ``(step, wall_time, name, value)`` and ``(step, wall_time, name,
    index, value)``, all of one flush; ``step`` is the trainer's current step.
``finish(status, error)``
    after ``on_end`` and the last flush, with the status the loop reached (a stored run's status
    is written by whoever claimed it, stability.execution.lifecycle, from the returned
    :class:`TrainResult`; no sink writes it).
``checkpoint_path()``
    where the checkpoint goes, or None: the run keeps none.
``metrics()`` / ``series()``
    every row written, as DataFrames (:class:`TrainResult` reads them).

:class:`MemorySink` keeps the rows in this process (the trainer's default);
:class:`StoreSink` writes them into a run of a run store (duck typed: this
room does not import :mod:`stability.runs`).
"""
from __future__ import annotations

import math
import os
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable

import pandas as pd

from ..core import metric_names as names
from .hooks import Hook

STOP_POLL_S = 0.5
HEARTBEAT_EVERY_S = 30.0  # a store's run shows life at least this often, between its log steps too
STEP_BEAT_EVERY_S = 0.5  # and its step this often, between log steps (Note [A moving step])
STORE_PATIENCE_S = 300.0  # how long a run rides out a store it cannot write before it fails (Note [A busy store])
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0  # the backoff between tries: doubling from the first to the max
ON_STORE_ERROR = ("raise", "warn")  # what a StoreSink does once the store stays unwritable (Note [An unwritable store])
SCALAR_COLUMNS = ["step", "wall_time", "name", "value"]
SERIES_COLUMNS = ["step", "wall_time", "name", "index", "value"]


class Sink(Hook):
    """Base class of the sinks (the module docstring gives the contract)."""

    label = "the run"  # what a one-line error calls the run: "run 7 has no checkpoint to resume from"

    def begin(self, trainer, resumed: bool) -> None: ...

    def write(self, step: int, scalars: list[tuple], series: list[tuple]) -> None:
        raise NotImplementedError

    def finish(self, status: str, error: str | None) -> None: ...

    def checkpoint_path(self) -> Path | None:
        return None

    def keeps_final_checkpoint(self, status: str) -> bool:
        """Whether a run that ends ``status`` keeps its checkpoint: else none is written at its end (a
        store's run that cannot be resumed drops it, stability.execution.lifecycle, Note [Checkpoints kept])."""
        return True

    def metrics(self) -> pd.DataFrame:
        raise NotImplementedError

    def series(self) -> pd.DataFrame:
        raise NotImplementedError


class MemorySink(Sink):
    """Keeps every row in this process.  Checkpoints only into ``checkpoints`` (a folder; the file is
    ``checkpoint.pt`` there), so only a run given one can be resumed; no stop requests."""

    def __init__(self, checkpoints: str | os.PathLike | None = None):
        self.folder = None if checkpoints is None else Path(checkpoints)
        self.label = "the run" if self.folder is None else f"the run in {self.folder}"
        self._scalars: list[tuple] = []
        self._series: list[tuple] = []

    def begin(self, trainer, resumed):
        if resumed:  # as the store does: rows after the checkpoint's step are trained again
            self._scalars = [row for row in self._scalars if row[0] <= trainer.step]
            self._series = [row for row in self._series if row[0] <= trainer.step]

    def write(self, step, scalars, series):
        self._scalars.extend(scalars)
        self._series.extend(series)

    def checkpoint_path(self):
        if self.folder is None:
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        return self.folder / "checkpoint.pt"

    def metrics(self):
        return pd.DataFrame(self._scalars, columns=SCALAR_COLUMNS).astype(
            {"step": "int64", "wall_time": "float64", "value": "float64"})

    def series(self):
        return pd.DataFrame(self._series, columns=SERIES_COLUMNS).astype(
            {"step": "int64", "wall_time": "float64", "index": "int64", "value": "float64"})


class ClaimLost(RuntimeError):
    """The run a :class:`StoreSink` writes into is no longer this process's to train (another process
    claimed it: stability.execution.lifecycle, Note [Claims]); the run ends without another row."""


class StoreSink(Sink):
    """Writes into run ``run_id`` of ``store`` (a :class:`stability.runs.store.RunStore`, by duck
    typing): each flush in one transaction with the run's heartbeat and step; at the start what
    the pages show about the run (``trainer.describe()``), rows after a resumed checkpoint's step
    discarded.  Checkpoints go to ``store.checkpoint_path(run_id)``.  Every ``every_s`` it reads the
    run's stop request, which ends the run as ``stopped``; between flushes it writes the run's step
    with its heartbeat every :data:`STEP_BEAT_EVERY_S` (Note [A moving step]), the heartbeat alone every
    :data:`HEARTBEAT_EVERY_S` where it has no step.

    The run's status is not the sink's to write: the process that claimed the run
    (stability.execution.lifecycle) hands it ``claim``, the claim's token, and ``begin_run``, which
    writes the columns of the start (a dict) with the status 'running' and returns whether the
    run was still this claim's.  With a ``claim`` the sink raises :class:`ClaimLost` once the run
    is another claim's.  Without ``begin_run`` it writes those columns alone.

    Note [A busy store]
    -------------------
    Another process may hold the store's write lock past the store's busy timeout (a long
    transaction, a backup, a migration), or a server may be briefly unreachable: the store then
    raises a StoreError (a RuntimeError: StoreBusy, an unreachable server, a full disk).  A run
    rides that out instead of ending ``failed``: the rows of a flush that could not be written
    stay in memory, training goes on, and they are written with the next rows once a retry
    succeeds, the tries spaced by a backoff doubling from :data:`RETRY_FIRST_S` to
    :data:`RETRY_MAX_S` (each try itself waits the store's busy timeout).  The start and the end
    (the last rows; the status is the lifecycle's, which waits the same way) wait and retry in
    place, as nothing else is left to do.  Only when the store has stayed unwritable for
    ``patience_s`` (:data:`STORE_PATIENCE_S`, 5 minutes: under the 10 minutes after which another
    machine takes a silent run of a shared store for dead) is the last error raised, and the run
    fails as before.  A run that was deleted (RunNotFound, a ValueError) is not waited for, nor is a
    damaged store (a StoreError whose ``lasting`` is true: StoreDamaged), raised at once.  A
    stop request or claim that cannot be read is looked for again at the next poll, and while
    the store is failing the polls and the heartbeat wait for the next try, so an unreachable
    store does not hold the loop up at every step.

    Note [An unwritable store]
    --------------------------
    A logging library must not end its user's loop (stability.watch: an external run), so
    ``on_store_error="warn"`` never raises a StoreError: the first failure is one warning (``warn``,
    once a sink), the rows wait in memory, at most ``max_pending_rows`` of them, and the tries go on
    with the same backoff for as long as the loop runs, so a store that comes back gets them.  Past
    the cap the *oldest* whole steps are dropped (counted in ``dropped_rows``): the newest rows say
    where the run is and how it ended (the final loss, the last evaluation), which a store that
    comes back should show; a step's rows go or stay together (stability.watch.run, Note [Whole
    steps]).  At :meth:`finish` the rows left are tried for ``patience_s``; what still cannot be
    written is counted in ``unwritten_rows`` for the caller to report.  ``"raise"`` (the default,
    and the trainer's) is Note [A busy store]'s patience, then the error.

    Note [A moving step]
    --------------------
    A run logs about 200 points (``log_every = steps // 200``), so a long run's rows, and the step a
    flush writes with them, came every few seconds: a 20,000-step run's Train page stood still up to
    5.9 s.  Between flushes the sink therefore writes the trainer's step and the heartbeat, at most once
    every :data:`STEP_BEAT_EVERY_S` of wall time and only when the step moved: one UPDATE of the run's
    row, no metric row, so a reader (the page's status line, pages/ui/status.py) sees the step move
    every second whatever the log cadence, and the rows stay what the log steps stored.  Half a second,
    not one: the page looks every second at the server's shared read of the run, itself up to 0.75 s
    old (stability/live/tail.py, READ_EVERY_S), so two looks a second apart may see reads only 0.75 s apart;
    a beat every second (1.03 s with the default run's steps) then left one such window in four without
    a new step, and a watcher among thirty saw the step stand still 2 s at one look in seven
    (benchmarks/status_cadence.py, these rules simulated); a beat every half second falls in every
    window (the same, 0 % of the looks).  The UPDATE is
    a compare-and-set on the claim (``store.compare_and_set``): a sink whose run was claimed by another
    process never moves that run's step, even in the half second before its next poll finds it
    (:class:`ClaimLost`); a beat that finds the run not as it was only hastens that poll.  Its cost:
    two writes of a row a second beside steps of ~0.1-10 ms (benchmarks/heartbeat.py gives the steps/s
    with and without it, side by side)."""

    def __init__(self, store, run_id: int, every_s: float = STOP_POLL_S, claim: str | None = None,
                 begin_run: Callable[[dict], bool] | None = None, patience_s: float | None = None,
                 on_store_error: str = "raise", max_pending_rows: int | None = None,
                 warn: Callable[[str], None] | None = None, keep_checkpoint: bool = True):
        if on_store_error not in ON_STORE_ERROR:
            raise ValueError(f"on_store_error must be one of {', '.join(map(repr, ON_STORE_ERROR))}; "
                             f"got {on_store_error!r}")
        self.store, self.run_id, self.every_s = store, run_id, every_s
        self.claim, self.begin_run, self.lost = claim, begin_run, False
        self.keep_checkpoint = keep_checkpoint  # False: a run that cannot be resumed writes none at its end
        self.patience_s = STORE_PATIENCE_S if patience_s is None else patience_s
        self.on_store_error, self.max_pending_rows = on_store_error, max_pending_rows
        self.warn = warn or (lambda message: warnings.warn(message, RuntimeWarning, stacklevel=2))
        self.warned = False  # Note [An unwritable store]: one warning a sink
        self.dropped_rows = self.unwritten_rows = 0
        self.label = f"run {run_id}"
        self.last_poll = self.last_beat = time.time()
        self._series_names = {names.H_T_NORM, names.SPECTRUM}
        self._scalars: list[tuple] = []  # rows not written yet (Note [A busy store])
        self._series: list[tuple] = []
        self._step: int | None = None
        self._beat_step: int | None = None  # the step the last beat wrote
        self._failing_since: float | None = None
        self._next_try = 0.0
        self._delay = RETRY_FIRST_S

    def _lost(self) -> ClaimLost:
        self.lost = True  # nothing more is written (the trainer flushes what it recorded when it fails)
        return ClaimLost(f"run {self.run_id} was claimed by another process")

    def begin(self, trainer, resumed):
        if self.claim is not None and self._patiently(lambda: self.store.control(self.run_id))["claim"] != self.claim:
            raise self._lost()
        if resumed:
            self._patiently(lambda: self.store.discard_after(self.run_id, trainer.step))
        fields = dict(**trainer.describe(), step=trainer.step)
        if trainer.step == 0:
            fields["started_at"] = time.time()
        else:
            fields["error"] = None
        if self.begin_run is None:
            self._patiently(lambda: self.store.update_run(self.run_id, **fields))
        elif not self._patiently(lambda: self.begin_run(fields)):
            raise self._lost()

    def on_step(self, trainer, result):
        now = time.time()
        if self._failing_since is not None and time.monotonic() < self._next_try:
            return  # the store is failing: nothing is asked of it before the next try (Note [A busy store])
        if now - self.last_poll >= self.every_s:
            self.last_poll = now
            try:
                control = self.store.control(self.run_id)
            except RuntimeError:  # the store cannot be read just now: look again at the next poll
                control = None
                self.last_poll = now + self._delay  # not at every step of an unreachable server
            if control is not None and self.claim is not None and control["claim"] != self.claim:
                raise self._lost()
            if control is not None and control["stop_requested"]:
                trainer.stop("stopped")
        step = getattr(trainer, "step", None)  # None: the heartbeat alone
        if self.lost:
            return
        if step is not None and step != self._beat_step and now - self.last_beat >= STEP_BEAT_EVERY_S:
            self.last_beat, self._beat_step = now, step  # Note [A moving step]
            if self._try(lambda: self._beat(step, now)) and not self._value:
                self.last_poll = -math.inf  # not as the sink saw it: the next step's poll says why
        elif now - self.last_beat >= HEARTBEAT_EVERY_S:
            self.last_beat = now
            self._try(lambda: self.store.flush(self.run_id, [], [], heartbeat_step=None))

    def _beat(self, step: int, now: float) -> bool:
        """The run's step and heartbeat, one UPDATE of its row while the claim is this sink's (Note [A
        moving step]); False when the run was not as expected (its claim, or no longer active)."""
        claimed = {} if self.claim is None else {"claim": self.claim}
        return self.store.compare_and_set(self.run_id, statuses=("queued", "running"),
                                          fields={"step": int(step), "heartbeat": now}, **claimed)

    def write(self, step, scalars, series):
        if self.lost:
            return
        self._scalars.extend(scalars)
        self._series.extend(series)
        self._step = step
        self._series_names.update(row[2] for row in series)
        if time.monotonic() >= self._next_try and self._try(self._write_pending):
            self.last_beat = time.time()
        else:
            self._drop_oldest()

    def finish(self, status, error):
        """The rows still in memory, written before the lifecycle writes the status; with
        ``on_store_error="warn"`` tried for ``patience_s`` only, what is left counted in
        ``unwritten_rows`` (Note [An unwritable store])."""
        if self.lost:
            return
        if self.on_store_error == "raise":
            self._patiently(self._write_pending)
            return
        deadline = time.monotonic() + self.patience_s
        while not self._try(self._write_pending):
            if self._next_try >= deadline:
                self.unwritten_rows = self.pending_rows()
                return
            time.sleep(max(0.0, self._next_try - time.monotonic()))

    def pending_rows(self) -> int:
        """Rows kept in memory because the store could not take them yet."""
        return len(self._scalars) + len(self._series)

    def _drop_oldest(self) -> None:
        """Past ``max_pending_rows``, drop the oldest whole steps kept, never the newest one (Note
        [An unwritable store])."""
        excess = self.pending_rows() - (self.max_pending_rows or 0)
        if self.max_pending_rows is None or excess <= 0:
            return
        counts = Counter(row[0] for row in self._scalars) + Counter(row[0] for row in self._series)
        cut, dropped = None, 0
        for step in sorted(counts)[:-1]:
            if dropped >= excess:
                break
            cut, dropped = step, dropped + counts[step]
        if cut is not None:
            self._scalars = [row for row in self._scalars if row[0] > cut]
            self._series = [row for row in self._series if row[0] > cut]
            self.dropped_rows += dropped

    def _write_pending(self) -> None:
        if self._scalars or self._series or self._step is not None:
            self.store.flush(self.run_id, self._scalars, self._series, heartbeat_step=self._step)
        self._scalars, self._series, self._step = [], [], None

    def _try(self, call) -> bool:
        """``call()``; False when the store could not take it (the next try is scheduled), its error
        raised once the store has been failing for ``patience_s``."""
        try:
            self._value = call()
        except RuntimeError as error:  # a StoreError: busy, unreachable, full (Note [A busy store])
            if getattr(error, "lasting", False):  # a damaged file: no wait mends it, raised at once
                self._drop_oldest()
                raise
            now = time.monotonic()
            if self._failing_since is None:
                self._failing_since, self._delay = now, RETRY_FIRST_S
            if self.on_store_error == "raise" and now - self._failing_since >= self.patience_s:
                raise
            if self.on_store_error == "warn" and not self.warned:
                self.warned = True
                cap = "" if self.max_pending_rows is None else f" (at most {self.max_pending_rows:,}, the oldest dropped past that)"
                self.warn(f"{self.label}: the store cannot be written ({' '.join(str(error).split())}); "
                          f"its rows are kept in memory{cap} and written when it can be, training goes on")
            self._next_try = now + self._delay
            self._delay = min(2 * self._delay, RETRY_MAX_S)
            return False
        self._failing_since, self._next_try, self._delay = None, 0.0, RETRY_FIRST_S
        return True

    def _patiently(self, call):
        """``call()``'s value, tried again after each backoff until it lands (or :meth:`_try` gives up)."""
        while not self._try(call):
            time.sleep(max(0.0, self._next_try - time.monotonic()))
        return self._value

    def checkpoint_path(self):
        return self.store.checkpoint_path(self.run_id)

    def keeps_final_checkpoint(self, status):
        return self.keep_checkpoint or status in ("stopped", "interrupted", "failed")  # those resume

    def metrics(self):
        return self.store.metrics(self.run_id)[SCALAR_COLUMNS]

    def series(self):
        """The rows of the built-in series and of those this process wrote."""
        frames = [self.store.series(self.run_id, name)[SERIES_COLUMNS] for name in sorted(self._series_names)]
        return pd.concat(frames).sort_values(["step", "name", "index"], kind="stable").reset_index(drop=True)


@dataclass
class TrainResult:
    """How a run ended (``status``: "completed", "stopped", "diverged", "pruned" or another hook's;
    ``error`` the reason where there is one), the run's id in its store (None without a store),
    and every row it logged, read from its sink when first asked for: ``metrics`` (columns
    ``step``, ``wall_time``, ``name``, ``value``) and ``series`` (``step``, ``wall_time``,
    ``name``, ``index``, ``value``)."""

    status: str
    error: str | None
    run_id: int | None
    sink: Sink = field(repr=False)

    @cached_property
    def metrics(self) -> pd.DataFrame:
        return self.sink.metrics()

    @cached_property
    def series(self) -> pd.DataFrame:
        return self.sink.series()
