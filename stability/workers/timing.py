"""The timing child: seconds a training step of a model shape takes, timed in a child process under a hard
time limit, for the Streamlit server.

    known, timing = timed_apart(configs)         # the Streamlit server's: never waits, never builds a model

A shape is what decides a step's time (:func:`stability.admission.shapes.shape_of`). Timing it means
building its model and training a few steps (:func:`stability.admission.shapes.time_steps`, which the CLI
calls in its own process), which the Streamlit server must never do itself (issue 20: an admitted rnn 1024
at T = 5,000 takes minutes a step there). Note [Timing apart] says how the server times shapes instead.

Note [Timing apart]
    :func:`timed_apart` answers at once from what this process already knows: a shape timed before
    (kept :data:`KEEP_S`), a shape too large to time (None: its run would need more than
    :data:`MAX_TIMED_BYTES`, stability.admission.budget.footprint, or more than the time limit by its
    operation count), or a shape waiting for its timing (pending). The shapes not known go to the timing
    child (one at a time: Note [One timing child]), ``python -m stability.workers.timing LIMIT
    THREADS`` (:data:`stability.workers.processes.TIMING_MODULE`, started by
    :func:`stability.workers.processes.start` as every child of this package), their configs as JSON on its
    stdin; it answers one JSON line a shape on its stdout as each is timed, in the order given (the newest request's first, each request's cheapest first). The child ends itself
    after LIMIT seconds (``signal.alarm``: its default action ends the process), and the process that
    started it kills it (its own child, by its ``Popen``) once it looks past LIMIT plus a second; the shapes
    it did not answer are left untimed (None). It runs in its own session with the worker thread policy
    (stability.workers.threads), so it shares the cores as a worker would; its output is read only
    after it has ended (a few lines: no pipe fills).

Note [One timing child]
    A child may take :data:`TIME_LIMIT_S` and a model up to :data:`MAX_TIMED_BYTES`, so a server runs at most
    one at a time, and only for shapes someone still waits for (issue 33: six edits of the Sweep form
    started seven children). Each requester (a page's session) has one wish, its latest request's unknown
    shapes, which replaces its previous one and lapses when not renewed within :data:`WISH_S` (a page
    waiting for its timings asks every second). A child none of whose shapes is wished for any more is
    killed (its shapes dropped, not marked untimed: a later wish times them); when no child is alive, one
    is started for every shape wished for, the newest wish's first. So after any number of edits one child
    runs, and it times the shapes the last edit asked for.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from .. import tasks
from ..admission import budget
from ..admission.shapes import OPERATIONS_PER_S, TIMED_STEPS, operations_per_step, shape_of, time_steps
from ..config import RunConfig
from . import processes, threads

TIME_LIMIT_S = 20.0     # one child's wall time, all its shapes
MAX_TIMED_BYTES = 2**30  # a shape whose run needs more memory is not timed (its operation count stands in)
KEEP_S = 600.0          # a timing is kept this long (completed runs in the store improve on it)
CHILD_GRACE_S = 1.0
WISH_S = 10.0           # a wish not renewed this long is nobody's any more (a page polls every second while it waits)


# ------------------------------------------------------------------ timing apart (Note [Timing apart])
@dataclass
class _Child:
    process: subprocess.Popen
    shapes: set[str]
    deadline: float
    started: float = field(default_factory=time.monotonic)


@dataclass
class _Wish:
    """A requester's latest request: the shapes it waits for (not known when asked), renewed at each ask."""

    configs: dict[str, RunConfig]
    parallel: int
    limit_s: float
    when: float


_known: dict[str, tuple[float | None, float]] = {}  # shape -> (seconds a step, or None: not timed; when)
_children: list[_Child] = []  # at most one (Note [One timing child])
_wishes: dict[object, _Wish] = {}  # requester -> its latest request (Note [One timing child])
_lock = threading.Lock()


def timed_apart(configs: list[RunConfig], parallel: int = 1, limit_s: float = TIME_LIMIT_S,
                requester: object = None) -> tuple[dict[str, float | None], set[str]]:
    """``({shape: seconds a step, or None where it could not be timed}, {shapes waiting for the timing
    child})`` for the shapes of ``configs``: the unknown ones are ``requester``'s wish, which replaces its
    last one, and the one timing child times the shapes still wished for (Notes [Timing apart], [One timing
    child]). ``requester``: who asks (a Streamlit session; None for the CLI and tests). Never builds a
    model here and never waits."""
    shapes = {shape_of(config): config for config in configs}
    with _lock:
        _collect()
        now = time.monotonic()
        for shape in [shape for shape, (_, when) in _known.items() if now - when > KEEP_S]:
            del _known[shape]
        wished = {}
        for shape, config in shapes.items():
            if shape in _known:
                continue
            if _worth_timing(config, limit_s):
                wished[shape] = config
            else:  # too large to time apart: its operation count stands in
                _known[shape] = (None, now)
        _wishes.pop(requester, None)
        if wished:
            _wishes[requester] = _Wish(wished, parallel, limit_s, now)
        _feed(now)
        known = {shape: _known[shape][0] for shape in shapes if shape in _known}
        return known, set(wished) - set(_known)


