"""A training step as a GPU runs it, checked on the CPU: no host-device synchronisation between log
steps and one at a log step (counted with a TorchFunctionMode), a divergence recorded at its step,
the scan's gates kept on the device, PTB's one-hot built where the model trains, one float32
precision for every cell, and the determinism switch reaching the process that trains."""
from __future__ import annotations

import collections
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from stability import cells, tasks
from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig
from stability.core import determinism, precision
from stability.runs.status import TERMINAL
from stability.runs.store import RunStore
from stability.training import hooks as hooks_module
from stability.training.batches import batch_on, compact_batches, to_device
from stability.training.build import build_model, build_task
from stability.training.run import build_and_train
from stability.training.sinks import MemorySink
from stability.training.trainer import Trainer
from stability.training.window import StepWindow
from stability.workers import scheduler
from stopping import StopAt

REPO = Path(__file__).resolve().parent.parent

# Tensor methods that hand a value computed on the device to the host: on a GPU each waits for
# every kernel queued before it.
READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__float__,
         torch.Tensor.__int__, torch.Tensor.__index__, torch.Tensor.__complex__, torch.Tensor.numpy,
         torch.Tensor.cpu}


@pytest.fixture(autouse=True)
def _default_algorithms():
    yield
    determinism.use_deterministic_algorithms(False)  # no other test runs in deterministic mode


def tiny(cell="rnn", task="adding", task_options=None, **train):
    defaults = dict(steps=23, batch_size=8, log_every=5, eval_every=10, probe_every=20, eval_examples=16,
                    probe_examples=4)
    defaults.update(train)
    return RunConfig(cell=CellConfig(cell, 8), task=TaskConfig(task, task_options or {"seq_len": 10}),
                     train=TrainConfig(**defaults))


@pytest.fixture
def ptb_dir(tmp_path, monkeypatch):
    """A small PTB-shaped corpus, its files trusted (as tests/test_tasks_loaders.py does)."""
    import dataclasses

    from stability.tasks import ptb
    from stability.tasks.download import md5sum

    folder = tmp_path / "ptb"
    folder.mkdir()
    words = [f"w{i}" for i in range(30)] + ["<unk>", "N"]
    generator = torch.Generator().manual_seed(0)
    for split, (filename, _) in ptb.FILES.items():
        lines = [" " + " ".join(words[int(i)] for i in torch.randint(len(words), (8,), generator=generator)) + " "
                 for _ in range(60 if split == "train" else 20)]
        (folder / filename).write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(ptb, "REMOTES", {key: dataclasses.replace(remote, md5=md5sum(folder / remote.filename))
                                         for key, remote in ptb.REMOTES.items()})
    monkeypatch.setenv("STABILITY_OFFLINE", "1")
    return tmp_path


class ReadCounter(TorchFunctionMode):
    """Counts the reads of :data:`READS` by where the trainer is: ``("step", n)`` for the training
    step n with every hook's ``on_step``, ``(hook, n)`` for a hook's ``on_log``.  The optimizer's
    step counts are left out: torch keeps them on the host even for a model on a GPU (unless
    ``capturable``), so reading them waits for nothing."""

    def __init__(self, trainer: Trainer):
        super().__init__()
        self.trainer, self.where = trainer, ("setup", 0)
        self.counts: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in READS and not (args and self._host_step_count(args[0])):
            self.counts[self.where] += 1
        return func(*args, **(kwargs or {}))

    def _host_step_count(self, tensor) -> bool:
        return any(tensor is state.get("step") for state in self.trainer.optimizer.state.values())


def count_reads(config: RunConfig) -> tuple[collections.Counter, list[int]]:
    """Train ``config`` under a :class:`ReadCounter`; the counts and the log steps."""
    task = build_task(config)
    trainer = Trainer(build_model(config, task), task, config)
    counter = ReadCounter(trainer)
    step, logs = trainer._train_step, []

    def counted_step(batch):
        counter.where = ("step", trainer.step)
        return step(batch)

    trainer._train_step = counted_step
    for hook in trainer.hooks:
        if hooks_module.overrides(hook, "on_log"):
            def counted_log(trainer_, result, method=hook.on_log, name=type(hook).__name__):
                counter.where = (name, trainer_.step)
                if name == "TrainingWindow":
                    logs.append(trainer_.step)
                return method(trainer_, result)

            hook.on_log = counted_log
    with counter:
        assert trainer.fit().status == "completed"
    return counter.counts, logs


