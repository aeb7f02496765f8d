"""Warm workers: a worker process started before the run it will train, waiting idle with torch imported.

    keep_warm(store, limit)                            # the server: an idle warm worker for this store
    keep_warm(store, limit, count=4)                   # a Race of four cells: one for each (Note [Warm slots])
    handed = hand_run(store, run_id, token, env, limit)  # the queue: (process, identity), or None
    order = read_order(sys.stdin)                      # the warm worker: blocks until it is handed a run

Only a process that calls :func:`keep_warm` has warm workers: the Streamlit server (``pages/ui/store.py``),
one per store it serves; the CLI, a worker and a sweep never start one, so ``stability train --background``
starts a fresh worker (its process ends before it could hand a run to a warm one).
``STABILITY_WARM_WORKERS=0`` turns them off. When the server ends, its end of the pipe closes and an idle
warm worker's read returns: it exits without touching the store.

Note [Warm workers]
    Starting a worker costs an interpreter and the import of torch and the training code: seconds on 2
    cores between Start and a run's first point. A warm worker pays them before the run exists. It is
    ``python -m stability.cli.worker --warm``, started by :func:`stability.workers.processes.spawn`
    like every worker: in its own session, with the project's token in its environment (so ``stop_run``
    and ``terminate`` recognise it: Note [Identity]), the thread policy of
    :mod:`stability.workers.threads`, and the store's URL in ``$STABILITY_STORE``, never on its
    command line. Its stdin is a pipe from the process that started it; idle, it blocks in one read of
    that pipe: no CPU, no polling.

    The queue hands it a run where it would start a fresh worker (``scheduler._launch``), along the same
    path: the run is claimed for a worker by the lifecycle's compare-and-set (``claim_for_worker``), the
    order goes down the pipe as one line (the run id, the claim's token, and the slot's environment:
    ``STABILITY_MAX_RUNS`` and the GPU of :func:`stability.workers.gpu_slots.run_environment`), the
    worker's identity is written and the claim handed over to its pid. The warm worker puts that
    environment into its own, adopts the claim (:func:`stability.execution.lifecycle.adopt`) and trains
    the run through ``scheduler.run_worker`` (``lifecycle.claimed``), exactly as a fresh worker would, then
    exits; a fresh warm worker takes its place at once. A warm worker counts as a slot only while it
    trains: the queue counts claimed runs, and an idle warm worker has none.

    On a GPU machine an idle warm worker holds no CUDA context (a context is hundreds of MB of GPU
    memory): it imports torch and the training code, which call nothing of ``torch.cuda``, and sets
    ``CUDA_VISIBLE_DEVICES`` (its run's slot) before the trainer's first CUDA call.

Note [Warm slots]
    A Race starts one run a cell at once, as many as the server's slots allow (pages/race.py). One warm
    worker took the first and the others started fresh interpreters together, all importing torch on the
    same cores as the first run's step 0 (18 s from Start to the first point for four cells in four slots on
    2 cores). So a page that is about to start several runs together asks for as many warm workers as will
    start at once (``keep_warm(store, limit, count)``: the Race page, for its chosen cells up to the slot
    count, while none of its runs is active), each of those runs is handed its own, and only when the last
    idle one is handed a run does a replacement start (one, as for Train, and later: Note [A replacement
    waits]), so no interpreter starts beside the race's runs. They are within the slot count: the queue
    launches no more runs than it has slots, and an idle warm worker holds none; :data:`MAX_WARM` bounds
    the memory they hold (an idle one is ~0.4 GB with torch imported, no CPU).

Note [A replacement waits]
    The replacement of the last warm worker handed a run used to start at once: an interpreter importing
    torch (seconds of CPU) on the cores where the run it replaces was taking its first steps and the page
    was drawing its first point. It now starts :data:`REPLACE_AFTER_S` later, from a timer in the process
    that handed the run; until then :func:`keep_warm` starts no single warm worker for that store (a page's
    periodic call waits with it), while a request for several (a Race about to start) is served at once.
    A Start within those seconds gets a fresh worker, as it would have got one still importing torch.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import IO

from . import processes

WARM_ENV = "STABILITY_WARM_WORKERS"  # "0": no warm workers; "1" (default): one per store and server
WARM_FLAG = "--warm"


@dataclass(frozen=True)
class Order:
    """What the queue hands a warm worker: the run, the claim's token, the slot's environment."""

    run_id: int
    token: str
    environment: dict


@dataclass
class _Warm:
    process: subprocess.Popen
    identity: dict


_idle: dict[str, list[_Warm]] = {}  # store URL -> this process's idle warm workers, oldest first
_calm_until: dict[str, float] = {}  # store URL -> no single replacement before this time (Note [A replacement waits])
_timers: list[threading.Timer] = []  # the replacements waiting (close_warm cancels them)
_lock = threading.Lock()
REPLACE_AFTER_S = 3.0  # the last warm worker handed a run is replaced this long after (Note [A replacement waits])
MAX_WARM = 8  # idle warm workers a process keeps for one store at most (~0.4 GB of memory each with torch)


def warm_workers_on() -> bool:
    """Whether this process keeps warm workers: ``$STABILITY_WARM_WORKERS`` is ``1`` (default) or ``0``."""
    text = os.environ.get(WARM_ENV, "1").strip()
    if text not in ("0", "1"):
        raise ValueError(f"{WARM_ENV} must be 0 (no warm worker) or 1; got {text!r}")
    return text == "1"


def keep_warm(store, limit: int, count: int = 1) -> int | None:
    """Start idle warm workers for ``store`` until this process has ``count`` alive (at most
    :data:`MAX_WARM`; Note [Warm slots]), unless they are off; return the pid of the one handed a run
    next (None when off). ``limit``: the slots, for their thread policy."""
    if not warm_workers_on():
        return None
    with _lock:
        alive = [warm for warm in _idle.get(store.url, []) if warm.process.poll() is None]
        if not alive and count <= 1 and time.monotonic() < _calm_until.get(store.url, -math.inf):
            return None  # the replacement waits for its timer (Note [A replacement waits])
        while len(alive) < max(1, min(int(count), MAX_WARM)):
            process, identity = processes.spawn(store, [WARM_FLAG], "warm", limit, waiting=True)  # store URL: spawn's
            alive.append(_Warm(process, identity))
        _idle[store.url] = alive
        return alive[0].process.pid


def idle_pids(store) -> list[int]:
    """The pids of this process's idle warm workers for ``store`` that are alive, the next one to be handed a
    run first."""
    with _lock:
        return [warm.process.pid for warm in _idle.get(store.url, []) if warm.process.poll() is None]


def idle_pid(store) -> int | None:
    """The pid of this process's next idle warm worker for ``store``, if one is alive."""
    pids = idle_pids(store)
    return pids[0] if pids else None


