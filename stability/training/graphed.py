"""The training step as one CUDA graph (issue 32): the Trainer trains through it on CUDA.

    reads = host_reads(step)                        # the aten ops in step() that read the device on the host
    problem = capture_problem(model, config, task)  # None, or "trains eagerly: <why>", one line
    plan = step_plan(model, task, train, device)    # static? captured? what the run's device line adds
    static = StaticStep(model, task, train)         # the step over static buffers, the window on the device
    static.step(1, batch)                           # eager (CPU; CUDA before capture), or a replay
    static.capture()                                # CUDA only: the body captured once, replayed after
    checkpoint["optimizer"] = static.optimizer_state()   # the plain form, which any run resumes from

:class:`~stability.training.trainer.Trainer` asks :func:`step_plan` how to train: on a CUDA device, with
``train.cuda_graphs`` on (the default) and no :func:`capture_problem`, through a :class:`StaticStep`:
:data:`WARMUP_STEPS` eager steps after step 0's first point, then :meth:`StaticStep.capture`, then a replay
every step; the evaluation and the float64 probe replay graphs of their own between replays
(:mod:`stability.training.graphed_readings`), the SVDs and every other hook run eagerly. Where
the capture is refused the run trains eagerly through the Trainer's own step, and its device line says
why (``"... · trains eagerly: <why>"``). A CPU run never asks (its path is the Trainer's own step, as
before); ``Trainer(..., static_step=True)`` trains a CPU run through an uncaptured StaticStep, which is how
the tests hold the Trainer's wiring of it to the plain path's rows, bit for bit.

Note [What a graph freezes]
---------------------------
A CUDA graph records the kernels one run of the step launches, with their arguments, and replays
them (the PyTorch recipe: whole-network capture, a capturable optimizer, static inputs copied in).
What the host computes while the step is captured happens once and is frozen: a Python number
such as a float learning rate, a choice made on a value read from the device, a shape that depends
on data. Three consequences shape this module:

* a read of a tensor's value on the host cannot be captured at all (CUDA refuses a copy to the
  host while a stream captures), so :func:`host_reads` lists the ops that read one, on any device;
* the learning rate lives in a tensor the graph reads (``torch.optim.Adam(lr=tensor,
  capturable=True)``, and RMSprop alike); the schedule (:class:`~stability.training.schedule.
  LearningRate`) runs on host copies of the groups, and a change is written into that tensor
  (``fill_``, a kernel with a host argument: no read) before the next replay;
* ``torch.linalg.matrix_exp`` (expRNN: W = exp(A - Aᵀ)) copies the norm of its input to the host on
  CUDA to pick its Taylor degree and its number of squarings (Bader, Blanes & Casas 2019,
  "Computing the matrix exponential with an optimized Taylor polynomial approximation", the
  algorithm of ATen's ``mexp_impl``/``compute_T18_scale_square``). That read happens inside the
  kernel, below what a dispatch mode sees, so the cell is declared here (:data:`UNCAPTURABLE`).

Note [Capturable optimizers on the CPU]
---------------------------------------
torch 2.13 accepts ``capturable=True`` when Adam, AdamW or RMSprop is built over CPU tensors but
refuses its first ``step()`` (an AssertionError: capturable steps run on cuda, xpu, hpu, xla or
privateuseone). So on the CPU a :class:`StaticStep` keeps the tensor learning rate with
``capturable`` off (there Adam reads its step count and the rate on the host, which costs nothing on
a CPU and is why a CPU run is never captured). ``torch.optim.SGD`` has no capturable form: it keeps
no step count, and a float rate is captured as a constant, right for a constant rate only; as a
tensor it is read on the host every step (``alpha=-lr``), so SGD with a schedule trains eagerly.
The project's ``rmsprop_tf`` keeps its step count in a host tensor and has no capturable form.

Note [Capturable state in a checkpoint]
---------------------------------------
``Optimizer.load_state_dict`` takes the saved groups' options with the state: a state dict saved
from a capturable Adam makes the optimizer it is loaded into capturable (and its lr a tensor), and
on the CPU that optimizer's next step fails. A checkpoint therefore holds the plain form
(:func:`plain_optimizer_state`: ``capturable`` off, each lr a float, each step count a float32 CPU
tensor as a plain Adam keeps it), which a CPU run and an eager GPU run resume from as they always
have; a :class:`StaticStep` loads it back into its capturable optimizer and writes the rates into
the tensors its graph reads (:meth:`StaticStep.load_optimizer_state`).

Note [Determinism and graphs]
-----------------------------
``train.deterministic`` does not stop a capture: a replay runs the kernels chosen when the step was
captured, the deterministic ones when the switch is on, after the eager warm-up steps have created
cuBLAS' handles and workspace (``CUBLAS_WORKSPACE_CONFIG``) outside the capture. To be confirmed on
a GPU with the rest of issue 32.

Note [A short check]
--------------------
:func:`capture_problem` runs before the run's first point (the run's device line, written at its start,
says whether it is graphed), so its step through a CPU copy must cost little: a step of the whole examples
of a T = 1000 run on a CPU takes seconds (an LSTM of 512, KRU: 6–12 s measured). A step's host reads are
in its code, which is the same at every time step, so the check steps through the examples' first
:data:`CHECKED_STEPS` time steps (more than one, so that the step from one state to the next is among
them), and through the whole examples only where the cut ones do not run (a cell that needs its length).

Note [What the forward remembers]
---------------------------------
A replay runs no Python, so what the captured forward left on a module besides its outputs is left
once, at the capture: the LSTM, GRU and KRU-LSTM cells keep their last forward's input, h0 and outputs
(``_last_forward``) for ``gate_values()``. Those tensors are the graph's own (its private memory pool,
kept while a reference holds them), and each replay writes them in place, so a log step reads the gates
of the step it logs, as the eager step does, while the attribute still holds them. The evaluation
between replays runs the forward (eagerly, or once at its own capture) and replaces the attribute with its
own tensors, which no later
replay would write. So :meth:`StaticStep.capture` notes every tensor attribute the modules hold after the
capture (:func:`_held_tensors`) and each replay puts back any a Python forward has replaced since.
"""
from __future__ import annotations

