"""The graphed training step on CUDA (stability.training.graphed, issue 32): each capturable cell's step captured as
one CUDA graph and replayed equals the same step run eagerly; expRNN trains eagerly, and why; an optimizer state
saved between replays resumes exactly; the host-read checker on a CUDA step. Skipped, saying so, without a CUDA
GPU; the CPU tests at the end build every helper's objects here and pin the list of cells the CUDA tests cover.

Written without a GPU (2026-11-28): the CUDA tests had not run when they were committed (benchmarks/gpu_check.sh
runs them first).
"""
from __future__ import annotations

import contextlib
import io
import math
import types
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import pytest
import torch

from stability import cells
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.core.determinism import use_deterministic_algorithms
from stability.core.precision import apply_fp32_precision
from stability.training.batches import compact_batches
from stability.training.build import build_model, build_task
from stability.execution.lifecycle import train_run as lifecycle_train_run
from stability.runs.store import RunStore
from stability.training import hooks as hooks_module
from stability.training.graphed import GRAPHED, WARMUP_STEPS, StaticStep, capture_problem, host_reads
from stability.training.sinks import MemorySink
from stability.training.trainer import Trainer
from stopping import StopAt

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
# Every eager StaticStep on CUDA holds a capturable Adam, which warns once that it runs uncaptured: that is the
# point of the comparison (the same optimizer, eager and replayed).
quiet = pytest.mark.filterwarnings("ignore:This instance was constructed with capturable=True")

STEPS = 200
LOG_EVERY = 25  # the window's capacity: read and reset at every log step, as the trainer does
# The registered cells whose step capture_problem lets through at the size below (checked on the CPU by
# test_the_cuda_tests_cover_every_registered_cell_that_capture_problem_lets_through): all but expRNN.
CAPTURABLE = ["rnn", "irnn", "lstm", "gru", "spectral", "orthogonal", "vprnn", "fastrnn", "sgornn", "kru",
              "kru_lstm", "urnn", "mlp"]
EAGER_ONLY = {"exponential": "torch.linalg.matrix_exp"}  # cell -> what capture_problem names
# (cell, options) for the graphed-equals-eager test: every capturable cell as registered, and a noisy h0 (a draw
# from the CUDA generator inside the graph: each replay must draw what the eager step draws).
CASES = [pytest.param(name, {}, id=name) for name in CAPTURABLE] + [
    pytest.param("rnn", {"h0": "noisy", "h0_noise_std": 0.3}, id="rnn-noisy-h0")]

# Tolerance of graphed against eager. A replay launches the kernels the eager step launched, with the same
# arguments, so the two runs agree to the bit wherever a kernel sums in a fixed order. Where it does not (cuDNN's
# RNN backward accumulates the weight gradient with atomics; cuBLAS may split a product's sum differently on the
# capture stream's workspace than on the eager side stream's), one step differs by a few float32 ulps
# (eps = 1.2e-7), which Adam carries into every later step. 200 steps at lr <= 1e-2 with clipping, hidden 16:
# rtol 1e-5 (about 80 ulps) holds that drift; atol 1e-6 covers entries near zero (a gradient norm, a weight that
# crossed 0). A real difference (a rate frozen into the graph, a stale gradient, a row written at the wrong
# index, a lost random draw) moves the loss by 1e-3 or more from the step it happens and fails at once.
CLOSE = dict(rtol=1e-5, atol=1e-6)
# With the determinism switch on every kernel sums in a fixed order: Note [Determinism and graphs] says a replay
# equals the eager steps then, to the bit.
EXACT = dict(rtol=0.0, atol=0.0)


