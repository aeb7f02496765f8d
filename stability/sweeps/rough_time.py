"""How long a sweep will take, before Start (Note [Rough time])."""
from __future__ import annotations

import itertools
import json
import time
from typing import Any

from .. import tasks
from ..config import RunConfig
from ..core.gpus import visible_gpus
from ..execution.threads import available_cores
from ..training.batches import batch_on, compact_batches
from ..training.build import build_model, build_optimizer
from .spec import SweepSpec, apply
from .workers import check_workers

# Note [Rough time]
#     What a sweep will take, before Start: each run's steps times the seconds a step of its shape
#     (cell, hidden size, task and its options, batch size, dtype) takes.  A shape the store has
#     completed runs of is timed from them (wall time over steps: evaluation, probes and store
#     writes included); any other is timed here, a few training steps of a freshly built model,
#     times :data:`STEP_OVERHEAD` for what those steps leave out.  ``workers`` runs share the
#     machine's cores (stability.execution.threads), so K workers finish about min(K, cores) times sooner.
#     Rough, and said so: the first steps of a model are slower than its average, a GPU is not a CPU.
#
#     Shapes are timed on this process's CPU, always: the estimate runs in the Streamlit server,
#     which must never start CUDA (a context there holds GPU memory for the server's whole life,
#     taken from the workers).  When the runs will train on a GPU (device cuda, or auto with a GPU
#     visible: stability.core.gpus, which asks nvidia-smi, not CUDA) the basis line says that the
#     CPU timing is an upper bound; a GPU-trained shape the store has completed runs of is timed
#     from them instead, which is the estimate to trust.
STEP_OVERHEAD = 1.3     # evaluation, probes, store writes on top of bare training steps (benchmarks/training.py)
TIMED_STEPS = 3
MAX_TIMED_SHAPES = 6    # shapes timed by training; the rest take the mean of those


def _shape(config: RunConfig) -> str:
    train = config.train
    return json.dumps([config.cell.name, config.cell.hidden_size, config.cell.options, config.task.name,
                       config.task.options, train.batch_size, train.dtype, train.device], sort_keys=True, default=str)


def _run_configs(spec: SweepSpec) -> tuple[list[RunConfig], float]:
    """One config per setting the sweep can train (a sampled range at its base value), and the
    number of runs each stands for."""
    if spec.sampler == "grid":
        settings = spec.settings()
    else:  # random/tpe: every listed value equally likely; a range at the base config's value
        listed = [vary for vary in spec.vary if not vary.continuous]
        settings = [dict(zip((v.field for v in listed), values))
                    for values in itertools.product(*(v.values for v in listed))] or [{}]
    configs = [apply(spec.base, setting) for setting in settings]
    runs_each = spec.size() / max(1, len(configs))
    return configs, runs_each


def estimate(spec: SweepSpec, store, workers: int = 1) -> dict[str, Any] | None:
    """``{"seconds": ..., "basis": one line}``: a rough wall time of the whole sweep (Note [Rough
    time]); None when no shape could be timed."""

    configs, runs_each = _run_configs(spec)
    history = _history_seconds_per_step(store)
    per_step, timed, remembered = {}, 0, 0
    for config in configs:
        shape = _shape(config)
        if shape in per_step:
            continue
        if shape in history:
            per_step[shape] = history[shape]
            remembered += 1
        elif timed < MAX_TIMED_SHAPES:
            seconds = _time_steps(config)
            if seconds is not None:
                per_step[shape] = seconds * STEP_OVERHEAD
                timed += 1
    if not per_step:
        return None
    fallback = sum(per_step.values()) / len(per_step)
    total = sum(per_step.get(_shape(config), fallback) * config.train.steps for config in configs) * runs_each
    parallel = max(1, min(check_workers(workers), available_cores()))
    basis = []
    if remembered:
        basis.append(f"{remembered} shape{'s' * (remembered > 1)} from completed runs in the store")
    if timed:
        basis.append(f"{timed} timed by {TIMED_STEPS} training steps on this machine's CPU"
                     + (" (the runs train on a GPU: likely faster)" if _on_gpu(spec.base) else ""))
    return {"seconds": total / parallel,
            "basis": f"{' and '.join(basis)}; {parallel} run{'s' * (parallel > 1)} at a time"}


def _on_gpu(config: RunConfig) -> bool:
    """Whether ``config``'s runs will train on a GPU, judged without starting CUDA here."""
    device = config.train.device
    return device == "cuda" or (device == "auto" and bool(visible_gpus()))


def _history_seconds_per_step(store) -> dict[str, float]:
    """Median wall seconds a step of each shape took in the store's completed runs."""
    times: dict[str, list[float]] = {}
    for run in store.records(("completed",)):
        if run.config is None or not run.step or not run.started_at or not run.finished_at:
            continue
        times.setdefault(_shape(run.config), []).append((run.finished_at - run.started_at) / run.step)
    return {shape: sorted(values)[len(values) // 2] for shape, values in times.items()}


def _time_steps(config: RunConfig) -> float | None:
    """Seconds one training step of ``config``'s model takes on this process's CPU (the median of a
    few, after one warm-up step; never on a GPU: Note [Rough time]); None when the model or task
    cannot be built."""
    import torch

    try:
        device = torch.device("cpu")
        dtype = torch.float64 if config.train.dtype == "float64" else torch.float32
        task = tasks.build(config.task.name, seed=config.train.seed, **config.task.options)
        model = build_model(config, task).to(device=device, dtype=dtype)
        optimizer = build_optimizer(model, config)
        batches = compact_batches(task, "train", config.train.batch_size)
        seconds = []
        for _ in range(TIMED_STEPS + 1):
            x, y = batch_on(task, next(batches), device, dtype)
            started = time.perf_counter()
            optimizer.zero_grad()
            pred, _ = model(x)
            task.loss(pred, y).backward()
            optimizer.step()
            seconds.append(time.perf_counter() - started)
    except Exception:  # noqa: BLE001 - an estimate is optional; the sweep's own checks say what is wrong
        return None
    return sorted(seconds[1:])[len(seconds[1:]) // 2]
