"""The run lifecycle: every change of a run's status, and training a claimed run in this process.

    with claimed(store, lambda: create_claimed(store, config)) as run:   # signals held back while it claims
        result = run.train(config, progress=print)          # 'running', trains, settles its ending
    # an exception or interrupt in the block: the run settled as ending(exc) says, then raised again
    status, error = ending(exc)                             # the one mapping: exception -> (status, error)
    result = train_run(config, store)                       # both at once: the public API

    take = lambda: claim_queued(store, run_id)              # a queued run nobody has claimed, or None
    take = lambda: claim_resume(store, run_id)[0]           # a stopped, interrupted or failed run

Every path that trains a run of a store (a background worker, a sweep's worker, a preset, the
CLI's foreground ``train`` and ``resume``, ``train_run``) claims it and trains it in one
composition, :func:`claimed`; the queue (:mod:`stability.workers.scheduler`) and the sweeps change a
run's status only through the functions below. Nothing else writes a run's status: the store takes a
status only in a new run's INSERT (:func:`create_queued`, :func:`create_claimed`, :func:`create_external`)
and in ``RunStore.compare_and_set``, which only this module calls with one
(``tests/test_lifecycle_writes.py`` reads the source for it).

Note [States]
    ``queued``: waiting for a process, or (with a pid) claimed by one that prepares to train it.
    ``running``: its process has built the model and trains it. Then one of the terminal states:
    ``completed``; ``stopped`` (a stop request, Ctrl-C or SIGTERM; rows and checkpoint kept);
    ``failed`` (an exception: ``"ExceptionType: first line"``); ``diverged`` (a non-finite loss or
    gradient); ``pruned`` (a sweep's pruner); ``interrupted`` (its process died without a final
    status). A stopped, interrupted or failed run resumes back to ``queued``: unclaimed, for a
    worker, or claimed by the process that resumes it.

    Who changes which: a claimant claims a run (a queued one nobody has claimed, a new one, a
    resumed one, or one whose claimant is gone), moves it to ``running`` when its trainer begins
    (``StoreSink.begin`` hands the run's columns to :func:`begin_training`) and settles it when
    training ends, each only while its claim holds; ``stop_run`` stops a queued run nobody has
    claimed, or a claimed one whose process it has proven gone; ``reconcile`` marks
    ``interrupted`` a run whose claimant is gone (:func:`claimant_gone`, the one rule, which a
    sweep's workers follow too before taking a run over); a resume requeues or claims a stopped,
    interrupted or failed run.

Note [Claims]
    A run is claimed by a compare-and-set in the store (``RunStore.compare_and_set``):
    ``UPDATE runs SET status, pid, host, claim WHERE id = :id AND status IN (...)`` (and ``pid IS
    NULL`` for a queued run, or the pid and claim last seen for a run taken over), which reports
    whether it changed the row. On SQLite the write lock serialises two such updates; on
    PostgreSQL the second waits for the first's row lock and re-checks its WHERE against the new
    row. So two claimants never both win, and every later change by the claimant (the start, the
    final status) is a compare-and-set on its claim's token: a process that lost its run (marked
    interrupted by another machine after its heartbeat went stale, say) never overwrites what the
    new owner wrote, and its sink stops writing rows (``ClaimLost``). The claim sets ``pid`` and
    ``host`` with the token: a pid means something on its host only. A new run is claimed at
    birth, in its INSERT. A background worker's run is claimed by the queue before the worker
    starts (with the pid of the idle warm worker it is handed to; else with the queue's own, then
    the spawned worker's, :func:`hand_over`) and taken over by the worker with the token it is handed
    (:func:`adopt`: a read, where the claim already names the worker's pid). So a run started from the
    Train page writes its row four or five times before its first metric row: its INSERT (with its
    host), the queue's claim, the spawned worker's pid (none for a warm worker), 'running' with what
    the pages show (:func:`begin_training`), and the heartbeat in the transaction of the first rows
    (``tests/test_lifecycle_writes.py`` counts them).

Note [Stop and resume]
    A stop is a request in the store (``stop_requested``), which the claimant reads every half
    second and ends the run ``stopped`` itself. A process that cannot be proven dead is never
    marked stopped: when the request is not honoured in time, ``stop_run`` signals only a process
    it can prove is this run's worker (:mod:`stability.workers.processes`, Note [Identity]) and
    marks the run stopped only once that process is gone; otherwise it says so in one line and
    leaves the run as it is, its stop still requested. Only a stopped, interrupted or failed run
    resumes, with a checkpoint this version continues exactly
    (:func:`stability.training.checkpoints.read_for_resume`; a sweep's run may start over from step
    0 instead), so a resume never reaches a run some process may still be training. A sweep's run
    resumes under the sweep's lock (:func:`resume_lock`), where its sweep's workers claim.

Note [External runs]
    A run logged from someone's own training loop (:mod:`stability.watch`) is ``external``: its
    config is theirs (no RunConfig: nothing to resume or re-run, :func:`check_resumable` says so),
    and its process is not ours. It is created 'running', claimed at birth by the logging process
    (:func:`create_external`), which writes its rows (a heartbeat at every write) and settles it
    with :func:`settle` as any claimant. No silence makes it gone: a loop may think for an hour
    between two logged steps, so the pages say "no word for N min" instead; only a dead pid on this
    host (or that pid now another process's: ``pid_started``) ends it ``interrupted``. Its process is
    never signalled (``stop_run`` proves a process is its worker first, and an external run has
    none), and it holds no worker slot. A process that died elsewhere (a notebook in a container, a
    shared PostgreSQL) would leave it 'running' for ever, so a person may mark it ended
    (:func:`mark_abandoned`: the Runs page's "Mark ended", ``stability delete --mark-ended``) once it
    has said nothing for :data:`ABANDONED_AFTER_S`, unless its pid is alive on this host; the
    compare-and-set is on the heartbeat read, so a run that spoke meanwhile is left alone. Its claim
    is cleared with it: a loop that was only thinking finds its run no longer its own at its next
    step and logs no more (stability.watch warns once; its loop goes on).

Note [Checkpoints kept]
    A checkpoint is kept while its run can be resumed (stopped, interrupted, failed); a run settled
    completed, diverged or pruned drops it (:meth:`ClaimedRun.train`), so finished runs do not fill the
    disk (issue 33: one step of an LSTM of hidden size 2048 in float64 left 403 MB). Whoever wants a
    completed run's trained weights asks for them: ``train_run(..., keep_checkpoint=True)``.

Note [Interrupts]
    While a claimed run trains, Ctrl-C (KeyboardInterrupt) and SIGTERM
    (:class:`~stability.execution.signals.Terminated`) end it ``stopped`` ("interrupted from the
    keyboard", "terminated"), its rows and checkpoint kept; any exception ends it ``failed``
    (:func:`ending`, the one mapping). Both are raised again once the status is written, for the
    caller to end or go on. :func:`claimed` is the one composition: the claim is made with both
    signals held back (``signals_deferred``); then, for the whole ``with`` block, Ctrl-C raises
    KeyboardInterrupt and SIGTERM Terminated (``interrupts_raise``), and whatever ends the block
    settles the run, so no claimed run is left held by a live process that does not train it: a
    signal that arrived during the claim stops the run where its training would begin, an exception
    or interrupt between the claim and the training settles it as :func:`ending` says, and a block
    that ends without training it settles it ``failed``. The final status is written with both
    signals held back too.
"""
from __future__ import annotations

