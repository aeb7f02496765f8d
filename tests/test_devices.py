"""stability/core/devices.py (device choice and facts) and stability/workers/threads.py (the worker thread
policy).  Training on each device: tests/test_devices_smoke.py; the simulated device without float64:
tests/test_devices_simulated.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from stability.config import ConfigError
from stability.core import devices
from stability.workers import threads as thread_policy


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(thread_policy.THREADS_ENV, raising=False)


@pytest.mark.parametrize("cores, runs, threads", [
    (2, 1, 1),    # the server keeps a core: one thread, not two
    (2, 2, 1),
    (2, 4, 1),    # never fewer than one
    (1, 1, 1),    # nothing to keep on one core
    (4, 1, 3),
    (16, 1, 15),
    (16, 4, 3),   # 4 workers x 3 threads + the server's core fit in 16
    (16, 3, 5),
])
def test_worker_threads_keep_a_core_and_share_the_rest(cores, runs, threads):
    assert thread_policy.worker_threads(runs, cores=cores) == threads


def test_workers_and_server_never_oversubscribe():
    for cores in range(2, 33):
        for runs in range(1, cores):
            assert runs * thread_policy.worker_threads(runs, cores=cores) + thread_policy.RESERVED_CORES <= cores


def test_threads_override_from_the_environment(monkeypatch):
    monkeypatch.setenv(thread_policy.THREADS_ENV, "3")
    assert thread_policy.worker_threads(4, cores=2) == 3
    monkeypatch.setenv(thread_policy.THREADS_ENV, "0")
    with pytest.raises(ValueError, match=thread_policy.THREADS_ENV):
        thread_policy.worker_threads(1)
    monkeypatch.setenv(thread_policy.THREADS_ENV, "two")
    with pytest.raises(ValueError, match=thread_policy.THREADS_ENV):
        thread_policy.worker_threads(1)


def test_worker_threads_rejects_zero_runs():
    with pytest.raises(ValueError, match="concurrent_runs"):
        thread_policy.worker_threads(0, cores=4)


def test_available_cores_is_within_the_machine():
    assert 1 <= thread_policy.available_cores() <= (os.cpu_count() or 1)


def test_worker_environment_sets_threads_and_passive_waiting():
    env = thread_policy.worker_environment({"HOME": "/home/x", "OMP_NUM_THREADS": "8"}, 3)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["HOME"] == "/home/x"
    assert thread_policy.worker_environment({"OMP_WAIT_POLICY": "ACTIVE"}, 1)["OMP_WAIT_POLICY"] == "ACTIVE"


def test_apply_worker_threads_in_a_fresh_process():
    code = ("import torch; from stability.workers import threads; threads.apply_worker_threads(1); "
            "print(torch.get_num_threads(), torch.get_num_interop_threads())")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1"]


def test_resolve_and_describe_device(monkeypatch):
    monkeypatch.delenv(devices.DEVICE_ENV)  # the suite pins auto to the CPU (conftest.py); not this test
    assert devices.resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        expected = "cuda" if torch.cuda.is_available() else "mps"
    assert devices.resolve_device("auto").type == expected
    assert devices.describe_device(torch.device("cpu")) == f"cpu ({torch.get_num_threads()} threads)"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="cuda"):
            devices.resolve_device("cuda")


def test_old_imports_from_train_still_work():
    from stability.training import trainer as train

    assert train.resolve_device is devices.resolve_device
    assert train.describe_device is devices.describe_device


# ------------------------------------------------------------------ choosing the device
def test_the_suite_pins_auto_to_the_cpu_in_every_process():
    assert os.environ[devices.DEVICE_ENV] == "cpu"
    assert devices.resolve_device("auto") == torch.device("cpu")
    code = "from stability.core.devices import resolve_device; print(resolve_device('auto'))"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": root},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "cpu"


def test_auto_honours_the_operators_device_and_a_forced_device_wins(monkeypatch):
    monkeypatch.setenv(devices.DEVICE_ENV, " CPU ")
    assert devices.resolve_device("auto").type == "cpu"
    monkeypatch.setenv(devices.DEVICE_ENV, "tpu")
    with pytest.raises(ConfigError, match=f"^{devices.DEVICE_ENV} must be one of cpu, cuda, mps or auto; got 'tpu'$"):
        devices.resolve_device("auto")
    assert devices.resolve_device("cpu").type == "cpu"  # a config's own device is not the operator's
    if not torch.cuda.is_available():
        monkeypatch.setenv(devices.DEVICE_ENV, "cuda")
        with pytest.raises(ConfigError, match=f"^{devices.DEVICE_ENV} 'cuda' was asked for"):
            devices.resolve_device("auto")
    monkeypatch.setenv(devices.DEVICE_ENV, "")
    assert devices.resolve_device("auto").type in ("cpu", "cuda", "mps")


# ------------------------------------------------------------------ what each device can do
def test_mps_facts_follow_torch_2_13():
    modern, old = devices.mps_facts(complex64=True), devices.mps_facts(complex64=False)
    for facts in (modern, old):
        assert not facts.has("float64") and not facts.has(torch.complex128) and facts.has(torch.float32)
        assert not any(facts.has(op) for op in ("svd", "eig", "matrix_exp"))
        assert not facts.float64_fast
        assert "float64" in facts.why_not("float64") and "MPS" in facts.why_not(torch.float64)
    assert modern.has(torch.complex64) and modern.has("fft")
    assert not old.has("complex64") and not old.has("fft") and "macOS 14" in old.why_not("complex64")


def test_the_cpu_has_everything_and_reads_on_itself():
    facts = devices.device_facts("cpu")
    assert all(facts.has(need) for need in ("float64", "complex64", "complex128", *devices.OPS))
    assert facts.float64_fast and not facts.simulated
    cpu = torch.device("cpu")
    assert devices.reading_device(cpu) == cpu and devices.kernel_device("matrix_exp", cpu) == cpu
    assert devices.missing_needs(cpu, {"complex64": "x", "fft": "y"}) == []
    assert devices.rng_state(cpu) is None  # the CPU's generator is torch.get_rng_state()
    devices.synchronize(cpu)  # nothing queued: returns


@pytest.mark.parametrize("capability, full", [((6, 0), True), ((7, 0), True), ((8, 0), True), ((9, 0), True),
                                              ((10, 0), True), ((6, 1), False), ((7, 5), False), ((8, 6), False),
                                              ((8, 9), False), ((12, 0), False)])
def test_float64_is_full_rate_only_on_data_centre_cards(capability, full):
    assert devices.float64_full_rate(capability) is full


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_a_slow_float64_gpu_reads_on_the_cpu():
    device = torch.device("cuda")
    fast = devices.float64_full_rate(torch.cuda.get_device_capability(device))
    assert devices.reading_device(device) == (device if fast else torch.device("cpu"))
    assert devices.rng_state(device) is not None


def test_float64_on_mps_is_one_line_wherever_it_is_asked_for():
    line = devices.dtype_problem("mps", "float64")
    assert line == ("dtype float64 cannot train on mps: the MPS framework has no float64 (Apple GPUs have no "
                    "double precision); use dtype float32 or device cpu")
    assert devices.dtype_problem("mps", "float32") is None and devices.dtype_problem("cpu", "float64") is None
    from stability.config import RunConfig, TrainConfig

    with pytest.raises(ConfigError) as refused:
        RunConfig(train=TrainConfig(device="mps", dtype="float64")).validate()
    assert str(refused.value) == line
    RunConfig(train=TrainConfig(device="auto", dtype="float64")).validate()  # auto: judged once resolved


def test_describe_mps():
    assert devices.describe_device(torch.device("mps")) == "mps (Apple GPU)"


def test_workers_get_the_mps_fallback_only_where_there_is_mps():
    env = thread_policy.worker_environment({}, 1)
    assert (env.get(devices.MPS_FALLBACK_ENV) == "1") is torch.backends.mps.is_available()
    kept = thread_policy.worker_environment({devices.MPS_FALLBACK_ENV: "0"}, 1)  # a caller's own choice
    assert kept[devices.MPS_FALLBACK_ENV] == "0"
