"""The trainer, with a real SQLite store: metrics, divergence, stop, schedules, checkpoints."""
import math
import threading

import numpy as np
import pytest
import torch

from stability import tasks
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.runs.store import RunStore
from stability.training import hooks as hooks_module
from stability.training.build import build_model
from stability.training.checkpoints import load_checkpoint
from stability.execution.lifecycle import train_run
from stopping import StopAt

from reference_gradients import log10_state_gradient_norms


@pytest.fixture
def store(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    yield store
    store.close()


def tiny(cell="spectral", task="adding", task_options=None, **train):
    defaults = dict(steps=30, batch_size=16, log_every=5, eval_every=10, probe_every=15, eval_examples=64,
                    probe_examples=8)
    defaults.update(train)
    return RunConfig(cell=CellConfig(cell, 8), task=TaskConfig(task, task_options or {"seq_len": 12}),
                     train=TrainConfig(**defaults))


def run(store, config):
    run_id = store.create_run(config.to_dict())
    return run_id, train_run(config, store, run_id, keep_checkpoint=True).status  # its weights read back


def test_completed_run_logs_every_diagnostic(store):
    run_id, status = run(store, tiny(cell="sgornn"))
    assert status == "completed"
    info = store.record(run_id, latest=False)
    assert info.status == "completed" and info.finished_at >= info.started_at
    assert info.baseline == pytest.approx(1 / 6) and info.metric == "mse"
    k = 2 * math.ceil(math.log2(8))  # the VPRNN reference's rotation count for hidden size 8
    assert info.total_steps == 30 and info.recurrent_params == k * 8 // 2  # k sublayers of 8/2 angles
    names = set(store.metrics(run_id)["name"])
    expected = {"train/loss", "train/mse", "val/loss", "val/mse", "test/loss", "test/mse", "gap/loss", "gap/mse",
                "grad/h0_norm", "grad/recurrent_norm", "grad/total_norm", "sv/min", "sv/max", "sv/margin",
                "sv/spectral_radius", "sv/condition", "gate/alpha", "gate/beta", "speed/steps_per_s",
                "progress/examples", "progress/elapsed_s", "progress/eta_s", "train/lr"}
    assert expected <= names
    metrics = store.metrics(run_id)
    assert sorted(metrics[metrics.name == "train/loss"].step) == [0, 5, 10, 15, 20, 25, 30]  # step 0: step_zero.py
    assert sorted(metrics[metrics.name == "val/loss"].step) == [0, 10, 20, 30]
    gates = store.latest(run_id)
    assert gates["gate/beta"] <= 1 - 2 * gates["gate/alpha"] + 1e-6  # SGORNN eq. 3, as logged
    assert gates["sv/margin"] < 1e-4  # orthogonal U
    flow = store.series(run_id, "grad/h_t_norm")
    assert sorted(set(flow.step)) == [0, 15, 30]
    assert len(flow[flow.step == 30]) == 13  # t = 0..T
    assert len(store.series(run_id, "sv/spectrum").query("step == 0")) == 8


def test_gap_is_held_out_minus_fixed_training_set(store):
    """Recompute the final gap independently from the checkpoint: loss on the first
    64 validation examples minus loss on the whole fixed 16-example training pool."""
    config = tiny(cell="lstm", task_options={"seq_len": 6, "train_size": 16}, steps=60, lr=3e-2, eval_every=60,
                  dtype="float64")
    run_id, _ = run(store, config)
    logged = store.metrics(run_id, ["gap/loss"]).set_index("step")["value"][60]
    task = tasks.build("adding", seed=0, seq_len=6, train_size=16)
    model = build_model(config, task).double()
    model.load_state_dict(load_checkpoint(store.checkpoint_path(run_id))["model"])
    model.eval()
    val_x, val_y = next(iter(task.batches("val", 64)))
    train_x, train_y = task.encode(task.fixed_split("train"))
    with torch.no_grad():
        val_loss = task.loss(model(val_x.double())[0], val_y.double()).item()
        train_loss = task.loss(model(train_x.double())[0], train_y.double()).item()
    assert logged == pytest.approx(val_loss - train_loss, rel=1e-9, abs=1e-12)
    assert val_loss != pytest.approx(train_loss)  # different sets, so the gap is not trivially 0


def test_vanishing_gradient_through_time_reads_below_float32_range(store):
    config = tiny(cell="rnn", task_options={"seq_len": 300}, steps=5, log_every=5, probe_every=5)
    config.cell.options = {"nonlinearity": "tanh", "init": "orthogonal", "init_gain": 0.3}
    run_id, _ = run(store, config)
    flow = store.series(run_id, "grad/h_t_norm").query("step == 0").sort_values("index")
    first = flow["value"].iloc[0]
    assert 0 < first < 1e-45  # ~0.3^300: zero in float32, visible in float64
    assert flow["value"].iloc[-1] > 1e-3


class NaNAfter:
    """Wraps a task so that its loss turns NaN from the given call on."""

    def __init__(self, task, after):
        self.task, self.after, self.calls = task, after, 0

    def __getattr__(self, name):
        return getattr(self.task, name)

    def loss(self, pred, y):
        self.calls += 1
        value = self.task.loss(pred, y)
        return value * math.nan if self.calls > self.after else value


def test_nan_loss_ends_the_run_as_diverged_keeping_earlier_rows(store, monkeypatch):
    real_build = tasks.build
    monkeypatch.setattr(tasks, "build", lambda *a, **k: NaNAfter(real_build(*a, **k), after=40))
    run_id, status = run(store, tiny(steps=1000, eval_every=1000, probe_every=1000))
    assert status == "diverged"
    info = store.record(run_id, latest=False)
    assert info.status == "diverged" and "non-finite" in info.error
    losses = store.metrics(run_id, ["train/loss"])
    assert (losses.step < 40).sum() >= 5  # rows logged before the NaN are kept
    assert math.isnan(losses.value.iloc[-1])


def test_stop_request_ends_the_run_as_stopped(store):
    config = tiny(steps=10_000_000, log_every=50, eval_every=10_000, probe_every=10_000)
    run_id = store.create_run(config.to_dict())
    timer = threading.Timer(1.0, lambda: RunStore(store.path).request_stop(run_id))
    timer.start()
    status = train_run(config, store, run_id).status
    timer.join()
    assert status == "stopped" and store.record(run_id, latest=False).status == "stopped"
    assert 0 < store.record(run_id, latest=False).step < 10_000_000


@pytest.mark.parametrize("schedule,check", [
    ("linear", lambda lr: lr[-1] == pytest.approx(0.0, abs=1e-12) and lr[0] < 1e-2),
    ("step", lambda lr: lr[-1] == pytest.approx(1e-2 * 0.5 ** 3)),
])
def test_learning_rate_schedules(store, schedule, check):
    config = tiny(lr=1e-2, lr_schedule=schedule, lr_step_size=10, steps=30, log_every=10)
    run_id, _ = run(store, config)
    lrs = store.metrics(run_id, ["train/lr"]).sort_values("step")["value"].tolist()
    assert check(lrs), lrs


def test_checkpoint_restores_the_trained_model(store):
    config = tiny(cell="kru", dtype="float64")
    run_id, _ = run(store, config)
    checkpoint = load_checkpoint(store.checkpoint_path(run_id))
    assert checkpoint["step"] == 30 and RunConfig.from_dict(checkpoint["config"]) == config
    task = tasks.build("adding", seed=0, seq_len=12)
    model = build_model(config, task).double()
    model.load_state_dict(checkpoint["model"])
    x, y = next(iter(task.batches("test", 1000)))  # the whole test set, as test/loss is
    model.eval()
    with torch.no_grad():
        mse = task.loss(model(x.double())[0], y.double()).item()
    assert mse == pytest.approx(store.latest(run_id)["test/loss"], rel=1e-6)


def test_float64_and_penalty_are_logged(store):
    run_id, _ = run(store, tiny(cell="kru", dtype="float64", steps=10))
    latest = store.latest(run_id)
    assert latest["train/penalty"] > 0 and np.isfinite(latest["train/loss"])


def test_epochs_become_steps_over_the_fixed_training_set(store):
    config = tiny(task_options={"seq_len": 8, "train_size": 40}, epochs=2.0, batch_size=16, log_every=1)
    run_id, status = run(store, config)
    assert status == "completed"
    assert store.record(run_id, latest=False).total_steps == 5  # ceil(2 * 40 / 16)
    assert store.metrics(run_id, ["train/loss"]).step.max() == 5


def test_epochs_on_an_endless_stream_is_a_config_error(store):
    from stability.config import ConfigError
    with pytest.raises(ConfigError, match="epochs needs a fixed training set"):
        run(store, tiny(epochs=1.0))


def test_h0_norm_is_read_in_float64_where_the_training_batch_holds_zero(store, monkeypatch):
    """tanh RNN with ‖W‖ = 0.3 at T = 300: ‖∂L/∂h0‖ ~ 0.3^300 ~ 1e-157.  The float32 training batch
    holds exactly 0; grad/h0_norm reads the float64 value, which a step-by-step log-space
    recomputation from the final checkpoint confirms."""
    monkeypatch.setattr(hooks_module, "H0_READING_SHARE", math.inf)  # a reading at every log step
    config = tiny(cell="rnn", task_options={"seq_len": 300}, steps=10, log_every=5, probe_every=10)
    config.cell.options = {"nonlinearity": "tanh", "init": "orthogonal", "init_gain": 0.3}
    run_id, _ = run(store, config)
    rows = store.metrics(run_id, ["grad/h0_norm", "grad/h0_norm_train"]).pivot(index="step", columns="name",
                                                                             values="value")
    assert list(rows.index) == [0, 5, 10]  # step 0: the probe at initialisation
    assert (rows["grad/h0_norm_train"].loc[[5, 10]] == 0).all()
    assert (rows["grad/h0_norm"] > 0).all()
    flow = store.series(run_id, "grad/h_t_norm").query("step == 10").sort_values("index")
    assert rows.loc[10, "grad/h0_norm"] == pytest.approx(flow["value"].iloc[0], rel=1e-9)

    task = tasks.build("adding", seed=0, seq_len=300)
    model = build_model(config, task).double().eval()
    model.load_state_dict(load_checkpoint(store.checkpoint_path(run_id))["model"])
    x, y = next(iter(task.batches("val", config.train.probe_examples)))
    reference = log10_state_gradient_norms(model, task.loss, x, y)[0]
    assert reference < -100
    assert math.log10(rows.loc[10, "grad/h0_norm"]) == pytest.approx(reference, abs=1e-6)


def test_maso_A_h_norm_is_logged_at_probe_steps(store):
    run_id, _ = run(store, tiny(cell="rnn", steps=30, probe_every=15))
    rows = store.metrics(run_id, ["grad/A_h_norm"])
    assert sorted(rows.step) == [0, 15, 30]
    assert (rows.value > 0).all()


@pytest.mark.parametrize("cell", ["spectral", "kru", "lstm"])
def test_freeze_recurrent_keeps_the_matrix_and_trains_the_rest(store, cell):
    config = tiny(cell=cell, steps=20, lr=1e-2, freeze_recurrent=True)
    run_id, status = run(store, config)
    assert status == "completed"
    task = tasks.build("adding", seed=0, seq_len=12)
    torch.manual_seed(config.train.seed)
    initial = build_model(config, task)
    trained = build_model(config, task)
    trained.load_state_dict(load_checkpoint(store.checkpoint_path(run_id))["model"])
    # the dense matrix before and after training (a renormalised reflector may move W by rounding only)
    torch.testing.assert_close(trained.cell.recurrent_matrix(), initial.cell.recurrent_matrix(), rtol=0, atol=1e-6)
    assert not torch.equal(trained.readout.weight, initial.readout.weight)
    assert "grad/recurrent_norm" not in set(store.metrics(run_id)["name"])
    spectrum = store.series(run_id, "sv/spectrum")
    first, last = (spectrum[spectrum.step == s].sort_values("index")["value"].to_numpy() for s in (0, 20))
    np.testing.assert_allclose(first, last, rtol=0, atol=1e-6)


def test_unfrozen_recurrent_matrix_does_train(store):
    config = tiny(cell="spectral", steps=20, lr=1e-2)
    run_id, _ = run(store, config)
    task = tasks.build("adding", seed=0, seq_len=12)
    torch.manual_seed(config.train.seed)
    initial = build_model(config, task)
    trained = build_model(config, task)
    trained.load_state_dict(load_checkpoint(store.checkpoint_path(run_id))["model"])
    assert not torch.allclose(trained.cell.recurrent_matrix(), initial.cell.recurrent_matrix())


def test_h0_reading_between_probes_keeps_to_its_time_budget(store, monkeypatch):
    """Budget 0: grad/h0_norm only at the probe steps (where the gradient-through-time probe gives it
    for free); an unlimited budget: at every log step too."""
    config = tiny(cell="rnn", steps=30, log_every=5, probe_every=15)
    monkeypatch.setattr(hooks_module, "H0_READING_SHARE", 0.0)
    run_id, _ = run(store, config)
    assert sorted(store.metrics(run_id, ["grad/h0_norm"]).step) == [0, 15, 30]
    assert sorted(store.metrics(run_id, ["grad/h0_norm_train"]).step) == [0, 5, 10, 15, 20, 25, 30]
    monkeypatch.setattr(hooks_module, "H0_READING_SHARE", math.inf)
    run_id, _ = run(store, config)
    assert sorted(store.metrics(run_id, ["grad/h0_norm"]).step) == [0, 5, 10, 15, 20, 25, 30]


@pytest.mark.parametrize("renormalize", [True, False])
def test_trainer_calls_after_optimizer_step_so_reflectors_stay_unit(store, renormalize):
    """Spectral-RNN's authors renormalise every Householder vector after each update; the trainer's
    call of ``cell.after_optimizer_step()`` is what does it."""
    config = tiny(cell="spectral", steps=20, lr=3e-2)
    config.cell.options = {"renormalize": renormalize}
    run_id, _ = run(store, config)
    task = tasks.build("adding", seed=0, seq_len=12)
    model = build_model(config, task)
    model.load_state_dict(load_checkpoint(store.checkpoint_path(run_id))["model"])
    svd = model.cell.parametrizations.weight_hh[0]
    u, v, _ = svd.split(model.cell.parametrizations.weight_hh.original.detach().double())
    norms = torch.cat([svd.left.pad(u).norm(dim=1), svd.right.pad(v).norm(dim=1)])
    if renormalize:
        torch.testing.assert_close(norms, torch.ones_like(norms), rtol=0, atol=1e-6)
    else:
        assert (norms - 1).abs().max() > 1e-3


def test_recurrent_parameters_train_at_the_cells_learning_rate_scale():
    """A cell's recurrent_lr_scale puts recurrent_parameters() in their own group at lr * scale (expRNN's
    authors train the skew-symmetric parameter at lr / 10); schedules keep the ratio."""
    from stability.training.build import build_optimizer
    from stability.training.schedule import LearningRate

    config = tiny(cell="spectral", lr=1e-2, lr_schedule="step", lr_step_size=1, lr_gamma=0.5)
    model = build_model(config, tasks.build("adding", seed=0, seq_len=12))
    model.cell.recurrent_lr_scale = 0.1
    optimizer = build_optimizer(model, config)
    recurrent = {id(p) for p in model.cell.recurrent_parameters()}
    assert len(recurrent) == 1
    by_lr = {}
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            by_lr[id(parameter)] = group["lr"]
    assert len(by_lr) == sum(1 for _ in model.parameters())
    assert all(by_lr[key] == pytest.approx(1e-3 if key in recurrent else 1e-2) for key in by_lr)
    schedule = LearningRate(optimizer, config.train)
    schedule.after_step(1)
    assert schedule.value() == pytest.approx(5e-3)
    assert sorted(group["lr"] for group in optimizer.param_groups) == pytest.approx([5e-4, 5e-3])


@pytest.mark.parametrize("name, first_step", [("rmsprop", 10.0), ("rmsprop_keras", 10 ** 0.5), ("rmsprop_tf", None)])
def test_the_configured_rmsprop_semantics_reach_the_model(name, first_step):
    """``train.optimizer`` picks the framework's RMSprop: from a zero accumulator the first step moves
    every coordinate by lr / sqrt(1 - decay) whatever the gradient (torch: decay 0.99, Keras: 0.9);
    TF1's accumulator starts at 1, so its first step is about lr * g (docs/optimizers.md)."""
    from stability.training.build import build_optimizer

    config = tiny(cell="rnn", optimizer=name, lr=1e-2)
    model = build_model(config, tasks.build("adding", seed=0, seq_len=12)).double()  # steps of 1e-5 exactly
    weight = model.cell.weight_hh
    before = weight.detach().clone()
    optimizer = build_optimizer(model, config)
    (weight * torch.linspace(1e-3, 2e-3, weight.numel()).view_as(weight).double()).sum().backward()  # |g| >> eps
    gradient = weight.grad.clone()
    optimizer.step()
    moved = (weight.detach() - before).abs()
    if first_step is None:
        expected = 1e-2 * gradient.abs() / torch.sqrt(0.9 + 0.1 * gradient ** 2 + 1e-10)
        torch.testing.assert_close(moved, expected, rtol=1e-4, atol=1e-9)
    else:
        torch.testing.assert_close(moved, torch.full_like(moved, 1e-2 * first_step), rtol=1e-3, atol=0)


def test_total_norm_is_logged_before_clipping(store):
    run_id, _ = run(store, tiny(cell="rnn", steps=10, log_every=5, clip_grad_norm=1e-6))
    logged = store.metrics(run_id, ["grad/total_norm"])["value"]
    assert len(logged) == 3 and (logged > 1e-3).all()  # steps 0 (step_zero.py), 5 and 10  # the raw norm, not the clipped 1e-6


# ------------------------------------------------------------------ hooks and resume
class CrashAfter(hooks_module.Hook):
    """Saves a checkpoint after step ``checkpoint`` and then dies at step ``crash``, as a killed
    worker would: rows logged between the two are in the store, the checkpoint is older."""

    def __init__(self, checkpoint, crash):
        self.checkpoint, self.crash = checkpoint, crash

    def on_step(self, trainer, result):
        if result.step == self.checkpoint:
            trainer.save_checkpoint()
        if result.step == self.crash:
            raise RuntimeError("worker killed")


def resumable(**train):
    """Noisy h0 (draws from torch's RNG every step), a fixed training set reshuffled every epoch
    (a data stream position to restore), a plateau schedule (state in the scheduler) and Adam."""
    defaults = dict(steps=40, log_every=4, eval_every=8, probe_every=12, lr_schedule="plateau", lr_gamma=0.5)
    defaults.update(train)
    config = tiny(cell="rnn", task_options={"seq_len": 10, "train_size": 48}, **defaults)
    config.cell.options.update(h0="noisy", h0_noise_std=0.3)
    return config


DETERMINISTIC = ["train/loss", "train/mse", "train/lr", "val/loss", "gap/loss", "grad/total_norm", "sv/max",
                 "grad/h0_norm_train", "test/loss"]


def rows_by_step(store, run_id):
    frame = store.metrics(run_id, DETERMINISTIC)
    assert not frame.duplicated(["step", "name"]).any(), "a step was logged twice"
    return frame.set_index(["name", "step"])["value"].sort_index()


def final_weights(store, run_id):
    return load_checkpoint(store.checkpoint_path(run_id))["model"]


def test_a_stopped_run_resumes_exactly_as_if_it_had_not_stopped(store):
    config = resumable()
    whole, status = run(store, config)
    assert status == "completed"
    resumed = store.create_run(config.to_dict())
    assert train_run(config, store, resumed, hooks=[StopAt(18)]).status == "stopped"
    assert store.metrics(resumed, ["train/loss"]).step.max() == 16  # nothing after the stop
    assert train_run(config, store, resumed, resume=True, keep_checkpoint=True).status == "completed"
    expected, got = final_weights(store, whole), final_weights(store, resumed)
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    pd_testing = pytest.importorskip("pandas.testing")
    pd_testing.assert_series_equal(rows_by_step(store, resumed), rows_by_step(store, whole))
    assert store.record(resumed, latest=False).status == "completed"


def test_a_killed_run_resumes_from_its_checkpoint_and_loses_only_later_rows(store):
    config = resumable()
    whole, _ = run(store, config)
    killed = store.create_run(config.to_dict())
    with pytest.raises(RuntimeError, match="worker killed"):
        train_run(config, store, killed, hooks=[CrashAfter(checkpoint=13, crash=27)])
    assert store.metrics(killed, ["train/loss"]).step.max() == 24  # rows up to the crash were kept
    assert train_run(config, store, killed, resume=True, keep_checkpoint=True).status == "completed"
    # the rows of steps 14..27 were discarded and trained again: one row per step, as uninterrupted
    pd_testing = pytest.importorskip("pandas.testing")
    pd_testing.assert_series_equal(rows_by_step(store, killed), rows_by_step(store, whole))
    flow = store.series(killed, "grad/h_t_norm")
    assert sorted(set(flow.step)) == [0, 12, 24, 36, 40] and not flow.duplicated(["step", "index"]).any()
    expected, got = final_weights(store, whole), final_weights(store, killed)
    assert all(torch.equal(expected[name], got[name]) for name in expected)


def test_elapsed_time_continues_across_a_resume(store):
    config = resumable()
    run_id = store.create_run(config.to_dict())
    train_run(config, store, run_id, hooks=[StopAt(20)])
    before = store.metrics(run_id, ["progress/elapsed_s"]).value.max()
    train_run(config, store, run_id, resume=True)
    elapsed = store.metrics(run_id, ["progress/elapsed_s"]).sort_values("step").value
    assert elapsed.is_monotonic_increasing and elapsed.max() > before


def test_resume_without_a_checkpoint_is_one_clear_error(store):
    from stability.training.checkpoints import ResumeError
    config = resumable()
    run_id = store.create_run(config.to_dict())
    with pytest.raises(ResumeError, match=f"run {run_id} has no checkpoint"):
        train_run(config, store, run_id, resume=True)


def test_a_hook_sees_every_step_and_records_into_the_same_flush(store):
    class Count(hooks_module.Hook):
        def __init__(self):
            self.steps, self.logged, self.ended = [], [], None

        def on_step(self, trainer, result):
            self.steps.append(result.step)

        def on_log(self, trainer, result):
            self.logged.append(result.step)
            trainer.log("custom/steps_seen", len(self.steps))

        def on_end(self, trainer):
            self.ended = trainer.status

    counter = Count()
    run_id = store.create_run(tiny().to_dict())
    assert train_run(tiny(), store, run_id, hooks=[counter]).status == "completed"
    assert counter.steps == list(range(1, 31)) and counter.logged == [5, 10, 15, 20, 25, 30]
    assert counter.ended == "completed"
    custom = store.metrics(run_id, ["custom/steps_seen"])
    assert custom.set_index("step").value.to_dict() == {s: float(s) for s in counter.logged}


def test_a_hook_can_end_a_run_early_with_its_own_status(store):
    class Prune(hooks_module.Hook):
        def on_log(self, trainer, result):
            if trainer.step >= 10:
                trainer.stop("stopped", "pruned: no better than the median")

    run_id = store.create_run(tiny().to_dict())
    assert train_run(tiny(), store, run_id, hooks=[Prune()]).status == "stopped"
    info = store.record(run_id, latest=False)
    assert info.error == "pruned: no better than the median"
    assert store.metrics(run_id, ["train/loss"]).step.max() == 10


def test_the_readme_hook_example_logs_its_rows(tmp_path, monkeypatch):
    """README 'Add your own measurement', a complete program since issue 34 (item 7; tests/test_readme_examples.py
    runs it as written): the hook's rows are in the store, at every log step, until its early stop."""
    from pathlib import Path

    from stability.runs.store import RunStore

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("### Add your own measurement", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("STABILITY_STORE", str(tmp_path / "runs.db"))
    monkeypatch.setenv("STABILITY_HOME", str(tmp_path / "home"))
    exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})
    with RunStore(tmp_path / "runs.db") as store:
        (run,) = store.records()
        norms = store.metrics(run.id, ["custom/weight_norm"])
    every = run.config.train.resolved_log_every()
    assert len(norms) >= 100 // every and (norms.step % every == 0).all() and (norms.value > 0).all()


