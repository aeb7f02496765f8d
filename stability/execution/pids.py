"""A process of this machine by its pid: whether it lives, and when it started (psutil).

    is_alive(pid)               # exists and is not a zombie (an exited, unreaped child)
    process_start_time(pid)     # seconds since the epoch; a pid and its start time name one process

The claims ask them of a claimant (:func:`stability.execution.lifecycle.claimant_gone`, the claim's
``pid_started``); the worker processes of their own children (:mod:`stability.workers.processes`,
Note [Identity]).
"""
from __future__ import annotations

import psutil


def is_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists on this machine and is not a zombie (an exited, unreaped child)."""
    if pid is None or pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # it exists, owned by someone else
        return True


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch, as psutil reads it from the system), or
    None when there is no such process. A pid and its start time name one process."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
