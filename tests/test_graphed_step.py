"""The graphed training step's pieces on the CPU (stability.training.graphed, issue 32): the host-read checker,
why a run cannot be captured, the step over static buffers against the Trainer's own step, and checkpoints of
capturable optimizer state. The capture itself needs CUDA (no GPU was lent when these were written)."""
import io
import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from stability import cells
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.training.batches import compact_batches
from stability.training.build import build_model, build_task
from stability.training.graphed import (StaticStep, _Window, capturable_optimizer_state, capture_problem,
                                        host_reads, plain_optimizer_state)
from stability.training.trainer import Trainer
from stability.training.window import StepWindow

# The host reads found in each registered cell's trainer step (hidden 8, T 5, batch 4, SGD, a step between
# log steps), as recorded on 2026-11-28 with torch 2.13: none. A cell that gains one is a finding, and fails here.
CELL_READS: dict[str, list[str]] = {}


def config(cell="rnn", *, task="adding", seq_len=10, hidden=8, **train):
    defaults = dict(batch_size=4, steps=50, device="cpu", log_every=50, eval_examples=8, probe_examples=4)
    return RunConfig(cell=CellConfig(cell, hidden), task=TaskConfig(task, {"seq_len": seq_len}),
                     train=TrainConfig(**{**defaults, **train}))


def built(run_config):
    torch.manual_seed(run_config.train.seed)
    task = build_task(run_config)
    return task, build_model(run_config, task)


# ------------------------------------------------------------------ host_reads
def test_host_reads_finds_item_a_branch_on_a_tensor_and_a_boolean_mask_with_the_calling_line():
    t = torch.tensor([1.0, -2.0, 3.0])

    def item():
        return t.sum().item()

    def branch():
        if t.sum() > 0:
            return 1
        return 0

    def mask():
        return t[t > 0]

    line = item.__code__.co_firstlineno + 1
    assert host_reads(item) == [f"aten._local_scalar_dense.default at tests/test_graphed_step.py:{line}"]
    assert [read.split(" at ")[0] for read in host_reads(branch)] == ["aten._local_scalar_dense.default"]
    assert [read.split(" at ")[0] for read in host_reads(mask)] == ["aten.index.Tensor"]
    assert host_reads(lambda: t * 2 + torch.where(t > 0, t, 0).sum()) == []  # device work only


def test_host_reads_names_every_data_dependent_op_in_order():
    t = torch.tensor([1.0, 0.0, 1.0])
    ops = host_reads(lambda: (t.nonzero(), torch.unique(t), torch.masked_select(t, t > 0), torch.equal(t, t),
                              float(t[0]), t.clone().__setitem__(t > 0, 0.0)))
    assert [read.split(" at ")[0] for read in ops] == [
        "aten.nonzero.default", "aten._unique2.default", "aten.masked_select.default", "aten.equal.default",
        "aten._local_scalar_dense.default", "aten.index_put_.default"]


def test_host_reads_finds_a_copy_of_a_device_tensor_to_the_host():
    with FakeTensorMode():  # a CUDA tensor without CUDA: its copy to the host is dispatched like a real one
        device = torch.empty(3, device="cuda")
        host = torch.empty(3)
        assert [read.split(" at ")[0] for read in host_reads(lambda: (device.cpu(), host.copy_(device)))] == [
            "aten._to_copy.default", "aten.copy_.default"]
        assert host_reads(lambda: (device * 2).sum()) == []  # on the device: no read


def test_every_registered_cell_s_trainer_step_reads_nothing_on_the_host():
    found = {}
    for name in cells.available():
        run_config = config(name, seq_len=5, optimizer="sgd", steps=20, log_every=10)
        task, model = built(run_config)
        trainer = Trainer(model, task, run_config)
        trainer.step = 1  # not a log step: the window is read at log steps only
        reads = host_reads(trainer._train_step, next(compact_batches(task, "train", 4)))
        if reads:
            found[name] = reads
    assert found == CELL_READS


