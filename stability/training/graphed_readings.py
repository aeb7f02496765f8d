"""The readings between a graphed run's steps as CUDA graphs too (issue 32, item 2): the evaluation on the
fixed sets and the float64 probe.

    probe = StaticProbe(model, task.loss, x, y)          # a ProbeBatch over static buffers
    evaluator = StaticEvaluation(task, train, device, dtype)
    probe.capture_into(pool_of)                         # CUDA: capture at the next call, in the step's pool
    evaluator.capture_into(pool_of)

A graphed training step (:mod:`stability.training.graphed`) takes a few milliseconds on a GPU; the readings
a run takes between steps were written for an eager step twenty times longer. Each runs one Python op per
kernel, and a launch costs the host about as much as a small kernel costs the GPU, so at the default
cadence (log every 10 steps, evaluate and probe every 100) the evaluation (a forward over the fixed
validation and training sets: ~500 ops each at T = 100) and the probe (a float64 forward and backward
through time, and another for ‖A_h‖: ~1,200 ops) would cost about a third of the graphed run's time
(``benchmarks/reading_launches.py`` counts them). Captured, each is one launch.

What is captured, and what is not:

* the evaluation of ``"val"`` and ``"train"`` on their fixed sets (:class:`StaticEvaluation`): the sets'
  batches held on the device from the first call (the sets are fixed: the same examples every time), each
  batch's loss and score written into a static vector, read once as before. The test split at the last
  step (``whole``), a stateful task and a task that scores on the host stay eager, as do sets larger
  than :data:`MAX_HELD_BYTES`.
* the probe's ``h0_norm()`` and ``through_time()`` with ``output_h0_norm()`` (:class:`StaticProbe`): the
  float64 copy's weights are still copied in by ``sync()``, eagerly (a copy a parameter); the rest is one
  graph each. ``through_depth()`` (the mlp cell's layers) stays eager.
* the singular values of W and the gates stay eager: a few ops at a log step.

Note [Capturing a reading]
--------------------------
A reading is captured at its second call: its first call ran eagerly (step 0's readings, in ``on_start``),
which is the warm-up a capture needs (the libraries' handles and workspaces, autograd's streams), and
only after the training step itself is captured (``pool_of()`` answers once it is). A capture records the
kernels without running them, so the call that captures then replays once. Everything is captured into
the training step's memory pool: the step, the evaluation and the probe take turns on one stream, so
they share their temporaries as the eager run does and the memory budget's peak (parameters, probe, and
the largest of step, evaluation and probe pass: :mod:`stability.admission.budget`) holds for a graphed
run too. That sharing is safe because a reading's outputs are read right after its replay, before the
next replay of the step can write where they lie (the PyTorch notes' condition for sharing a pool: the
graphs never run at once, and what one leaves is not read after another ran). A capture that fails
leaves that reading eager for the rest of the run, with a warning (``capture_note``), rather than failing
the run: a reading is worth less than the run.

On the CPU nothing is captured: the static bodies run eagerly, which is how the tests hold them to the
eager readings bit for bit (``Trainer(..., static_step=True)``).
"""
from __future__ import annotations

import math
import warnings
from typing import Callable

import torch

from .batches import batch_on, compact_batches, take, to_device
from .evaluation import Evaluator
from .graphed import on_side_stream, side_stream
from .probes import ProbeBatch
from .window import read_numbers, scoring

MAX_HELD_BYTES = 64 * 2**20  # the fixed sets' batches a StaticEvaluation keeps on the device, at most
PoolOf = Callable[[], object]  # the training graph's memory pool, or None before the step is captured