import contextlib
import copy
import sys
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..config import RunConfig, TrainConfig
from ..parametrizations import SkewExponential
from .batches import batch_on, compact_batches
from .build import build_optimizer, build_task
from .hooks import stacked_norm, step_norm
from .schedule import LearningRate
from .window import StepWindow, row_dtype, scoring

GRAPHED = "graphed: each training step replayed as one CUDA graph"  # the device line's word (step_plan)
CHECKED_STEPS = 3  # time steps of the examples capture_problem steps through: Note [A short check]
WARMUP_STEPS = 3  # eager steps before a capture (on a side stream: cuBLAS and cuDNN choose and allocate)
UNCAPTURABLE = {  # module classes whose step reads the device inside a kernel: Note [What a graph freezes]
    SkewExponential: "torch.linalg.matrix_exp (expRNN's W = exp(A - A^T)) copies its input's norm to the host "
                     "on CUDA to choose its Taylor degree and number of squarings",
}
# Ops that read a value on the host, or whose output's shape depends on the data (a read as well).
_READS = {"_local_scalar_dense", "nonzero", "masked_select", "_unique", "_unique2", "unique_dim",
          "unique_consecutive", "unique_dim_consecutive", "equal", "is_nonzero", "repeat_interleave",
          "argwhere"}
_TORCH = str(Path(torch.__file__).parent)
_HERE = str(Path(__file__))
_ROOT = str(Path(__file__).resolve().parents[2])


