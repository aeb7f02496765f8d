"""Worker processes: the run queue and the processes that train its runs, and the timing child.

    scheduler.py   the queue: start, stop, resume, reconcile, filling the slots; a worker's entry point
    slots.py       one slot count for runs and sweep workers, and the sweep workers waiting for one
    processes.py   the one way to start a child (``python -m`` a declared module, Note [Started by
                   name]); identifying and ending only our own workers (Note [Identity])
    warm.py        warm workers: torch imported, idle on a pipe, handed the next queued run
    gpu_slots.py   a GPU per run slot and sweep worker
    threads.py     a worker's share of the cores and its OpenMP environment (a foreground run's too)
    timing.py      the shape-timing child of a Streamlit server (Notes [Timing apart], [One timing child])

Above :mod:`stability.execution` (the claims these processes take) and :mod:`stability.admission`;
below the sweeps, the access rules, the pages and the CLI. Import the modules themselves.
"""

from __future__ import annotations

from ..core.faces import lazy

# The room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py and
# benchmarks/ may import from it, each -> the module here that holds it (None: that module itself), imported
# on first use, so that importing the room imports none of its modules.
_FACE = {
    "gpu_for": "gpu_slots", "processes": None, "CLAIM_ENV": "processes", "MAX_RUNS_ENV": "processes",
    "launched_workers": "processes", "terminate_sweep_workers": "processes", "scheduler": None,
    "check_resume_room": "scheduler", "hand_on_slot": "scheduler", "keep_warm": "scheduler", "max_concurrent_runs": "scheduler",
    "reconcile": "scheduler", "resume_run": "scheduler", "run_worker": "scheduler", "start_run": "scheduler",
    "start_sweep_workers": "scheduler", "stop_run": "scheduler", "slots": None, "drop_waiting": "slots",
    "sweep_worker_pids": "slots", "waiting": "slots", "threads": None, "THREADS_ENV": "threads",
    "adopt_worker_environment": "threads", "adopt_worker_policy": "threads", "apply_worker_threads": "threads", "available_cores": "threads",
    "worker_threads": "threads", "timed_apart": "timing", "warm": None, "close_warm": "warm", "idle_pids": "warm",
    "read_order": "warm",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