class _Captured:
    """One reading's body, run eagerly until it is captured (Note [Capturing a reading]), then replayed."""

    def __init__(self, name: str, body: Callable[[], None], device: torch.device):
        self.name, self.body, self.device = name, body, device
        self.side = side_stream(device)  # where its eager calls run on CUDA, as a warm-up must
        self.calls = 0
        self.graph = None
        self.pool_of: PoolOf | None = None
        self.note: str | None = None  # why it stays eager, where its capture failed

    def run(self) -> None:
        if self.graph is None and self._capturable():
            self._capture()
        if self.graph is not None:
            self.graph.replay()
        else:
            with on_side_stream(self.side):
                self.body()
        self.calls += 1

    def _capturable(self) -> bool:
        return (self.pool_of is not None and self.note is None and self.calls >= 1
                and self.device.type == "cuda" and self.pool_of() is not None)

    def _capture(self) -> None:
        """Record the body (nothing runs: :meth:`run` replays it then); where that fails, the note says why."""
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.current_stream(self.device)
        try:
            with torch.cuda.graph(graph, pool=self.pool_of()):
                self.body()
        except Exception as error:  # noqa: BLE001 - the reading stays eager (Note [Capturing a reading])
            # torch.cuda.graph's exit ends the capture before it puts the caller's stream back: where ending
            # it raises (a capture the body invalidated), the capture's side stream is left current
            torch.cuda.set_stream(stream)
            first = (str(error).strip().splitlines() or [""])[0]
            self.note = f"the {self.name} stays eager: its capture failed ({type(error).__name__}: {first[:160]})"
            warnings.warn(self.note, RuntimeWarning, stacklevel=4)
            torch.cuda.synchronize(self.device)
            return
        self.graph = graph


class StaticProbe(ProbeBatch):
    """:class:`~stability.training.probes.ProbeBatch` whose ``h0_norm()`` and ``through_time()`` (with
    ``output_h0_norm()``, computed in the same body) copy its own tensor readings (``h0_norm_tensor`` ...)
    into static buffers, so on the CPU the same numbers bit for bit; on CUDA each body is captured at its second call
    (:meth:`capture_into`). ``sync()`` stays the eager copy of the weights, and a reading is of the weights
    last synced, as the ProbeBatch's."""

    def __init__(self, model, loss, x, y, max_output_directions: int = 16):
        super().__init__(model, loss, x, y, max_output_directions)
        self._directions = None  # built at the first (eager) call, outside any capture
        self._h0_out = torch.zeros((), dtype=torch.float64, device=self.device)
        self._norms = torch.zeros(self.x.shape[1] + 1, dtype=torch.float64, device=self.device)
        self._output = torch.zeros((), dtype=torch.float64, device=self.device)
        self._h0 = _Captured("probe's dL/dh0", self._h0_body, self.device)
        self._full = _Captured("probe through time", self._full_body, self.device)
        self._synced = 0  # sync() calls so far; through_time's body ran at _full_synced
        self._full_synced = -1

    def capture_into(self, pool_of: PoolOf) -> None:
        """Capture each body at its next call once ``pool_of()`` answers (the training graph's pool)."""
        self._h0.pool_of = self._full.pool_of = pool_of

    @property
    def capture_notes(self) -> list[str]:
        """Why a reading stays eager after a failed capture."""
        return [part.note for part in (self._h0, self._full) if part.note]

    def sync(self) -> None:
        super().sync()
        self._synced += 1

    def h0_norm(self) -> float:
        self._h0.run()
        return self._h0_out.item()

    def through_time(self):
        self._run_full()
        return self._norms.cpu().numpy().copy()  # not a view of the buffer the next call writes (on the CPU)

    def output_h0_norm(self, seed: int = 0) -> float:
        if seed != 0:  # other directions than the captured ones (seed 0's): the eager reading
            return super().output_h0_norm(seed)
        if self._full_synced != self._synced:  # not computed at these weights by through_time yet
            self._run_full()
        return self._output.item()

    def _run_full(self) -> None:
        self._full.run()
        self._full_synced = self._synced

    def _h0_body(self) -> None:
        self._h0_out.copy_(self.h0_norm_tensor())

    def _full_body(self) -> None:
        self._norms.copy_(self.through_time_tensor())
        output, self._directions = self.output_h0_norm_tensor(0, self._directions)  # drawn at the eager call
        self._output.copy_(output)


