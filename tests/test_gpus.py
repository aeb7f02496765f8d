"""GPUs on a machine without one: their facts simulated by ``CUDA_VISIBLE_DEVICES``, a stand-in
``nvidia-smi`` on the PATH and lists of (name, total, free); real worker processes for the slots."""
from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from stability.admission import budget
from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig
from stability.core import gpus
from stability.core.gpus import GpuMemory
from stability.execution.pids import is_alive
from stability.runs.status import TERMINAL
from stability.runs.store import RunStore
from stability.workers import gpu_slots, processes, scheduler
from statuses import set_status

REPO = Path(__file__).resolve().parent.parent
GIB = 2**30
CARD_16GB = [GpuMemory("0", "a 16 GB card", 16 * GIB, int(15.6 * GIB))]


# ------------------------------------------------------------------ GPU facts
@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    """An ``nvidia-smi`` on the PATH that prints ``lines`` (written by the test) for any query."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "nvidia-smi"
    output = tmp_path / "nvidia-smi.out"

    def answer(text: str, status: int = 0):
        output.write_text(text)
        script.write_text(f"#!/bin/sh\ncat {output}\nexit {status}\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)

    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return answer


def test_gpu_facts_come_from_nvidia_smi_in_its_own_process(fake_nvidia_smi, monkeypatch):
    fake_nvidia_smi("0, GPU-aaaa-1111, NVIDIA A100-SXM4-80GB, 81920, 80000\n"
                    "1, GPU-bbbb-2222, Tesla T4, 15360, 2048\n")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    listed = gpus.list_gpus()
    assert listed == [GpuMemory("0", "NVIDIA A100-SXM4-80GB", 81920 * 2**20, 80000 * 2**20, "GPU-aaaa-1111"),
                      GpuMemory("1", "Tesla T4", 15360 * 2**20, 2048 * 2**20, "GPU-bbbb-2222")]
    assert gpus.visible_gpus() == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert [(gpu.id, gpu.name) for gpu in gpus.gpu_memory()] == [("1", "Tesla T4")]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa")  # a UUID prefix names a GPU too
    assert [(gpu.id, gpu.free) for gpu in gpus.gpu_memory()] == [("GPU-aaaa", 80000 * 2**20)]
    fake_nvidia_smi("0, GPU-x, A GPU, [N/A], [N/A]\n")  # no facts rather than wrong ones
    assert gpus.list_gpus() == []
    fake_nvidia_smi("NVIDIA-SMI has failed\n", status=9)
    assert gpus.list_gpus() == []


def test_without_nvidia_smi_there_are_no_facts(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpus.list_gpus() == [] and gpus.visible_gpus() == [] and gpus.gpu_memory() == []


@pytest.mark.parametrize("text, visible", [("0,1", ["0", "1"]), (" 2 , 0 ", ["2", "0"]), ("", []), ("-1", []),
                                           ("0,-1,1", ["0"]), ("GPU-abcd,1", ["GPU-abcd", "1"])])
def test_visible_gpus_read_cuda_visible_devices_as_cuda_does(text, visible):
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": text}, listed=[]) == visible


def test_a_gpu_list_is_parsed_or_one_clear_error():
    assert gpus.parse_gpu_list("0, 1,GPU-ab12") == ["0", "1", "GPU-ab12"]
    for wrong in ("", "0,a", "cuda:0"):
        with pytest.raises(ValueError, match="comma-separated indices or UUIDs"):
            gpus.parse_gpu_list(wrong)


def test_reading_gpu_facts_starts_no_cuda_in_this_process(fake_nvidia_smi):
    fake_nvidia_smi("0, GPU-aaaa, A GPU, 16000, 15000\n")
    code = ("import torch; from stability.core import gpus; from stability.admission import budget; "
            "from stability.config import RunConfig; "
            "budget.check(RunConfig(), None, torch.device('cuda')); print(gpus.gpu_memory()[0].name, "
            "torch.cuda.is_initialized())")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["A", "GPU", "False"]


# ------------------------------------------------------------------ which GPU a worker gets
def test_gpu_for_is_round_robin_and_allows_several_per_gpu():
    assert [gpu_slots.gpu_for(i, ["0", "1"]) for i in range(5)] == ["0", "1", "0", "1", "0"]
    assert [gpu_slots.gpu_for(i, ["3"]) for i in range(3)] == ["3", "3", "3"]
    with pytest.raises(ValueError, match="no visible GPU"):
        gpu_slots.gpu_for(0, [])
    with pytest.raises(ValueError, match="slot_index"):
        gpu_slots.gpu_for(-1, ["0"])
    assert gpu_slots.free_slot({0, 2}, 4) == 1 and gpu_slots.free_slot({0, 1}, 2) == 2
    assert gpu_slots.sweep_worker_environments(3, ["0", "1"]) == [
        {"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}, {"CUDA_VISIBLE_DEVICES": "0"}]
    assert gpu_slots.sweep_worker_environments(2, []) == [{}, {}]


def test_a_run_takes_the_lowest_slot_no_running_run_holds(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        first, second, third = (store.create_run(RunConfig().to_dict()) for _ in range(3))
        assert gpu_slots.run_environment(store, first, 2, ["0", "1"]) == {"CUDA_VISIBLE_DEVICES": "0"}
        set_status(store, first, "running", pid=os.getpid())
        assert gpu_slots.run_environment(store, second, 2, ["0", "1"]) == {"CUDA_VISIBLE_DEVICES": "1"}
        set_status(store, second, "running", pid=os.getpid())
        set_status(store, first, "completed")  # slot 0 and its GPU are free again
        assert gpu_slots.run_environment(store, third, 2, ["0", "1"]) == {"CUDA_VISIBLE_DEVICES": "0"}
        assert gpu_slots.run_slot(store, third) == {"slot": 0, "gpu": "0"}
        assert gpu_slots.run_environment(store, third, 2, []) == {}  # no GPU: nothing added


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "runs.db"
    yield path
    with RunStore(path) as store:  # every worker still alive is killed
        for run in store.records():
            if run.status not in TERMINAL and run.pid is not None and is_alive(run.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.pid, signal.SIGKILL)


def environment_of(pid: int, timeout: float = 10.0) -> dict[str, str]:
    """A process's environment from /proc (read again while it is empty: just after exec the
    kernel may show nothing for a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        data = Path(f"/proc/{pid}/environ").read_bytes()
        if data or time.monotonic() > deadline:
            return dict(entry.decode().split("=", 1) for entry in data.split(b"\0") if b"=" in entry)
        time.sleep(0.01)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads a worker's environment in /proc")
