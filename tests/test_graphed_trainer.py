"""The Trainer's wiring of the graphed step (stability.training.graphed, issue 32, item 1), run on the CPU.

``Trainer(..., static_step=True)`` trains a CPU run through an uncaptured StaticStep: the whole wiring (the plan,
the static step's optimizer, schedule and window standing in for the Trainer's, the log step's one read, the
StepResult the hooks get, checkpoints in the plain optimizer form, resume, divergence, stop) runs here; only the
capture and its replays need CUDA (tests/test_graphed_cuda.py). Every row of a run through the static path must
equal the plain path's to the bit, and the plain path must stay the CPU's default, unchanged.
"""
from __future__ import annotations

import copy as copy_module
import functools
import math
import threading
import types

import pandas as pd
import pytest
import torch

from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig
from stability.execution.lifecycle import train_run
from stability.runs.store import RunStore
from stability.training import hooks as hooks_module
from stability.training import run as run_module
from stability.training.batches import batch_on, compact_batches
from stability.training.build import build_model, build_task
from stability.training.checkpoints import load_checkpoint
from stability.training.graphed import GRAPHED, WARMUP_STEPS, StaticStep, StepPlan, _held_tensors, step_plan
from stability.training.sinks import MemorySink
from stability.training.trainer import Trainer
from stopping import StopAt

# Rows that time the run: they differ between any two runs
TIMED = {"speed/steps_per_s", "progress/elapsed_s", "progress/eta_s"}
NOISY = {"h0": "noisy", "h0_noise_std": 0.3}  # MASO §5.2's noisy initial state: a draw every step


@pytest.fixture(autouse=True)
def h0_reading_at_every_log_step(monkeypatch):
    """The float64 ‖∂L/∂h0‖ between probe steps is taken within a share of the run's time (hooks.TimeShare):
    at every log step here, so that which rows exist does not depend on the machine's speed."""
    monkeypatch.setattr(hooks_module, "H0_READING_SHARE", math.inf)


def config(cell="rnn", options=None, *, task="adding", task_options=None, **train) -> RunConfig:
    defaults = dict(batch_size=4, steps=60, device="cpu", log_every=5, eval_every=10, probe_every=15,
                    eval_examples=8, probe_examples=4, lr=1e-2, clip_grad_norm=0.5, lr_schedule="step",
                    lr_step_size=7, lr_gamma=0.7)
    return RunConfig(cell=CellConfig(cell, 8, dict(options or {})),
                     task=TaskConfig(task, task_options or {"seq_len": 10}),
                     train=TrainConfig(**{**defaults, **train}))


def trainer(run_config: RunConfig, static_step=None, hooks=(), task_change=None) -> Trainer:
    """A Trainer of ``run_config``, seeded as build_and_train seeds a run."""
    torch.manual_seed(run_config.train.seed)
    task = build_task(run_config)
    if task_change is not None:
        task_change(task)
    return Trainer(build_model(run_config, task), task, run_config, hooks=hooks, static_step=static_step)


def fitted(run_config: RunConfig, static_step=None, hooks=(), task_change=None):
    """``(trainer, result)``: built and trained at once, so that two runs of a test each draw from torch's
    random stream as seeded for it (a noisy h0 draws every step)."""
    built = trainer(run_config, static_step, hooks, task_change)
    return built, built.fit()