import contextlib
import functools
import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

from ..config import RunConfig
from ..runs.records import RunRecord
from ..runs.status import ACTIVE_STATUSES
from ..training.checkpoints import ResumeError, read_for_resume, remove_checkpoint
from .locks import sweep_lock
from .pids import is_alive, process_start_time
from .signals import Terminated, as_exception, describe_interrupt, interrupts_raise, signals_deferred

if TYPE_CHECKING:
    from ..training.sinks import TrainResult

# The trainer, its sink and the preflight checks (torch) are imported where a run is created or trained: the
# queue's reconcile, and so the CLI's `runs` and `show`, read this module without torch (stability/cli/main.py).

RESUMABLE = ("stopped", "interrupted", "failed")
INTERRUPTED_ERROR = "worker process ended without a final status"
EXTERNAL_INTERRUPTED_ERROR = "the process logging it ended without finishing the run"
STALE_HEARTBEAT_S = 60.0  # a run of this host with no pid and no heartbeat for this long is gone
SHARED_STALE_S = 600.0  # a run of another host with no heartbeat for this long is gone
ABANDONED_AFTER_S = 600.0  # an external run silent this long may be marked ended (Note [External runs])
PID_START_TOLERANCE_S = 1.0  # a pid whose start time differs from the claim's by more is another process


