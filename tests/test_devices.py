"""stability/core/devices.py (device choice) and stability/execution/threads.py (the worker thread policy)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from stability.core import devices
from stability.execution import threads as thread_policy
from stability.config import ConfigError


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
    code = ("import torch; from stability.execution import threads; threads.apply_worker_threads(1); "
            "print(torch.get_num_threads(), torch.get_num_interop_threads())")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1"]


def test_resolve_and_describe_device():
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