def run_config(cell: str, options: dict | None = None, *, device: str = "cuda", **train) -> RunConfig:
    """The small run of these tests: hidden 16, adding T 20, batch 8, Adam with clipping and a step schedule
    that halves the rate every 40 steps (so it changes between replays: after steps 40, 80, ..., 200)."""
    defaults = dict(optimizer="adam", lr=1e-2, batch_size=8, steps=STEPS, clip_grad_norm=1.0, lr_schedule="step",
                    lr_step_size=40, lr_gamma=0.5, log_every=LOG_EVERY, eval_examples=8, probe_examples=4,
                    device=device)
    return RunConfig(cell=CellConfig(cell, 16, dict(options or {})), task=TaskConfig("adding", {"seq_len": 20}),
                     train=TrainConfig(**{**defaults, **train}))


def built(config: RunConfig):
    """The task and the model of ``config``, seeded as a run is (every device's generator), the model moved to
    the run's device in float32 as the Trainer holds it."""
    apply_fp32_precision()  # the Trainer's float32 (no TF32), before anything runs on the device
    torch.manual_seed(config.train.seed)
    task = build_task(config)
    model = build_model(config, task).to(device=torch.device(config.train.device), dtype=torch.float32)
    return task, model


def batches(task, count: int, batch_size: int = 8) -> list:
    """The first ``count`` training batches, drawn once (CPU tensors), for every run of a test to train on."""
    stream = compact_batches(task, "train", batch_size)
    return [next(stream) for _ in range(count)]


@dataclass
class Trace:
    """What a run of StaticStep steps showed: at each log step (and at the run's end), the window's rows (loss,
    objective, gradient norm of every step), its reading, ∂L/∂h0 and the rate; then the final parameters."""

    rows: list[torch.Tensor] = field(default_factory=list)  # (steps in the window, 3), float64, CPU
    readings: list[tuple] = field(default_factory=list)  # (loss, score, steps, total_norm, diverged)
    h0_grads: list[torch.Tensor] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    parameters: list[torch.Tensor] = field(default_factory=list)


def train(static: StaticStep, data: list, first: int, last: int, *, capture: bool) -> Trace:
    """Steps ``first``..``last`` of ``static`` on ``data[step - 1]``; with ``capture``, the step is captured as
    soon as this StaticStep has run WARMUP_STEPS eager steps, and replayed after."""
    trace = Trace()
    for step in range(first, last + 1):
        if capture and static._graph is None and static.eager_steps >= WARMUP_STEPS:  # noqa: SLF001
            static.capture()
        static.step(step, data[step - 1])
        if step % static.train.resolved_log_every() == 0 or step == last:
            _log(static, trace)
    trace.parameters = [p.detach().cpu().clone() for p in static.model.parameters()]
    return trace


def _log(static: StaticStep, trace: Trace) -> None:
    """A log step's reads (outside the graph, as the trainer's), then the window emptied."""
    window = static.window
    trace.rows.append(window._rows[:len(window), :3].detach().to("cpu", torch.float64).clone())  # noqa: SLF001
    reading = window.read({"total_norm": static.total_norm})
    trace.readings.append((reading.loss, reading.score, reading.steps, reading.extras["total_norm"],
                           reading.diverged))
    trace.h0_grads.append(None if static.h0_grad is None else static.h0_grad.detach().cpu().clone())
    trace.rates.append(static.schedule.value())
    window.reset()


def assert_same(mine: Trace, reference: Trace, close: dict) -> None:
    assert len(mine.rows) == len(reference.rows) and mine.rates == reference.rates
    for index, (ours, theirs) in enumerate(zip(mine.rows, reference.rows)):
        torch.testing.assert_close(ours, theirs, **close, msg=lambda m, i=index: f"window {i}: {m}")
        assert torch.isfinite(ours).all(), f"window {index} holds a step that is not finite: {ours}"
    for ours, theirs in zip(mine.readings, reference.readings):
        assert ours[2] == theirs[2] and ours[4] is None and theirs[4] is None  # steps; no divergence
        for a, b in (ours[0], theirs[0]), (ours[3], theirs[3]):  # the mean loss, the norm before clipping
            assert a == pytest.approx(b, rel=close["rtol"], abs=close["atol"])
        assert (math.isnan(ours[1]) and math.isnan(theirs[1])) or ours[1] == pytest.approx(theirs[1],
                                                                                          rel=close["rtol"],
                                                                                          abs=close["atol"])
    for ours, theirs in zip(mine.h0_grads, reference.h0_grads):
        assert (ours is None) == (theirs is None)
        if ours is not None:
            torch.testing.assert_close(ours, theirs, **close)
    assert len(mine.parameters) == len(reference.parameters)
    for ours, theirs in zip(mine.parameters, reference.parameters):
        torch.testing.assert_close(ours, theirs, **close)


