"""The adding problem, as regression and as the ternary classification of MASO-RNN.

Regression (spectral paper §7.1; SGORNN paper §3.1, Eq. 10; KRU paper §4.2).
Each input step is ``x_t = (u_t, c_t)``: ``u_t ~ U[0, 1]`` i.i.d. and a marker
channel ``c_t`` that is 0 except at two steps, ``i`` uniform over the first half
``{0, ..., ⌊T/2⌋ - 1}`` and ``j`` uniform over the second half
``{⌊T/2⌋, ..., T - 1}`` (0-based; SGORNN's ``i ∈ [1, T/2]``, ``j ∈ (T/2, T]``).
The target is ``y = Σ_t u_t c_t = u_i + u_j``. Since ``E[y] = 1`` and
``Var[y] = 2 · 1/12 = 1/6``, always predicting 1 scores MSE ``1/6 ≈ 0.167``,
the baseline all three papers quote.

Ternary (MASO paper §5.3): ``X ∈ R^{2×T}``; the first row holds random 0/1
values, the second row 1 at two distinct positions drawn uniformly from all
``T`` steps; ``y = Σ_i 1[X_{2i} = 1] · X_{1i} ∈ {0, 1, 2}``, learned with a
3-class cross-entropy. With fair coins ``P(y) = (1/4, 1/2, 1/4)``, so the
memoryless majority-class predictor (always 1) has accuracy 1/2. On it the
MASO paper (§5.3, Fig. 4) watches ``‖A_h‖``, where ``A_h = ∂z/∂h0`` is the
slope of the last step's class scores ``z`` (the logits) in the initial state,
the affine parameter of ``h0`` that a noisy ``h0`` penalises (§5.1, Thm. 3,
eq. 9; App. F.2): the lab's ``grad/A_h_norm``, not the loss gradient
``∂L/∂h0`` (``grad/h0_norm``).
"""

from __future__ import annotations

import numpy as np
import torch

from .base import Arrays, Batch, check_count
from .synthetic import SyntheticTask


