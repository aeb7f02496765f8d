"""Step 0: a run's first stored rows are the readings of the model as built, before its first update
(stability.training.step_zero), checked against a computation of the same numbers by hand."""
import math

import pytest
import torch

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.execution.lifecycle import train_run
from stability.runs.store import RunStore
from stability.training.build import build_model, build_task
from stability.training.hooks import Hook
from stability.training.step_zero import step_zero_readings


def tiny(cell="rnn", **cell_options):
    train = TrainConfig(steps=12, batch_size=16, log_every=4, eval_every=8, probe_every=8, eval_examples=32,
                        probe_examples=8, dtype="float64", lr=1e-2)
    return RunConfig(cell=CellConfig(cell, 8, cell_options), task=TaskConfig("adding", {"seq_len": 10}), train=train)


def by_hand(config):
    """train/loss and ‖∂L/∂h0‖ of the model as train_run builds it, on the task's first training batch."""
    torch.manual_seed(config.train.seed)
    task = build_task(config)
    model = build_model(config, task).double().train()
    x, y = next(task.batches("train", config.train.batch_size))
    x, y = x.double(), y.double()
    h0 = torch.zeros(x.shape[0], 8, dtype=torch.float64, requires_grad=True)
    pred, _ = model(x, h0)
    loss = task.loss(pred, y)
    (h0_grad,) = torch.autograd.grad(loss, [h0])
    return loss.item(), torch.linalg.vector_norm(h0_grad).item()


def read_elsewhere(path, run_id):
    """The run's metric rows as a second connection to the store reads them."""
    other = RunStore(path)
    try:
        return other.metrics(run_id)
    finally:
        other.close()


class SeenBeforeStepOne(Hook):
    """At step 1 (after the step-0 flush, before the first log step), what a second connection to the
    store reads of the run."""

    def __init__(self, path, run_id):
        self.path, self.run_id, self.seen = path, run_id, None

    def on_step(self, trainer, result):
        if trainer.step == 1:
            self.seen = read_elsewhere(self.path, self.run_id)


def trained_with(witness_class, config, tmp_path):
    """(what the witness saw, the run's stored rows) of ``config`` trained into a new store with that hook."""
    store = RunStore(tmp_path / "runs.db")
    try:
        run_id = store.create_run(config.to_dict())
        witness = witness_class(tmp_path / "runs.db", run_id)
        assert train_run(config, store, run_id, hooks=[witness]).status == "completed"
        return witness.seen, store.metrics(run_id)
    finally:
        store.close()


def test_a_runs_first_stored_rows_are_its_step_zero_readings(tmp_path):
    config = tiny()
    seen, metrics = trained_with(SeenBeforeStepOne, config, tmp_path)
    assert len(seen) and set(seen["step"]) == {0}  # stored before the first update's step was logged
    at_zero = seen.set_index("name")["value"]
    for name in ("train/loss", "train/mse", "grad/h0_norm", "grad/h0_norm_train", "grad/total_norm",
                 "grad/recurrent_norm", "sv/min", "sv/max", "val/loss"):
        assert name in at_zero.index and math.isfinite(at_zero[name]), name
    loss, h0_norm = by_hand(config)
    assert at_zero["train/loss"] == pytest.approx(loss, rel=1e-12)
    assert at_zero["train/mse"] == pytest.approx(loss, rel=1e-12)  # the adding task's metric is its loss
    assert at_zero["grad/h0_norm_train"] == pytest.approx(h0_norm, rel=1e-10)
    assert sorted(metrics.loc[metrics["name"] == "train/loss", "step"]) == [0, 4, 8, 12]


class SeenAtStart(SeenBeforeStepOne):
    """At on_start, what a second connection to the store reads of the run."""

    def on_step(self, trainer, result):
        pass

    def on_start(self, trainer, resumed):
        self.seen = read_elsewhere(self.path, self.run_id)


def test_step_zeros_training_rows_are_stored_before_the_hooks_start(tmp_path):
    """Note [Step 0 first]: the loss a page draws first is committed on its own, before the evaluation and
    the probe of step 0 (which follow in a second transaction at the same step)."""
    config = tiny()
    seen, metrics = trained_with(SeenAtStart, config, tmp_path)
    at_zero, early = metrics.query("step == 0"), set(seen["name"])
    assert set(seen["step"]) == {0} and "train/loss" in early and "grad/h0_norm_train" in early
    assert not early & {"val/loss", "grad/h0_norm", "sv/min"}  # the hooks' readings came after on_start
    assert {"val/loss", "grad/h0_norm", "sv/min"} <= set(at_zero["name"]) and early <= set(at_zero["name"])
    assert at_zero.query("name == 'train/loss'")["value"].iat[0] == pytest.approx(by_hand(config)[0], rel=1e-12)


def test_the_step_zero_reading_takes_nothing_from_the_run():
    """A cell with a random h0 draws it under a forked generator, and no parameter keeps a gradient:
    the run after the reading trains as it would have without it."""
    config = tiny(h0="noisy", h0_noise_std=0.5)
    torch.manual_seed(0)
    task = build_task(config)
    model = build_model(config, task).double().train()
    batch = next(task.batches("train", 16))
    before = torch.get_rng_state()
    readings = step_zero_readings(model, task, batch, torch.device("cpu"), torch.float64,
                                  model.cell.recurrent_parameters())
    assert torch.equal(torch.get_rng_state(), before)
    assert all(parameter.grad is None for parameter in model.parameters())
    assert readings["grad/h0_norm_train"] > 0 and readings["train/loss"] > 0


def test_a_frozen_recurrent_matrix_has_no_recurrent_norm_at_step_zero():
    config = tiny()
    torch.manual_seed(0)
    task = build_task(config)
    model = build_model(config, task).double().train()
    for parameter in model.cell.recurrent_parameters():
        parameter.requires_grad_(False)
    readings = step_zero_readings(model, task, next(task.batches("train", 16)), torch.device("cpu"),
                                  torch.float64, model.cell.recurrent_parameters())
    assert "grad/recurrent_norm" not in readings and readings["grad/total_norm"] > 0
