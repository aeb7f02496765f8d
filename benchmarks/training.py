"""What the diagnostics and the run store cost: a default run against a bare loop.

    python benchmarks/training.py                      # spectral on adding, T = 100, 2000 steps
    python benchmarks/training.py --cell lstm --steps 1000 --reps 3
    python benchmarks/training.py --device cuda          # on a GPU (benchmarks/gpu_check.sh)

``bare``: the same model, optimizer and batches, forward + backward + step,
nothing else.  ``train_run``: :func:`stability.train_run` (claimed, trained, settled) at its
default settings (log every steps/200, evaluate and probe gradients through
time every steps/20, the test set at the end) writing into a fresh SQLite
store, and the same keeping its rows in memory (no store).  The three
alternate, ``--reps`` times each, in one process; the table gives the median
wall time of each and their ratios to the bare loop.  The issue's target is
diagnostics + storage <= 10 % of training time.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stability import tasks  # noqa: E402
from stability.core import devices  # noqa: E402
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig  # noqa: E402
from stability.runs.store import RunStore  # noqa: E402
from stability.training.build import build_model, build_optimizer  # noqa: E402
from stability.execution.lifecycle import train_run  # noqa: E402


def bare_loop(config: RunConfig) -> float:
    torch.manual_seed(config.train.seed)
    task = tasks.build(config.task.name, seed=config.train.seed, **config.task.options)
    device = devices.resolve_device(config.train.device)
    model = build_model(config, task).to(device)
    optimizer = build_optimizer(model, config)
    batches = task.batches("train", config.train.batch_size)
    start = time.perf_counter()
    for _ in range(config.train.steps):
        x, y = (tensor.to(device, non_blocking=True) for tensor in next(batches))
        pred, _ = model(x)
        loss = task.loss(pred, y) + model.cell.penalty()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    devices.synchronize(device)
    return time.perf_counter() - start


def full_run(config: RunConfig) -> float:
    with tempfile.TemporaryDirectory() as directory:
        store = RunStore(Path(directory) / "runs.db")
        run_id = store.create_run(config.to_dict())
        start = time.perf_counter()
        status = train_run(config, store, run_id).status
        elapsed = time.perf_counter() - start
        store.close()
    assert status == "completed", status
    return elapsed


def in_memory_run(config: RunConfig) -> float:
    start = time.perf_counter()
    status = train_run(config).status
    elapsed = time.perf_counter() - start
    assert status == "completed", status
    return elapsed


def profile(config: RunConfig, top: int) -> None:
    """cProfile of a bare loop, then of train_run with its rows in memory: the functions with the most own time."""
    import cProfile
    import pstats

    in_memory_run(config)  # warm: kernels loaded, caches filled
    for label, function in (("bare training", bare_loop), ("train_run, rows in memory", in_memory_run)):
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.runcall(function, config)
        print(f"\n## {label}: {time.perf_counter() - started:.2f} s under the profiler, {config.train.steps} steps")
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(r"stability/training", top)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", default="spectral")
    parser.add_argument("--task", default="adding")
    parser.add_argument("--seq-len", type=int, default=100)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, mps or auto")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="instead: cProfile a bare loop and train_run (rows in memory), the N functions with "
                             "the most own time in each (where the diagnostics' time goes)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = RunConfig(cell=CellConfig(args.cell), task=TaskConfig(args.task, {"seq_len": args.seq_len}),
                       train=TrainConfig(steps=args.steps, device=args.device))
    config.validate()
    if args.profile:
        profile(config, args.profile)
        return
    times = {"bare": [], "train_run": [], "in_memory": []}
    for _ in range(args.reps):
        times["bare"].append(bare_loop(config))
        times["train_run"].append(full_run(config))
        times["in_memory"].append(in_memory_run(config))
    bare, full, memory = (statistics.median(times[key]) for key in ("bare", "train_run", "in_memory"))
    print(f"# {args.cell} on {args.task} (T = {args.seq_len}), {args.steps} steps, default diagnostics, "
          f"{args.reps} reps each, {args.threads} threads, torch {torch.__version__}, "
          f"{devices.describe_device(devices.resolve_device(args.device))}")
    print("| loop | wall s (median) | per step ms |")
    print("|---|---|---|")
    print(f"| bare training | {bare:.2f} | {bare / args.steps * 1e3:.2f} |")
    print(f"| train_run with diagnostics + store | {full:.2f} | {full / args.steps * 1e3:.2f} |")
    print(f"| train_run with diagnostics, rows in memory | {memory:.2f} | {memory / args.steps * 1e3:.2f} |")
    print(f"\noverhead: {100 * (full / bare - 1):.1f} % with the store, {100 * (memory / bare - 1):.1f} % in memory "
          "(target <= 10 %)")


if __name__ == "__main__":
    main()