def graphed_and_eager(cell: str, options: dict, device: str = "cuda", steps: int = STEPS, **train_options):
    """The same run twice from the same seed on the same batches, ``[(static, trace) captured after the warm-up,
    (static, trace) eager]``; on the CPU, where nothing is captured, both eager."""
    config = run_config(cell, options, device=device, steps=steps, **train_options)
    runs = []
    for capture in (device == "cuda", False):
        task, model = built(config)
        static = StaticStep(model, task, config.train)
        runs.append((static, train(static, batches(task, steps), 1, steps, capture=capture)))
    return config, runs


def through_a_file(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)  # as a checkpoint is read (checkpoints.load_checkpoint)


def save_and_resume(cell: str, device: str = "cuda", saved_at: int = 10, last: int = 20):
    """A run to ``last``, saved at ``saved_at`` (a log step) through a file in the checkpoint's plain form, and
    a second run resumed from that save to ``last``: both captured where the device is CUDA."""
    capture = device == "cuda"
    config = run_config(cell, device=device, steps=last, log_every=saved_at, lr_step_size=4)
    task, model = built(config)
    data = batches(task, last)
    static = StaticStep(model, task, config.train)
    train(static, data, 1, saved_at, capture=capture)
    saved = through_a_file({"model": model.state_dict(), "optimizer": static.optimizer_state(),
                            "rate": static.schedule.value()})
    straight = train(static, data, saved_at + 1, last, capture=capture)

    other_task, other = built(config)
    other.load_state_dict(saved["model"])
    resumed = StaticStep(other, other_task, config.train)
    resumed.load_optimizer_state(saved["optimizer"])
    return saved, resumed, straight, train(resumed, data, saved_at + 1, last, capture=capture), static


def _penalty_read_on_the_host(cell):
    weight = next(cell.parameters())
    return weight.sum() * 0 if weight.sum().item() > -math.inf else None


def with_a_host_read(model) -> None:
    """The cell's penalty made to read a value on the host (``.item()``), as a careless cell might; a bound
    method, so that capture_problem's CPU copy of the model (a deepcopy) reads its own weight."""
    model.cell.penalty = types.MethodType(_penalty_read_on_the_host, model.cell)


# ------------------------------------------------------------------ CUDA
@needs_cuda
@quiet
@pytest.mark.parametrize("cell, options", CASES)
def test_two_hundred_graphed_steps_equal_two_hundred_eager_steps(cell, options):
    config, runs = graphed_and_eager(cell, options)
    (graphed, graphed_trace), (eager, eager_trace) = runs
    assert capture_problem(graphed.model, config, graphed.task) is None  # the model as held, on CUDA
    assert graphed.eager_steps == WARMUP_STEPS and eager.eager_steps == STEPS  # the rest were replays
    assert graphed.optimizer.param_groups[0]["capturable"] and graphed.optimizer.param_groups[0]["lr"].is_cuda
    assert graphed_trace.rates[-1] == pytest.approx(1e-2 * 0.5 ** 5)  # the schedule ran between replays
    assert_same(graphed_trace, eager_trace, CLOSE)


