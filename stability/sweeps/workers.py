"""Running a sweep: its workers claim jobs (a trial's run), train them and tell the study.

    sweep_id = start_sweep(spec, store, workers=2)   # stored, then detached workers start
    stop_sweep(sweep_id); resume_sweep(sweep_id)     # runs keep their rows and checkpoints
    join_sweep(sweep_id, store_url, workers=4)      # more workers, on another machine, over its GPUs
    work(store, sweep_id)                            # one worker's loop, in this process
"""
from __future__ import annotations

import math
import os
import socket
import time
import traceback
from dataclasses import dataclass

from ..config import RunConfig
from ..core.determinism import fix_cublas_workspace
from ..execution import runner, threads
from ..execution.runner import describe_error, is_alive
from ..runs.status import ACTIVE_STATUSES
from ..runs.store import RunStore
from ..training.hooks import Pruning
from ..training.checkpoints import is_resumable, load_checkpoint
from ..training.run import train_run
from .spec import SweepError, SweepSpec, _jsonable, objective_name
from .study import create_study, next_trial, setting_of, storage, sweep_lock, tell

# Note [Sweep lifecycle]
#     A sweep is a row of the store's ``sweeps`` table (its spec, its Optuna study's name, a status)
#     and an Optuna study in the same database (``store.url``: the SQLite file or the PostgreSQL
#     database), so one URL carries everything and every machine pointed at it sees the same sweep.
#     Workers (:func:`work`, one process each, started by :func:`start_sweep`, :func:`resume_sweep`
#     or :func:`join_sweep` through :mod:`stability.execution.runner`) loop: under the sweep's lock
#     (Note [Claiming trials]) take the next job, train it in-process with ``train_run``, report
#     the run's final objective to its trial, until the study has asked all its runs or the sweep's
#     stop flag is set.  Every trial is an ordinary run of the store, tagged with the sweep's id,
#     the trial's number and the varied values (``runs.sweep_id``, ``trial``, ``params``).
#
#     A trial's state says what became of its run: COMPLETE (the run completed; its value is the
#     final objective), PRUNED (Optuna's pruner stopped it: run status ``pruned``), FAIL (the run
#     diverged or failed), RUNNING (being trained, or stopped or interrupted: not yet told).  A run
#     that was stopped stays its trial's run: resuming the sweep requeues it (status ``queued``,
#     never taken by the ordinary run queue, which skips sweep runs) and a worker continues it from
#     its checkpoint, exactly (``train_run(..., resume=True)``), or from step 0 with its rows
#     discarded where this machine has no checkpoint of it (a run started on another machine, or
#     stopped before its first checkpoint): training is seeded, so the rows come back the same.
#     A run whose worker died (its pid gone on this host, or no heartbeat for
#     :data:`SHARED_STALE_S` from another host) is taken over the same way by any live worker.
#
# Note [Claiming trials]
#     Two workers must never train the same setting and seed, and a random or TPE sweep must ask
#     exactly its budget of trials.  Optuna pops an enqueued trial atomically on PostgreSQL
#     (``SELECT ... FOR UPDATE``) but not on SQLite (pysqlite runs the read outside the write's
#     transaction), and a GridSampler asked from two processes at once may hand both the same grid
#     point (a documented limit of parallel grid search); so every claim (requeued run, orphaned run
#     or new trial, and the new run's row) happens under one lock per sweep: an exclusive ``flock``
#     on a file in ``store.home`` for SQLite (one machine), a PostgreSQL session advisory lock for a
#     shared store.  Training happens outside the lock.
SHARED_STALE_S = 600.0  # a run of a shared store with no heartbeat from its host for this long is orphaned


@dataclass
class Job:
    """A run a worker is to train: a new trial's, or one to continue (``resume``)."""

    run_id: int
    trial: int
    config: RunConfig
    resume: bool