class AddingTask(SyntheticTask):
    name = "adding"
    summary = "Sum of two marked values in a length-T sequence"
    paper = "Zhang et al. 2018 (Spectral-RNN) §7.1; SGORNN §3.1; KRU §4.2"
    equations = (r"y = x_{t_1} + x_{t_2}, \quad t_1 < T/2 \le t_2", r"\text{baseline: } \hat y = 1, \ \text{MSE} = 1/6")
    metric = "mse"
    option_help = {"seq_len": "T: steps over which the two marked numbers must be carried"}
    option_ranges = {"seq_len": (2, None)}
    target_mode = "last"
    description = (
        "The adding problem: two input channels, a stream of numbers drawn uniformly from "
        "[0, 1] and a marker channel that flags one step in the first half of the sequence "
        "and one in the second; after the last step the network must output the sum of the "
        "two flagged numbers. It tests whether information survives T steps of recurrence, "
        "so it exposes vanishing and exploding gradients directly. Always answering 1 "
        "scores MSE 0.167, the line every model must beat. In the Spectral-RNN paper "
        "(Zhang et al. 2018, §7.1, Fig. 1) every model beats it at T = 30, IRNN fails and "
        "LSTM slows at T = 100, and at T = 300 only Spectral-RNN and oRNN get below it while "
        "the first-layer gradients of IRNN and LSTM vanish. In the SGORNN paper (§3.1, "
        "Figs. 1-3) SGORNN still converges at T = 5000, where FastRNN's gradients explode "
        "and VPRNN does not converge; the KRU paper (§4.2, Fig. 2) runs T = 100 to 750."
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
        super().__init__(
            seed=seed,
            seq_len=check_count("seq_len", seq_len, minimum=2),
            input_size=2,
            output_size=1,
            train_size=train_size,
            val_size=val_size,
            test_size=test_size,
        )
        self.baseline = 1.0 / 6.0
        self.baseline_label = "always predict 1"

    def sample(self, generator: np.random.Generator, count: int) -> Arrays:
        half = self.seq_len // 2
        return {
            "values": generator.random((count, self.seq_len), dtype=np.float32),
            "first": generator.integers(0, half, count),
            "second": generator.integers(half, self.seq_len, count),
        }

    def encode(self, arrays: Arrays) -> Batch:
        values = torch.from_numpy(arrays["values"])  # (B, T)
        rows = torch.arange(len(values))
        first = torch.from_numpy(arrays["first"])
        second = torch.from_numpy(arrays["second"])
        markers = torch.zeros_like(values)
        markers[rows, first] = 1.0
        markers[rows, second] = 1.0
        x = torch.stack((values, markers), dim=-1)  # (B, T, 2)
        y = (values[rows, first] + values[rows, second]).unsqueeze(1)  # (B, 1)
        return x, y


class AddingTernaryTask(SyntheticTask):
    name = "adding_ternary"
    summary = "Sum of two marked 0/1 values in a length-T sequence, as one of 3 classes"
    option_ranges = {"seq_len": (2, None)}
    paper = "MASO-RNN (ICLR 2019 submission) §5.3, Fig. 4"
    metric = "accuracy"
    target_mode = "last"
    description = (
        "The adding problem as a three-class classification: one channel of random 0/1 "
        "values, one channel marking two random steps, and the class is the sum of the two "
        "marked values (0, 1 or 2), read after the last step. Half of all sequences sum to "
        "1, so always answering 1 is right half the time: accuracy 0.5 is the memoryless "
        "line. The MASO-RNN paper (§5.3, Fig. 4, T = 100) trains an identity-initialised "
        "ReLU RNN of 128 units on it to watch what noise in the initial hidden state does. "
        "Training with h0 ~ N(0, sigma^2 I), sigma small, adds in expectation an explicit penalty on A_h "
        "(§5.1, Thm. 3, eq. 9): the slope of the last step's three class scores z (the "
        "logits, before the softmax) in the initial state, A_h = dz/dh0, the affine "
        "parameter of h0 in the MASO formula of the network (§5.2 reads it as the gradient "
        "of the RNN output with respect to h0). It is logged as grad/A_h_norm; it is not the "
        "loss gradient dL/dh0 of grad/h0_norm. Larger noise shrinks both the norm of A_h and "
        "the norm of the recurrent weight's gradient dL/dW_r, which the penalty does not "
        "touch directly, and too much noise slows learning (Fig. 4); the regression version, "
        "the adding task, shows the same effect (App. E.1, Fig. 10)."
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
        super().__init__(
            seed=seed,
            seq_len=check_count("seq_len", seq_len, minimum=2),
            input_size=2,
            output_size=3,
            train_size=train_size,
            val_size=val_size,
            test_size=test_size,
        )
        self.baseline = 0.5
        self.baseline_label = "always predict the majority class 1"

    def sample(self, generator: np.random.Generator, count: int) -> Arrays:
        first = generator.integers(0, self.seq_len, count)
        # A uniform nonzero shift gives a second position uniform over the other T - 1 steps.
        second = (first + generator.integers(1, self.seq_len, count)) % self.seq_len
        return {
            "bits": generator.integers(0, 2, (count, self.seq_len), dtype=np.uint8),
            "first": first,
            "second": second,
        }

    def encode(self, arrays: Arrays) -> Batch:
        bits = torch.from_numpy(arrays["bits"]).float()  # (B, T)
        rows = torch.arange(len(bits))
        first = torch.from_numpy(arrays["first"])
        second = torch.from_numpy(arrays["second"])
        markers = torch.zeros_like(bits)
        markers[rows, first] = 1.0
        markers[rows, second] = 1.0
        x = torch.stack((bits, markers), dim=-1)  # (B, T, 2)
        y = (bits[rows, first] + bits[rows, second]).long()  # (B,)
        return x, y