def rows(result) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every metric and series row but the timed ones, sorted, without wall times."""
    metrics = result.metrics[~result.metrics.name.isin(TIMED)].drop(columns="wall_time")
    series = result.series.drop(columns="wall_time")
    return (metrics.sort_values(["step", "name"]).reset_index(drop=True),
            series.sort_values(["step", "name", "index"]).reset_index(drop=True))


def assert_same_rows(mine, reference) -> None:
    """Every row (name, step, value) the same, to the bit (NaN where NaN)."""
    for ours, theirs in zip(rows(mine), rows(reference)):
        pd.testing.assert_frame_equal(ours, theirs, check_exact=True)


def weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


# ------------------------------------------------------------------ the plain path is still the CPU's
def test_a_cpu_run_trains_through_the_trainer_s_own_step_by_default_and_its_device_line_is_unchanged():
    plain = trainer(config())
    assert plain._static is None and plain._step_note is None  # noqa: SLF001
    assert " · " not in plain.describe()["device"] and plain.describe()["device"].startswith("cpu (")
    assert isinstance(plain.optimizer, torch.optim.Adam) and isinstance(plain.optimizer.param_groups[0]["lr"], float)
    static = trainer(config(), static_step=True)
    assert isinstance(static._static, StaticStep) and static.optimizer is static._static.optimizer  # noqa: SLF001
    assert static.window is static._static.window and static.schedule is static._static.schedule  # noqa: SLF001
    assert static.describe()["device"].endswith(" · static step, not captured: a CUDA graph needs a CUDA device, "
                                                "this run trains on cpu")


# ------------------------------------------------------------------ every row, to the bit
@pytest.mark.parametrize("cell, options", [
    ("rnn", {}), ("spectral", {}), ("sgornn", {}), ("lstm", {}), ("kru", {}), ("rnn", NOISY), ("gru", {})],
    ids=["rnn", "spectral", "sgornn", "lstm", "kru", "rnn-noisy-h0", "gru"])
def test_sixty_steps_through_the_static_path_log_the_plain_path_s_rows_to_the_bit(cell, options):
    run_config = config(cell, options)
    (plain, plain_result), (static, static_result) = fitted(run_config), fitted(run_config, static_step=True)
    assert static._static.eager_steps == 60 and plain_result.status == static_result.status == "completed"  # noqa: SLF001
    names = set(static_result.metrics.name)
    assert {"train/loss", "train/lr", "val/loss", "grad/h0_norm", "grad/h0_norm_train", "grad/total_norm",
            "sv/min", "test/loss"} <= names  # the readings are there to compare
    if cell in ("lstm", "gru"):
        assert any(name.startswith("gate/") for name in names)
    assert set(static_result.series.name) >= {"grad/h_t_norm", "sv/spectrum"}
    assert_same_rows(static_result, plain_result)
    for mine, reference in zip(weights(static.model), weights(plain.model)):
        assert torch.equal(mine, reference)


@pytest.mark.parametrize("schedule", ["none", "step", "linear", "plateau"])
def test_each_learning_rate_schedule_runs_the_same_through_the_static_path(schedule):
    run_config = config("spectral", lr_schedule=schedule, lr_step_size=9, lr_gamma=0.5, steps=40, eval_every=5)
    (_, plain), (_, static) = fitted(run_config), fitted(run_config, static_step=True)
    assert_same_rows(static, plain)
    rates = static.metrics[static.metrics.name == "train/lr"].set_index("step").value
    if schedule == "none":
        assert set(rates) == {1e-2}
    elif schedule == "step":  # the rate after step s: lr * gamma ** floor(s / step_size), written out here
        assert all(rate == pytest.approx(1e-2 * 0.5 ** (step // 9), rel=1e-12) for step, rate in rates.items()
                   if step > 0)
    elif schedule == "linear":  # to zero at the last step: lr * (1 - s / steps)
        assert all(rate == pytest.approx(1e-2 * (1 - step / 40), abs=1e-15) for step, rate in rates.items()
                   if step > 0)


def test_the_static_path_s_readings_are_an_independent_adam_loop_s():
    """Property: the static path's train/loss (the window's mean), grad/total_norm (before clipping) and train/lr
    are those of a loop written here with torch.optim.Adam and torch's own norm, not the trainer's code."""
    run_config = config("rnn", steps=30, log_every=5, clip_grad_norm=None, lr_schedule="step", lr_step_size=10,
                        lr_gamma=0.5)
    static = trainer(run_config, static_step=True)
    result = static.fit()

    torch.manual_seed(run_config.train.seed)
    task = build_task(run_config)
    model = build_model(run_config, task)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batches = compact_batches(task, "train", 4)
    losses, norms, rates = [], {}, {}
    for step in range(1, 31):
        x, y = batch_on(task, next(batches), torch.device("cpu"), torch.float32)
        optimizer.zero_grad()
        pred, _ = model(x, torch.zeros(4, 8))
        loss = task.loss(pred, y)
        (loss + model.cell.penalty()).backward()
        norms[step] = torch.cat([p.grad.flatten().double() for p in model.parameters()]).norm().item()
        optimizer.step()
        losses.append(loss.item())
        for group in optimizer.param_groups:
            group["lr"] = 1e-2 * 0.5 ** (step // 10)
        rates[step] = optimizer.param_groups[0]["lr"]
    logged = result.metrics.set_index(["name", "step"]).value
    for end in range(5, 31, 5):
        assert logged["train/loss", end] == pytest.approx(sum(losses[end - 5:end]) / 5, rel=1e-12)
        # each tensor's norm is taken in float32 where it lies (hooks.stacked_norm), then joined in float64
        assert logged["grad/total_norm", end] == pytest.approx(norms[end], rel=1e-6)
        assert logged["train/lr", end] == rates[end]
    for mine, reference in zip(weights(static.model), weights(model)):
        torch.testing.assert_close(mine, reference, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------ what is not captured, and why
@pytest.mark.parametrize("change, reason", [
    (dict(optimizer="rmsprop_tf"), "trains eagerly: rmsprop_tf has no capturable form"),
    (dict(optimizer="sgd", lr_schedule="linear"), "trains eagerly: sgd has no capturable form")])
def test_an_optimizer_without_a_capturable_form_takes_the_eager_path_and_says_why(change, reason):
    run_config = config("rnn", steps=20, **change)
    static, static_result = fitted(run_config, static_step=True)
    assert static._static is None and static._step_note.startswith(reason)  # noqa: SLF001
    device = static.describe()["device"]
    assert device.startswith("cpu (") and f" · {reason}" in device and "\n" not in device
    assert_same_rows(static_result, fitted(run_config)[1])


def test_a_stateful_task_takes_the_eager_path_and_keeps_carrying_its_state():
    def stateful(task):
        task.stateful = True

    run_config = config("rnn", steps=20)
    static = trainer(run_config, static_step=True, task_change=stateful)
    assert static._static is None  # noqa: SLF001
    assert "trains eagerly: " in static.describe()["device"]
    assert "carries its hidden state across batches" in static.describe()["device"]
    result = static.fit()
    assert static._carried is not None  # noqa: SLF001 - the eager step carried h_last
    assert_same_rows(result, trainer(run_config, task_change=stateful).fit())


def test_the_plan_on_a_cuda_device_captures_or_says_why_not():
    """step_plan answers for a CUDA device without one (it reads the device's type; capture_problem checks a CPU
    copy of the model): what a CUDA run's device line will say."""
    cuda = torch.device("cuda")
    run_config = config("spectral")
    task, model = build_task(run_config), build_model(run_config, build_task(run_config))
    graphed = step_plan(model, task, run_config.train, cuda)
    assert graphed.static and graphed.capture and graphed.note == f"{GRAPHED} after {WARMUP_STEPS} eager steps"
    off = step_plan(model, task, TrainConfig(cuda_graphs=False), cuda)
    assert not off.static and off.note == "trains eagerly: train.cuda_graphs is off"
    assert step_plan(model, task, TrainConfig(cuda_graphs=False), cuda, static_step=True).note == \
        "static step, not captured: train.cuda_graphs is off"
    assert step_plan(model, task, run_config.train, cuda, static_step=False).note.startswith("trains eagerly")
    exp_config = config("exponential")
    exp_task = build_task(exp_config)
    refused = step_plan(build_model(exp_config, exp_task), exp_task, exp_config.train, cuda)
    assert not refused.static and refused.note.startswith("trains eagerly: torch.linalg.matrix_exp")
    assert step_plan(model, task, run_config.train, torch.device("cpu")) == StepPlan(False, False, None)


