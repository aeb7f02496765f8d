"""Will a run fit in memory? An estimate from the config alone, made before anything is built.

    footprint(config, task)                   # Footprint: bytes by what holds them, and the peak
    check(config, task, device)               # ConfigError: one line with the estimate
    check(config, task, device, gpus=[GpuMemory("0", "a 16 GB card", 16 * 2**30, 15 * 2**30)])

``task`` is the built task, or None where only its data could tell its sizes: then a task class
that declares them (PTB: ``input_size = output_size = 10_000`` words) gives them, with the
``seq_len`` of the config or the task's default; else one input, one output and one step stand in.

The estimate is a lower bound, so a run it refuses cannot fit, and one it lets through may still
be too large only by the constant factors it leaves out (allocator slack, cuDNN workspaces, the
kernels' own temporaries).  What it counts, in the training dtype unless said:

- parameters: every cell builds its recurrent matrix W (hidden x hidden) once per forward pass
  and keeps its gradient (complex cells twice as much; not counted). Dense cells hold their
  weights as parameters, with the gradient and the optimizer's state beside them: LSTM four
  blocks, GRU three. The input and output layers are counted the same way.
- the probe, for the whole run: a float64 copy of the model's weights and the float64 probe
  batch (``probe_examples`` x T x inputs: 768 MB of one-hot PTB words).
- one training step: the batch (built on the device), the hidden states kept for backward (one
  per gate block and step), the outputs and, for a classification loss, its log-probabilities
  (cross-entropy materialises them: B x T x vocab).
- one evaluation batch (``min(256, eval_examples)`` examples, under inference mode): inputs,
  states, outputs and log-probabilities at once: 9 GB for PTB words at T = 300.
- the evaluation's fixed training sample (``Footprint.evaluation_set``), held on the host for the
  whole run: ``eval_examples`` examples (at most ``train_size`` where the task has a fixed training
  set), encoded as float32 inputs, T x inputs each (stability.training.evaluation.Evaluator draws
  it for the train/held-out gap). A real data set's is bounded by its files, unknown before they are
  read, and not counted; nor is a stateful task's (PTB's windows are views of its corpus).
- a generated task's fixed sets (``Footprint.data_sets``), drawn on first use and held on the host
  for the whole run: ``val_size`` + ``test_size`` (+ ``train_size`` where it has a fixed training
  pool) examples, in the compact arrays the task keeps (a real data set's are bounded by its files).
- the probe's float64 forward and backward: its states and outputs.
- depth within a step: the ``mlp`` cell's ``layers`` (each with its own weights and its own
  kept activations) and a VPRNN's or SGORNN's ``k`` rotation sublayers (each keeps its output for
  backward) multiply the states of a step (:func:`step_depth`).

Training, evaluation and the probe's pass take turns, so the peak is the persistent part
(parameters, probe) plus the largest of the three; the evaluation's fixed sample is on the host
beside them (on a GPU run it is checked against the machine's memory alone).

Work (:func:`work`): the floating-point operations of a training step, of one evaluation and of one
probe, counted from the same sizes, for a rough time when no step has been timed
(stability.sweeps.rough_time, Note [Rough time]). A matrix-vector product with an m x n matrix is
2mn operations; a backward pass costs twice its forward (it multiplies by each weight twice: for the
input's gradient and for the weight's). Per example and time step a cell multiplies its state by W
(``blocks`` x hidden x hidden, ``step_depth`` times) and its input by U; the output layer once per
output step (the matrix products only: biases and nonlinearities are a lower order). An evaluation is a forward pass over ``eval_examples`` examples of the fixed training
sample and as many of the validation set; a probe a float64 forward and backward over
``probe_examples``, and the singular values of W (about 10 hidden³, Golub & Van Loan §8.6).

On a GPU the limit is the *free* memory of the visible GPU with the most of it (what other
processes leave; :mod:`stability.core.gpus`, read through ``nvidia-smi`` so that this process
starts no CUDA context of its own), less :data:`CUDA_CONTEXT_BYTES` for the worker's own context.
Where the GPUs' memory cannot be read (no ``nvidia-smi``), only the machine's memory is checked.
Elsewhere the limit is the machine's physical memory; the model is built on the CPU before it
moves, so its parameters must fit there too.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from .. import cells, tasks
from ..config import ConfigError, RunConfig
from ..core import gpus as gpu_facts

# Cells whose recurrent weights are dense parameters, with their number of hidden x hidden blocks.
# Every other cell (structured or registered from outside) counts one materialised W and its gradient.
DENSE_BLOCKS = {"rnn": 1, "irnn": 1, "fastrnn": 1, "exponential": 1, "lstm": 4, "gru": 3}
OPTIMIZER_SLOTS = {"adam": 2, "sgd": 0, "rmsprop": 1, "rmsprop_tf": 1, "rmsprop_keras": 1}
DTYPE_BYTES = {"float32": 4, "float64": 8}
EVAL_BATCH = 256  # stability.training.evaluation.EVAL_BATCH_SIZE (that room is above this one)
ENCODED_BYTES = 4  # an encoded example's inputs: float32 (every built-in task's encode)
CUDA_CONTEXT_BYTES = 300 * 2**20  # a CUDA context of the worker's own: 300-600 MB by GPU and driver


@dataclass(frozen=True)
class Footprint:
    """Bytes a run holds, by what holds them (the module docstring says what each counts)."""

    parameters: int
    probe: int
    step: int
    evaluation: int
    probe_pass: int
    evaluation_set: int = 0  # on the host, for the whole run: the evaluation's fixed training sample
    data_sets: int = 0       # on the host, for the whole run: a generated task's fixed val/test/train sets

    @property
    def peak(self) -> int:
        """What is held at once at the worst moment: the persistent part and the largest turn."""
        return self.parameters + self.probe + max(self.step, self.evaluation, self.probe_pass)


@dataclass(frozen=True)
class _Sizes:
    inputs: int
    outputs: int
    steps: int
    output_steps: int
    classes: bool  # a classification loss: cross-entropy materialises the log-probabilities


def _sizes(config: RunConfig, task) -> _Sizes:
    """The task's sizes: from the built task, else from its class and the config's options."""
    source = task
    if source is None:
        try:
            source = tasks.get_class(config.task.name)
        except ValueError:
            source = None
    steps = getattr(task, "seq_len", None)
    if steps is None:
        steps = config.task.options.get("seq_len")
        if steps is None and source is not None:
            steps = tasks.options(config.task.name).get("seq_len")
    steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else 1
    every = getattr(source, "target_mode", "last") == "every"
    return _Sizes(inputs=_positive(getattr(source, "input_size", None)),
                  outputs=_positive(getattr(source, "output_size", None)),
                  steps=steps, output_steps=steps if every else 1,
                  classes=getattr(source, "metric", "mse") != "mse")


# The option that makes a cell's step this many layers deep, and what it means when left empty.
DEPTH_OPTIONS = {"mlp": "layers", "vprnn": "k", "sgornn": "k"}


def step_depth(config: RunConfig) -> int:
    """How many layers deep one step of the cell is: the mlp's ``layers``, a VPRNN's or SGORNN's ``k``
    (empty: 2⌈log₂ n⌉, SGORNN paper App. A.3), else 1."""
    option = DEPTH_OPTIONS.get(config.cell.name)
    if option is None:
        return 1
    try:
        value = {**cells.options(config.cell.name), **config.cell.options}.get(option)
    except ValueError:
        return 1
    if value is None and option == "k":
        value = 2 * math.ceil(math.log2(max(config.cell.hidden_size, 2)))
    return _positive(value)


def build_cost(config: RunConfig) -> tuple[int, int]:
    """``(operations, bytes)`` of building ``config``'s cell, counted from its sizes before building: its
    recurrent weights (an mlp's every layer, a dense cell's every gate block) written at ten operations each,
    plus one hidden³ factorisation (the most a built-in's initialisation does: expRNN's matrix exponential, an
    orthogonal init), and those weights' float32 bytes. A check's bound (stability.admission.preflight,
    Note [Checks that build])."""
    hidden = config.cell.hidden_size
    layers = step_depth(config) if config.cell.name == "mlp" else 1
    weights = layers * (DENSE_BLOCKS.get(config.cell.name) or 1) * hidden * hidden
    return hidden ** 3 + 10 * weights, 4 * weights


def _positive(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def footprint(config: RunConfig, task=None) -> Footprint:
    """The bytes ``config`` holds on its device, by part (a lower bound; the module docstring)."""
    size = _sizes(config, task)
    hidden, train = config.cell.hidden_size, config.train
    width = DTYPE_BYTES.get(train.dtype, 4)
    blocks = DENSE_BLOCKS.get(config.cell.name)
    copies = 2 + OPTIMIZER_SLOTS.get(train.optimizer, 0)  # value, gradient, optimizer state
    outer = (blocks or 1) * step_depth(config)  # states kept for backward per step
    layers = step_depth(config) if config.cell.name == "mlp" else 1  # an mlp's layers have their own W
    layer_weights = (blocks or 1) * hidden * (size.inputs + 1) + (hidden + 1) * size.outputs
    if blocks is None:  # W built from fewer parameters, and its gradient
        weights, recurrent = layer_weights + layers * hidden * hidden, 2 * layers * hidden * hidden
    else:
        weights, recurrent = layer_weights + blocks * hidden * hidden, copies * blocks * hidden * hidden
    parameters = (recurrent + copies * layer_weights) * width
    logits = size.output_steps * size.outputs * (2 if size.classes else 1)  # outputs (+ log-probabilities)
    step = train.batch_size * (size.steps * (size.inputs + outer * hidden) + logits) * width
    evaluation = min(EVAL_BATCH, train.eval_examples) * (size.steps * (size.inputs + hidden) + logits) * width
    probe = (weights + train.probe_examples * size.steps * size.inputs) * 8  # float64 copy of the model, input
    probe_pass = train.probe_examples * (size.steps * outer * hidden + logits) * 8
    evaluation_set = evaluation_sample(config, task) * size.steps * size.inputs * ENCODED_BYTES
    encoded = size.steps * size.inputs * ENCODED_BYTES
    return Footprint(parameters, probe, step, evaluation, probe_pass, evaluation_set, fixed_set_bytes(task, encoded))


SAMPLED_EXAMPLE_BYTES = 1 << 20  # an example whose encoding is larger is not drawn to be measured


def fixed_set_bytes(task, encoded: int) -> int:
    """Bytes of a generated task's fixed sets (its ``sizes``: val, test, and train when it has a fixed
    pool), all drawn by a run and held to its end, as the task keeps them: its compact arrays, whose
    bytes one example drawn here tells; where an encoded example (``encoded`` bytes) is over
    :data:`SAMPLED_EXAMPLE_BYTES`, nothing is drawn and ``encoded`` stands for it (a built-in task's
    arrays are at most its encoding). 0 for a task without fixed sets (a real data set)."""
    sizes = getattr(task, "sizes", None)
    if not isinstance(sizes, dict) or not hasattr(task, "sample"):
        return 0
    examples = sum(value for value in sizes.values() if isinstance(value, int) and not isinstance(value, bool))
    if encoded > SAMPLED_EXAMPLE_BYTES:
        return examples * encoded
    one = task.sample(np.random.default_rng(0), 1)
    return examples * sum(int(getattr(array, "nbytes", 0)) for array in one.values())


def evaluation_sample(config: RunConfig, task) -> int:
    """Examples of the fixed training sample the evaluator keeps for the whole run
    (stability.training.evaluation.Evaluator): ``eval_examples`` for a task that draws fresh training
    data, at most its ``train_size`` for one with a fixed pool; 0 where only its files could tell (a
    real data set, not built before the run: ``task`` None) and for a stateful task."""
    if task is None or getattr(task, "stateful", False):
        return 0
    examples = config.train.eval_examples
    if getattr(task, "fresh_training_data", False):
        return examples
    pool = getattr(task, "train_size", None)
    return min(examples, pool) if isinstance(pool, int) and not isinstance(pool, bool) else 0


@dataclass(frozen=True)
class Work:
    """Floating-point operations of a training step, one evaluation and one probe (module docstring)."""

    step: int
    evaluation: int
    probe: int

    def per_step(self, config: RunConfig) -> float:
        """A training step's operations with the evaluations and probes spread over the steps."""
        train = config.train
        return self.step + self.evaluation / train.resolved_eval_every() + self.probe / train.resolved_probe_every()


