"""The training loop, with the papers' diagnostics streamed into the run store.

Knows nothing about particular cells: everything it measures comes through
the cell contract (``recurrent_matrix()``, ``gate_values()``, ``penalty()``,
``state_probe``).  What is logged, and from which paper:

=====================  =========================================================
``train/loss``, ``train/<metric>``   mean over the steps since the last log
``val/*``, ``test/*``   fixed, seeded held-out sets (``test/*`` once, at the end)
``gap/loss``, ``gap/<metric>``   held-out minus training, both on fixed sets,
                        evaluated the same way (SGORNN paper Fig. 4)
``grad/h0_norm``        ‖∂L/∂h0‖ on the fixed probe batch in float64 (spectral paper
                        Figs. 1, 4; :class:`stability.training.probes.ProbeBatch`): at every
                        probe step, and at the log steps between them that fit in
                        :data:`H0_READING_BUDGET` of the run's time
``grad/h0_norm_train``  the same norm on the training batch, in the training dtype:
                        what the optimiser sees (float32 holds 0 once it falls below ~1e-45)
``grad/A_h_norm``       MASO's ‖A_h‖ = ‖∂z/∂h0‖ on the probe batch (MASO §5.1, Fig. 4), every probe
``grad/recurrent_norm``  ‖∂L/∂θ_W‖ over the parameters that build W (MASO Fig. 4)
``grad/total_norm``     over every parameter, before any clipping
``sv/min``, ``sv/max``, ``sv/margin`` = max_i |σ_i − 1| (spectral paper Fig. 4),
``sv/condition``        of the recurrent matrix; ``sv/spectral_radius`` at evaluation steps
``gate/*``              the cell's ``gate_values()`` (SGORNN α, β; LSTM/GRU gates)
``speed/steps_per_s``, ``progress/examples``, ``progress/elapsed_s``,
``progress/eta_s``, ``train/lr``, ``train/penalty``
=====================  =========================================================

Vector diagnostics go to the series table every ``probe_every`` steps:
``grad/h_t_norm`` (index t = 0..T: ‖∂L/∂h_t‖ on the same probe batch, in
float64 so that vanishing reads 1e-120 rather than 0; its t = 0 entry is
``grad/h0_norm``) and ``sv/spectrum``.  Every norm is computed so that it
cannot underflow (:func:`stability.training.probes.stable_norm`).

``train.freeze_recurrent`` keeps the parameters that build W at their
initial values (``cell.recurrent_parameters()``; KRU paper §4.1: copy is
solved with a fixed random unitary W).  After every optimizer step the
trainer calls ``cell.after_optimizer_step()`` (e.g. the Householder cells
renormalise their reflectors there, as their authors' code does).

A NaN or infinite loss or gradient ends the run as ``diverged`` at that
step; every row logged before it is kept.

The loop (:class:`Trainer`) only trains; every reading above, evaluation,
the stop check, checkpoints and progress are hooks (:mod:`stability.training.hooks`,
whose docstring gives the contract), and callers add their own
(``train_run(..., hooks=[...])``).  A checkpoint is written every
``CHECKPOINT_EVERY_S`` and at the end; ``train_run(..., resume=True)``
continues a stopped or interrupted run from it exactly.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from .. import cells, tasks
from ..models import optimizers
from ..models.sequence import SequenceModel, parameter_groups  # noqa: F401  (parameter_groups: old imports)
from ..config import RunConfig, TrainConfig
from ..core.devices import describe_device, resolve_device
from .probes import ProbeBatch, spectrum_metrics
from .hooks import (CHECKPOINT_EVERY_S, H0_READING_BUDGET, Checkpoints, Evaluation, GradientReadings, Hook,
                    ProbeThroughTime, ProgressCallback, Speed, StepResult, StopRequests, TrainingWindow,
                    norm_of_norms, overrides)

EVAL_BATCH_SIZE = 256


def build_model(config: RunConfig, task) -> SequenceModel:
    cell = cells.build(config.cell.name, task.input_size, config.cell.hidden_size, **config.cell.options)
    return SequenceModel(cell, task.output_size, task.target_mode)


def build_optimizer(model: nn.Module, config: RunConfig) -> torch.optim.Optimizer:
    """``config.train.optimizer`` (:mod:`stability.models.optimizers`) over :func:`parameter_groups`."""
    train = config.train
    return optimizers.build_optimizer(parameter_groups(model, train.lr), train.optimizer, train.lr,
                                      weight_decay=train.weight_decay)


class LearningRate:
    """The schedules of :data:`stability.config.LR_SCHEDULES`, stepped once per training step."""

    def __init__(self, optimizer: torch.optim.Optimizer, train: TrainConfig):
        self.optimizer = optimizer
        self.train = train
        self.best_val = math.inf
        self.bad_evals = 0

    def value(self) -> float:
        """The base learning rate (groups with an ``lr_scale`` run at a multiple of it)."""
        group = self.optimizer.param_groups[0]
        return group["lr"] / group.get("lr_scale", 1.0)

    def _set(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)

    def after_step(self, step: int) -> None:
        """``step`` training steps are done."""
        train = self.train
        if train.lr_schedule == "step" and step % train.lr_step_size == 0:
            self._set(self.value() * train.lr_gamma)
        elif train.lr_schedule == "linear":  # to zero at the last step (SGORNN §3.1)
            self._set(train.lr * max(0.0, 1.0 - step / train.steps))

    def after_eval(self, val_loss: float) -> None:
        if self.train.lr_schedule != "plateau":
            return
        if val_loss < self.best_val - 1e-12:
            self.best_val, self.bad_evals = val_loss, 0
        else:
            self.bad_evals += 1
            if self.bad_evals >= 2:  # two evaluations without improvement
                self._set(self.value() * self.train.lr_gamma)
                self.bad_evals = 0


class Evaluator:
    """Fixed evaluation sets: val (and test) from the task, and a fixed training set
    of the same size evaluated the same way, for the train/held-out gap."""

    def __init__(self, task, config: RunConfig, device: torch.device, dtype: torch.dtype):
        self.task, self.device, self.dtype = task, device, dtype
        self.examples = config.train.eval_examples
        self.batch_size = min(EVAL_BATCH_SIZE, self.examples)
        self.train_batches = self._fixed_training_batches(config.train.seed)

    def _fixed_training_batches(self, seed: int) -> list:
        task, count = self.task, self.examples
        if getattr(task, "stateful", False):
            return list(_take(task.batches("train", self.batch_size), math.ceil(count / self.batch_size)))
        try:
            arrays = task.fixed_split("train")
        except ValueError:  # an endless stream of fresh examples: draw a fixed sample of it
            arrays = task.sample(np.random.default_rng([seed, 7919]), count)
        arrays = {key: value[:count] for key, value in arrays.items()}
        size = len(next(iter(arrays.values())))
        return [task.encode({key: value[start:start + self.batch_size] for key, value in arrays.items()})
                for start in range(0, size, self.batch_size)]

    def split(self, model: SequenceModel, split: str, whole: bool = False) -> dict[str, float]:
        if split == "train":
            batches = self.train_batches
        else:
            batches = self.task.batches(split, self.batch_size)
            if not whole:
                batches = _take(batches, math.ceil(self.examples / self.batch_size))
        return self._evaluate(model, batches)

    def _evaluate(self, model: SequenceModel, batches) -> dict[str, float]:
        stateful = getattr(self.task, "stateful", False)
        results, state = [], None
        was_training = model.training
        model.eval()
        with torch.inference_mode():
            for x, y in batches:
                x, y = _to(x, y, self.device, self.dtype)
                if state is not None and state.shape[0] != x.shape[0]:
                    state = None
                pred, h_last = model(x, state)
                state = h_last if stateful else None
                results.append((self.task.loss(pred, y).item(), self.task.score(pred, y), y.numel()))
        model.train(was_training)
        return self.task.summarize(results)


def _take(iterator, count):
    for _, item in zip(range(count), iterator):
        yield item


def _to(x, y, device, dtype):
    x = x.to(device=device, dtype=dtype)
    y = y.to(device=device, dtype=dtype) if y.is_floating_point() else y.to(device)
    return x, y


class ResumeError(ValueError):
    """A run cannot be resumed (no checkpoint, or one this version cannot continue); one line."""


@dataclass
class Cadence:
    """Which readings the current step takes: a log step, and among log steps the evaluation and
    probe steps (the first log step at or after each multiple of ``eval_every``/``probe_every``)
    and the last step."""

    log: bool = False
    eval: bool = False
    probe: bool = False
    last: bool = False


def load_checkpoint(path) -> dict:
    """A checkpoint written by :meth:`Trainer.save_checkpoint`: ``config``, ``model``, ``optimizer``,
    ``step`` and, to resume exactly, the RNG, schedule, cadence and hook states."""
    return torch.load(path, map_location="cpu", weights_only=True)


class Trainer:
    """Trains run ``run_id`` of ``store`` in this process; measurements are :mod:`stability.training.hooks`.

    ``fit()`` runs the loop: draw a batch, step the optimizer, hand a
    :class:`~stability.training.hooks.StepResult` to every hook, and at log steps
    flush the rows the hooks recorded in one transaction.  The built-in hooks
    (:func:`default_hooks`) come first, then ``hooks``.  ``fit(resume=True)``
    continues from the run's checkpoint: weights, optimizer state, RNG,
    learning-rate schedule, cadence, data stream position and hook states are
    restored and the rows logged after the checkpoint's step are discarded,
    so the resumed run trains exactly as if it had not stopped.
    """

    def __init__(self, config: RunConfig, store, run_id: int, *, hooks=(),
                 progress: Callable[[dict], None] | None = None):
        config.validate()
        torch.manual_seed(config.train.seed)
        self.config, self.store, self.run_id = config, store, run_id
        self.device = resolve_device(config.train.device)
        self.dtype = torch.float64 if config.train.dtype == "float64" else torch.float32
        self.task = tasks.build(config.task.name, seed=config.train.seed, **config.task.options)
        self.train = config.train.with_epochs_as_steps(self.task.split_size("train"))
        self.model = build_model(config, self.task).to(device=self.device, dtype=self.dtype)
        self.recurrent = self.model.cell.recurrent_parameters()
        if self.train.freeze_recurrent:
            for parameter in self.recurrent:
                parameter.requires_grad_(False)
        self.optimizer = build_optimizer(self.model, config)
        self.schedule = LearningRate(self.optimizer, self.train)
        self.evaluator = Evaluator(self.task, config, self.device, self.dtype)
        probe_x, probe_y = next(iter(self.task.batches("val", self.train.probe_examples)))
        probe = ProbeBatch(self.model, self.task.loss, *_to(probe_x, probe_y, self.device, self.dtype))
        self.hooks = [*default_hooks(probe, progress), *hooks]
        self.step, self.status, self.error = 0, "completed", None
        self.cadence = Cadence()
        self._every = (self.train.resolved_log_every(), self.train.resolved_eval_every(),
                       self.train.resolved_probe_every())
        self._next_eval, self._next_probe = self._every[1], self._every[2]
        self._scalars: list[tuple] = []
        self._series: list[tuple] = []
        self._started = time.time()
        self._carried = None  # a stateful task's hidden state, carried between batches
        self._stopping = False
        self._spectrum: tuple | None = None  # (step, sv/* scalars, sigma) of W, see spectrum()

    # ------------------------------------------------------------ for hooks
    def spectrum(self, with_radius: bool = False) -> tuple[dict[str, float], np.ndarray]:
        """``spectrum_metrics`` of the cell's W at this step (its ``sv/*`` scalars, every singular value),
        computed once a step however many hooks read it: W does not change between optimizer steps."""
        cached = self._spectrum
        if cached is None or cached[0] != self.step or (with_radius and "sv/spectral_radius" not in cached[1]):
            metrics, sigma = spectrum_metrics(self.model.cell.recurrent_matrix(), with_radius=with_radius)
            self._spectrum = cached = (self.step, metrics, sigma)
        return cached[1], cached[2]

    def record(self, name: str, value) -> None:
        """A scalar row at the current step, written at the next flush."""
        self._scalars.append((self.step, time.time(), name, float(value)))

    def record_series(self, name: str, values) -> None:
        """A vector row (one per component) at the current step."""
        now = time.time()
        self._series.extend((self.step, now, name, i, float(v)) for i, v in enumerate(values))

    def pending(self) -> dict[str, float]:
        """The scalars recorded since the last flush, by name (the latest of each)."""
        return {name: value for _, _, name, value in self._scalars}

    def flush(self) -> None:
        self.store.flush(self.run_id, self._scalars, self._series, heartbeat_step=self.step)
        self._scalars.clear()
        self._series.clear()

    def stop(self, status: str, error: str | None = None) -> None:
        """End the run with ``status`` after the current step (a hook's early stop)."""
        self.status, self.error, self._stopping = status, error, True

    def elapsed(self) -> float:
        """Training time of this run so far, across resumes."""
        return time.time() - self._started

    # ------------------------------------------------------------ the loop
    def fit(self, resume: bool = False) -> str:
        """Train to ``train.steps`` (or until a hook stops the run); return the terminal status."""
        if resume:
            self._restore()
        self._announce()
        batches = self.task.batches("train", self.train.batch_size)
        for _ in range(self.step):  # the same data stream position as when the checkpoint was taken
            next(batches)
        on_step, on_log = self._hooks_with("on_step"), self._hooks_with("on_log")
        for hook in self._hooks_with("on_start"):
            hook.on_start(self, resume)
        self.flush()
        self.model.train()
        while self.step < self.train.steps and not self._stopping:
            self.step += 1
            result = self._train_step(next(batches))
            if result is None:
                break
            for hook in on_step:
                hook.on_step(self, result)
            if self.cadence.log:
                for hook in on_log:
                    hook.on_log(self, result)
                self._advance_cadence()
                self.flush()
        self.flush()  # the rows of a diverged step
        for hook in self._hooks_with("on_end"):
            hook.on_end(self)
        self.flush()
        self.store.set_status(self.run_id, self.status, error=self.error)
        return self.status

    def _hooks_with(self, method: str) -> list:
        return [hook for hook in self.hooks if overrides(hook, method)]

    def _train_step(self, batch) -> StepResult | None:
        """One optimizer step; None when the loss or the gradient is not finite (run diverged)."""
        model, dtype, device = self.model, self.dtype, self.device
        x, y = _to(*batch, device, dtype)
        h0 = model.cell.initial_state(x.shape[0], dtype=dtype, device=device)
        if self._carried is not None and self._carried.shape == h0.shape:
            h0 = self._carried
        h0_probe = torch.zeros_like(h0).requires_grad_()  # its gradient is dL/dh0
        pred, h_last = model(x, h0 + h0_probe)
        self._carried = h_last.detach() if getattr(self.task, "stateful", False) else None
        loss = self.task.loss(pred, y)
        penalty = model.cell.penalty()
        objective = loss + penalty
        self.optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(objective):
            return self._diverged(("train/loss", objective.item()))
        objective.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        # Every step: one fused norm, enough to see a non-finite gradient; logged values use stable_norm.
        fused_norm = torch.nn.utils.get_total_norm(grads).item()
        if not math.isfinite(fused_norm):
            return self._diverged(("train/loss", loss.item()), ("grad/total_norm", fused_norm))
        self.cadence = self._cadence()
        total_norm = norm_of_norms(grads) if self.cadence.log else None  # before any clipping
        if self.train.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.train.clip_grad_norm)
        self.optimizer.step()
        with torch.no_grad():
            model.cell.after_optimizer_step()
        self.schedule.after_step(self.step)
        return StepResult(self.step, loss.item(), penalty.detach() if torch.is_tensor(penalty) else penalty, pred.detach(), y, h0_probe.grad, total_norm)

    def _diverged(self, *rows) -> None:
        for name, value in rows:
            self.record(name, value)
        self.stop("diverged", f"loss or gradient became non-finite at step {self.step}")
        return None

    def _cadence(self) -> Cadence:
        step, steps = self.step, self.train.steps
        if step % self._every[0] and step != steps:
            return Cadence()
        last = step == steps
        return Cadence(log=True, eval=step >= self._next_eval or last, probe=step >= self._next_probe or last,
                       last=last)

    def _advance_cadence(self) -> None:
        _, eval_every, probe_every = self._every
        if self.cadence.eval:
            self._next_eval = (self.step // eval_every + 1) * eval_every
        if self.cadence.probe:
            self._next_probe = (self.step // probe_every + 1) * probe_every

    def _announce(self) -> None:
        """Mark the run running, with what the pages show about it."""
        model, task = self.model, self.task
        fields = dict(status="running", device=describe_device(self.device), pid=os.getpid(),
                      total_params=sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters()),
                      recurrent_params=model.cell.recurrent_parameter_count(), baseline=task.baseline,
                      baseline_label=getattr(task, "baseline_label", None), metric=task.metric,
                      total_steps=self.train.steps, step=self.step, finished_at=None)
        if self.step == 0:
            fields["started_at"] = time.time()
        else:
            fields["error"] = None
        self.store.update_run(self.run_id, **fields)

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> None:
        """Everything :meth:`fit` needs to continue exactly from this step (written atomically)."""
        path = self.store.checkpoint_path(self.run_id)
        rng = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        state = {"format": CHECKPOINT_FORMAT, "config": self.config.to_dict(), "step": self.step,
                 "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "schedule": {"best_val": self.schedule.best_val, "bad_evals": self.schedule.bad_evals},
                 "rng": rng, "carried": self._carried, "elapsed": self.elapsed(),
                 "cadence": [self._next_eval, self._next_probe],
                 "hooks": {_hook_key(i, hook): hook.state_dict() for i, hook in enumerate(self.hooks)}}
        temporary = f"{path}.partial"
        torch.save(state, temporary)
        os.replace(temporary, path)

    def _restore(self) -> None:
        path = self.store.checkpoint_path(self.run_id)
        if not os.path.exists(path):
            raise ResumeError(f"run {self.run_id} has no checkpoint to resume from")
        state = load_checkpoint(path)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ResumeError(f"run {self.run_id}'s checkpoint was written by a version that cannot be "
                              "resumed exactly; start a new run with the same config instead")
        if state["config"] != self.config.to_dict():
            raise ResumeError(f"run {self.run_id}'s checkpoint belongs to a different config")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.best_val, self.schedule.bad_evals = (state["schedule"]["best_val"],
                                                           state["schedule"]["bad_evals"])
        torch.set_rng_state(state["rng"]["torch"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        carried = state["carried"]
        self._carried = None if carried is None else carried.to(device=self.device, dtype=self.dtype)
        self._next_eval, self._next_probe = state["cadence"]
        self._started = time.time() - state["elapsed"]
        for i, hook in enumerate(self.hooks):
            if _hook_key(i, hook) in state["hooks"]:
                hook.load_state_dict(state["hooks"][_hook_key(i, hook)])
        self.step = state["step"]
        self.store.discard_after(self.run_id, self.step)


CHECKPOINT_FORMAT = 2


def _hook_key(index: int, hook: Hook) -> str:
    return f"{index}:{type(hook).__name__}"


def default_hooks(probe: ProbeBatch, progress: Callable[[dict], None] | None = None) -> list[Hook]:
    """The measurements every run takes, in the order their rows are recorded at a log step."""
    hooks = [TrainingWindow(), GradientReadings(probe), Speed(), Evaluation(), ProbeThroughTime(probe),
             StopRequests(), Checkpoints()]
    if progress is not None:
        hooks.append(ProgressCallback(progress))
    return hooks


def train_run(config: RunConfig, store, run_id: int, *, progress: Callable[[dict], None] | None = None,
              hooks=(), resume: bool = False) -> str:
    """Train run ``run_id`` in this process; return its terminal status.

    Returns ``"completed"``, ``"stopped"``, ``"diverged"`` or a hook's status
    (and sets it in the store); raises on any other problem, leaving the status
    to the caller.  ``resume=True`` continues from the run's checkpoint
    (:class:`ResumeError` when there is none).
    """
    return Trainer(config, store, run_id, hooks=hooks, progress=progress).fit(resume=resume)