@dataclass(frozen=True)
class Claim:
    """This process's claim on run ``run_id`` (Note [Claims]): the token the store holds, and the
    pid and host it set."""

    run_id: int
    token: str
    pid: int
    host: str


def this_host() -> str:
    """The name a claim records as its ``host`` (a pid means something on that machine only)."""
    return socket.gethostname()


def describe_error(error: BaseException) -> str:
    """``"ExceptionType: first line of the message"`` (just the type when there is no message)."""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__


def ending(exception: BaseException) -> tuple[str, str]:
    """``(status, error)`` of a run that ``exception`` ends (Note [Interrupts]), the one mapping every
    claimant uses: Ctrl-C ``("stopped", "interrupted from the keyboard")``, SIGTERM ``("stopped",
    "terminated")``, anything else ``("failed", "ExceptionType: first line")``."""
    if isinstance(exception, (KeyboardInterrupt, Terminated)):
        return "stopped", describe_interrupt(exception)
    return "failed", describe_error(exception)


def _new_claim(run_id: int | None, pid: int | None = None) -> Claim:
    return Claim(run_id, secrets.token_hex(16), os.getpid() if pid is None else pid, this_host())


def _claimed(claim: Claim) -> dict:
    """What a claim writes: the run 'queued' (claimed, not yet training: Note [States]), its pid, the
    pid's start time (so a pid reused by another process is not taken for the claimant:
    :func:`claimant_gone`), host and token."""
    return {"status": "queued", "pid": claim.pid, "pid_started": process_start_time(claim.pid),
            "host": claim.host, "claim": claim.token}


# ------------------------------------------------------------------ claiming
def create_queued(store, config: RunConfig, name: str | None = None, *, owner: str | None = None,
                  sweep_id: int | None = None, trial: int | None = None, params: dict | None = None) -> int:
    """A new run of ``config``, 'queued' for a worker, nobody's claim, with this host (the machine that
    queued it launches it: a pid means something on its host only), in one INSERT; returns its id."""
    return store.create_run(config.to_dict(), name or config.name or None, sweep_id=sweep_id, trial=trial,
                            params=params, owner=owner, fields={"host": this_host()})


def create_claimed(store, config: RunConfig, name: str | None = None, *, sweep_id: int | None = None,
                   trial: int | None = None, params: dict | None = None, owner: str | None = None) -> Claim:
    """A new run of ``config``, claimed by this process in the INSERT that makes it; ConfigError (one
    line, nothing stored) when its checkpoints would not fit on the disk (preflight.check_room; a sweep's
    trial: its worker checks the room before it trains it, Note [A full disk ends the sweep] in
    stability/sweeps/workers.py). ``owner``: a student's sweep's trial carries its student (stability.access)."""
    if sweep_id is None:
        from ..admission.preflight import check_room

        check_room(config, store)
    claim = _new_claim(None)
    run_id = store.create_run(config.to_dict(), name or config.name or None, sweep_id=sweep_id, trial=trial,
                              params=params, owner=owner, claimed=_claimed(claim))
    return Claim(run_id, claim.token, claim.pid, claim.host)


def create_external(store, config: dict, name: str | None = None, fields: dict | None = None) -> Claim:
    """A new external run (:mod:`stability.watch`: logged from someone's own loop, ``config`` their
    dict), 'running' at once and claimed by this process in the INSERT that makes it, with ``fields``
    (its ``total_steps``, ``metric``, ``baseline``, ``step``): its rows and final status are this
    claim's (Note [External runs])."""
    claim = _new_claim(None)
    run_id = store.create_run(config, name, claimed={**_claimed(claim), "status": "running"}, external=True,
                              fields=fields)
    return Claim(run_id, claim.token, claim.pid, claim.host)


