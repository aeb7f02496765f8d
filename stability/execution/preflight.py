"""Can this run be built here? The checks made before a run is stored.

    config.validate()            # the config alone: names, types, ranges (stability.config)
    check_buildable(config)      # what only the builders know: option values, memory, the device

Nothing is downloaded or trained, and nothing large is allocated: a run that
passes can still fail later only on its data (a dataset not cached) or on a
constant factor the memory estimate leaves out (:mod:`stability.execution.budget`).
"""
from __future__ import annotations

from .. import cells, tasks
from ..config import ConfigError, RunConfig
from ..core import devices
from ..core.devices import resolve_device
from . import budget


def check_buildable(config: RunConfig) -> None:
    """Check what only the task and cell builders know, before a run is stored:

    - every task option value (``seq_len`` 0 or ``"abc"``, an unsafe UCR dataset name, ...),
      by ``tasks.check``, which builds a generated task (it draws nothing yet) and runs a
      real-data task's checks up to where it would read its files;
    - ``epochs`` needs a fixed training set;
    - the run fits in memory (:mod:`stability.execution.budget`: an estimate from the config,
      made before the cell is built);
    - the cell's option values (an odd hidden size for vprnn, r > sigma_star for spectral,
      ...; the input width never matters, so it is built with 1);
    - a forced device exists, it has the run's dtype (no float64 on MPS), and it has what the cell
      needs that not every device has (``device_needs``: complex64 for KRU and uRNN, which MPS has
      from macOS 14 only; :mod:`stability.core.devices`, Note [Device facts]).

    Raises :class:`~stability.config.ConfigError` (one line) on the first problem.
    """
    try:
        task = tasks.check(config.task.name, seed=config.train.seed, **config.task.options)
    except ValueError as error:
        raise ConfigError(f"task {config.task.name!r}: {error}") from None
    if task is not None and task.fresh_training_data:
        config.train.with_epochs_as_steps(None)  # ConfigError when epochs is set
    device = resolve_device(config.train.device)
    devices.check_dtype(device, config.train.dtype)
    budget.check(config, task, device)
    try:
        with devices.on_host():  # built on the CPU, as a run builds it before moving it to its device
            cell = cells.build(config.cell.name, 1, config.cell.hidden_size, **config.cell.options)
    except ValueError as error:
        raise ConfigError(f"cell {config.cell.name!r}: {error}") from None
    check_device_needs(config.cell.name, cell, device)


def check_device_needs(name: str, cell, device) -> None:
    """ConfigError (one line naming the op) when ``device`` lacks what ``cell`` needs (its class's
    ``device_needs``, :class:`stability.cells.RecurrentCell`)."""
    needs = getattr(cell, "device_needs", {})
    for need, why in devices.missing_needs(device, needs):
        raise ConfigError(f"cell {name!r} cannot train on {devices.device_facts(device).name}: it needs {need} for {needs[need]}, "
                          f"and {why}; use device cpu")