@needs_cuda
@quiet
def test_exprnn_trains_eagerly_on_cuda_as_the_trainer_s_own_step():
    config = run_config("exponential", steps=20)
    task, model = built(config)
    problem = capture_problem(model, config, task)
    assert problem.startswith(f"trains eagerly: {EAGER_ONLY['exponential']}") and "\n" not in problem
    assert "norm to the host" in problem  # the reason, in the run's device line's one line

    trainer_task, trainer_model = built(config)
    trainer = Trainer(trainer_model, trainer_task, config)
    static = StaticStep(model, task, config.train)
    data = batches(task, 20)
    for step in range(1, 21):  # never captured: the Trainer would not call capture() after that answer
        trainer.step = step
        result = trainer._train_step(data[step - 1])  # noqa: SLF001
        static.step(step, data[step - 1])
        # a plain Adam (the Trainer's: bias corrections in float64 on the host) against the capturable one
        # (float32 on the device): round-off apart
        torch.testing.assert_close(static.loss, result.loss, **CLOSE)
        if step % 10 == 0:
            static.window.reset()
    assert static.eager_steps == 20
    for mine, reference in zip(model.parameters(), trainer_model.parameters()):
        torch.testing.assert_close(mine, reference, **CLOSE)


@needs_cuda
@quiet
@pytest.mark.parametrize("cell", ["spectral", "lstm"])
def test_an_optimizer_state_saved_between_replays_resumes_the_graphed_run_exactly(cell):
    saved, resumed, straight, again, _ = save_and_resume(cell)
    state = saved["optimizer"]
    assert all(not group["capturable"] and isinstance(group["lr"], float) for group in state["param_groups"])
    assert all(value["step"].device.type == "cpu" for value in state["state"].values())  # the plain form
    # loaded: the step counts on the device (capturable), the rate where the schedule had taken it (halved at 4, 8)
    counts = [resumed.optimizer.state[p]["step"] for p in resumed.parameters if p in resumed.optimizer.state]
    assert counts and all(count.is_cuda and float(count) == 20.0 for count in counts)  # 10 loaded + 10 trained
    assert saved["rate"] == pytest.approx(1e-2 * 0.25)
    assert resumed.eager_steps == WARMUP_STEPS  # resumed, warmed up, captured, replayed
    assert_same(again, straight, CLOSE)


@needs_cuda
@quiet
@pytest.mark.parametrize("cell", ["spectral", "rnn"])
def test_a_cuda_step_of_a_capturable_cell_reads_nothing_on_the_host_and_one_with_item_is_found(cell):
    config = run_config(cell, steps=10)
    task, model = built(config)
    data = batches(task, 10)
    static = StaticStep(model, task, config.train)
    for step in range(1, WARMUP_STEPS + 1):  # the optimizer's state exists: the step as it will be captured
        static.step(step, data[step - 1])
    assert host_reads(static.step, WARMUP_STEPS + 1, data[WARMUP_STEPS]) == []
    with_a_host_read(model)
    reads = host_reads(static.step, WARMUP_STEPS + 2, data[WARMUP_STEPS + 1])
    assert reads and reads[0].startswith("aten._local_scalar_dense.default at tests/test_graphed_cuda.py:")
    problem = capture_problem(model, config, task)
    assert problem.startswith("trains eagerly: its step reads the device on the host "
                              "(aten._local_scalar_dense.default at tests/test_graphed_cuda.py:")


# ------------------------------------------------------------------ CUDA: the Trainer (issue 32, item 1)
TIMED = {"speed/steps_per_s", "progress/elapsed_s", "progress/eta_s"}  # differ between any two runs


def trainer_run(config: RunConfig, *, static_step=None, hooks=(), resume: bool = False):
    """``(trainer, result)`` of ``config`` through the Trainer, seeded as a run is; ``static_step`` as the
    Trainer takes it (None: graphed on CUDA where it can be)."""
    task, model = built(config)
    trainer = Trainer(model, task, config, hooks=hooks, static_step=static_step)
    return trainer, trainer.fit(resume=resume)


def readings(result) -> pd.Series:
    """Every logged value but the timed ones, by (name, step)."""
    metrics = result.metrics[~result.metrics.name.isin(TIMED)]
    assert not metrics.duplicated(["name", "step"]).any()
    return metrics.set_index(["name", "step"]).value.sort_index()


