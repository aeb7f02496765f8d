"""Background training runs: one detached worker process per run, a queue, stop, reconcile.

    run_id = start_run(config)        # stored as 'queued'; a worker starts if a slot is free
    stop_run(run_id)                  # flag in the store, then SIGTERM/SIGKILL if it lingers
    resume_run(run_id)                # a stopped/interrupted/failed run continues from its checkpoint
    reconcile()                       # dead workers -> 'interrupted'; queued runs -> free slots

A worker is a fresh interpreter (``python -m stability.cli.worker --worker ID
--store PATH``), never a fork, so it is safe for CUDA; it runs in its own
session, so it outlives the Streamlit script, server or shell that started
it. Its output goes to ``<store home>/logs/run-<id>.log`` (``RunStore.home``: the SQLite
file's folder, or this machine's folder for a PostgreSQL store). It runs from the
package's folder with that folder on ``PYTHONPATH``, so it starts whatever
the caller's working directory. Its torch threads follow
:mod:`stability.execution.threads` (one core kept for the server, the rest shared by
the ``STABILITY_MAX_RUNS`` slots, OpenMP waiting passively).

Stop signals only a process that is provably this run's worker: ``_launch``
gives each worker a random token in its environment and records the token,
the pid and the process's start time in ``<store home>/logs/run-<id>.worker``;
a process is signalled only if its ``/proc`` entry shows the same start time,
the token in its environment, and this run's worker command line. Anything
else (a pid recycled by another program, a store crafted to point at one, a
foreground CLI run, a system without ``/proc`` unless this very process
launched the worker) is left alone.

The queue lives in the store itself: a run is *unclaimed* while it is
'queued' with no pid. Scheduling (mark dead workers, count busy slots,
launch the oldest unclaimed runs) happens under an exclusive lock on
``<store home>/runner.lock``, so two processes looking at the same store
never launch the same run twice. On a shared (PostgreSQL) store each machine
judges and launches only its own runs (``runs.host``): a pid means nothing on
another host, and a sweep's runs are claimed by its workers
(:mod:`stability.sweeps`, Note [Claiming trials]). A slot is busy while a 'running' run, or a
claimed 'queued' run whose worker is still starting, has a live pid.
At most ``STABILITY_MAX_RUNS`` (default 1) runs train at once.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

from . import gpu_slots, threads
from ..config import RunConfig
from ..runs.records import RunRecord
from ..runs.status import ACTIVE_STATUSES, TERMINAL
from ..runs.store import ENV_VAR as STORE_ENV, RunStore
from .preflight import check_buildable

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; scheduling is then best effort
    fcntl = None

MAX_RUNS_ENV = "STABILITY_MAX_RUNS"
TOKEN_ENV = "STABILITY_WORKER_TOKEN"
RESUMABLE = ("stopped", "interrupted", "failed")
INTERRUPTED_ERROR = "worker process ended without a final status"
STALE_HEARTBEAT_S = 60.0
TERMINATE_GRACE_S = 3.0
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds stability/
WORKER_MODULE = "stability.cli.worker"  # python -m WORKER_MODULE --worker RUN_ID | --sweep SWEEP_ID

_launched: list[subprocess.Popen] = []  # workers this process started, reaped when they end


def max_concurrent_runs(max_concurrent: int | None = None) -> int:
    """``max_concurrent`` if given, else ``$STABILITY_MAX_RUNS``, else 1."""
    if max_concurrent is None:
        text = os.environ.get(MAX_RUNS_ENV, "1")
        try:
            max_concurrent = int(text)
        except ValueError:
            raise ValueError(f"{MAX_RUNS_ENV} must be an integer >= 1; got {text!r}") from None
    if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
        raise ValueError(f"max_concurrent must be an integer >= 1; got {max_concurrent!r}")
    return max_concurrent


def is_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an exited, unreaped child)."""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS): our own children are reaped by _reap_launched
        return True
    return stat.rpartition(")")[2].split()[0] != "Z"  # the state follows "(command)"