def work(config: RunConfig, task=None) -> Work:
    """The operations of ``config``'s training step, evaluation and probe (a count, not a timing)."""
    size, train, hidden = _sizes(config, task), config.train, config.cell.hidden_size
    blocks = DENSE_BLOCKS.get(config.cell.name) or 1
    per_time_step = 2 * blocks * hidden * (hidden * step_depth(config) + size.inputs)
    forward = size.steps * per_time_step + size.output_steps * 2 * hidden * size.outputs  # one example
    evaluated = train.eval_examples + max(evaluation_sample(config, task), train.eval_examples)
    singular_values = 10 * hidden ** 3
    return Work(step=3 * train.batch_size * forward, evaluation=evaluated * forward,
                probe=3 * train.probe_examples * forward + singular_values)


FLOW_BATCH = 8                   # stability.training.probes.gradient_flow's examples
LAYER_STEP_OPERATIONS = 500_000  # a layer's step in Python and autograd, whatever its size (~50 µs), as operations


def flow_work(config: RunConfig, seq_len: int, batch: int = FLOW_BATCH) -> int:
    """Operations of measuring ``config``'s freshly built cell's gradient flow over ``seq_len`` steps
    (stability.training.probes.gradient_flow, the Gradient flow page): a float64 forward and backward of
    ``batch`` examples, each step ``layers`` (an mlp's; else one) of the cell's hidden x hidden products and a
    fixed cost a layer's step (:data:`LAYER_STEP_OPERATIONS`), the recurrent matrix built once (``k``
    sublayers for a VPRNN), and the singular values of each layer's W (about 10 hidden³ each). At about
    7e9 of these a second: mlp 64 x 1000 layers at T = 40 counts 3e10 and took 3.8 s."""
    hidden, blocks = config.cell.hidden_size, DENSE_BLOCKS.get(config.cell.name) or 1
    layers = step_depth(config) if config.cell.name == "mlp" else 1
    per_step = layers * (3 * batch * 2 * blocks * hidden * hidden + LAYER_STEP_OPERATIONS)
    return seq_len * per_step + step_depth(config) * hidden * hidden + layers * 10 * hidden ** 3