# Readings of W that a drift of a few ulps in W moves by more than their own relative round-off: a singular value
# moves by at most ||dW|| (Weyl), so sigma_min and the margin are compared against sigma_max's scale, the condition
# number against its own; an eigenvalue of a non-normal W moves by up to kappa(V) ||dW||, the spectral radius
# likewise against sigma_max. WEYL times rtol of that scale (1e-3 of W's norm at CLOSE).
SCALED_BY_NORM = {"sv/min", "sv/margin", "sv/spectral_radius"}
WEYL = 100


def _tolerances(values: pd.Series, close: dict) -> np.ndarray:
    """``atol`` of each reading of ``values``: CLOSE's, widened for the readings of W above."""
    atol = np.full(len(values), close["atol"], dtype=float)
    names = values.index.get_level_values("name")
    steps = values.index.get_level_values("step")
    for index, (name, step) in enumerate(zip(names, steps)):
        if name in SCALED_BY_NORM and ("sv/max", step) in values.index:
            atol[index] = max(atol[index], WEYL * close["rtol"] * abs(values["sv/max", step]))
        elif name == "sv/condition":
            atol[index] = max(atol[index], WEYL * close["rtol"] * abs(values[name, step]))
    return atol


def assert_same_readings(mine, reference, close: dict) -> None:
    """The same rows (name, step) and values within ``close`` (NaN where NaN; W's readings: _tolerances);
    the series too."""
    ours, theirs = readings(mine), readings(reference)
    assert list(ours.index) == list(theirs.index)
    both = np.isnan(ours.values) & np.isnan(theirs.values)
    near = np.isclose(ours.values, theirs.values, rtol=close["rtol"], atol=_tolerances(theirs, close))
    assert (both | near).all(), f"differ: {ours[~(both | near)].to_dict()} vs {theirs[~(both | near)].to_dict()}"
    ours, theirs = (result.series.sort_values(["name", "step", "index"]).reset_index(drop=True)
                    for result in (mine, reference))
    pd.testing.assert_frame_equal(ours[["name", "step", "index"]], theirs[["name", "step", "index"]])
    for (name, step), part in theirs.groupby(["name", "step"]):
        scale = WEYL * close["rtol"] * part.value.abs().max() if name == "sv/spectrum" else 0.0
        np.testing.assert_allclose(ours.value[part.index].values, part.value.values, rtol=close["rtol"],
                                   atol=max(close["atol"], scale), err_msg=f"{name} at step {step}")


@pytest.fixture
def every_h0_reading(monkeypatch):
    """The float64 ∂L/∂h0 between probe steps at every log step (it follows a share of the run's time
    otherwise, and which rows exist would depend on the speed: hooks.TimeShare)."""
    monkeypatch.setattr(hooks_module, "H0_READING_SHARE", math.inf)


def trainer_config(cell: str, options: dict | None = None, **train) -> RunConfig:
    """run_config's run with the Trainer's readings at a cadence: log every 25, evaluate every 50, probe every 100."""
    return run_config(cell, options, **{**dict(eval_every=50, probe_every=100), **train})