@contextlib.contextmanager
def scheduling_lock(store: RunStore):
    """Hold the store's scheduling lock (between processes) for the ``with`` block."""
    path = store.home / "runner.lock"
    with open(path, "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


def start_run(config: RunConfig, store_path=None, name: str | None = None,
              max_concurrent: int | None = None) -> int:
    """Store ``config`` as a new run and start a worker for it if a slot is free; return its id.

    Raises :class:`stability.config.ConfigError` (nothing is stored) when the
    configuration is invalid or its cell cannot be built. With every slot
    busy the run stays 'queued' until a finishing worker or :func:`reconcile`
    launches it.
    """
    config.validate()
    check_buildable(config)
    limit = max_concurrent_runs(max_concurrent)
    store = RunStore(store_path)
    try:
        with scheduling_lock(store):
            run_id = store.create_run(config.to_dict(), name or config.name or None)
            store.update_run(run_id, host=socket.gethostname())
            _schedule(store, limit)
        return run_id
    finally:
        store.close()


def create_attached_run(store: RunStore, config: RunConfig, name: str | None = None) -> int:
    """Store a run that the calling process trains itself (the CLI's foreground ``train``).

    The run is claimed with this process's pid at creation, so the queue
    never hands it to a worker as well.
    """
    with scheduling_lock(store):
        run_id = store.create_run(config.to_dict(), name or config.name or None)
        store.update_run(run_id, pid=os.getpid())
    return run_id


def stop_run(run_id: int, store_path=None, timeout: float = 5.0) -> str:
    """Stop run ``run_id`` and return its final status.

    A queued run that no worker has claimed is 'stopped' at once. Otherwise
    the stop flag is set and the worker, which checks it every step, ends the
    run itself; if it has not within ``timeout`` seconds, the run is marked
    'stopped' and its worker's process group gets SIGTERM, then SIGKILL, if
    that process is provably the worker launched for this run (a foreground
    CLI run, or any other process the store names, is never signalled).
    """
    store = RunStore(store_path)
    try:
        store.request_stop(run_id)
        with scheduling_lock(store):
            run = store.run(run_id)
            if run["status"] == "queued" and run["pid"] is None:
                store.set_status(run_id, "stopped")
        deadline = time.monotonic() + timeout
        while store.run(run_id)["status"] not in TERMINAL and time.monotonic() < deadline:
            time.sleep(0.1)
        run = store.run(run_id)
        if run["status"] in TERMINAL:
            return run["status"]
        if _terminate(run["pid"], _read_claim(store, run_id)):
            error = f"terminated after not stopping within {timeout:g} s"
        else:
            error = (f"not stopped within {timeout:g} s; process {run['pid']} was not signalled, "
                     "as it is not provably this run's worker")
        with scheduling_lock(store):
            if store.run(run_id)["status"] not in TERMINAL:
                store.set_status(run_id, "stopped", error=error)
        return store.run(run_id)["status"]
    finally:
        store.close()


def resume_run(run_id: int, store_path=None, max_concurrent: int | None = None) -> None:
    """Queue a stopped, interrupted or failed run to continue from its last checkpoint.

    The worker that picks it up restores weights, optimizer state, RNG and
    data position (:meth:`stability.training.trainer.Trainer.fit` with ``resume=True``),
    discards the rows logged after the checkpoint's step and appends to the
    same run. Raises :class:`stability.training.checkpoints.ResumeError` (one line, nothing
    changed) when the run cannot be resumed.
    """
    limit = max_concurrent_runs(max_concurrent)
    store = RunStore(store_path)
    try:
        with scheduling_lock(store):
            prepare_resume(store, run_id)
            store.update_run(run_id, status="queued", pid=None, host=socket.gethostname())
            _schedule(store, limit)
    finally:
        store.close()


def prepare_resume(store: RunStore, run_id: int, claim: bool = False) -> RunConfig:
    """Check that ``run_id`` can be resumed, count the resume and clear its stop request; return its config.

    With ``claim`` the calling process claims the run (the CLI's foreground ``resume``).
    Call under :func:`scheduling_lock`.
    """
    from ..training.checkpoints import RESUMABLE_FORMATS, ResumeError, load_checkpoint

    run = store.run(run_id)
    if run["status"] not in RESUMABLE:
        raise ResumeError(f"run {run_id} is {run['status']}; only a stopped, interrupted or failed run "
                          "can be resumed")
    path = store.checkpoint_path(run_id)
    if not path.exists():
        raise ResumeError(f"run {run_id} has no checkpoint to resume from (one is written every "
                          "5 minutes and when a run ends)")
    try:
        checkpoint_format = load_checkpoint(path).get("format")
    except Exception as error:  # a truncated or foreign file
        raise ResumeError(f"run {run_id}'s checkpoint {path} cannot be read ({describe_error(error)})") from None
    if checkpoint_format not in RESUMABLE_FORMATS:
        raise ResumeError(f"run {run_id}'s checkpoint was written by an older version that cannot be "
                          "resumed exactly; start a new run with the same config instead")
    config = RunConfig.from_dict(run["config"])
    config.validate()
    store.update_run(run_id, resumes=(run.get("resumes") or 0) + 1, stop_requested=False, error=None,
                     **({"pid": os.getpid()} if claim else {}))
    return config


def reconcile(store_path=None, max_concurrent: int | None = None) -> list[int]:
    """Mark runs whose worker is gone 'interrupted', start queued runs in free slots.

    Returns the ids newly marked 'interrupted'. Cheap; call it whenever runs are listed.
    """
    limit = max_concurrent_runs(max_concurrent)
    store = RunStore(store_path)
    try:
        with scheduling_lock(store):
            return _schedule(store, limit)
    finally:
        store.close()


def run_worker(run_id: int, store_path) -> str:
    """Train run ``run_id`` in this process (the worker's entry point); return its final status.

    Any exception marks the run 'failed' with ``"ExceptionType: message"``;
    the run is never left 'running'. Before returning, the next queued run
    is launched into the slot this one frees.
    """
    from ..training.run import train_run

    limit = max_concurrent_runs()
    threads.apply_worker_threads(threads.worker_threads(limit))
    store = RunStore(store_path)
    try:
        try:
            run = store.run(run_id)
            if run["status"] in TERMINAL:  # stopped or interrupted before this worker got to it
                return run["status"]
            train_run(RunConfig.from_dict(run["config"]), store, run_id, resume=bool(run.get("resumes")))
            status = store.run(run_id)["status"]
            if status not in TERMINAL:
                store.set_status(run_id, "failed", error=f"the trainer returned with the run still {status!r}")
        except BaseException as error:
            traceback.print_exc()
            store.set_status(run_id, "failed", error=describe_error(error))
            if not isinstance(error, Exception):
                raise
        finally:
            with scheduling_lock(store):
                _schedule(store, limit)
        return store.run(run_id)["status"]
    finally:
        store.close()


def describe_error(error: BaseException) -> str:
    """``"ExceptionType: first line of the message"`` (just the type when there is no message)."""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__


# ------------------------------------------------------------------ scheduling
def _schedule(store: RunStore, limit: int) -> list[int]:
    """Under the scheduling lock: mark dead workers, then fill free slots oldest first."""
    _reap_launched()
    interrupted, busy, unclaimed = [], 0, []
    here = socket.gethostname()
    for run in store.active_runs():
        if run.host not in (None, here):  # another machine's run (a shared store): not ours to judge
            continue
        if run.status == "queued" and run.pid is None:
            # a sweep's requeued runs wait for the sweep's workers; on a shared store a run is
            # launched by the machine that queued it (start_run/resume_run set its host)
            if run.sweep_id is None and (run.host == here or not store.shared):
                unclaimed.append(run.id)
        elif is_alive(run.pid) or (run.pid is None and _heartbeat_age(run) <= STALE_HEARTBEAT_S):
            busy += 1
        elif store.record(run.id).status in ACTIVE_STATUSES:
            # the process is gone and can no longer write, so the status just read is its last
            store.set_status(run.id, "interrupted", error=INTERRUPTED_ERROR)
            interrupted.append(run.id)
    for run_id in sorted(unclaimed)[:max(0, limit - busy)]:
        _launch(store, run_id, limit)
    return interrupted


def _heartbeat_age(run: RunRecord) -> float:
    beats = [t for t in (run.heartbeat, run.started_at, run.created_at) if t is not None]
    return time.time() - max(beats) if beats else float("inf")


def _launch(store: RunStore, run_id: int, limit: int) -> None:
    """Start a detached worker for ``run_id`` and record its pid (the claim) and identity."""
    process, claim = _spawn(store, ["--worker", str(run_id)], f"run-{run_id}", limit,
                            gpu_slots.run_environment(store, run_id, limit))  # its slot's GPU
    _write_claim(store, run_id, claim)
    store.update_run(run_id, pid=process.pid, host=socket.gethostname())


def _spawn(store: RunStore, arguments: list[str], name: str, limit: int,
           extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, dict]:
    """A detached ``python -m stability.cli.worker ARGUMENTS`` with its output in ``logs/NAME.log``
    (a folder only this user may use: ``RunStore.private_subfolder``), a fresh token and the thread
    policy of ``limit`` concurrent workers; returns the process and its claim (pid, token, start
    time). The store's URL, a server's password included, goes in the worker's environment
    (``STABILITY_STORE``, which only this user can read), never on its command line, which ``ps``
    shows every user (stability/cli/worker.py)."""
    logs = store.private_subfolder("logs")
    token = secrets.token_hex(16)
    env = threads.worker_environment(os.environ, threads.worker_threads(limit))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env[MAX_RUNS_ENV] = str(limit)
    env[TOKEN_ENV] = token
    env.update(extra_env or {})
    env[STORE_ENV] = store.url
    command = [sys.executable, "-m", WORKER_MODULE, *arguments]
    with open(logs / f"{name}.log", "ab") as log:
        process = subprocess.Popen(command, cwd=PACKAGE_ROOT, env=env, stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    _launched.append(process)
    return process, {"pid": process.pid, "token": token, "start": process_start_time(process.pid)}


def _reap_launched() -> None:
    """Collect the exit status of finished workers this process started (no zombies)."""
    _launched[:] = [process for process in _launched if process.poll() is None]


def launched_workers() -> list[subprocess.Popen]:
    """The worker processes this process launched that are still running (the finished ones are reaped)."""
    _reap_launched()
    return list(_launched)


def _terminate(pid: int | None, claim: dict | None) -> bool:
    """SIGTERM the worker's process group, then SIGKILL if it stays, if ``pid`` is the claimed worker.

    Returns whether the process is gone (it was already, or the signals ended it); False when it
    was left alone because it is not provably the worker of ``claim``.
    """
    if not is_alive(pid):
        return True
    if not _is_claimed_worker(pid, claim):
        return False
    for sig, grace in ((signal.SIGTERM, TERMINATE_GRACE_S), (getattr(signal, "SIGKILL", signal.SIGTERM), 1.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if hasattr(os, "killpg") and os.getpgid(pid) == pid:  # a worker leads its own session
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            _reap_launched()
            if not is_alive(pid):
                return True
            time.sleep(0.05)
    return not is_alive(pid)


def _is_claimed_worker(pid: int, claim: dict | None) -> bool:
    """Whether ``pid`` is provably the worker ``_launch`` started for this claim (see the module doc)."""
    if not claim or claim.get("pid") != pid or not claim.get("token"):
        return False
    ours = [process for process in _launched if process.pid == pid and process.poll() is None]
    try:
        stat_start = process_start_time(pid)
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # no /proc (macOS), or not ours to read: only a child we launched ourselves
        return bool(ours)
    token = f"{TOKEN_ENV}={claim['token']}".encode()
    return (stat_start is not None and stat_start == claim.get("start") and token in environ
            and WORKER_MODULE.encode() in command and (b"--worker" in command or b"--sweep" in command))


def process_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks after boot (``/proc/<pid>/stat`` field 22),
    or None without ``/proc``. A pid and its start time name one process for as long as the machine is up."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])  # fields 3.. follow "(command)"; 22 is the 20th


def _claim_path(store: RunStore, run_id: int) -> Path:
    return store.home / "logs" / f"run-{run_id}.worker"


def _write_claim(store: RunStore, run_id: int, claim: dict) -> None:
    path = _claim_path(store, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the token is a secret
    with open(descriptor, "w") as handle:
        json.dump(claim, handle)


def _read_claim(store: RunStore, run_id: int) -> dict | None:
    try:
        claim = json.loads(_claim_path(store, run_id).read_text())
    except (OSError, ValueError):
        return None
    return claim if isinstance(claim, dict) else None


# ------------------------------------------------------------------ sweeps
def launch_sweep_workers(store: RunStore, sweep_id: int, workers: int,
                         gpus: list[str] | None = None) -> list[subprocess.Popen]:
    """Start ``workers`` detached sweep workers (:func:`stability.sweeps.workers.run_sweep_worker`) on this machine, sharing
    its cores by the thread policy of ``workers`` concurrent runs; worker ``i`` sees only GPU
    ``gpu_slots.gpu_for(i, gpus)`` (``CUDA_VISIBLE_DEVICES``; ``gpus`` default: the visible ones,
    none without a GPU). Their claims (pid, token, start time)
    go to ``logs/sweep-<id>.workers`` so that :func:`terminate_sweep_workers` signals only them."""
    started = []
    for extra in gpu_slots.sweep_worker_environments(workers, gpus):
        process, claim = _spawn(store, ["--sweep", str(int(sweep_id))], f"sweep-{int(sweep_id)}", workers, extra)
        started.append(process)
        with open(_sweep_claims_path(store, sweep_id), "a") as handle:
            os.chmod(handle.fileno(), 0o600)  # the tokens are secrets
            handle.write(json.dumps(claim) + "\n")
    return started


def terminate_sweep_workers(store: RunStore, sweep_id: int) -> int:
    """SIGTERM (then SIGKILL) the sweep workers this machine launched for ``sweep_id`` that are
    provably them (see :func:`_is_claimed_worker`); returns how many were ended."""
    ended = 0
    try:
        lines = _sweep_claims_path(store, sweep_id).read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        try:
            claim = json.loads(line)
        except ValueError:
            continue
        if isinstance(claim, dict) and is_alive(claim.get("pid")) and _terminate(claim.get("pid"), claim):
            ended += 1
    return ended


def _sweep_claims_path(store: RunStore, sweep_id: int) -> Path:
    path = store.home / "logs" / f"sweep-{int(sweep_id)}.workers"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