def test_a_plain_adam_on_the_cpu_reads_its_step_count_in_the_trainer_s_step():
    # why the graphed step needs the capturable form: the plain one reads its step count on the host
    run_config = config(optimizer="adam", seq_len=5, steps=20, log_every=10)
    task, model = built(run_config)
    trainer = Trainer(model, task, run_config)
    batches = compact_batches(task, "train", 4)
    trainer.step = 1
    trainer._train_step(next(batches))  # the first step creates the state
    trainer.step = 2
    reads = host_reads(trainer._train_step, next(batches))
    assert reads and all(read.startswith("aten._local_scalar_dense.default at stability/training/trainer.py:")
                         for read in reads)


# ------------------------------------------------------------------ capture_problem
@pytest.mark.parametrize("cell", ["rnn", "spectral", "sgornn", "lstm"])
def test_a_capturable_cell_with_adam_has_no_capture_problem(cell):
    run_config = config(cell, optimizer="adam", lr_schedule="step", lr_step_size=10)
    task, model = built(run_config)
    assert capture_problem(model, run_config, task) is None


def test_every_registered_cell_but_exprnn_can_be_captured_as_far_as_the_cpu_tells():
    problems = {}
    for name in cells.available():
        run_config = config(name, seq_len=5)
        task, model = built(run_config)
        problems[name] = capture_problem(model, run_config, task)
    assert {name for name, problem in problems.items() if problem} == {"exponential"}


def test_exprnn_trains_eagerly_because_matrix_exp_reads_its_norm_on_the_host():
    run_config = config("exponential")
    task, model = built(run_config)
    problem = capture_problem(model, run_config)  # the task built from the config
    assert problem.startswith("trains eagerly: torch.linalg.matrix_exp") and "norm to the host" in problem
    assert "\n" not in problem


@pytest.mark.parametrize("optimizer, schedule, expected", [
    ("rmsprop", "step", None), ("rmsprop_keras", "linear", None), ("sgd", "none", None),
    ("sgd", "step", "trains eagerly: sgd has no capturable form"),
    ("rmsprop_tf", "none", "trains eagerly: rmsprop_tf has no capturable form")])
def test_the_optimizers_without_a_capturable_form_train_eagerly(optimizer, schedule, expected):
    run_config = config(optimizer=optimizer, lr_schedule=schedule)
    task, model = built(run_config)
    problem = capture_problem(model, run_config, task)
    assert problem == expected if expected is None else problem.startswith(expected)


def test_a_stateful_task_a_task_scoring_itself_and_a_host_read_in_the_cell_train_eagerly():
    run_config = config()
    task, model = built(run_config)
    task.stateful = True
    assert "carries its hidden state across batches" in capture_problem(model, run_config, task)
    task.stateful = False
    task.score = lambda pred, y: 0.0
    assert "scores its steps on the host" in capture_problem(model, run_config, task)
    del task.score
    weight = model.cell.weight_hh
    model.cell.penalty = lambda: weight.sum() * 0 if weight.sum().item() > -math.inf else None
    problem = capture_problem(model, run_config, task)
    assert problem.startswith("trains eagerly: its step reads the device on the host "
                              "(aten._local_scalar_dense.default at tests/test_graphed_step.py:")

    def failing():
        raise RuntimeError("no penalty here\nsecond line")

    model.cell.penalty = failing
    assert capture_problem(model, run_config, task) == ("trains eagerly: its step could not be checked on the CPU "
                                                        "(RuntimeError: no penalty here)")


# ------------------------------------------------------------------ StaticStep
@pytest.mark.parametrize("cell, task_name", [("rnn", "adding"), ("spectral", "adding"), ("sgornn", "adding"),
                                             ("rnn", "adding_ternary")])
