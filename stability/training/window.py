"""The steps since the last log, kept where the model trains: read once per log step.

    window = StepWindow(task, capacity=log_every)
    window.add(step, loss, objective, pred, y)           # every step: device ops only, no read
    window.add_norm(norm)                                # after backward: the step's gradient norm
    reading = window.read(extras={"penalty": p})         # a log step: one host-device transfer
    reading.loss, reading.score, reading.diverged        # means over the window; the first bad step

Note [One read per log step]
----------------------------
Every value a GPU computes and the host then looks at is a synchronisation: the host waits until
the GPU has run everything queued before it.  At small sizes a training step is a few hundred
tiny kernels, bound by how fast the host can launch them, and each wait stalls that pipeline (a
step that read its loss, its gradient's finiteness and its score, three ``.item()`` and two
``isfinite`` checks, ran at a fraction of the speed of one that reads nothing).  So a step only
*writes* its numbers, into a row of a small buffer on the device:

    row k = (loss_k, objective_k = loss_k + penalty_k, ‖g_k‖ (fused, every gradient), score_k)

and at a log step the trainer reads the window's rows (plus the few values the log step needs,
``extras``) in one transfer.  On the host, in step order, exactly as the per-step reads did:

* the first row whose objective or gradient norm is not finite is the step the run diverged at
  (its rows: ``train/loss`` = the objective, and ``grad/total_norm`` when the gradient's norm is
  infinite — an explosion, where a NaN tells nothing and is left out; or the loss and the norm when
  only the gradient was not finite); the rows logged before it stay, the steps after it are dropped;
* the steps of the window before that one are the explosion's evidence: each one's gradient norm
  (the fused one every step writes, taken before any clipping) is recorded as ``grad/total_norm``
  at its step, so a run that blows up between two log steps still shows the growth that ended it
  (SGORNN paper §3.1, Table 1: FastRNN's exploding gradient at T = 1000).  A norm of 0 is left out:
  a float32 sum of squares can underflow to it, and a false 0 is never recorded;
* ``train/loss`` is Σ loss_k / n and ``train/<metric>`` Σ score_k / n, summed in float64 in step
  order (the same numbers as adding up ``loss.item()`` step by step).

The score is the task's :meth:`~stability.tasks.base.Task.score` without its read: accuracy,
``(pred.argmax(-1) == y).float().mean()``, is computed on the device into the row; every other
built-in metric follows from the step's loss (mse and cross-entropy are the loss, perplexity
``exp(min(loss, 700))``, bpc ``loss / ln 2``: :meth:`~stability.tasks.base.Task.metric_from_loss`,
applied on the host to the loss read back), so the loss is not computed twice.  A task that
defines its own ``score`` keeps it, and pays its read every step.

The rows are float64 on a device that has float64, float32 on one that has not (a Mac's GPU, where
the model trains in float32, so nothing is rounded); they are read as Python floats either way
(:func:`read_numbers`), so the sums on the host are the same.

A window carried across a checkpoint is kept as its sums (``{"loss", "score", "steps"}``, the
format :class:`~stability.training.hooks.TrainingWindow` has always saved), to which the rows
after the resume are added in order, so a resumed run logs the same means.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch

from ..core import metric_names as names
from ..core.devices import device_facts, on_host
from ..tasks.base import Task

LOSS, OBJECTIVE, NORM, SCORE = range(4)


@dataclass
class WindowReading:
    """What a read of the window found: the sums over its steps (``steps`` of them, carried ones
    included) and their means, the ``extras`` asked for by name, and where it diverged: None, or
    the step, the rows to record there, and ``(step, row)`` of the window's earlier steps' gradient
    norms (Note [One read per log step])."""

    loss_sum: float
    score_sum: float
    steps: int
    extras: dict[str, float] = field(default_factory=dict)
    diverged: tuple[int, list[tuple[str, float]], list[tuple[int, tuple[str, float]]]] | None = None

    @property
    def loss(self) -> float:
        """Mean training loss over the window."""
        return self.loss_sum / self.steps if self.steps else math.nan

    @property
    def score(self) -> float:
        """Mean of the task's metric over the window's steps."""
        return self.score_sum / self.steps if self.steps else math.nan


def scoring(task) -> str:
    """How a window scores ``task``'s steps: ``"device"`` (accuracy, on the device), ``"loss"``
    (from each step's loss, on the host) or ``"own"`` (the task's own ``score``, read every step)."""
    method = getattr(getattr(task, "score", None), "__func__", None)
    if method is not Task.score:
        return "own"
    return "device" if task.metric == "accuracy" else "loss"


class StepWindow:
    """The training steps since the last read: their loss, objective, gradient norm and score on the
    device (Note [One read per log step]).  ``capacity``: the most steps between two reads (the
    log interval); the buffer grows if a window runs longer."""

    def __init__(self, task, capacity: int):
        self.task = task
        self.scoring = scoring(task)
        self.capacity = max(1, int(capacity))
        self._rows: torch.Tensor | None = None  # (capacity, 4), on the training device: row_dtype
        self._steps: list[int] = []
        self._own_scores: list[float] = []
        self._carried = {"loss": 0.0, "score": 0.0, "steps": 0}
        self._cached: WindowReading | None = None

    def __len__(self) -> int:
        """Steps added since the last reset (carried ones not counted)."""
        return len(self._steps)

    def add(self, step: int, loss: torch.Tensor, objective: torch.Tensor, pred: torch.Tensor,
            y: torch.Tensor) -> None:
        """A new step's row, written on the device (no read unless the task scores itself); its
        gradient norm follows (:meth:`add_norm`) once backward has run, 0 until then."""
        index = len(self._steps)
        rows = self._buffer(loss.device, index)
        _write(rows[index, LOSS], loss)
        _write(rows[index, OBJECTIVE], objective)
        rows[index, NORM].fill_(0.0)
        if self.scoring == "device":
            with torch.no_grad():
                rows[index, SCORE].copy_((pred.argmax(dim=-1) == y).float().mean())
        elif self.scoring == "own":
            self._own_scores.append(float(self.task.score(pred, y)))
        self._steps.append(step)
        self._cached = None

    def add_norm(self, norm: torch.Tensor) -> None:
        """The gradient norm of the step :meth:`add` wrote last."""
        _write(self._rows[len(self._steps) - 1, NORM], norm)
        self._cached = None

    def read(self, extras: dict[str, torch.Tensor | float] | None = None) -> WindowReading:
        """The window's means and divergence, and ``extras`` (0-d tensors or numbers), in one transfer."""
        extras = extras or {}
        if not extras and self._cached is not None:
            return self._cached
        values = self._transfer(extras)
        count = len(self._steps)
        rows = [values[4 * k:4 * k + 4] for k in range(count)]
        reading = self._summarise(rows)
        reading.extras = dict(zip(extras, values[4 * count:]))
        if not extras:
            self._cached = reading
        return reading

    def reset(self) -> None:
        """Empty the window (after a log step has recorded its means)."""
        self._steps, self._own_scores = [], []
        self._carried = {"loss": 0.0, "score": 0.0, "steps": 0}
        self._cached = None

    def state_dict(self) -> dict:
        """``{"loss": Σ loss, "score": Σ score, "steps": n}`` of the window so far (one read)."""
        reading = self.read()
        return {"loss": reading.loss_sum, "score": reading.score_sum, "steps": reading.steps}

    def load_state_dict(self, state: dict) -> None:
        self.reset()
        self._carried = {"loss": state["loss"], "score": state["score"], "steps": state["steps"]}

    # ------------------------------------------------------------ internals
    def _buffer(self, device: torch.device, index: int) -> torch.Tensor:
        rows = self._rows
        if rows is None or rows.device != device:
            rows = torch.full((self.capacity, 4), math.nan, dtype=row_dtype(device), device=device)
        elif index >= rows.shape[0]:
            rows = torch.cat([rows, torch.full_like(rows, math.nan)])
        self._rows = rows
        return rows

    def _transfer(self, extras: dict) -> list[float]:
        """The rows, then every extra, as numbers: the tensors in one transfer (:func:`read_numbers`)."""
        count = len(self._steps)
        tensors = [self._rows[:count]] if count else []
        tensors += [value for value in extras.values() if torch.is_tensor(value)]
        read = iter(read_numbers(tensors))
        values = [next(read) for _ in range(4 * count)]
        return values + [next(read) if torch.is_tensor(value) else float(value) for value in extras.values()]

    def _summarise(self, rows: list[list[float]]) -> WindowReading:
        loss_sum, score_sum, steps = self._carried["loss"], self._carried["score"], self._carried["steps"]
        for k, (loss, objective, norm, score) in enumerate(rows):
            if not math.isfinite(objective):
                bad = [(names.TRAIN_LOSS, objective)] + ([(names.TOTAL_NORM, norm)] if math.isinf(norm) else [])
            elif not math.isfinite(norm):
                bad = [(names.TRAIN_LOSS, loss), (names.TOTAL_NORM, norm)]
            else:
                loss_sum += loss
                score_sum += self._score(k, loss, score)
                steps += 1
                continue
            before = [(self._steps[j], (names.TOTAL_NORM, rows[j][NORM])) for j in range(k) if rows[j][NORM] > 0]
            return WindowReading(loss_sum, score_sum, steps, diverged=(self._steps[k], bad, before))
        return WindowReading(loss_sum, score_sum, steps)

    def _score(self, k: int, loss: float, device_score: float) -> float:
        if self.scoring == "device":
            return device_score
        if self.scoring == "own":
            return self._own_scores[k]
        return self.task.metric_from_loss(loss)


