"""What each preset's paper scale costs on a device: training steps timed there, eager and graphed, projected
to the preset's runs.

    python benchmarks/paper_scale.py --device cuda                # every preset with a paper scale
    python benchmarks/paper_scale.py --device cpu kru-fig6        # one preset, on this machine's CPU (eager only)
    python benchmarks/paper_scale.py --device cuda --save PATH    # also the JSON the gallery reads (Note [Paper cost])

A claim that needs the paper's scale (issue 22) says which scale; this says what that scale costs. For every
run of a preset at ``--scale paper`` (a sweep's settings, times its seeds) the script builds the run's model,
task and optimizer on ``--device`` and times its training step two ways, each the median of ``--steps``
steps synchronised with the device:

* eager (:func:`stability.admission.shapes.step_seconds`, as admission times a step): forward, the cell's
  penalty, backward, optimizer step, after two warm-up steps;
* graphed (issue 32): where the device is CUDA, ``train.cuda_graphs`` is on and
  :func:`stability.training.graphed.capture_problem` finds nothing, the step as the Trainer trains it there,
  a :class:`~stability.training.graphed.StaticStep` (forward, loss, penalty, backward, the gradient norms,
  clipping, the optimizer's capturable step, the cell's after-step, the window's row), :data:`WARMUP_STEPS`
  eager steps, then captured as one CUDA graph and each replay timed, its batch already on the device (as
  the eager step's). Where it cannot be graphed the figure is absent and the row says why: "no CUDA", the
  capture_problem line ("trains eagerly: ..."), or "could not be graphed (...)" where building or
  capturing it raised.

Runs of one shape (:func:`stability.admission.shapes.shape_of`: the cell, its options, the task, batch, dtype,
device) are timed once. A task that reads a dataset (MNIST, HAR) is timed on its seeded stand-in of the same
shapes, so nothing is downloaded. The projection is steps × seconds a step, one run after another: the graphed
column takes a run's graphed step where its shape has one and its eager step where not (the Trainer trains
such a run eagerly), and is absent where no shape of the preset was graphed. Evaluations, probes and the store
come on top (``benchmarks/training.py`` measures that overhead), so each is a lower bound. Shapes whose first
eager step is over ``--max-step-s`` are timed by that step alone, and graphed by one replay.

``--save`` writes the table as JSON (schema 1; a row's ``graphed_*`` keys are additions a reader may find
absent): per preset ``seconds`` (eager), ``graphed_seconds`` (or null), ``graphed_note`` (why a shape or the
whole preset is not graphed, or null), ``slowest`` and ``graphed_slowest`` ([run, seconds], or null). It is
rewritten after every preset, so a run cut short by its time limit leaves the presets it finished.
"""
from __future__ import annotations

import argparse
import json
import statistics
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

WHAT = ("seconds of training steps alone, synchronised, each run's shape timed for a few steps and projected to "
        "the preset's paper-scale steps, one run after another: eager (forward, penalty, backward, optimizer; after "
        "2 warm-up steps) and, on CUDA, graphed (the Trainer's StaticStep: also the gradient norms, clipping, the "
        "after-step and the window's row; after its eager warm-up steps, replays of its CUDA graph; a run whose "
        "shape cannot be captured counted eager); evaluations, probes and the store come on top")


def stand_in_options(config) -> dict:
    """The task options a timing builds: a task that reads files on its seeded stand-in, same shapes."""
    options = dict(config.task.options)
    if "data" in tasks.options(config.task.name):
        options["data"] = "standin"
    return options


def seconds_per_step(config, device: torch.device, steps: int, max_step_s: float) -> float:
    """The median seconds of an eager training step of ``config`` on ``device`` (two warm-up steps first; a
    task that reads a dataset on its stand-in)."""
    torch.manual_seed(config.train.seed)
    return step_seconds(config, device, steps, warm_up=2, task_options=stand_in_options(config), penalty=True,
                        first_over=max_step_s)