@pytest.mark.parametrize("cell, task, options", [
    ("rnn", "adding", {"seq_len": 10}),                  # mse; the plain scan
    ("sgornn", "adding", {"seq_len": 10}),               # the scan's gates alpha and beta
    ("lstm", "copy", {"seq_len": 5}),                    # cross-entropy
    ("rnn", "mnist_rows", {"data": "standin", "train_size": 64, "val_size": 32, "test_size": 32}),  # accuracy
])
def test_a_step_reads_nothing_from_the_device_but_once_at_a_log_step(cell, task, options):
    counts, logs = count_reads(tiny(cell, task, options))
    assert logs == [5, 10, 15, 20, 23]
    for step in range(1, 24):
        reads = counts[("step", step)]
        assert reads == (1 if step in logs else 0), (step, reads)  # the step, its hooks' on_step included
    for hook in ("TrainingWindow", "Speed", "Checkpoints"):  # what the log step has read already
        assert all(counts[(hook, step)] == 0 for step in logs), hook


def test_ptb_steps_read_nothing_either(ptb_dir):
    config = tiny("rnn", "ptb_word", {"seq_len": 4, "data_dir": str(ptb_dir)}, batch_size=2, eval_examples=4,
                  probe_examples=2)
    counts, logs = count_reads(config)
    assert [counts[("step", step)] for step in range(1, 24)] == [1 if step in logs else 0 for step in range(1, 24)]


# ------------------------------------------------------------------ the window and divergence
class NaNFrom:
    """Wraps a task: its loss turns NaN once ``start`` is set (by :class:`Poison`)."""

    def __init__(self, task):
        self.task, self.start = task, False

    def __getattr__(self, name):
        return getattr(self.task, name)

    def loss(self, pred, y):
        value = self.task.loss(pred, y)
        return value * math.nan if self.start else value


class Poison(hooks_module.Hook):
    def __init__(self, task, after):
        self.task, self.after = task, after

    def on_step(self, trainer, result):
        if result.step == self.after:
            self.task.start = True


class SaveAt(hooks_module.Hook):
    def __init__(self, step):
        self.step, self.saved = step, "not called"

    def on_step(self, trainer, result):
        if result.step == self.step:
            self.saved = trainer.save_checkpoint()


def nan_run(tmp_path, *hooks, poison_after=12, **train):
    config = tiny(steps=40, eval_every=100, probe_every=100, **train)
    task = NaNFrom(build_task(config))
    trainer = Trainer(build_model(config, task), task, config,
                      hooks=[MemorySink(tmp_path / "checkpoints"), Poison(task, poison_after), *hooks])
    return trainer.fit()


def test_a_divergence_between_log_steps_is_recorded_at_its_step_with_the_rows_before_it(tmp_path):
    saver = SaveAt(14)
    result = nan_run(tmp_path, saver)
    assert result.status == "diverged" and result.error == "loss or gradient became non-finite at step 13"
    losses = result.metrics[result.metrics.name == "train/loss"]
    assert losses.step.tolist() == [0, 5, 10, 13] and math.isnan(losses.value.iloc[-1])  # step 0: before any update
    assert losses.value.iloc[:2].map(math.isfinite).all()
    assert result.metrics.step.max() == 13  # nothing of the steps trained after it
    assert saver.saved is None  # no checkpoint of the diverged weights at step 14


def test_a_stop_between_log_steps_after_a_divergence_ends_the_run_as_diverged(tmp_path):
    result = nan_run(tmp_path, StopAt(14))
    assert result.status == "diverged" and "at step 13" in result.error
    assert result.metrics.step.max() == 13


def test_the_window_sums_in_step_order_as_the_host_did():
    task = tasks.build("adding", seq_len=5)
    window = StepWindow(task, capacity=2)  # grows past its capacity
    losses = [0.1, 0.2, 0.30000000000000004, 1e-17, 5.5]
    for step, value in enumerate(losses, 1):
        loss = torch.tensor(value, dtype=torch.float32)
        window.add(step, loss, loss + 1e-3, None, None)
        window.add_norm(torch.tensor(2.0))
    reading = window.read({"penalty": torch.tensor(0.25), "number": 3.0})
    expected = 0.0
    for value in losses:
        expected += float(torch.tensor(value, dtype=torch.float32))  # what summing loss.item() gave
    assert reading.loss_sum == expected and reading.score_sum == expected and reading.steps == 5
    assert reading.extras == {"penalty": 0.25, "number": 3.0} and reading.diverged is None
    state = window.state_dict()
    resumed = StepWindow(task, capacity=5)
    resumed.load_state_dict(state)
    resumed.add(6, torch.tensor(1.0), torch.tensor(math.inf), None, None)
    resumed.add_norm(torch.tensor(1.0))
    reading = resumed.read()
    assert reading.diverged == (6, [("train/loss", math.inf)], []) and reading.steps == 5


