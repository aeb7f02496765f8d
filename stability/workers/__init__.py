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