class _HostReads(TorchDispatchMode):
    """Records the ops of :func:`host_reads` as they are dispatched."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _reads(func, args, kwargs):
            where = _caller()
            self.found.append(f"{func}" + (f" at {where}" if where else ""))
        return func(*args, **kwargs)


def _reads(func, args, kwargs) -> bool:
    name = func.overloadpacket.__name__
    if name in _READS:
        return True
    if name in ("index", "index_put", "index_put_", "_index_put_impl_"):  # a boolean mask: nonzero inside
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in indices)
    if name == "_to_copy":  # .to("cpu"), .cpu() of a device tensor
        source, target = args[0], kwargs.get("device")
    elif name == "copy_":  # host.copy_(device tensor)
        source, target = args[1], args[0].device
    elif name == "_copy_from":
        source, target = args[0], args[1].device
    else:
        return False
    return _device_of(source) not in (None, "cpu", "meta") and target is not None and torch.device(target).type == "cpu"


def _device_of(value) -> str | None:
    return value.device.type if torch.is_tensor(value) else None


def _caller() -> str:
    """file:line of the innermost frame of the project (outside torch and this module) that called the op."""
    frame = sys._getframe(2)
    fallback = ""
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TORCH) and name != _HERE and not name.startswith("<"):
            if name.startswith(_ROOT):
                return f"{name[len(_ROOT) + 1:]}:{frame.f_lineno}"
            fallback = fallback or f"{Path(name).name}:{frame.f_lineno}"
        frame = frame.f_back
    return fallback


def host_reads(fn, *args, **kwargs) -> list[str]:
    """The aten ops ``fn(*args, **kwargs)`` dispatches that read a tensor's value on the host or make a shape
    depend on data, in order: ``"aten._local_scalar_dense.default at stability/cells/x.py:12"`` (``.item()``,
    ``float(t)``, ``if t:``), ``aten.nonzero``, ``aten.index.Tensor`` with a boolean mask, ``aten.equal``, a
    copy of a device tensor to the CPU... They dispatch on the CPU too, so a CPU run finds them. What it
    cannot see: an op's own reads inside its kernel (Note [What a graph freezes]), and ``.tolist()`` or
    ``.numpy()`` of a CPU tensor, which read its memory without an op (a device tensor's ``.tolist()``
    copies it to the host first, an op it finds)."""
    mode = _HostReads()
    with mode:
        fn(*args, **kwargs)
    return mode.found


def capture_problem(model: torch.nn.Module, config: RunConfig | TrainConfig, task=None) -> str | None:
    """Why ``model`` trained on ``task`` with ``config`` cannot be captured as one CUDA graph, as the run's
    device line says it ("trains eagerly: ..."), or None. ``model`` as the Trainer holds it (moved to its
    device and dtype); ``task``: built from ``config`` (a RunConfig) when not given. A CPU run is eager whatever this says: it answers for a CUDA device. The checks, in
    order: a module declared uncapturable, the optimizer, the task, then :func:`host_reads` over one
    step of a CPU copy of the model (forward, loss, backward, norms, clipping, the cell's after-step)."""
    train = config.train if isinstance(config, RunConfig) else config
    if task is None:
        task = build_task(config)
    problem = _declared_problem(model)
    if problem:
        return problem
    problem = _optimizer_problem(model, train) or _task_problem(task)
    if problem:
        return f"trains eagerly: {problem}"
    try:
        reads = _step_reads(model, task, train)
    except Exception as error:  # noqa: BLE001 - a step that cannot be checked is not captured
        first = (str(error).strip().splitlines() or [""])[0]
        return f"trains eagerly: its step could not be checked on the CPU ({type(error).__name__}: {first})"
    if reads:
        more = f" and {len(reads) - 1} more" if len(reads) > 1 else ""
        return f"trains eagerly: its step reads the device on the host ({reads[0]}{more})"
    return None


def _declared_problem(model: torch.nn.Module) -> str | None:
    """``trains eagerly: <why>`` for a module declared uncapturable (:data:`UNCAPTURABLE`, or its own
    ``uncapturable`` attribute), else None."""
    for module in model.modules():
        reason = getattr(module, "uncapturable", None) or UNCAPTURABLE.get(type(module))
        if reason:
            return f"trains eagerly: {reason}"
    return None


def _optimizer_problem(model, train: TrainConfig) -> str | None:
    optimizer = build_optimizer(model, train)
    if "capturable" in optimizer.defaults:
        return None
    if isinstance(optimizer, torch.optim.SGD) and train.lr_schedule == "none":
        return None  # no step count, and a constant rate frozen into the graph is right
    if isinstance(optimizer, torch.optim.SGD):
        return (f"sgd has no capturable form: a float learning rate would be frozen into the graph and the "
                f"{train.lr_schedule} schedule changes it (a tensor rate is read on the host every step)")
    return (f"{train.optimizer} has no capturable form ({type(optimizer).__name__} keeps its step count on "
            "the host and its learning rate as a float)")


def _task_problem(task) -> str | None:
    if getattr(task, "stateful", False):
        return (f"{getattr(task, 'name', 'the task')} carries its hidden state across batches, which the "
                "graphed step does not keep in a static buffer yet")
    if scoring(task) == "own":
        return f"{type(task).__name__} scores its steps on the host (its own score())"
    return None


def _step_reads(model, task, train: TrainConfig) -> list[str]:
    """:func:`host_reads` of one :class:`StaticStep` of a CPU copy of ``model`` (SGD at rate 0 stands in for
    the optimizer, whose capturable form is checked apart), on two examples of the fixed validation set cut to
    their first :data:`CHECKED_STEPS` time steps (Note [A short check]); on the whole examples where the cut
    ones do not run."""
    plain = replace(train, optimizer="sgd", lr=0.0, lr_schedule="none", weight_decay=0.0, device="cpu")
    batch = next(iter(compact_batches(task, "val", 2)))
    whole = batch_on(task, batch, torch.device("cpu"), next(model.parameters()).real.dtype)

    def reads(x: torch.Tensor, y: torch.Tensor) -> list[str]:
        static = StaticStep(copy.deepcopy(model).to("cpu"), task, plain)
        with torch.random.fork_rng(devices=[]):  # a noisy h0's draw here leaves the run's stream as it was
            return host_reads(static.step_on, 1, x, y)

    cut = _first_steps(task, *whole)
    if cut[0].shape != whole[0].shape:
        try:
            return reads(*cut)
        except Exception:  # noqa: BLE001 - a cell that needs its whole length: checked on the whole examples
            pass
    return reads(*whole)


def _first_steps(task, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)`` cut to their first :data:`CHECKED_STEPS` time steps (y too where the task targets every
    step)."""
    steps = min(x.shape[1], CHECKED_STEPS)
    if getattr(task, "target_mode", "last") == "every" and y.dim() >= 2 and y.shape[1] == x.shape[1]:
        y = y[:, :steps]
    return x[:, :steps], y


class _Window(StepWindow):
    """The trainer's step window (:mod:`stability.training.window`: the same rows, read the same way, once
    per log step) written at a row the device counts, so that one captured step writes each replay's row:
    its buffer is allocated once, at its capacity, and never grows."""

    def __init__(self, task, capacity: int, device: torch.device):
        super().__init__(task, capacity)
        self._rows = torch.full((self.capacity, 4), torch.nan, dtype=row_dtype(device), device=device)
        self.counter = torch.zeros(1, dtype=torch.long, device=device)

    def write(self, loss, objective, norm, score) -> None:
        """The step's row at the counter, then the counter moved on: device ops only."""
        row = torch.stack([value.detach().to(self._rows.dtype) for value in (loss, objective, norm, score)])
        self._rows.index_copy_(0, self.counter, row.unsqueeze(0))
        self.counter.add_(1)

    def record(self, step: int) -> None:
        """The host's side of a written row: its step number."""
        if len(self._steps) >= self.capacity:
            raise RuntimeError(f"the graphed step's window holds {self.capacity} steps; read it at every log step")
        self._steps.append(step)
        self._cached = None

    def reset(self) -> None:
        super().reset()
        self.counter.zero_()