def checkpoint_bytes(config: RunConfig, task=None) -> int:
    """Bytes of one checkpoint of ``config`` on disk: its weights and the optimizer's state beside each
    (Adam two slots, RMSprop one), in the training dtype. A lower bound: a dense cell's recurrent blocks and
    an mlp's layers are counted, a structured cell's few recurrent parameters are not (its W is built from
    them). LSTM hidden 2048 on adding, float64, Adam: ~403 MB, as measured (issue 33)."""
    size, hidden, train = _sizes(config, task), config.cell.hidden_size, config.train
    blocks = DENSE_BLOCKS.get(config.cell.name)
    weights = (blocks or 1) * hidden * (size.inputs + 1) + (hidden + 1) * size.outputs
    if blocks is not None:
        weights += blocks * hidden * hidden
    elif config.cell.name == "mlp":
        weights += step_depth(config) * hidden * hidden
    return weights * (1 + OPTIMIZER_SLOTS.get(train.optimizer, 0)) * DTYPE_BYTES.get(train.dtype, 4)


def physical_memory() -> int:
    """This machine's physical memory in bytes."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: psutil would know; assume no limit
        return 2**63


def device_limit(device, gpus: list[gpu_facts.GpuMemory] | None = None) -> tuple[int, str] | None:
    """``(bytes, what has them)`` a run on ``device`` can use at most: on cuda the visible GPU with
    the most free memory, less a CUDA context (``gpus``: the facts, default read with
    ``nvidia-smi``; None when they cannot be read), else this machine's physical memory."""
    if getattr(device, "type", str(device)) != "cuda":
        return physical_memory(), "this machine"
    gpus = gpu_facts.gpu_memory() if gpus is None else gpus
    if not gpus:
        return None
    roomiest = max(gpus, key=lambda gpu: gpu.free)
    usable = max(0, roomiest.free - CUDA_CONTEXT_BYTES)
    return usable, (f"GPU {roomiest.id} ({roomiest.name}: {_bytes(roomiest.free)} free of "
                    f"{_bytes(roomiest.total)}, less {_bytes(CUDA_CONTEXT_BYTES)} for a CUDA context)")


