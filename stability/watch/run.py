"""A run logged from your own training loop into the run store the dashboard reads.

    import stability.watch as sw

    with sw.init(name="my lstm", config={"lr": 1e-3}) as run:   # store: $STABILITY_STORE, else ~/.stability
        run.watch(model, every=10)                               # its recurrent matrices (stability.watch.units)
        for x, y in batches:
            h0 = torch.zeros(1, len(x), 64, requires_grad=True)
            out, _ = model(x, h0)
            loss = loss_fn(out, y)
            run.step(loss, h0=h0)                                # before loss.backward(): one step, its readings
            loss.backward(); optimizer.step(); optimizer.zero_grad()
            run.log({"val/loss": 0.3})                           # anything else, at the current step

The run is stored ``external`` (Note [External runs] in stability.execution.lifecycle): claimed by
this process at birth, 'running' at once; the ``with`` block ends it ``completed``, ``failed``
("ExceptionType: first line") when the block raises, ``stopped`` on Ctrl-C, its rows kept either
way and the exception raised again. Without ``with``, call :meth:`Run.finish`.

The rows go through the trainer's own sink (:class:`stability.training.sinks.StoreSink`): kept in
memory and written, with the run's heartbeat and step, in one transaction once a second (Note
[Whole steps]), riding out a busy store as a training run does. No server is needed: the dashboard
reads the store whenever it is started. A store that cannot be written never ends your loop (Note
[Your loop goes on]) unless you ask for it with ``init(..., on_store_error="raise")``.

Note [Your loop goes on]
    A logging library must not kill the loop it logs: a store locked for long, a read-only file, a
    full disk or a PostgreSQL server gone is one :class:`StoreWarning` (once a run), the rows are
    kept in memory, at most :data:`MAX_PENDING_ROWS` (past that the oldest whole steps are dropped
    and counted: the newest say where the run is and how it ended; Note [An unwritable store] in
    stability.training.sinks), and written when the store takes them again; training goes on. A run
    that is no longer this process's (deleted, or marked ended from the Runs page or ``stability
    delete --mark-ended``) is one warning too, and nothing more is logged. At the end the rows left are
    tried for :data:`FINISH_PATIENCE_S`; what could not be written, and a run that could not be
    settled (it stays 'running' until it is marked ended, or its process is found dead on its host),
    is one more warning. ``on_store_error="raise"`` keeps the trainer's rule instead: the store's
    error is raised once it has failed for 5 minutes (Note [A busy store]).

Note [Whole steps]
    A page polls the rows after the last step it saw (RunStore, Note [since_step]), so a step's
    rows must be written together: rows wait in memory until the loop has moved to a later step,
    and a write takes only the rows of the steps before the current one (all of them at the end).
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..core import metric_names as names
from ..execution import lifecycle
from ..runs.store import RunNotFound, RunStore
from ..training.sinks import ON_STORE_ERROR, ClaimLost, StoreSink
from .readings import Probe, Watcher

WRITE_EVERY_S = 1.0  # rows wait in memory at most this long (once the loop has moved past their step)
MAX_PENDING_ROWS = 200_000  # rows kept while the store cannot be written (~30 MB; Note [Your loop goes on])
FINISH_PATIENCE_S = 60.0  # how long the end waits for a store that cannot be written
_PACKAGE = str(Path(__file__).resolve().parents[1])  # a warning names the first line outside stability/


class StoreWarning(RuntimeWarning):
    """The store could not take a run's rows (or its end); your loop went on (Note [Your loop goes on])."""


class _SinkView:
    """What :meth:`StoreSink.on_step` asks of a trainer: ``stop`` (a stop request from the store), and
    ``step``, the loop's step, which the sink writes between written rows (Note [A moving step] in
    stability.training.sinks: a loop watched every 100 steps shows its step move all the same)."""

    def __init__(self):
        self.stop_requested = False
        self.step: int | None = None

    def stop(self, status: str, error: str | None = None) -> None:
        self.stop_requested = True