class StaticEvaluation(Evaluator):
    """:class:`~stability.training.evaluation.Evaluator` whose ``split(model, "val" | "train")`` runs over the
    fixed sets' batches held on the device from its first call, each batch's loss and score written into
    static vectors: the same ops as the Evaluator's, so on the CPU the same numbers bit for bit; on CUDA
    captured at the second call of each split (:meth:`capture_into`). ``whole`` splits (the test set at
    the last step), stateful tasks, tasks that score on the host and sets over :data:`MAX_HELD_BYTES` are
    evaluated as the Evaluator does."""

    def __init__(self, task, train, device: torch.device, dtype: torch.dtype):
        super().__init__(task, train, device, dtype)
        self._splits: dict[str, _HeldSplit] = {}
        self._pool_of: PoolOf | None = None
        self._static = not getattr(task, "stateful", False) and scoring(task) != "own"

    def capture_into(self, pool_of: PoolOf) -> None:
        self._pool_of = pool_of
        for held in self._splits.values():
            held.part.pool_of = pool_of

    @property
    def capture_notes(self) -> list[str]:
        return [held.part.note for held in self._splits.values() if held.part.note]

    def split(self, model, split: str, whole: bool = False) -> dict[str, float]:
        if whole or split not in ("val", "train") or not self._static:
            return super().split(model, split, whole)
        held = self._splits.get(split)
        if held is None:
            batches = self._held_batches(split)
            if batches is None:
                return super().split(model, split, whole)
            held = self._splits[split] = _HeldSplit(self, model, split, batches)
            held.part.pool_of = self._pool_of
        return held.evaluate(model)

    def _held_batches(self, split: str) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The split's fixed batches on the device, as :meth:`Evaluator.split` makes them each time; None
        where they would hold more than :data:`MAX_HELD_BYTES`."""
        if split == "train":
            batches = [to_device(*batch, self.device, self.dtype) for batch in self.train_batches]
        else:
            batches = [batch_on(self.task, batch, self.device, self.dtype) for batch in
                       take(compact_batches(self.task, split, self.batch_size), math.ceil(self.examples / self.batch_size))]
        held = sum(x.numel() * x.element_size() + y.numel() * y.element_size() for x, y in batches)
        return batches if batches and held <= MAX_HELD_BYTES else None


class _HeldSplit:
    """One fixed set's batches on the device, and each batch's loss and score (:meth:`Evaluator.batch_values`)
    written into static vectors, allocated at the first (eager) call, outside any capture."""

    def __init__(self, evaluator: StaticEvaluation, model, split: str, batches):
        self.evaluator, self.model, self.batches = evaluator, model, batches
        self.counts = [y.numel() for _, y in batches]
        self.losses = self.scores = None
        self.part = _Captured(f"evaluation of {split}", self._body, evaluator.device)

    def _body(self) -> None:
        with torch.inference_mode():
            for index, (x, y) in enumerate(self.batches):
                pred, _ = self.model(x, None)
                loss, score = self.evaluator.batch_values(pred, y)
                if self.losses is None:
                    self.losses = loss.new_empty(len(self.batches))
                    self.scores = None if score is None else score.new_empty(len(self.batches))
                self.losses[index:index + 1].copy_(loss)
                if score is not None:
                    self.scores[index:index + 1].copy_(score)

    def evaluate(self, model) -> dict[str, float]:
        if model is not self.model:
            raise ValueError("a StaticEvaluation evaluates the model it first evaluated")
        was_training = model.training
        model.eval()
        try:
            self.part.run()
        finally:
            model.train(was_training)
        return self.evaluator.summary(read_numbers([self.losses] + ([] if self.scores is None else [self.scores])),
                                      self.counts)