# ------------------------------------------------------------------ divergence, stop, resume
@pytest.mark.parametrize("cell, lr", [("irnn", 5.0), ("spectral", 50.0)])
def test_a_blow_up_is_found_at_the_step_it_happened_as_on_the_plain_path(cell, lr):
    run_config = config(cell, optimizer="sgd", lr=lr, clip_grad_norm=None, lr_schedule="none")
    (static, static_result), (plain, plain_result) = fitted(run_config, static_step=True), fitted(run_config)
    assert static_result.status == plain_result.status == "diverged"
    assert static_result.error == plain_result.error and static.step == plain.step
    assert static_result.error.endswith(f"at step {static.step}") and static.step % 5  # between log steps
    assert_same_rows(static_result, plain_result)
    last = static_result.metrics[static_result.metrics.step == static.step]
    assert not math.isfinite(last[last.name == "train/loss"].value.iloc[0])


def test_a_hook_s_stop_ends_the_static_path_after_that_step():
    run_config = config("lstm")
    static, static_result = fitted(run_config, static_step=True, hooks=[StopAt(23)])
    plain, plain_result = fitted(run_config, hooks=[StopAt(23)])
    assert static_result.status == plain_result.status == "stopped" and static.step == plain.step == 23
    assert_same_rows(static_result, plain_result)