def test_fifty_static_steps_equal_the_trainer_s_steps(cell, task_name):
    run_config = config(cell, task=task_name, optimizer="adam", lr=1e-2, clip_grad_norm=0.5, lr_schedule="step",
                        lr_step_size=10, lr_gamma=0.5, log_every=25)
    task, model = built(run_config)
    trainer = Trainer(model, task, run_config)
    other_task, other = built(run_config)
    static = StaticStep(other, other_task, trainer.train)
    ours, theirs = compact_batches(task, "train", 4), compact_batches(other_task, "train", 4)
    close = dict(rtol=1.3e-6, atol=1e-5)  # float32 round-off (today they agree to the bit)
    for step in range(1, 51):
        trainer.step = step
        result = trainer._train_step(next(ours))
        rows = trainer.window._rows  # a log step's reset empties the window, not its buffer
        static.step(step, next(theirs))
        torch.testing.assert_close(static.loss, result.loss.detach(), **close)
        torch.testing.assert_close(static.h0_grad, result.h0_grad, **close)
        index = (step - 1) % 25
        torch.testing.assert_close(static.window._rows[index, :3], rows[index, :3], **close)  # loss, objective, norm
        if step % 25 == 0:
            reading = static.window.read({"total_norm": static.total_norm})
            assert reading.steps == result.window.steps == 25 and reading.diverged is None
            assert reading.loss == pytest.approx(result.window.loss, rel=1e-6)
            assert reading.score == pytest.approx(result.window.score, rel=1e-6)
            assert reading.extras["total_norm"] == pytest.approx(result.total_norm, rel=1e-6)
            static.window.reset()
        assert static.schedule.value() == trainer.schedule.value()
    for mine, reference in zip(other.parameters(), model.parameters()):
        torch.testing.assert_close(mine, reference, **close)


def test_the_static_window_reads_a_divergence_as_the_trainer_s_window_does():
    task, _ = built(config())
    ours, reference = _Window(task, 6, torch.device("cpu")), StepWindow(task, 6)
    values = [(0.5, 0.5, 2.0), (0.4, 0.4, 3.0), (0.3, 0.3, 0.0), (math.nan, math.nan, math.inf), (0.1, 0.1, 1.0)]
    for step, (loss, objective, norm) in enumerate(values, start=7):
        tensors = [torch.tensor(v) for v in (loss, objective, norm)]
        ours.write(*tensors, torch.tensor(0.0))
        ours.record(step)
        reference.add(step, tensors[0], tensors[1], None, None)
        reference.add_norm(tensors[2])
    assert repr(ours.read()) == repr(reference.read())  # repr: NaN rows compare as text
    assert ours.read().diverged[0] == 10
    ours.reset()
    assert int(ours.counter) == 0 and len(ours) == 0


def test_a_static_step_refuses_another_batch_shape_and_capture_off_cuda():
    run_config = config()
    task, model = built(run_config)
    static = StaticStep(model, task, run_config.train)
    static.step(1, next(compact_batches(task, "train", 4)))
    with pytest.raises(ValueError, match="does not fit the static buffers"):
        static.step(2, next(compact_batches(task, "train", 3)))
    with pytest.raises(RuntimeError, match="captured on a CUDA device; this step trains on cpu"):
        static.capture()
    task.stateful = True
    with pytest.raises(ValueError, match="carries its hidden state"):
        StaticStep(model, task, run_config.train)


# ------------------------------------------------------------------ checkpoints
def _steps(static, batches, first, count):
    for step in range(first, first + count):
        static.step(step, next(batches))


def _through_a_file(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)  # as a checkpoint is read (checkpoints.load_checkpoint)


