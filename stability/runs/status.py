"""The states of a run and of a sweep.

A run is ``queued`` until a process claims it, ``running`` while that process
trains it, and then one of the terminal states::

    queued ──claim──▶ running ──▶ completed | stopped | diverged | failed | pruned
       ▲                 │
       └──── resume ─────┴──(the process died)──▶ interrupted

Who may change which state is :mod:`stability.execution.lifecycle`'s to say
(docs/architecture.md, "The run lifecycle"); this module only names them.
"""
from __future__ import annotations

STATUSES = ("queued", "running", "completed", "stopped", "diverged", "failed", "interrupted", "pruned")
ACTIVE_STATUSES = ("queued", "running")  # a worker will still write to the run
TERMINAL = tuple(status for status in STATUSES if status not in ACTIVE_STATUSES)
SWEEP_STATUSES = ("running", "stopped", "completed")