def _feed(now: float) -> None:
    """Under the lock (Note [One timing child]): forget wishes not renewed within :data:`WISH_S`, kill the
    child when no shape it times is wished for any more, and start one, if none is alive, for the shapes
    wished for (the newest wish's first)."""
    for requester in [key for key, wish in _wishes.items() if now - wish.when > WISH_S]:
        del _wishes[requester]
    wanted: dict[str, RunConfig] = {}
    for wish in sorted(_wishes.values(), key=lambda wish: wish.when, reverse=True):
        for shape, config in sorted(wish.configs.items(), key=lambda item: operations_per_step(item[1]) or 0.0):
            if shape not in _known:
                wanted.setdefault(shape, config)
    for child in list(_children):
        if not child.shapes & set(wanted):  # nobody waits for its shapes: they are dropped, not known
            _end(child)
    if not _children and wanted:
        newest = max(_wishes.values(), key=lambda wish: wish.when)
        _children.append(_start_child(list(wanted.values()), newest.parallel, newest.limit_s))


def _end(child: _Child) -> None:
    """Kill ``child`` (our own, by its ``Popen``) and reap it; what it timed is not read."""
    child.process.kill()
    child.process.wait()
    child.process.stdout.close()
    _children.remove(child)


def _worth_timing(config: RunConfig, limit_s: float) -> bool:
    """Whether ``config`` fits a timing child: its run's memory under :data:`MAX_TIMED_BYTES` and its
    timed steps, by their operation count, well inside the limit."""
    try:
        task = tasks.check(config.task.name, seed=config.train.seed, **config.task.options)
        footprint = budget.footprint(config, task)
    except (ValueError, TypeError):
        return False
    if footprint.peak + footprint.evaluation_set > MAX_TIMED_BYTES:
        return False
    operations = budget.work(config, task).step
    return (TIMED_STEPS + 1) * operations / OPERATIONS_PER_S < limit_s / 2


def _start_child(configs: list[RunConfig], parallel: int, limit_s: float) -> _Child:
    """A timing child for ``configs`` (in this order: the newest wish's first), their JSON written to its
    stdin."""
    count = threads.worker_threads(max(1, parallel))
    process = processes.start(processes.TIMING_MODULE, [str(limit_s), str(count)], count,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        process.stdin.write(json.dumps([config.to_dict() for config in configs]).encode())
        process.stdin.close()
    except OSError:  # it ended at once: collected as any other ending
        pass
    return _Child(process, {shape_of(config) for config in configs}, time.monotonic() + limit_s + CHILD_GRACE_S)


def _collect() -> None:
    """Under the lock: read every child that ended, kill those past their deadline; each shape a child
    did not answer is known as not timed."""
    for child in list(_children):
        if child.process.poll() is None:
            if time.monotonic() < child.deadline:
                continue
            child.process.kill()  # our own child, past its limit
            child.process.wait()
        answered = _answers(child.process.stdout.read())
        child.process.stdout.close()
        now = time.monotonic()
        for shape in child.shapes:
            _known[shape] = (answered.get(shape), now)
        _children.remove(child)


def _answers(output: bytes) -> dict[str, float]:
    answered = {}
    for line in output.decode(errors="replace").splitlines():
        try:
            item = json.loads(line)
            seconds = float(item["seconds"])
        except (ValueError, KeyError, TypeError):
            continue
        if seconds > 0:
            answered[str(item["shape"])] = seconds
    return answered


def stop_children() -> int:
    """Kill this process's timing child (its own, by its ``Popen``) and forget every wish; returns how many
    children were alive."""
    with _lock:
        _wishes.clear()
        alive = [child for child in _children if child.process.poll() is None]
        for child in alive:
            child.process.kill()
        for child in list(_children):
            child.process.wait()
            child.process.stdout.close()
            _children.remove(child)
        return len(alive)


def main(argv: list[str] | None = None) -> int:
    """The timing child (``python -m stability.workers.timing LIMIT THREADS``): the configs on stdin, one
    ``{"shape", "seconds"}`` line a shape timed."""
    argv = sys.argv[1:] if argv is None else argv
    limit_s, count = float(argv[0]), int(argv[1])
    if hasattr(signal, "alarm"):  # POSIX: SIGALRM's default action ends this process, a hard limit
        signal.alarm(max(1, int(limit_s + 0.999)))
    threads.apply_worker_threads(count)
    for item in json.load(sys.stdin):
        config = RunConfig.from_dict(item)
        seconds = time_steps(config)
        if seconds is not None:
            print(json.dumps({"shape": shape_of(config), "seconds": seconds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
