"""What a training run measures, evaluates and decides between steps: the trainer's hooks.

The loop in :class:`stability.training.trainer.Trainer` only trains; everything else is a
:class:`Hook`.  The contract, in the order of a run:

``on_start(trainer, resumed)``
    once, before the first step.  ``trainer.step`` is 0 for a new run (rows
    recorded here describe the initial state; step 0's training readings,
    :mod:`stability.training.step_zero`, are already stored, Note [Step 0
    first] in :mod:`stability.training.trainer`) or the checkpoint's step when
    ``resumed`` (the rows of that step are already stored; record nothing).
``on_step(trainer, result)``
    after every optimizer step, with the :class:`StepResult`.  Keep it cheap:
    it runs thousands of times a second for a small cell, and read nothing
    from the device (no ``.item()``, ``float(tensor)``, ``if tensor:``): on a
    GPU each read stalls the step (Note [One read per log step] in
    :mod:`stability.training.window`).  May call
    ``trainer.stop(status, error)``; the run ends after this step.
``on_log(trainer, result)``
    at log steps, after ``on_step``, in the order the hooks were given.
    ``trainer.cadence`` says whether this log step is also an evaluation,
    probe or last step.  Rows logged with ``trainer.log`` /
    ``trainer.log_series`` are flushed to the run's sink in one transaction
    after every hook has run (so a poller never sees half a step; step 0
    alone comes in two, Note [Step 0 first]).
``on_end(trainer)``
    once, after the loop, with ``trainer.status`` set ("completed",
    "stopped", "diverged" or a hook's status); rows recorded here are flushed.
``on_exception(trainer, error)``
    once, when a step or a hook raised (``error``, which then propagates to
    the caller); the rows recorded before it, and any recorded here, are
    flushed.  Settling the run's status ('failed') is the caller's.
``state_dict()`` / ``load_state_dict(state)``
    what a hook must carry across a checkpoint to resume exactly; a
    checkpoint keys it by the hook's ``state_key`` (its class name; a hook
    that may be given twice adds what tells the instances apart, as
    :class:`Pruning` adds its metric).  Two hooks with the same key are refused.

A hook overrides only the methods it needs; the trainer calls only those.
What a hook may read and call on the trainer is :class:`TrainerView`.
Sweeps add early stopping and pruning, and paper presets their own
measurements, as hooks (``train_run(..., hooks=[...])``) without editing the loop;
where the rows go is a hook too (a sink: :mod:`stability.training.sinks`).
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import torch

from ..core import metric_names as names
from ..core.devices import device_facts, on_host
from .probes import ProbeBatch, stable_norm, widened
from .window import StepWindow, WindowReading, read_numbers

# The float64 grad/h0_norm reading costs about one training step of a small cell (a forward and
# backward pass of the probe batch); between probe steps it is taken at a log step only while the
# time spent on it stays within this fraction of the run's time (benchmarks/training.py).
H0_READING_SHARE = 0.02
CHECKPOINT_EVERY_S = 300.0


@dataclass
class StepResult:
    """One training step, as the hooks see it (after the optimizer step).

    ``loss`` is the task loss and ``penalty`` the cell's soft constraint, both 0-d tensors on the
    training device: reading one (``float``, ``.item()``) makes the host wait for the device, so
    read them at log steps only, or better take what the log step read already: ``window``, the
    :class:`~stability.training.window.WindowReading` of the steps since the last log (means of
    loss and score, and the penalty among its ``extras``), None between log steps.  ``h0_grad``
    is ∂L/∂h0 on the training batch in the training dtype; ``total_norm`` the stable gradient norm
    over every parameter before any clipping, at log steps only (None otherwise).  On a graphed run
    (:mod:`stability.training.graphed`) the tensors are the step's static outputs, which the next step
    overwrites in place: copy what a hook keeps past its call.
    """

    step: int
    loss: torch.Tensor
    penalty: torch.Tensor
    pred: torch.Tensor
    y: torch.Tensor
    h0_grad: torch.Tensor | None
    total_norm: float | None
    window: WindowReading | None = None


class TrainerView(Protocol):
    """What a hook reads and calls on :class:`stability.training.trainer.Trainer` (by duck typing:
    this module does not import the trainer).

    The learning rate is ``trainer.schedule.value()``: the base rate as a float (a group with an
    ``lr_scale`` trains at that multiple of it), the value ``train/lr`` logs, on every run. The trainer's
    ``optimizer`` is not part of this view: on a graphed run (:mod:`stability.training.graphed`: CUDA with
    ``train.cuda_graphs`` on) its ``param_groups[i]["lr"]`` holds a 0-d tensor on the device, not a float:
    the captured optimizer (one torch can capture, such as Adam) reads it, and the StaticStep fills it
    from the schedule's rate when that changes. ``float()`` of it is a read from the device (a stall), and
    a float written there does not reach the captured step. Read the rate from the schedule; it follows
    the config's ``lr_schedule``.
    """

    model: torch.nn.Module          # model.cell: the recurrent cell (Trainer's docstring: the contract)
    task: object
    train: object                   # the TrainConfig, with epochs resolved to steps
    step: int
    status: str
    cadence: object                 # .log, .eval, .probe, .last of this step
    recurrent: list                 # cell.recurrent_parameters()
    schedule: object                # LearningRate: .value() (the rate, a float), .after_eval(val_loss)
    evaluator: object               # Evaluator: .split(model, split, whole=False)

    def log(self, name: str, value) -> None: ...

    def log_series(self, name: str, values) -> None: ...

    def pending(self) -> dict[str, float]: ...

    def stop(self, status: str, error: str | None = None) -> None: ...

    def elapsed(self) -> float: ...

    def spectrum(self, with_radius: bool = False) -> tuple[dict[str, float], np.ndarray]: ...

    def save_checkpoint(self): ...

    def describe(self) -> dict: ...     # device, parameter counts, the task's baseline and metric, total steps


class Hook:
    """Base class: every method is optional (see the module docstring for the contract)."""

    @property
    def state_key(self) -> str:
        """The key of this hook's state in a checkpoint, unique among a run's hooks."""
        return type(self).__qualname__

    def on_start(self, trainer: TrainerView, resumed: bool) -> None: ...

    def on_step(self, trainer: TrainerView, result: StepResult) -> None: ...

    def on_log(self, trainer: TrainerView, result: StepResult) -> None: ...

    def on_end(self, trainer: TrainerView) -> None: ...

    def on_exception(self, trainer: TrainerView, error: BaseException) -> None: ...

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None: ...


def overrides(hook: Hook, method: str) -> bool:
    """Whether ``hook`` defines ``method`` itself (the trainer skips the base class's no-ops)."""
    return getattr(type(hook), method) is not getattr(Hook, method)


class TimeShare:
    """A share of wall time: the time spent inside ``with share:`` blocks, allowed up to ``fraction`` of a
    given elapsed time (not the memory budget of stability.admission.budget)."""

    def __init__(self, fraction: float):
        self.fraction = fraction
        self.spent = 0.0

    def allows(self, elapsed: float) -> bool:
        return self.spent < self.fraction * elapsed

    def __enter__(self):
        self._entered = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.spent += time.perf_counter() - self._entered


def step_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """‖(t_1, ..., t_n)‖₂ for every training step, on the device, nothing read: each tensor's norm
    accumulated in float64 where the device has it, so a float32 gradient's norm neither overflows
    (entries past ~1e19 square past float32's range: ``get_total_norm`` reads inf, a false
    divergence) nor underflows (entries below ~1e-23: a false 0); it is infinite or NaN exactly when
    an entry is.  A device without float64 (a Mac's GPU) keeps PyTorch's fused float32 norm."""
    if not device_facts(tensors[0].device).has(torch.float64):
        return torch.nn.utils.get_total_norm(tensors)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t, dtype=torch.float64) for t in tensors]))


