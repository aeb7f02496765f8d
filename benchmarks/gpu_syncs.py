"""Where a CUDA run waits for the GPU: every synchronisation PyTorch's sync debugger sees, by stack.

    python benchmarks/gpu_syncs.py --cells spectral lstm --steps 80

A training step between log steps should wait for nothing (issue 24; tests/test_devices_smoke.py
counts the waits); this says where the waits are when it does: each distinct stack (the frames in this
repository, innermost last) with how many times it waited.  A stack that waits about ``steps`` times
is inside every step.  Needs CUDA; exits with one line without it.
"""
from __future__ import annotations

import argparse
import collections
import sys
import traceback
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig  # noqa: E402
from stability.training.run import build_and_train  # noqa: E402


def waits(cell: str, steps: int) -> collections.Counter:
    config = RunConfig(cell=CellConfig(cell, 16), task=TaskConfig("adding", {"seq_len": 8}),
                       train=TrainConfig(steps=steps, batch_size=8, log_every=steps // 2, eval_every=steps,
                                         probe_every=steps, eval_examples=16, probe_examples=4, device="cuda"))
    seen: collections.Counter = collections.Counter()

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchronizing" not in str(message):
            return
        frames = [frame for frame in traceback.extract_stack()[:-1] if str(ROOT) in frame.filename
                  and "benchmarks" not in frame.filename]
        seen[" <- ".join(f"{Path(f.filename).relative_to(ROOT)}:{f.lineno} {f.name}"
                         for f in reversed(frames[-4:]))] += 1

    torch.cuda.set_sync_debug_mode("warn")
    previous = warnings.showwarning
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            status = build_and_train(config).status
    finally:
        warnings.showwarning = previous
        torch.cuda.set_sync_debug_mode("default")
    print(f"## {cell}: {steps} steps, {sum(seen.values())} waits, status {status}")
    return seen


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="+", default=["spectral", "sgornn", "rnn", "lstm"])
    parser.add_argument("--steps", type=int, default=80)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_syncs: no CUDA GPU on this machine", file=sys.stderr)
        return 1
    for cell in args.cells:
        for stack, count in waits(cell, args.steps).most_common(12):
            print(f"{count:6d}  {stack}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
