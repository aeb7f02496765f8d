"""Seconds a training step of a model shape takes: timed here, or in a child process under a hard time limit.

    seconds = time_steps(config)                 # in this process (the CLI's estimate)
    known, timing = timed_apart(configs)         # the Streamlit server's: never waits, never builds a model

A shape is what decides a step's time: cell, hidden size, task and its options, batch size, dtype, device
(:func:`shape_of`). Timing it means building its model and training a few steps (:func:`time_steps`),
which the Streamlit server must never do itself (issue 20: an admitted rnn 1024 at T = 5,000 takes minutes
a step there). Note [Timing apart] says how the server times shapes instead.

Note [Timing apart]
    :func:`timed_apart` answers at once from what this process already knows: a shape timed before
    (kept :data:`KEEP_S`), a shape too large to time (None: its run would need more than
    :data:`MAX_TIMED_BYTES`, stability.execution.budget.footprint, or more than the time limit by its
    operation count), or a shape a child is timing now (pending). The shapes nobody times yet go to one
    child, ``python -m stability.sweeps.shape_timing LIMIT THREADS``, their configs as JSON on its stdin;
    it answers one JSON line a shape on its stdout as each is timed, cheapest first. The child ends itself
    after LIMIT seconds (``signal.alarm``: its default action ends the process), and the process that
    started it kills it (its own child, by its ``Popen``) once it looks past LIMIT plus a second; the shapes
    it did not answer are left untimed (None). It runs in its own session with the worker thread policy
    (stability.execution.threads), so it shares the cores as a worker would; its output is read only
    after it has ended (a few lines: no pipe fills).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from .. import tasks
from ..config import RunConfig
from ..execution import budget, threads
from ..execution.processes import PACKAGE_ROOT

TIMED_STEPS = 3
TIME_LIMIT_S = 20.0     # one child's wall time, all its shapes
MAX_TIMED_BYTES = 2**30  # a shape whose run needs more memory is not timed (its operation count stands in)
KEEP_S = 600.0          # a timing is kept this long (completed runs in the store improve on it)
OPERATIONS_PER_S = 1e10  # an assumed CPU rate for float32 matrix products, before any shape is known
CHILD_GRACE_S = 1.0


def shape_of(config: RunConfig) -> str:
    """The key of ``config``'s shape: what decides the time of a training step."""
    train = config.train
    return json.dumps([config.cell.name, config.cell.hidden_size, config.cell.options, config.task.name,
                       config.task.options, train.batch_size, train.dtype, train.device], sort_keys=True, default=str)


def operations_per_step(config: RunConfig) -> float | None:
    """Floating-point operations of a training step, evaluations and probes spread over the steps
    (stability.execution.budget.work); None when the task's options cannot be checked."""
    try:
        task = tasks.check(config.task.name, seed=config.train.seed, **config.task.options)
    except (ValueError, TypeError):
        return None
    return budget.work(config, task).per_step(config)


def time_steps(config: RunConfig) -> float | None:
    """Seconds one training step of ``config``'s model takes on this process's CPU (the median of a
    few, after one warm-up step; never on a GPU: Note [Rough time] in stability.sweeps.rough_time);
    None when the model or task cannot be built."""
    import torch

    try:
        return step_seconds(config, torch.device("cpu"), TIMED_STEPS, warm_up=1)
    except Exception:  # noqa: BLE001 - an estimate is optional; the sweep's own checks say what is wrong
        return None


def step_seconds(config: RunConfig, device, steps: int, *, warm_up: int = 1, task_options: dict | None = None,
                 penalty: bool = False, first_over: float | None = None) -> float:
    """The median seconds of ``steps`` training steps of ``config``'s model on ``device`` (forward, backward,
    optimizer step; with the cell's ``penalty`` if asked), after ``warm_up`` steps, each synchronised with the
    device. ``task_options`` replace the config's (a stand-in of a dataset's shapes); a first step over
    ``first_over`` seconds is the answer alone. Raises what building the model or task raises."""
    import torch

    from ..core.devices import synchronize
    from ..training.batches import batch_on, compact_batches
    from ..training.build import build_model, build_optimizer

    dtype = torch.float64 if config.train.dtype == "float64" else torch.float32
    task = tasks.build(config.task.name, seed=config.train.seed, **(task_options or config.task.options))
    model = build_model(config, task).to(device=device, dtype=dtype)
    optimizer = build_optimizer(model, config)
    batches = compact_batches(task, "train", config.train.batch_size)
    seconds = []
    for number in range(steps + warm_up):
        x, y = batch_on(task, next(batches), device, dtype)
        synchronize(device)
        started = time.perf_counter()
        optimizer.zero_grad()
        pred, _ = model(x)
        (task.loss(pred, y) + (model.cell.penalty() if penalty else 0)).backward()
        optimizer.step()
        synchronize(device)
        seconds.append(time.perf_counter() - started)
        if number == 0 and first_over is not None and seconds[0] > first_over:
            return seconds[0]
    timed = sorted(seconds[warm_up:])
    return timed[len(timed) // 2]


# ------------------------------------------------------------------ timing apart (Note [Timing apart])
@dataclass
class _Child:
    process: subprocess.Popen
    shapes: set[str]
    deadline: float
    started: float = field(default_factory=time.monotonic)


_known: dict[str, tuple[float | None, float]] = {}  # shape -> (seconds a step, or None: not timed; when)
_children: list[_Child] = []
_lock = threading.Lock()


def timed_apart(configs: list[RunConfig], parallel: int = 1,
                limit_s: float = TIME_LIMIT_S) -> tuple[dict[str, float | None], set[str]]:
    """``({shape: seconds a step, or None where it could not be timed}, {shapes a child times now})`` for
    the shapes of ``configs``: the unknown ones are handed to a child that times them (Note [Timing
    apart]). Never builds a model here and never waits."""
    shapes = {shape_of(config): config for config in configs}
    with _lock:
        _collect()
        now = time.monotonic()
        for shape in [shape for shape, (_, when) in _known.items() if now - when > KEEP_S]:
            del _known[shape]
        timing = set().union(*(child.shapes for child in _children))
        to_time = []
        for shape, config in shapes.items():
            if shape in _known or shape in timing:
                continue
            if _worth_timing(config, limit_s):
                to_time.append(config)
            else:  # too large to time apart: its operation count stands in
                _known[shape] = (None, now)
        if to_time:
            _children.append(_start_child(to_time, parallel, limit_s))
        timing = set().union(*(child.shapes for child in _children))
        known = {shape: _known[shape][0] for shape in shapes if shape in _known}
        return known, timing & set(shapes)


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
    """A timing child for ``configs`` (cheapest first), their JSON written to its stdin."""
    configs = sorted(configs, key=lambda config: operations_per_step(config) or 0.0)
    count = threads.worker_threads(max(1, parallel))
    env = threads.worker_environment(os.environ, count)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    process = subprocess.Popen([sys.executable, "-m", __name__, str(limit_s), str(count)], cwd=PACKAGE_ROOT,
                               env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, start_new_session=True)
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
    """Kill this process's timing children (its own, by their ``Popen``); returns how many were alive."""
    with _lock:
        alive = [child for child in _children if child.process.poll() is None]
        for child in alive:
            child.process.kill()
        for child in list(_children):
            child.process.wait()
            child.process.stdout.close()
            _children.remove(child)
        return len(alive)


def _main(argv: list[str]) -> int:
    """The timing child: the configs on stdin, one ``{"shape", "seconds"}`` line a shape timed."""
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
    sys.exit(_main(sys.argv[1:]))