def check(config: RunConfig, task, device, gpus: list[gpu_facts.GpuMemory] | None = None) -> None:
    """ConfigError (one line, with the estimate) when the run cannot fit in ``device``'s memory
    (``gpus``: the GPUs' memory facts, default read with ``nvidia-smi``)."""
    used = footprint(config, task)
    host = physical_memory()
    limit = device_limit(device, gpus)
    if used.parameters > host or (limit is not None and used.parameters > limit[0]):
        size, where = (host, "this machine") if limit is None or used.parameters > host else limit
        depth = _depth_words(config) if config.cell.name == "mlp" else ""  # an mlp's layers hold weights
        raise ConfigError(f"hidden_size {config.cell.hidden_size}{depth} of cell {config.cell.name!r} needs "
                          f"~{_bytes(used.parameters)} of parameters, gradients and optimizer state; "
                          f"{where} has {_bytes(size)}: choose a smaller hidden_size"
                          + (f" or {DEPTH_OPTIONS[config.cell.name]}" if depth else ""))
    beside = used.parameters if getattr(device, "type", str(device)) == "cuda" else used.peak  # on the host too
    if beside <= host < beside + used.data_sets:
        sizes = ", ".join(f"{split}_size {value:,}" for split, value in task.sizes.items() if value)
        raise ConfigError(f"task {config.task.name!r} draws fixed sets of ~{_bytes(used.data_sets)} ({sizes}) "
                          f"held for the whole run; with the rest of the run that is "
                          f"~{_bytes(used.data_sets + beside)}, and this machine has {_bytes(host)}: "
                          f"lower val_size, test_size or train_size")
    on_host = used.evaluation_set + used.data_sets + beside
    if beside <= host < on_host:
        raise ConfigError(f"eval_examples {config.train.eval_examples} keeps a fixed training sample of "
                          f"~{_bytes(used.evaluation_set)} for the whole run ({_sample_words(config, task)}); "
                          f"with the rest of the run that is ~{_bytes(on_host)}, and this machine has "
                          f"{_bytes(host)}: lower eval_examples")
    if limit is not None and used.peak > limit[0]:
        raise ConfigError(f"the run needs ~{_bytes(used.peak)} at once ({_parts(config, task, used)}); "
                          f"{limit[1]} has {_bytes(limit[0])}: {_remedy(used)}")