class _HostGroups:
    """Host copies of an optimizer's groups' rates, for :class:`LearningRate` to step (Note [What a graph
    freezes]); the schedule reads and writes ``param_groups[i]["lr"]`` and ``["lr_scale"]`` only."""

    def __init__(self, groups: list[dict]):
        self.param_groups = [{"lr": float(group["lr"]), "lr_scale": group.get("lr_scale", 1.0)} for group in groups]


class StaticStep:
    """The trainer's step (:meth:`stability.training.trainer.Trainer._train_step`) written once over static
    buffers: x, y and the h0 probe allocated once, each batch copied in; the step's loss, objective,
    gradient norm and score written into the window on the device; the optimizer's rates held in tensors.

    ``step(n, batch)`` runs step ``n``: eagerly until :meth:`capture` (on CUDA the eager steps run on a side
    stream and are the warm-up), a replay after. What it leaves for the hooks, overwritten by the next
    step: ``loss``, ``penalty``, ``pred``, ``y``, ``h0_grad`` (∂L/∂h0), ``total_norm`` (the stable norm
    before clipping, every step: one graph serves log steps and the others), and ``window``, the step
    window (``read``/``reset`` as the trainer's). The learning-rate schedule is ``schedule``.
    """

    def __init__(self, model: torch.nn.Module, task, train: TrainConfig):
        if getattr(task, "stateful", False) or scoring(task) == "own":
            raise ValueError(f"StaticStep: {_task_problem(task)}")
        self.model, self.task, self.train = model, task, train
        reference = next(model.parameters())
        self.device, self.dtype = reference.device, reference.real.dtype
        self.parameters = list(model.parameters())
        self.optimizer = build_optimizer(model, train)
        self._tensor_lr = "capturable" in self.optimizer.defaults
        capturable = self._tensor_lr and self.device.type == "cuda"  # Note [Capturable optimizers on the CPU]
        self._groups = _HostGroups(self.optimizer.param_groups)  # before the rates become tensors
        self._lr = [group["lr"] for group in self._groups.param_groups]  # what the optimizer's groups hold
        # float32 where capturable, as torch keeps its step counts and bias corrections; float64 on the CPU,
        # where the eager update is then exactly the plain float rate's
        self._lr_dtype = torch.float32 if capturable else torch.float64
        for group in self.optimizer.param_groups if self._tensor_lr else ():
            group["lr"] = torch.tensor(group["lr"], dtype=self._lr_dtype, device=self.device)
            group["capturable"] = capturable
        self.schedule = LearningRate(self._groups, train)
        self.window = _Window(task, train.resolved_log_every(), self.device)
        self.x = self.y = self.h0_probe = None
        self.loss = self.penalty = self.pred = self.total_norm = None
        self.eager_steps = 0
        self._graph = None
        self._held: list[tuple[dict, str, object]] = []  # Note [What the forward remembers]
        self._side = side_stream(self.device)

    @property
    def h0_grad(self) -> torch.Tensor | None:
        """∂L/∂h0 on the training batch of the last step, in the training dtype."""
        return None if self.h0_probe is None else self.h0_probe.grad

    def step(self, step: int, batch) -> None:
        """Training step ``step`` on ``batch`` (as :func:`~stability.training.batches.compact_batches` yields it)."""
        self.step_on(step, *batch_on(self.task, batch, self.device, self.dtype))

    def step_on(self, step: int, x: torch.Tensor, y: torch.Tensor) -> None:
        """:meth:`step` on a batch already where the model trains (``batch_on``'s ``(x, y)``)."""
        self._fill(x, y)
        self._sync_lr()
        if self._graph is not None:
            self._graph.replay()
            for attributes, name, value in self._held:  # Note [What the forward remembers]
                if attributes.get(name) is not value:
                    attributes[name] = value
        else:
            with on_side_stream(self._side), warnings.catch_warnings():
                # a capturable optimizer stepped before its capture warns that it runs uncaptured: the warm-up
                warnings.filterwarnings("ignore", message="This instance was constructed with capturable=True")
                self._body()
            self.eager_steps += 1
        self.window.record(step)
        self.schedule.after_step(step)

    def capture(self) -> None:
        """Capture the step as one CUDA graph, replayed by every later :meth:`step`; one-line errors off
        CUDA, before :data:`WARMUP_STEPS` eager steps, or with an optimizer that has no capturable form."""
        if self.device.type != "cuda":
            raise RuntimeError(f"a CUDA graph is captured on a CUDA device; this step trains on {self.device.type}")
        if self.eager_steps < WARMUP_STEPS:
            raise RuntimeError(f"capture after {WARMUP_STEPS} eager steps (their optimizer state and the "
                               f"libraries' workspaces must exist first); {self.eager_steps} so far")
        if not all(group.get("capturable") for group in self.optimizer.param_groups) and \
                not (isinstance(self.optimizer, torch.optim.SGD) and self.train.lr_schedule == "none"):
            raise RuntimeError(f"{self.train.optimizer} has no capturable form; this run trains eagerly")
        problem = _declared_problem(self.model)  # a read inside a kernel fails the capture deep in CUDA
        if problem is not None:
            raise RuntimeError(problem)
        graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            self._body()
        self._graph = graph
        self._held = _held_tensors(self.model)

    def pool(self):
        """The captured graph's memory pool, which the readings' graphs share (Note [Capturing a reading] in
        :mod:`stability.training.graphed_readings`); None before :meth:`capture`."""
        return None if self._graph is None else self._graph.pool()

    @property
    def captured(self) -> bool:
        """Whether :meth:`capture` has run: every later :meth:`step` is a replay."""
        return self._graph is not None

    # ------------------------------------------------------------ checkpoints
    def optimizer_state(self) -> dict:
        """The optimizer's state dict in the plain form a checkpoint keeps (Note [Capturable state in a
        checkpoint])."""
        return plain_optimizer_state(self.optimizer.state_dict())

    def load_optimizer_state(self, state: dict) -> None:
        """Load a checkpoint's optimizer state (either form): the rates go into the tensors the graph reads
        and into the schedule's host copies; a capturable optimizer's step counts onto the device. Before
        :meth:`capture` only: loading puts new state tensors into the optimizer, which a graph captured
        earlier would never read (a resume builds its StaticStep, loads, then captures)."""
        if self._graph is not None:
            raise RuntimeError("the step is captured already: its graph reads the optimizer state it was "
                               "captured with; load the checkpoint into a new StaticStep before capturing")
        groups = self.optimizer.param_groups
        self.optimizer.load_state_dict(capturable_optimizer_state(state, bool(groups[0].get("capturable"))))
        for index, group in enumerate(self.optimizer.param_groups):
            value = float(group["lr"])
            if self._tensor_lr:  # the tensor the graph reads, kept: the loaded group's float goes into it
                group["lr"] = groups[index]["lr"].fill_(value)
            self._groups.param_groups[index]["lr"] = self._lr[index] = value

    # ------------------------------------------------------------ internals
    def _fill(self, x: torch.Tensor, y: torch.Tensor) -> None:
        if self.x is None:
            self.x, self.y = torch.empty_like(x), torch.empty_like(y)
            # its shape and dtype only: a noisy h0's draw here would shift every later draw from the run's
            # stream against the Trainer's own step (the CUDA generator too, where the model trains there)
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                h0 = self.model.cell.initial_state(x.shape[0], dtype=self.dtype, device=self.device)
            self.h0_probe = torch.zeros_like(h0).requires_grad_()
        if x.shape != self.x.shape or y.shape != self.y.shape:
            raise ValueError(f"a batch of shape {tuple(x.shape)} does not fit the static buffers "
                             f"{tuple(self.x.shape)}: one StaticStep per batch shape")
        self.x.copy_(x, non_blocking=True)
        self.y.copy_(y, non_blocking=True)

    def _sync_lr(self) -> None:
        """The schedule's rates into the optimizer's groups: a tensor filled (Note [What a graph freezes])."""
        for index, (group, host) in enumerate(zip(self.optimizer.param_groups, self._groups.param_groups)):
            if host["lr"] != self._lr[index]:
                if self._tensor_lr:
                    group["lr"].fill_(host["lr"])
                else:
                    group["lr"] = host["lr"]
                self._lr[index] = host["lr"]

    def _body(self) -> None:
        """The step: what :meth:`capture` records. The trainer's computation, in its order."""
        model, cell = self.model, self.model.cell
        self.optimizer.zero_grad(set_to_none=True)
        self.h0_probe.grad = None
        h0 = cell.initial_state(self.x.shape[0], dtype=self.dtype, device=self.device)
        pred, _ = model(self.x, h0 + self.h0_probe)
        loss = self.task.loss(pred, self.y)
        penalty = cell.penalty()
        objective = loss + penalty
        objective.backward()
        grads = [p.grad for p in self.parameters if p.grad is not None]
        norm, self.total_norm = step_norm(grads), stacked_norm(grads)
        if self.train.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.train.clip_grad_norm)
        self.optimizer.step()
        with torch.no_grad():
            cell.after_optimizer_step()
            score = (pred.argmax(dim=-1) == self.y).float().mean() if self.window.scoring == "device" \
                else torch.zeros((), device=self.device)
        self.window.write(loss, objective, norm, score)
        self.loss, self.pred = loss.detach(), pred.detach()
        self.penalty = penalty.detach() if torch.is_tensor(penalty) else penalty