def graphed_seconds_per_step(config, device: torch.device, steps: int) -> tuple[float | None, str | None]:
    """``(seconds, None)``: the median seconds of ``steps`` replays of ``config``'s training step captured as
    one CUDA graph on ``device`` (a :class:`StaticStep` built as :func:`step_seconds` builds the eager step,
    :data:`WARMUP_STEPS` eager steps, :meth:`StaticStep.capture`, each replay synchronised on both sides, its
    batch copied to the device before); ``(None, why)`` where it is not graphed: "no CUDA", "train.cuda_graphs
    is off", the :func:`capture_problem` line, or "could not be graphed (Type: first line)" where building or
    capturing it raised."""
    if device.type != "cuda":
        return None, "no CUDA"
    if not config.train.cuda_graphs:
        return None, "train.cuda_graphs is off"
    from stability.training.batches import batch_on, compact_batches
    from stability.training.build import build_model
    from stability.training.graphed import WARMUP_STEPS, StaticStep, capture_problem

    dtype = torch.float64 if config.train.dtype == "float64" else torch.float32
    static = None
    try:
        torch.manual_seed(config.train.seed)
        task = tasks.build(config.task.name, seed=config.train.seed, **stand_in_options(config))
        model = build_model(config, task).to(device=device, dtype=dtype)
        problem = capture_problem(model, config.train, task)
        if problem:
            return None, problem
        static = StaticStep(model, task, config.train)
        batches = compact_batches(task, "train", config.train.batch_size)

        def one(number: int) -> float:
            x, y = batch_on(task, next(batches), device, dtype)
            devices.synchronize(device)
            started = time.perf_counter()
            static.step_on(number, x, y)
            devices.synchronize(device)
            seconds = time.perf_counter() - started
            static.window.reset()  # the trainer empties it at each log step; here after every step
            return seconds

        for number in range(WARMUP_STEPS):
            one(number)
        static.capture()
        return statistics.median([one(WARMUP_STEPS + k) for k in range(max(1, steps))]), None
    except Exception as error:  # noqa: BLE001 - a shape that cannot be captured is named, not fatal
        first = (str(error).strip().splitlines() or [""])[0][:100]
        return None, f"could not be graphed ({type(error).__name__}: {first})"
    finally:
        del static
        torch.cuda.empty_cache()  # a captured graph's private pool goes with it


def hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f} h"


