"""``reproduce``: run a paper's figure or table (a preset, :mod:`stability.presets`) and judge its claims.

    python -m stability reproduce --list
    python -m stability reproduce NAME [--scale classroom|paper] [--json] [--save [PATH]]
    python -m stability reproduce --table [--scale S]     # the README's table, from the saved results

The preset's runs train one after another in this process, a line on stderr as each starts and
ends; then the verdict table (claim, the paper's value, ours, held / did not hold / could not
tell / needs paper scale), or with ``--json`` the result as one JSON object: the verdicts, their
counts, the CPU and wall seconds, cores, threads and load average, the code's version and commit
(Note [Measured results] in stability/presets/measured.py). ``--save`` writes that object to
stability/presets/measured/NAME.SCALE.json (or PATH), where the Reproduce page's gallery and
``--table`` read it. It exits 0 once the runs ran, whatever the verdicts; 130 when Ctrl-C cut them
short (143 for SIGTERM), the run in training then stopped with its rows and checkpoint kept.
"""
from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from ..core.formatting import duration
from ..execution.signals import Terminated, describe_interrupt
from ..workers import threads
from .output import ProgressLine, print_rows

if TYPE_CHECKING:
    from ..runs.store import RunStore


def add_command(commands, store) -> None:
    """``reproduce --list`` and ``reproduce NAME [--scale S] [--json]``."""
    reproduce = commands.add_parser("reproduce", parents=[store],
                                    help="run a paper's figure or table (a preset) and judge its claims")
    reproduce.add_argument("preset", nargs="?", metavar="NAME",
                           help="a preset name (see --list) or the path of a preset file (.toml, .json)")
    reproduce.add_argument("--list", action="store_true", help="the presets, a line each")
    reproduce.add_argument("--scale", default="classroom", metavar="SCALE",
                           help="classroom (a few CPU minutes, the default) or paper (the paper's sizes, for a GPU)")
    reproduce.add_argument("--json", action="store_true",
                           help="end with the result as one JSON object on stdout: verdicts, CPU and wall seconds, "
                                "cores, load, version")
    reproduce.add_argument("--save", nargs="?", const="", default=None, metavar="PATH",
                           help="also write that object to PATH (default: stability/presets/measured/NAME.SCALE.json, "
                                "read by the gallery and --table)")
    reproduce.add_argument("--table", action="store_true",
                           help="the presets' saved results at --scale as the README's markdown table")
    reproduce.set_defaults(handler=cmd_reproduce)


def cmd_reproduce(args) -> int:
    # the runs train here one after another, as one background worker would: its thread policy (a torch
    # thread per spare core, passive OpenMP waiting; two threads spinning on a busy 2-core machine ran ~10x
    # slower), set before the presets import torch (stability.workers.threads)
    threads.adopt_worker_policy(1)
    from .. import presets
    from ..presets import measured
    from ..runs.store import RunStore

    if args.list or args.table:
        if args.preset is not None or (args.list and args.table):
            raise presets.PresetError("give one of --list, --table or a preset NAME")
        if args.table:
            print(measured.table(args.scale))
        else:
            _print_presets()
        return 0
    if args.preset is None:
        raise presets.PresetError("give a preset NAME (see `python -m stability reproduce --list`) or --list")
    preset = presets.load(args.preset)
    preset.scale(args.scale)  # a scale the preset does not define: one line, before anything is stored
    with RunStore(args.store) as store:
        print(f"{preset.name}: {preset.paper}, {preset.figure} ({preset.section}), {args.scale} scale: "
              f"{preset.scales[args.scale].get('note', '')}", file=sys.stderr, flush=True)
        rough = presets.estimate_preset_time(preset, store, args.scale)
        if rough is not None:
            print(f"about {duration(rough['seconds'])} on this machine ({rough['basis']})", file=sys.stderr,
                  flush=True)
        clock = measured.Clock()
        try:
            run_ids = _run_preset(preset, store, args.scale)
        except (KeyboardInterrupt, Terminated) as interrupt:
            print(f"{preset.name}: {describe_interrupt(interrupt)}; the runs so far keep their rows "
                  "(python -m stability runs)", file=sys.stderr)
            return 143 if isinstance(interrupt, Terminated) else 130
        _print_verdicts(preset, store, run_ids, args, clock)
    return 0


def _print_presets() -> None:
    """The shipped presets, a row each: name, paper, figure, what it shows, its runs at each scale."""
    from .. import presets

    rows = [("name", "paper", "figure", "shows", "runs")]
    for info in presets.available():
        rows.append((info.name, info.paper, info.figure, info.shows,
                     " / ".join(f"{count} {scale}" for scale, count in info.runs.items())))
    print_rows(rows)


def _run_preset(preset, store: RunStore, scale: str) -> list[int]:
    """Train the preset's runs here, a line on stderr as each starts and ends and a progress line as it trains."""
    from .. import tasks
    from .. import presets

    return presets.run(preset, store, scale, progress=lambda line: print(line, file=sys.stderr, flush=True),
                         step_progress=lambda config: ProgressLine(tasks.describe(config.task.name).metric))


def _print_verdicts(preset, store: RunStore, run_ids: list[int], args, clock) -> None:
    """The claims judged on the runs: one JSON object with ``--json``, else the verdict table; ``--save``
    writes the JSON object too."""
    from .. import presets
    from ..presets import measured

    verdicts = presets.verdicts(preset, store, run_ids, scale=args.scale)
    result = measured.result(preset, args.scale, store, run_ids, verdicts, clock)
    if args.save is not None:
        path = measured.save(result, args.save or None)
        print(f"{preset.name}: saved the result to {path}", file=sys.stderr)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return
    print(f"{preset.name}: {preset.title}")
    print_rows([("claim", "paper", "ours", "verdict")] +
               [(v.claim, presets.verdict_value(v.paper), presets.verdict_value(v.ours), v.outcome) for v in verdicts])
    for verdict in verdicts:
        if verdict.held is None:
            print(f"  {verdict.outcome} \"{verdict.claim}\": {verdict.why}")
    count, cost = result["counts"], result["measured"]
    print(f"  {count['held']} of {count['claims']} held in {duration(cost['wall_seconds'])} "
          f"({cost['cpu_seconds'] / 60:.1f} CPU min); runs {', '.join(map(str, run_ids))} in {store}; "
          "the paper's source of each claim: --json")