class Run:
    """One external run of a store (module docstring): ``log``, ``watch``, ``step``, ``finish``."""

    def __init__(self, store: RunStore, claim: lifecycle.Claim, *, owns_store: bool, total_steps: int | None,
                 on_store_error: str = "warn", config: Mapping | None = None):
        self.store, self.claim, self.id = store, claim, claim.run_id
        self._owns_store, self.total_steps = owns_store, total_steps
        self.on_store_error, self._config = on_store_error, dict(config or {})
        warn = on_store_error == "warn"
        self.sink = StoreSink(store, claim.run_id, claim=claim.token, on_store_error=on_store_error,
                              max_pending_rows=MAX_PENDING_ROWS if warn else None,
                              patience_s=FINISH_PATIENCE_S if warn else None, warn=self._warn)
        self._fields: dict = {}  # columns to write once the store takes them (watch(), Note [Your loop goes on])
        self._lost_warned = False
        self._view = _SinkView()
        self.current_step = 0
        self.status: str | None = None
        self.watcher: Watcher | None = None
        self._scalars: list[tuple] = []
        self._series: list[tuple] = []
        self._written = time.monotonic()
        self._started = time.monotonic()
        self._loss_sum, self._loss_count = None, 0

    # ------------------------------------------------------------------ the run's rows
    def log(self, values: Mapping[str, float], step: int | None = None) -> None:
        """Scalars by metric name (``train/loss``, ``val/accuracy``, your own ``my/thing``) at ``step``
        (default: the current step, that of the last :meth:`step`; 0 before it). A value that is not a
        number is a ValueError naming it."""
        step = self.current_step if step is None else int(step)
        now = time.time()
        for name, value in values.items():
            try:
                number = float(value.item() if isinstance(value, torch.Tensor) else value)
            except (TypeError, ValueError, RuntimeError):
                raise ValueError(f"run.log: {name!r} must be a number; got {value!r}") from None
            self._scalars.append((step, now, str(name), number))
        self._advance(step)

    def log_series(self, name: str, values, step: int | None = None) -> None:
        """A vector (``grad/h_t_norm``-like: one value per index) at ``step`` (default: the current one)."""
        step = self.current_step if step is None else int(step)
        now = time.time()
        self._series.extend((step, now, name, index, float(v)) for index, v in enumerate(np.asarray(values).ravel()))
        self._advance(step)

    def watch(self, model: nn.Module, every: int = 10, probe: Probe | None = None) -> Watcher:
        """Read ``model``'s recurrent matrices (stability.watch.units) at every ``every``-th :meth:`step`
        and at the first; with ``probe``, ‖∂L/∂h0‖ in float64 too (stability.watch.readings)."""
        if self.watcher is not None:
            self.watcher.close()
        self.watcher = Watcher(model, every, probe)
        units = self.watcher.units
        config = dict(self._config)
        config["cell"] = {"name": f"{type(model).__name__} ({units[0].kind})", "hidden_size": units[0].size,
                          "units": [unit.place for unit in units]}
        self._fields.update(config=config, **self.watcher.describe())
        self._guarded(self._write_fields)
        return self.watcher

    def _write_fields(self) -> None:
        if self._fields and not self.sink.lost:
            self.store.update_run(self.id, **self._fields)
        self._fields = {}

    def step(self, loss: torch.Tensor | None = None, *, h0=None, states=None) -> None:
        """One training step: the step counter moves on by one; ``loss`` (its mean over the steps since
        the last logged one) is ``train/loss`` at logged steps, where a watched model's readings are
        taken too (stability.watch.readings). Call it *before* ``loss.backward()``: the gradients
        are read from the loss's graph, which it keeps for your backward."""
        self.current_step += 1
        if loss is not None:
            detached = loss.detach()
            self._loss_sum = detached if self._loss_sum is None else self._loss_sum + detached
            self._loss_count += 1
        logged = self.watcher.due(self.current_step) if self.watcher is not None else True
        if logged:
            self._log_step(loss, h0, states)
        self._view.step = self.current_step
        self._guarded(lambda: self.sink.on_step(self._view, None))  # the stop request, the step and heartbeat
        self._advance(self.current_step)

    def _log_step(self, loss, h0, states) -> None:
        scalars, series = {}, {}
        if self.watcher is not None:
            scalars, series = self.watcher.read(loss, h0=h0, states=states)
        if self._loss_count:
            scalars[names.TRAIN_LOSS] = float(self._loss_sum) / self._loss_count
            self._loss_sum, self._loss_count = None, 0
        elapsed = time.monotonic() - self._started
        scalars[names.ELAPSED_S] = elapsed
        scalars[names.STEPS_PER_S] = self.current_step / elapsed if elapsed > 0 else math.nan
        if self.total_steps and elapsed > 0:
            scalars[names.ETA_S] = (self.total_steps - self.current_step) * elapsed / self.current_step
        self.log({name: value for name, value in scalars.items()})
        for name, values in series.items():
            self.log_series(name, values)

    @property
    def should_stop(self) -> bool:
        """Whether a stop was asked for this run in the store (``python -m stability stop ID``): a loop
        may end itself then (it is not ours to end)."""
        return self._view.stop_requested

    def _advance(self, step: int) -> None:
        """Write the rows of whole steps (Note [Whole steps]) once :data:`WRITE_EVERY_S` has passed."""
        if time.monotonic() - self._written < WRITE_EVERY_S:
            return
        done = [row for row in self._scalars if row[0] < step]
        done_series = [row for row in self._series if row[0] < step]
        if done or done_series:
            self._scalars = [row for row in self._scalars if row[0] >= step]
            self._series = [row for row in self._series if row[0] >= step]
            # the run's step as written: the rows' newest, or the loop's step a beat wrote already (never back)
            reached = max(max(row[0] for row in done + done_series), self._view.step or 0)
            self._guarded(lambda: self.sink.write(reached, done, done_series))
            self._written = time.monotonic()
            if self._fields and self.sink.pending_rows() == 0:  # the store took the rows: the columns too
                self._guarded(self._write_fields)

    # ------------------------------------------------------------------ an unwritable store
    def _guarded(self, call) -> None:
        """``call()``; with ``on_store_error="warn"`` a store that cannot be written, or a run that is
        no longer this process's, is a warning, never an exception in the loop (Note [Your loop goes on])."""
        if self.on_store_error == "raise":
            return call()
        try:
            return call()
        except (ClaimLost, RunNotFound) as error:
            self.sink.lost = True  # ClaimLost set it already; a run deleted under its loop did not
            if not self._lost_warned:
                self._lost_warned = True
                why = ("it was marked ended, or claimed by another process" if isinstance(error, ClaimLost)
                       else "it was deleted from the store")
                self._warn(f"run {self.id} is no longer this loop's ({why}); nothing more is logged, "
                           "your loop goes on")
        except RuntimeError as error:  # a StoreError outside the sink's tries (update_run, settle)
            if not self.sink.warned:
                self.sink.warned = True
                self._warn(f"run {self.id}: the store cannot be written ({' '.join(str(error).split())}); "
                           "training goes on")
        return None

    def _warn(self, message: str) -> None:
        """One :class:`StoreWarning`, attributed to the first line outside this package (your loop's)."""
        frame, level = sys._getframe(), 1
        while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
            frame, level = frame.f_back, level + 1
        warnings.warn(message, StoreWarning, stacklevel=level)

    # ------------------------------------------------------------------ the end
    def finish(self, status: str = "completed", error: str | None = None) -> None:
        """Write every row left and settle the run (``completed``, ``stopped``, ``failed`` …); once."""
        if self.status is not None:
            return
        try:
            if self._scalars or self._series:
                last = max(row[0] for row in self._scalars + self._series)
                rows, series = self._scalars, self._series
                self._guarded(lambda: self.sink.write(last, rows, series))
                self._scalars, self._series = [], []
            self._guarded(lambda: self.sink.finish(status, error))
            self._guarded(self._write_fields)
            settled = self.sink.lost or self._guarded(lambda: lifecycle.settle(self.store, self.claim, status, error))
            self.status = status
            self._report_losses(status, settled)
        finally:
            if self.watcher is not None:
                self.watcher.close()
            if self._owns_store:
                self.store.close()

    def _report_losses(self, status: str, settled) -> None:
        """One warning at the end when the store did not get everything (Note [Your loop goes on])."""
        lost = []
        if self.sink.dropped_rows:
            lost.append(f"{self.sink.dropped_rows:,} rows were dropped (the oldest, past the cap of "
                        f"{MAX_PENDING_ROWS:,} kept while the store could not be written)")
        if self.sink.unwritten_rows:
            lost.append(f"{self.sink.unwritten_rows:,} rows could not be written in {FINISH_PATIENCE_S:g} s")
        if settled is None and not self.sink.lost:
            lost.append(f"it could not be marked {status} and shows 'running' until it is marked ended "
                        f"(stability delete --mark-ended {self.id})")
        if lost:
            self._warn(f"run {self.id}: " + "; ".join(lost))

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if error is None:
            self.finish("completed")
        else:
            self.finish(*lifecycle.ending(error))  # stopped on Ctrl-C or SIGTERM, else failed
        # the exception, if any, goes on to the caller

    def __repr__(self) -> str:
        return f"Run(id={self.id}, store={self.store.location!r}, step={self.current_step})"


