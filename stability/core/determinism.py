"""The determinism switch (``train.deterministic``): the same run, the same numbers, on a GPU too.

    use_deterministic_algorithms(True)   # in the process that trains, before CUDA starts (the Trainer does it)
    deterministic_settings()             # what torch is set to now, for a run's description and the tests

On the CPU a seeded run is already repeatable to the bit (a resumed run continues exactly).  On a
GPU it is not by default: cuDNN picks among algorithms, some of which (and ``index_select``'s
backward, an ``index_add`` of atomics) sum in whatever order the threads finish, and cuBLAS
shares its workspace between streams.  Switched on, this sets

* ``torch.use_deterministic_algorithms(True)``: every op takes its deterministic implementation
  (``index_select``'s backward among them), and an op that has none raises instead of running;
* ``torch.backends.cudnn.deterministic = True`` and ``benchmark = False``: cuDNN's deterministic
  algorithms, the same ones every run;
* ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` in the environment (unless it is set already): cuBLAS's
  fixed workspace, which it reads once, when it first runs: so this must happen before CUDA
  starts (a worker process sets it before it builds anything on the GPU).

The price is speed (some deterministic kernels are slower), which is why it is off by default.
"""
from __future__ import annotations

import os

import torch

CUBLAS_WORKSPACE_ENV = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_WORKSPACE = ":4096:8"  # eight 4 MiB buffers: cuBLAS's documented deterministic setting


def use_deterministic_algorithms(deterministic: bool) -> None:
    """Switch this process's torch to deterministic algorithms (or back to the defaults)."""
    if deterministic:
        os.environ.setdefault(CUBLAS_WORKSPACE_ENV, CUBLAS_WORKSPACE)
        torch.backends.cudnn.benchmark = False
    if deterministic or torch.are_deterministic_algorithms_enabled():  # else already so: the call would
        torch.use_deterministic_algorithms(bool(deterministic))       # import torch._inductor (1-10 s), for nothing
    torch.backends.cudnn.deterministic = bool(deterministic)


def fix_cublas_workspace(environ=os.environ) -> None:
    """``CUBLAS_WORKSPACE_CONFIG`` in ``environ`` unless it is set: for a process that trains several
    runs (a sweep worker), of which a later one may be deterministic after cuBLAS has started."""
    environ.setdefault(CUBLAS_WORKSPACE_ENV, CUBLAS_WORKSPACE)


def deterministic_settings() -> dict[str, object]:
    """What this process's torch is set to: ``algorithms`` (``use_deterministic_algorithms``),
    ``cudnn`` (``cudnn.deterministic``), ``cudnn_benchmark`` and ``cublas_workspace`` (the variable)."""
    return {"algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn": bool(torch.backends.cudnn.deterministic),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cublas_workspace": os.environ.get(CUBLAS_WORKSPACE_ENV)}