@needs_cuda
@pytest.mark.parametrize("cell, options", CASES)
def test_a_graphed_trainer_run_equals_the_eager_one_in_every_reading(cell, options, every_h0_reading):
    config = trainer_config(cell, options)
    graphed, graphed_result = trainer_run(config)
    assert graphed._static is not None and graphed._static.captured  # noqa: SLF001
    assert graphed._static.eager_steps == WARMUP_STEPS and graphed_result.status == "completed"  # noqa: SLF001
    assert graphed.describe()["device"].endswith(f" · {GRAPHED} after {WARMUP_STEPS} eager steps")
    # the evaluation and the probe replayed as graphs too, in the step's pool (graphed_readings.py)
    probe = next(hook.probe for hook in graphed.hooks if hasattr(hook, "probe"))
    assert probe.capture_notes == [] and graphed.evaluator.capture_notes == []
    if probe.device.type == "cuda":  # float64 at full rate there (a consumer card's probe runs on the CPU)
        assert probe._full.graph is not None and probe._h0.graph is not None  # noqa: SLF001
    assert all(held.part.graph is not None for held in graphed.evaluator._splits.values())  # noqa: SLF001
    assert set(graphed.evaluator._splits) == {"val", "train"}  # noqa: SLF001
    # the same optimizer (capturable Adam), the same StaticStep, never captured: the graph is all that differs
    eager, eager_result = trainer_run(replace(config, train=replace(config.train, cuda_graphs=False)),
                                      static_step=True)
    assert not eager._static.captured and eager._static.eager_steps == STEPS  # noqa: SLF001
    assert_same_readings(graphed_result, eager_result, CLOSE)
    # and the Trainer's own step (a plain Adam: bias corrections in float64 on the host, float32 on the device in
    # the capturable one, so a few ulps apart from the first step): its first window's mean loss
    plain, plain_result = trainer_run(replace(config, train=replace(config.train, steps=LOG_EVERY)), static_step=False)
    assert plain._static is None  # noqa: SLF001
    first = readings(plain_result)["train/loss", LOG_EVERY]
    assert readings(graphed_result)["train/loss", LOG_EVERY] == pytest.approx(first, rel=1e-4, abs=1e-6)


@needs_cuda
def test_exprnn_s_trainer_run_trains_eagerly_and_its_device_line_says_why(tmp_path):
    config = trainer_config("exponential", steps=30)
    with RunStore(tmp_path / "runs.db") as store:
        result = lifecycle_train_run(config, store)
        device = store.record(result.run_id, latest=False).device
    assert result.status == "completed"
    assert " · trains eagerly: torch.linalg.matrix_exp" in device and "norm to the host" in device
    trainer, _ = trainer_run(config)
    assert trainer._static is None and "trains eagerly" in trainer.describe()["device"]  # noqa: SLF001


@needs_cuda
def test_a_run_with_cuda_graphs_off_trains_eagerly_and_says_so():
    config = trainer_config("spectral", steps=30)
    trainer, result = trainer_run(replace(config, train=replace(config.train, cuda_graphs=False)))
    assert trainer._static is None and result.status == "completed"  # noqa: SLF001
    assert trainer.describe()["device"].endswith(" · trains eagerly: train.cuda_graphs is off")


@needs_cuda
@pytest.mark.parametrize("cell", ["spectral", "lstm"])
def test_a_graphed_run_stopped_and_resumed_equals_the_uninterrupted_graphed_run(cell, tmp_path, every_h0_reading):
    config = trainer_config(cell, {"h0": "noisy", "h0_noise_std": 0.3} if cell == "lstm" else {})
    _, whole = trainer_run(config)
    sink = MemorySink(tmp_path / "checkpoints")
    first, stopped = trainer_run(config, hooks=[sink, StopAt(110)])
    assert stopped.status == "stopped" and first._static.captured  # noqa: SLF001
    saved = torch.load(sink.checkpoint_path(), weights_only=True)
    assert saved["step"] == 110
    assert all(not group["capturable"] and isinstance(group["lr"], float)
               for group in saved["optimizer"]["param_groups"])  # the plain form (Note [Capturable state ...])
    assert all(value["step"].device.type == "cpu" for value in saved["optimizer"]["state"].values())
    resumed, result = trainer_run(config, hooks=[sink], resume=True)
    assert result.status == "completed" and resumed._static.captured  # noqa: SLF001
    assert resumed._static.eager_steps == WARMUP_STEPS  # warmed up again after the resume, then replayed  # noqa: SLF001
    assert_same_readings(result, whole, CLOSE)