def test_a_stop_requested_in_the_store_ends_a_static_run_within_a_step(tmp_path, monkeypatch):
    monkeypatch.setattr(run_module, "Trainer", functools.partial(Trainer, static_step=True))
    run_config = config("rnn", steps=10_000_000, log_every=50, eval_every=10_000, probe_every=10_000)
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(run_config.to_dict())
        timer = threading.Timer(1.0, lambda: RunStore(store.path).request_stop(run_id))
        timer.start()
        result = train_run(run_config, store, run_id)
        timer.join()
        record = store.record(run_id, latest=False)
        assert result.status == record.status == "stopped"
        assert 0 < record.step < 10_000_000 and " · static step, not captured" in record.device


@pytest.mark.parametrize("resume_static", [True, False], ids=["resumed-static", "resumed-plain"])
def test_a_checkpoint_of_the_static_path_resumes_to_the_uninterrupted_run_s_rows(tmp_path, resume_static):
    """Noisy h0 (a draw every step), a fixed training set reshuffled every epoch, a plateau schedule, Adam with
    clipping: stopped at step 18 through the static path, resumed through either path."""
    run_config = config("rnn", NOISY, task_options={"seq_len": 10, "train_size": 48}, steps=40, log_every=4,
                        eval_every=8, probe_every=12, lr_schedule="plateau", lr_gamma=0.5)
    whole_trainer, whole = fitted(run_config)
    sink = MemorySink(tmp_path / "checkpoints")
    assert trainer(run_config, static_step=True, hooks=[sink, StopAt(18)]).fit().status == "stopped"
    saved = load_checkpoint(sink.checkpoint_path())
    assert saved["step"] == 18
    groups, state = saved["optimizer"]["param_groups"], saved["optimizer"]["state"]
    assert all(not group["capturable"] and type(group["lr"]) is float for group in groups)  # the plain form
    assert all(value["step"].dtype == torch.float32 and value["step"].device.type == "cpu" for value in state.values())
    resumed = trainer(run_config, static_step=resume_static, hooks=[sink])
    result = resumed.fit(resume=True)  # its random stream: the checkpoint's
    assert result.status == "completed" and (resumed._static is not None) == resume_static  # noqa: SLF001
    assert_same_rows(result, whole)
    for mine, reference in zip(weights(resumed.model), weights(whole_trainer.model)):
        assert torch.equal(mine, reference)


def test_a_plain_checkpoint_resumes_through_the_static_path(tmp_path):
    run_config = config("spectral", steps=30)
    whole = trainer(run_config).fit()
    sink = MemorySink(tmp_path / "checkpoints")
    assert trainer(run_config, hooks=[sink, StopAt(13)]).fit().status == "stopped"
    assert_same_rows(trainer(run_config, static_step=True, hooks=[sink]).fit(resume=True), whole)


# ------------------------------------------------------------------ what a replay puts back
def test_a_replay_puts_back_the_gate_tensors_a_later_eager_forward_replaced():
    """Note [What the forward remembers]: an LSTM keeps its last forward for gate_values(); the evaluation's
    forward between replays replaces it, and a replay (no Python) would not: the static step puts it back."""
    run_config = config("lstm")
    task = build_task(run_config)
    model = build_model(run_config, task)
    static = StaticStep(model, task, run_config.train)
    batches = compact_batches(task, "train", 4)
    static.step(1, next(batches))
    remembered = model.cell._last_forward  # noqa: SLF001
    static._held = _held_tensors(model)  # noqa: SLF001 - as capture() notes them
    assert any(value is remembered for _, _, value in static._held)  # noqa: SLF001
    with torch.no_grad():
        model.eval()
        model(torch.randn(3, 10, task.input_size))  # an evaluation's forward
        model.train()
    assert model.cell._last_forward is not remembered  # noqa: SLF001
    static._graph = types.SimpleNamespace(replay=lambda: None)  # noqa: SLF001 - a replay: no Python of the step
    static.step(2, next(batches))
    assert model.cell._last_forward is remembered  # noqa: SLF001


