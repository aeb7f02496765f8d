"""Background training runs: one detached worker process per run, a queue, stop, reconcile.

    run_id = start_run(config)        # stored as 'queued'; a worker starts if a slot is free
    stop_run(run_id)                  # a request in the store; a worker that does not heed it is ended
    resume_run(run_id)                # a stopped/interrupted/failed run continues from its checkpoint
    reconcile()                       # gone claimants -> 'interrupted'; queued runs -> free slots

The names the pages, the CLI and the sweeps use, from the modules that hold them, one concern each:

    scheduler.py   the queue: start, stop, resume, reconcile, the slots, a worker's entry point
    warm.py        warm workers: started before their run, torch imported, idle on a pipe
    lifecycle.py   every status change; claiming a run and training it in this process
    processes.py   worker processes: spawn, is_alive, identity, terminate (Note [Identity])
    slots.py       one slot count for runs and sweep workers, and the sweep workers waiting for one
    locks.py       the scheduling lock and a sweep's lock
    signals.py     Ctrl-C and SIGTERM around a run
"""
from __future__ import annotations

from .lifecycle import (INTERRUPTED_ERROR, RESUMABLE, SHARED_STALE_S, STALE_HEARTBEAT_S, check_resumable,
                        claimant_gone, describe_error, heartbeat_age)
from .locks import scheduling_lock, sweep_lock
from .processes import (CLAIM_ENV, MAX_RUNS_ENV, PACKAGE_ROOT, TOKEN_ENV, WORKER_MODULE, is_alive,
                        launch_sweep_workers, launched_workers, process_start_time, terminate_sweep_workers)
from .scheduler import (free_slots, keep_warm, max_concurrent_runs, reconcile, resume_run, run_worker, start_run,
                        start_sweep_workers, stop_run)

__all__ = ["CLAIM_ENV", "INTERRUPTED_ERROR", "MAX_RUNS_ENV", "PACKAGE_ROOT", "RESUMABLE", "SHARED_STALE_S",
           "STALE_HEARTBEAT_S", "TOKEN_ENV", "WORKER_MODULE", "check_resumable", "claimant_gone", "describe_error",
           "free_slots", "heartbeat_age", "is_alive", "keep_warm", "launch_sweep_workers", "launched_workers", "max_concurrent_runs",
           "process_start_time", "reconcile", "resume_run", "run_worker", "scheduling_lock", "start_run", "start_sweep_workers", "stop_run",
           "sweep_lock", "terminate_sweep_workers"]
