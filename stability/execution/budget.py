"""Will a run fit in memory? An estimate from the config alone, made before anything is built.

    parameters, activations = estimate(config, task)   # bytes; task None where only data can tell
    check(config, task, device)                         # ConfigError: one line with the estimate

The estimate is a lower bound, so a run it refuses cannot fit, and one it
lets through may still be too large only by the constant factors it leaves
out (allocator slack, evaluation batches, the fixed data sets):

- parameters: every cell builds its recurrent matrix W (hidden x hidden) once
  per forward pass and keeps its gradient (complex cells twice as much; not
  counted). Dense cells hold their weights as parameters, with the gradient
  and the optimizer's state beside them: LSTM four blocks, GRU three.
  The input and output layers are counted the same way.
- activations of one training step: the inputs, the hidden states kept for
  backward (one per gate block and step), the outputs; plus the float64
  probe batch of ‖∂L/∂h_t‖.
"""
from __future__ import annotations

import os

from ..config import ConfigError, RunConfig

# Cells whose recurrent weights are dense parameters, with their number of hidden x hidden blocks.
# Every other cell (structured or registered from outside) counts one materialised W and its gradient.
DENSE_BLOCKS = {"rnn": 1, "irnn": 1, "fastrnn": 1, "exponential": 1, "lstm": 4, "gru": 3}
OPTIMIZER_SLOTS = {"adam": 2, "sgd": 0, "rmsprop": 1, "rmsprop_tf": 1, "rmsprop_keras": 1}
DTYPE_BYTES = {"float32": 4, "float64": 8}


def estimate(config: RunConfig, task=None) -> tuple[int, int]:
    """Bytes of (parameters with gradients and optimizer state, activations of one training step).

    ``task`` is the built task (sizes and length) or None where they are not known before the data
    is loaded; then one input, one output and one step stand in for them (still a lower bound).
    """
    hidden = config.cell.hidden_size
    width = DTYPE_BYTES.get(config.train.dtype, 4)
    inputs = getattr(task, "input_size", None) or 1
    outputs = getattr(task, "output_size", None) or 1
    steps = getattr(task, "seq_len", None) or 1
    output_steps = steps if getattr(task, "target_mode", "last") == "every" else 1

    blocks = DENSE_BLOCKS.get(config.cell.name)
    copies = 2 + OPTIMIZER_SLOTS.get(config.train.optimizer, 0)  # value, gradient, optimizer state
    if blocks is None:
        blocks, layers = 1, 2 * hidden * hidden  # W built from fewer parameters, and its gradient
    else:
        layers = copies * blocks * hidden * hidden
    layers += copies * (blocks * hidden * (inputs + 1) + (hidden + 1) * outputs)
    parameters = layers * width

    batch = config.train.batch_size
    per_example = steps * (inputs + blocks * hidden) + output_steps * outputs
    probe = config.train.probe_examples * steps * blocks * hidden * 8  # float64
    activations = batch * per_example * width + probe
    return parameters, activations


def memory_bytes(device) -> int:
    """The memory a run on ``device`` (a torch.device) can use at most: the GPU's for cuda, else the machine's."""
    if getattr(device, "type", str(device)) == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(device).total_memory)
    return physical_memory()


def physical_memory() -> int:
    """This machine's physical memory in bytes."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: psutil would know; assume no limit
        return 2**63


def check(config: RunConfig, task, device) -> None:
    """ConfigError (one line, with the estimate) when the run cannot fit in ``device``'s memory.

    The model is built on the CPU before it moves, so its parameters must also fit in the
    machine's memory.
    """
    parameters, activations = estimate(config, task)
    limit = memory_bytes(device)
    host = physical_memory()
    where = "this GPU" if limit != host else "this machine"
    if parameters > host or parameters > limit:
        limit, where = (host, "this machine") if parameters > host else (limit, where)
        raise ConfigError(f"hidden_size {config.cell.hidden_size} of cell {config.cell.name!r} needs "
                          f"~{_bytes(parameters)} of parameters, gradients and optimizer state; "
                          f"{where} has {_bytes(limit)}: choose a smaller hidden_size")
    if parameters + activations > limit:
        steps = getattr(task, "seq_len", None)
        length = f"{steps} steps x " if steps else ""
        raise ConfigError(f"one training step needs ~{_bytes(parameters + activations)} "
                          f"(~{_bytes(activations)} of activations for batch_size {config.train.batch_size} x "
                          f"{length}hidden_size {config.cell.hidden_size}); {where} has {_bytes(limit)}: "
                          "lower batch_size, seq_len or hidden_size")


def _bytes(count: int) -> str:
    """``'24 GiB'`` for sizes a machine has, ``'8e+18 bytes'`` beyond a TiB, ``'~10^400 bytes'`` beyond floats."""
    if count < 2**40:
        for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if count >= size:
                return f"{count / size:.3g} {unit}"
        return f"{count} bytes"
    if count < 10**300:
        return f"{float(count):.2g} bytes"
    return f"10^{len(str(count)) - 1} bytes"
