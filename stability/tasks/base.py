"""The task contract every sequence task keeps, and the batching shared by all of them.

Shapes (B batch, T time, I input_size, C output_size):

==================  ===================  ======================  =====================
target_mode         x                    y                       pred for loss/score
==================  ===================  ======================  =====================
"last", mse         float32 (B, T, I)    float32 (B, 1)          (B, 1)
"last", classes     float32 (B, T, I)    int64 (B,)              (B, C) logits
"every", classes    float32 (B, T, I)    int64 (B, T)            (B, T, C) logits
==================  ===================  ======================  =====================

The model maps ``x`` to outputs of shape (B, T, C); for ``target_mode ==
"last"`` it passes ``outputs[:, -1]`` to :meth:`Task.loss` and
:meth:`Task.score`, for ``"every"`` the whole ``outputs``.

Every random draw comes from a numpy Generator seeded with ``(seed, stream)``
where the stream names the split, so the training stream, the validation set
and the test set are independent of each other, and the same seed gives the
same batches on every call and every machine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping

import numpy as np
import torch
import torch.nn.functional as F

from ..core.errors import check_choice
from ..core.metric_names import is_loss_metric

Arrays = Mapping[str, np.ndarray]
Batch = tuple[torch.Tensor, torch.Tensor]

SPLITS = ("train", "val", "test")
HIGHER_IS_BETTER = {
    "mse": False,
    "accuracy": True,
    "cross_entropy": False,
    "perplexity": False,
    "bpc": False,
}
# Each random stream of a task has its own generator: seeding with (seed, id) keeps them apart.
_STREAMS = {"train": 0, "val": 1, "test": 2, "pool": 3, "shuffle": 4, "split": 5, "permutation": 6}


def rng(seed: int, stream: str) -> np.random.Generator:
    """The numpy Generator of one named random stream of a task seeded with ``seed``."""
    return np.random.default_rng([seed, _STREAMS[stream]])


class Task:
    """A sequence task: sizes, loss, metric, memoryless baseline, and seeded batches.

    Subclasses set the class attributes below and implement :meth:`encode`
    plus :meth:`fixed_split` (and :meth:`sample` for endless synthetic
    training streams), or override :meth:`batches` altogether.
    """

    name: str = ""
    paper: str = ""
    description: str = ""
    metric: str = "accuracy"  # one of HIGHER_IS_BETTER
    target_mode: str = "last"  # "last" or "every"
    stateful: bool = False  # True: consecutive train batches continue each other's streams

    # What describe() shows of the options (subclasses add theirs; merged along the MRO).
    option_help = {
        "seq_len": "sequence length T: steps the network must carry information across; longer is harder",
        "train_size": "a fixed training set of this many examples, reshuffled every epoch; "
                      "empty: fresh examples every step",
        "val_size": "examples in the fixed validation set",
        "test_size": "examples in the fixed test set",
        "data_dir": "dataset cache folder (default $STABILITY_DATA, else ~/.stability/data)",
        "download": "download missing files; false: fail, naming the URL and where to put the file",
        "progress": "callback(done, total) during downloads",
    }
    option_ranges = {"seq_len": (1, None), "train_size": (1, None), "val_size": (1, None), "test_size": (1, None)}
    form_hidden_options = ("data_dir", "download", "progress")  # folders and callbacks: not asked in a form

    def __init__(self, *, seed: int, input_size: int, output_size: int, seq_len: int):
        self.seed = seed
        self.input_size = input_size
        self.output_size = output_size
        self.seq_len = seq_len
        self.baseline: float | None = None
        self.baseline_label: str = ""

    # ---------------------------------------------------------------- data
    def batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        """Yield ``(x, y)`` batches of ``split``.

        ``train``: an endless stream (fresh samples for synthetic tasks without
        ``train_size``; otherwise the fixed training set reshuffled every epoch,
        last incomplete batch dropped). ``val`` and ``test``: the fixed,
        seeded sets, each example once, in a fixed order, last batch possibly
        smaller. Calling again starts the same sequence again.
        """
        check_split(split)
        batch_size = check_count("batch_size", batch_size)
        if split == "train" and self.fresh_training_data:
            return self._fresh(batch_size)
        arrays = self.fixed_split(split)
        if split == "train":
            return self._shuffled_forever(arrays, batch_size)
        return self._in_order(arrays, batch_size)

    @property
    def fresh_training_data(self) -> bool:
        """True when ``batches("train", ...)`` draws new examples at every step."""
        return False

    def split_size(self, split: str) -> int | None:
        """Number of examples in ``split``; None for an endless stream of fresh examples."""
        check_split(split)
        if split == "train" and self.fresh_training_data:
            return None
        return len(next(iter(self.fixed_split(split).values())))

    def fixed_split(self, split: str) -> Arrays:
        """The stored examples of ``split`` in compact form (what :meth:`encode` takes)."""
        raise NotImplementedError

    def sample(self, generator: np.random.Generator, count: int) -> Arrays:
        """``count`` fresh examples in compact form (synthetic tasks only)."""
        raise NotImplementedError

    def encode(self, arrays: Arrays) -> Batch:
        """Turn compact examples into model-ready tensors ``(x, y)``."""
        raise NotImplementedError

    def _fresh(self, batch_size: int) -> Iterator[Batch]:
        generator = rng(self.seed, "train")
        while True:
            yield self.encode(self.sample(generator, batch_size))

    def _in_order(self, arrays: Arrays, batch_size: int) -> Iterator[Batch]:
        count = len(next(iter(arrays.values())))
        for start in range(0, count, batch_size):
            yield self.encode({key: value[start : start + batch_size] for key, value in arrays.items()})

    def _shuffled_forever(self, arrays: Arrays, batch_size: int) -> Iterator[Batch]:
        count = len(next(iter(arrays.values())))
        batch_size = min(batch_size, count)  # a pool smaller than a batch is one whole batch
        generator = rng(self.seed, "shuffle")
        while True:
            order = generator.permutation(count)
            for start in range(0, count - batch_size + 1, batch_size):
                picked = order[start : start + batch_size]
                yield self.encode({key: value[picked] for key, value in arrays.items()})

    # ------------------------------------------------------------- metrics
    def loss(self, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean squared error (metric ``mse``) or mean cross-entropy in nats over every target.

        ``pred`` is ``outputs[:, -1]`` of shape (B, C) for ``target_mode
        "last"``, the whole ``outputs`` (B, T, C) for ``"every"``; see the
        module docstring for ``y``.
        """
        self._check_shapes(pred, y)
        if self.metric == "mse":
            return F.mse_loss(pred, y)
        return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), y.reshape(-1))

    def score(self, pred: torch.Tensor, y: torch.Tensor) -> float:
        """The task's metric on one batch: mse, accuracy, cross-entropy (nats), perplexity or bpc."""
        with torch.no_grad():
            if self.metric == "accuracy":
                self._check_shapes(pred, y)
                return (pred.argmax(dim=-1) == y).float().mean().item()
            return self.metric_from_loss(self.loss(pred, y).item())

    def metric_from_loss(self, mean_loss: float) -> float | None:
        """The metric implied by a mean loss (None for accuracy, which a loss does not fix).

        Perplexity is ``exp(loss)`` and bits per character ``loss / ln 2``:
        over a whole split compute them from the mean loss, never by
        averaging batch perplexities (see :meth:`summarize`).
        """
        if is_loss_metric(self.metric):
            return mean_loss
        if self.metric == "perplexity":
            return math.exp(min(mean_loss, 700.0))
        if self.metric == "bpc":
            return mean_loss / math.log(2.0)
        return None

    def summarize(self, results: Iterable[tuple[float, float, int]]) -> dict[str, float]:
        """Combine per-batch ``(loss, score, y.numel())`` into a split's ``{"loss", metric}``.

        ``y.numel()`` counts the targets a batch's mean is over, in every
        target mode, so the weighted means are exact.
        """
        total = loss_sum = score_sum = 0.0
        for loss, score, count in results:
            total += count
            loss_sum += loss * count
            score_sum += score * count
        if total == 0:
            raise ValueError("summarize needs at least one batch with targets")
        mean_loss = loss_sum / total
        value = self.metric_from_loss(mean_loss)
        return {"loss": mean_loss, self.metric: score_sum / total if value is None else value}

    @property
    def higher_is_better(self) -> bool:
        return HIGHER_IS_BETTER[self.metric]

    def info(self) -> dict[str, object]:
        """Everything the dashboard and the CLI show about a built task."""
        return {
            "name": self.name,
            "input_size": self.input_size,
            "output_size": self.output_size,
            "seq_len": self.seq_len,
            "metric": self.metric,
            "baseline": self.baseline,
            "baseline_label": self.baseline_label,
            "target_mode": self.target_mode,
            "stateful": self.stateful,
            "paper": self.paper,
            "description": self.description,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, seq_len={self.seq_len}, "
            f"input_size={self.input_size}, output_size={self.output_size}, metric={self.metric!r})"
        )

    def _check_shapes(self, pred: torch.Tensor, y: torch.Tensor) -> None:
        if self.metric == "mse":
            expected = tuple(y.shape)
        else:
            expected = (*y.shape, self.output_size)
        if tuple(pred.shape) != expected:
            hint = "outputs[:, -1]" if self.target_mode == "last" else "the outputs of every step"
            raise ValueError(
                f"{self.name}: pred has shape {tuple(pred.shape)} but y {tuple(y.shape)} "
                f"needs pred of shape {expected} (target_mode {self.target_mode!r}: pass {hint})"
            )


