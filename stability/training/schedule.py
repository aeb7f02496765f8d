"""The learning rate over a run: the schedules of :data:`stability.config.LR_SCHEDULES`."""
from __future__ import annotations

import math

import torch

from ..config import TrainConfig


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

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the schedule (the plateau schedule's memory)."""
        return {"best_val": self.best_val, "bad_evals": self.bad_evals}

    def load_state_dict(self, state: dict) -> None:
        self.best_val, self.bad_evals = state["best_val"], state["bad_evals"]
