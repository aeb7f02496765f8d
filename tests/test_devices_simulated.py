"""A Mac's path, proven on the CPU: the simulated device without float64 (stability/core/simulated_device.py)
refuses what MPS refuses, and every registered cell still trains through the real trainer with every reading
stored; the ops a training step runs on the device all have MPS kernels in the installed torch."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from stability import cells
from stability.admission.preflight import check_buildable
from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig
from stability.core import devices
from stability.core.simulated_device import simulated_device
from stability.parametrizations.rotations import PlaneRotations
from stability.training.build import build_model, build_task
from stability.training.probes import ProbeBatch, gradient_flow, spectrum_metrics, stable_norm
from stability.training.run import build_and_train
from stability.training.trainer import Trainer

SEQ_LEN = 6
TIMING = ("speed/", "progress/")  # wall-clock rows differ between any two runs


def tiny(cell: str = "rnn", **train) -> RunConfig:
    """Every log step a probe step: grad/h0_norm between probes depends on the wall time it took."""
    defaults = dict(steps=4, batch_size=4, device="cpu", log_every=1, eval_every=2, probe_every=1,
                    eval_examples=8, probe_examples=4)
    defaults.update(train)
    return RunConfig(cell=CellConfig(cell, 8), task=TaskConfig("adding", {"seq_len": SEQ_LEN}),
                     train=TrainConfig(**defaults))


def built(config: RunConfig):
    torch.manual_seed(config.train.seed)
    task = build_task(config)
    return task, build_model(config, task)


def readings(result):
    """Every row but the timings, by (name, step[, index])."""
    metrics = result.metrics[~result.metrics["name"].str.startswith(TIMING)]
    return (metrics.set_index(["name", "step"])["value"].sort_index(),
            result.series.set_index(["name", "step", "index"])["value"].sort_index())


def assert_same_readings(result, expected, rtol: float = 0.0, spectral_atol: float = 1e-12):
    """The same rows with the same values (within ``rtol``).  The singular values (``sv/*``) agree to
    rounding only: under any torch dispatch mode, the simulation's included, ``svdvals`` asks LAPACK
    for the singular vectors too, a different algorithm path (1e-16 apart in float64, 1e-7 in
    float32: mlp's dense layers)."""
    for got, want in zip(readings(result), readings(expected)):
        assert got.index.equals(want.index)
        spectral = got.index.get_level_values("name").str.startswith("sv/")
        assert np.allclose(got[~spectral], want[~spectral], rtol=rtol, atol=0)
        assert np.allclose(got[spectral], want[spectral], rtol=max(rtol, 1e-5), atol=spectral_atol)


# ------------------------------------------------------------------ the simulation bites
def test_the_old_probe_path_raises_as_mps_does_and_the_host_is_exempt():
    _, model = built(tiny())
    weights = [p.detach() for p in model.parameters()]
    with simulated_device():
        with pytest.raises(TypeError, match="MPS framework doesn't support float64"):
            copy.deepcopy(model).double()  # the old ProbeBatch: a float64 copy on the model's device
        with pytest.raises(TypeError, match="MPS framework doesn't support float64"):
            torch.stack([stable_norm(w).to(torch.float64) for w in weights])  # the old norm_of_norms
        with pytest.raises(TypeError, match="MPS framework doesn't support float64"):
            weights[0].to(torch.complex128)  # the old singular_values of a complex W
        with pytest.raises(NotImplementedError, match="linalg_matrix_exp"):
            torch.linalg.matrix_exp(torch.zeros(3, 3))
        with devices.on_host():  # the readings' CPU copy: allowed
            assert copy.deepcopy(model).double().cell.recurrent_matrix().dtype == torch.float64
            assert torch.linalg.matrix_exp(torch.zeros(3, 3)).equal(torch.eye(3))
    assert copy.deepcopy(model).double() is not None  # and after the block, the CPU is itself again


def test_without_complex64_a_complex_tensor_is_refused_too():
    with simulated_device(complex64=False):
        with pytest.raises(TypeError, match="ComplexFloat"):
            torch.polar(torch.ones(2), torch.zeros(2))
    with simulated_device():
        assert torch.polar(torch.ones(2), torch.zeros(2)).dtype == torch.complex64


def test_the_simulated_device_says_what_it_lacks_and_then_is_gone():
    cpu = torch.device("cpu")
    with simulated_device() as facts:
        assert devices.device_facts(cpu) is facts and facts.simulated
        assert not facts.has("float64") and facts.has("complex64") and not facts.has("matrix_exp")
        assert devices.reading_device(cpu) == cpu and "simulated" in devices.describe_device(cpu)
    assert devices.device_facts(cpu).has("float64") and not devices.device_facts(cpu).simulated


# ------------------------------------------------------------------ the readings, the same on a CPU copy
def test_the_probe_batch_reads_the_same_on_the_simulated_device():
    task, model = built(tiny("sgornn"))
    x, y = next(iter(task.batches("val", 4)))
    expected = ProbeBatch(model, task.loss, x, y)
    with simulated_device():
        probe = ProbeBatch(model, task.loss, x, y)
        probe.sync()
        got = (probe.h0_norm(), probe.through_time(), probe.output_h0_norm())
        matrix = model.cell.recurrent_matrix()
        spectrum, sigma = spectrum_metrics(matrix, with_radius=True)
    assert probe.shadow.cell.recurrent_matrix().dtype == torch.float64  # float64, on the host
    assert got[0] == expected.h0_norm() and got[2] == expected.output_h0_norm()
    assert got[1].tolist() == expected.through_time().tolist()
    want_spectrum, want_sigma = spectrum_metrics(matrix, with_radius=True)
    assert np.allclose(sigma, want_sigma, rtol=0, atol=1e-12)  # assert_same_readings says why not equal
    assert spectrum.keys() == want_spectrum.keys()


@pytest.mark.parametrize("name", ["rnn", "kru", "exponential"])
def test_gradient_flow_reads_the_same_on_the_simulated_device(name):
    torch.manual_seed(0)
    cell = cells.build(name, 2, 8)
    expected = gradient_flow(cell, seq_len=5)
    with simulated_device():
        got = gradient_flow(cell, seq_len=5)
    assert got.per_step["grad_norm"].equals(expected.per_step["grad_norm"])
    assert np.allclose(got.per_step["bound"], expected.per_step["bound"], rtol=1e-12, atol=0)  # sv/*: see above
    assert np.allclose(got.singular_values, expected.singular_values, rtol=0, atol=1e-12)


# ------------------------------------------------------------------ every cell trains there
@pytest.mark.parametrize("name", cells.available())
def test_every_cell_trains_on_the_simulated_device_with_every_reading(name):
    config = tiny(name)
    expected = build_and_train(config)
    with simulated_device():
        result = build_and_train(config)
    assert result.status == expected.status == "completed"
    names = set(result.metrics["name"])
    assert {"grad/h0_norm", "grad/A_h_norm", "grad/h0_norm_train", "grad/total_norm", "grad/recurrent_norm",
            "sv/min", "sv/max", "sv/margin", "sv/condition", "sv/spectral_radius", "gap/loss", "gap/mse",
            "val/loss", "test/loss"} <= names
    flow = result.series[result.series["name"] == "grad/h_t_norm"]
    assert sorted(set(flow.step)) == [0, 1, 2, 3, 4] and (flow.groupby("step").size() == SEQ_LEN + 1).all()
    assert (flow.value > 0).all() and np.isfinite(flow.value).all()
    layered = {"grad/layer_norm"} if name == "mlp" else set()  # a cell of layers reads each (spectral Fig. 5)
    assert set(result.series["name"]) == {"grad/h_t_norm", "sv/spectrum"} | layered
    # the same numbers as on the CPU itself: the readings' definitions did not move with them
    assert_same_readings(result, expected)


@pytest.mark.parametrize("cell", ["rnn", "sgornn"])
def test_a_step_on_the_simulated_device_reads_nothing_from_it_but_at_a_log_step(cell):
    """The CUDA half's contract (tests/test_device_steps.py) holds on a device without float64: the
    window's rows are float32 there and read with the log step's values; the norm of norms crosses to
    the host (in float64 there) at a log step only."""
    from test_device_steps import count_reads
    from test_device_steps import tiny as steps_config

    with simulated_device():
        counts, logs = count_reads(steps_config(cell, device="cpu"))
    assert logs == [5, 10, 15, 20, 23]
    for step in range(1, 24):
        reads = counts[("step", step)]
        # a log step: the device's rows (float32) in one read, and the host's float64 total norm
        assert (1 <= reads <= 2) if step in logs else reads == 0, (step, reads)


@pytest.mark.parametrize("name", ["vprnn", "sgornn"])
def test_plane_rotations_train_without_complex64_in_real_arithmetic(name):
    config = tiny(name)
    expected = build_and_train(config)
    with simulated_device(complex64=False):
        result = build_and_train(config)
    assert result.status == "completed"
    # float32 products rounded in another order; W is orthogonal to float32's precision either way, so its
    # margin max|σ - 1| (~1e-7) is rounding itself
    assert_same_readings(result, expected, rtol=1e-4, spectral_atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_real_plane_rotations_match_the_complex_product(dtype):
    torch.manual_seed(0)
    rotations = PlaneRotations(12, 7)
    angles = torch.empty(7, 6, dtype=dtype).uniform_(-3, 3).requires_grad_()
    weights = torch.randn(12, 12, dtype=dtype)
    complex_w, real_w = rotations(angles), rotations.real_forward(angles)
    tolerance = dict(rtol=0, atol=1e-13 if dtype == torch.float64 else 1e-6)
    assert torch.allclose(real_w, complex_w, **tolerance)
    assert torch.allclose(real_w.t() @ real_w, torch.eye(12, dtype=dtype), **tolerance)  # orthogonal
    (complex_grad,) = torch.autograd.grad((complex_w * weights).sum(), angles)
    (real_grad,) = torch.autograd.grad((real_w * weights).sum(), angles)
    assert torch.allclose(real_grad, complex_grad, rtol=0, atol=1e-12 if dtype == torch.float64 else 1e-5)
    if dtype == torch.float64:
        assert torch.autograd.gradcheck(rotations.real_forward, (angles,))


# ------------------------------------------------------------------ what preflight refuses
def test_float64_and_complex_cells_are_refused_in_one_line_before_anything_trains():
    with simulated_device():
        with pytest.raises(ConfigError, match=r"^dtype float64 cannot train on cpu \(simulated without float64\): "
                                              r"the MPS framework has no float64 .*; use dtype float32 or device cpu$"):
            check_buildable(tiny(dtype="float64"))
        task, model = built(tiny())
        with pytest.raises(ConfigError, match="^dtype float64 cannot train"):
            Trainer(model, task, tiny(dtype="float64"))
        for name in cells.available():
            check_buildable(tiny(name))  # macOS 14: every cell
    with simulated_device(complex64=False):
        for name, op in [("kru", "complex64 for its complex W and state"), ("urnn", "complex64"),
                         ("vprnn", None), ("exponential", None), ("mlp", None)]:
            if op is None:
                check_buildable(tiny(name))
                continue
            with pytest.raises(ConfigError) as refused:
                check_buildable(tiny(name))
            line = str(refused.value)
            assert line.startswith(f"cell {name!r} cannot train on cpu (simulated without float64): it needs {op}")
            assert "macOS 14" in line and "\n" not in line


# ------------------------------------------------------------------ the ops a step runs on the device
NATIVE_FUNCTIONS = "packaged/ATen/native/native_functions.yaml"
# On the CPU, aten::lstm runs these oneDNN kernels; on MPS it dispatches to _lstm_mps (checked below).
CPU_ONLY_SPELLINGS = {"mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"}


def _dispatch_table():
    torchgen = pytest.importorskip("torchgen")
    yaml = pytest.importorskip("yaml")
    path = Path(torchgen.__file__).parent / NATIVE_FUNCTIONS
    if not path.exists():
        pytest.skip(f"this torch ships no {NATIVE_FUNCTIONS}")
    return {entry["func"].split("(")[0]: entry for entry in yaml.safe_load(path.read_text())}


def _runs_on_mps(table, name: str) -> bool:
    """Whether aten ``name`` (``op`` or ``op.overload``) has an MPS kernel or a composite definition."""
    entry = table.get(name)
    if entry is None:  # not an ATen native function (a profiler marker)
        return True
    if "structured_delegate" in entry:
        return _runs_on_mps(table, entry["structured_delegate"])
    keys = {key.strip() for spelled in (entry.get("dispatch") or {}) for key in spelled.split(",")}
    return not keys or bool(keys & {"MPS", "CompositeExplicitAutograd", "CompositeImplicitAutograd",
                                    "CompositeExplicitAutogradNonFunctional"})


# The backward of an op routed to the CPU (devices.run_with_kernel) runs there too, on its CPU tensors.
ROUTED_BACKWARDS = ("LinalgMatrixExpBackward", "LinalgSvdBackward")


class _DeviceOps(TorchDispatchMode):
    """The aten ops run outside devices.on_host (on the device)."""

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        node = torch._C._current_autograd_node()
        if not devices.is_on_host() and not (node is not None and node.name().startswith(ROUTED_BACKWARDS)):
            overload = func._overloadname
            self.ops.add(func._schema.name.split("::")[-1] + ("" if overload == "default" else f".{overload}"))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", cells.available())
def test_every_op_a_training_step_runs_on_the_device_has_an_mps_kernel(name):
    table = _dispatch_table()
    assert _runs_on_mps(table, "_lstm_mps") and not _runs_on_mps(table, "linalg_matrix_exp")  # the reading is right
    torch.manual_seed(0)
    cell = cells.build(name, 3, 8, h0="noisy")
    optimizer = torch.optim.Adam(cell.parameters(), 1e-3)
    x = torch.randn(4, 5, 3)
    with simulated_device(), _DeviceOps() as seen:
        for impl in ("auto", "loop"):
            cell.impl = impl
            outputs, _ = cell(x)
            ((outputs ** 2).mean() + cell.penalty()).backward()
        torch.nn.utils.clip_grad_norm_(cell.parameters(), 1.0)
        optimizer.step()
        with torch.no_grad():
            cell.after_optimizer_step()
            cell.recurrent_matrix()
        cell.gate_values()
    missing = sorted(op for op in seen.ops - CPU_ONLY_SPELLINGS if not _runs_on_mps(table, op))
    assert not missing, f"{name} runs ops MPS has no kernel for: {missing}"