def claim_queued(store, run_id: int) -> Claim | None:
    """Claim a queued run nobody has claimed; None when another process has it or it is no longer
    queued."""
    claim = _new_claim(run_id)
    won = store.compare_and_set(run_id, statuses=["queued"], unclaimed=True, fields=_claimed(claim))
    return claim if won else None


def claim_for_worker(store, run_id: int, *, resumed: bool = False, pid: int | None = None) -> Claim | None:
    """The queue's claim on a run it is about to launch a worker for: a queued run nobody has claimed
    (or, ``resumed``, a stopped, interrupted or failed run, counted as resumed), with ``pid`` (the warm
    worker it is to be handed to, which adopts it without a write), else this process's pid until
    :func:`hand_over` names the worker's. None when another process won."""
    claim = _new_claim(run_id, pid)
    if resumed:
        return claim if store.compare_and_set(run_id, statuses=RESUMABLE, fields={
            **_claimed(claim), **_resume_fields(store, run_id)}) else None
    won = store.compare_and_set(run_id, statuses=["queued"], unclaimed=True, fields=_claimed(claim))
    return claim if won else None


def hand_over(store, claim: Claim, pid: int) -> None:
    """Record the launched worker's ``pid`` on the queue's claim (a no-op once the worker has adopted it)."""
    store.compare_and_set(claim.run_id, statuses=["queued"], claim=claim.token,
                          fields={"pid": pid, "pid_started": process_start_time(pid)})


def release(store, claim: Claim) -> None:
    """Give a queued run back to the queue (its worker could not be launched)."""
    store.compare_and_set(claim.run_id, statuses=["queued"], claim=claim.token,
                          fields={"pid": None, "pid_started": None, "claim": None})


def adopt(store, run_id: int, token: str) -> Claim | None:
    """A launched worker takes over the claim the queue made for it (``token``, handed in its
    environment), with this process's pid. None when the claim is gone (the run was stopped or
    marked interrupted meanwhile). Where the queue has recorded this process already
    (:func:`hand_over`), the claim is only read: nothing is written."""
    claim = Claim(run_id, token, os.getpid(), this_host())
    run = store.record(run_id, latest=False)
    if run.claim != token or run.status != "queued":
        return None
    if run.pid == claim.pid and run.host == claim.host and run.pid_started is not None:
        return claim
    won = store.compare_and_set(run_id, statuses=["queued"], claim=token, fields=_claimed(claim))
    return claim if won else None


def take_over(store, run: RunRecord) -> Claim | None:
    """Claim a run whose claimant is gone (``run`` as last read: interrupted, or active with its
    claimant gone), if it is still as read; None when another process changed it first."""
    claim = _new_claim(run.id)
    won = store.compare_and_set(run.id, statuses=[run.status], claim=run.claim, pid=run.pid,
                                fields={**_claimed(claim), "stop_requested": False, "error": None})
    return claim if won else None


def count_resume(store, claim: Claim) -> bool:
    """A claimed run that continues from its checkpoint (a sweep's requeued or orphaned run): counted as
    resumed, its error cleared, while the claim holds."""
    return store.compare_and_set(claim.run_id, statuses=ACTIVE_STATUSES, claim=claim.token, fields={
        "resumes": store.record(claim.run_id, latest=False).resumes + 1, "error": None})


def start_over(store, claim: Claim) -> bool:
    """A claimed run that trains again from step 0 (a sweep's run with no checkpoint here): its rows
    discarded, its error cleared, while the claim holds."""
    store.discard_after(claim.run_id, -1)
    return store.compare_and_set(claim.run_id, statuses=ACTIVE_STATUSES, claim=claim.token, fields={"error": None})


def requeue(store, run: RunRecord) -> bool:
    """Put a stopped, interrupted or orphaned run (``run`` as last read) back in the queue, unclaimed
    (a sweep's resume); False when it changed meanwhile."""
    return store.compare_and_set(run.id, statuses=[run.status], claim=run.claim, pid=run.pid, fields={
        "status": "queued", "pid": None, "pid_started": None, "claim": None, "stop_requested": False})


# ------------------------------------------------------------------ resuming
def resume_lock(store, run: RunRecord):
    """The lock a resume of ``run`` holds: its sweep's (its sweep's workers claim under it), none for
    a run of no sweep (the claim alone decides)."""
    return sweep_lock(store, run.sweep_id) if run.sweep_id is not None else contextlib.nullcontext()