@needs_cuda
@quiet
@pytest.mark.parametrize("cell", ["rnn", "spectral"])
def test_with_the_determinism_switch_on_a_replay_equals_the_eager_steps_to_the_bit(cell):
    # Last of the CUDA tests: a capture that fails here must not take the others with it.
    # Note [Determinism and graphs]: rnn is cuDNN's kernel (atomics in its backward when the switch is off),
    # spectral the loop of small kernels; the window's index_copy_ takes its deterministic form here.
    use_deterministic_algorithms(True)
    try:
        _, runs = graphed_and_eager(cell, {}, steps=50)
    finally:
        use_deterministic_algorithms(False)
    (graphed, graphed_trace), (_, eager_trace) = runs
    assert graphed.eager_steps == WARMUP_STEPS
    assert_same(graphed_trace, eager_trace, EXACT)



def _loss_read_on_the_host(task):
    """The task's loss with a read of its value on the host, which no capture allows."""
    def loss(pred, y):
        value = task.loss(pred, y)
        if not math.isfinite(float(value.detach())):
            raise AssertionError("not finite")
        return value
    return loss


@needs_cuda
def test_a_reading_whose_capture_fails_stays_eager_with_a_warning_and_reads_as_before():
    # After the determinism test, the last: a failed capture (Note [Capturing a reading]) must leave the device
    # usable and the reading eager. Also the captured readings alone, in a pool of their own, against eager ones.
    from stability.training.batches import batch_on
    from stability.training.graphed_readings import StaticEvaluation, StaticProbe
    from stability.training.probes import ProbeBatch
    from stability.training.evaluation import Evaluator

    config = trainer_config("spectral")
    task, model = built(config)
    device = torch.device("cuda")
    x, y = batch_on(task, next(iter(compact_batches(task, "val", 4))), device, torch.float32)
    pool = torch.cuda.graph_pool_handle()
    refused = StaticProbe(model, _loss_read_on_the_host(task), x, y)
    captured, eager = StaticProbe(model, task.loss, x, y), ProbeBatch(model, task.loss, x, y)
    evaluation, evaluator = (StaticEvaluation(task, config.train, device, torch.float32),
                             Evaluator(task, config.train, device, torch.float32))
    for reading in (refused, captured, evaluation):
        reading.capture_into(lambda: pool)
    stream = torch.cuda.current_stream()
    for _ in range(3):  # eager, then captured (or refused), then replayed
        for probe in (refused, captured, eager):
            probe.sync()
        expected = eager.h0_norm()
        with pytest.warns(RuntimeWarning, match="stays eager: its capture failed") if refused._h0.calls == 1 \
                else contextlib.nullcontext():  # noqa: SLF001
            assert refused.h0_norm() == pytest.approx(expected, rel=1e-12)
        assert captured.h0_norm() == pytest.approx(expected, rel=1e-12)
        np.testing.assert_allclose(captured.through_time(), eager.through_time(), rtol=1e-12)
        assert captured.output_h0_norm() == pytest.approx(eager.output_h0_norm(), rel=1e-12)
        for split in ("val", "train"):
            mine, theirs = evaluation.split(model, split), evaluator.split(model, split)
            assert mine.keys() == theirs.keys()
            assert all(mine[key] == pytest.approx(theirs[key], rel=1e-5) for key in theirs)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.mul_(0.9)
    assert refused._h0.graph is None and len(refused.capture_notes) == 1  # noqa: SLF001
    assert torch.cuda.current_stream() == stream  # the failed capture left the caller's stream current
    assert captured._h0.graph is not None and captured._full.graph is not None  # noqa: SLF001
    assert all(held.part.graph is not None for held in evaluation._splits.values())  # noqa: SLF001


# ------------------------------------------------------------------ CPU: what the CUDA tests stand on
def test_the_cuda_tests_cover_every_registered_cell_that_capture_problem_lets_through():
    # a cell registered later, or one that becomes capturable, changes this list: the CUDA tests cannot
    # silently cover fewer cells than the registry offers
    answers = {}
    for name in cells.available():
        config = run_config(name, device="cpu")
        task, model = built(config)
        answers[name] = capture_problem(model, config, task)
    assert sorted(name for name, problem in answers.items() if problem is None) == sorted(CAPTURABLE)
    refused = {name: problem for name, problem in answers.items() if problem is not None}
    assert sorted(refused) == sorted(EAGER_ONLY)
    for name, problem in refused.items():
        assert problem.startswith(f"trains eagerly: {EAGER_ONLY[name]}")
    assert sorted({param.values[0] for param in CASES}) == sorted(CAPTURABLE)