class StoredTask(Task):
    """A task over data held in memory: ``self.splits[split]`` maps array names to arrays."""

    splits: dict[str, Arrays]

    def fixed_split(self, split: str) -> Arrays:
        check_split(split)
        return self.splits[split]


def split_off(arrays: Arrays, count: int, generator: np.random.Generator) -> tuple[Arrays, Arrays]:
    """Split ``arrays`` into (rest, a random subset of ``count`` examples), both in original order."""
    total = len(next(iter(arrays.values())))
    if not 0 < count < total:
        raise ValueError(f"a validation split needs between 1 and {total - 1} examples, got {count}")
    chosen = np.zeros(total, dtype=bool)
    chosen[generator.choice(total, size=count, replace=False)] = True
    return (
        {key: value[~chosen] for key, value in arrays.items()},
        {key: value[chosen] for key, value in arrays.items()},
    )


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")


def check_count(name: str, value: object, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``, else a ValueError saying what was expected."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_fraction(name: str, value: object) -> float:
    """``value`` as a float strictly between 0 and 1, else a ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"{name} must be a number between 0 and 1 (exclusive), got {value!r}")
    return float(value)


def one_hot(ids: torch.Tensor, size: int) -> torch.Tensor:
    """float32 one-hot vectors of int64 ``ids``: shape ``(*ids.shape, size)``.

    Scatters into zeros rather than ``F.one_hot(...).float()``, which builds an
    int64 tensor first (8x the memory, and slow for a 10k-word vocabulary).
    """
    out = torch.zeros(*ids.shape, size)
    return out.scatter_(-1, ids.unsqueeze(-1), 1.0)


def majority_baseline(train_labels: np.ndarray, test_labels: np.ndarray) -> float:
    """Test accuracy of always predicting the most frequent training class (a memoryless predictor)."""
    majority = np.bincount(train_labels).argmax()
    return float(np.mean(test_labels == majority))
