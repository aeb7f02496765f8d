"""Evaluation on fixed sets: the held-out splits, and a fixed training set evaluated the same way
for the train/held-out gap (SGORNN paper Fig. 4)."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ..config import TrainConfig
from .batches import take, to_device

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
            return list(take(task.batches("train", self.batch_size), math.ceil(count / self.batch_size)))
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
            batches = self.train_batches
        else:
            batches = self.task.batches(split, self.batch_size)
            if not whole:
                batches = take(batches, math.ceil(self.examples / self.batch_size))
        return self._evaluate(model, batches)

    def _evaluate(self, model: nn.Module, batches) -> dict[str, float]:
        stateful = getattr(self.task, "stateful", False)
        results, state = [], None
        was_training = model.training
        model.eval()
        with torch.inference_mode():
            for x, y in batches:
                x, y = to_device(x, y, self.device, self.dtype)
                if state is not None and state.shape[0] != x.shape[0]:
                    state = None
                pred, h_last = model(x, state)
                state = h_last if stateful else None
                results.append((self.task.loss(pred, y).item(), self.task.score(pred, y), y.numel()))
        model.train(was_training)
        return self.task.summarize(results)
