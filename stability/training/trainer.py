"""The training loop, with the papers' diagnostics streamed into the run store.

Knows nothing about particular cells: everything it measures comes through
the cell contract (``recurrent_matrix()``, ``gate_values()``, ``penalty()``,
``state_probe``).  What is logged, and from which paper:

=====================  =========================================================
``train/loss``, ``train/<metric>``   mean over the steps since the last log; at step 0 the
                        first batch's at the initial weights (:mod:`stability.training.step_zero`,
                        with ``grad/h0_norm_train``, ``grad/total_norm``: a run's first point
                        exists before its first update)
``val/*``, ``test/*``   fixed, seeded held-out sets (``test/*`` once, at the end)
``gap/loss``, ``gap/<metric>``   held-out minus training, both on fixed sets,
                        evaluated the same way (SGORNN paper Fig. 4)
``grad/h0_norm``        ‖∂L/∂h0‖ on the fixed probe batch in float64 (spectral paper
                        Figs. 1, 4; :class:`stability.training.probes.ProbeBatch`): at every
                        probe step, and at the log steps between them that fit in
                        :data:`H0_READING_SHARE` of the run's time
``grad/h0_norm_train``  the same norm on the training batch, in the training dtype:
                        what the optimiser sees (float32 holds 0 once it falls below ~1e-45)
``grad/A_h_norm``       MASO's ‖A_h‖ = ‖∂z/∂h0‖ on the probe batch (MASO §5.1, Fig. 4), every probe
``grad/recurrent_norm``  ‖∂L/∂θ_W‖ over the parameters that build W (MASO Fig. 4)
``grad/total_norm``     over every parameter, before any clipping
``sv/min``, ``sv/max``, ``sv/margin`` = max_i |σ_i − 1| (spectral paper Fig. 4),
``sv/condition``        of the recurrent matrix; ``sv/spectral_radius`` at evaluation steps
``gate/*``              the cell's ``gate_values()`` (SGORNN α, β; LSTM/GRU gates)
``speed/steps_per_s``, ``progress/examples``, ``progress/elapsed_s``,
``progress/eta_s``, ``train/lr``, ``train/penalty``
=====================  =========================================================

Vector diagnostics go to the series table every ``probe_every`` steps:
``grad/h_t_norm`` (index t = 0..T: ‖∂L/∂h_t‖ on the same probe batch, in
float64 so that vanishing reads 1e-120 rather than 0; its t = 0 entry is
``grad/h0_norm``) and ``sv/spectrum``.  Every norm is computed so that it
cannot underflow (:func:`stability.training.probes.stable_norm`).

``train.freeze_recurrent`` keeps the parameters that build W at their
initial values (``cell.recurrent_parameters()``; KRU paper §4.1: copy is
solved with a fixed random unitary W).  After every optimizer step the
trainer calls ``cell.after_optimizer_step()`` (e.g. the Householder cells
renormalise their reflectors there, as their authors' code does).

A NaN or infinite loss or gradient ends the run as ``diverged`` at that
step; every row logged before it is kept.  A step reads nothing from the
device: its loss, score and finiteness wait on the device until the next log
step reads them in one transfer (:mod:`stability.training.window`), which
is where a divergence is found (and recorded at the step it happened).

On a CUDA device the step is one CUDA graph (:mod:`stability.training.graphed`, issue 32): the
forward, loss, backward, clipping, the optimizer step, the cell's after-step and the window's row,
captured after :data:`~stability.training.graphed.WARMUP_STEPS` eager steps (after step 0's first
point) and replayed every step, the batch copied into static buffers; everything above is read
between replays, from the same :class:`~stability.training.hooks.StepResult`, the evaluation on the fixed
sets and the float64 probe replayed as graphs of their own (:mod:`stability.training.graphed_readings`),
the rest eagerly.  A run that
cannot be captured (:func:`~stability.training.graphed.capture_problem`: expRNN's ``matrix_exp``,
``rmsprop_tf``, a stateful task, ...) or whose ``train.cuda_graphs`` is off trains eagerly, and its
device line says so and why.  The CPU's path is the eager step, unchanged.

Every process that trains goes through the :class:`Trainer`, which sets
the float32 precision of every backend to full IEEE float32
(:mod:`stability.core.precision`: cuDNN cells and scan cells alike) and
``train.deterministic`` (:mod:`stability.core.determinism`) before the
model reaches the device; the run's ``device`` column says both.

The loop (:class:`Trainer`) only trains; every reading above, evaluation,
checkpoints and progress are hooks (:mod:`stability.training.hooks`, whose
docstring gives the contract), and callers add their own
(``train_run(..., hooks=[...])``).  Where the rows go is the run's sink
(:mod:`stability.training.sinks`: a run store's run, or memory), which also
says where checkpoints go and whether a stop was requested.  A checkpoint is
written every ``CHECKPOINT_EVERY_S`` and at the end; ``fit(resume=True)``
continues a stopped or interrupted run from it exactly
(:mod:`stability.training.checkpoints`).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from ..config import RunConfig, TrainConfig
from ..core import metric_names as names
from ..core import devices
from ..core.determinism import CUBLAS_WORKSPACE_ENV, deterministic_settings, use_deterministic_algorithms
from ..core.devices import describe_device, resolve_device
from ..core.precision import apply_fp32_precision, describe_precision
from . import checkpoints
from .batches import batch_on, compact_batches
from .build import build_optimizer
from .checkpoints import ResumeError
from .evaluation import Evaluator
from .graphed import WARMUP_STEPS, StaticStep, step_plan
from .graphed_readings import StaticEvaluation, StaticProbe
from .hooks import Hook, StepResult, default_hooks, overrides, stacked_norm, step_norm
from .probes import ProbeBatch, spectrum_metrics
from .schedule import LearningRate
from .sinks import MemorySink, Sink, TrainResult
from .step_zero import step_zero_readings
from .window import StepWindow


@dataclass
class Cadence:
    """Which readings the current step takes: a log step, and among log steps the evaluation and
    probe steps (the first log step at or after each multiple of ``eval_every``/``probe_every``)
    and the last step."""

    log: bool = False
    eval: bool = False
    probe: bool = False
    last: bool = False


class Trainer:
    """Trains a model the caller built on a task, taking the readings of the hooks.

    ``Trainer(model, task, config, hooks=[...], progress=None).fit()`` runs the loop: draw a batch,
    step the optimizer, hand a :class:`~stability.training.hooks.StepResult` to every hook, and at
    log steps flush the rows the hooks recorded to the run's sink in one transaction; it returns a
    :class:`~stability.training.sinks.TrainResult`.  ``config`` is a :class:`RunConfig` (its
    ``train`` section is what the trainer reads; a checkpoint keeps the whole config) or a bare
    :class:`TrainConfig`.  From these the trainer builds only what training needs: the optimizer
    (``train.optimizer`` over :func:`stability.models.sequence.parameter_groups`), the learning-rate
    schedule, the evaluator's fixed sets and the float64 probe batch.  It moves the model to
    ``train.device`` and ``train.dtype`` and does not seed: a caller seeds before building the model
    (:func:`stability.training.run.build_and_train` does, with ``train.seed``).

    The model contract (what :func:`stability.training.build.build_model` builds: a
    :class:`~stability.models.sequence.SequenceModel` around a cell of :mod:`stability.cells`,
    whose ``cells/base.py`` gives the cell's side in full):

    * ``model(x, h0=None, state_probe=None) -> (pred, h_last)`` with x (B, T, input_size);
      ``task.loss(pred, y)`` is the loss.  ``state_probe`` e, zeros (B, T, state_size) with
      ``requires_grad``, is added to each state as it is produced, so ``e.grad[:, t]`` is ∂L/∂h_t
      (the probe batch's ``grad/h_t_norm``).
    * ``model.cell.initial_state(batch, dtype=, device=)``: h0, (B, state_size); the trainer adds
      a zero tensor to it whose gradient is ∂L/∂h0 on the training batch.
    * ``model.cell.recurrent_matrix()``: the dense transition matrix W (H, H), for ``sv/*``.
    * ``model.cell.recurrent_parameters()``: the parameters W is built from (frozen by
      ``train.freeze_recurrent``, ``grad/recurrent_norm``; ``recurrent_lr_scale`` their lr multiple).
    * ``model.cell.gate_values()``: ``{name: float}`` for ``gate/*``, empty without gates.
    * ``model.cell.penalty()``: the soft-constraint term added to the loss (0 where none).
    * ``model.cell.after_optimizer_step()``: called under ``torch.no_grad()`` after every step.
    * ``model.cell.recurrent_parameter_count()`` (for a store's run row; counted from
      ``recurrent_parameters()`` where the cell has none).

    The task is one of :mod:`stability.tasks` (``tasks/base.py``: ``batches``, ``loss``,
    ``score``, ``summarize``, ``metric``, ``split_size``, ``fixed_split``/``sample``/``encode``).

    The built-in hooks (:func:`~stability.training.hooks.default_hooks`) come first, then
    ``hooks``; among these at most one sink (:mod:`stability.training.sinks`), else the rows are
    kept by a :class:`~stability.training.sinks.MemorySink`.  ``fit(resume=True)`` continues from
    the sink's checkpoint: weights, optimizer state, RNG, learning-rate schedule, cadence, data
    stream position and hook states (by ``state_key``) are restored and the rows logged after
    the checkpoint's step are discarded, so the resumed run trains exactly as if it had not stopped.

    ``static_step`` (:func:`stability.training.graphed.step_plan`): None, the default, trains a CUDA run
    through a :class:`~stability.training.graphed.StaticStep` captured as one CUDA graph where it can be
    (``train.cuda_graphs``), any other run through :meth:`_train_step`; True trains through a StaticStep
    wherever it can (on the CPU uncaptured: the tests' way to run the wiring); False never.
    """

    def __init__(self, model: nn.Module, task, config: RunConfig | TrainConfig, *, hooks=(),
                 progress: Callable[[dict], None] | None = None, static_step: bool | None = None):
        self.config, self.task = config, task
        train = config.train if isinstance(config, RunConfig) else config
        self.device = resolve_device(train.device)
        devices.check_dtype(self.device, train.dtype)
        self.dtype = torch.float64 if train.dtype == "float64" else torch.float32
        self.train = train.with_epochs_as_steps(task.split_size("train"))
        apply_fp32_precision()  # before anything runs on the device: core/precision.py, core/determinism.py
        use_deterministic_algorithms(train.deterministic)
        self.model = model.to(device=self.device, dtype=self.dtype)
        self.recurrent = self.model.cell.recurrent_parameters()
        if self.train.freeze_recurrent:
            for parameter in self.recurrent:
                parameter.requires_grad_(False)
        plan = step_plan(self.model, task, self.train, self.device, static_step)
        self._static, self._capture, self._step_note = None, plan.capture, plan.note
        if plan.static:  # its optimizer (capturable where captured), schedule and window are the run's
            self._static = StaticStep(self.model, task, self.train)
            self.optimizer, self.schedule, self.window = (self._static.optimizer, self._static.schedule,
                                                          self._static.window)
        else:
            self.optimizer = build_optimizer(self.model, train)
            self.schedule = LearningRate(self.optimizer, self.train)
            self.window = StepWindow(task, self.train.resolved_log_every())  # loss, score, finiteness between logs
        # a static step's readings over static buffers too, captured after the step (graphed_readings.py)
        evaluator_class, probe_class = (StaticEvaluation, StaticProbe) if plan.static else (Evaluator, ProbeBatch)
        self.evaluator = evaluator_class(task, train, self.device, self.dtype)
        probe_batch = next(iter(compact_batches(task, "val", self.train.probe_examples)))
        probe = probe_class(self.model, task.loss, *batch_on(task, probe_batch, self.device, self.dtype))
        if plan.capture:
            for reading in (self.evaluator, probe):
                reading.capture_into(self._static.pool)
        self.hooks, self.sink = _with_one_sink([*default_hooks(probe, progress, window=self.window), *hooks])
        self.step, self.status, self.error = 0, "completed", None
        self.cadence = Cadence()
        self._every = (self.train.resolved_log_every(), self.train.resolved_eval_every(),
                       self.train.resolved_probe_every())
        self._next_eval, self._next_probe = self._every[1], self._every[2]
        self._scalars: list[tuple] = []
        self._series: list[tuple] = []
        self._started = time.time()
        self._carried = None  # a stateful task's hidden state, carried between batches
        self._stopping = False
        self._spectrum: tuple | None = None  # (step, sv/* scalars, sigma) of W, see spectrum()

    # ------------------------------------------------------------ for hooks
    def spectrum(self, with_radius: bool = False) -> tuple[dict[str, float], np.ndarray]:
        """``spectrum_metrics`` of the cell's W at this step (its ``sv/*`` scalars, every singular value),
        computed once a step however many hooks read it: W does not change between optimizer steps."""
        cached = self._spectrum
        if cached is None or cached[0] != self.step or (with_radius and names.SPECTRAL_RADIUS not in cached[1]):
            metrics, sigma = spectrum_metrics(self.model.cell.recurrent_matrix(), with_radius=with_radius)
            self._spectrum = cached = (self.step, metrics, sigma)
        return cached[1], cached[2]

    def log(self, name: str, value) -> None:
        """Log the scalar ``value`` as the row ``name`` at the current step, written at the next flush."""
        self._scalars.append((self.step, time.time(), name, float(value)))

    def log_series(self, name: str, values) -> None:
        """Log ``values`` as the series ``name`` at the current step (a row per component)."""
        now = time.time()
        self._series.extend((self.step, now, name, i, float(v)) for i, v in enumerate(values))

    # The names a hook logged with before ``log``/``log_series`` (a hook of yours keeps working); the store's
    # ``record(run_id)`` is a RunRecord, so a row is logged, never recorded.
    record = log
    record_series = log_series

    def pending(self) -> dict[str, float]:
        """The scalars logged since the last flush, by name (the latest of each)."""
        return {name: value for _, _, name, value in self._scalars}

    def flush(self) -> None:
        """Hand the rows logged since the last flush to the sink (kept here if it raises)."""
        self.sink.write(self.step, self._scalars, self._series)
        self._scalars = []
        self._series = []

    def stop(self, status: str, error: str | None = None) -> None:
        """End the run with ``status`` after the current step (a hook's early stop)."""
        self.status, self.error, self._stopping = status, error, True

    def elapsed(self) -> float:
        """Training time of this run so far, across resumes."""
        return time.time() - self._started

    def describe(self) -> dict:
        """What the pages show about the run besides its rows (a store's sink writes it at the start)."""
        model, task, cell = self.model, self.task, self.model.cell
        counter = getattr(cell, "recurrent_parameter_count", None)
        recurrent = counter() if counter is not None else _real_numbers(cell.recurrent_parameters())
        device = _device_text(self.device) + (f" · {self._step_note}" if self._step_note else "")
        return dict(device=device, total_params=_real_numbers(model.parameters()),
                    recurrent_params=recurrent, baseline=getattr(task, "baseline", None),
                    baseline_label=getattr(task, "baseline_label", None), metric=task.metric,
                    total_steps=self.train.steps)

    # ------------------------------------------------------------ the loop
    def fit(self, resume: bool = False) -> TrainResult:
        """Train to ``train.steps`` (or until a hook stops the run); return how it ended.

        Whatever a step or a hook raises reaches every hook's ``on_exception`` once, the rows
        recorded before it are flushed, and it propagates (the run's status is the caller's then).
        """
        if resume:
            self._restore()
        try:
            self._run(resume)
        except BaseException as error:
            self._fail(error)
            raise
        return TrainResult(self.status, self.error, getattr(self.sink, "run_id", None), self.sink)

    def _run(self, resumed: bool) -> None:
        self.sink.begin(self, resumed)
        batches = compact_batches(self.task, "train", self.train.batch_size)
        for _ in range(self.step):  # the same data stream position as when the checkpoint was taken
            next(batches)
        on_step, on_log = self._hooks_with("on_step"), self._hooks_with("on_log")
        train_step = self._train_step if self._static is None else self._static_step
        self.model.train()
        if not resumed and self.step < self.train.steps:  # step 0's training rows, stored first (Note [Step 0 first])
            first = next(batches)
            batches = itertools.chain([first], batches)
            for name, value in step_zero_readings(self.model, self.task, first, self.device, self.dtype,
                                                  self.recurrent).items():
                self.log(name, value)
            self.flush()
        for hook in self._hooks_with("on_start"):
            hook.on_start(self, resumed)
        self.flush()
        while self.step < self.train.steps and not self._stopping:
            self.step += 1
            try:
                result = train_step(next(batches))
                if result is None:
                    break
                for hook in on_step:
                    hook.on_step(self, result)
                if self.cadence.log:
                    for hook in on_log:
                        hook.on_log(self, result)
                    self._advance_cadence()
                    self.flush()
            except Exception:
                if self._diverged_earlier():  # this step failed on the NaNs of a divergence not yet read
                    break
                raise
        self._diverged_earlier()  # the steps since the last log step (a stop between log steps)
        self.flush()  # the rows of a diverged step
        for hook in self._hooks_with("on_end"):
            hook.on_end(self)
        self.flush()
        self.sink.finish(self.status, self.error)

    # Note [Step 0 first]
    # -------------------
    # A run's first point is its step-0 ``train/loss`` (training/step_zero.py): one forward and backward
    # on the first batch, ~25 ms for the default run on a CPU. The other step-0 readings, the hooks' at
    # on_start (the evaluation on the fixed sets, the float64 probe, W's singular values), took ~0.2 s
    # more, and the page waited for them because step 0 was stored in one transaction. So step 0's
    # training rows are flushed on their own, before on_start, and the hooks' step-0 rows follow in a
    # second transaction: step 0 is the one step stored in two, and the shared look of a live page
    # reads the run in full again while step 0 is the last step it has (stability/live/tail.py, Note
    # [Step 0 again]) so that it misses neither. on_start therefore runs after step 0's training readings: a hook that would change the
    # starting weights belongs before the model is handed to the trainer.

    def _fail(self, error: BaseException) -> None:
        """Every hook sees ``error`` once; then the rows recorded so far are flushed.  What fails
        here is noted on ``error``, which the caller gets."""
        for hook in self._hooks_with("on_exception"):
            try:
                hook.on_exception(self, error)
            except Exception as other:  # noqa: BLE001 - the run's own error is the one to raise
                error.add_note(f"{hook.state_key}.on_exception raised {type(other).__name__}: {other}")
        try:
            self.flush()
        except Exception as other:  # noqa: BLE001
            error.add_note(f"the rows recorded since the last flush could not be written: "
                           f"{type(other).__name__}: {other}")

    def _hooks_with(self, method: str) -> list:
        return [hook for hook in self.hooks if overrides(hook, method)]

    def _train_step(self, batch) -> StepResult | None:
        """One optimizer step; None when the run diverged.  Nothing is read from the device but at a
        log step, once (Note [One read per log step] in :mod:`stability.training.window`): a loss or
        gradient that is not finite is found there and recorded at the step it happened."""
        model, dtype, device = self.model, self.dtype, self.device
        x, y = batch_on(self.task, batch, device, dtype)
        h0 = model.cell.initial_state(x.shape[0], dtype=dtype, device=device)
        if self._carried is not None and self._carried.shape == h0.shape:
            h0 = self._carried
        h0_probe = torch.zeros_like(h0).requires_grad_()  # its gradient is dL/dh0
        pred, h_last = model(x, h0 + h0_probe)
        self._carried = h_last.detach() if getattr(self.task, "stateful", False) else None
        loss = self.task.loss(pred, y)
        penalty = model.cell.penalty()
        objective = loss + penalty
        self.window.add(self.step, loss, objective, pred.detach(), y)
        self.optimizer.zero_grad(set_to_none=True)
        objective.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        # Every step: a norm that is not finite only when the gradient is not; logged values use stable_norm.
        self.window.add_norm(step_norm(grads))
        self.cadence = self._cadence()
        total_norm = stacked_norm(grads) if self.cadence.log else None  # before any clipping
        if self.train.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.train.clip_grad_norm)
        self.optimizer.step()
        with torch.no_grad():
            model.cell.after_optimizer_step()
        self.schedule.after_step(self.step)
        penalty = penalty.detach() if torch.is_tensor(penalty) else penalty
        window = None
        if self.cadence.log:  # the one read of this window: its rows, the norm before clipping, the penalty
            window = self.window.read({"total_norm": total_norm, "penalty": penalty})
            self.window.reset()
            if window.diverged is not None:
                return self._diverged(*window.diverged)
        return StepResult(self.step, loss.detach(), penalty, pred.detach(), y, h0_probe.grad,
                          None if window is None else window.extras["total_norm"], window)

    def _static_step(self, batch) -> StepResult | None:
        """:meth:`_train_step` through the run's :class:`~stability.training.graphed.StaticStep`: eager for
        :data:`~stability.training.graphed.WARMUP_STEPS` steps, then (where the plan captures) captured once
        and replayed; the same reads at a log step, the same :class:`StepResult` (its tensors the static
        step's, overwritten by the next step)."""
        static = self._static
        if self._capture and not static.captured and static.eager_steps >= WARMUP_STEPS:
            try:
                static.capture()
            except Exception as error:
                error.add_note("capturing the training step as one CUDA graph failed; train.cuda_graphs=false "
                               "(--no-cuda-graphs; `stability resume ID --no-cuda-graphs` for a stored run) trains "
                               "it eagerly")
                raise
        static.step(self.step, batch)
        self.cadence = self._cadence()
        penalty, window = static.penalty, None
        if self.cadence.log:  # the one read of this window, as _train_step's
            window = self.window.read({"total_norm": static.total_norm, "penalty": penalty})
            self.window.reset()
            if window.diverged is not None:
                return self._diverged(*window.diverged)
        return StepResult(self.step, static.loss, penalty, static.pred, static.y, static.h0_grad,
                          None if window is None else window.extras["total_norm"], window)

    def _diverged(self, step: int, rows: list[tuple[str, float]],
                  before: list[tuple[int, tuple[str, float]]] = ()) -> None:
        """End the run as diverged at ``step`` (the one whose loss or gradient was not finite), with
        ``rows``; ``before``: rows of the window's earlier steps (their gradient norms), each at its step."""
        for earlier, (name, value) in before:
            self.step = earlier
            self.log(name, value)
        self.step = step
        for name, value in rows:
            self.log(name, value)
        self.stop("diverged", f"loss or gradient became non-finite at step {step}")
        return None

    def _diverged_earlier(self) -> bool:
        """Whether a step of the window not read yet diverged; if so the run ends there (one read)."""
        if not len(self.window) or self.status == "diverged":
            return False
        window = self.window.read()
        if window.diverged is None:
            return False
        self.window.reset()
        self._diverged(*window.diverged)
        return True

    def _cadence(self) -> Cadence:
        step, steps = self.step, self.train.steps
        if step % self._every[0] and step != steps:
            return Cadence()
        last = step == steps
        return Cadence(log=True, eval=step >= self._next_eval or last, probe=step >= self._next_probe or last,
                       last=last)

    def _advance_cadence(self) -> None:
        _, eval_every, probe_every = self._every
        if self.cadence.eval:
            self._next_eval = (self.step // eval_every + 1) * eval_every
        if self.cadence.probe:
            self._next_probe = (self.step // probe_every + 1) * probe_every

    # ------------------------------------------------------------ checkpoints
    def _config_dict(self) -> dict:
        config = self.config
        return config.to_dict() if isinstance(config, RunConfig) else {"train": asdict(config)}

    def save_checkpoint(self):
        """Everything :meth:`fit` needs to continue exactly from this step, written atomically where
        the sink keeps checkpoints; returns that path (None, writing nothing, where it keeps none)."""
        path = self.sink.checkpoint_path()
        if path is None or self.window.read().diverged is not None:  # no checkpoint of a diverged model
            return None
        rng = {"torch": torch.get_rng_state()}
        device_rng = devices.rng_state(self.device)  # a GPU's own generator (noisy h0 draws there)
        if device_rng is not None:
            rng[self.device.type] = device_rng
        checkpoints.save_checkpoint(
            {"config": self._config_dict(), "step": self.step, "model": self.model.state_dict(),
             "optimizer": self._optimizer_state(), "schedule": self.schedule.state_dict(), "rng": rng,
             "carried": self._carried, "elapsed": self.elapsed(), "cadence": [self._next_eval, self._next_probe],
             "hooks": {hook.state_key: hook.state_dict() for hook in self.hooks}}, path)
        return path

    def _optimizer_state(self) -> dict:
        """The optimizer's state dict in its plain form (Note [Capturable state in a checkpoint] in
        :mod:`stability.training.graphed`): what any run, graphed, eager or on the CPU, resumes from."""
        return self.optimizer.state_dict() if self._static is None else self._static.optimizer_state()

    def _restore(self) -> None:
        path = self.sink.checkpoint_path()
        if path is None:
            raise ResumeError(f"{self.sink.label} keeps no checkpoints to resume from "
                              "(give its sink a checkpoint folder)")
        state = checkpoints.read_for_resume(path, self.sink.label, self._config_dict())
        self.model.load_state_dict(state["model"])
        if self._static is None:
            self.optimizer.load_state_dict(state["optimizer"])
        else:  # before its capture: the rates into the tensors the graph will read
            self._static.load_optimizer_state(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["rng"]["torch"])
        if self.device.type in state["rng"]:
            devices.set_rng_state(self.device, state["rng"][self.device.type])
        carried = state["carried"]
        self._carried = None if carried is None else carried.to(device=self.device, dtype=self.dtype)
        self._next_eval, self._next_probe = state["cadence"]
        self._started = time.time() - state["elapsed"]
        saved = checkpoints.hook_states(state, self.hooks)
        for hook in self.hooks:
            if hook.state_key in saved:
                hook.load_state_dict(saved[hook.state_key])
        self.step = state["step"]


def _with_one_sink(hooks: list[Hook]) -> tuple[list[Hook], Sink]:
    """``hooks`` with a :class:`MemorySink` added where none is among them, and the sink; a
    ValueError (one line) for two sinks or two hooks with the same ``state_key``."""
    sinks = [hook for hook in hooks if isinstance(hook, Sink)]
    if len(sinks) > 1:
        raise ValueError(f"a run writes to one sink; got {', '.join(type(sink).__name__ for sink in sinks)}")
    if not sinks:
        sinks.append(MemorySink())
        hooks = [*hooks, sinks[0]]
    seen = set()
    for hook in hooks:
        if hook.state_key in seen:
            raise ValueError(f"two hooks have the state key {hook.state_key!r}; a checkpoint could not tell "
                             "their states apart (give one its own state_key)")
        seen.add(hook.state_key)
    return hooks, sinks[0]


def _device_text(device: torch.device) -> str:
    """The device a run trains on, as its run row keeps it: ``describe_device``, then on a GPU the
    float32 precision (core/precision.py), and ``deterministic`` where torch is switched to
    deterministic algorithms: read from torch's settings, so it says what this process runs."""
    parts = [describe_device(device)]
    if device.type == "cuda":
        parts.append(describe_precision())
    settings = deterministic_settings()
    if settings["algorithms"]:  # all three of the switch, or what of it is missing
        missing = [name for name, ok in (("cudnn.deterministic", settings["cudnn"]),
                                         (CUBLAS_WORKSPACE_ENV, settings["cublas_workspace"])) if not ok]
        parts.append("deterministic" + (f" (without {', '.join(missing)})" if missing else ""))
    return "; ".join(parts)


def _real_numbers(parameters) -> int:
    """Real numbers in ``parameters`` (a complex entry counts two)."""
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in parameters)
