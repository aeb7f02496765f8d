"""Ctrl-C (SIGINT) and SIGTERM around a run: raised as exceptions while it trains, held back
around the few store writes that must land whole.

    with interrupts_raise():             # Ctrl-C raises KeyboardInterrupt, SIGTERM Terminated
        trainer.fit()
    with signals_deferred() as caught:   # both held back; caught is non-empty if one arrived
        claim = lifecycle.create_claimed(store, config)

The store rolls back a write that an interrupt cuts short (stability/runs/engine.py, Note
[interrupts]); deferring keeps the writes that must land, a run's claim and its final status,
from being cut at all. Signal handlers can only be set in the main thread: elsewhere both are
no-ops (a thread is never interrupted by a signal anyway).
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


class Terminated(BaseException):
    """SIGTERM arrived (``stop_run`` ending a worker, a batch system ending a job): the run ends
    'stopped', as after Ctrl-C. A BaseException, like KeyboardInterrupt, so that ``except
    Exception`` does not swallow it."""


def describe_interrupt(interrupt: BaseException) -> str:
    """The error a run stopped by ``interrupt`` (KeyboardInterrupt or :class:`Terminated`) is stored with."""
    return "terminated" if isinstance(interrupt, Terminated) else "interrupted from the keyboard"


def as_exception(number: int) -> BaseException:
    """The exception a signal caught while deferred stands for."""
    return Terminated() if number == signal.SIGTERM else KeyboardInterrupt()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_terminated(number, frame):
    raise Terminated()


@contextmanager
def interrupts_raise():
    """Ctrl-C raises KeyboardInterrupt and SIGTERM :class:`Terminated` in the main thread for the
    duration, whatever the handlers were before (they are put back afterwards)."""
    if not _main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler)
                for number, handler in ((signal.SIGINT, signal.default_int_handler),
                                        (signal.SIGTERM, _raise_terminated))}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def signals_deferred(signals=INTERRUPTS):
    """Hold back ``signals`` (Ctrl-C and SIGTERM) for the duration; yields a list of the signal
    numbers that arrived meanwhile, for the caller to act on afterwards."""
    caught: list[int] = []
    if not _main_thread():
        yield caught
        return
    previous = {number: signal.signal(number, lambda number, frame: caught.append(number)) for number in signals}
    try:
        yield caught
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
