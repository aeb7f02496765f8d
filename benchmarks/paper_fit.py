"""Which presets' paper scale fits in the seconds left on a GPU: read from the paper-cost table just measured.

    python benchmarks/paper_fit.py --cost gpu_check_out/paper_scale_cuda.json --budget-s 300
    python benchmarks/paper_fit.py --budget-s 3600 --factor 3     # the shipped table (Note [Paper cost])

Prints ``NAME SECONDS`` a line for each preset that fits, smallest first: ``SECONDS`` is the seconds it is
given, its projected training steps (``graphed_seconds`` of ``benchmarks/paper_scale.py --save``'s row where
there is one, else ``seconds``, eager) times ``--factor`` (2 by default: the evaluations, probes, SVDs, the
store and building the runs come on top of the steps), rounded up. The presets are taken smallest first while
their seconds together stay within ``--budget-s`` (they run one after another). Left out, each with a line on
stderr: a row the table could not time, a preset that is not shipped or has no ``--scale``, and a preset whose
runs read a data set this machine does not have (a task with a ``download`` option, which reads files, whose
files are not in the data cache: built with ``download = False`` and, where it has a ``data`` option, ``data =
"real"``, since ``auto`` without the files trains on the stand-in, whose verdicts are not the paper's). A GPU
machine lent to these checks reaches no network, so MNIST, HAR-2, PTB and UCR runs are left out there unless
their files were put in ``$STABILITY_DATA``. Exit 0 (whatever fits, possibly nothing); 2, one line, for a
table that cannot be read.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stability.presets import measured  # noqa: E402


def missing_data(preset, scale: str) -> str | None:
    """The data set one of ``preset``'s runs at ``scale`` reads and this machine lacks, in a few words; None
    where every run's task is generated or finds its files (nothing is downloaded)."""
    from stability import tasks

    checked: set[str] = set()
    for config in preset.all_configs(scale):
        name, options = config.task.name, dict(config.task.options)
        valid = tasks.options(name)
        if "download" not in valid:  # a generated task (the real-data ones take data_dir and download)
            continue
        if "data" in valid:
            if options.get("data") == "standin":
                continue  # asked for the stand-in: no files read
            options["data"] = "real"
        options["download"] = False
        key = json.dumps([name, options], sort_keys=True, default=str)
        if key in checked:
            continue
        checked.add(key)
        try:
            tasks.build(name, seed=config.train.seed, **options)
        except tasks.DatasetUnavailable:
            return f"its task {name} reads a data set whose files are not in this machine's data cache"
    return None


def fitting(cost_path: Path, budget_s: float, factor: float = 2.0, scale: str = "paper",
            say=lambda line: None) -> list[tuple[str, int]]:
    """``[(name, seconds)]`` of the presets of ``cost_path`` (a ``paper_scale.py --save`` table) whose
    projected seconds × ``factor`` fit, smallest first, together within ``budget_s``; ``say`` gets a line for
    each left out. ValueError (one line) for a table that cannot be read."""
    from stability.presets import PresetError, loading

    try:
        data = json.loads(Path(cost_path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read the paper-cost table {cost_path}: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"{cost_path} is not a paper-cost table (benchmarks/paper_scale.py --save): no rows")
    shipped = {info.name for info in loading.available()}
    wanted = []
    for entry in data["rows"]:
        row = entry if isinstance(entry, dict) else {}
        name, failed = row.get("preset"), row.get("failed")
        projected = row.get("graphed_seconds")
        if projected is None:
            projected = row.get("seconds")
        if not name or not isinstance(projected, (int, float)) or projected <= 0 or failed:
            why = f" ({'; '.join(map(str, failed))})" if failed else ""
            say(f"{name or repr(entry)}: not timed in the table{why}")
            continue
        if name not in shipped:
            say(f"{name}: not a shipped preset")
            continue
        wanted.append((math.ceil(projected * factor), name))
    chosen, spent = [], 0
    for seconds, name in sorted(wanted):
        if spent + seconds > budget_s:
            say(f"{name}: needs ~{seconds} s (x{factor:g} its projected steps), {max(0, budget_s - spent):.0f} s left")
            continue
        try:
            preset = loading.load(name)
            if scale not in preset.scales:
                say(f"{name}: no {scale} scale")
                continue
            lacking = missing_data(preset, scale)
        except (PresetError, ValueError) as error:
            say(f"{name}: {str(error).splitlines()[0]}")
            continue
        if lacking:
            say(f"{name}: {lacking}")
            continue
        chosen.append((name, seconds))
        spent += seconds
    return chosen


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost", type=Path, default=measured.PAPER_COST, metavar="FILE",
                        help="a paper_scale.py --save table (default: the shipped one)")
    parser.add_argument("--budget-s", type=float, required=True, help="the seconds left for the presets' runs")
    parser.add_argument("--factor", type=float, default=2.0,
                        help="seconds given per projected second of training steps (default 2)")
    parser.add_argument("--scale", default="paper")
    args = parser.parse_args(argv)
    if args.factor < 1:
        parser.error("--factor must be at least 1")
    try:
        chosen = fitting(args.cost, args.budget_s, args.factor, args.scale,
                         say=lambda line: print(f"paper_fit.py: left out {line}", file=sys.stderr))
    except ValueError as error:
        print(f"paper_fit.py: {error}", file=sys.stderr)
        return 2
    for name, seconds in chosen:
        print(f"{name} {seconds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
