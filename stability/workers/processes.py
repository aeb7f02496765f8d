"""Worker processes: starting them detached, knowing them again, and ending only them.

    process, identity = spawn(store, ["--worker", "7"], "run-7", limit, {CLAIM_ENV: token})
    write_identity(store, 7, identity)        # logs/run-7.worker: pid, token, start time
    terminate(pid, identity)                  # SIGTERM, then SIGKILL, only if it is provably ours
    process = start(TIMING_MODULE, ["20", "1"], 1, stdout=subprocess.PIPE)   # any child: the one way

A worker is a fresh interpreter (``python -m stability.cli.worker --worker ID | --sweep ID``,
the store's URL in its environment), never a fork, so it is safe for CUDA; it runs in its own session, so it outlives
the Streamlit script, server or shell that started it. Its output goes to ``<store
home>/logs/<name>.log``. It runs from the package's folder with that folder on ``PYTHONPATH``,
so it starts whatever the caller's working directory. Its torch threads follow
:mod:`stability.workers.threads`.

Note [Started by name]
    This package starts a child process only through :func:`start`, as ``python -m MODULE``, and only a
    module named in :data:`SPAWNED_MODULES`: :data:`WORKER_MODULE` (a run's, a sweep's or a warm worker,
    ``stability/cli/worker.py``) and :data:`TIMING_MODULE` (the Streamlit server's shape-timing child,
    ``stability/workers/timing.py``, Note [Timing apart]). Such a module is reached by its name, not by an
    import, so no import shows the edge: ``tests/test_architecture.py`` holds the same table (``SPAWNS``),
    checks that each module exists with its ``main`` and ``__main__`` entry, adds each as an edge of the
    graph it checks, and fails on a ``-m`` command built anywhere else.

Note [Identity]
    A process is signalled only if it is provably a worker this project started for this run (or
    sweep): :func:`spawn` gives each worker a random token in its environment (``TOKEN_ENV``) and
    returns its identity, the pid, the token and the process's start time, which the caller writes
    to ``<store home>/logs/run-<id>.worker`` (``sweep-<id>.workers``, one line a worker). A process
    is signalled only if it has that pid and start time, the token in its environment and this
    module's worker command line (psutil reads them). Anything else (a pid recycled by another
    program, a store crafted to point at one, a foreground CLI run, a process whose environment
    we may not read unless this very process launched it) is left alone. The token is a secret
    (the file is 0600); it is not the run's claim (stability.execution.lifecycle, Note [claims]),
    which the store holds and anyone reading it sees.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from . import gpu_slots, threads
from ..execution.pids import is_alive, process_start_time
from ..runs.store import ENV_VAR as STORE_ENV

MAX_RUNS_ENV = "STABILITY_MAX_RUNS"
TOKEN_ENV = "STABILITY_WORKER_TOKEN"  # Note [Identity]
CLAIM_ENV = "STABILITY_RUN_CLAIM"  # the run's claim token, which the worker takes over (lifecycle.adopt)
TERMINATE_GRACE_S = 3.0
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds stability/
WORKER_MODULE = "stability.cli.worker"  # python -m WORKER_MODULE --worker RUN_ID | --sweep SWEEP_ID | --warm
TIMING_MODULE = "stability.workers.timing"  # python -m TIMING_MODULE LIMIT THREADS: the shape-timing child
SPAWNED_MODULES = (WORKER_MODULE, TIMING_MODULE)  # every module this package starts (Note [Started by name])
WORKER_FLAGS = ("--worker", "--sweep", "--warm")  # a warm worker: stability.workers.warm

_launched: list[subprocess.Popen] = []  # workers this process started, reaped when they end


def spawn(store, arguments: list[str], name: str, limit: int,
          extra_env: dict[str, str] | None = None, *, waiting: bool = False) -> tuple[subprocess.Popen, dict]:
    """A detached ``python -m stability.cli.worker ARGUMENTS`` with its output in ``logs/NAME.log``
    (a folder only this user may use: ``RunStore.private_subfolder``), a fresh token and the thread
    policy of ``limit`` concurrent workers; returns the process and its identity (pid, token, start
    time; Note [Identity]). The store's URL, a server's password included, goes in the worker's
    environment (``STABILITY_STORE``, which only this user can read), never on its command line,
    which ``ps`` shows every user (stability/cli/worker.py). ``waiting``: a warm worker
    (stability.workers.warm), its stdin a pipe from this process."""
    logs = store.private_subfolder("logs")
    token = secrets.token_hex(16)
    env = {MAX_RUNS_ENV: str(limit), TOKEN_ENV: token, **(extra_env or {}), STORE_ENV: store.url}
    with open(logs / f"{name}.log", "ab") as log:
        process = start(WORKER_MODULE, arguments, threads.worker_threads(limit), env,
                        stdin=subprocess.PIPE if waiting else subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    _launched.append(process)
    return process, {"pid": process.pid, "token": token, "start": process_start_time(process.pid)}


def start(module: str, arguments: list[str], count: int, extra_env: dict[str, str] | None = None,
          **streams) -> subprocess.Popen:
    """``python -m MODULE ARGUMENTS``, the one way this package starts a child (Note [Started by name]): a
    fresh interpreter in its own session, run from the package's folder with that folder on ``PYTHONPATH``,
    with the worker thread policy of ``count`` threads (:mod:`stability.workers.threads`) and ``extra_env``
    in its environment; ``streams``: its ``stdin``, ``stdout`` and ``stderr``. ``module`` must be one of
    :data:`SPAWNED_MODULES`."""
    if module not in SPAWNED_MODULES:
        raise ValueError(f"{module} is not a module this package starts (SPAWNED_MODULES)")
    env = threads.worker_environment(os.environ, count)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env.update(extra_env or {})
    return subprocess.Popen([sys.executable, "-m", module, *arguments], cwd=PACKAGE_ROOT, env=env,
                            start_new_session=True, **streams)


def reap_launched() -> None:
    """Collect the exit status of finished workers this process started (no zombies)."""
    _launched[:] = [process for process in _launched if process.poll() is None]


def launched_workers() -> list[subprocess.Popen]:
    """The worker processes this process launched that are still running (the finished ones are reaped)."""
    reap_launched()
    return list(_launched)


def terminate(pid: int | None, identity: dict | None) -> bool:
    """SIGTERM the worker's process group, then SIGKILL if it stays, if ``pid`` is the worker of
    ``identity`` (Note [Identity]). Returns whether the process is gone: it was already, or the
    signals ended it; False when it lives (left alone: not provably that worker)."""
    if not is_alive(pid):
        return True
    if not is_identified_worker(pid, identity):
        return False
    for sig, grace in ((signal.SIGTERM, TERMINATE_GRACE_S), (getattr(signal, "SIGKILL", signal.SIGTERM), 1.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if hasattr(os, "killpg") and os.getpgid(pid) == pid:  # a worker leads its own session
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            reap_launched()
            if not is_alive(pid):
                return True
            time.sleep(0.05)
    return not is_alive(pid)


def is_identified_worker(pid: int, identity: dict | None) -> bool:
    """Whether ``pid`` is provably the worker :func:`spawn` started with ``identity`` (Note [Identity])."""
    if not identity or identity.get("pid") != pid or not identity.get("token"):
        return False
    ours = any(process.pid == pid and process.poll() is None for process in _launched)
    try:
        process = psutil.Process(pid)
        start, environ, command = process.create_time(), process.environ(), process.cmdline()
    except psutil.AccessDenied:  # not ours to read: only a child this very process launched
        return ours
    except psutil.Error:  # gone, or a zombie
        return False
    return (start == identity.get("start") and environ.get(TOKEN_ENV) == identity["token"]
            and WORKER_MODULE in command and any(flag in command for flag in WORKER_FLAGS))


# ------------------------------------------------------------------ identity files
def identity_path(store, run_id: int) -> Path:
    return store.home / "logs" / f"run-{int(run_id)}.worker"


def write_identity(store, run_id: int, identity: dict) -> None:
    """``logs/run-<id>.worker``: the identity of the worker launched for the run (0600: the token is a secret)."""
    store.private_subfolder("logs")  # made 0700 and this user's (RunStore.private_subfolder)
    path = identity_path(store, run_id)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(descriptor, "w") as handle:
        json.dump(identity, handle)


def read_identity(store, run_id: int) -> dict | None:
    """The identity :func:`write_identity` wrote for the run, or None."""
    try:
        identity = json.loads(identity_path(store, run_id).read_text())
    except (OSError, ValueError):
        return None
    return identity if isinstance(identity, dict) else None


# ------------------------------------------------------------------ sweep workers
def launch_sweep_workers(store, sweep_id: int, workers: int, limit: int, gpus: list[str] | None = None,
                         arguments: tuple[str, ...] = (),
                         environments: list[dict] | None = None) -> list[subprocess.Popen]:
    """Start ``workers`` detached sweep workers (``--sweep ID``, stability.sweeps.workers) on this machine
    now, whatever the slots (the scheduler decides when: stability.workers.slots, Note [Slots]), sharing
    its cores by the thread policy of ``limit`` slots; worker ``i`` sees only GPU ``gpu_slots.gpu_for(i,
    gpus)`` (``CUDA_VISIBLE_DEVICES``; ``gpus`` default: the visible ones, none without a GPU), or has
    ``environments[i]`` where given; ``arguments`` follow (e.g. ``--max-runs 1``). Their identities go to
    ``logs/sweep-<id>.workers`` so that :func:`terminate_sweep_workers` signals only them."""
    started = []
    if environments is None:
        environments = gpu_slots.sweep_worker_environments(workers, gpus)
    for extra in environments[:workers]:
        process, identity = spawn(store, ["--sweep", str(int(sweep_id)), *arguments], f"sweep-{int(sweep_id)}",
                                  limit, extra)
        started.append(process)
        with open(_sweep_identities_path(store, sweep_id), "a") as handle:
            os.chmod(handle.fileno(), 0o600)  # the tokens are secrets
            handle.write(json.dumps(identity) + "\n")
    return started


def sweep_identities(store, sweep_id: int | None = None) -> list[tuple[int, dict]]:
    """``(sweep id, identity)`` of every sweep worker this machine launched (for ``sweep_id``, else for every
    sweep), as ``logs/sweep-<id>.workers`` lists them."""
    folder = Path(store.home) / "logs"
    paths = [_sweep_identities_path(store, sweep_id)] if sweep_id is not None else \
        (sorted(folder.glob("sweep-*.workers")) if folder.is_dir() else [])
    found = []
    for path in paths:
        number = path.name[len("sweep-"):-len(".workers")]
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                identity = json.loads(line)
            except ValueError:
                continue
            if isinstance(identity, dict) and number.isascii() and number.isdigit():
                found.append((int(number), identity))
    return found


def forget_sweep_worker(store, sweep_id: int, pid: int) -> None:
    """Strike worker ``pid`` off ``logs/sweep-<id>.workers``: it has handed its slot on and is ending
    (stability.workers.slots, Note [Slots]); call under the scheduling lock."""
    path = _sweep_identities_path(store, sweep_id)
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return
    kept = [line for line in lines if _pid_of(line) != pid]
    if len(kept) != len(lines):
        descriptor = os.open(path, os.O_WRONLY | os.O_TRUNC)
        with open(descriptor, "w") as handle:
            handle.write("".join(line + "\n" for line in kept))


def _pid_of(line: str):
    try:
        identity = json.loads(line)
    except ValueError:
        return None
    return identity.get("pid") if isinstance(identity, dict) else None


def terminate_sweep_workers(store, sweep_id: int) -> int:
    """SIGTERM (then SIGKILL) the sweep workers this machine launched for ``sweep_id`` that are
    provably them (Note [Identity]); returns how many were ended."""
    ended = 0
    for _, identity in sweep_identities(store, sweep_id):
        if is_alive(identity.get("pid")) and terminate(identity.get("pid"), identity):
            ended += 1
    return ended


def _sweep_identities_path(store, sweep_id: int) -> Path:
    path = store.home / "logs" / f"sweep-{int(sweep_id)}.workers"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