def stacked_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """‖(t_1, ..., t_n)‖₂ over all entries of all tensors, without underflow (:func:`stable_norm`):
    each tensor's norm in its own dtype where it is, the norm of those n norms in float64, a 0-d
    tensor: on the device where it has float64 (nothing read from it, however slow its float64:
    n scalars), else on the host (a Mac's GPU: the n norms cross in their own dtype in one copy,
    a read, so only at a log step, and are widened there: :func:`~stability.training.probes.widened`)."""
    norms = [stable_norm(t) for t in tensors]
    if device_facts(norms[0].device).has(torch.float64):
        return stable_norm(torch.stack([norm.to(torch.float64) for norm in norms]))
    dtype = functools.reduce(torch.promote_types, (norm.dtype for norm in norms))
    with on_host():
        return stable_norm(widened(torch.stack([norm.to(dtype) for norm in norms]), torch.device("cpu")))


class TrainingWindow(Hook):
    """``train/loss``, ``train/<metric>`` (means over the steps since the last log), ``train/lr``,
    ``train/penalty`` (when non-zero), from the trainer's window of steps, which the log step has
    read already (:mod:`stability.training.window`); its state in a checkpoint is that window's."""

    def __init__(self, window: StepWindow):
        self.window = window

    def on_log(self, trainer, result):
        reading = result.window
        trainer.log(names.TRAIN_LOSS, reading.loss)
        trainer.log(names.split_name("train", trainer.task.metric), reading.score)
        trainer.log(names.TRAIN_LR, trainer.schedule.value())
        penalty = reading.extras.get("penalty", 0.0)
        if penalty != 0.0:
            trainer.log(names.TRAIN_PENALTY, penalty)

    def state_dict(self):
        return self.window.state_dict()

    def load_state_dict(self, state):
        self.window.load_state_dict(state)


