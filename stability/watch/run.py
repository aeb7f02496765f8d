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
reads the store whenever it is started.

Note [Whole steps]
    A page polls the rows after the last step it saw (RunStore, Note [since_step]), so a step's
    rows must be written together: rows wait in memory until the loop has moved to a later step,
    and a write takes only the rows of the steps before the current one (all of them at the end).
"""
from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from ..core import metric_names as names
from ..execution import lifecycle
from ..execution.signals import Terminated, describe_interrupt
from ..runs.store import RunStore
from ..training.sinks import StoreSink
from .readings import Probe, Watcher

WRITE_EVERY_S = 1.0  # rows wait in memory at most this long (once the loop has moved past their step)


class _SinkView:
    """What :meth:`StoreSink.on_step` asks of a trainer: ``stop`` (a stop request from the store)."""

    def __init__(self):
        self.stop_requested = False

    def stop(self, status: str, error: str | None = None) -> None:
        self.stop_requested = True


class Run:
    """One external run of a store (module docstring): ``log``, ``watch``, ``step``, ``finish``."""

    def __init__(self, store: RunStore, claim: lifecycle.Claim, *, owns_store: bool, total_steps: int | None):
        self.store, self.claim, self.id = store, claim, claim.run_id
        self._owns_store, self.total_steps = owns_store, total_steps
        self.sink = StoreSink(store, claim.run_id, claim=claim.token)
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
        config = dict(self.store.record(self.id).raw_config)
        config["cell"] = {"name": f"{type(model).__name__} ({units[0].kind})", "hidden_size": units[0].size,
                          "units": [unit.place for unit in units]}
        self.store.update_run(self.id, config=config, **self.watcher.describe())
        return self.watcher

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
        self.sink.on_step(self._view, None)  # the stop request, and the heartbeat between writes
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
            self.sink.write(max(row[0] for row in done + done_series), done, done_series)
            self._written = time.monotonic()

    # ------------------------------------------------------------------ the end
    def finish(self, status: str = "completed", error: str | None = None) -> None:
        """Write every row left and settle the run (``completed``, ``stopped``, ``failed`` …); once."""
        if self.status is not None:
            return
        try:
            if self._scalars or self._series:
                last = max(row[0] for row in self._scalars + self._series)
                self.sink.write(last, self._scalars, self._series)
                self._scalars, self._series = [], []
            self.sink.finish(status, error)
            lifecycle.settle(self.store, self.claim, status, error)
            self.status = status
        finally:
            if self.watcher is not None:
                self.watcher.close()
            if self._owns_store:
                self.store.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if error is None:
            self.finish("completed")
        elif isinstance(error, (KeyboardInterrupt, Terminated)):
            self.finish("stopped", describe_interrupt(error))
        else:
            self.finish("failed", lifecycle.describe_error(error))
        # the exception, if any, goes on to the caller

    def __repr__(self) -> str:
        return f"Run(id={self.id}, store={self.store.location!r}, step={self.current_step})"


def init(name: str | None = None, *, store: RunStore | str | os.PathLike | None = None,
         config: Mapping | None = None, total_steps: int | None = None, metric: str | None = None,
         baseline: float | None = None) -> Run:
    """A new external run in ``store`` (a RunStore, a path or a PostgreSQL URL; default the one the
    dashboard reads: ``$STABILITY_STORE``, else ~/.stability/runs.db), named ``name``, with your
    ``config`` (any JSON-able dict, shown and exported as given). ``total_steps`` gives the pages a
    progress bar and an ETA; ``metric`` and ``baseline`` (a task's metric name and its memoryless
    baseline, as stability.tasks give them) let the diagnosis judge ``val/<metric>`` against it."""
    owns = not isinstance(store, RunStore)
    opened = RunStore(store) if owns else store
    try:
        stored = {"name": name or "", "external": True, "config": json.loads(json.dumps(dict(config or {}), default=repr)),
                  "cell": {"name": "your model"}, "task": {"name": "your loop"}}
        claim = lifecycle.create_external(opened, stored, name)
        fields = {"total_steps": total_steps, "metric": metric, "baseline": baseline, "step": 0}
        opened.update_run(claim.run_id, **{key: value for key, value in fields.items() if value is not None})
    except BaseException:
        if owns:
            opened.close()
        raise
    return Run(opened, claim, owns_store=owns, total_steps=total_steps)