def row_dtype(device: torch.device) -> torch.dtype:
    """The dtype of a window's rows on ``device``: float64 where it has float64, else float32 (a Mac's
    GPU; a model there trains in float32, so its loss, score and fused norm are float32 already)."""
    return torch.float64 if device_facts(device).has(torch.float64) else torch.float32


def read_numbers(tensors: list[torch.Tensor]) -> list[float]:
    """Every entry of ``tensors`` (each flattened, in order) as a Python float (a float64 number):
    one transfer per device, the tensors concatenated there in their promoted dtype.  On a device
    without float64 (MPS) each dtype is concatenated apart, in its own dtype, and read inside
    :func:`~stability.core.devices.on_host`: float32 values widen exactly on the host."""
    groups: dict[tuple, list[int]] = {}
    for index, tensor in enumerate(tensors):
        has_float64 = device_facts(tensor.device).has(torch.float64)
        groups.setdefault((tensor.device, None if has_float64 else tensor.dtype), []).append(index)
    values: list[list[float]] = [[] for _ in tensors]
    for (_, separate), indices in groups.items():
        with on_host() if separate is not None else contextlib.nullcontext():
            read = iter(torch.cat([tensors[index].detach().reshape(-1) for index in indices]).tolist())
        for index in indices:
            values[index] = [next(read) for _ in range(tensors[index].numel())]
    return [value for part in values for value in part]


def _write(cell: torch.Tensor, value) -> None:
    """``value`` (a 0-d tensor, or a number: then a kernel argument, nothing copied from the host) into ``cell``."""
    if torch.is_tensor(value):
        cell.copy_(value.detach())
    else:
        cell.fill_(value)