def test_two_run_slots_train_on_two_gpus(store_path, monkeypatch):
    """Two real workers, two GPUs visible: each worker's own environment names a different one."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    long = RunConfig(CellConfig("rnn", 8), TaskConfig("adding", {"seq_len": 10}),
                     TrainConfig(steps=100_000, batch_size=8, log_every=50, eval_examples=16, probe_examples=4))
    runs = [scheduler.start_run(long, store_path, max_concurrent=2) for _ in range(2)]
    with RunStore(store_path) as store:
        pids = [store.record(run_id, latest=False).pid for run_id in runs]
        assert all(pids)
        seen = [environment_of(pid).get("CUDA_VISIBLE_DEVICES") for pid in pids]
        for run_id in runs:
            scheduler.stop_run(run_id, store_path)
    assert sorted(seen) == ["0", "1"]


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads a worker's environment in /proc")
def test_sweep_workers_joining_share_two_gpus_round_robin(store_path, monkeypatch):
    """``sweeps join --workers 3 --gpus 0,1``: three real workers, GPUs 0, 1 and 0 again."""
    from stability import sweeps

    monkeypatch.setenv("STABILITY_MAX_RUNS", "3")  # a slot each (stability/workers/slots.py)
    base = RunConfig(CellConfig("rnn", 8), TaskConfig("adding", {"seq_len": 10}),
                     TrainConfig(steps=100_000, batch_size=8, log_every=50, eval_examples=16, probe_examples=4))
    with RunStore(store_path) as store:
        sweep_id = sweeps.store_sweep(store, sweeps.build_spec(base, ["lr=1e-3,1e-2,1e-1"]))
    workers = sweeps.join_sweep(sweep_id, store_path, workers=3, gpus=["0", "1"])
    try:
        seen = [environment_of(process.pid).get("CUDA_VISIBLE_DEVICES") for process in workers]
    finally:
        sweeps.stop_sweep(sweep_id, store_path, timeout=2.0)
        with RunStore(store_path) as store:
            processes.terminate_sweep_workers(store, sweep_id)
        for process in workers:
            process.wait(timeout=30)
    assert seen == ["0", "1", "0"]


# ------------------------------------------------------------------ the memory budget
def ptb(seq_len=None, cell="spectral", hidden=128, **train):
    options = {} if seq_len is None else {"seq_len": seq_len}
    return RunConfig(CellConfig(cell, hidden), TaskConfig("ptb_word", options), TrainConfig(**train)).validate()


def test_the_budget_accepts_the_defaults_on_a_16gb_card():
    cuda = torch.device("cuda")
    budget.check(RunConfig().validate(), None, cuda, gpus=CARD_16GB)
    budget.check(ptb(), None, cuda, gpus=CARD_16GB)  # PTB words, T = 300, batch 64, 256 evaluated
    budget.check(ptb(cell="lstm", hidden=1024), None, cuda, gpus=CARD_16GB)


def test_the_budget_refuses_ptb_words_that_a_16gb_card_cannot_hold():
    cuda = torch.device("cuda")
    with pytest.raises(ConfigError) as error:
        budget.check(ptb(seq_len=500), None, cuda, gpus=CARD_16GB)
    message = str(error.value)
    assert "to evaluate 256 examples a batch x 10000 outputs" in message and "\n" not in message
    assert "GPU 0 (a 16 GB card: 15.6 GiB free of 16 GiB" in message and message.endswith(
        "lower eval_examples or seq_len")
    budget.check(ptb(seq_len=500, eval_examples=64), None, cuda, gpus=CARD_16GB)  # the remedy it names
    roomy = [GpuMemory("0", "a 16 GB card", 16 * GIB, 2 * GIB), GpuMemory("1", "an 80 GB card", 80 * GIB, 79 * GIB)]
    budget.check(ptb(seq_len=500), None, cuda, gpus=roomy)  # fits on the roomiest visible GPU


def test_the_budget_reads_free_memory_not_total_memory():
    busy = [GpuMemory("0", "a 16 GB card", 16 * GIB, 4 * GIB)]  # other processes hold 12 GiB
    with pytest.raises(ConfigError, match=r"4 GiB free of 16 GiB"):
        budget.check(ptb(), None, torch.device("cuda"), gpus=busy)


def test_the_footprint_counts_evaluation_probe_and_data():
    used = budget.footprint(ptb(), None)
    one_hot = 64 * 300 * 10_000 * 4  # the training batch, built on the device
    assert used.step >= one_hot
    assert used.evaluation >= 256 * 300 * 10_000 * 4 * 2  # inputs and outputs of 256 examples
    assert used.probe >= 32 * 300 * 10_000 * 8  # the float64 probe input: 768 MB
    assert used.peak == used.parameters + used.probe + max(used.step, used.evaluation, used.probe_pass)


def test_without_gpu_facts_only_the_machines_memory_is_checked():
    assert budget.device_limit(torch.device("cuda"), gpus=[]) is None
    budget.check(ptb(seq_len=5000), None, torch.device("cuda"), gpus=[])  # nothing known: let through
    with pytest.raises(ConfigError, match="this machine has"):
        budget.check(RunConfig(cell=CellConfig("rnn", 1_000_000_000)).validate(), None, torch.device("cuda"), gpus=[])


# ------------------------------------------------------------------ nothing CUDA in the server
def test_rough_time_times_on_the_cpu_and_says_so(tmp_path, monkeypatch):
    """Device auto, a GPU visible (to nvidia-smi's eyes, not CUDA's): the shapes are timed on the
    CPU all the same, and the basis line says the runs will train on a GPU."""
    from stability import sweeps

    base = RunConfig(CellConfig("rnn", 8), TaskConfig("adding", {"seq_len": 10}), TrainConfig(steps=20, batch_size=8))
    spec = sweeps.build_spec(base, ["lr=1e-3,1e-2"])
    with RunStore(tmp_path / "runs.db") as store:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
        on_gpu = sweeps.estimate_sweep_time(spec, store, workers=1)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        on_cpu = sweeps.estimate_sweep_time(spec, store, workers=1)
    assert on_gpu["seconds"] > 0
    assert "timed by 3 training steps on this machine's CPU (the runs train on a GPU" in on_gpu["basis"]
    assert "CPU;" in on_cpu["basis"] and "GPU" not in on_cpu["basis"]


def test_the_cuda_benchmark_says_in_one_line_that_there_is_no_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA is here: the benchmark would run")
    done = subprocess.run([sys.executable, "benchmarks/cells.py", "--device", "cuda"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "sees no CUDA GPU" in done.stderr