@pytest.mark.parametrize("cell, options", [("irnn", {}), ("rnn", {"init": "orthogonal"})])
def test_the_singular_values_are_read_at_step_0_before_any_update(store, cell, options):
    """W = I (IRNN) or orthogonal: every σ is 1 before training, so the step-0 margin is 0; the first update
    moves it. Each sv/* is read once a step (the start's reading and the log steps' never coincide)."""
    config = RunConfig(CellConfig(cell, 8, options), TaskConfig("adding", {"seq_len": 6}),
                       TrainConfig(steps=4, batch_size=8, log_every=2, lr=0.05, eval_examples=16, probe_examples=4))
    run_id = store.create_run(config.to_dict())
    assert train_run(config, store, run_id).status == "completed"
    rows = store.metrics(run_id)
    sv = rows[rows["name"].str.startswith("sv/") & (rows["name"] != "sv/spectrum")]
    assert not sv.duplicated(["step", "name"]).any()
    first = sv[sv["step"] == 0].set_index("name")["value"]
    assert {"sv/min", "sv/max", "sv/margin", "sv/condition"} <= set(first.index)
    assert first["sv/min"] == pytest.approx(1.0, abs=1e-6) and first["sv/max"] == pytest.approx(1.0, abs=1e-6)
    assert first["sv/margin"] < 1e-6
    later = sv[(sv["step"] == 4) & (sv["name"] == "sv/margin")]["value"].item()
    assert later > first["sv/margin"]