def init(name: str | None = None, *, store: RunStore | str | os.PathLike | None = None,
         config: Mapping | None = None, total_steps: int | None = None, metric: str | None = None,
         baseline: float | None = None, on_store_error: str = "warn") -> Run:
    """A new external run in ``store`` (a RunStore, a path or a PostgreSQL URL; default the one the
    dashboard reads: ``$STABILITY_STORE``, else ~/.stability/runs.db), named ``name``, with your
    ``config`` (any JSON-able dict, shown and exported as given). ``total_steps`` gives the pages a
    progress bar and an ETA; ``metric`` and ``baseline`` (a task's metric name and its memoryless
    baseline, as stability.tasks give them) let the diagnosis judge ``val/<metric>`` against it.
    ``on_store_error``: ``"warn"`` (a store that cannot be written later is a warning and your loop
    goes on, Note [Your loop goes on]) or ``"raise"`` (its error, once it has failed for 5 minutes).
    The run itself must be stored: a store that cannot be written now is its one-line StoreError."""
    if on_store_error not in ON_STORE_ERROR:
        raise ValueError(f"on_store_error must be one of {', '.join(map(repr, ON_STORE_ERROR))}; "
                         f"got {on_store_error!r}")
    owns = not isinstance(store, RunStore)
    opened = RunStore(store) if owns else store
    try:
        stored = {"name": name or "", "external": True, "config": json.loads(json.dumps(dict(config or {}), default=repr)),
                  "cell": {"name": "your model"}, "task": {"name": "your loop"}}
        fields = {"total_steps": total_steps, "metric": metric, "baseline": baseline, "step": 0}
        claim = lifecycle.create_external(opened, stored, name,  # one INSERT
                                          {key: value for key, value in fields.items() if value is not None})
    except BaseException:
        if owns:
            opened.close()
        raise
    return Run(opened, claim, owns_store=owns, total_steps=total_steps, on_store_error=on_store_error,
               config=stored)
