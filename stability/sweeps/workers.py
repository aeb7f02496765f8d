"""Running a sweep: its workers claim jobs (a trial's run), train them and tell the study.

    sweep_id = start_sweep(spec, store, workers=2)   # stored, then detached workers start
    stop_sweep(sweep_id); resume_sweep(sweep_id)     # runs keep their rows and checkpoints
    join_sweep(sweep_id, store_url, workers=4)      # more workers, on another machine, over its GPUs
    work(store, sweep_id)                            # one worker's loop, in this process
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass

from ..admission.preflight import check_room
from ..config import ConfigError, RunConfig
from ..core.determinism import fix_cublas_workspace
from ..execution import lifecycle, pids
from ..execution.lifecycle import Claim
from ..execution.locks import sweep_lock
from ..execution.signals import Terminated
from ..runs.status import ACTIVE_STATUSES
from ..runs.store import RunStore
from ..training.hooks import Pruning
from ..workers import processes, scheduler, slots, threads
from .spec import SEED_PARAM, SweepError, SweepSpec, _jsonable, objective_name
from .study import create_study, next_trial, setting_of, storage, tell
from .watching import NO_ROOM

# Note [Sweep lifecycle]
#     A sweep is a row of the store's ``sweeps`` table (its spec, its Optuna study's name, a status)
#     and an Optuna study in the same database (``store.url``: the SQLite file or the PostgreSQL
#     database), so one URL carries everything and every machine pointed at it sees the same sweep.
#     Workers (:func:`work`, one process each, started by :func:`start_sweep`, :func:`resume_sweep`
#     or :func:`join_sweep` through :mod:`stability.workers.processes`) loop: under the sweep's lock
#     (Note [Claiming trials]) check the sweep's stop flag and take the next job, train it in-process
#     (``lifecycle.claimed``, which settles the run's status), report the run's final objective
#     to its trial, until the study has asked all its runs or the sweep's stop flag is set.  Every
#     trial is an ordinary run of the store, tagged with the sweep's id, the trial's number and the
#     varied values (``runs.sweep_id``, ``trial``, ``params``).
#
#     A trial's state says what became of its run: COMPLETE (the run completed; its value is the
#     final objective), PRUNED (Optuna's pruner stopped it: run status ``pruned``), FAIL (the run
#     diverged or failed), RUNNING (being trained, or stopped or interrupted: not yet told).  A run
#     that was stopped stays its trial's run: resuming the sweep requeues it (status ``queued``,
#     never taken by the ordinary run queue, which skips sweep runs) and a worker continues it from
#     its checkpoint, exactly (``resume=True``), or from step 0 with its rows discarded where this
#     machine has no checkpoint of it (a run started on another machine, or stopped before its
#     first checkpoint): training is seeded, so the rows come back the same. A run whose worker
#     died (``lifecycle.claimant_gone``: its pid gone on this host, or no heartbeat for
#     ``lifecycle.SHARED_STALE_S`` from another host) is taken over the same way by any live worker.
#     A trial that is RUNNING with no run (its worker was killed between asking it and storing its
#     run) gets its run, queued, where the trial knows its seed, and is failed where it does not.
#     A single run of a sweep resumed on its own (``python -m stability resume ID``) is claimed
#     under the sweep's lock and tells its trial too, where the trial is still open.
#
# Note [Claiming trials]
#     Two workers must never train the same setting and seed, and a random or TPE sweep must ask
#     exactly its budget of trials.  Optuna pops an enqueued trial atomically on PostgreSQL
#     (``SELECT ... FOR UPDATE``) but not on SQLite (pysqlite runs the read outside the write's
#     transaction), and a GridSampler asked from two processes at once may hand both the same grid
#     point (a documented limit of parallel grid search); so every claim (requeued run, orphaned run
#     or new trial, and the new run's row) happens under one lock per sweep: an exclusive ``flock``
#     on a file in ``store.home`` for SQLite (one machine), a PostgreSQL session advisory lock for a
#     shared store.  The sweep's stop flag is read under the lock too, so no trial is asked after
#     ``stop_sweep`` has set it, and Ctrl-C and SIGTERM are held back while a claim is made, so no
#     trial is left asked without its run.  Each run is claimed by the run lifecycle's compare-and-set
#     (stability.execution.lifecycle, Note [Claims]); training happens outside the lock.
SHARED_STALE_S = lifecycle.SHARED_STALE_S  # a run of another host with no heartbeat for this long is orphaned


@dataclass
class Job:
    """A run a worker is to train: a new trial's, or one to continue (``resume``); ``claim`` is this
    process's claim on it (None: :func:`train_trial` claims the run, queued and unclaimed, itself);
    ``counted``: its resume was counted when it was claimed (a run resumed on its own)."""

    run_id: int
    trial: int
    config: RunConfig
    resume: bool
    claim: Claim | None = None
    counted: bool = False


def start_sweep(spec: SweepSpec, store_location=None, *, workers: int = 1, name: str = "") -> int:
    """Store the sweep and its Optuna study, ask for ``workers`` background worker processes (at most this
    machine's run slots: they start as slots free, stability.workers.slots, Note [Slots]), return the
    sweep's id (SweepError, one line, when it cannot start; nothing is stored then)."""

    spec.validate(allow_large=True)
    workers = min(check_workers(workers), scheduler.max_concurrent_runs())
    with RunStore(store_location) as store:
        try:
            check_room(spec.base, store)  # a run's checkpoints fit on the disk (preflight, Note [Room for checkpoints])
        except ConfigError as error:
            raise SweepError(str(error)) from None
        sweep_id = store_sweep(store, spec, workers=workers, name=name)
        scheduler.start_sweep_workers(store, sweep_id, workers)
    return sweep_id


def store_sweep(store, spec: SweepSpec, *, workers: int = 1, name: str = "") -> int:
    """The sweep's row and its Optuna study in ``store``'s database, no worker started: what
    :func:`start_sweep` launches workers on, and what a process that runs :func:`work` itself (a
    preset, stability.presets.running) starts from. Returns the sweep's id."""
    sweep_id = store.create_sweep(spec.to_dict(), name=name or spec.base.name)
    create_study(spec, storage(store), store.sweep(sweep_id).study)
    store.update_sweep(sweep_id, workers=workers)
    return sweep_id


def check_workers(workers) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SweepError(f"workers must be an integer >= 1; got {workers!r}")
    return workers


def stop_sweep(sweep_id: int, store_location=None, timeout: float = 10.0) -> str:
    """Stop a sweep: no new trials, and its runs in progress stop (status ``stopped``, rows and
    checkpoints kept, their trials left open for :func:`resume_sweep`). Returns the sweep's status,
    or one line naming the runs left as they are: a process that cannot be proven dead is never
    marked stopped (stability.execution.lifecycle, Note [Stop and resume])."""

    with RunStore(store_location) as store:
        if store.sweep(sweep_id).status == "completed":
            return "completed"
        slots.drop_waiting(store, sweep_id)  # none of its workers waiting for a slot starts now
        with sweep_lock(store, sweep_id):  # no worker asks a trial after this
            store.update_sweep(sweep_id, stop_requested=True)
        for run in store.records(ACTIVE_STATUSES, sweep_id=sweep_id):
            store.request_stop(run.id)
            lifecycle.stop_unclaimed(store, run.id)
        deadline = time.monotonic() + timeout
        while store.records(ACTIVE_STATUSES, sweep_id=sweep_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        if store.records(ACTIVE_STATUSES, sweep_id=sweep_id):
            processes.terminate_sweep_workers(store, sweep_id)
        lingering = [run for run in store.records(ACTIVE_STATUSES, sweep_id=sweep_id)
                     if not _stopped_if_gone(store, run, timeout)]
        if lingering:
            return (f"sweep {sweep_id} is still running: run{'s' * (len(lingering) > 1)} "
                    f"{', '.join(str(run.id) for run in lingering)} did not stop within {timeout:g} s and "
                    "their processes cannot be proven gone; the sweep's stop stays requested")
        return _mark_stopped(store, sweep_id)


def _stopped_if_gone(store, run, timeout: float) -> bool:
    """Mark a run of a stopped sweep 'stopped' if its process is gone (a worker ended by SIGTERM
    settles it itself); False when it may still be training."""
    here = lifecycle.this_host()
    if run.host in (None, here) and run.pid is not None and not pids.is_alive(run.pid):
        lifecycle.mark_stopped(store, run, f"its sweep was stopped; the worker did not stop within {timeout:g} s")
    return store.record(run.id).status not in ACTIVE_STATUSES


def _mark_stopped(store, sweep_id: int) -> str:
    """The sweep 'stopped' (unless it completed meanwhile); returns its status."""
    if store.sweep(sweep_id).status != "completed":
        store.update_sweep(sweep_id, status="stopped", finished_at=time.time())
    return store.sweep(sweep_id).status


def stop_after_interrupt(store, sweep_id: int) -> None:
    """A sweep whose in-process worker was interrupted (a preset's Ctrl-C): stopped, as
    :func:`stop_sweep` leaves it (`sweeps resume` continues it); its run was settled by the lifecycle."""
    with sweep_lock(store, sweep_id):
        store.update_sweep(sweep_id, stop_requested=True)
    _mark_stopped(store, sweep_id)


def resume_sweep(sweep_id: int, store_location=None, *, workers: int = 1) -> int:
    """Continue a stopped sweep (or one whose workers all died): its stopped and interrupted runs are
    requeued to continue from their checkpoints and the trials it has not asked yet follow; asks for
    ``workers`` workers (at most the slots: Note [Slots]). Returns how many runs were requeued. SweepError
    when nothing is left."""

    workers = min(check_workers(workers), scheduler.max_concurrent_runs())
    with RunStore(store_location) as store:
        sweep = store.sweep(sweep_id)
        spec = SweepSpec.from_dict(sweep.spec)
        if sweep.status == "completed":
            raise SweepError(f"sweep {sweep_id} is completed; there is nothing to resume")
        if sweep.status == "running" and workers_alive(store, sweep_id):
            raise SweepError(f"sweep {sweep_id} is running; add workers with `python -m stability sweeps join "
                             f"{sweep_id}`")
        study = create_study(spec, storage(store), sweep.study, load_if_exists=True)
        with sweep_lock(store, sweep_id):
            _give_runless_trials_a_run(store, study, spec, sweep_id)
            requeued = _requeue(store, study, sweep_id)
            if not requeued and _asked(study) >= spec.size() and not _open_trials(study):
                store.update_sweep(sweep_id, status="completed", stop_requested=False)
                raise SweepError(f"sweep {sweep_id} has run all its {spec.size()} runs; there is nothing to resume")
            store.update_sweep(sweep_id, status="running", stop_requested=False, finished_at=None, workers=workers)
        scheduler.start_sweep_workers(store, sweep_id, workers)
        return requeued


def join_sweep(sweep_id: int, store_location=None, *, workers: int = 1, gpus: list[str] | None = None) -> list:
    """Add ``workers`` workers on this machine to a running sweep (at most its slots; those without a free
    slot start as one frees: Note [Slots]), spread round robin over ``gpus`` (default: the GPUs this
    process sees; several workers may share one), each seeing only its own through
    ``CUDA_VISIBLE_DEVICES`` (:mod:`stability.workers.gpu_slots`). Returns the worker processes started
    now."""

    with RunStore(store_location) as store:
        sweep = store.sweep(sweep_id)
        if sweep.status != "running":
            verb = f"resume it with `python -m stability sweeps resume {sweep_id}`" if sweep.status == "stopped" \
                else "there is nothing left to run"
            raise SweepError(f"sweep {sweep_id} is {sweep.status}; {verb}")
        return scheduler.start_sweep_workers(store, sweep_id, check_workers(workers), gpus=gpus)


def workers_alive(store, sweep_id: int) -> bool:
    """Whether any worker still works on the sweep: a run of it in progress whose worker lives."""

    return any(not _orphaned(run) for run in store.records(ACTIVE_STATUSES, sweep_id=sweep_id))


def work(store, sweep_id: int, *, max_runs: int | None = None) -> int:
    """The worker loop (Note [Sweep lifecycle]): claim a job, train it, report it; until nothing is
    left, the sweep is stopped, or ``max_runs`` runs were trained. Returns the number trained.
    Ctrl-C and SIGTERM end the run in training 'stopped' and are raised again."""
    sweep = store.sweep(sweep_id)
    spec = SweepSpec.from_dict(sweep.spec)
    study = create_study(spec, storage(store), sweep.study, load_if_exists=True)
    trained = 0
    while max_runs is None or trained < max_runs:
        jobs: list[Job | None] = []

        def take() -> Claim | None:  # signals held back: never a trial asked without its run (Note [Claiming trials])
            with sweep_lock(store, sweep_id):
                jobs.append(claim(store, study, spec, sweep_id))
            return None if jobs[0] is None else jobs[0].claim

        with lifecycle.claimed(store, take) as run:
            if run is None:
                break
            full = _no_room(store, jobs[0].config)
            if full is not None:  # Note [A full disk ends the sweep]
                run.settle("stopped", full)
                _halt(store, sweep_id, full)
                break
            train_trial(store, study, spec, jobs[0], run=run)
        trained += 1
    with sweep_lock(store, sweep_id):
        _settle(store, study, spec, sweep_id)
    return trained


def _no_room(store, config: RunConfig) -> str | None:
    """Why a trial of ``config`` may not start here, in one line (preflight.check_room: its checkpoints and the
    reserve do not fit on the disk); None when they do.

    Note [A full disk ends the sweep]
    ---------------------------------
    A sweep's start checks the room for its base config's checkpoints, but its trials start over hours, and a
    trial may be larger than the base.  So a worker checks the room again for each run it claimed, before it
    trains it: without room, the run is settled 'stopped' with the one line (:data:`NO_ROOM` and the check's
    words: the Runs page and the Sweep page show it), its trial left open, and the sweep's stop is requested,
    so no worker asks another trial and the sweep ends 'stopped' once its runs in progress end.  Nothing is
    lost: the stopped run keeps whatever checkpoint it had, and ``sweeps resume`` requeues it with the rest
    once there is room."""
    try:
        check_room(config, store)
    except ConfigError as error:
        return NO_ROOM + " ".join(str(error).split())
    return None


def _halt(store, sweep_id: int, line: str) -> None:
    """Stop the sweep for ``line`` (Note [A full disk ends the sweep]): no worker asks a trial after this."""
    print(f"sweep {sweep_id}: {line}", file=sys.stderr, flush=True)
    with sweep_lock(store, sweep_id):
        store.update_sweep(sweep_id, stop_requested=True)


def claim(store, study, spec: SweepSpec, sweep_id: int) -> Job | None:
    """Under the sweep's lock: a requeued run, else an orphaned one, else a new trial's new run,
    claimed by this process (stability.execution.lifecycle); None when the sweep is stopped or has
    nothing left to start."""
    if store.sweep(sweep_id).stop_requested:
        return None
    _give_runless_trials_a_run(store, study, spec, sweep_id)
    open_trials = _open_trials(study)
    runs = [run for run in sorted(store.records(sweep_id=sweep_id), key=lambda run: run.id) if run.trial in open_trials]
    requeued = [run for run in runs if run.status == "queued" and run.pid is None]
    orphaned = [run for run in runs
                if run.status == "interrupted" or (run.status in ACTIVE_STATUSES and _orphaned(run))]
    for run in requeued + orphaned:
        taken = lifecycle.claim_queued(store, run.id) if run in requeued else lifecycle.take_over(store, run)
        if taken is not None:
            return Job(run.id, run.trial, RunConfig.from_dict(dict(run.raw_config)), resume=True, claim=taken)
    asked = next_trial(study, spec)
    if asked is None:
        return None
    trial, config = asked
    params = {path: _jsonable(value) for path, value in setting_of(trial.params, spec).items()}
    taken = lifecycle.create_claimed(store, config, config.name, sweep_id=sweep_id, trial=trial.number, params=params,
                                     owner=spec.owner)
    return Job(taken.run_id, trial.number, config, resume=False, claim=taken)


def _orphaned(run) -> bool:
    """A run in progress whose worker is gone (``lifecycle.claimant_gone``, the one rule). A run
    waiting in the queue (queued, no pid) is no orphan."""
    if run.status == "queued" and run.pid is None:
        return False
    return lifecycle.claimant_gone(run)


def train_trial(store, study, spec: SweepSpec, job: Job, *, run: lifecycle.ClaimedRun | None = None,
                progress=None) -> str:
    """Train ``job``'s run in this process (continuing it when it can) and tell its trial how it
    ended, where the trial is still open; returns the run's status. ``run``: the run as this process
    holds it (``lifecycle.claimed``); without it, the job's claim (or a claim on its queued run) is
    held here. A run stopped by a request stays its trial's (not told). An exception ends the run
    'failed' and is printed, and the worker goes on; Ctrl-C and SIGTERM stop the run and are raised
    again."""
    if run is None:
        with lifecycle.claimed(store, lambda: job.claim or lifecycle.claim_queued(store, job.run_id)) as run:
            if run is None:
                raise SweepError(f"run {job.run_id} is {store.record(job.run_id, latest=False).status}; "
                                 "another process has it")
            return train_trial(store, study, spec, job, run=run, progress=progress)
    try:
        resume = job.resume and lifecycle.resumable_here(store, job.run_id, job.config)
        if resume and not job.counted:
            lifecycle.count_resume(store, run.claim)
        elif job.resume and not resume:  # no checkpoint here: from step 0, rows discarded (training is seeded)
            lifecycle.start_over(store, run.claim)
        trial = _trial(study, job.trial)
        hooks = [Pruning(trial, objective_name(spec))] if spec.prune and trial is not None else []
        status = run.train(job.config, resume=resume, hooks=hooks, progress=progress).status
    except Exception as error:  # the run ends failed (lifecycle.ending); the worker goes on with the next
        traceback.print_exc()
        status, trial = run.end(error)[0], _trial(study, job.trial)
    if trial is not None:
        _tell(study, spec, job, trial, status, store)
    return status


def _tell(study, spec: SweepSpec, job: Job, trial, status: str, store) -> None:
    """Tell the trial how its run ended (a stopped run's trial stays open for resume_sweep)."""
    from optuna.trial import TrialState

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


def _trial(study, number: int):
    """The ``optuna.Trial`` of an open trial (this process may not be the one that asked it); None
    when the trial is finished."""
    import optuna

    frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    if frozen.state != optuna.trial.TrialState.RUNNING:
        return None
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
            count += lifecycle.requeue(store, run)
    return count


def _give_runless_trials_a_run(store, study, spec: SweepSpec, sweep_id: int) -> None:
    """Under the sweep's lock: an open trial with no run (its worker was killed between asking it and
    storing its run) gets its run, queued, where the trial knows its seed; else it is failed."""
    from optuna.trial import TrialState

    with_runs = {run.trial for run in store.records(sweep_id=sweep_id)}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial.number in with_runs:
            continue
        seed = trial.user_attrs.get("seed", trial.params.get(SEED_PARAM))
        if seed is None or any(vary.field not in trial.params for vary in spec.vary):
            _trial(study, trial.number).set_user_attr("status", "failed")  # its worker ended before its run
            tell(study, trial.number, state=TrialState.FAIL)
            continue
        setting = setting_of(trial.params, spec)
        config = spec.config_for(setting, seed)
        lifecycle.create_queued(store, config, config.name, sweep_id=sweep_id, trial=trial.number, owner=spec.owner,
                                params={path: _jsonable(value) for path, value in setting.items()})


def _settle(store, study, spec: SweepSpec, sweep_id: int) -> None:
    """When a worker leaves: the sweep is completed once every run was asked and told, stopped once
    its stop was requested and none of its runs is in progress."""
    if _asked(study) >= spec.size() and not _open_trials(study):
        store.update_sweep(sweep_id, status="completed", finished_at=time.time())
    elif store.sweep(sweep_id).stop_requested and not store.records(ACTIVE_STATUSES, sweep_id=sweep_id):
        _mark_stopped(store, sweep_id)


def claim_resumed_trial(store, run_id: int):
    """Claim a stopped, interrupted or failed run of a sweep to continue it in this process, under
    its sweep's lock; returns ``(study, spec, job)`` for :func:`train_trial`. ResumeError (one line)
    when it cannot be resumed."""
    run = store.record(run_id, latest=False)
    sweep = store.sweep(run.sweep_id)
    spec = SweepSpec.from_dict(sweep.spec)
    study = create_study(spec, storage(store), sweep.study, load_if_exists=True)
    with sweep_lock(store, run.sweep_id):
        taken, config = lifecycle.claim_resume(store, run_id, checkpoint=False)
    return study, spec, Job(run_id, run.trial, config, resume=True, claim=taken, counted=True)


def resume_trial(store, run_id: int, *, step_progress=None) -> str:
    """Continue a stopped, interrupted or failed run of a sweep in this process (the CLI's foreground
    ``resume``): claimed under its sweep's lock (:func:`claim_resumed_trial`), trained and its trial
    told (:func:`train_trial`); returns its status. ``step_progress(config)`` may return the trainer's
    progress callback. ResumeError (one line) when it cannot be resumed."""
    found = []

    def take() -> Claim:
        found.append(claim_resumed_trial(store, run_id))
        return found[0][2].claim

    with lifecycle.claimed(store, take) as run:
        study, spec, job = found[0]
        progress = None if step_progress is None else step_progress(job.config)
        return train_trial(store, study, spec, job, run=run, progress=progress)


def run_trial_worker(run_id: int, store_location) -> str:
    """A worker process for one resumed run of a sweep (``python -m stability.cli.worker --worker ID``
    where the run is a sweep's; ``scheduler.resume_run`` launched it under the sweep's lock): takes
    over the claim it is handed, trains the run and tells its trial. Returns the run's status.
    ``store_location``: a RunStore (the caller's) or its location."""
    threads.apply_worker_threads(threads.worker_threads(scheduler.max_concurrent_runs()))
    given = isinstance(store_location, RunStore)
    with contextlib.nullcontext(store_location) if given else RunStore(store_location) as store:
        token = os.environ.get(processes.CLAIM_ENV)
        try:
            with lifecycle.claimed(store, lambda: lifecycle.adopt(store, run_id, token) if token else None) as run:
                if run is not None:
                    record = store.record(run_id, latest=False)
                    sweep = store.sweep(record.sweep_id)
                    spec = SweepSpec.from_dict(sweep.spec)
                    study = create_study(spec, storage(store), sweep.study, load_if_exists=True)
                    job = Job(run_id, record.trial, RunConfig.from_dict(dict(record.raw_config)), resume=True,
                              claim=run.claim, counted=True)
                    train_trial(store, study, spec, job, run=run)
        except Exception:  # the run is settled 'failed' (lifecycle.claimed); the slot is still handed on
            traceback.print_exc()
        except Terminated:
            pass  # the run is settled 'stopped'
        scheduler.hand_on_slot(store, os.getpid())
        return store.record(run_id, latest=False).status


def run_sweep_worker(sweep_id: int, store_location) -> int:
    """A sweep worker process's work (``python -m stability.cli.worker --sweep ID``): :func:`work` in
    this process under the worker thread policy; returns the number of runs it trained.  It trains
    several runs in one process, and cuBLAS reads its workspace setting once, when it first runs,
    so a ``deterministic`` run after others needs it set from the start (stability.core.determinism)."""
    fix_cublas_workspace()
    threads.apply_worker_threads(threads.worker_threads(scheduler.max_concurrent_runs()))
    store = RunStore(store_location)
    try:
        return work(store, sweep_id)
    finally:
        try:
            scheduler.hand_on_slot(store, os.getpid(), sweep_id)
        finally:
            store.close()