@pytest.mark.parametrize("cell, options", CASES)
def test_each_case_s_run_builds_and_trains_on_the_cpu(cell, options):
    # the CUDA test's helpers, eager on the CPU for one window: what they build, how they read the window
    config, runs = graphed_and_eager(cell, options, device="cpu", steps=LOG_EVERY)
    (static, trace), (_, again) = runs
    assert static.eager_steps == LOG_EVERY and not static.optimizer.param_groups[0].get("capturable")
    assert len(trace.rows) == 1 and trace.rows[0].shape == (LOG_EVERY, 3) and torch.isfinite(trace.rows[0]).all()
    assert trace.readings[0][2] == LOG_EVERY and trace.readings[0][4] is None
    assert trace.rates == [pytest.approx(1e-2)]  # 25 steps: before the first halving at 40
    assert_same(trace, again, EXACT)  # the CPU repeats itself to the bit: the comparison itself works
    with pytest.raises(RuntimeError, match="captured on a CUDA device"):
        static.capture()


def test_the_trainer_helpers_run_on_the_cpu_and_their_comparison_can_fail(every_h0_reading):
    # the Trainer-level CUDA tests' helpers, on the CPU through the static path (static_step=True, uncaptured)
    config = trainer_config("lstm", device="cpu", steps=LOG_EVERY * 2)
    static, static_result = trainer_run(config, static_step=True)
    plain, plain_result = trainer_run(config)
    assert static._static is not None and plain._static is None  # noqa: SLF001
    assert {"sv/min", "sv/condition", "grad/h0_norm", "gate/forget"} <= set(static_result.metrics.name)
    assert_same_readings(static_result, plain_result, EXACT)
    shifted = static_result.metrics.copy()
    shifted.loc[shifted.name == "train/loss", "value"] *= 1 + 1e-4  # a difference well past round-off
    static_result.__dict__["metrics"] = shifted  # the cached property, replaced
    with pytest.raises(AssertionError, match="differ"):
        assert_same_readings(static_result, plain_result, CLOSE)
    tolerances = _tolerances(readings(plain_result), CLOSE)
    assert (tolerances >= CLOSE["atol"]).all() and tolerances.max() > CLOSE["atol"]  # sv/* widened, by W's norm


def test_the_other_helpers_build_on_the_cpu():
    saved, resumed, straight, again, static = save_and_resume("spectral", device="cpu")
    assert saved["rate"] == pytest.approx(1e-2 * 0.25) and resumed.eager_steps == 10
    assert_same(again, straight, EXACT)  # as tests/test_graphed_step.py finds on the CPU

    config = run_config("exponential", device="cpu", steps=20)
    task, model = built(config)
    assert capture_problem(model, config, task).startswith(f"trains eagerly: {EAGER_ONLY['exponential']}")
    trainer_task, trainer_model = built(config)
    trainer = Trainer(trainer_model, trainer_task, config)  # the Trainer of the expRNN test, on the CPU
    trainer.step = 1
    assert trainer._train_step(batches(task, 1)[0]) is not None  # noqa: SLF001

    config = run_config("spectral", device="cpu", steps=10)
    task, model = built(config)
    static = StaticStep(model, task, config.train)
    static.step(1, batches(task, 1)[0])
    with_a_host_read(model)
    reads = host_reads(static.step, 2, batches(task, 2)[1])  # the CPU's plain Adam reads its step count too
    assert any(read.startswith("aten._local_scalar_dense.default at tests/test_graphed_cuda.py:") for read in reads)
    assert capture_problem(model, config, task).startswith(
        "trains eagerly: its step reads the device on the host (aten._local_scalar_dense.default at "
        "tests/test_graphed_cuda.py:")
