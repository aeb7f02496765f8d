"""A CPU run that slows by itself when its gradients vanish: float32 subnormals in the backward through time.

    python benchmarks/subnormals.py                  # the classroom run, 150 s as it trains, then 150 s with flush
    python benchmarks/subnormals.py --seconds 60 --cell rnn --hidden 128 --seq-len 100

A vanishing gradient is the lab's subject, and on a CPU it has a cost of its own: once ∂L/∂h_t falls below
float32's smallest normal number (1.2e-38) on the way back through time, every multiply by such a subnormal is
handled in microcode on x86, tens to a hundred times slower than a normal one. The run's speed then drops with no
change in its shape. Here the run (one torch thread, as a worker on a 2-core machine trains) is trained through
``stability.train_run`` for ``--seconds`` twice, in two processes one after the other: as the lab trains it, and
with ``torch.set_flush_denormal(True)`` (FTZ/DAZ: a subnormal read or written as 0, on this thread). Printed: the
steps/s of every 10-s stretch, and the step where a stretch first ran under half the first minute's speed.

Measured 2026-11-28 (2 cores, no other work): rnn 128 on adding T = 100, a log every 10 steps, ~80 steps/s until
step ~6,800 (~90 s), then ~10 steps/s; with flush-to-zero ~80 steps/s throughout. What it changes besides the
speed, and so why the lab does not flush yet: a float32 gradient entry under 1.2e-38 becomes 0 instead of a
subnormal of a few significant bits (Adam's update of such an entry is below 1e-30 either way), and a float32
reading of one (the training batch's ‖∂L/∂h0‖) reads 0 below 1.2e-38 instead of below 1.4e-45; the float64
readings are unchanged above 2.2e-308, under which the charts already say "underflow".
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys, time
import torch
torch.set_num_threads(1)
flush = sys.argv[1] == "flush"
if flush and not torch.set_flush_denormal(True):
    print(json.dumps({"error": "this CPU cannot flush subnormals"})); sys.exit()
from stability import train_run
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.training.hooks import Hook
cell, hidden, seq_len, seconds = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])

class Stretches(Hook):
    def __init__(self):
        self.start = self.mark = time.perf_counter(); self.steps = 0; self.rows = []
    def on_step(self, trainer, result):
        self.steps += 1
        now = time.perf_counter()
        if now - self.mark >= 10:
            self.rows.append((round(now - self.start), trainer.step, self.steps / (now - self.mark)))
            self.mark, self.steps = now, 0
        if now - self.start >= seconds:
            trainer.stop("stopped")

stretches = Stretches()
config = RunConfig(cell=CellConfig(cell, hidden), task=TaskConfig("adding", {"seq_len": seq_len}),
                   train=TrainConfig(steps=10_000_000, log_every=10, eval_every=200, probe_every=200))
train_run(config, hooks=[stretches])
print(json.dumps({"rows": stretches.rows}))
"""


def measured(mode: str, args) -> list | str:
    done = subprocess.run([sys.executable, "-c", CHILD, mode, args.cell, str(args.hidden), str(args.seq_len),
                           str(args.seconds)], cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result.get("error") or result["rows"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--cell", default="rnn")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seq-len", type=int, default=100)
    args = parser.parse_args()
    results = {mode: measured(mode, args) for mode in ("plain", "flush")}
    print(f"{args.cell} {args.hidden} on adding T = {args.seq_len}, one torch thread, {args.seconds:g} s each\n")
    print("| s | plain: step | plain: steps/s | flush-to-zero: step | flush-to-zero: steps/s |")
    print("|---|---|---|---|---|")
    plain, flush = results["plain"], results["flush"]
    if isinstance(flush, str):
        flush = []
        print(f"(flush-to-zero: {results['flush']})")
    for index in range(max(len(plain), len(flush))):
        left = plain[index] if index < len(plain) else ("", "", float("nan"))
        right = flush[index] if index < len(flush) else ("", "", float("nan"))
        print(f"| {left[0] or right[0]} | {left[1]} | {left[2]:.1f} | {right[1]} | {right[2]:.1f} |")
    for mode, rows in (("plain", plain), ("flush-to-zero", flush)):
        first = [rate for seconds, _, rate in rows if seconds <= 60]
        slow = next(((seconds, step) for seconds, step, rate in rows if first and rate < 0.5 * max(first)), None)
        print(f"{mode}: " + (f"under half its first minute's speed from {slow[0]} s (step {slow[1]:,})" if slow
                             else "never under half its first minute's speed"))


if __name__ == "__main__":
    main()
