"""The thread policy of background workers.

    worker_threads(concurrent_runs)   # torch threads for one worker
    worker_environment(env, threads)  # the worker's environment, set before torch is imported
    apply_worker_threads(threads)     # in the worker, right after ``import torch``
    adopt_worker_policy(concurrent_runs)   # a foreground run (the CLI's train, resume): both, in this process

Thread policy
-------------
A worker trains beside the Streamlit server that draws it (and beside the
other workers), so it must never ask for more cores than are left to it:

* ``threads = max(1, (cores - 1) // concurrent_runs)``: one core is kept for
  the server and the OS (none on a one-core machine); ``cores`` is what this
  process may run on (CPU affinity, and a cgroup CPU quota where there is one);
  ``concurrent_runs`` is ``STABILITY_MAX_RUNS``, the slots, not the runs now busy,
  so a worker never grows into a slot another worker is about to take.
  ``$STABILITY_THREADS`` overrides the count (``benchmarks/live_page.py`` uses it).
* one inter-op thread: a training step has no independent ops to overlap.
* ``OMP_WAIT_POLICY=PASSIVE`` in the worker's environment: torch's OpenMP
  (GNU libgomp in the pip wheels) otherwise spin-waits for its other threads
  at every parallel region; when one of those threads has been preempted by
  another process, the spinning thread burns the core that thread needs, and
  a step stalls for whole scheduler slices. ``KMP_BLOCKTIME`` only concerns
  Intel's OpenMP, which these wheels do not use, so it is not set. A caller's
  own ``OMP_WAIT_POLICY`` is left as it is.
* a foreground run (``stability train`` and ``resume`` without ``--background``)
  trains in the CLI's own process, so it takes the same policy there
  (:func:`adopt_worker_policy`): the environment a worker would be started
  with, set in ``os.environ`` before this process first imports torch (libgomp
  reads ``OMP_WAIT_POLICY`` when it loads), then the same torch threads. Where
  torch is loaded already (``main()`` called from a session that imported it),
  the wait policy can no longer change and only the thread counts apply. This
  module imports torch only in :func:`apply_worker_threads` for that reason.

Measured with ``python benchmarks/live_page.py --neighbour busy --seconds 15``
on a 2-core machine: steps/s of a real worker alone and beside a
``while True`` Python process, every condition in one run. The machine was
shared with other jobs (load average about 10), so "alone" is itself loaded;
the last column compares each policy with this one under the same neighbour.

| run                         | worker policy                         | threads | alone  | busy beside | busy ÷ policy's busy |
|-----------------------------|---------------------------------------|---------|--------|-------------|----------------------|
| rnn 128, adding T=100       | old: cores//runs, default wait        | 2       | ≤ 0.67 | ≤ 0.67      | ≤ 0.06×              |
| (the README default)        | cores//runs, PASSIVE                  | 2       | 7.7    | 11.2        | 0.98×                |
|                             | 1 thread, default wait                | 1       | 11.5   | 12.9        | 1.13×                |
|                             | this policy: (cores-1)//runs, PASSIVE | 1       | 12.4   | 11.4        | 1                    |
| rnn 16, T=20, log each step | old: cores//runs, default wait        | 2       | 6.7    | 0.98        | 0.015×               |
|                             | cores//runs, PASSIVE                  | 2       | 33.9   | 20.5        | 0.32×                |
|                             | 1 thread, default wait                | 1       | 62.2   | 52.0        | 0.80×                |
|                             | this policy                           | 1       | 71.1   | 64.9        | 1                    |

(``≤``: fewer than two logged steps in the window.) The old policy
reproduces the issue's collapse (13.9 -> 0.14 and 766 -> 32 steps/s there;
here the other jobs already play the neighbour, so it collapses even "alone").
Passive waiting alone rescues two threads for the large run, but not for the
small one, where a second thread costs more than it gives; one thread per
worker on two cores is what keeps both runs fast. With one thread there is
no OpenMP team to wait for, so the wait policy should change nothing (the
1.13× and 0.80× are single windows on a loaded machine); it is kept for
machines where a worker gets several threads, which is where it measured
its rescue above (≤ 0.67 -> 11.2 steps/s at two threads).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from ..core.errors import ConfigError

THREADS_ENV = "STABILITY_THREADS"
RESERVED_CORES = 1  # for the Streamlit server and the OS
WORKER_OPENMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def available_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        cores = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def positive_setting(name: str, default: int) -> int:
    """The whole number ``$name`` (``default`` where unset), at least 1; anything else is one line
    (ConfigError, a ValueError)."""
    text = os.environ.get(name) or str(default)
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{name} must be an integer >= 1; got {text!r}")
    return value


def worker_threads(concurrent_runs: int, cores: int | None = None) -> int:
    """Torch threads for one of ``concurrent_runs`` workers: ``max(1, (cores - 1) // concurrent_runs)``,
    or ``$STABILITY_THREADS`` when set."""
    if os.environ.get(THREADS_ENV):
        return positive_setting(THREADS_ENV, 1)
    if concurrent_runs < 1:
        raise ValueError(f"concurrent_runs must be >= 1; got {concurrent_runs}")
    cores = available_cores() if cores is None else cores
    reserved = RESERVED_CORES if cores > RESERVED_CORES else 0
    return max(1, (cores - reserved) // concurrent_runs)


def thread_environment(env: dict[str, str], threads: int) -> dict[str, str]:
    """A copy of ``env`` with OpenMP/MKL thread counts set to ``threads``, and passive waiting unless
    ``env`` chooses a wait policy itself (no torch needed to know it)."""
    env = dict(env)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    for name, value in WORKER_OPENMP_ENV.items():
        env.setdefault(name, value)
    return env


def worker_environment(env: dict[str, str], threads: int) -> dict[str, str]:
    """A copy of ``env`` for a worker process: :func:`thread_environment`, and with MPS, torch's CPU
    fallback for ops MPS has no kernel for (:func:`stability.core.devices.worker_environment`) unless
    ``env`` says."""
    from ..core import devices  # torch: whether this machine has MPS

    env = thread_environment(env, threads)
    for name, value in devices.worker_environment().items():
        env.setdefault(name, value)
    return env


def adopt_worker_policy(concurrent_runs: int) -> int:
    """This process trains a run as one of ``concurrent_runs`` workers would (the CLI's foreground
    ``train`` and ``resume``): its environment as :func:`thread_environment` makes a worker's, set
    before torch is first imported here, then :func:`apply_worker_threads`. Returns the thread count.
    The MPS fallback of :func:`worker_environment` is not set: knowing whether there is MPS needs torch."""
    count = adopt_worker_environment(concurrent_runs)
    apply_worker_threads(count)
    return count


def adopt_worker_environment(concurrent_runs: int) -> int:
    """The environment half of :func:`adopt_worker_policy`, without importing torch (a command that may
    still refuse its input before it needs torch); the thread count to apply once it does."""
    count = worker_threads(concurrent_runs)
    wanted = thread_environment(os.environ, count)
    os.environ.update({name: value for name, value in wanted.items() if os.environ.get(name) != value})
    return count


def apply_worker_threads(threads: int) -> None:
    """``threads`` intra-op threads and one inter-op thread in this process."""
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or inter-op work already ran: keep what is there
        pass