# ------------------------------------------------------------------ the switch
def test_cuda_graphs_is_a_validated_train_field_on_by_default_and_old_configs_load():
    assert TrainConfig().cuda_graphs is True
    assert RunConfig.from_dict({"train": {"steps": 5}}).train.cuda_graphs is True  # a config from before the field
    assert RunConfig.from_dict({"train": {"cuda_graphs": False}}).to_dict()["train"]["cuda_graphs"] is False
    with pytest.raises(ConfigError, match="cuda_graphs must be true or false; got 'no'"):
        RunConfig.from_dict({"train": {"cuda_graphs": "no"}}).validate()


def test_the_cli_turns_cuda_graphs_off_with_one_flag():
    from stability.cli.arguments import Parser, add_config_flags, config_from_args

    parser = Parser(prog="stability")
    add_config_flags(parser)
    parser.add_argument("--name", default="")
    assert config_from_args(parser.parse_args([])).train.cuda_graphs is True
    assert config_from_args(parser.parse_args(["--no-cuda-graphs"])).train.cuda_graphs is False
    assert config_from_args(parser.parse_args(["--deterministic"])).train.deterministic is True
    with pytest.raises(SystemExit):
        parser.parse_args(["--cuda-graphs"])


def test_a_checkpoint_from_before_the_cuda_graphs_field_still_resumes(tmp_path):
    run_config = config("rnn", steps=20)
    sink = MemorySink(tmp_path / "checkpoints")
    assert trainer(run_config, hooks=[sink, StopAt(8)]).fit().status == "stopped"
    path = sink.checkpoint_path()
    state = torch.load(path, weights_only=True)
    del state["config"]["train"]["cuda_graphs"]  # as a version without the field wrote it
    torch.save(state, path)
    assert trainer(run_config, hooks=[sink]).fit(resume=True).status == "completed"


# ------------------------------------------------------------------ the goal table's script, here without CUDA
def test_the_goal_table_s_script_says_there_is_no_cuda_and_times_the_cpu_column():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "benchmarks/graphed_run.py", "--device", "cpu", "--steps", "10",
                           "--cpu-steps", "20", "--cells", "rnn"], cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "no graphed, eager or cuDNN column" in lines[0] and ("no CUDA GPU here" in lines[0]
                                                                  or "--device cpu" in lines[0])
    (row,) = [line for line in lines if line.startswith("| rnn |")]
    cpu_rate = row.split("|")[6].strip()
    assert float(cpu_rate) > 0  # the one-CPU-thread column, timed from the run's own elapsed rows


# ------------------------------------------------------------------ capture_problem's short check
def _recording_forward(cell, x, h0=None, state_probe=None):
    cell.seen.append(x.shape[1])
    if cell.needs_whole and x.shape[1] < 50:
        raise RuntimeError("this cell needs its whole length")
    return type(cell).forward(cell, x, h0, state_probe)


@pytest.mark.parametrize("needs_whole, seen", [(False, [3]), (True, [3, 50])])
def test_capture_problem_steps_through_three_time_steps_and_the_whole_length_where_those_do_not_run(needs_whole,
                                                                                                     seen):
    """Note [A short check]: the check before a CUDA run's first point is cheap at any T."""
    from stability.training.graphed import CHECKED_STEPS, capture_problem

    run_config = config("rnn", task_options={"seq_len": 50})
    task = build_task(run_config)
    model = build_model(run_config, task)
    model.cell.seen, model.cell.needs_whole = [], needs_whole
    model.cell.forward = types.MethodType(_recording_forward, model.cell)  # copied with the model: a bound method
    recorded = []
    original = copy_module.deepcopy

    def deepcopy(value, *args):
        copied = original(value, *args)
        if value is model:
            recorded.append(copied.cell.seen)
        return copied

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(copy_module, "deepcopy", deepcopy)
        assert capture_problem(model, run_config, task) is None
    assert CHECKED_STEPS == 3 and [length for lengths in recorded for length in lengths] == seen