# ------------------------------------------------------------------ the scan's gates
def test_the_gated_scan_takes_its_gates_as_tensors_and_reads_neither():
    from stability.cells.scan import elman_scan

    from reference_loops import elman_loop

    torch.manual_seed(3)
    u, weight, h0 = torch.randn(7, 4, 5, dtype=torch.float64), torch.randn(5, 5, dtype=torch.float64) * 0.4, \
        torch.randn(4, 5, dtype=torch.float64)
    alpha = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    beta = torch.tensor(0.6, dtype=torch.float64, requires_grad=True)
    reads = []

    class Reads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in READS:
                reads.append(func.__name__)
            return func(*args, **(kwargs or {}))

    with Reads():
        states = elman_scan(u, weight, h0, "tanh", alpha=alpha, beta=beta)
        grads = torch.autograd.grad(states.sum(), (alpha, beta))
    assert reads == []
    reference = elman_loop(u, weight, h0, "tanh", alpha=alpha, beta=beta)
    torch.testing.assert_close(states, reference)
    torch.testing.assert_close(grads, torch.autograd.grad(reference.sum(), (alpha, beta)))


# ------------------------------------------------------------------ PTB's one-hot on the device
def test_ptb_batches_cross_as_ids_and_are_the_same_one_hot_on_the_device(ptb_dir):
    task = tasks.build("ptb_word", data_dir=ptb_dir, seq_len=4)
    compact = next(compact_batches(task, "train", 3))
    assert compact[0].dtype == torch.int64 and compact[0].shape == (3, 4)  # ids, not vocab-wide floats
    x, y = batch_on(task, compact, torch.device("cpu"), torch.float64)
    dense_x, dense_y = to_device(*next(task.batches("train", 3)), torch.device("cpu"), torch.float64)
    assert x.dtype == torch.float64 and torch.equal(x, dense_x) and torch.equal(y, dense_y)


# ------------------------------------------------------------------ one precision, determinism
def run_python(code: str, env=None) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_cudnn_and_scan_cells_train_in_one_float32_precision():
    """A fresh interpreter: torch's own defaults differ (cuDNN's RNNs TF32, matmuls full float32);
    after the Trainer has trained an rnn on PyTorch's own kernel (``impl = "native"``, cuDNN on a
    GPU), the backends of the cuDNN cells and of the scan's cells (cuBLAS matmuls) are both full
    IEEE float32, and the description a run stores says so."""
    code = ("from stability.core import precision; print(precision.fp32_precisions()); "
            "from stability.config import *; from stability.training.build import *; "
            "from stability.training.trainer import Trainer; "
            "config = RunConfig(CellConfig('rnn', 8), TaskConfig('adding', {'seq_len': 5}), "
            "TrainConfig(steps=2, batch_size=4, eval_examples=4, probe_examples=2)); "
            "task = build_task(config); model = build_model(config, task); model.cell.impl = 'native'; "
            "assert Trainer(model, task, config).fit().status == 'completed'; "
            "print(precision.fp32_precisions()); print(precision.describe_precision())")
    before, after, described = run_python(code).splitlines()
    assert eval(before)["cudnn.rnn"] != eval(before)["cuda.matmul"]  # torch 2.13's defaults: the problem
    settings = eval(after)
    assert settings["cudnn.rnn"] == settings["cuda.matmul"] == settings["cudnn.conv"] == precision.FP32_PRECISION
    assert described == "float32 ieee"
    import torch.backends.cudnn  # the legacy switch agrees, so reading it does not raise

    precision.apply_fp32_precision()
    assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False


