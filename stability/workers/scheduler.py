"""The run queue: start, stop and resume background runs, and keep the slots filled.

    run_id = start_run(config)        # stored as 'queued'; a worker starts if a slot is free
    stop_run(run_id)                  # a request in the store; a worker that does not heed it is ended
    resume_run(run_id)                # a stopped/interrupted/failed run continues from its checkpoint
    reconcile()                       # gone claimants -> 'interrupted'; queued runs -> free slots

The queue lives in the store itself: a run is *unclaimed* while it is 'queued' with no pid.
Scheduling (mark runs whose claimant is gone, count busy slots, launch the oldest unclaimed runs)
happens under the store's scheduling lock (:func:`stability.execution.locks.scheduling_lock`), so
that two processes looking at the same store never launch more workers than there are slots; a
run itself is claimed by a compare-and-set (:mod:`stability.execution.lifecycle`, Note [Claims]),
so no run is ever launched twice. On a shared (PostgreSQL) store each machine launches only the
runs it queued (``runs.host``); a run of another machine is judged by its heartbeat alone
(:func:`~stability.execution.lifecycle.claimant_gone`), and a sweep's runs are claimed by its
workers (:mod:`stability.sweeps`, Note [Claiming trials]). One slot count covers runs and sweep
workers (:mod:`stability.workers.slots`, Note [Slots]): at most ``STABILITY_MAX_RUNS`` (default 1)
processes of this machine train at once, a run's worker or a sweep's, and what waits (queued runs,
sweep workers asked for) starts as slots free.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
import traceback

from ..config import RunConfig
from ..core.errors import ConfigError
from ..execution import lifecycle
from ..execution.locks import LockBusy, scheduling_lock
from ..execution.signals import Terminated
from ..runs.records import RunRecord
from ..runs.status import TERMINAL
from ..runs.store import RunStore
from ..training.checkpoints import ResumeError
from . import gpu_slots, processes, slots, threads, warm
from .processes import CLAIM_ENV, MAX_RUNS_ENV

MAX_QUEUED_ENV = "STABILITY_MAX_QUEUED"
DEFAULT_MAX_QUEUED = 50
RECONCILE_WAIT_S = 5.0  # a reconcile waits this long for the scheduling lock, then skips its turn


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


def start_run(config: RunConfig, store_path=None, name: str | None = None,
              max_concurrent: int | None = None, owner: str | None = None) -> int:
    """Store ``config`` as a new run and start a worker for it if a slot is free; return its id.

    Raises :class:`stability.config.ConfigError` (nothing is stored) when the configuration is
    invalid, its cell cannot be built or the queue is full (:func:`check_queue_room`). ``owner``: who started it, where a classroom names its users
    (stability.access). With every slot busy the run stays 'queued' until a
    finishing worker or :func:`reconcile` launches it.
    """
    from ..admission.preflight import check_buildable, check_room  # torch: reconcile (`stability runs`) imports no torch

    config.validate()
    check_buildable(config)
    limit = max_concurrent_runs(max_concurrent)
    with RunStore(store_path) as store, scheduling_lock(store):
        check_room(config, store)  # its checkpoints fit on the disk (preflight, Note [Room for checkpoints])
        check_queue_room(store)
        run_id = lifecycle.create_queued(store, config, name, owner=owner)  # with this host, in one INSERT
        _schedule(store, limit)
    return run_id


def max_queued_runs() -> int:
    """``$STABILITY_MAX_QUEUED``, else :data:`DEFAULT_MAX_QUEUED`: how many runs may wait for a slot."""
    return threads.positive_setting(MAX_QUEUED_ENV, DEFAULT_MAX_QUEUED)


def check_queue_room(store: RunStore) -> None:
    """Under the scheduling lock: refuse a new run, in one line (ConfigError), when :func:`max_queued_runs`
    runs already wait for a slot. A queue has a bound like everything a visitor can ask: 1,000 queued runs
    drew 1,001 progress bars in every page's sidebar, and a click each is all it took."""
    limit = max_queued_runs()
    waiting = sum(run.status == "queued" and run.pid is None for run in store.active_runs())
    if waiting >= limit:
        raise ConfigError(f"{waiting} runs already wait in the queue, the most this machine takes "
                          f"({MAX_QUEUED_ENV}={limit}); start this one when some have started, or stop some")