class GradientReadings(Hook):
    """At every log step: ‖∂L/∂h0‖ (float64 probe batch, within :data:`H0_READING_SHARE` between
    probe steps; training batch as ``grad/h0_norm_train``), ``grad/recurrent_norm``,
    ``grad/total_norm``, the recurrent matrix's singular values (``sv/*``; the spectral radius at
    evaluation steps) and the cell's gates (``gate/*``).  See docs/readings.md."""

    def __init__(self, probe: ProbeBatch):
        self.probe = probe
        self.h0_reading = TimeShare(H0_READING_SHARE)

    def on_log(self, trainer, result):
        cadence = trainer.cadence
        if not cadence.probe and self.h0_reading.allows(trainer.elapsed()):
            with self.h0_reading:
                self.probe.sync()
                trainer.log(names.H0_NORM, self.probe.h0_norm())
        norms = {names.H0_NORM_TRAIN: stable_norm(result.h0_grad)}  # read as a float64 number
        recurrent_grads = [p.grad for p in trainer.recurrent if p.grad is not None]
        if recurrent_grads:  # none while W is frozen
            norms[names.RECURRENT_NORM] = stacked_norm(recurrent_grads)
        for name, value in zip(norms, read_numbers(list(norms.values()))):  # one read for both
            trainer.log(name, value)
        trainer.log(names.TOTAL_NORM, result.total_norm)
        spectrum, _ = trainer.spectrum(with_radius=cadence.eval)
        for name, value in spectrum.items():
            trainer.log(name, value)
        for name, value in trainer.model.cell.gate_values().items():
            trainer.log(f"{names.GATE_PREFIX}{name}", value)

    def state_dict(self):
        return {"h0_reading_spent": self.h0_reading.spent}

    def load_state_dict(self, state):
        self.h0_reading.spent = state["h0_reading_spent"]


class Speed(Hook):
    """``speed/steps_per_s`` over the log window, ``progress/examples``, ``progress/elapsed_s``,
    ``progress/eta_s``."""

    def __init__(self):
        self.steps = 0
        self.since = time.time()

    def on_start(self, trainer, resumed):
        self.since = time.time()

    def on_step(self, trainer, result):
        self.steps += 1

    def on_log(self, trainer, result):
        now = time.time()
        steps_per_s = self.steps / max(now - self.since, 1e-9)
        trainer.log(names.STEPS_PER_S, steps_per_s)
        trainer.log(names.EXAMPLES, trainer.step * trainer.train.batch_size)
        trainer.log(names.ELAPSED_S, trainer.elapsed())
        trainer.log(names.ETA_S, (trainer.train.steps - trainer.step) / steps_per_s)
        self.steps = 0
        self.since = now


class Evaluation(Hook):
    """``val/*`` and ``gap/*`` (held-out minus training, both on fixed sets; SGORNN paper Fig. 4)
    at the start and at evaluation steps; ``test/*`` on the whole test split at the last step.
    The plateau learning-rate schedule reads the validation loss from here."""

    def on_start(self, trainer, resumed):
        if not resumed:
            self._validate(trainer)

    def on_log(self, trainer, result):
        if trainer.cadence.eval:
            self._validate(trainer)
        if trainer.cadence.last:  # in the same transaction as the step's other rows, for since_step pollers
            for key, value in trainer.evaluator.split(trainer.model, "test", whole=True).items():
                trainer.log(names.split_name("test", key), value)

    @staticmethod
    def _validate(trainer):
        held_out = trainer.evaluator.split(trainer.model, "val")
        fitted = trainer.evaluator.split(trainer.model, "train")
        for key, value in held_out.items():
            trainer.log(names.split_name("val", key), value)
            trainer.log(names.split_name("gap", key), value - fitted[key])
        trainer.schedule.after_eval(held_out["loss"])