def start_sweep(spec: SweepSpec, store_location=None, *, workers: int = 1, name: str = "") -> int:
    """Store the sweep and its Optuna study, launch ``workers`` background worker processes, return
    the sweep's id (SweepError, one line, when it cannot start; nothing is stored then)."""

    spec.validate(allow_large=True)
    workers = check_workers(workers)
    with RunStore(store_location) as store:
        sweep_id = store_sweep(store, spec, workers=workers, name=name)
        runner.launch_sweep_workers(store, sweep_id, workers)
    return sweep_id


def store_sweep(store, spec: SweepSpec, *, workers: int = 1, name: str = "") -> int:
    """The sweep's row and its Optuna study in ``store``'s database, no worker started: what
    :func:`start_sweep` launches workers on, and what a process that runs :func:`work` itself (a
    preset, stability.presets.running) starts from. Returns the sweep's id."""
    sweep_id = store.create_sweep(spec.to_dict(), name=name or spec.base.name)
    create_study(spec, storage(store), store.sweep(sweep_id)["study"])
    store.update_sweep(sweep_id, workers=workers)
    return sweep_id


def check_workers(workers) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SweepError(f"workers must be an integer >= 1; got {workers!r}")
    return workers


def stop_sweep(sweep_id: int, store_location=None, timeout: float = 10.0) -> str:
    """Stop a sweep: no new trials, and its runs in progress stop (status ``stopped``, rows and
    checkpoints kept, their trials left open for :func:`resume_sweep`). Returns the sweep's status."""

    with RunStore(store_location) as store:
        sweep = store.sweep(sweep_id)
        if sweep["status"] == "completed":
            return "completed"
        store.update_sweep(sweep_id, stop_requested=True)
        for run in store.records(ACTIVE_STATUSES, sweep_id=sweep_id):
            store.request_stop(run.id)
        deadline = time.monotonic() + timeout
        while store.records(ACTIVE_STATUSES, sweep_id=sweep_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        lingering = store.records(ACTIVE_STATUSES, sweep_id=sweep_id)
        if lingering:
            runner.terminate_sweep_workers(store, sweep_id)
            for run in store.records(ACTIVE_STATUSES, sweep_id=sweep_id):
                store.set_status(run.id, "stopped", error=f"its sweep was stopped; the worker did not stop within "
                                                          f"{timeout:g} s")
        if store.sweep(sweep_id)["status"] != "completed":
            store.update_sweep(sweep_id, status="stopped", finished_at=time.time())
        return store.sweep(sweep_id)["status"]


def resume_sweep(sweep_id: int, store_location=None, *, workers: int = 1) -> int:
    """Continue a stopped sweep (or one whose workers all died): its stopped and interrupted runs are
    requeued to continue from their checkpoints and the trials it has not asked yet follow; launches
    ``workers`` workers. Returns how many runs were requeued. SweepError when nothing is left."""

    workers = check_workers(workers)
    with RunStore(store_location) as store:
        sweep = store.sweep(sweep_id)
        spec = SweepSpec.from_dict(sweep["spec"])
        if sweep["status"] == "completed":
            raise SweepError(f"sweep {sweep_id} is completed; there is nothing to resume")
        if sweep["status"] == "running" and workers_alive(store, sweep_id):
            raise SweepError(f"sweep {sweep_id} is running; add workers with `python -m stability sweeps join "
                             f"{sweep_id}`")
        study = create_study(spec, storage(store), sweep["study"], load_if_exists=True)
        with sweep_lock(store, sweep_id):
            requeued = _requeue(store, study, sweep_id)
            if not requeued and _asked(study) >= spec.size() and not _open_trials(study):
                store.update_sweep(sweep_id, status="completed", stop_requested=False)
                raise SweepError(f"sweep {sweep_id} has run all its {spec.size()} runs; there is nothing to resume")
            store.update_sweep(sweep_id, status="running", stop_requested=False, finished_at=None, workers=workers)
        runner.launch_sweep_workers(store, sweep_id, workers)
        return requeued


def join_sweep(sweep_id: int, store_location=None, *, workers: int = 1, gpus: list[str] | None = None) -> list:
    """Add ``workers`` workers on this machine to a running sweep, spread round robin over ``gpus``
    (default: the GPUs this process sees; several workers may share one), each seeing only its
    own through ``CUDA_VISIBLE_DEVICES`` (:mod:`stability.execution.gpu_slots`). Returns the
    worker processes."""

    with RunStore(store_location) as store:
        sweep = store.sweep(sweep_id)
        if sweep["status"] != "running":
            verb = f"resume it with `python -m stability sweeps resume {sweep_id}`" if sweep["status"] == "stopped" \
                else "there is nothing left to run"
            raise SweepError(f"sweep {sweep_id} is {sweep['status']}; {verb}")
        return runner.launch_sweep_workers(store, sweep_id, check_workers(workers), gpus=gpus)


def workers_alive(store, sweep_id: int) -> bool:
    """Whether any worker still works on the sweep: a run of it in progress whose worker lives."""

    return any(not _orphaned(run) for run in store.records(ACTIVE_STATUSES, sweep_id=sweep_id))


def work(store, sweep_id: int, *, max_runs: int | None = None) -> int:
    """The worker loop (Note [Sweep lifecycle]): claim a job, train it, report it; until nothing is
    left, the sweep is stopped, or ``max_runs`` runs were trained. Returns the number trained."""
    sweep = store.sweep(sweep_id)
    spec = SweepSpec.from_dict(sweep["spec"])
    study = create_study(spec, storage(store), sweep["study"], load_if_exists=True)
    trained = 0
    while max_runs is None or trained < max_runs:
        if store.sweep(sweep_id)["stop_requested"]:
            break
        with sweep_lock(store, sweep_id):
            job = claim(store, study, spec, sweep_id)
        if job is None:
            break
        train_trial(store, study, spec, job)
        trained += 1
    with sweep_lock(store, sweep_id):
        _settle(store, study, spec, sweep_id)
    return trained


def claim(store, study, spec: SweepSpec, sweep_id: int) -> Job | None:
    """Under the sweep's lock: a requeued run, else an orphaned one, else a new trial's new run,
    claimed by this process (pid and host); None when the sweep has nothing left to start."""

    open_trials = _open_trials(study)
    runs = sorted(store.records(sweep_id=sweep_id), key=lambda run: run.id)
    taken = next((run for run in runs if run.trial in open_trials and run.status == "queued" and run.pid is None),
                 None)
    if taken is None:
        taken = next((run for run in runs if run.trial in open_trials and (
            run.status == "interrupted" or (run.status in ACTIVE_STATUSES and _orphaned(run)))), None)
    if taken is not None:
        _claim_run(store, taken.id)
        return Job(taken.id, taken.trial, RunConfig.from_dict(dict(taken.raw_config)), resume=True)
    asked = next_trial(study, spec)
    if asked is None:
        return None
    trial, config = asked
    params = {path: _jsonable(value) for path, value in setting_of(trial.params, spec).items()}
    run_id = store.create_run(config.to_dict(), config.name, sweep_id=sweep_id, trial=trial.number, params=params)
    _claim_run(store, run_id)
    return Job(run_id, trial.number, config, resume=False)


def _claim_run(store, run_id: int) -> None:
    store.update_run(run_id, pid=os.getpid(), host=socket.gethostname(), stop_requested=False)


def _orphaned(run) -> bool:
    """A run in progress whose worker is gone: its pid dead on this host, or (another host's run)
    no heartbeat for :data:`SHARED_STALE_S`."""

    if run.host in (None, socket.gethostname()):
        return run.pid is not None and not is_alive(run.pid)
    beats = [t for t in (run.heartbeat, run.started_at, run.created_at) if t is not None]
    return not beats or time.time() - max(beats) > SHARED_STALE_S


def train_trial(store, study, spec: SweepSpec, job: Job) -> str:
    """Train ``job``'s run in this process (continuing it when it can) and tell its trial how it
    ended; returns the run's status. A run stopped by a request stays its trial's (not told)."""
    from optuna.trial import TrialState


    resume = job.resume and _resumable(store, job.run_id)
    if job.resume:
        run = store.record(job.run_id)
        if resume:
            store.update_run(job.run_id, resumes=run.resumes + 1, error=None)
        else:  # no checkpoint here: from step 0, its rows discarded (training is seeded)
            store.discard_after(job.run_id, -1)
            store.update_run(job.run_id, error=None)
    trial = _trial(study, job.trial)
    hooks = [Pruning(trial, objective_name(spec))] if spec.prune else []
    try:
        status = train_run(job.config, store, job.run_id, hooks=hooks, resume=resume).status
    except Exception as error:
        traceback.print_exc()
        store.set_status(job.run_id, "failed", error=describe_error(error))
        status = "failed"
    if status == "completed":
        value = store.latest(job.run_id).get(objective_name(spec))
        if value is not None and math.isfinite(value):
            tell(study, job.trial, value)
        else:
            tell(study, job.trial, state=TrialState.FAIL)
    elif status == "pruned":
        tell(study, job.trial, state=TrialState.PRUNED)
    elif status in ("diverged", "failed"):
        trial.set_user_attr("status", status)
        tell(study, job.trial, state=TrialState.FAIL)
    return status  # stopped: the trial stays open for resume_sweep


def _resumable(store, run_id: int) -> bool:
    """Whether this machine holds a checkpoint of the run that ``train_run(resume=True)`` reads."""

    path = store.checkpoint_path(run_id)
    if not path.exists():
        return False
    try:
        return is_resumable(load_checkpoint(path))
    except Exception:  # a truncated or foreign file: start over instead
        return False


def _trial(study, number: int):
    """The ``optuna.Trial`` of an open trial (this process may not be the one that asked it)."""
    import optuna

    frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    return optuna.trial.Trial(study, frozen._trial_id)


def _open_trials(study) -> set[int]:
    from optuna.trial import TrialState

    return {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}


def _asked(study) -> int:
    from optuna.trial import TrialState

    return sum(t.state != TrialState.WAITING for t in study.get_trials(deepcopy=False))


def _requeue(store, study, sweep_id: int) -> int:
    """Requeue the sweep's stopped and interrupted runs whose trials are open; return how many."""

    open_trials, count = _open_trials(study), 0
    for run in store.records(sweep_id=sweep_id):
        dead = run.status in ACTIVE_STATUSES and _orphaned(run)
        if run.trial in open_trials and (run.status in ("stopped", "interrupted") or dead):
            store.update_run(run.id, status="queued", pid=None, stop_requested=False)
            count += 1
    return count


def _settle(store, study, spec: SweepSpec, sweep_id: int) -> None:
    """When a worker leaves: the sweep is completed once every run was asked and told."""
    if _asked(study) >= spec.size() and not _open_trials(study):
        store.update_sweep(sweep_id, status="completed", finished_at=time.time())




def run_sweep_worker(sweep_id: int, store_location) -> int:
    """A sweep worker process's work (``python -m stability.cli.worker --sweep ID``): :func:`work` in
    this process under the worker thread policy; returns the number of runs it trained.  It trains
    several runs in one process, and cuBLAS reads its workspace setting once, when it first runs,
    so a ``deterministic`` run after others needs it set from the start (stability.core.determinism)."""
    fix_cublas_workspace()
    threads.apply_worker_threads(threads.worker_threads(runner.max_concurrent_runs()))
    store = RunStore(store_location)
    try:
        return work(store, sweep_id)
    finally:
        store.close()