def stop_run(run_id: int, store_path=None, timeout: float = 5.0) -> str:
    """Stop run ``run_id``; return its status, or one line saying why it is left as it is.

    A queued run that no process has claimed is 'stopped' at once. Otherwise the stop is requested
    and the run's process, which reads the request every half second, ends the run itself. If it
    has not within ``timeout`` seconds, its worker's process group gets SIGTERM, then SIGKILL, if
    that process is provably the worker launched for this run, and the run is marked 'stopped' once
    its process is gone. A process that cannot be proven dead (not provably this run's worker, such
    as a foreground CLI run, or on another machine) is never marked stopped: the run is left as it
    is, its stop still requested, and the line returned says so
    (:mod:`stability.execution.lifecycle`, Note [Stop and resume]).
    """
    with RunStore(store_path) as store:
        store.request_stop(run_id)
        if lifecycle.stop_unclaimed(store, run_id):
            return "stopped"
        deadline = time.monotonic() + timeout
        while store.record(run_id).status not in TERMINAL and time.monotonic() < deadline:
            time.sleep(0.1)
        run = store.record(run_id)
        if run.status in TERMINAL:
            return run.status
        return _end_lingering(store, run, timeout)


def _end_lingering(store: RunStore, run: RunRecord, timeout: float) -> str:
    """After a stop request went unheeded for ``timeout`` s: end the run's worker if it is provably
    ours and mark the run stopped once it is gone; else one line, the run left as it is."""
    left = f"run {run.id} is still {run.status}: it did not stop within {timeout:g} s and"
    if run.host not in (None, lifecycle.this_host()):
        return (f"{left} trains on {run.host}, where its process cannot be signalled from here; "
                "its stop stays requested")
    if run.pid is None or not processes.terminate(run.pid, processes.read_identity(store, run.id)):
        return (f"{left} its process {run.pid} was not signalled, as it is not provably this run's worker; "
                "its stop stays requested")
    status = store.record(run.id).status  # a worker ended by SIGTERM settles the run itself
    if status not in TERMINAL:
        lifecycle.mark_stopped(store, run, f"terminated after not stopping within {timeout:g} s")
        status = store.record(run.id).status
    return status


def resume_run(run_id: int, store_path=None, max_concurrent: int | None = None) -> None:
    """Queue a stopped, interrupted or failed run to continue from its last checkpoint.

    The worker that picks it up restores weights, optimizer state, RNG and data position
    (:meth:`stability.training.trainer.Trainer.fit` with ``resume=True``), discards the rows logged
    after the checkpoint's step and appends to the same run. A sweep's run is resumed under its
    sweep's lock and launched at once, by a worker that tells its trial how it ended (without a
    checkpoint here it trains again from step 0, as its sweep's workers would), if a slot is free
    (Note [Slots] in :mod:`stability.workers.slots`). Raises
    :class:`stability.training.checkpoints.ResumeError` (one line, nothing changed) when the run
    cannot be resumed, or its checkpoints would not fit on the disk as a start's would not (Note [Room
    for checkpoints] in stability/admission/preflight.py).
    """
    limit = max_concurrent_runs(max_concurrent)
    with RunStore(store_path) as store:
        run = store.record(run_id)
        with lifecycle.resume_lock(store, run):
            check_resume_room(store, run_id)
            if run.sweep_id is None:
                lifecycle.queue_resume(store, run_id)
                with scheduling_lock(store):
                    _schedule(store, limit)
                return
            lifecycle.check_resumable(store, run_id, checkpoint=False)  # without one: from step 0
            with scheduling_lock(store):
                if free_slots(store, limit) <= 0:  # a sweep's run is launched at once or not at all
                    raise ResumeError(f"run {run_id} cannot resume now: every one of this machine's {limit} "
                                      f"run slot{'s' * (limit > 1)} ({MAX_RUNS_ENV}) is busy; resume it when "
                                      "one frees")
                if not _launch(store, run_id, limit, resumed=True):
                    lifecycle.check_resumable(store, run_id, checkpoint=False)  # one line: what it is now
                    raise ResumeError(f"run {run_id} was claimed by another process meanwhile")