def check_resumable(store, run_id: int, *, checkpoint: bool = True) -> RunConfig:
    """The config of ``run_id`` if it can be resumed: stopped, interrupted or failed, and (with
    ``checkpoint``) with a checkpoint this version continues exactly. ResumeError (one line) if not;
    nothing is changed."""
    run = store.record(run_id)
    if run.external:
        raise ResumeError(f"run {run_id} is an external run, logged from its own loop: it has no config to "
                          "resume or re-run; run that loop again")
    if run.status not in RESUMABLE:
        raise ResumeError(f"run {run_id} is {run.status}; only a stopped, interrupted or failed run "
                          "can be resumed")
    config = RunConfig.from_dict(dict(run.raw_config))  # a config that no longer parses: its ConfigError
    config.validate()
    if checkpoint:
        read_for_resume(store.checkpoint_path(run_id), f"run {run_id}", config.to_dict())
    return config


@contextlib.contextmanager
def execution_switched(store, run_id: int, cuda_graphs: bool | None):
    """The run's stored config with ``train.cuda_graphs`` set to ``cuda_graphs`` (nothing to do for None, or
    the value it has) for the resume in the block, which reads it from there, as a worker and a sweep's claim
    do: the record says how the run trains from now on. Its checkpoint still matches: ``cuda_graphs`` is
    execution only (stability.training.checkpoints.EXECUTION_ONLY), a graphed step equal to the eager one
    within float32 round-off, its optimizer state kept in the plain form either way. Written by a
    compare-and-set while the run is stopped, interrupted or failed (ResumeError, one line, otherwise: nothing
    changed); a ResumeError from the block, which is raised before anything claims or queues the run, puts
    the config back as it was."""
    if cuda_graphs is None:
        yield
        return
    check_resumable(store, run_id, checkpoint=False)  # an external or active run: its one line
    before = dict(store.record(run_id, latest=False).raw_config)
    train = dict(before.get("train") or {})
    if train.get("cuda_graphs", True) is cuda_graphs:  # absent: a config of a version before the field
        yield
        return
    after = {**before, "train": {**train, "cuda_graphs": cuda_graphs}}
    if not store.compare_and_set(run_id, statuses=RESUMABLE, fields={"config": after}):
        check_resumable(store, run_id, checkpoint=False)  # raises with the status it has now
        raise ResumeError(f"run {run_id} was claimed by another process meanwhile")
    try:
        yield
    except ResumeError:
        store.compare_and_set(run_id, statuses=RESUMABLE, fields={"config": before})
        raise


def resumable_here(store, run_id: int, config: RunConfig) -> bool:
    """Whether this machine holds a checkpoint of the run that a resume continues exactly."""
    try:
        read_for_resume(store.checkpoint_path(run_id), f"run {run_id}", config.to_dict())
    except ResumeError:
        return False
    return True


def _resume_fields(store, run_id: int) -> dict:
    return {"resumes": store.record(run_id).resumes + 1, "stop_requested": False, "error": None}


def claim_resume(store, run_id: int, *, checkpoint: bool = True) -> tuple[Claim, RunConfig]:
    """Claim a stopped, interrupted or failed run to continue it in this process (counted as
    resumed, its stop request cleared); returns the claim and the run's config. ResumeError (one
    line, nothing changed) when it cannot be resumed or another process claimed it first. A sweep's
    run: hold :func:`resume_lock`."""
    config = check_resumable(store, run_id, checkpoint=checkpoint)
    claim = _new_claim(run_id)
    if not store.compare_and_set(run_id, statuses=RESUMABLE,
                                 fields={**_claimed(claim), **_resume_fields(store, run_id)}):
        check_resumable(store, run_id, checkpoint=False)  # raises with the status it has now
        raise ResumeError(f"run {run_id} was claimed by another process meanwhile")
    return claim, config