def test_five_steps_after_a_save_and_load_equal_five_steps_without():
    run_config = config(optimizer="adam", lr=1e-2, lr_schedule="step", lr_step_size=3, clip_grad_norm=1.0)
    task, model = built(run_config)
    static = StaticStep(model, task, run_config.train)
    batches = compact_batches(task, "train", 4)
    _steps(static, batches, 1, 5)
    saved = _through_a_file({"model": model.state_dict(), "optimizer": static.optimizer_state()})
    rest = list(batches.__next__() for _ in range(5))
    _steps(static, iter(rest), 6, 5)

    other_task, other = built(run_config)
    other.load_state_dict(saved["model"])
    resumed = StaticStep(other, other_task, run_config.train)
    resumed.load_optimizer_state(saved["optimizer"])
    assert resumed.schedule.value() == pytest.approx(1e-2 * 0.5)  # the rate the schedule had reached
    _steps(resumed, iter(rest), 6, 5)
    for mine, reference in zip(other.parameters(), model.parameters()):
        assert torch.equal(mine, reference)


def test_a_capturable_adam_s_state_loads_into_a_plain_one_and_back():
    torch.manual_seed(0)
    weights = torch.randn(4, 3)
    grads = [torch.randn(4, 3) for _ in range(10)]

    def adam(parameter, **options):
        return torch.optim.Adam([parameter], lr=1e-2, **options)

    def train(parameter, optimizer, steps):
        for grad in steps:
            parameter.grad = grad.clone()
            optimizer.step()

    straight = torch.nn.Parameter(weights.clone())
    train(straight, adam(straight), grads)

    first = torch.nn.Parameter(weights.clone())
    plain = adam(first)
    train(first, plain, grads[:5])
    # into a capturable Adam (built on the CPU, where torch 2.13 refuses its step: never stepped here)
    held = torch.nn.Parameter(first.detach().clone())
    capturable = torch.optim.Adam([held], lr=torch.tensor(1e-2), capturable=True)
    capturable.load_state_dict(capturable_optimizer_state(_through_a_file(plain.state_dict())))
    step = capturable.state[held]["step"]
    assert capturable.param_groups[0]["capturable"] and step.dtype == torch.float32 and float(step) == 5.0
    # and back, from what the capturable one saves
    again = torch.nn.Parameter(held.detach().clone())
    back = adam(again)
    back.load_state_dict(plain_optimizer_state(_through_a_file(capturable.state_dict())))
    assert not back.param_groups[0]["capturable"] and isinstance(back.param_groups[0]["lr"], float)
    train(again, back, grads[5:])
    assert torch.equal(again, straight)


def test_a_capturable_state_loaded_as_saved_makes_a_plain_adam_capturable_and_its_cpu_step_fails():
    # Note [Capturable state in a checkpoint]: why a checkpoint keeps the plain form
    held = torch.nn.Parameter(torch.randn(3))
    capturable = torch.optim.Adam([held], lr=torch.tensor(1e-2), capturable=True)
    plain_parameter = torch.nn.Parameter(torch.randn(3))
    plain = torch.optim.Adam([plain_parameter], lr=1e-2)
    plain_parameter.grad = torch.randn(3)
    plain.step()
    capturable.load_state_dict(capturable_optimizer_state(plain.state_dict()))
    plain.load_state_dict(capturable.state_dict())
    assert plain.param_groups[0]["capturable"]
    with pytest.raises(AssertionError, match="capturable=True"):
        plain.step()


def test_a_load_after_capture_is_refused_in_one_line_and_capture_refuses_a_declared_cell():
    """Guards a GPU run relies on, checkable here: a checkpoint loaded into a StaticStep whose graph exists
    would be ignored by the graph (refused), and expRNN's step is refused before CUDA is asked to capture it."""
    import pytest as _pytest

    from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
    from stability.training.build import build_model, build_task
    from stability.training.graphed import StaticStep, _declared_problem

    config = RunConfig(CellConfig("exponential", 8), TaskConfig("adding", {"seq_len": 5}), TrainConfig(steps=2))
    task = build_task(config)
    static = StaticStep(build_model(config, task), task, config.train)
    assert "matrix_exp" in _declared_problem(static.model)
    state = static.optimizer_state()
    static._graph = object()  # as after capture(), which needs CUDA
    with _pytest.raises(RuntimeError, match="captured already"):
        static.load_optimizer_state(state)
