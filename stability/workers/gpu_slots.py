"""Which GPU a worker trains on: one per run slot and per sweep worker, round robin over the visible GPUs.

    gpu_for(slot_index, visible)                  # visible[slot_index % len(visible)]
    run_environment(store, run_id, limit)         # {"CUDA_VISIBLE_DEVICES": "1"} for a run's worker
    sweep_worker_environments(workers, gpus)      # the same for each of a launch's sweep workers

A worker sees one GPU (``CUDA_VISIBLE_DEVICES`` in the environment it is spawned with, so it is set
before torch starts CUDA), and trains on it as ``cuda:0``.  Workers are spread over the GPUs this
process may see (:func:`stability.core.gpus.visible_gpus`: its own ``CUDA_VISIBLE_DEVICES``, else
every GPU ``nvidia-smi`` lists), round robin; with more workers than GPUs several share one.

Run slots: ``STABILITY_MAX_RUNS`` slots, numbered 0..limit-1 (:mod:`stability.workers.scheduler`).
A run's worker takes the lowest slot that no active run of this machine holds, and the GPU
:func:`gpu_for` gives that slot; the slot is recorded in ``<store home>/logs/run-<id>.gpu`` so that
the next launch knows it is taken.  So with two slots on two GPUs, a run that starts after the
first of two running runs ended lands on the GPU that run left, not beside the other.

Sweep workers: worker ``i`` of a launch (``start``, ``resume``, ``sweeps join``) gets
``gpu_for(i, gpus)``, ``gpus`` the ones asked for (``sweeps join --gpus``) or the visible ones.

Without a visible GPU nothing is added: the worker inherits this process's environment, as before.
"""
from __future__ import annotations

import json
import socket
from pathlib import Path

from ..core import gpus as gpu_facts

VISIBLE_ENV = gpu_facts.VISIBLE_ENV


def gpu_for(slot_index: int, visible: list[str]) -> str:
    """The GPU of slot (or sweep worker) ``slot_index``: round robin over ``visible``."""
    if not visible:
        raise ValueError("no visible GPU to assign")
    if isinstance(slot_index, bool) or not isinstance(slot_index, int) or slot_index < 0:
        raise ValueError(f"slot_index must be an integer >= 0; got {slot_index!r}")
    return str(visible[slot_index % len(visible)])


def free_slot(held: set[int], limit: int) -> int:
    """The lowest of the slots 0..limit-1 not in ``held`` (past them when every one is held: a
    limit lowered while runs were busy)."""
    return next((slot for slot in range(max(1, limit)) if slot not in held), max(held, default=-1) + 1)


def run_environment(store, run_id: int, limit: int, visible: list[str] | None = None) -> dict[str, str]:
    """``{CUDA_VISIBLE_DEVICES: gpu}`` for the worker about to train ``run_id``, its slot recorded;
    ``{}`` without a visible GPU (``visible``: default :func:`stability.core.gpus.visible_gpus`)."""
    visible = gpu_facts.visible_gpus() if visible is None else visible
    if not visible:
        return {}
    slot = free_slot(_held_slots(store, run_id), limit)
    gpu = gpu_for(slot, visible)
    store.private_subfolder("logs")  # made 0700 and this user's, as the worker's log beside it
    path = _slot_path(store, run_id)
    path.write_text(json.dumps({"slot": slot, "gpu": gpu}))
    return {VISIBLE_ENV: gpu}


def run_slot(store, run_id: int) -> dict | None:
    """``{"slot": ..., "gpu": ...}`` recorded for ``run_id``'s last launch, or None."""
    try:
        recorded = json.loads(_slot_path(store, run_id).read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def sweep_worker_environments(workers: int, gpus: list[str] | None = None) -> list[dict[str, str]]:
    """The environment entries of ``workers`` sweep workers: worker ``i`` gets
    ``{CUDA_VISIBLE_DEVICES: gpu_for(i, gpus)}`` (``gpus``: default the visible ones); ``{}`` each
    without a GPU."""
    gpus = gpu_facts.visible_gpus() if gpus is None else gpus
    return [{VISIBLE_ENV: gpu_for(index, gpus)} if gpus else {} for index in range(workers)]


def _held_slots(store, launching: int) -> set[int]:
    """The slots of this machine's active runs other than ``launching`` that a worker holds (a pid)."""
    here, held = socket.gethostname(), set()
    for run in store.active_runs():
        if run.id == launching or run.pid is None or run.host not in (None, here):
            continue
        recorded = run_slot(store, run.id)
        if recorded is not None and isinstance(recorded.get("slot"), int):
            held.add(recorded["slot"])
    return held


def _slot_path(store, run_id: int) -> Path:
    return Path(store.home) / "logs" / f"run-{int(run_id)}.gpu"
