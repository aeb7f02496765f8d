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
                        Figs. 1, 4; :class:`stability.diagnostics.ProbeBatch`): at every
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
cannot underflow (:func:`stability.diagnostics.stable_norm`).

``train.freeze_recurrent`` keeps the parameters that build W at their
initial values (``cell.recurrent_parameters()``; KRU paper §4.1: copy is
solved with a fixed random unitary W).  After every optimizer step the
trainer calls ``cell.after_optimizer_step()`` (e.g. the Householder cells
renormalise their reflectors there, as their authors' code does).

A NaN or infinite loss or gradient ends the run as ``diverged`` at that
step; every row logged before it is kept.
"""
from __future__ import annotations

import math
import os
import time
from typing import Callable

import numpy as np
import torch
from torch import nn

from . import cells, optimizers, tasks
from .config import RunConfig, TrainConfig
from .devices import resolve_device, describe_device  # noqa: F401  (moved there; old imports keep working)
from .diagnostics import ProbeBatch, spectrum_metrics, stable_norm

CHECKPOINT_EVERY_S = 300.0
# The float64 grad/h0_norm reading costs about one training step of a small cell (a forward and
# backward pass of the probe batch); between probe steps it is taken at a log step only while the
# time spent on it stays within this fraction of the run's time (benchmarks/training.py).
H0_READING_BUDGET = 0.02
STOP_POLL_S = 0.5
EVAL_BATCH_SIZE = 256


class SequenceModel(nn.Module):
    """A cell and a linear readout: per step ("every") or from the last step ("last")."""

    def __init__(self, cell: nn.Module, output_size: int, target_mode: str):
        super().__init__()
        self.cell = cell
        self.readout = nn.Linear(cell.output_size, output_size)
        self.target_mode = target_mode

    def forward(self, x, h0=None, state_probe=None):
        outputs, h_last = self.cell(x, h0, state_probe)  # (B, T, F)
        if self.target_mode == "last":
            outputs = outputs[:, -1]
        return self.readout(outputs), h_last


def build_model(config: RunConfig, task) -> SequenceModel:
    cell = cells.build(config.cell.name, task.input_size, config.cell.hidden_size, **config.cell.options)
    return SequenceModel(cell, task.output_size, task.target_mode)


def parameter_groups(model: SequenceModel, lr: float) -> list[dict]:
    """The trainable parameters in optimizer groups: the cell's ``recurrent_parameters()`` at
    ``lr * cell.recurrent_lr_scale``, everything else at ``lr``; each group keeps its ``lr_scale``."""
    recurrent = {id(p) for p in model.cell.recurrent_parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    scale = float(getattr(model.cell, "recurrent_lr_scale", 1.0))
    groups = [{"params": [p for p in trainable if id(p) not in recurrent], "lr_scale": 1.0},
              {"params": [p for p in trainable if id(p) in recurrent], "lr_scale": scale}]
    return [{**group, "lr": lr * group["lr_scale"]} for group in groups if group["params"]]


def build_optimizer(model: nn.Module, config: RunConfig) -> torch.optim.Optimizer:
    """``config.train.optimizer`` (:mod:`stability.optimizers`) over :func:`parameter_groups`."""
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


class TimeBudget:
    """Wall time spent inside ``with budget:`` blocks, allowed up to ``fraction`` of a given elapsed time."""

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


def _norm_of_norms(tensors: list[torch.Tensor]) -> float:
    """‖(t_1, ..., t_n)‖₂ over all entries of all tensors, without underflow (:func:`stable_norm`)."""
    return stable_norm(torch.stack([stable_norm(t).to(torch.float64) for t in tensors])).item()


def load_checkpoint(path) -> dict:
    """A checkpoint written by :func:`train_run`: ``config``, ``model``, ``optimizer``, ``step``."""
    return torch.load(path, map_location="cpu", weights_only=True)


def _save_checkpoint(path, config, model, optimizer, step) -> None:
    temporary = f"{path}.partial"
    torch.save({"config": config.to_dict(), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": step}, temporary)
    os.replace(temporary, path)


def train_run(config: RunConfig, store, run_id: int, *,
              progress: Callable[[dict], None] | None = None) -> str:
    """Train run ``run_id`` in this process; return its terminal status.

    Returns ``"completed"``, ``"stopped"`` or ``"diverged"`` (and sets it in
    the store); raises on any other problem, leaving the status to the caller.
    """
    config.validate()
    torch.manual_seed(config.train.seed)
    device = resolve_device(config.train.device)
    dtype = torch.float64 if config.train.dtype == "float64" else torch.float32
    task = tasks.build(config.task.name, seed=config.train.seed, **config.task.options)
    train = config.train.with_epochs_as_steps(task.split_size("train"))
    model = build_model(config, task).to(device=device, dtype=dtype)
    recurrent = model.cell.recurrent_parameters()
    if train.freeze_recurrent:
        for parameter in recurrent:
            parameter.requires_grad_(False)
    optimizer = build_optimizer(model, config)
    schedule = LearningRate(optimizer, train)
    evaluator = Evaluator(task, config, device, dtype)
    stateful = getattr(task, "stateful", False)
    probe_x, probe_y = next(iter(task.batches("val", train.probe_examples)))
    probe = ProbeBatch(model, task.loss, *_to(probe_x, probe_y, device, dtype))
    log_every, eval_every, probe_every = (train.resolved_log_every(), train.resolved_eval_every(),
                                          train.resolved_probe_every())
    metric = task.metric

    store.update_run(run_id, status="running", started_at=time.time(), device=describe_device(device),
                     pid=os.getpid(), total_params=sum(p.numel() * (2 if p.is_complex() else 1)
                                                       for p in model.parameters()),
                     recurrent_params=model.cell.recurrent_parameter_count(), baseline=task.baseline,
                     baseline_label=getattr(task, "baseline_label", None), metric=metric,
                     total_steps=train.steps, step=0)

    h0_reading = TimeBudget(H0_READING_BUDGET)
    scalars: list[tuple] = []
    series: list[tuple] = []
    start = last_log_time = time.time()
    last_stop_poll = last_checkpoint = start
    window_loss = window_score = 0.0
    window_steps = 0
    step = 0
    status = "completed"
    batches = task.batches("train", train.batch_size)
    state = None

    def record(name, value):
        scalars.append((step, time.time(), name, float(value)))

    def flush():
        store.flush(run_id, scalars, series, heartbeat_step=step)
        scalars.clear()
        series.clear()

    def probe_through_time():
        probe.sync()
        norms = probe.through_time()
        record("grad/h0_norm", norms[0])  # the same reading as between probes, here for free
        record("grad/A_h_norm", probe.output_h0_norm())
        now = time.time()
        series.extend((step, now, "grad/h_t_norm", t, float(v)) for t, v in enumerate(norms))
        _, sigma = spectrum_metrics(model.cell.recurrent_matrix(), with_radius=False)
        series.extend((step, now, "sv/spectrum", i, float(v)) for i, v in enumerate(sigma))

    def evaluate():
        held_out = evaluator.split(model, "val")
        fitted = evaluator.split(model, "train")
        for key, value in held_out.items():
            record(f"val/{key}", value)
            record(f"gap/{key}", value - fitted[key])
        schedule.after_eval(held_out["loss"])

    step = 0
    next_eval, next_probe = eval_every, probe_every
    probe_through_time()  # the state at initialisation
    evaluate()
    flush()

    model.train()
    for step in range(1, train.steps + 1):
        x, y = next(batches)
        x, y = _to(x, y, device, dtype)
        h0 = model.cell.initial_state(x.shape[0], dtype=dtype, device=device)
        if stateful and state is not None and state.shape == h0.shape:
            h0 = state
        h0_probe = torch.zeros_like(h0).requires_grad_()  # its gradient is dL/dh0
        pred, h_last = model(x, h0 + h0_probe)
        state = h_last.detach() if stateful else None
        loss = task.loss(pred, y)
        penalty = model.cell.penalty()
        objective = loss + penalty
        optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(objective):
            status = "diverged"
            record("train/loss", objective.item())
            break
        objective.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        # Every step: one fused norm, enough to see a non-finite gradient; logged values use stable_norm.
        total_norm = torch.nn.utils.get_total_norm(grads).item()
        if not math.isfinite(total_norm):
            status = "diverged"
            record("train/loss", loss.item())
            record("grad/total_norm", total_norm)
            break
        is_log_step = step % log_every == 0 or step == train.steps
        logged_total_norm = _norm_of_norms(grads) if is_log_step else None  # before any clipping
        if train.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), train.clip_grad_norm)
        optimizer.step()
        with torch.no_grad():
            model.cell.after_optimizer_step()
        schedule.after_step(step)

        window_loss += loss.item()
        window_score += task.score(pred.detach(), y)
        window_steps += 1

        if is_log_step:
            now = time.time()
            steps_per_s = window_steps / max(now - last_log_time, 1e-9)
            record("train/loss", window_loss / window_steps)
            record(f"train/{metric}", window_score / window_steps)
            record("train/lr", schedule.value())
            if penalty.item() != 0.0:
                record("train/penalty", penalty.item())
            last_step = step == train.steps
            is_eval_step = step >= next_eval or last_step  # first log step at or after each multiple
            is_probe_step = step >= next_probe or last_step
            if not is_probe_step and h0_reading.allows(now - start):
                with h0_reading:
                    probe.sync()
                    record("grad/h0_norm", probe.h0_norm())
            record("grad/h0_norm_train", stable_norm(h0_probe.grad).item())
            recurrent_grads = [p.grad for p in recurrent if p.grad is not None]
            if recurrent_grads:  # none while W is frozen
                record("grad/recurrent_norm", _norm_of_norms(recurrent_grads))
            record("grad/total_norm", logged_total_norm)
            spectrum, _ = spectrum_metrics(model.cell.recurrent_matrix(), with_radius=is_eval_step)
            for name, value in spectrum.items():
                record(name, value)
            for name, value in model.cell.gate_values().items():
                record(f"gate/{name}", value)
            elapsed = now - start
            eta = (train.steps - step) / steps_per_s
            record("speed/steps_per_s", steps_per_s)
            record("progress/examples", step * train.batch_size)
            record("progress/elapsed_s", elapsed)
            record("progress/eta_s", eta)
            if is_eval_step:
                evaluate()
                next_eval = (step // eval_every + 1) * eval_every
            if is_probe_step:
                probe_through_time()
                next_probe = (step // probe_every + 1) * probe_every
            if last_step:  # in the same transaction as the step's other rows, for since_step pollers
                for key, value in evaluator.split(model, "test", whole=True).items():
                    record(f"test/{key}", value)
            if progress is not None:
                latest = {name: value for _, _, name, value in scalars}
                progress({"step": step, "total_steps": train.steps, "elapsed_s": elapsed, "eta_s": eta,
                          "steps_per_s": steps_per_s, **latest})
            flush()
            window_loss = window_score = 0.0
            window_steps = 0
            last_log_time = time.time()

        now = time.time()
        if now - last_stop_poll >= STOP_POLL_S:
            last_stop_poll = now
            if store.stop_requested(run_id):
                status = "stopped"
                break
        if now - last_checkpoint >= CHECKPOINT_EVERY_S:
            _save_checkpoint(store.checkpoint_path(run_id), config, model, optimizer, step)
            last_checkpoint = now

    flush()  # the rows of a diverged step
    if status != "diverged":
        _save_checkpoint(store.checkpoint_path(run_id), config, model, optimizer, step)
    error = f"loss or gradient became non-finite at step {step}" if status == "diverged" else None
    store.set_status(run_id, status, error=error)
    return status
