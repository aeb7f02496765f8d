"""The trainer's API: a model built outside the registries, train_run without a store, hook state by
``state_key`` across resumes (and old format-2 checkpoints), ``on_exception``."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from stability import cells, tasks
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.execution import lifecycle
from stability.models.sequence import SequenceModel
from stability.training import hooks
from stability.training.checkpoints import ResumeError, load_checkpoint
from stability.execution.lifecycle import train_run
from stability.training.sinks import MemorySink
from stability.training.trainer import Trainer
from stopping import StopAt

ROOT = Path(__file__).resolve().parent.parent


class WrittenHereElman(nn.Module):
    """h_t = tanh(W_in x_t + W h_{t-1}): a cell written for this test, never registered, that keeps
    the cell contract (stability/cells/base.py) by hand."""

    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.state_size = self.output_size = hidden_size
        self.weight_in = nn.Linear(input_size, hidden_size)
        self.weight_hh = nn.Parameter(torch.randn(hidden_size, hidden_size) / math.sqrt(hidden_size))
        self.after_steps = 0

    def initial_state(self, batch_size, *, dtype=None, device=None):
        return torch.zeros(batch_size, self.state_size, dtype=dtype or self.weight_hh.dtype, device=device)

    def forward(self, x, h0=None, state_probe=None):
        h = self.initial_state(x.shape[0], dtype=x.dtype, device=x.device) if h0 is None else h0
        outputs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.weight_in(x[:, t]) + h @ self.weight_hh.T)
            if state_probe is not None:
                h = h + state_probe[:, t]
            outputs.append(h)
        return torch.stack(outputs, dim=1), h

    def recurrent_matrix(self):
        return self.weight_hh

    def recurrent_parameters(self):
        return [self.weight_hh]

    def gate_values(self):
        return {}

    def penalty(self):
        return torch.zeros((), dtype=self.weight_hh.dtype)

    def after_optimizer_step(self):
        self.after_steps += 1


class RecurrentMatrixAtLogSteps(hooks.Hook):
    """W as the readings of each log step (and of step 0) see it."""

    def __init__(self):
        self.matrices = {}

    def on_start(self, trainer, resumed):
        self.matrices[trainer.step] = trainer.model.cell.recurrent_matrix().detach().double().clone()

    def on_log(self, trainer, result):
        self.matrices[trainer.step] = trainer.model.cell.recurrent_matrix().detach().double().clone()


def test_a_model_built_outside_the_registry_trains_with_real_readings():
    task = tasks.build("adding", seed=0, seq_len=5)
    torch.manual_seed(0)
    cell = WrittenHereElman(task.input_size, 12)
    assert all(cells.get_class(name) is not WrittenHereElman for name in cells.available())
    model = SequenceModel(cell, task.output_size, task.target_mode)
    seen = RecurrentMatrixAtLogSteps()
    train = TrainConfig(steps=300, batch_size=32, lr=2e-2, log_every=20, eval_every=100, probe_every=100,
                        eval_examples=64, probe_examples=8, device="cpu")
    result = Trainer(model, task, train, hooks=[seen]).fit()

    assert result.status == "completed" and result.error is None and result.run_id is None
    assert cell.after_steps == 300
    rows = result.metrics.pivot(index="step", columns="name", values="value")
    assert sorted(seen.matrices) == list(range(0, 301, 20)) == sorted(rows["sv/min"].dropna().index)
    for step, matrix in seen.matrices.items():
        sigma = torch.linalg.svdvals(matrix).numpy()  # largest first
        assert rows.loc[step, "sv/max"] == pytest.approx(sigma[0], rel=1e-9)
        assert rows.loc[step, "sv/min"] == pytest.approx(sigma[-1], rel=1e-9)
        assert rows.loc[step, "sv/margin"] == pytest.approx(np.abs(sigma - 1).max(), rel=1e-9)
        assert rows.loc[step, "sv/condition"] == pytest.approx(sigma[0] / sigma[-1], rel=1e-9)
    assert not torch.equal(seen.matrices[0], seen.matrices[300])  # W trained
    losses = rows["train/loss"].dropna()
    assert losses.iloc[-3:].mean() < 0.5 * losses.iloc[:3].mean()  # it learns the adding task
    assert rows.loc[300, "val/loss"] < 0.5 * task.baseline  # it adds, beyond predicting the mean
    flow = result.series[result.series.name == "grad/h_t_norm"]
    assert sorted(set(flow.step)) == [0, 100, 200, 300] and len(flow[flow.step == 300]) == 6  # t = 0..T
    first = flow[(flow.step == 300) & (flow["index"] == 0)].value.item()
    assert first == pytest.approx(rows.loc[300, "grad/h0_norm"], rel=1e-12)
    assert (rows["grad/recurrent_norm"].dropna() > 0).all()


def test_train_run_without_a_store_returns_its_rows_in_a_plain_process():
    program = (
        "from stability import train_run\n"
        "from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig\n"
        "config = RunConfig(CellConfig('rnn', 8), TaskConfig('adding', {'seq_len': 6}),\n"
        "                   TrainConfig(steps=20, batch_size=8, log_every=5, eval_examples=16, probe_examples=4))\n"
        "result = train_run(config)\n"
        "import json, pandas\n"
        "assert isinstance(result.metrics, pandas.DataFrame)\n"
        "print(json.dumps({'status': result.status, 'run_id': result.run_id,\n"
        "                  'columns': list(result.metrics.columns),\n"
        "                  'steps': {name: sorted(set(rows.step.tolist()))\n"
        "                            for name, rows in result.metrics.groupby('name')}}))\n")
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["status"] == "completed" and answer["run_id"] is None
    assert {"step", "name", "value"} <= set(answer["columns"])
    assert answer["steps"]["train/loss"] == [0, 5, 10, 15, 20]  # step 0: training/step_zero.py
    assert answer["steps"]["sv/min"] == [0, 5, 10, 15, 20]
    assert 0 in answer["steps"]["grad/h0_norm"] and 20 in answer["steps"]["grad/h0_norm"]


def tiny(**train):
    defaults = dict(steps=40, batch_size=16, log_every=4, eval_every=8, probe_every=12, eval_examples=32,
                    probe_examples=8, lr_schedule="plateau", lr_gamma=0.5)
    defaults.update(train)
    config = RunConfig(CellConfig("rnn", 8, {"h0": "noisy", "h0_noise_std": 0.3}),
                       TaskConfig("adding", {"seq_len": 10, "train_size": 48}), TrainConfig(**defaults))
    return config


def test_train_run_with_a_store_and_no_run_id_creates_the_run(store):
    config = tiny(steps=8)
    config.name = "made here"
    result = train_run(config, store)
    run = store.record(result.run_id, latest=False)
    assert run.status == "completed" and run.name == "made here" and run.raw_config == config.to_dict()
    assert run.pid == os.getpid()  # claimed: a run queue sharing the store leaves it alone
    stored = store.metrics(result.run_id)
    pd.testing.assert_frame_equal(result.metrics, stored[["step", "wall_time", "name", "value"]])
    assert sorted(set(result.series.name)) == ["grad/h_t_norm", "sv/spectrum"]
    assert len(result.series) == len(store.series(result.run_id, "grad/h_t_norm")) + len(
        store.series(result.run_id, "sv/spectrum"))
    with pytest.raises(ValueError, match="give the store too"):
        train_run(config, run_id=result.run_id)
    with pytest.raises(RuntimeError, match="hook failed at step 4"):
        train_run(config, store, hooks=[RaiseAt(4, "on_log")])
    failed = max(store.records(), key=lambda run: run.id)
    assert failed.id > result.run_id and failed.status == "failed"  # nobody else knows its id to settle it
    assert failed.error == "RuntimeError: hook failed at step 4"
    assert store.metrics(failed.id, ["train/loss"]).step.tolist() == [0, 4]


def test_a_hook_logs_with_log_and_the_old_record_names_still_log():
    """Trainer.log/log_series (issue 34, item 5: a store's ``record`` is a RunRecord); a hook written with
    record/record_series keeps working."""
    assert Trainer.record is Trainer.log and Trainer.record_series is Trainer.log_series


# ------------------------------------------------------------------ hook state across resumes
class StepsSeen(hooks.Hook):
    """A hook with state: counts the steps it has seen, and records the count at log steps."""

    def __init__(self):
        self.seen = 0

    def on_step(self, trainer, result):
        self.seen += 1

    def on_log(self, trainer, result):
        trainer.log("custom/steps_seen", self.seen)

    def state_dict(self):
        return {"seen": self.seen}

    def load_state_dict(self, state):
        self.seen = state["seen"]


COMPARED = ["train/loss", "train/lr", "val/loss", "gap/loss", "grad/total_norm", "sv/max", "test/loss",
            "custom/steps_seen"]


def by_step(frame):
    frame = frame[frame.name.isin(COMPARED)]
    assert not frame.duplicated(["step", "name"]).any(), "a step was logged twice"
    return frame.set_index(["name", "step"])["value"].sort_index()


def test_a_hooks_state_survives_a_resume_that_adds_a_default_hook_before_it(store):
    """Resumed with a progress line, the default hooks gain a ProgressCallback ahead of the user's
    hooks; their state still reaches them (keyed by state_key, not by position)."""
    config = tiny()
    whole = train_run(config, store, hooks=[StepsSeen()])
    stopped = train_run(config, store, hooks=[StepsSeen(), StopAt(18)])
    assert stopped.status == "stopped"
    lines = []
    resumed = train_run(config, store, stopped.run_id, hooks=[StepsSeen(), StopAt(18)], progress=lines.append,
                        resume=True)
    assert resumed.status == "completed" and [line["step"] for line in lines] == [20, 24, 28, 32, 36, 40]
    pd.testing.assert_series_equal(by_step(resumed.metrics), by_step(whole.metrics))
    assert by_step(resumed.metrics)["custom/steps_seen"].to_dict() == {s: float(s) for s in range(4, 41, 4)}


def test_a_run_kept_in_memory_resumes_from_its_checkpoint_folder(tmp_path):
    config = tiny()
    whole = train_run(config, hooks=[StepsSeen()])
    sink = MemorySink(tmp_path / "checkpoints")
    assert train_run(config, hooks=[sink, StopAt(18), StepsSeen()]).status == "stopped"
    resumed = train_run(config, hooks=[sink, StepsSeen()], resume=True)
    pd.testing.assert_series_equal(by_step(resumed.metrics), by_step(whole.metrics))
    with pytest.raises(ResumeError, match="the run keeps no checkpoints to resume from"):
        train_run(config, resume=True)


def test_two_hooks_with_one_state_key_are_refused():
    config = tiny()
    with pytest.raises(ValueError, match="two hooks have the state key 'StepsSeen'"):
        train_run(config, hooks=[StepsSeen(), StepsSeen()])
    with pytest.raises(ValueError, match="one sink; got MemorySink, MemorySink"):
        train_run(config, hooks=[MemorySink(), MemorySink()])
    keys = {hooks.Pruning(None, "val/loss").state_key, hooks.Pruning(None, "val/mse").state_key}
    assert len(keys) == 2  # one Pruning per metric is allowed


OLD_DEFAULT_HOOKS = ["TrainingWindow", "GradientReadings", "Speed", "Evaluation", "ProbeThroughTime",
                     "StopRequests", "Checkpoints"]


def as_format_2(checkpoint, user_hooks):
    """The checkpoint as the previous version's save_checkpoint wrote it: format 2, every hook's state
    keyed "<position>:<ClassName>" over its default hooks then the run's own."""
    states = checkpoint["hooks"]
    order = OLD_DEFAULT_HOOKS + [type(hook).__name__ for hook in user_hooks]
    keyed = {f"{i}:{name}": states.get(name, {}) for i, name in enumerate(order)}
    return {"format": 2, "config": checkpoint["config"], "step": checkpoint["step"], "model": checkpoint["model"],
            "optimizer": checkpoint["optimizer"], "schedule": checkpoint["schedule"], "rng": checkpoint["rng"],
            "carried": checkpoint["carried"], "elapsed": checkpoint["elapsed"], "cadence": checkpoint["cadence"],
            "hooks": keyed}


def test_a_format_2_checkpoint_resumes_exactly(store):
    config = tiny()
    whole = train_run(config, store, hooks=[StepsSeen()])
    user_hooks = [StopAt(18), StepsSeen()]
    stopped = train_run(config, store, hooks=user_hooks)
    path = store.checkpoint_path(stopped.run_id)
    old = as_format_2(load_checkpoint(path), user_hooks)
    assert old["hooks"]["8:StepsSeen"] == {"seen": 18} and old["hooks"]["0:TrainingWindow"]["steps"] == 2
    torch.save(old, path)
    lifecycle.check_resumable(store, stopped.run_id)  # the runner's check accepts it
    resumed = train_run(config, store, stopped.run_id, hooks=[StepsSeen()], resume=True, keep_checkpoint=True)
    pd.testing.assert_series_equal(by_step(resumed.metrics), by_step(whole.metrics))
    assert load_checkpoint(path)["format"] == 3

    torch.save({**old, "format": 1}, path)
    with pytest.raises(ResumeError, match=f"run {stopped.run_id}'s checkpoint was written by a version that "
                                          "cannot be resumed exactly"):
        train_run(config, store, stopped.run_id, resume=True)


# ------------------------------------------------------------------ on_exception
class RaiseAt(hooks.Hook):
    def __init__(self, step, where):
        self.step, self.where, self.seen = step, where, []

    def on_step(self, trainer, result):
        if self.where == "on_step" and result.step == self.step:
            raise RuntimeError(f"hook failed at step {result.step}")

    def on_log(self, trainer, result):
        if self.where == "on_log" and result.step == self.step:
            raise RuntimeError(f"hook failed at step {result.step}")

    def on_exception(self, trainer, error):
        self.seen.append(error)


class Witness(hooks.Hook):
    def __init__(self, name):
        self.name, self.seen = name, []

    @property
    def state_key(self):
        return f"Witness[{self.name}]"

    def on_exception(self, trainer, error):
        self.seen.append(error)
        trainer.log(f"custom/{self.name}_saw_failure_at", trainer.step)


def test_a_failing_hook_is_seen_once_by_every_hook_and_the_store_keeps_the_rows(store):
    config = tiny()
    run_id = store.create_run(config.to_dict())
    raiser, first, second = RaiseAt(22, "on_step"), Witness("first"), Witness("second")
    with pytest.raises(RuntimeError, match="hook failed at step 22") as caught:
        train_run(config, store, run_id, hooks=[first, raiser, second])
    assert [len(hook.seen) for hook in (raiser, first, second)] == [1, 1, 1]
    assert all(hook.seen[0] is caught.value for hook in (raiser, first, second))
    # changed with the run lifecycle: train_run claims the run, so it settles it too (it was left
    # 'running', claimed by a live process that no longer trained it, for the caller to settle)
    assert store.record(run_id, latest=False).status == "failed"
    assert store.record(run_id, latest=False).error == "RuntimeError: hook failed at step 22"
    rows = store.metrics(run_id)
    assert rows[rows.name == "train/loss"].step.max() == 20  # up to the last flush before step 22
    assert rows[rows.name == "custom/first_saw_failure_at"].value.tolist() == [22.0]
    assert rows[rows.name == "custom/second_saw_failure_at"].value.tolist() == [22.0]


def test_a_failure_in_the_middle_of_a_log_step_keeps_its_rows_in_memory():
    config = tiny()
    sink, raiser = MemorySink(), RaiseAt(24, "on_log")
    with pytest.raises(RuntimeError, match="hook failed at step 24"):
        train_run(config, hooks=[sink, raiser])
    assert len(raiser.seen) == 1
    rows = sink.metrics()
    assert isinstance(rows, pd.DataFrame)
    logged = rows[rows.name == "train/loss"]
    assert logged.step.tolist() == [0, 4, 8, 12, 16, 20, 24]  # step 24's rows, recorded before the failure
    assert 24 in set(rows[rows.name == "val/loss"].step)


class FailingLoss:
    """A task whose training loss raises at the given step (a step, not a hook, fails); the loss of
    the evaluation (32 examples) and probe (8) batches is left alone.  The step-0 reading
    (stability.training.step_zero) computes the first training-batch loss, at step 0."""

    def __init__(self, task, step, batch_size):
        self.task, self.step, self.batch_size, self.steps = task, step, batch_size, -1

    def __getattr__(self, name):
        return getattr(self.task, name)

    def loss(self, pred, y):
        if pred.shape[0] == self.batch_size:
            self.steps += 1
            if self.steps == self.step:
                raise FloatingPointError("the loss could not be computed")
        return self.task.loss(pred, y)


def test_a_failing_step_reaches_every_hook_once():
    config = tiny()
    torch.manual_seed(0)
    task = tasks.build("adding", seed=0, seq_len=10, train_size=48)
    model = SequenceModel(cells.build("rnn", task.input_size, 8), task.output_size, task.target_mode)
    sink, first = MemorySink(), Witness("first")
    trainer = Trainer(model, FailingLoss(task, step=14, batch_size=16), config, hooks=[sink, first])
    with pytest.raises(FloatingPointError, match="could not be computed"):
        trainer.fit()
    assert len(first.seen) == 1 and trainer.step == 14
    rows = sink.metrics()
    assert rows[rows.name == "custom/first_saw_failure_at"].value.tolist() == [14.0]
    assert rows[rows.name == "train/loss"].step.tolist() == [0, 4, 8, 12]
