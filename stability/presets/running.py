"""Running a preset: its runs trained one after another in this process, or its sweep by one in-process worker.

    presets.estimate_preset_time(preset, store, "classroom")   # {"seconds": ..., "basis": ...}: a rough time here
    run_ids = presets.run(preset, store, scale="classroom", progress=print)

A preset's runs are ordinary runs of the store, each claimed and trained one after another in
this process by the run lifecycle (:mod:`stability.execution.lifecycle`: Ctrl-C stops the run in
training, its rows and checkpoint kept, and ends the preset); a sweep preset is an ordinary sweep
(:mod:`stability.sweeps`) whose one worker is this process. Nothing about
a preset lives in code: the shipped ones are the files of ``stability/presets/``,
and a copy of one, edited, is run by its path.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from ..admission.preflight import check_buildable
from ..admission.shapes import TIMED_STEPS
from ..config import ConfigError, RunConfig
from ..config.fields import setting_label
from .format import Preset
from .vocabulary import PresetError, one_line


def run(preset: Preset, store, scale: str = "classroom", progress: Callable[[str], None] | None = None,
        override: dict | None = None, step_progress: Callable[[RunConfig], Any] | None = None) -> list[int]:
    """Train the preset's runs at ``scale`` one after another in this process; return their ids
    (in the preset's order; a sweep's in trial order). ``progress`` receives one line per run
    started and ended; ``step_progress(config)`` may return the trainer's ``progress`` callback for
    that run (its ``finish()``, if it has one, is called when the run ends; a sweep's runs train
    without one); ``override`` is a partial config laid over every run last (a test's handful of
    steps). A run that diverges or fails keeps its status and rows, its end said in one line (a
    failure with its error, ``"ExceptionType: first line"``); the others still run. Ctrl-C and SIGTERM
    stop the run in training and are raised again."""
    from ..execution import lifecycle

    say = progress or (lambda line: None)
    if preset.is_sweep:
        return _run_sweep(preset, store, scale, say, override)
    configs = preset.configs(scale, override)
    for name, config in configs.items():
        try:
            check_buildable(config)
        except ConfigError as error:
            raise PresetError(f"preset {preset.name!r} run {name!r} ({scale}): {one_line(error)}") from None
    run_ids = []
    for index, (name, config) in enumerate(configs.items(), 1):
        started, callback, run = time.time(), None, None
        try:
            with lifecycle.claimed(store, lambda: lifecycle.create_claimed(store, config)) as run:
                run_ids.append(run.run_id)
                say(f"[{index}/{len(configs)}] run {run.run_id} {name}: {config.cell.name} on "
                    f"{config.task.name}, {config.train.steps} steps")
                callback = step_progress(config) if step_progress is not None else None
                run.train(config, progress=callback)
        except Exception:
            if run is None or run.status is None:  # nothing stored (the claim failed), or not settled: it ends
                raise
            # settled failed by the lifecycle, with its one-line error; the preset goes on with its next run
        finally:
            if hasattr(callback, "finish"):
                callback.finish()
        ending = f"{run.status} ({run.error})" if run.error else run.status
        say(f"[{index}/{len(configs)}] run {run.run_id} {name}: {ending} in {time.time() - started:.1f} s")
    return run_ids


def _run_sweep(preset: Preset, store, scale: str, say, override: dict | None) -> list[int]:
    """The sweep of a sweep preset, stored as any sweep and trained here by one in-process worker
    (``sweeps.work``), so the Sweep page and ``sweeps show`` see it as they see any other."""
    from .. import sweeps
    from ..execution.signals import Terminated

    spec = preset.sweep_spec(scale, override, check=True)
    sweep_id = sweeps.store_sweep(store, spec, workers=1, name=preset.name)
    say(f"sweep {sweep_id}: {spec.describe()}")
    for index in range(1, spec.size() + 1):
        started = time.time()
        try:
            if not sweeps.work(store, sweep_id, max_runs=1):
                break
        except (KeyboardInterrupt, Terminated):  # its run is stopped; the sweep as stop_sweep leaves it
            sweeps.workers.stop_after_interrupt(store, sweep_id)
            raise
        latest = max(store.records(sweep_id=sweep_id), key=lambda record: record.id)
        say(f"[{index}/{spec.size()}] run {latest.id} {setting_label(dict(latest.params))} "
            f"seed={latest.config.train.seed if latest.config else '?'}: {latest.status} "
            f"in {time.time() - started:.1f} s")
    return sorted(record.id for record in store.records(sweep_id=sweep_id))


def estimate_preset_time(preset: Preset, store, scale: str = "classroom") -> dict[str, Any] | None:
    """``{"seconds": ..., "basis": one line}``: a rough wall time of the preset's runs at ``scale``
    on this machine, as :func:`stability.sweeps.estimate_sweep_time` times a sweep (Note [Rough time] there:
    completed runs of the same shape in ``store``, else a few timed training steps); None when no
    run could be timed."""
    from .. import sweeps

    if preset.is_sweep:
        return sweeps.estimate_sweep_time(preset.sweep_spec(scale), store)
    seconds, remembered = 0.0, 0
    configs = preset.configs(scale)
    for config in configs.values():
        one = sweeps.estimate_sweep_time(sweeps.SweepSpec(config), store)
        if one is None:
            return None
        seconds += one["seconds"]
        remembered += "completed runs" in one["basis"]
    timed = len(configs) - remembered
    basis = [f"{remembered} from completed runs in the store"] * bool(remembered) + \
        [f"{timed} timed by {TIMED_STEPS} training steps here"] * bool(timed)
    return {"seconds": seconds, "basis": f"{len(configs)} runs one after another: {', '.join(basis)}"}
