"""One float32 precision for every cell: full IEEE float32, in cuBLAS and in cuDNN alike.

    apply_fp32_precision()      # in every process that trains (the Trainer does it), before it trains
    fp32_precisions()           # {"cuda.matmul": "ieee", "cudnn.rnn": "ieee", "cudnn.conv": "ieee"}
    describe_precision()        # "float32 ieee": what a run's device description says

Note [One precision for every cell]
-----------------------------------
On an Ampere or newer GPU a float32 product may run in TF32 (a 10-bit mantissa, about 1e-3
relative error per product) or in full IEEE float32.  torch 2.13 chooses per backend, and its
defaults disagree: ``torch.backends.cudnn.rnn.fp32_precision`` (and ``cudnn.conv``) default to
``"tf32"`` while ``torch.backends.cuda.matmul.fp32_precision`` defaults to full float32.  So the
cells that run on cuDNN (``rnn``, ``irnn``, ``lstm``, ``gru`` with ``impl="native"``) trained in
TF32 while every cell of the fused scan (:mod:`stability.cells.scan`, plain ``addmm``) and every
structured cell trained in float32: a Race compared cells at different precisions.

One setting for all of them: ``"ieee"`` (full float32).  TF32 would be the faster common choice on a
large GPU, but

* the quantities this lab compares are gradient norms that vanish or explode over hundreds of
  steps (``grad/h_t_norm``, ``sv/margin``): a per-product error of 1e-3 compounds through the
  recurrence, and a TF32 run is then not the float32 run of the papers;
* the CPU and Apple (MPS) backends always compute float32 in full, so ``"ieee"`` is the only
  choice under which the same config gives the same kind of numbers on every device;
* at this lab's sizes (hidden <= 1024, batches of 64) a GPU step is bound by kernel launches,
  not by matmul throughput, so TF32 would buy little.

The legacy switch ``torch.backends.cudnn.allow_tf32`` is turned off first: torch 2.13 raises when
the legacy flag is read while it disagrees with the per-operator ones, so the two are kept in step.
"""
from __future__ import annotations

import torch

FP32_PRECISION = "ieee"
# The per-backend switches that choose how float32 products run on an NVIDIA GPU.
PRECISION_FLAGS = ("cuda.matmul", "cudnn.rnn", "cudnn.conv")


def _flag(name: str):
    """The torch object holding ``fp32_precision`` for ``name`` (``"cudnn.rnn"``: ``torch.backends.cudnn.rnn``)."""
    holder = torch.backends
    for part in name.split("."):
        holder = getattr(holder, part)
    return holder


def apply_fp32_precision() -> None:
    """Every float32 product of this process in :data:`FP32_PRECISION` (Note [One precision for
    every cell]).  Only torch flags change: nothing touches a GPU, so it is safe before CUDA starts
    and on a machine without one (the flags are plain values there)."""
    torch.backends.cudnn.allow_tf32 = False  # the legacy switch, in step with the others
    for name in PRECISION_FLAGS:
        _flag(name).fp32_precision = FP32_PRECISION


def fp32_precisions() -> dict[str, str]:
    """The float32 precision each backend is set to, by :data:`PRECISION_FLAGS` name."""
    return {name: _flag(name).fp32_precision for name in PRECISION_FLAGS}


def describe_precision() -> str:
    """``"float32 ieee"`` when every backend agrees, else each one's (``"float32 cuda.matmul=ieee,
    cudnn.rnn=tf32, cudnn.conv=tf32"``): what a run stores beside its device."""
    settings = fp32_precisions()
    if len(set(settings.values())) == 1:
        return f"float32 {next(iter(settings.values()))}"
    return "float32 " + ", ".join(f"{name}={value}" for name, value in settings.items())
