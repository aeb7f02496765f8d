"""The readings of a graphed run over static buffers (stability/training/graphed_readings.py): on the CPU the
static bodies run eagerly and must equal ProbeBatch's and the Evaluator's readings bit for bit, call after call
at weights that change; what cannot be held (the test split, a stateful task, a set too large) goes through the
eager reading. The captured form is tested on a GPU (tests/test_graphed_cuda.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.training import graphed_readings
from stability.training.batches import batch_on, compact_batches
from stability.training.build import build_model, build_task
from stability.training.evaluation import Evaluator
from stability.training.graphed_readings import StaticEvaluation, StaticProbe
from stability.training.probes import ProbeBatch

CELLS = [("rnn", {}), ("spectral", {}), ("lstm", {}), ("kru", {}), ("sgornn", {}), ("urnn", {}),
         ("rnn", {"h0": "learned"}), ("mlp", {})]


def setup(cell: str, options: dict, task: str = "adding", task_options=None, **train):
    config = RunConfig(cell=CellConfig(cell, 16, dict(options)),
                       task=TaskConfig(task, task_options or {"seq_len": 9}),
                       train=TrainConfig(eval_examples=20, probe_examples=5, device="cpu", **train))
    torch.manual_seed(3)
    task = build_task(config)
    return config, task, build_model(config, task)


def nudge(model: torch.nn.Module, scale: float = 0.05) -> None:
    """A change of every weight, as a training step would make (a generator of its own: the same in every run)."""
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
        model.cell.after_optimizer_step()


def probes(model, task, **kwargs):
    batch = next(iter(compact_batches(task, "val", 5)))
    x, y = batch_on(task, batch, torch.device("cpu"), torch.float32)
    return ProbeBatch(model, task.loss, x, y, **kwargs), StaticProbe(model, task.loss, x, y, **kwargs)


@pytest.mark.parametrize("cell, options", CELLS, ids=[f"{c}{'-' + '-'.join(o.values()) if o else ''}" for c, o in CELLS])
def test_a_static_probe_reads_what_the_probe_batch_reads_bit_for_bit_call_after_call(cell, options):
    _, task, model = setup(cell, options)
    eager, static = probes(model, task)
    for round_ in range(3):  # the static buffers reused at new weights
        for probe in (eager, static):
            probe.sync()
        assert static.h0_norm() == eager.h0_norm()
        through = static.through_time()
        np.testing.assert_array_equal(through, eager.through_time())
        assert through.shape == (10,) and (through > 0).all()
        assert static.output_h0_norm() == eager.output_h0_norm()
        depth, again = static.through_depth(), eager.through_depth()
        assert (depth is None) == (again is None) and (depth is None or np.array_equal(depth, again))
        nudge(model)
    assert static.capture_notes == []


def test_output_h0_norm_alone_after_a_sync_is_of_the_new_weights():
    _, task, model = setup("rnn", {})
    eager, static = probes(model, task)
    for probe in (eager, static):
        probe.sync()
    first = static.through_time()  # computes ||A_h|| too, at these weights
    assert static.output_h0_norm() == eager.output_h0_norm()
    nudge(model)
    for probe in (eager, static):
        probe.sync()
    value = static.output_h0_norm()  # no through_time() since the sync: computed again, not the stale value
    assert value == eager.output_h0_norm()
    np.testing.assert_array_equal(static.through_time(), eager.through_time())
    assert not np.array_equal(first, static.through_time())


def test_many_outputs_read_along_the_same_random_directions():
    # more outputs than max_output_directions: Gaussian directions drawn from seed 0, as ProbeBatch draws them
    _, task, model = setup("rnn", {}, task="copy", task_options={"seq_len": 5})
    eager, static = probes(model, task, max_output_directions=3)
    for probe in (eager, static):
        probe.sync()
    assert static.through_time().shape == eager.through_time().shape
    assert static.output_h0_norm() == eager.output_h0_norm()
    assert static.output_h0_norm(seed=1) == eager.output_h0_norm(seed=1)  # another seed: the eager reading
    assert static.output_h0_norm(seed=1) != static.output_h0_norm()


@pytest.mark.parametrize("cell, task, options", [("rnn", "adding", {"seq_len": 9}),
                                                 ("lstm", "copy", {"seq_len": 5}),
                                                 ("kru", "adding", {"seq_len": 9}),
                                                 ("rnn", "mnist_rows", {"data": "standin"}),
                                                 ("gru", "har2", {"data": "standin"})])
def test_a_static_evaluation_equals_the_evaluator_bit_for_bit_at_changing_weights(cell, task, options):
    config, task, model = setup(cell, {}, task=task, task_options=options)
    device, dtype = torch.device("cpu"), torch.float32
    eager = Evaluator(task, config.train, device, dtype)
    static = StaticEvaluation(task, config.train, device, dtype)
    model.train()
    for _ in range(3):
        for split in ("val", "train"):
            mine = static.split(model, split)
            assert mine == eager.split(model, split) and set(mine) == {"loss", task.metric}
        assert model.training  # put back in training mode
        nudge(model)
    assert set(static._splits) == {"val", "train"}  # noqa: SLF001 - both held, not evaluated eagerly
    assert static.split(model, "test", whole=True) == eager.split(model, "test", whole=True)
    assert set(static._splits) == {"val", "train"}  # noqa: SLF001 - the whole test split is never held


def test_a_set_too_large_to_hold_is_evaluated_as_the_evaluator_does(monkeypatch):
    config, task, model = setup("rnn", {})
    monkeypatch.setattr(graphed_readings, "MAX_HELD_BYTES", 100)
    static = StaticEvaluation(task, config.train, torch.device("cpu"), torch.float32)
    eager = Evaluator(task, config.train, torch.device("cpu"), torch.float32)
    assert static.split(model, "val") == eager.split(model, "val")
    assert static._splits == {}  # noqa: SLF001


def test_a_static_evaluation_evaluates_only_the_model_it_holds_batches_for():
    config, task, model = setup("rnn", {})
    static = StaticEvaluation(task, config.train, torch.device("cpu"), torch.float32)
    static.split(model, "val")
    _, _, other = setup("rnn", {})
    with pytest.raises(ValueError, match="evaluates the model it first evaluated"):
        static.split(other, "val")


def test_on_the_cpu_nothing_is_captured_even_with_a_pool():
    config, task, model = setup("rnn", {})
    eager, static = probes(model, task)
    evaluation = StaticEvaluation(task, config.train, torch.device("cpu"), torch.float32)
    asked = []
    for reading in (static, evaluation):
        reading.capture_into(lambda: asked.append(1) or object())
    for _ in range(3):
        static.sync()
        static.h0_norm()
        static.through_time()
        evaluation.split(model, "val")
    parts = [static._h0, static._full, *(held.part for held in evaluation._splits.values())]  # noqa: SLF001
    assert all(part.graph is None and part.calls == 3 for part in parts)
    assert asked == []  # a CPU part never asks for the pool


def test_the_launch_count_benchmark_counts_each_part_and_its_parts_within_it():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "benchmarks/reading_launches.py", "--cells", "rnn", "--steps", "100",
                           "--seq-len", "6", "--hidden", "8", "--batch", "4"], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if line.startswith("| cell |"))
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("| rnn |")]
    named = dict(zip([part.strip() for part in header.split("|")[2:-1]],
                     [float(part.replace(",", "")) for part in row.split("|")[2:-1]]))
    assert named["training step"] > 100 * 6  # at least an op a time step, 100 steps
    assert named["evaluation (val and train sets)"] > 0 and named["probe through time"] > 0
    assert 0 < named["of which the copy of the weights"] < named["probe through time"]
    assert 0 < named["of which W's singular values"] < named["log-step readings"]


@pytest.mark.parametrize("cell", ["rnn", "irnn", "lstm", "gru", "spectral", "orthogonal", "vprnn", "fastrnn",
                                  "sgornn", "kru", "kru_lstm", "urnn", "mlp"])
def test_what_a_graphed_run_captures_of_its_readings_reads_nothing_on_the_host(cell):
    # the capturable cells (tests/test_graphed_cuda.py's CAPTURABLE): a read on the host inside a reading's body
    # would fail its capture on CUDA (that reading then stays eager with a warning); host_reads finds it here
    from stability import cells
    from stability.training.graphed import host_reads

    assert cell in cells.available()
    config, task, model = setup(cell, {})
    _, static = probes(model, task)
    evaluation = StaticEvaluation(task, config.train, torch.device("cpu"), torch.float32)
    evaluation.split(model, "val")  # holds the batches (its first call, eager, as on CUDA)
    static.sync()
    static.through_time()  # the first call, which draws the output directions outside any capture
    bodies = {"probe's dL/dh0": static._h0_body, "probe through time": static._full_body,  # noqa: SLF001
              "evaluation": evaluation._splits["val"]._body}  # noqa: SLF001
    model.eval()
    found = {name: host_reads(body) for name, body in bodies.items()}
    assert found == {name: [] for name in bodies}
