"""Claims and statuses: who trains a run, and every change of its status.

    lifecycle.py   every status change, the claim by compare-and-set, ``claimed`` and ``ending``
    signals.py     Ctrl-C and SIGTERM as one stop, held back around a claim
    locks.py       the run queue's scheduling lock and a sweep's claim lock (a flock; an advisory
                   lock on PostgreSQL)
    pids.py        a claimant's process: alive, and when it started

Below it, :mod:`stability.admission` (can a run be built here, what it costs); above it,
:mod:`stability.workers` (the processes that train the claimed runs). Import the modules themselves.
"""