def side_stream(device: torch.device):
    """A stream for a step's eager calls on CUDA (:func:`on_side_stream`), None elsewhere."""
    return torch.cuda.Stream(device) if device.type == "cuda" else None


@contextlib.contextmanager
def on_side_stream(side):
    """Run the block on ``side`` (a :func:`side_stream`; None: where it is), ordered after the work queued on the
    current stream and before what is queued after it: the eager calls before a capture run on a side stream,
    as torch.cuda.graphs asks of a warm-up."""
    if side is None:
        yield
        return
    current = torch.cuda.current_stream(side.device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        yield
    current.wait_stream(side)


def _held_tensors(model: torch.nn.Module) -> list[tuple[dict, str, object]]:
    """``(module.__dict__, name, value)`` of every attribute of ``model``'s modules that holds a tensor, or a
    tuple or list of tensors, as they are now (parameters, buffers and submodules live elsewhere in the
    module): what a replay puts back (Note [What the forward remembers])."""
    held = []
    for module in model.modules():
        for name, value in vars(module).items():
            if torch.is_tensor(value) or (isinstance(value, (tuple, list)) and value
                                          and all(torch.is_tensor(item) for item in value)):
                held.append((vars(module), name, value))
    return held


@dataclass(frozen=True)
class StepPlan:
    """How a Trainer trains its steps: through a :class:`StaticStep` (``static``), captured after the
    warm-up (``capture``, CUDA only), and what the run's device line adds (``note``: None where nothing
    changed, as on the CPU by default)."""

    static: bool
    capture: bool
    note: str | None


def step_plan(model: torch.nn.Module, task, train: TrainConfig, device: torch.device,
              static_step: bool | None = None) -> StepPlan:
    """How to train ``model`` on ``task`` on ``device``. ``static_step`` None (the Trainer's default): on CUDA
    through a captured StaticStep unless ``train.cuda_graphs`` is off or :func:`capture_problem` answers,
    the Trainer's own step elsewhere (nothing asked: a CPU run is as it was). True: through a StaticStep
    wherever :func:`capture_problem` allows it, captured on CUDA while ``train.cuda_graphs`` is on (on the
    CPU: eager, the tests' way to run the wiring). False: the Trainer's own step."""
    cuda = device.type == "cuda"
    if static_step is False or (static_step is None and not cuda):
        return StepPlan(False, False, "trains eagerly: asked to (static_step=False)" if cuda else None)
    if static_step is None and not train.cuda_graphs:
        return StepPlan(False, False, "trains eagerly: train.cuda_graphs is off")
    problem = capture_problem(model, train, task)
    if problem:
        return StepPlan(False, False, problem)
    if cuda and train.cuda_graphs:
        return StepPlan(True, True, f"{GRAPHED} after {WARMUP_STEPS} eager steps")
    why = "train.cuda_graphs is off" if cuda else f"a CUDA graph needs a CUDA device, this run trains on {device.type}"
    return StepPlan(True, False, f"static step, not captured: {why}")


def plain_optimizer_state(state: dict) -> dict:
    """``state`` (an optimizer's state dict, capturable or not) as a plain optimizer keeps it: ``capturable``
    off, each group's lr a float, each step count a float32 tensor on the CPU (Note [Capturable state in
    a checkpoint]). A new dict; the tensors of ``state`` other than step counts are shared."""
    return _converted(state, capturable=False)


def capturable_optimizer_state(state: dict, capturable: bool = True) -> dict:
    """``state`` for an optimizer whose groups are ``capturable`` (``load_state_dict`` then moves each step
    count to its parameter's device); its rates as floats, for the loader to put into its tensors."""
    return _converted(state, capturable=capturable)


def _converted(state: dict, capturable: bool) -> dict:
    groups = []
    for group in state["param_groups"]:
        group = dict(group)
        if "capturable" in group:
            group["capturable"] = capturable
        group["lr"] = float(group["lr"])
        groups.append(group)
    kept = {}
    for key, values in state["state"].items():
        values = dict(values)
        if torch.is_tensor(values.get("step")):
            values["step"] = values["step"].detach().to(device="cpu", dtype=torch.float32).clone()
        kept[key] = values
    return {**state, "state": kept, "param_groups": groups}