def test_deterministic_is_validated_and_sets_torch_in_the_process_that_trains():
    with pytest.raises(ConfigError, match="deterministic must be true or false; got 'yes'"):
        RunConfig.from_dict({"train": {"deterministic": "yes"}}).validate()
    assert build_and_train(tiny(steps=3, deterministic=True)).status == "completed"
    settings = determinism.deterministic_settings()
    assert settings["algorithms"] and settings["cudnn"] and not settings["cudnn_benchmark"]
    assert settings["cublas_workspace"] in (os.environ.get(determinism.CUBLAS_WORKSPACE_ENV), ":4096:8")
    assert build_and_train(tiny(steps=3)).status == "completed"
    assert not determinism.deterministic_settings()["algorithms"]  # the next run's own choice


def test_the_determinism_switch_reaches_a_background_workers_torch(tmp_path, monkeypatch):
    """Real workers: the run's device column is written from the worker's torch settings."""
    monkeypatch.delenv(determinism.CUBLAS_WORKSPACE_ENV, raising=False)
    path = tmp_path / "runs.db"
    on = scheduler.start_run(tiny(steps=3, deterministic=True), path, max_concurrent=2)
    off = scheduler.start_run(tiny(steps=3), path, max_concurrent=2)
    with RunStore(path) as store:
        for run_id in (on, off):
            deadline = 120
            while store.record(run_id, latest=False).status not in TERMINAL and deadline > 0:
                import time

                time.sleep(0.1)
                deadline -= 0.1
            assert store.record(run_id, latest=False).status == "completed", store.record(run_id, latest=False).error
        assert store.record(on, latest=False).device.endswith("; deterministic")
        assert "deterministic" not in store.record(off, latest=False).device


def test_a_checkpoint_from_before_the_deterministic_field_still_resumes(tmp_path):
    config = tiny(steps=20)
    sink = MemorySink(tmp_path / "checkpoints")
    assert build_and_train(config, hooks=[sink, StopAt(12)]).status == "stopped"
    path = sink.checkpoint_path()
    state = torch.load(path, weights_only=True)
    del state["config"]["train"]["deterministic"]  # as a version without the field wrote it
    torch.save(state, path)
    assert build_and_train(config, hooks=[sink], resume=True).status == "completed"


# Ops whose output size depends on the values (a GPU must finish and report before the host can go on):
# a boolean mask's nonzero, masked_select (masked_scatter's backward), unique.
SIZE_FROM_VALUES = {torch.ops.aten.nonzero.default, torch.ops.aten.masked_select.default,
                    torch.ops.aten.masked_scatter.default, torch.ops.aten._unique2.default,
                    torch.ops.aten.unique_consecutive.default, torch.ops.aten.unique_dim.default}
BOOLEAN_INDEXING = {torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default}


class WaitingOps(TorchDispatchMode):
    """The ATen ops of a training step that would make a GPU wait, whatever Python called them: what
    the function-level :class:`ReadCounter` cannot see (a ``tensor[mask]`` inside a parametrization,
    masked_scatter's backward; found on an H200 by benchmarks/gpu_syncs.py in the Spectral-RNN)."""

    def __init__(self):
        super().__init__()
        self.seen: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        indices = args[1] if func in BOOLEAN_INDEXING and len(args) > 1 else ()
        if func in SIZE_FROM_VALUES or any(index is not None and index.dtype == torch.bool for index in indices):
            self.seen[str(func)] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("cell", cells.available())
def test_a_training_step_of_every_cell_runs_no_op_whose_size_the_gpu_must_report(cell):
    config = tiny(cell, steps=4, log_every=2, eval_every=4, probe_every=4)
    task = build_task(config)
    trainer = Trainer(build_model(config, task), task, config)
    waiting, step = WaitingOps(), trainer._train_step

    def watched_step(batch):
        with waiting:
            return step(batch)

    trainer._train_step = watched_step
    assert trainer.fit().status == "completed"
    assert not waiting.seen, dict(waiting.seen)


@pytest.mark.parametrize("magnitude", [1e-30, 1.0, 1e20, 1e30])
def test_the_step_norm_of_float32_gradients_neither_overflows_nor_underflows(magnitude):
    from stability.training.hooks import step_norm
    grads = [torch.randn(7, 5) * magnitude, torch.randn(5) * magnitude]
    exact = math.sqrt(sum(float(v) ** 2 for g in grads for v in g.double().flatten()))  # Python floats
    assert step_norm(grads).item() == pytest.approx(exact, rel=1e-12)
    grads[1][2] = math.inf
    assert step_norm(grads).item() == math.inf
