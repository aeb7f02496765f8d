"""A run on every device present: built, trained a few steps, its float64 readings stored, checkpointed and
resumed exactly, and two runs in background slots at once.  The CPU always; CUDA and MPS where this
machine has them (skipped, saying so, where it has not); and the CPU simulated as a device without
float64 (stability/core/simulated_device.py), in this process only.  The rest of the suite trains on the
CPU whatever the machine has (conftest.py pins ``STABILITY_DEVICE=cpu``); these name their device."""
from __future__ import annotations

import contextlib
import time
import warnings

import numpy as np
import pytest
import torch

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.core.devices import describe_device, resolve_device
from stability.core.simulated_device import simulated_device
from stability.execution.lifecycle import train_run
from stability.runs.store import RunStore
from stability.training import hooks
from stability.training.checkpoints import load_checkpoint
from stability.workers import scheduler
from stopping import StopAt

HAS_MPS = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
SIMULATED = "cpu-without-float64"
DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                             reason="no CUDA GPU on this machine")),
    pytest.param("mps", id="mps", marks=pytest.mark.skipif(not HAS_MPS, reason="no Apple GPU (MPS) on this machine")),
    pytest.param(SIMULATED, id=SIMULATED),
]
SEQ_LEN = 8
STEPS = 24
WAIT_S = 120.0  # two fresh workers (an interpreter and torch each) on a loaded machine
DETERMINISTIC = ["train/loss", "train/lr", "val/loss", "gap/loss", "grad/total_norm", "grad/h0_norm_train",
                 "sv/max", "test/loss"]


@contextlib.contextmanager
def on(device: str):
    """The device name a config gives, with the simulation running for the simulated one."""
    if device != SIMULATED:
        yield device
        return
    with simulated_device():
        yield "cpu"


def config(device: str, seed: int = 0) -> RunConfig:
    """Noisy h0 (draws from the device's own generator every step, so a resume must restore it), a
    fixed training set (a stream position to restore), Adam."""
    return RunConfig(cell=CellConfig("rnn", 8, {"h0": "noisy", "h0_noise_std": 0.3}),
                     task=TaskConfig("adding", {"seq_len": SEQ_LEN, "train_size": 48}),
                     train=TrainConfig(steps=STEPS, batch_size=8, log_every=4, eval_every=8, probe_every=8,
                                       eval_examples=16, probe_examples=4, device=device, seed=seed,
                                       deterministic=device == "cuda"))  # cuDNN's RNN backward uses atomics


class DeviceSeen(hooks.Hook):
    """Where the model and a step's predictions were, as the trainer ran."""

    def on_start(self, trainer, resumed):
        self.model = next(trainer.model.parameters()).device.type

    def on_step(self, trainer, result):
        self.pred = result.pred.device.type


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.db") as opened:
        yield opened


def rows(store, run_id):
    frame = store.metrics(run_id, DETERMINISTIC)
    return frame.set_index(["name", "step"])["value"].sort_index()


@pytest.mark.parametrize("device", DEVICES)
def test_a_run_trains_there_and_stores_its_readings(device, store):
    seen = DeviceSeen()
    with on(device) as name:
        result = train_run(config(name), store, hooks=[seen])
        described = describe_device(resolve_device(name))
    assert result.status == "completed"
    kind = "cpu" if device == SIMULATED else device
    assert seen.model == seen.pred == kind
    assert store.record(result.run_id, latest=False).device.startswith(described)  # then the precision (and determinism) on a GPU
    names = set(store.metrics(result.run_id)["name"])
    assert {"grad/h0_norm", "grad/A_h_norm", "grad/recurrent_norm", "sv/min", "sv/margin", "sv/spectral_radius",
            "gap/loss", "val/loss", "test/loss"} <= names
    flow = store.series(result.run_id, "grad/h_t_norm")
    assert sorted(set(flow.step)) == [0, 8, 16, 24] and len(flow[flow.step == STEPS]) == SEQ_LEN + 1
    assert np.isfinite(flow.value).all() and (flow.value > 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_a_stopped_run_resumes_there_exactly(device, store):
    with on(device) as name:
        whole = train_run(config(name), store, keep_checkpoint=True)  # the weights compared below
        resumed = store.create_run(config(name).to_dict())
        assert train_run(config(name), store, resumed, hooks=[StopAt(10)]).status == "stopped"
        assert train_run(config(name), store, resumed, resume=True, keep_checkpoint=True).status == "completed"
    expected = load_checkpoint(store.checkpoint_path(whole.run_id))["model"]
    got = load_checkpoint(store.checkpoint_path(resumed))["model"]
    assert all(torch.equal(expected[key], got[key]) for key in expected)
    assert rows(store, resumed).equals(rows(store, whole.run_id))


def synchronizations(cell: str, steps: int) -> int:
    """How many times a CUDA run of ``steps`` steps waits for the GPU, counted by PyTorch's own sync
    debugger (every ``.item()``, ``float(tensor)``, host copy or ``nonzero`` warns once), with the log,
    evaluation and probe steps at the same count whatever ``steps`` is."""
    run = RunConfig(cell=CellConfig(cell, 16), task=TaskConfig("adding", {"seq_len": SEQ_LEN}),
                    train=TrainConfig(steps=steps, batch_size=8, log_every=steps // 2, eval_every=steps,
                                      probe_every=steps, eval_examples=16, probe_examples=4, device="cuda"))
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert train_run(run).status == "completed"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing" in str(warning.message) for warning in caught)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
@pytest.mark.parametrize("cell", ["rnn", "lstm", "spectral", "sgornn"])
def test_a_cuda_step_waits_for_the_gpu_only_at_log_steps(cell):
    """Issue 24: a step between log steps reads nothing from the GPU.  Twice the steps at the same number
    of log, evaluation and probe steps must not add a single synchronisation."""
    few, many = synchronizations(cell, 40), synchronizations(cell, 80)
    assert few > 0  # the debugger sees the log steps' reads: the count can fail
    assert many == few, f"{many - few} more waits for the GPU in 40 more steps between log steps"


def wait_until(predicate, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}")


@pytest.mark.parametrize("device", [param for param in DEVICES if param.values[0] != SIMULATED])
def test_two_background_slots_train_there_at_once(device, tmp_path):
    """The simulation lives in this process, so the simulated device has no background run."""
    path = tmp_path / "runs.db"
    endless = [config(device, seed) for seed in (0, 1)]
    for long in endless:
        long.train.steps = 100_000  # ends when stopped
    ids = [scheduler.start_run(long, path, max_concurrent=2) for long in endless]
    with RunStore(path) as store:
        try:
            wait_until(lambda: all(store.record(i, latest=False).status == "running" for i in ids), "both runs running at once")
            wait_until(lambda: all(store.metrics(i, ["train/loss"]).step.nunique() >= 2 for i in ids),
                       "rows of both runs")
        finally:
            statuses = [scheduler.stop_run(i, path) for i in ids]
        assert statuses == ["stopped", "stopped"], [store.record(i, latest=False).error for i in ids]
        for run_id in ids:
            assert store.record(run_id, latest=False).device.startswith(device)
            assert {"grad/h0_norm", "grad/A_h_norm", "sv/max"} <= set(store.metrics(run_id)["name"])
            assert len(store.series(run_id, "grad/h_t_norm").query("step == 0")) == SEQ_LEN + 1