def recorded_command(argv: list[str]) -> str:
    """The command line as the saved file keeps it: ``--save``'s path left out (a folder of the machine that
    wrote it, which a shipped file must not name: tests/test_shipped_data.py)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            if not arg.startswith("-"):
                continue
        if arg == "--save":
            kept.append(arg)
            skip = True  # its value, where one follows (argparse takes the next word that is not an option)
        elif arg.startswith("--save="):
            kept.append("--save")
        else:
            kept.append(arg)
    return " ".join(["python", *kept])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="presets, by name or path (default: every preset with a paper scale)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--scale", default="paper")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--max-step-s", type=float, default=3.0)
    parser.add_argument("--save", nargs="?", type=Path, const=Path("-"), metavar="PATH",
                        help="also write the table where the gallery reads it (default: "
                             "stability/presets/measured/gpu/paper-cost.json; Note [Paper cost])")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    from stability.config import ConfigError
    from stability.presets import PresetError

    try:
        device = devices.resolve_device(args.device)
        names = args.names or [info.name for info in loading.available()]
        loaded = [loading.load(name) for name in names]
    except (ConfigError, PresetError) as error:
        print(f"paper_scale.py: {error}", file=sys.stderr)
        return 2
    described = devices.describe_device(device)
    timed: dict[str, tuple[float, float | None, str | None]] = {}  # shape: eager s, graphed s, why not graphed
    rows = []
    print(f"# {args.scale} scale on {described}, torch {torch.__version__}; median of {args.steps} steps a shape, "
          "eager and graphed (a CUDA graph of the Trainer's step)", flush=True)
    print("| preset | runs | shapes | steps in all | slowest run (eager) | projected eager | projected graphed |")
    print("|---|---|---|---|---|---|---|")
    for preset in loaded:
        if args.scale not in preset.scales:
            continue
        configs = preset.all_configs(args.scale)
        repeats = preset.run_count(args.scale) / max(1, len(configs))  # a sweep's seeds
        seconds, graphed, slowest, graphed_slowest, failed, eager_only = 0.0, 0.0, ("", 0.0), ("", 0.0), [], {}
        for config in configs:
            config.train.device = args.device
            shape = shape_of(config)
            if shape not in timed:
                try:
                    eager = seconds_per_step(config, device, args.steps, args.max_step_s)
                except Exception as error:  # noqa: BLE001 - a shape that cannot be built is named, not fatal
                    failed.append(f"{config.cell.name}: {str(error).splitlines()[0][:80] if str(error) else error!r}")
                    continue
                replays = 1 if eager > args.max_step_s else args.steps
                timed[shape] = (eager, *graphed_seconds_per_step(config, device, replays))
                graph_text = (f"{timed[shape][1] * 1e3:.1f} ms graphed" if timed[shape][1] is not None
                              else f"not graphed: {timed[shape][2]}")
                print(f"  {preset.name}: {config.cell.name} n={config.cell.hidden_size} {config.task.name} "
                      f"{json.dumps(config.task.options)} batch {config.train.batch_size}: "
                      f"{eager * 1e3:.1f} ms a step eager, {graph_text}", flush=True)
            eager, graph_s, why = timed[shape]
            run = f"{config.cell.name} T={config.task.options.get('seq_len', '-')}"
            run_s = eager * config.train.steps * repeats
            run_graphed = (graph_s if graph_s is not None else eager) * config.train.steps * repeats
            seconds += run_s
            graphed += run_graphed
            if graph_s is None:
                eager_only.setdefault(why, []).append(config.cell.name)
            if run_s > slowest[1]:
                slowest = (run, run_s)
            if run_graphed > graphed_slowest[1]:
                graphed_slowest = (run, run_graphed)
        any_graphed = any(timed[shape_of(c)][1] is not None for c in configs if shape_of(c) in timed)
        note = None
        if eager_only:  # why some (or all) of its runs are not graphed, a reason each
            parts = [why if not any_graphed else f"{', '.join(sorted(set(cells)))}: {why}"
                     for why, cells in eager_only.items()]
            note = "; ".join(parts)
        row = {"preset": preset.name, "runs": preset.run_count(args.scale),
               "shapes": len({shape_of(c) for c in configs}), "steps": sum(c.train.steps for c in configs),
               "seconds": seconds, "slowest": slowest, "failed": failed,
               "graphed_seconds": graphed if any_graphed else None,
               "graphed_slowest": graphed_slowest if any_graphed else None, "graphed_note": note}
        rows.append(row)
        print(f"| {preset.name} | {row['runs']} | {row['shapes']} | {row['steps'] * repeats:,.0f} | "
              f"{slowest[0]}: {hours(slowest[1])} | {hours(seconds)} | {hours(row['graphed_seconds'])}"
              + (f" ({note})" if note else "") + (f" (not timed: {'; '.join(failed)})" if failed else "") + " |",
              flush=True)
        if args.save:
            save(args.save, described, rows, sys.argv[1:] if argv is None else list(argv))
    return 0


def save(where: Path, described: str, rows: list[dict], argv: list[str]) -> Path:
    """The table as JSON where the gallery reads it (``-``: :data:`stability.presets.measured.PAPER_COST`)."""
    from stability.presets import measured

    path = measured.PAPER_COST if str(where) == "-" else where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "schema": 1, "device": described, "torch": torch.__version__, "when": time.strftime("%Y-%m-%d"),
        "command": recorded_command(["benchmarks/paper_scale.py", *argv]), "what": WHAT, "rows": rows},
        indent=1, ensure_ascii=False) + "\n")
    return path


if __name__ == "__main__":
    raise SystemExit(main())
