"""Can this run be built here? The checks made before a run is stored.

    config.validate()            # the config alone: names, types, ranges (stability.config)
    check_buildable(config)      # what only the builders know: option values, memory, the device
    check_room(config, store)    # its checkpoints fit on the disk beside the store, with a reserve

Nothing is downloaded or trained, and nothing large is allocated: a run that
passes can still fail later only on its data (a dataset not cached) or on a
constant factor the memory estimate leaves out (:mod:`stability.admission.budget`).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections import OrderedDict

from .. import cells, tasks
from ..config import ConfigError, RunConfig
from ..core import devices
from ..core.devices import resolve_device
from ..core.errors import one_line
from . import budget

log = logging.getLogger(__name__)


def check_buildable(config: RunConfig, *, build: bool = True) -> None:
    """Check what only the task and cell builders know, before a run is stored:

    - every task option value (``seq_len`` 0 or ``"abc"``, an unsafe UCR dataset name, ...),
      by ``tasks.check``, which builds a generated task (it draws nothing yet) and runs a
      real-data task's checks up to where it would read its files;
    - ``epochs`` needs a fixed training set;
    - the run fits in memory (:mod:`stability.admission.budget`: an estimate from the config,
      made before the cell is built);
    - the cell's option values (an odd hidden size for vprnn, r > sigma_star for spectral,
      ...; the input width never matters, so it is built with 1), by building it: once per process for
      what changes a build, and not at all past a cost (:func:`check_cell`, Note [Checks that build]);
      ``build`` False: only a build made before is consulted (a sweep's check past its few builds);
    - a forced device exists, it has the run's dtype (no float64 on MPS), and it has what the cell
      needs that not every device has (``device_needs``: complex64 for KRU and uRNN, which MPS has
      from macOS 14 only; :mod:`stability.core.devices`, Note [Device facts]).

    Raises :class:`~stability.config.ConfigError` (one line) on the first problem, whatever a class's own
    code raised (its traceback goes to the log).
    """
    try:
        task = tasks.check(config.task.name, seed=config.train.seed, **config.task.options)
    except ValueError as error:
        raise ConfigError(f"task {config.task.name!r}: {error}") from None
    except Exception as error:  # noqa: BLE001 - a class's own code: one line here, the traceback in the log
        log.exception("checking task %r", config.task.name)
        raise ConfigError(f"task {config.task.name!r}: {one_line(error, named=True)}") from None
    if task is not None and task.fresh_training_data:
        config.train.with_epochs_as_steps(None)  # ConfigError when epochs is set
    device = resolve_device(config.train.device)
    devices.check_dtype(device, config.train.dtype)
    budget.check(config, task, device)
    check_cell(config, device, build=build)


# Note [Checks that build]
# -------------------------
# A cell's own rules (vprnn's even hidden size, spectral's r <= sigma_star, ...) are known only by building it,
# and the checks run in the server: the Train and Race forms at every change of any field, a sweep's check for
# every distinct model of its grid (issue 33: 22 builds at hidden 2048 took 22.7 s; the forms built the cell
# again at every change of seed, lr or steps). So a build's verdict is kept, once per process, under what
# changes a build (build_key: the cell's class, name, hidden size and options; not the seed, lr, steps or
# task); a cell whose build could cost more than MAX_CHECK_BUILD_WORK operations or MAX_CHECK_BUILD_BYTES of
# weights (budget.build_cost, counted from the sizes before building) is not built by a check at all, and a
# sweep's check builds at most a few models (stability.sweeps.spec, Note [Bounded checks]). What a check does
# not build is built by its run, which ends `failed` in one line if the cell refuses its options. Whatever
# the build raises is one line (ConfigError) and its traceback goes to the log.
MAX_CHECK_BUILD_WORK = 2e10       # operations (about 2 s of a core)
MAX_CHECK_BUILD_BYTES = 2**30     # the cell's float32 weights
KEPT_VERDICTS = 1024
_verdicts: OrderedDict[tuple, str | None] = OrderedDict()  # build key -> the cell's one-line problem, or None
_verdicts_lock = threading.Lock()


def build_key(config: RunConfig) -> tuple:
    """What a check's build of the cell depends on (Note [Checks that build])."""
    cell = config.cell
    return (cells.get_class(cell.name), cell.name, cell.hidden_size,
            json.dumps(cell.options, sort_keys=True, default=repr))


def cell_checked(config: RunConfig) -> bool:
    """Whether this process has built ``config``'s cell to check it (its verdict is known)."""
    with _verdicts_lock:
        return build_key(config) in _verdicts


def check_cell(config: RunConfig, device, *, build: bool = True) -> bool:
    """ConfigError (one line) when ``config``'s cell refuses its options or ``device`` lacks what it needs;
    True when the cell's own checks ran (now or before), False when it was not built here (``build``
    False, or past the cost: Note [Checks that build])."""
    key, cls = build_key(config), cells.get_class(config.cell.name)
    with _verdicts_lock:
        known = key in _verdicts
        problem = _verdicts.get(key)
    ran = known or (build and _cheap_to_build(config))
    if not known and ran:
        problem, lasting = _build_verdict(config)
        with _verdicts_lock:
            if lasting:
                _verdicts[key] = problem
            while len(_verdicts) > KEPT_VERDICTS:
                _verdicts.popitem(last=False)
    if problem:
        raise ConfigError(problem)
    check_device_needs(config.cell.name, cls, device)
    return ran


def _cheap_to_build(config: RunConfig) -> bool:
    operations, weight_bytes = budget.build_cost(config)
    return operations <= MAX_CHECK_BUILD_WORK and weight_bytes <= MAX_CHECK_BUILD_BYTES


def _build_verdict(config: RunConfig) -> tuple[str | None, bool]:
    """Build ``config``'s cell on the host, as a run builds it before moving it: its problem in one line (None
    when it builds), and whether that verdict lasts (a MemoryError says more about this moment than the cell)."""
    name = config.cell.name
    try:
        with devices.on_host():
            cells.build(name, 1, config.cell.hidden_size, **config.cell.options)
    except ValueError as error:
        return f"cell {name!r}: {error}", True
    except Exception as error:  # noqa: BLE001 - a class's own code: one line here, the traceback in the log
        log.exception("building cell %r to check it", name)
        return f"cell {name!r}: {one_line(error, named=True)}", not isinstance(error, MemoryError)
    return None, True


def check_without_building(config: RunConfig) -> None:
    """:func:`check_buildable` without building the cell: a build made before is consulted, else the cell's
    own checks are left to its run (a sweep's check past its few builds, Note [Bounded checks])."""
    check_buildable(config, build=False)


def check_device_needs(name: str, cell, device) -> None:
    """ConfigError (one line naming the op) when ``device`` lacks what ``cell`` (a cell or its class)
    needs (its class's ``device_needs``, :class:`stability.cells.RecurrentCell`)."""
    needs = getattr(cell, "device_needs", {})
    for need, why in devices.missing_needs(device, needs):
        raise ConfigError(f"cell {name!r} cannot train on {devices.device_facts(device).name}: it needs {need} for {needs[need]}, "
                          f"and {why}; use device cpu")


DISK_RESERVE_ENV = "STABILITY_DISK_RESERVE"
DISK_RESERVE = 256 * 2**20  # bytes kept free beside a new run's checkpoints (Note [Room for checkpoints])


def check_room(config: RunConfig, store) -> None:
    """ConfigError (one line) when a new run of ``config`` could not keep its checkpoint on the disk of
    ``store``'s checkpoint folder with :func:`disk_reserve` left free (Note [Room for checkpoints]).

    Note [Room for checkpoints]
    ---------------------------
    A run writes its checkpoint (weights and optimizer state: budget.checkpoint_bytes) every few minutes and
    at its end, each time a whole new file beside the old one before it replaces it, so it needs twice that
    while it trains; a full disk then stops every run and the store's own writes. So a new run is refused
    when the disk holding the checkpoints has less than twice its checkpoint free plus a reserve
    (``$STABILITY_DISK_RESERVE`` bytes, default :data:`DISK_RESERVE`: the store's rows, logs, the system).
    A completed run drops its checkpoint (stability.execution.lifecycle, Note [Checkpoints kept]); the
    free space is read when the run is asked for (shutil.disk_usage), by every start: the CLI's train, the
    queue's start (the pages, ``--background``), a preset, ``train_run`` and a sweep's start; by the queue's
    resume (``scheduler.resume_run``) and the CLI's own (``scheduler.check_resume_room``), and by a sweep's worker before each run it trains (Note [A full disk
    ends the sweep] in stability/sweeps/workers.py)."""
    folder = store.private_subfolder("checkpoints")
    needed, reserve = 2 * budget.checkpoint_bytes(config), disk_reserve()
    free = shutil.disk_usage(folder).free
    if free < needed + reserve:
        raise ConfigError(f"not enough free disk for this run: its checkpoints need ~{budget.format_bytes(needed)} "
                          "(weights and optimizer state, twice while one replaces the other) and "
                          f"{budget.format_bytes(reserve)} is kept free (${DISK_RESERVE_ENV}), but {folder} has "
                          f"{budget.format_bytes(free)} free: free some space there (deleting finished runs "
                          "removes their checkpoints) or choose a smaller hidden_size")


def disk_reserve() -> int:
    """Bytes a new run leaves free beside its checkpoints: ``$STABILITY_DISK_RESERVE`` (bytes), else
    :data:`DISK_RESERVE`; ConfigError (one line) for a value that is no count of bytes."""
    text = os.environ.get(DISK_RESERVE_ENV, "").strip()
    if not text:
        return DISK_RESERVE
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{DISK_RESERVE_ENV} must be a number of bytes >= 0; got {text!r}")
    return value