class BlowsUpAfter(NaNAfter):
    """The task's loss times 1e12 ** (calls - after): finite, then a gradient that grows by 1e12 a step
    until its float32 norm overflows to inf."""

    def loss(self, pred, y):
        self.calls += 1
        value = self.task.loss(pred, y)
        return value * 1e12 ** max(0, self.calls - self.after)


def test_a_divergence_between_log_steps_keeps_the_growing_gradient_norms(store, monkeypatch):
    """SGORNN paper Table 1's FastRNN explodes between two log steps: the window's per-step gradient
    norms since the last log are recorded, each at its step, the overflowed one as inf."""
    real_build = tasks.build
    monkeypatch.setattr(tasks, "build", lambda *a, **k: BlowsUpAfter(real_build(*a, **k), after=20))
    run_id, status = run(store, tiny(steps=1000, log_every=10, eval_every=1000, probe_every=1000))
    assert status == "diverged"
    norms = store.metrics(run_id, ["grad/total_norm"]).sort_values("step")
    late = norms[norms.step > 10]  # the steps after the log step 10, up to the last finite one
    assert late.step.tolist() == list(range(11, 11 + len(late))) and len(late) >= 4
    values = late.value.tolist()
    assert values[-1] > 1e30 and math.isfinite(values[-1])  # float32 squares would read inf past ~1e19
    assert values[-1] > 1e10 * values[-2] > 1e20 * values[-3]  # the growth that ended it, step by step
    diverged_at = store.record(run_id, latest=False).step
    assert diverged_at == late.step.iloc[-1] + 1
    assert not math.isfinite(store.metrics(run_id, ["train/loss"]).sort_values("step").value.iloc[-1])
