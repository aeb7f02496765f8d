"""Evaluation on fixed sets: the held-out splits, and a fixed training set evaluated the same way
for the train/held-out gap (SGORNN paper Fig. 4)."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ..config import TrainConfig
from .batches import batch_on, compact_batches, take, to_device
from .window import read_numbers, scoring

EVAL_BATCH_SIZE = 256


class Evaluator:
    """Fixed evaluation sets: val (and test) from the task, and a fixed training set
    of the same size evaluated the same way, for the train/held-out gap."""

    def __init__(self, task, train: TrainConfig, device: torch.device, dtype: torch.dtype):
        self.task, self.device, self.dtype = task, device, dtype
        self.examples = train.eval_examples
        self.batch_size = min(EVAL_BATCH_SIZE, self.examples)
        self.train_batches = self._fixed_training_batches(train.seed)

    def _fixed_training_batches(self, seed: int) -> list:
        task, count = self.task, self.examples
        if getattr(task, "stateful", False):
            return list(take(compact_batches(task, "train", self.batch_size), math.ceil(count / self.batch_size)))
        try:
            arrays = task.fixed_split("train")
        except ValueError:  # an endless stream of fresh examples: draw a fixed sample of it
            arrays = task.sample(np.random.default_rng([seed, 7919]), count)
        arrays = {key: value[:count] for key, value in arrays.items()}
        size = len(next(iter(arrays.values())))
        return [task.encode({key: value[start:start + self.batch_size] for key, value in arrays.items()})
                for start in range(0, size, self.batch_size)]

    def split(self, model: nn.Module, split: str, whole: bool = False) -> dict[str, float]:
        if split == "train":
            return self._evaluate(model, self.train_batches, encoded=not getattr(self.task, "stateful", False))
        batches = compact_batches(self.task, split, self.batch_size)
        if not whole:
            batches = take(batches, math.ceil(self.examples / self.batch_size))
        return self._evaluate(model, batches)

    def _evaluate(self, model: nn.Module, batches, encoded: bool = False) -> dict[str, float]:
        """The split's ``{"loss", metric}`` over ``batches`` (``encoded``: made by ``task.encode``, else
        by :func:`compact_batches`), every batch's loss and score read from the device at once at the end."""
        stateful = getattr(self.task, "stateful", False)
        mode = scoring(self.task)
        losses, scores, counts, state = [], [], [], None
        was_training = model.training
        model.eval()
        with torch.inference_mode():
            for batch in batches:
                x, y = to_device(*batch, self.device, self.dtype) if encoded else \
                    batch_on(self.task, batch, self.device, self.dtype)
                if state is not None and state.shape[0] != x.shape[0]:
                    state = None
                pred, h_last = model(x, state)
                state = h_last if stateful else None
                loss, score = self.batch_values(pred, y)
                losses.append(loss)
                if score is not None:
                    scores.append(score)
                elif mode == "own":
                    scores.append(float(self.task.score(pred, y)))
                counts.append(y.numel())
        model.train(was_training)
        if not counts:
            return self.task.summarize([])  # ValueError: nothing to evaluate
        values = read_numbers(losses + (scores if mode == "device" else []))  # the one read, as float64 numbers
        return self.summary(values, counts, scores if mode == "own" else None)

    def batch_values(self, pred: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A batch's loss, shape (1,), and its score where the task scores on the device (its accuracy, as
        Task.score computes it), else None; nothing read."""
        loss = self.task.loss(pred, y).reshape(1)
        if scoring(self.task) != "device":
            return loss, None
        return loss, (pred.argmax(dim=-1) == y).float().mean().reshape(1)

    def summary(self, values: list[float], counts: list[int], own_scores: list[float] | None = None
                ) -> dict[str, float]:
        """The split's ``{"loss", metric}`` from ``values`` (each batch's loss, then, where the task scores on
        the device, each batch's score: :func:`read_numbers` of :meth:`batch_values`), the batches' target
        counts, and ``own_scores`` where the task scores on the host."""
        losses, device_scores = values[:len(counts)], values[len(counts):]
        mode = scoring(self.task)
        if mode == "loss":  # the metric follows from each batch's loss (Task.score does the same)
            scores = [self.task.metric_from_loss(loss) for loss in losses]
        elif mode == "device":
            scores = device_scores
        else:
            scores = own_scores
        return self.task.summarize(zip(losses, scores, counts))
