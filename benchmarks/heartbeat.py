"""What the moving step costs a run: a tiny fast run with and without the step beat, side by side.

    python benchmarks/heartbeat.py                       # rnn 16 on adding T = 10, 3,000 steps, 5 reps each
    python benchmarks/heartbeat.py --steps 10000 --reps 3

Between its log steps a store's run writes its step and heartbeat every half second (stability/training/sinks.py,
Note [A moving step]): one compare-and-set of the run's row.  The cost shows best on a run whose steps are
short and that logs rarely, so every second of it is steps and beats: here rnn 16 on adding T = 10, batch
64, logging only at its last step (``log_every`` = steps), evaluation and probes at the ends only, trained by
:func:`stability.execution.lifecycle.train_run` (claimed, a StoreSink with its claim) into a fresh SQLite
store.  ``beat``: as the code is; ``no beat``: :data:`~stability.training.sinks.STEP_BEAT_EVERY_S` set to
infinity in this process (the heartbeat alone every 30 s, as before the beat).  The two alternate, ``--reps``
times each, in one process; reported: the median steps/s of each, their ratio, the beats written (counted
on the store's ``compare_and_set``) and the wall time those calls took, as a share of the run's.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig  # noqa: E402
from stability.execution.lifecycle import train_run  # noqa: E402
from stability.runs.store import RunStore  # noqa: E402
from stability.training import sinks  # noqa: E402


class CountingStore(RunStore):
    """A RunStore that counts its compare-and-sets (the beats, and the lifecycle's few) and their wall time."""

    calls = 0
    seconds = 0.0

    def compare_and_set(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return super().compare_and_set(*args, **kwargs)
        finally:
            CountingStore.calls += 1
            CountingStore.seconds += time.perf_counter() - started


def one_run(config: RunConfig, beat: bool) -> dict:
    """``config`` trained into a fresh store, with or without the step beat: steps/s, beats, their time."""
    saved = sinks.STEP_BEAT_EVERY_S
    sinks.STEP_BEAT_EVERY_S = saved if beat else math.inf
    CountingStore.calls, CountingStore.seconds = 0, 0.0
    try:
        with tempfile.TemporaryDirectory() as directory:
            store = CountingStore(Path(directory) / "runs.db")
            run_id = store.create_run(config.to_dict())
            calls_before = CountingStore.calls
            started = time.perf_counter()
            status = train_run(config, store, run_id).status
            elapsed = time.perf_counter() - started
            store.close()
    finally:
        sinks.STEP_BEAT_EVERY_S = saved
    assert status == "completed", status
    return {"steps_per_s": config.train.steps / elapsed, "seconds": elapsed,
            "cas": CountingStore.calls - calls_before, "cas_s": CountingStore.seconds}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=10)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = RunConfig(cell=CellConfig("rnn", args.hidden), task=TaskConfig("adding", {"seq_len": args.seq_len}),
                       train=TrainConfig(steps=args.steps, log_every=args.steps, eval_every=args.steps,
                                         probe_every=args.steps))
    config.validate()
    one_run(config, True)  # warm: kernels loaded, caches filled
    results: dict[str, list[dict]] = {"beat": [], "no beat": []}
    for _ in range(args.reps):
        for label in results:
            results[label].append(one_run(config, label == "beat"))
    print(f"# rnn {args.hidden} on adding (T = {args.seq_len}), {args.steps} steps, log_every {args.steps}, "
          f"{args.reps} reps each alternating, {args.threads} thread(s), torch {torch.__version__}")
    print("| step beat | steps/s (median) | steps/s (each) | compare-and-sets a run | their wall time, share of the run |")
    print("|---|---|---|---|---|")
    medians = {}
    for label, runs in results.items():
        medians[label] = statistics.median(run["steps_per_s"] for run in runs)
        each = ", ".join(f"{run['steps_per_s']:.0f}" for run in runs)
        share = statistics.median(run["cas_s"] / run["seconds"] for run in runs)
        print(f"| {label} | {medians[label]:.0f} | {each} | {statistics.median(run['cas'] for run in runs):g} | "
              f"{100 * share:.3f} % |")
    print(f"\nratio, beat / no beat: {medians['beat'] / medians['no beat']:.3f}x "
          f"(the compare-and-sets without the beat are the lifecycle's: the claim, the start, the end)")


if __name__ == "__main__":
    main()
