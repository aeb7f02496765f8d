"""Ctrl-C held back around the few store writes that must land whole.

    with interrupts_deferred() as interrupted:
        run_id = runner.create_attached_run(store, config)
    if interrupted:   # Ctrl-C arrived meanwhile: act on it now
        ...
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


@contextmanager
def interrupts_deferred():
    """Hold back Ctrl-C (SIGINT) for the duration; yields a list that is non-empty afterwards
    if one arrived, for the caller to act on.

    The store rolls back a write that an interrupt cuts short (stability/runs/engine.py, Note
    [interrupts]); this keeps the few writes that must land, the run's claim and
    its final 'stopped', from being cut at all.
    """
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = signal.signal(signal.SIGINT, lambda number, frame: caught.append(number))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)