def check_resume_room(store: RunStore, run_id: int) -> None:
    """ResumeError (one line, nothing changed) when the run cannot be resumed, or its checkpoints would not fit
    on the disk with the reserve left free (preflight.check_room, the start's check, Note [Room for checkpoints])."""
    from ..admission.preflight import check_room  # torch: reconcile (`stability runs`) imports no torch

    config = lifecycle.check_resumable(store, run_id, checkpoint=False)
    try:
        check_room(config, store)
    except ConfigError as error:
        raise ResumeError(f"run {run_id} cannot resume: {error}") from None


def reconcile(store_path=None, max_concurrent: int | None = None) -> list[int]:
    """Mark runs whose claimant is gone 'interrupted', start queued runs in free slots.

    Returns the ids newly marked 'interrupted'. Cheap; call it whenever runs are listed. When another
    process holds the scheduling lock past :data:`RECONCILE_WAIT_S` (a stuck holder), this turn is
    skipped (an empty list, a line in the log): the next one catches up.
    """
    limit = max_concurrent_runs(max_concurrent)
    with RunStore(store_path) as store:
        try:
            with scheduling_lock(store, RECONCILE_WAIT_S):
                return _schedule(store, limit)
        except LockBusy as busy:
            logging.getLogger(__name__).warning("reconcile skipped: %s", busy)
            return []


def keep_warm(store_path=None, max_concurrent: int | None = None, count: int = 1) -> int | None:
    """Keep ``count`` idle warm workers (one for each run about to start together: Note [Warm slots]) for the
    store in this process (the server's; Note [Warm workers] in :mod:`stability.workers.warm`); the pid of
    the next one, None where ``STABILITY_WARM_WORKERS=0``."""
    if not warm.warm_workers_on():
        return None
    limit = max_concurrent_runs(max_concurrent)
    with RunStore(store_path) as store:
        return warm.keep_warm(store, limit, count)


def run_worker(run_id: int, store) -> str:
    """Train run ``run_id`` of ``store`` (a RunStore, or its location) in this process (the worker's
    entry point); return its final status.

    The worker takes over the claim the queue made for it (its token in ``$STABILITY_RUN_CLAIM``;
    without one, it claims the run if it is queued and unclaimed) and trains it in
    :func:`stability.execution.lifecycle.claimed`: an exception marks the run 'failed' (printed
    here), SIGTERM 'stopped'. Before returning, the next queued run is launched into the slot this
    one frees.
    """
    limit = max_concurrent_runs()
    threads.apply_worker_threads(threads.worker_threads(limit))
    with _opened(store) as store:
        token = os.environ.get(CLAIM_ENV)
        try:
            with lifecycle.claimed(store, lambda: lifecycle.adopt(store, run_id, token) if token
                                   else lifecycle.claim_queued(store, run_id)) as run:
                if run is not None:  # else: stopped or taken before this worker got to it
                    record = store.record(run_id, latest=False)
                    run.train(RunConfig.from_dict(dict(record.raw_config)), resume=bool(record.resumes))
        except Exception:
            traceback.print_exc()
        except Terminated:
            pass  # the run is settled 'stopped'; the slot is still handed on
        finally:
            with scheduling_lock(store):
                _schedule(store, limit)
        return store.record(run_id, latest=False).status


def _opened(store) -> contextlib.AbstractContextManager:
    """``store`` as it is (a RunStore: the caller's to close), or a RunStore opened at its location."""
    return contextlib.nullcontext(store) if isinstance(store, RunStore) else RunStore(store)