def _sample_words(config: RunConfig, task) -> str:
    size = _sizes(config, task)
    return f"{evaluation_sample(config, task)} examples x {size.steps} steps x {size.inputs} inputs, float32"


def _turns(used: Footprint) -> dict[str, int]:
    """What takes turns on the device: a training step, an evaluation batch, the probe (with its batch)."""
    return {"step": used.step, "evaluation": used.evaluation, "probe": used.probe + used.probe_pass}


def _parts(config: RunConfig, task, used: Footprint) -> str:
    """The training step's activations, and the largest turn where that is another."""
    size, train = _sizes(config, task), config.train
    length = f"{size.steps} steps x " if size.steps > 1 else ""
    text = (f"~{_bytes(used.step)} of activations for batch_size {train.batch_size} x {length}"
            f"hidden_size {config.cell.hidden_size}{_depth_words(config, 'x')}")
    turns = _turns(used)
    largest = max(turns, key=turns.get)
    if largest == "evaluation":
        text += (f"; ~{_bytes(used.evaluation)} to evaluate {min(EVAL_BATCH, train.eval_examples)} examples "
                 f"a batch" + (f" x {size.outputs} outputs" if size.outputs > 1 else ""))
    elif largest == "probe":
        text += f"; ~{_bytes(turns['probe'])} for the float64 probe batch of probe_examples {train.probe_examples}"
    return text


def _depth_words(config: RunConfig, joint: str = "and") -> str:
    """`` and layers 1000`` where the cell's step is deeper than one layer, else nothing."""
    depth = step_depth(config)
    return f" {joint} {DEPTH_OPTIONS[config.cell.name]} {depth}" if depth > 1 else ""


def _remedy(used: Footprint) -> str:
    turns = _turns(used)
    return {"step": "lower batch_size, seq_len, hidden_size or the depth",
            "evaluation": "lower eval_examples or seq_len",
            "probe": "lower probe_examples or seq_len"}[max(turns, key=turns.get)]


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


format_bytes = _bytes  # the same words for the other checks' messages (preflight.check_room)
