"""What each preset's paper scale costs on a device: training steps timed there, projected to the preset's runs.

    python benchmarks/paper_scale.py --device cuda                # every preset with a paper scale
    python benchmarks/paper_scale.py --device cpu kru-fig6        # one preset, on this machine's CPU

A claim that needs the paper's scale (issue 22) says which scale; this says what that scale costs. For every
run of a preset at ``--scale paper`` (a sweep's settings, times its seeds) the script builds the run's model,
task and optimizer on ``--device`` and times ``--steps`` training steps (forward, the cell's penalty,
backward, optimizer step; synchronised), after two warm-up steps, the median of them. Runs of one shape
(:func:`stability.admission.shapes.shape_of`: the cell, its options, the task, batch, dtype, device) are
timed once. A task that reads a dataset (MNIST, HAR) is timed on its seeded stand-in of the same shapes, so
nothing is downloaded. The projection is steps × seconds a step: evaluations, probes and the store come on
top (``benchmarks/training.py`` measures that overhead), so it is a lower bound of one run after another on
one device. Shapes whose first step is over ``--max-step-s`` are timed by that step alone.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stability import tasks  # noqa: E402
from stability.admission.shapes import shape_of, step_seconds  # noqa: E402
from stability.core import devices  # noqa: E402
from stability.presets import loading  # noqa: E402

WHAT = ("seconds of training steps alone (forward, penalty, backward, optimizer; synchronised), each run's shape "
        "timed for a few steps after 2 warm-up steps and projected to the preset's paper-scale steps, one run after "
        "another; evaluations, probes and the store come on top")


def seconds_per_step(config, device: torch.device, steps: int, max_step_s: float) -> float:
    """The median seconds of a training step of ``config`` on ``device`` (two warm-up steps first; a task
    that reads a dataset on its stand-in)."""
    options = dict(config.task.options)
    if "data" in tasks.options(config.task.name):  # a task that reads files: its seeded stand-in, same shapes
        options["data"] = "standin"
    torch.manual_seed(config.train.seed)
    return step_seconds(config, device, steps, warm_up=2, task_options=options, penalty=True, first_over=max_step_s)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="presets (default: every preset with a paper scale)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--scale", default="paper")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--max-step-s", type=float, default=3.0)
    parser.add_argument("--save", nargs="?", type=Path, const=Path("-"), metavar="PATH",
                        help="also write the table where the gallery reads it (default: "
                             "stability/presets/measured/gpu/paper-cost.json; Note [Paper cost])")
    args = parser.parse_args(argv)
    device = devices.resolve_device(args.device)
    names = args.names or [info.name for info in loading.available()]
    timed: dict[str, float] = {}
    rows = []
    print(f"# {args.scale} scale on {devices.describe_device(device)}, "
          f"torch {torch.__version__}; median of {args.steps} steps a shape", flush=True)
    print("| preset | runs | shapes | steps in all | slowest run | projected, one after another |")
    print("|---|---|---|---|---|---|")
    for name in names:
        preset = loading.load(name)
        if args.scale not in preset.scales:
            continue
        configs = preset.all_configs(args.scale)
        repeats = preset.run_count(args.scale) / max(1, len(configs))  # a sweep's seeds
        seconds, slowest, failed = 0.0, ("", 0.0), []
        for config in configs:
            config.train.device = args.device
            shape = shape_of(config)
            if shape not in timed:
                try:
                    timed[shape] = seconds_per_step(config, device, args.steps, args.max_step_s)
                except Exception as error:  # noqa: BLE001 - a shape that cannot be built is named, not fatal
                    failed.append(f"{config.cell.name}: {str(error).splitlines()[0][:80]}")
                    continue
                print(f"  {name}: {config.cell.name} n={config.cell.hidden_size} {config.task.name} "
                      f"{json.dumps(config.task.options)} batch {config.train.batch_size}: "
                      f"{timed[shape] * 1e3:.1f} ms a step", flush=True)
            run_s = timed[shape] * config.train.steps * repeats
            seconds += run_s
            if run_s > slowest[1]:
                slowest = (f"{config.cell.name} T={config.task.options.get('seq_len', '-')}", run_s)
        rows.append({"preset": name, "runs": preset.run_count(args.scale),
                     "shapes": len({shape_of(c) for c in configs}), "steps": sum(c.train.steps for c in configs),
                     "seconds": seconds, "slowest": slowest, "failed": failed})
        print(f"| {name} | {rows[-1]['runs']} | {rows[-1]['shapes']} | {rows[-1]['steps'] * repeats:,.0f} | "
              f"{slowest[0]}: {slowest[1] / 3600:.2f} h | {seconds / 3600:.2f} h"
              + (f" (not timed: {'; '.join(failed)})" if failed else "") + " |", flush=True)
    if args.save:
        from stability.presets import measured

        path = measured.PAPER_COST if str(args.save) == "-" else args.save
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "schema": 1, "device": devices.describe_device(device), "torch": torch.__version__,
            "when": time.strftime("%Y-%m-%d"), "command": " ".join(["python", *sys.argv]),
            "what": WHAT, "rows": rows}, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