# ------------------------------------------------------------------ scheduling
def _schedule(store: RunStore, limit: int, leaving: int | None = None) -> list[int]:
    """Under the scheduling lock: mark runs whose claimant is gone, then fill the free slots (Note [Slots]):
    queued runs oldest first, then waiting sweep workers; ``leaving``: a worker handing its slot on."""
    processes.reap_launched()
    interrupted, unclaimed = [], []
    here = lifecycle.this_host()
    active = store.active_runs()
    for run in active:
        if run.status == "queued" and run.pid is None:
            # a sweep's requeued runs wait for the sweep's workers; on a shared store a run is
            # launched by the machine that queued it (start_run/resume_run set its host)
            if run.sweep_id is None and (run.host == here or not store.shared):
                unclaimed.append(run.id)
        elif lifecycle.claimant_gone(run, here) and lifecycle.mark_interrupted(store, run):
            interrupted.append(run.id)
    free = limit - len(slots.slot_holders(store, active, here, leaving))
    for run_id in sorted(unclaimed):
        if free <= 0:
            break
        free -= 1 if _launch(store, run_id, limit) else 0
    if free > 0:
        slots.launch_waiting(store, free, limit)
    return interrupted


def free_slots(store: RunStore, limit: int) -> int:
    """This machine's slots no process holds now (Note [Slots]); call under the scheduling lock."""
    return limit - len(slots.slot_holders(store, store.active_runs(), lifecycle.this_host()))


def start_sweep_workers(store: RunStore, sweep_id: int, workers: int, gpus: list[str] | None = None,
                        max_concurrent: int | None = None) -> list:
    """Ask for ``workers`` sweep workers of ``sweep_id`` on this machine (at most its slots): they start in
    the free slots now and the rest as slots free (Note [Slots]); returns the processes started now."""
    limit = max_concurrent_runs(max_concurrent)
    environments = gpu_slots.sweep_worker_environments(min(workers, limit), gpus)
    with scheduling_lock(store):
        slots.drop_waiting(store, sweep_id)
        slots.park(store, sweep_id, environments)
        before = {process.pid for process in processes.launched_workers()}
        _schedule(store, limit)
        return [process for process in processes.launched_workers() if process.pid not in before
                and list(process.args[3:5]) == ["--sweep", str(int(sweep_id))]]


def hand_on_slot(store: RunStore, leaving: int, sweep_id: int | None = None) -> None:
    """A worker at its end (``leaving``: its pid; a worker of ``sweep_id``, struck off its sweep's workers
    and its sweep's waiting workers dropped) hands its slot to what waits (Note [Slots])."""
    with scheduling_lock(store):
        if sweep_id is not None:
            processes.forget_sweep_worker(store, sweep_id, leaving)
            slots.drop_waiting(store, sweep_id)  # it ends when its sweep has nothing left to hand out
        _schedule(store, max_concurrent_runs(), leaving)


def _launch(store: RunStore, run_id: int, limit: int, resumed: bool = False) -> bool:
    """Claim ``run_id`` for a worker, start the worker (or hand the run to this process's idle warm
    worker: :mod:`stability.workers.warm`) and hand it the claim; False when another process claimed
    the run first (nothing is started then)."""
    warm_pid = None if resumed else warm.idle_pid(store)  # the warm worker to be handed it: claimed with its pid
    claim = lifecycle.claim_for_worker(store, run_id, resumed=resumed, pid=warm_pid)
    if claim is None:
        return False
    try:
        slot = gpu_slots.run_environment(store, run_id, limit)  # its slot's GPU
        handed = None if resumed else warm.hand_run(store, run_id, claim.token, {**slot, MAX_RUNS_ENV: str(limit)},
                                                    limit)  # an idle warm worker of this process, if any
        process, identity = handed or processes.spawn(store, ["--worker", str(run_id)], f"run-{run_id}", limit,
                                                      {CLAIM_ENV: claim.token, **slot})
    except BaseException:
        lifecycle.release(store, claim)
        raise
    processes.write_identity(store, run_id, identity)
    if process.pid != claim.pid:  # a fresh worker, or another warm one than the claim named
        lifecycle.hand_over(store, claim, process.pid)
    return True
