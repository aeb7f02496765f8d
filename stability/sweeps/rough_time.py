"""How long a sweep will take, before Start (Note [Rough time])."""
from __future__ import annotations

import itertools
from typing import Any

from ..admission.shapes import OPERATIONS_PER_S, TIMED_STEPS, operations_per_step, shape_of, time_steps
from ..config import RunConfig
from ..core.gpus import visible_gpus
from ..workers.threads import available_cores
from ..workers.timing import timed_apart
from .spec import SweepSpec, apply
from .workers import check_workers

# Note [Rough time]
#     What a sweep will take, before Start: each run's steps times the seconds a step of its shape
#     (cell, hidden size, task and its options, batch size, dtype: stability.admission.shapes.shape_of) takes.  A shape
#     the store has completed runs of is timed from them (wall time over steps: evaluation, probes and
#     store writes included).  Any other is timed by a few training steps of a freshly built model,
#     times :data:`STEP_OVERHEAD` for what those steps leave out: in this process for the CLI, and in a
#     child process under a hard time limit for the Streamlit server (``apart``), which must never build
#     or train a model itself (stability.workers.timing, Note [Timing apart]).  A shape not timed
#     (being timed apart now, too large to time, or past :data:`MAX_TIMED_SHAPES`) is estimated from its
#     operation count (stability.admission.budget.work: a step, its share of the evaluations and probes)
#     at the rate the timed or remembered shapes of the sweep show, else at an assumed
#     ``OPERATIONS_PER_S``.  ``workers`` runs share the machine's cores (stability.workers.threads),
#     so K workers finish about min(K, cores) times sooner.  The line shown says which basis each shape
#     had.  Rough, and said so: the first steps of a model are slower than its average, a GPU is not a CPU.
#
#     Shapes are timed on a CPU, always: the estimate runs in the Streamlit server, which must never
#     start CUDA (a context there holds GPU memory for the server's whole life, taken from the workers).
#     When the runs will train on a GPU (device cuda, or auto with a GPU visible: stability.core.gpus,
#     which asks nvidia-smi, not CUDA) the basis line says that the CPU timing is an upper bound; a
#     GPU-trained shape the store has completed runs of is timed from them instead, which is the
#     estimate to trust.
STEP_OVERHEAD = 1.3     # evaluation, probes, store writes on top of bare training steps (benchmarks/training.py)
MAX_TIMED_SHAPES = 6    # shapes timed by training; the rest are estimated from their operation count


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


def estimate_sweep_time(spec: SweepSpec, store, workers: int = 1, *, apart: bool = False,
                        requester: object = None) -> dict[str, Any] | None:
    """``{"seconds": ..., "basis": one line, "pending": bool}``: a rough wall time of the whole sweep
    (Note [Rough time]); ``apart``: time unknown shapes in a child process, never here, and answer at
    once (``pending`` while the child times them; ask again for its timings; ``requester``: who waits for
    them, whose newer request replaces this one, stability.workers.timing, Note [One timing child]). None when no shape
    can be estimated."""
    configs, runs_each = _run_configs(spec)
    parallel = max(1, min(check_workers(workers), available_cores()))
    per_step, basis, pending = _seconds_per_step(configs, _history_seconds_per_step(store), parallel, apart,
                                                requester)
    if per_step is None:
        return None
    total = sum(per_step[shape_of(config)] * config.train.steps for config in configs) * runs_each
    words = [f"{count} shape{'s' * (count > 1)} {how}" for how, count in basis.items() if count]
    return {"seconds": total / parallel, "pending": pending,
            "basis": f"{'; '.join(words)}; {parallel} run{'s' * (parallel > 1)} at a time"}


def _seconds_per_step(configs: list[RunConfig], history: dict[str, float], parallel: int,
                      apart: bool, requester: object = None) -> tuple[dict[str, float] | None, dict[str, int], bool]:
    """Seconds a step of each shape, how many shapes had each basis, and whether a child still times some."""
    shapes = {shape_of(config): config for config in configs}
    per_step = {shape: history[shape] for shape in shapes if shape in history}
    counts = {"from completed runs in the store": len(per_step)}
    unknown = [config for shape, config in shapes.items() if shape not in per_step]
    timing = set()
    if apart:
        timed, timing = timed_apart(unknown[:MAX_TIMED_SHAPES], parallel, requester=requester)
        timed = {shape: seconds * STEP_OVERHEAD for shape, seconds in timed.items() if seconds is not None}
    else:
        timed = {}
        for config in unknown[:MAX_TIMED_SHAPES]:
            seconds = time_steps(config)
            if seconds is not None:
                timed[shape_of(config)] = seconds * STEP_OVERHEAD
    per_step.update(timed)
    counts[f"timed by {TIMED_STEPS} training steps on this machine's CPU"
           + (" (the runs train on a GPU: likely faster)" if configs and _on_gpu(configs[0]) else "")] = len(timed)
    counted, rate = _counted(shapes, per_step)
    per_step.update(counted)
    counts[f"from the operation count at {rate:.2g} operations/s "
           f"({'as the others ran' if len(per_step) > len(counted) else 'assumed'})"] = len(counted)
    counts["of them being timed in a separate process…"] = len(timing)
    if set(shapes) - set(per_step):
        return None, counts, bool(timing)
    return per_step, counts, bool(timing)


def _counted(shapes: dict[str, RunConfig], per_step: dict[str, float]) -> tuple[dict[str, float], float]:
    """Seconds a step of each shape not in ``per_step``, from its operation count at the rate of those in
    it (the median), else at :data:`OPERATIONS_PER_S`; and that rate."""
    operations = {shape: operations_per_step(config) for shape, config in shapes.items()}
    rates = sorted(operations[shape] / seconds for shape, seconds in per_step.items() if operations[shape])
    rate = rates[len(rates) // 2] if rates else OPERATIONS_PER_S
    return {shape: count / rate for shape, count in operations.items() if shape not in per_step and count}, rate


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
        times.setdefault(shape_of(run.config), []).append((run.finished_at - run.started_at) / run.step)
    return {shape: sorted(values)[len(values) // 2] for shape, values in times.items()}