def queue_resume(store, run_id: int) -> RunConfig:
    """Queue a stopped, interrupted or failed run for a worker ('queued', unclaimed, this host's,
    counted as resumed, its stop request cleared); ResumeError (one line, nothing changed) when it
    cannot be resumed. A sweep's run: hold :func:`resume_lock`."""
    config = check_resumable(store, run_id)
    if not store.compare_and_set(run_id, statuses=RESUMABLE, fields={
            "status": "queued", "pid": None, "pid_started": None, "claim": None, "host": this_host(),
            **_resume_fields(store, run_id)}):
        check_resumable(store, run_id, checkpoint=False)
        raise ResumeError(f"run {run_id} was claimed by another process meanwhile")
    return config


# ------------------------------------------------------------------ settling
def settle(store, claim: Claim, status: str, error: str | None = None) -> bool:
    """The claimant's final (or any later) status of its run, while its claim holds; False when the
    run is no longer this claim's (Note [Claims]): nothing is written then."""
    return store.compare_and_set(claim.run_id, statuses=ACTIVE_STATUSES, claim=claim.token,
                                 fields={"status": status, "error": error})


def stop_unclaimed(store, run_id: int) -> bool:
    """Stop a run nobody has claimed (no pid, no claim: queued, or 'running' with no process named, as
    a store written by hand or by an old version may hold); False when it is claimed or ended."""
    return store.compare_and_set(run_id, statuses=ACTIVE_STATUSES, unclaimed=True, claim=None,
                                 fields={"status": "stopped"})


def mark_stopped(store, run: RunRecord, error: str) -> bool:
    """Stop an active run whose process was proven gone (``run`` as read before; False when it changed)."""
    return store.compare_and_set(run.id, statuses=ACTIVE_STATUSES, claim=run.claim, pid=run.pid,
                                 fields={"status": "stopped", "error": error})


def mark_interrupted(store, run: RunRecord) -> bool:
    """Mark an active run whose claimant is gone (:func:`claimant_gone`) 'interrupted', if it is
    still as read; False when it changed meanwhile (its process settled it, another took it over)."""
    error = EXTERNAL_INTERRUPTED_ERROR if run.external else INTERRUPTED_ERROR
    return store.compare_and_set(run.id, statuses=ACTIVE_STATUSES, claim=run.claim, pid=run.pid,
                                 fields={"status": "interrupted", "error": error})


def abandoned(run: RunRecord, now: float | None = None, here: str | None = None) -> str | None:
    """Why an external ``run`` may not be marked ended (:func:`mark_abandoned`), in one line; None when
    it may: active, external and silent for :data:`ABANDONED_AFTER_S`, its pid not alive on this host."""
    if not run.external:
        return f"run {run.id} is not an external run: `stability stop {run.id}` stops it"
    if run.status not in ACTIVE_STATUSES:
        return f"run {run.id} is {run.status} already"
    silent = heartbeat_age(run, now)
    if silent < ABANDONED_AFTER_S:
        return (f"run {run.id} is an external run that spoke {int(silent // 60)} min ago; it can be marked ended "
                f"once silent for {int(ABANDONED_AFTER_S // 60)} min (its loop ends it when it finishes)")
    if run.host in (None, here or this_host()) and run.pid is not None and not pid_gone(run):
        return (f"run {run.id}'s process (pid {run.pid}) is alive on this host, silent for {int(silent // 60)} min; "
                "end its loop there")
    return None


