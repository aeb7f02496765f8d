"""How many ops (one kernel launch each on a GPU) each part of a run dispatches, per 100 steps at the default cadence.

    python benchmarks/reading_launches.py                    # rnn, lstm, spectral, sgornn, kru: ~30 s on a CPU
    python benchmarks/reading_launches.py --cells spectral --steps 400

Why count: on a GPU an eager op costs the host about as much as a small kernel costs the device (~10-30 us), so a
part's op count is its cost there once the training step itself is one CUDA graph (issue 32; a graphed step of the
default run takes ~2-5 ms on an H100/H200). The count is the same on any device (the ops a Python forward
dispatches do not depend on where they run), so the CPU counts it; ``benchmarks/graphed_run.py`` measures the
time on a GPU ("readings add"). Counted with a dispatch mode around each part of a plain run (the Trainer's own
step, the readings eager) of the default Train run's shape (adding T 100, hidden 128, batch 64, Adam) at the
default 2,000-step run's cadence (log every 10, evaluate and probe every 100), views and detaches left out (no
kernel). In a graphed run (stability/training/graphed_readings.py) the step, each evaluation split and the probe's
two bodies are one launch each; what stays eager is the log step's readings (norms, singular values, gates) and the
probe's copy of the weights.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stability import train_run  # noqa: E402
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig  # noqa: E402
from stability.training.hooks import Evaluation, GradientReadings, ProbeThroughTime  # noqa: E402
from stability.training.probes import ProbeBatch  # noqa: E402
from stability.training.trainer import Trainer  # noqa: E402

CELLS = ["rnn", "lstm", "spectral", "sgornn", "kru"]
NO_KERNEL = {"view", "_unsafe_view", "expand", "t", "transpose", "select", "slice", "unsqueeze", "squeeze",
             "as_strided", "permute", "alias", "detach", "reshape", "_reshape_alias", "unbind", "split",
             "split_with_sizes", "lift_fresh", "numpy_T", "_local_scalar_dense"}
PARTS = [  # (class, method, label): what each part of a run is
    (Trainer, "_train_step", "training step"),
    (GradientReadings, "on_log", "log-step readings"),
    (ProbeBatch, "h0_norm", "  of which the float64 dL/dh0 between probes"),
    (Trainer, "spectrum", "  of which W's singular values"),
    (Evaluation, "on_log", "evaluation (val and train sets)"),
    (ProbeThroughTime, "on_log", "probe through time"),
    (ProbeBatch, "sync", "  of which the copy of the weights"),
]


class Ops(TorchDispatchMode):
    """Counts the ops dispatched inside it that launch a kernel (not views, not reads)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in NO_KERNEL:
            self.count += 1
        return func(*args, **(kwargs or {}))


def counted(cell: str, args) -> tuple[dict[str, float], dict[str, int]]:
    """Ops per 100 steps of each part, and how many times each part ran, in one plain CPU run of ``cell``."""
    ops, calls = collections.Counter(), collections.Counter()
    originals = []

    def wrap(cls, method, label):
        original = getattr(cls, method)
        originals.append((cls, method, original))

        def counting(self, *a, **k):  # a part inside another counts in both (modes nest): its "of which"
            mode = Ops()
            with mode:
                result = original(self, *a, **k)
            ops[label] += mode.count
            calls[label] += 1
            return result

        setattr(cls, method, counting)

    for cls, method, label in PARTS:
        wrap(cls, method, label)
    try:
        config = RunConfig(cell=CellConfig(cell, args.hidden), task=TaskConfig("adding", {"seq_len": args.seq_len}),
                           train=TrainConfig(batch_size=args.batch, steps=args.steps, device="cpu", log_every=10,
                                             eval_every=100, probe_every=100))
        train_run(config)
    finally:
        for cls, method, original in originals:
            setattr(cls, method, original)
    per_100 = {label: ops[label] * 100 / args.steps for _, _, label in PARTS}
    return per_100, dict(calls)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="+", default=CELLS)
    parser.add_argument("--steps", type=int, default=200, help="steps of each run (a multiple of 100)")
    parser.add_argument("--seq-len", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(f"# ops (kernel launches on a GPU) per 100 steps, adding T {args.seq_len}, hidden {args.hidden}, batch "
          f"{args.batch}; log every 10, evaluate and probe every 100; {args.steps} steps a run, counted on the CPU")
    labels = [label for _, _, label in PARTS]
    print("| cell | " + " | ".join(label.strip() for label in labels) + " | readings / step |")
    print("|---|" + "---|" * (len(labels) + 1))
    for cell in args.cells:
        per_100, _ = counted(cell, args)
        readings = sum(per_100[label] for label in labels[1:] if not label.startswith("  "))
        print(f"| {cell} | " + " | ".join(f"{per_100[label]:,.0f}" for label in labels)
              + f" | {readings / per_100[labels[0]]:.2f} |", flush=True)
    print("The float64 dL/dh0 between probes is taken within 2 % of the run's time (hooks.H0_READING_SHARE), so its "
          "count depends on the machine's speed.")
    print(f"done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
