"""From a run's config to what it trains: the task, the model (a registered cell and its readout) and
the optimizer.  :func:`stability.training.run.build_and_train` builds the task and the model here and hands
them to :class:`stability.training.trainer.Trainer`, which builds its optimizer here too; a model built
any other way trains the same (the Trainer's docstring gives the contract it relies on).

    torch.manual_seed(config.train.seed)            # the model's initial weights follow the seed
    task = build_task(config)
    model = build_model(config, task)
    optimizer = build_optimizer(model, config)
"""
from __future__ import annotations

import torch
from torch import nn

from .. import cells, tasks
from ..config import RunConfig, TrainConfig
from ..models import optimizers
from ..models.sequence import SequenceModel, parameter_groups


def build_task(config: RunConfig):
    """``config.task`` from the task registry, seeded by ``config.train.seed``."""
    return tasks.build(config.task.name, seed=config.train.seed, **config.task.options)


def build_model(config: RunConfig, task) -> SequenceModel:
    """``config.cell`` from the cell registry, sized for ``task``, with its linear readout."""
    cell = cells.build(config.cell.name, task.input_size, config.cell.hidden_size, **config.cell.options)
    return SequenceModel(cell, task.output_size, task.target_mode)


def build_optimizer(model: nn.Module, config: RunConfig | TrainConfig) -> torch.optim.Optimizer:
    """``train.optimizer`` (:mod:`stability.models.optimizers`) over :func:`parameter_groups`, with
    ``train`` the config's training section (or a :class:`TrainConfig` itself)."""
    train = config.train if isinstance(config, RunConfig) else config
    return optimizers.build_optimizer(parameter_groups(model, train.lr), train.optimizer, train.lr,
                                      weight_decay=train.weight_decay)