def mark_abandoned(store, run: RunRecord) -> bool:
    """Mark a silent external run (``run`` as read; :func:`abandoned` says None) 'interrupted', its
    claim cleared, by a compare-and-set on the status, claim, pid and heartbeat read: False when it
    spoke or changed meanwhile, or may not be marked (Note [External runs])."""
    if abandoned(run) is not None:
        return False
    minutes = int(heartbeat_age(run) // 60)
    return store.compare_and_set(run.id, statuses=ACTIVE_STATUSES, claim=run.claim, pid=run.pid,
                                 heartbeat=run.heartbeat, fields={
                                     "status": "interrupted", "claim": None,
                                     "error": f"no word from its loop for {minutes} min; marked ended"})


# ------------------------------------------------------------------ staleness
def heartbeat_age(run: RunRecord, now: float | None = None) -> float:
    """Seconds since the run last showed life: its heartbeat, else its start, else its creation."""
    beats = [t for t in (run.heartbeat, run.started_at, run.created_at) if t is not None]
    return (time.time() if now is None else now) - max(beats) if beats else float("inf")


def claimant_gone(run: RunRecord, here: str | None = None) -> bool:
    """Whether the process that claimed an active ``run`` is gone (the one rule, for the queue's
    reconcile and a sweep's orphans): on this host (or no host recorded) its pid is dead or now
    another process's (:func:`pid_gone`), or without a pid it has shown no life for
    :data:`STALE_HEARTBEAT_S`; on another host (a shared store: a pid means nothing here) it has
    shown no life for :data:`SHARED_STALE_S`. An external run is gone only when its process, on this
    host, is (Note [External runs])."""
    if run.external:
        return run.host in (None, here or this_host()) and run.pid is not None and pid_gone(run)
    if run.host not in (None, here or this_host()):
        return heartbeat_age(run) > SHARED_STALE_S
    if run.pid is not None:
        return pid_gone(run)
    return heartbeat_age(run) > STALE_HEARTBEAT_S


def pid_gone(run: RunRecord) -> bool:
    """Whether ``run``'s pid (of this host) no longer names its claimant: dead, or alive with a start
    time other than the claim's ``pid_started`` (the pid reused by another process). A claim of an
    older version, with no start time recorded, is judged by its pid alone."""
    if not is_alive(run.pid):
        return True
    started = process_start_time(run.pid) if run.pid_started is not None else None
    return started is not None and abs(started - run.pid_started) > PID_START_TOLERANCE_S


# ------------------------------------------------------------------ training
NOT_TRAINED_ERROR = "its claimant ended without training it"


class ClaimedRun:
    """A run this process holds in :func:`claimed`: its ``claim``, :meth:`train`, and once settled
    its ``status`` and ``error`` (None while it is still to be settled)."""

    def __init__(self, store, claim: Claim, pending: list[int] | tuple = ()):
        self.store, self.claim = store, claim
        self.pending = list(pending)  # signals that arrived while the run was claimed: it stops when it would train
        self.status: str | None = None
        self.error: str | None = None

    @property
    def run_id(self) -> int:
        return self.claim.run_id

    def train(self, config: RunConfig, *, resume: bool = False, hooks=(),
              progress: Callable[[dict], None] | None = None, keep_checkpoint: bool = False) -> TrainResult:
        """Train the run in this process and settle it (Note [Interrupts]): 'running' once its trainer
        begins (:func:`begin_training`), then the loop's ending (completed, stopped, diverged, pruned
        ...); an exception or interrupt settles it as :func:`ending` says and is raised again. A run
        settled in a state that cannot be resumed drops its checkpoint unless ``keep_checkpoint``
        (Note [Checkpoints kept])."""
        from ..training import run as training
        from ..training.sinks import StoreSink

        sink = StoreSink(self.store, self.run_id, claim=self.claim.token,
                         begin_run=functools.partial(begin_training, self.store, self.claim),
                         keep_checkpoint=keep_checkpoint)  # Note [Checkpoints kept]: none written only to be dropped
        with signals_deferred() as late:
            try:
                with interrupts_raise():
                    if self.pending:  # arrived while the run was claimed: it stops at once
                        raise as_exception(self.pending.pop(0))
                    result = training.build_and_train(config, hooks=[sink, *hooks], progress=progress, resume=resume)
            except BaseException as error:
                self.end(error)
                raise
            if self.settle(result.status, result.error) and result.status not in RESUMABLE and not keep_checkpoint:
                remove_checkpoint(self.store.checkpoint_path(self.run_id))  # Note [Checkpoints kept]
        if late:  # arrived while the status was written: act on it now (the run is settled)
            raise as_exception(late[0])
        return result

    def settle(self, status: str, error: str | None = None) -> bool:
        """:func:`settle` the run once, with both signals held back; False when it was settled already
        or is no longer this claim's."""
        if self.status is not None:
            return False
        with signals_deferred():
            written = settle(self.store, self.claim, status, error)
        self.status, self.error = status, error
        return written

    def end(self, exception: BaseException) -> tuple[str, str] | None:
        """Settle the run as ``exception`` ends it (:func:`ending`; an interrupt or an Exception, nothing
        for SystemExit and the like), unless it was settled already; ``(status, error)`` as settled."""
        if not isinstance(exception, (Exception, KeyboardInterrupt, Terminated)):
            return None
        self.settle(*ending(exception))
        return self.status, self.error


@contextlib.contextmanager
def claimed(store, take: Callable[[], Claim | None]) -> Iterator[ClaimedRun | None]:
    """The one composition of a claimant (Note [Interrupts]): ``take()`` claims the run with Ctrl-C and
    SIGTERM held back (:func:`create_claimed`, :func:`claim_queued`, :func:`adopt`, a sweep's job
    under its lock ...); the block gets the :class:`ClaimedRun` (None when ``take`` found nothing:
    nothing to settle then), with both signals raised as exceptions in it; whatever ends the block
    settles the run: its training (:meth:`ClaimedRun.train`), an exception or interrupt as
    :func:`ending` says (raised again, for the caller to end or go on), a block that returns without
    training it 'failed'. A signal caught during the claim stops the run ('stopped', raised) where
    its training would begin, or at the block's end: the block still gets the run, so a caller can
    say how it ended."""
    with signals_deferred() as caught:
        claim = take()
    if claim is None:
        if caught:
            raise as_exception(caught[0])
        yield None
        return
    run = ClaimedRun(store, claim, caught)
    with interrupts_raise():
        try:
            yield run
            if run.pending and run.status is None:  # caught during the claim, never trained
                raise as_exception(run.pending.pop(0))
        except BaseException as error:
            run.end(error)
            raise
        run.settle("failed", NOT_TRAINED_ERROR)  # a no-op once trained


def begin_training(store, claim: Claim, fields: dict) -> bool:
    """The trainer of ``claim`` has begun: the run is 'running', with what the pages show of it
    (``fields``, from ``StoreSink.begin``: device, parameter counts, metric, ...), in one
    compare-and-set on the claim; False when the run is no longer this claim's."""
    return store.compare_and_set(claim.run_id, statuses=ACTIVE_STATUSES, claim=claim.token,
                                 fields={**fields, "status": "running"})


def train_run(config: RunConfig, store=None, run_id: int | None = None, *, hooks=(),
              progress: Callable[[dict], None] | None = None, resume: bool = False,
              keep_checkpoint: bool = False) -> TrainResult:
    """Train ``config`` in this process; return its :class:`~stability.training.sinks.TrainResult`.

    Without a store, :func:`stability.training.run.build_and_train`: the rows are kept in memory (or by a
    sink among ``hooks``). With one, run ``run_id`` of it is claimed (a queued run nobody has
    claimed; with ``resume``, a stopped, interrupted or failed one with a checkpoint:
    :class:`~stability.training.checkpoints.ResumeError` otherwise; when ``run_id`` is None, a new
    run named ``config.name``, claimed at birth once ``check_buildable`` passes, so nothing refused
    is stored), trained and settled in :func:`claimed`: an exception marks it failed and is
    raised again. The model's initial weights follow ``config.train.seed``. A completed (diverged,
    pruned) run's checkpoint is removed unless ``keep_checkpoint``: then its trained weights stay at
    ``store.checkpoint_path(run_id)`` (Note [Checkpoints kept]).
    """
    from ..admission.preflight import check_buildable
    from ..training import run as training

    config.validate()
    if store is None:
        if run_id is not None:
            raise ValueError(f"run_id {run_id} names a run of a store; give the store too")
        return training.build_and_train(config, hooks=hooks, progress=progress, resume=resume)
    if run_id is None:
        if resume:
            raise ResumeError("resume needs the id of the run to continue")
        check_buildable(config)  # nothing that cannot be built is stored
        take = functools.partial(create_claimed, store, config)
    elif resume:
        read_for_resume(store.checkpoint_path(run_id), f"run {run_id}", config.to_dict())

        def take():  # a config switched in an execution-only field (cuda_graphs) is written to the record first
            with execution_switched(store, run_id, config.train.cuda_graphs):
                return claim_resume(store, run_id, checkpoint=False)[0]
    else:
        take = functools.partial(claim_queued, store, run_id)
    with claimed(store, take) as run:
        if run is None:
            raise ValueError(f"run {run_id} is {store.record(run_id, latest=False).status}; only a queued run that "
                             "no process has claimed can be trained (resume=True continues a stopped one)")
        return run.train(config, resume=resume, hooks=hooks, progress=progress, keep_checkpoint=keep_checkpoint)