class ProbeThroughTime(Hook):
    """At the start and at probe steps, on the float64 probe batch: ``grad/h0_norm``,
    ``grad/A_h_norm`` (MASO §5.1, Fig. 4), the series ``grad/h_t_norm`` (t = 0..T), for a deep
    step's cell (mlp) ``grad/layer_norm`` (l = 0..L, spectral paper Fig. 5) and
    ``sv/spectrum``; at the start also the ``sv/*`` scalars of W as initialised (step 0, before any
    update: an IRNN's margin starts at 0, spectral paper Fig. 4), which :class:`GradientReadings`
    reads at every log step after that."""

    def __init__(self, probe: ProbeBatch):
        self.probe = probe

    def on_start(self, trainer, resumed):
        if not resumed:
            for name, value in self._read(trainer, with_radius=True).items():
                trainer.log(name, value)

    def on_log(self, trainer, result):
        if trainer.cadence.probe:
            self._read(trainer)

    def _read(self, trainer, with_radius: bool = False) -> dict[str, float]:
        """Record the probe's readings and the spectrum series; return the ``sv/*`` scalars of W."""
        self.probe.sync()
        norms = self.probe.through_time()
        trainer.log(names.H0_NORM, norms[0])  # the same reading as between probes, here for free
        trainer.log(names.A_H_NORM, self.probe.output_h0_norm())
        trainer.log_series(names.H_T_NORM, norms)
        if (depth := self.probe.through_depth()) is not None:  # a deep step's layers (mlp, spectral Fig. 5)
            trainer.log_series(names.LAYER_NORM, depth)
        spectrum, sigma = trainer.spectrum(with_radius=with_radius)  # read by GradientReadings already at a log step
        trainer.log_series(names.SPECTRUM, sigma)
        return spectrum


class ProgressCallback(Hook):
    """Hands ``{"step", "total_steps", "elapsed_s", "eta_s", "steps_per_s", <latest rows>}`` to a
    function at every log step (the CLI's progress line).  Goes after the hooks that record."""

    def __init__(self, callback: Callable[[dict], None]):
        self.callback = callback

    def on_log(self, trainer, result):
        latest = trainer.pending()
        self.callback({"step": trainer.step, "total_steps": trainer.train.steps,
                       "elapsed_s": latest.get(names.ELAPSED_S, trainer.elapsed()),
                       "eta_s": latest.get(names.ETA_S, math.nan),
                       "steps_per_s": latest.get(names.STEPS_PER_S, math.nan), **latest})


class Checkpoints(Hook):
    """Saves a checkpoint every ``every_s`` seconds and at the end of a run that did not diverge (and
    whose sink keeps it: ``keeps_final_checkpoint``, not a store's completed run, which drops it),
    so a killed run loses at most the steps since the last one (``python -m stability resume``).
    Where it goes is the sink's (``trainer.save_checkpoint()`` writes nothing where it keeps none)."""

    def __init__(self, every_s: float = CHECKPOINT_EVERY_S):
        self.every_s = every_s
        self.last = time.time()

    def on_step(self, trainer, result):
        now = time.time()
        if now - self.last >= self.every_s:
            trainer.save_checkpoint()
            self.last = now

    def on_end(self, trainer):
        if trainer.status != "diverged" and trainer.sink.keeps_final_checkpoint(trainer.status):
            trainer.save_checkpoint()


class Pruning(Hook):
    """A sweep's early stopping (issue 12): at every evaluation step, report ``metric`` (the
    sweep's objective, ``val/loss``) to the run's Optuna trial; when the study's pruner says the
    trial is hopeless, end the run as ``pruned`` (its rows and checkpoint are kept).

    Runs after :class:`Evaluation` (hooks given to ``train_run`` follow the default ones), so the
    value of this evaluation step is among ``trainer.pending()``.  Optuna keeps what was
    reported in the study, so a resumed run carries nothing in its own state.
    """

    def __init__(self, trial, metric: str):
        self.trial, self.metric = trial, metric

    @property
    def state_key(self) -> str:
        return f"{type(self).__qualname__}[{self.metric}]"

    def on_log(self, trainer, result):
        if not trainer.cadence.eval:
            return
        value = trainer.pending().get(self.metric)
        if value is None or not math.isfinite(value):
            return
        self.trial.report(value, trainer.step)
        if self.trial.should_prune():
            trainer.stop("pruned", f"pruned at step {trainer.step}: {self.metric} {value:.4g} was worse than "
                                   "the median of earlier trials at this step")


def default_hooks(probe: ProbeBatch, progress: Callable[[dict], None] | None = None, *,
                  window: StepWindow) -> list[Hook]:
    """The measurements every run takes, in the order their rows are recorded at a log step
    (``progress``, the CLI's progress line, after them); ``window``: the trainer's window of steps
    (:class:`TrainingWindow` records it)."""
    hooks = [TrainingWindow(window), GradientReadings(probe), Speed(), Evaluation(), ProbeThroughTime(probe),
             Checkpoints()]
    if progress is not None:
        hooks.append(ProgressCallback(progress))
    return hooks