def hand_run(store, run_id: int, token: str, environment: dict, limit: int) -> tuple[subprocess.Popen, dict] | None:
    """Hand the run claimed with ``token`` to this process's next idle warm worker for ``store`` (Note [Warm
    workers]), and start a replacement when it was the last; None, handing nothing, when there is no live one."""
    with _lock:
        alive = [warm for warm in _idle.get(store.url, []) if warm.process.poll() is None]
        warm = alive.pop(0) if alive else None
        _idle[store.url] = alive
    if warm is None:
        return None
    order = json.dumps({"run": int(run_id), "claim": token, "environment": environment}) + "\n"
    try:
        warm.process.stdin.write(order.encode())
        warm.process.stdin.close()  # one run a warm worker
    except OSError:  # it died between the check and the write
        return None
    if not alive:  # the last one: a replacement, once the run it takes has started (Note [A replacement waits])
        with _lock:
            _calm_until[store.url] = time.monotonic() + REPLACE_AFTER_S
            timer = threading.Timer(REPLACE_AFTER_S, _replace, (store.url, limit))
            timer.daemon = True
            _timers[:] = [waiting for waiting in _timers if waiting.is_alive()] + [timer]
            timer.start()
    return warm.process, warm.identity


def _replace(url: str, limit: int) -> None:
    """The timer of Note [A replacement waits]: one idle warm worker for the store at ``url``. A store that
    cannot be opened now gets none (the server's next :func:`keep_warm` starts it)."""
    from ..runs.errors import StoreError
    from ..runs.store import RunStore

    try:
        with RunStore(url) as store:
            keep_warm(store, limit)
    except (StoreError, OSError):
        pass


def close_warm() -> int:
    """End this process's idle warm workers (their pipe closes: each exits untouched); return how many."""
    with _lock:
        idle = [warm for workers in _idle.values() for warm in workers]
        _idle.clear()
        for timer in _timers:  # no replacement after this (Note [A replacement waits])
            timer.cancel()
        _timers.clear()
        _calm_until.clear()
    for warm in idle:
        if warm.process.stdin is not None and not warm.process.stdin.closed:
            warm.process.stdin.close()
        try:
            warm.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            processes.terminate(warm.process.pid, warm.identity)
    return len(idle)


def read_order(stream: IO[str]) -> Order | None:
    """In the warm worker: block until the queue writes an order (no CPU while waiting); None when the
    pipe closes first (the server ended)."""
    line = stream.readline()
    if not line.strip():
        return None
    order = json.loads(line)
    return Order(int(order["run"]), str(order["claim"]), {str(k): str(v) for k, v in order["environment"].items()})
