"""The copy memory problem (spectral paper §7.1; KRU paper §4.1).

Alphabet ``{0, ..., 9}``: 0 is the blank, 1-8 are the symbols, 9 the
delimiter (the KRU paper's labelling; the spectral paper's ``a_8`` blank and
``a_9`` delimiter are the same roles). With time lag ``T`` a sequence has
``T + 20`` steps, 0-based:

- steps ``0 .. 9``: ten symbols drawn uniformly, with replacement, from 1-8;
- steps ``10 .. T + 8``: ``T - 1`` blanks;
- step ``T + 9``: the delimiter;
- steps ``T + 10 .. T + 19``: ten blanks, during which the network must
  output the ten symbols in order.

The target is blank on the first ``T + 10`` steps and the ten symbols on the
last ten. This is the alignment of the KRU paper and, in 1-based indices, of
the spectral paper (``x_{T+10} = a_9``); the first symbol is due on the step
right after the delimiter is seen. Example with ``T = 3`` (23 steps)::

    step     0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22
    input    3 1 4 1 5 2 6 5 3 5  0  0  9  0  0  0  0  0  0  0  0  0  0
    target   0 0 0 0 0 0 0 0 0 0  0  0  0  3  1  4  1  5  2  6  5  3  5

Inputs are one-hot vectors of size 10 (``input_size = 10``); the network
predicts 9 classes (``output_size = 9``: blank and the 8 symbols; the
delimiter is never a target). The loss and the metric are the mean per-step
cross-entropy in nats over all ``T + 20`` steps. The memoryless strategy
predicts blank with certainty for the first ``T + 10`` steps (cost 0) and a
uniform guess over the 8 symbols for the last ten (cost ``ln 8`` each), for an
average of ``10 ln 8 / (T + 20)`` (KRU §4.1).

The option ``seq_len`` is the papers' time lag ``T``; ``task.seq_len`` is
the number of steps ``T + 20`` the network sees, and ``task.lag`` is ``T``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .base import Arrays, Batch, check_count, one_hot
from .synthetic import SyntheticTask

BLANK, DELIMITER = 0, 9
ALPHABET = 10
SYMBOLS = 8
COPY_LENGTH = 10


class CopyTask(SyntheticTask):
    name = "copy"
    summary = "Recall 10 symbols after a lag of T blank steps"
    paper = "Zhang et al. 2018 (Spectral-RNN) §7.1; KRU §4.1"
    equations = (r"\text{baseline: } \frac{10 \ln 8}{T + 20} \text{ nats per step}",)
    option_help = {"seq_len": "the lag T of blanks between the symbols and the delimiter"}
    metric = "cross_entropy"
    target_mode = "every"
    description = (
        "The copy memory problem: ten symbols drawn from an alphabet of eight, then a lag of "
        "T blank steps ending in a delimiter, after which the network must write the ten "
        "symbols back in order; the loss is the cross-entropy of every one of the T + 20 "
        "outputs. A memoryless network can only output blanks and guess the last ten "
        "symbols, which costs 10 ln 8 / (T + 20) nats per step. It tests exact long-term "
        "memory rather than summing. In the Spectral-RNN paper (Zhang et al. 2018, §7.1, "
        "Fig. 2) Spectral-RNN does best at every lag while IRNN and LSTM sit at the "
        "memoryless baseline for large T. In the KRU paper (§4.1, Fig. 1, T = 1000 and 2000) "
        "KRU with a fixed random unitary recurrent matrix solves it faster than FC uRNN "
        "while the other models stay stuck at the baseline; the authors conclude that a "
        "unitary initialisation alone solves this task."
    )

    def __init__(
        self,
        *,
        seed: int = 0,
        seq_len: int = 100,
        train_size: int | None = None,
        val_size: int = 1000,
        test_size: int = 1000,
    ):
        self.lag = check_count("seq_len (the time lag T)", seq_len, minimum=1)
        super().__init__(
            seed=seed,
            seq_len=self.lag + 2 * COPY_LENGTH,
            input_size=ALPHABET,
            output_size=SYMBOLS + 1,
            train_size=train_size,
            val_size=val_size,
            test_size=test_size,
        )
        self.baseline = COPY_LENGTH * math.log(SYMBOLS) / self.seq_len
        self.baseline_label = "memoryless: blanks, then uniform guesses (10 ln 8 / (T + 20))"

    def sample(self, generator: np.random.Generator, count: int) -> Arrays:
        return {"symbols": generator.integers(1, SYMBOLS + 1, (count, COPY_LENGTH))}

    def encode(self, arrays: Arrays) -> Batch:
        symbols = torch.from_numpy(arrays["symbols"])  # (B, 10)
        tokens = torch.full((len(symbols), self.seq_len), BLANK, dtype=torch.long)  # (B, T + 20)
        tokens[:, :COPY_LENGTH] = symbols
        tokens[:, self.lag + COPY_LENGTH - 1] = DELIMITER
        targets = torch.full_like(tokens, BLANK)
        targets[:, -COPY_LENGTH:] = symbols
        x = one_hot(tokens, ALPHABET)  # (B, T + 20, 10)
        return x, targets
