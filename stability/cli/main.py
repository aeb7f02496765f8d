"""The command line: ``python -m stability <command>``.

    python -m stability train --cell spectral --task adding --seq-len 100
    python -m stability train --cell rnn --steps 500 --background
    python -m stability runs | show ID | export ID [--output FILE] | stop ID | resume ID [--background]
    python -m stability export 3 4 --tensorboard tb   # then: tensorboard --logdir tb
    python -m stability cells | tasks [NAME]
    python -m stability train --cell mylab.cells:LeakyRNN --steps 100     # a cell of your own
    python -m stability reproduce --list | reproduce NAME [--scale classroom|paper] [--json]

``train`` takes the :class:`~stability.config.RunConfig` fields as flags
(``--hidden-size``, ``--seq-len``, ``--lr``, ..., ``--cell-option K=V``,
``--task-option K=V``). In the foreground it trains in this process with a
progress line on stderr and ends with a summary; ``--background`` hands the
run to a worker (:mod:`stability.execution.runner`) and prints its id; ``--json`` ends
with exactly one JSON object on stdout,
``{"run_id": ..., "status": ..., "final": {name: value}}``.

``reproduce NAME`` (a shipped preset, or a path to a preset file; :mod:`stability.presets.preset`)
trains the preset's runs one after another in this process, a line on stderr as each starts and
ends, and ends with the verdict table (claim, the paper's value, ours, held / did not hold /
could not tell); ``--json`` prints the verdicts as one JSON object instead. It exits 0 once the
runs ran, whatever the verdicts.

Exit status: 0 completed or stopped, 1 diverged or failed, 2 bad input
(one line on stderr, ``stability: error: ...``, never a traceback).
The store is ``--store PATH``, else ``$STABILITY_STORE``, else ``~/.stability/runs.db``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import fields

import pandas as pd

from ..core.formatting import shown
from ..execution import runner, threads
from ..config import DEVICES, DTYPES, LR_SCHEDULES, OPTIMIZERS, CellConfig, RunConfig, TaskConfig, TrainConfig
from ..runs.store import RunStore, StoreBusy, StoreError
from ..execution.preflight import check_buildable

SAMPLER_CHOICES = ("grid", "random", "tpe")  # stability.sweeps.SAMPLERS, without importing Optuna here
MAX_SWEEP_RUNS = 10_000                        # stability.sweeps.MAX_RUNS

# cells, tasks and the trainer (torch) are imported by the commands that use them,
# so that `runs`, `show`, `export`, `stop` and usage errors answer at once.

PROG = "stability"
# ConfigError and RunNotFound are ValueErrors; OSError: e.g. an export file that cannot be written
BAD_INPUT = (ValueError, StoreError, OSError)
EXIT_CODES = {"completed": 0, "stopped": 0, "diverged": 1, "failed": 1}
_CHOICES = {"optimizer": OPTIMIZERS, "lr_schedule": LR_SCHEDULES, "device": DEVICES, "dtype": DTYPES}
_FLAG_TYPES = {"int": int, "float": float, "str": str, "int | None": int, "float | None": float}
_FLAG_NOTES = {"epochs": "passes over a fixed training set, instead of --steps",
               "freeze_recurrent": "keep the parameters that build the recurrent matrix W at their random "
                                   "initial values (KRU paper §4.1)"}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``stability: error: ...`` and exit 2, no usage dump."""

    def error(self, message: str):
        _print_error(message)
        sys.exit(2)


def _print_error(message) -> None:
    print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)


def _key_value(text: str) -> tuple[str, object]:
    """``KEY=VALUE``, the value parsed as JSON where it is JSON (``3``, ``0.5``, ``true``), else a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Train recurrent cells and watch their gradients.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    store = _Parser(add_help=False)
    store.add_argument("--store", metavar="PATH", help="run store (default: $STABILITY_STORE, else ~/.stability/runs.db)")

    train = commands.add_parser("train", parents=[store], help="train a cell on a task")
    train.set_defaults(handler=cmd_train)
    _add_config_flags(train)
    train.add_argument("--name", default="", help="a label for the run")
    train.add_argument("--background", action="store_true", help="train in a worker process; print the run id")
    train.add_argument("--json", action="store_true", help="end with one JSON object on stdout")

    runs = commands.add_parser("runs", parents=[store], help="list the runs in the store")
    runs.set_defaults(handler=cmd_runs)
    for name, handler, text in (("show", cmd_show, "a run's config, status and final metrics"),
                                ("stop", cmd_stop, "stop a running or queued run")):
        command = commands.add_parser(name, parents=[store], help=text)
        command.add_argument("run_id", type=int, metavar="ID")
        command.set_defaults(handler=handler)
    resume = commands.add_parser("resume", parents=[store],
                                 help="continue a stopped, interrupted or failed run from its last checkpoint")
    resume.add_argument("run_id", type=int, metavar="ID")
    resume.add_argument("--background", action="store_true", help="continue in a worker process")
    resume.add_argument("--json", action="store_true", help="end with one JSON object on stdout")
    resume.set_defaults(handler=cmd_resume)
    export = commands.add_parser("export", parents=[store],
                                 help="a run's metric rows as CSV, or runs as TensorBoard event files")
    export.add_argument("run_id", type=int, metavar="ID", nargs="+")
    where = export.add_mutually_exclusive_group()
    where.add_argument("--output", "-o", metavar="FILE", help="the CSV file (default: stdout)")
    where.add_argument("--tensorboard", metavar="DIR",
                       help="write TensorBoard event files, DIR/run-<id> a run (then: tensorboard --logdir DIR)")
    export.set_defaults(handler=cmd_export)
    _add_sweep_commands(commands, store)
    _add_catalogue_commands(commands)
    _add_reproduce_command(commands, store)
    return parser


def _add_reproduce_command(commands, store) -> None:
    """``reproduce --list`` and ``reproduce NAME [--scale S] [--json]``."""
    reproduce = commands.add_parser("reproduce", parents=[store],
                                    help="run a paper's figure or table (a preset) and judge its claims")
    reproduce.add_argument("preset", nargs="?", metavar="NAME",
                           help="a preset name (see --list) or the path of a preset file (.toml, .json)")
    reproduce.add_argument("--list", action="store_true", help="the presets, a line each")
    reproduce.add_argument("--scale", default="classroom", metavar="SCALE",
                           help="classroom (a few CPU minutes, the default) or paper (the paper's sizes, for a GPU)")
    reproduce.add_argument("--json", action="store_true", help="end with the verdicts as one JSON object on stdout")
    reproduce.set_defaults(handler=cmd_reproduce)


def _add_sweep_commands(commands, store) -> None:
    """``sweep`` (the train flags plus what to vary) and ``sweeps [show|join|stop|resume] ID``."""
    sweep = commands.add_parser("sweep", parents=[store],
                                help="train a config over varied fields x seeds (an Optuna study)")
    sweep.set_defaults(handler=cmd_sweep)
    _add_config_flags(sweep)
    sweep.add_argument("--name", default="", help="a label for the sweep (its runs' names add the varied values)")
    sweep.add_argument("--vary", action="append", default=[], metavar="FIELD=V1,V2,...",
                       help="a field and its values (repeatable): FIELD=V1,V2 or LOW:HIGH:COUNT[:log]; "
                            "LOW:HIGH[:log] for random/tpe; FIELD is cell, hidden_size, lr, cell.m1, "
                            "task.seq_len, ... (see the README)")
    sweep.add_argument("--seeds", type=int, default=1, metavar="N", help="seeds per setting (default: 1)")
    sweep.add_argument("--sampler", choices=SAMPLER_CHOICES, default="grid", help="default: grid")
    sweep.add_argument("--trials", type=int, metavar="N", help="settings to sample (random, tpe)")
    sweep.add_argument("--prune", action="store_true",
                       help="stop hopeless trials early (Optuna's median pruner on val/loss)")
    sweep.add_argument("--workers", type=int, default=1, metavar="K",
                       help="runs in parallel on this machine (default: 1)")
    sweep.add_argument("--yes", action="store_true", help=f"allow a sweep of more than {MAX_SWEEP_RUNS:,} runs")
    sweep.add_argument("--background", action="store_true", help="leave it to its workers; print the sweep id")
    sweep.add_argument("--json", action="store_true", help="end with one JSON object per setting on stdout")

    sweeps = commands.add_parser("sweeps", parents=[store], help="list sweeps; show, join, stop or resume one")
    sweeps.set_defaults(handler=cmd_sweeps)
    actions = sweeps.add_subparsers(dest="action", metavar="ACTION")
    # --store before or after the action: an action's own default must not overwrite one given before it
    store = _Parser(add_help=False)
    store.add_argument("--store", metavar="PATH", default=argparse.SUPPRESS,
                       help="run store (default: $STABILITY_STORE, else ~/.stability/runs.db)")
    show = actions.add_parser("show", parents=[store], help="a sweep's results by setting")
    show.add_argument("--json", action="store_true", help="one JSON object per setting")
    join = actions.add_parser("join", parents=[store], help="add workers on this machine to a running sweep")
    join.add_argument("--workers", type=int, metavar="K",
                      help="default: one per visible GPU (CUDA_VISIBLE_DEVICES), else 1")
    join.add_argument("--background", action="store_true", help="do not wait for the workers")
    resume = actions.add_parser("resume", parents=[store], help="continue a stopped sweep")
    resume.add_argument("--workers", type=int, default=1, metavar="K")
    resume.add_argument("--background", action="store_true", help="do not wait for the workers")
    stop = actions.add_parser("stop", parents=[store], help="stop a sweep (its runs keep their rows)")
    for action, handler in ((show, cmd_sweeps_show), (join, cmd_sweeps_join), (resume, cmd_sweeps_resume),
                            (stop, cmd_sweeps_stop)):
        action.add_argument("sweep_id", type=int, metavar="ID")
        action.set_defaults(handler=handler)


def _add_config_flags(train) -> None:
    """One flag per config field: the cell, the task and every TrainConfig field."""
    cell, task = CellConfig(), TaskConfig()
    train.add_argument("--cell", default=cell.name, metavar="NAME",
                       help=f"cell name, or package.module:Class for a cell of your own (default: {cell.name}; "
                            "see `cells`)")
    train.add_argument("--hidden-size", type=int, default=cell.hidden_size, metavar="N",
                       help=f"default: {cell.hidden_size}")
    train.add_argument("--cell-option", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                       help="a cell option, e.g. m1=16 or nonlinearity=relu (repeatable)")
    train.add_argument("--task", default=task.name, metavar="NAME",
                       help=f"task name, or package.module:Class for a task of your own (default: {task.name}; "
                            "see `tasks`)")
    train.add_argument("--seq-len", type=int, metavar="T", help="the task's sequence length (its seq_len option)")
    train.add_argument("--task-option", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                       help="a task option, e.g. dataset=ECG200 (repeatable)")
    train.add_argument("--data-dir", metavar="PATH", help="dataset cache folder of real-data tasks")
    defaults = TrainConfig()
    for field in fields(TrainConfig):
        if field.type == "bool":
            train.add_argument(f"--{field.name.replace('_', '-')}", dest=field.name, action="store_const",
                               const=True, default=None, help=_FLAG_NOTES[field.name])
            continue
        kind = _FLAG_TYPES[field.type]
        default = getattr(defaults, field.name)
        if field.name.endswith("_every"):
            default = "from --steps"
        text = f"default: {'off' if default is None else default}"
        if field.name in _FLAG_NOTES:
            text = f"{_FLAG_NOTES[field.name]}; {text}"
        if field.name in _CHOICES:
            text = f"one of {', '.join(_CHOICES[field.name])}; {text}"
        train.add_argument(f"--{field.name.replace('_', '-')}", dest=field.name, type=kind,
                           metavar={int: "N", float: "X", str: "NAME"}[kind], help=text)


def _add_catalogue_commands(commands) -> None:
    """``cells [NAME]`` and ``tasks [NAME]``: every one in a line, or one in full."""
    for name, handler, text in (("cells", cmd_cells, "the recurrent cells"),
                                ("tasks", cmd_tasks, "the sequence tasks")):
        command = commands.add_parser(name, help=f"{text}; with a NAME, one {name[:-1]} in full")
        command.add_argument("name", nargs="?", metavar="NAME",
                             help=f"a {name[:-1]} name or package.module:Class: its equations, paper and options")
        command.set_defaults(handler=handler)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The RunConfig the ``train`` flags describe; unset flags keep the dataclass defaults."""
    task_options = dict(TaskConfig().options) if args.task == TaskConfig.name else {}
    if args.seq_len is not None:
        task_options["seq_len"] = args.seq_len
    task_options.update(args.task_option)
    if args.data_dir is not None:
        task_options["data_dir"] = args.data_dir
    train = {field.name: getattr(args, field.name) for field in fields(TrainConfig)
             if getattr(args, field.name) is not None}
    return RunConfig(cell=CellConfig(args.cell, args.hidden_size, dict(args.cell_option)),
                     task=TaskConfig(args.task, task_options), train=TrainConfig(**train), name=args.name)


# ------------------------------------------------------------------- commands
def cmd_train(args) -> int:
    from ..core.devices import resolve_device

    config = config_from_args(args)
    config.validate()
    check_buildable(config)
    resolve_device(config.train.device)  # a missing GPU is bad input, before any run is stored
    if args.background:
        run_id = runner.start_run(config, args.store)
        if args.json:
            with RunStore(args.store) as store:
                print(json.dumps({"run_id": run_id, "status": store.run(run_id)["status"], "final": {}}))
        else:
            print(run_id)
        print(f"run {run_id} handed to a background worker; watch it with `python -m stability show {run_id}`",
              file=sys.stderr)
        return 0

    with RunStore(args.store) as store:
        with _interrupts_deferred() as interrupted:  # never a claimed run that nobody trains or stops
            run_id = runner.create_attached_run(store, config)
        return _train_attached(store, config, run_id, args, interrupted)


def cmd_resume(args) -> int:
    """Continue a stopped, interrupted or failed run from its checkpoint, here or in a worker."""
    if args.background:
        runner.resume_run(args.run_id, args.store)
        print(args.run_id)
        print(f"run {args.run_id} handed to a background worker; watch it with "
              f"`python -m stability show {args.run_id}`", file=sys.stderr)
        return 0
    with RunStore(args.store) as store:
        with _interrupts_deferred() as interrupted, runner.scheduling_lock(store):
            config = runner.prepare_resume(store, args.run_id, claim=True)
        return _train_attached(store, config, args.run_id, args, interrupted, resume=True)


def _train_attached(store: RunStore, config, run_id: int, args, interrupted: list, resume: bool = False) -> int:
    """Train (or resume) a run claimed by this process, with a progress line; Ctrl-C stops it."""
    from .. import tasks
    from ..training.run import train_run

    progress = ProgressLine(tasks.describe(config.task.name).metric)
    try:
        if interrupted:
            raise KeyboardInterrupt
        status = train_run(config, store, run_id, progress=progress, resume=resume).status
    except KeyboardInterrupt:
        with _interrupts_deferred():  # a second Ctrl-C must not keep 'stopped' from landing
            store.set_status(run_id, "stopped", error="interrupted from the keyboard")
        status = "stopped"
    except Exception as error:
        store.set_status(run_id, "failed", error=runner.describe_error(error))
        if isinstance(error, (ValueError, tasks.DatasetUnavailable)):  # the task's options or data
            _print_error(error)
            return 2
        status = "failed"
    finally:
        progress.finish()
    if args.json:
        final = {name: (value if math.isfinite(value) else None) for name, value in store.latest(run_id).items()}
        print(json.dumps({"run_id": run_id, "status": status, "final": final}))
    else:
        print_summary(store, run_id)
    if status == "failed":
        _print_error(f"run {run_id} failed: {store.run(run_id)['error']}")
    return EXIT_CODES.get(status, 1)


@contextmanager
def _interrupts_deferred():
    """Hold back Ctrl-C (SIGINT) for the duration; yields a list that is non-empty afterwards
    if one arrived, for the caller to act on.

    The store rolls back a write that an interrupt cuts short (store.py, Note
    [interrupts]); this keeps the few writes that must land, the run's claim and
    its final 'stopped', from being cut at all.
    """
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = signal.signal(signal.SIGINT, lambda number, frame: caught.append(number))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)


def _reconcile(store_path) -> None:
    """Mark runs whose worker is gone and start queued ones; this housekeeping writes, so a
    store locked by a writer skips it: listing and showing only read."""
    try:
        runner.reconcile(store_path)
    except StoreBusy:
        pass


def cmd_runs(args) -> int:
    _reconcile(args.store)
    with RunStore(args.store) as store:
        records = store.records()  # newest first, latest values included: two queries in all
        if not records:
            print(f"no runs in {store}")
            return 0
        header = ("id", "name", "status", "cell", "task", "step", "final", "sweep", "created")
        rows = [header]
        for run in records:
            rows.append((str(run.id), run.name or "", run.status, run.cell or "?", run.task or "?",
                         f"{_or_blank(run.step)}/{_or_blank(run.total_steps)}", _final_metric(run),
                         "" if run.sweep_id is None else f"{run.sweep_id}#{run.trial}",
                         time.strftime("%Y-%m-%d %H:%M", time.localtime(run.created_at))))
    _print_rows(rows)
    return 0


def cmd_show(args) -> int:
    _reconcile(args.store)
    with RunStore(args.store) as store:
        run = store.run(args.run_id)
        latest = store.latest(args.run_id)
    print(f"run {run['id']}{' ' + repr(run['name']) if run['name'] else ''}: {run['status']}")
    for label in ("error", "device", "pid", "step", "total_steps", "total_params", "recurrent_params"):
        if run[label] is not None:
            print(f"{label}: {run[label]}")
    if run["baseline"] is not None:
        print(f"baseline: {run['metric']} {run['baseline']:.4g} ({run['baseline_label'] or 'memoryless'})")
    print("config:")
    print(json.dumps(run["config"], indent=2, sort_keys=True))
    if latest:
        print("latest metrics:")
        width = max(map(len, latest))
        for name in sorted(latest):
            print(f"  {name.ljust(width)}  {latest[name]:.6g}")
    return 0


def cmd_export(args) -> int:
    with RunStore(args.store) as store:
        if args.tensorboard is not None:
            from ..runs.export import to_tensorboard

            for folder in to_tensorboard(store, args.run_id, args.tensorboard):
                print(folder)
            return 0
        if len(args.run_id) > 1:
            raise ValueError("CSV export takes one run id; give several with --tensorboard DIR")
        if args.output is None:
            store.export_csv(args.run_id[0], sys.stdout)
        else:
            store.export_csv(args.run_id[0], args.output)
    return 0


def cmd_stop(args) -> int:
    print(runner.stop_run(args.run_id, args.store))
    return 0


def cmd_cells(args) -> int:
    from .. import cells

    if args.name is not None:
        print("\n".join(describe_lines(cells.describe(args.name))))
        return 0
    described = [cells.describe(name) for name in cells.available()]
    width = max(len(info.name) for info in described)
    for info in described:
        print(f"{info.name.ljust(width)}  {info.summary}")
    return 0


def cmd_tasks(args) -> int:
    from .. import tasks

    if args.name is not None:
        print("\n".join(describe_lines(tasks.describe(args.name))))
        return 0
    described = [tasks.describe(name) for name in tasks.available()]
    width = max(len(info.name) for info in described)
    metric_width = max(len(info.metric) for info in described)
    for info in described:
        print(f"{info.name.ljust(width)}  {info.metric.ljust(metric_width)}  {info.paper}")
    return 0


def describe_lines(info) -> list[str]:
    """A cell's or task's :func:`describe` as text: summary, paper, metric, equations, one line per option."""
    lines = [f"{info.name}: {info.summary}"]
    if info.paper:
        lines.append(f"paper: {info.paper}")
    if getattr(info, "metric", None):
        steps = "every step" if info.target_mode == "every" else "the last step"
        lines.append(f"metric: {info.metric} (targets at {steps})")
    if info.equations:
        lines += ["equations (LaTeX):", *(f"  {equation}" for equation in info.equations)]
    if info.options:
        lines.append("options:")
        rows = [(option.name, option.type, "required" if option.required else f"= {option.default!r}",
                 _option_limits(option), option.help) for option in info.options]
        widths = [max(len(row[column]) for row in rows) for column in range(4)]
        lines += ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, [*widths, 0])).rstrip()
                  for row in rows]
    return lines


def _option_limits(option) -> str:
    if option.choices:
        return "one of " + ", ".join(map(str, option.choices))
    if option.range:
        low, high = option.range
        return f"in [{'-inf' if low is None else low}, {'inf' if high is None else high}]"
    return ""


# ------------------------------------------------------------------ presets
def cmd_reproduce(args) -> int:
    from ..presets import preset as reproduce
    from .. import tasks

    if args.list:
        if args.preset is not None:
            raise reproduce.PresetError("give either --list or a preset NAME, not both")
        rows = [("name", "paper", "figure", "shows", "runs")]
        for info in reproduce.available():
            rows.append((info.name, info.paper, info.figure, info.shows,
                         " / ".join(f"{count} {scale}" for scale, count in info.runs.items())))
        _print_rows(rows)
        return 0
    if args.preset is None:
        raise reproduce.PresetError("give a preset NAME (see `python -m stability reproduce --list`) or --list")
    preset = reproduce.load(args.preset)
    preset.scale(args.scale)  # a scale the preset does not define: one line, before anything is stored
    # the runs train here one after another, as one background worker would: its thread policy (a torch
    # thread per spare core; two threads spinning on a busy 2-core machine ran ~10x slower)
    threads.apply_worker_threads(threads.worker_threads(1))
    with RunStore(args.store) as store:
        print(f"{preset.name}: {preset.paper}, {preset.figure} ({preset.section}), {args.scale} scale: "
              f"{preset.scales[args.scale].get('note', '')}", file=sys.stderr, flush=True)
        rough = reproduce.estimate(preset, store, args.scale)
        if rough is not None:
            print(f"about {_duration(rough['seconds'])} on this machine ({rough['basis']})", file=sys.stderr,
                  flush=True)
        try:
            run_ids = reproduce.run(preset, store, args.scale,
                                    progress=lambda line: print(line, file=sys.stderr, flush=True),
                                    step_progress=lambda config: ProgressLine(tasks.describe(config.task.name).metric))
        except KeyboardInterrupt:
            print(f"{preset.name}: interrupted; the runs so far keep their rows (python -m stability runs)",
                  file=sys.stderr)
            return 130
        verdicts = reproduce.verdicts(preset, store, run_ids)
        if args.json:
            print(json.dumps({"preset": preset.name, "scale": args.scale, "store": str(store), "run_ids": run_ids,
                              "verdicts": [verdict.to_dict() for verdict in verdicts]}, ensure_ascii=False))
            return 0
        print(f"{preset.name}: {preset.title}")
        _print_rows([("claim", "paper", "ours", "verdict")] +
                    [(v.claim, _shown(v.paper), _shown(v.ours), v.outcome) for v in verdicts])
        for verdict in verdicts:
            if verdict.held is None:
                print(f"  could not tell \"{verdict.claim}\": {verdict.why}")
        print(f"  runs {', '.join(map(str, run_ids))} in {store}; the paper's source of each claim: --json")
    return 0


def _shown(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() and abs(value) >= 100 else f"{value:.4g}"
    return str(value)


# ------------------------------------------------------------------ sweeps
def cmd_sweep(args) -> int:
    from .. import sweeps
    from ..core.devices import resolve_device

    config = config_from_args(args)
    if not args.vary:
        raise sweeps.SweepError("give at least one --vary FIELD=V1,V2,... (or use `train` for one run)")
    spec = sweeps.build_spec(config, args.vary, seeds=args.seeds, sampler=args.sampler, trials=args.trials,
                             prune=args.prune, allow_large=args.yes)
    sweeps.check_workers(args.workers)
    resolve_device(config.train.device)
    sweep_id = sweeps.start_sweep(spec, args.store, workers=args.workers, name=args.name)
    if args.background:
        print(sweep_id)
        print(f"sweep {sweep_id} started: {spec.describe()}; watch it with "
              f"`python -m stability sweeps show {sweep_id}` or on the Sweep page", file=sys.stderr)
        return 0
    print(f"sweep {sweep_id}: {spec.describe()}", file=sys.stderr)
    return _follow_sweep(args.store, sweep_id, spec, args.json)


def _follow_sweep(store_location, sweep_id: int, spec, as_json: bool) -> int:
    """Print each run as it ends, until the sweep is done; Ctrl-C stops the sweep. Ends with the table."""
    from .. import sweeps

    reported: set[int] = set()
    done_statuses = ("completed", "diverged", "pruned", "failed")
    try:
        with RunStore(store_location) as store:
            finished = False
            while not finished:
                finished = store.sweep(sweep_id)["status"] != "running" or _workers_gone()
                for run in sweeps.results(store, sweep_id).itertuples():
                    if run.run_id not in reported and run.status in done_statuses:
                        reported.add(run.run_id)
                        value = "" if math.isnan(run.objective) else \
                            f"  {sweeps.objective_name(spec)} {run.objective:.4g}"
                        print(f"[{len(reported)}/{spec.size()}] run {run.run_id} {run.setting} seed={run.seed}: "
                              f"{run.status}{value}", file=sys.stderr, flush=True)
                if not finished:
                    time.sleep(1.0)
    except KeyboardInterrupt:
        with _interrupts_deferred():
            status = sweeps.stop_sweep(sweep_id, store_location)
        print(f"sweep {sweep_id} {status}; continue it with `python -m stability sweeps resume {sweep_id}`",
              file=sys.stderr)
    with RunStore(store_location) as store:
        _print_sweep(store, sweep_id, as_json)
    return 0


def _workers_gone() -> bool:
    """No worker this process started is still running."""
    runner._reap_launched()
    return not runner._launched


def cmd_sweeps(args) -> int:
    with RunStore(args.store) as store:
        listed = store.sweeps()
        if not listed:
            print(f"no sweeps in {store}")
            return 0
        from .. import sweeps

        rows = [("id", "name", "status", "runs", "done", "sweep")]
        for sweep in listed:
            spec = sweeps.SweepSpec.from_dict(sweep["spec"])
            counts = sweep["counts"]
            done = sum(n for status, n in counts.items() if status not in ("queued", "running"))
            rows.append((str(sweep["id"]), sweep["name"] or "", sweep["status"], str(spec.size()), str(done),
                         spec.describe()))
    _print_rows(rows)
    return 0


def cmd_sweeps_show(args) -> int:
    with RunStore(args.store) as store:
        _print_sweep(store, args.sweep_id, args.json)
    return 0


def _print_sweep(store: RunStore, sweep_id: int, as_json: bool) -> None:
    """The sweep's settings: a table (best first), or one JSON object per setting."""
    from .. import sweeps

    sweep = store.sweep(sweep_id)
    spec = sweeps.SweepSpec.from_dict(sweep["spec"])
    settings = sweeps.setting_rows(sweeps.results(store, sweep_id), spec)
    if as_json:
        for row in settings:
            print(json.dumps({"sweep_id": sweep_id, **row}))
        return
    objective = sweeps.objective_name(spec)
    print(f"sweep {sweep_id} {sweep['status']}: {spec.describe()}")
    fields_ = [vary.field for vary in spec.vary]
    header = (*fields_, f"mean {objective}", "min", "max", "seeds", "diverged", "pruned", "runs")
    sign = -1 if sweeps.direction(spec) == "maximize" else 1
    ordered = sorted(settings, key=lambda row: (row["mean"] is None, sign * (row["mean"] or 0.0)))
    rows = [header]
    for row in ordered:
        rows.append((*(shown(row["setting"][path]) for path in fields_),
                     *(_or_blank(None if row[key] is None else f"{row[key]:.4g}") for key in ("mean", "min", "max")),
                     f"{row['completed']}/{len(row['runs'])}", str(row["diverged"]), str(row["pruned"]),
                     ",".join(str(run["run_id"]) for run in row["runs"])))
    _print_rows(rows)


def cmd_sweeps_join(args) -> int:
    from .. import sweeps

    gpus = None
    if args.workers is None:
        import torch

        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        listed = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
        gpus = (listed or [str(i) for i in range(visible)])[:visible] or None
    workers = sweeps.join_sweep(args.sweep_id, args.store, workers=args.workers or 1, gpus=gpus)
    print(f"sweep {args.sweep_id}: {len(workers)} worker{'s' * (len(workers) != 1)} joined"
          f"{' on GPUs ' + ','.join(gpus) if gpus else ''}", file=sys.stderr)
    return _wait_for_workers(args, workers)


def cmd_sweeps_resume(args) -> int:
    from .. import sweeps

    requeued = sweeps.resume_sweep(args.sweep_id, args.store, workers=args.workers)
    print(f"sweep {args.sweep_id} resumed: {requeued} run{'s' * (requeued != 1)} continue from their checkpoints",
          file=sys.stderr)
    return _wait_for_workers(args, list(runner._launched))


def _wait_for_workers(args, workers: list) -> int:
    """In the foreground, wait for this machine's workers (a SLURM job must outlive them), then
    print the sweep's table; Ctrl-C stops the sweep."""
    if args.background:
        print(args.sweep_id)
        return 0
    try:
        for process in workers:
            process.wait()
    except KeyboardInterrupt:
        from .. import sweeps

        with _interrupts_deferred():
            print(f"sweep {args.sweep_id} {sweeps.stop_sweep(args.sweep_id, args.store)}", file=sys.stderr)
    with RunStore(args.store) as store:
        _print_sweep(store, args.sweep_id, False)
    return 0


def cmd_sweeps_stop(args) -> int:
    from .. import sweeps

    print(sweeps.stop_sweep(args.sweep_id, args.store))
    return 0


def _print_rows(rows: list[tuple]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


# ------------------------------------------------------------------ rendering
class ProgressLine:
    """The trainer's ``progress`` callback: one line on stderr, rewritten in place on a
    terminal (``\\r``), else printed every 10% of the steps."""

    def __init__(self, metric: str, stream=None):
        self.metric = metric
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.next_fraction = 0.0
        self.width = 0
        self.val = None

    def __call__(self, info: dict) -> None:
        step, total = info["step"], info["total_steps"]
        self.val = info.get(f"val/{self.metric}", self.val)
        if not self.tty:
            if step < total and step / total < self.next_fraction:
                return
            self.next_fraction = math.floor(step / total * 10 + 1) / 10
        parts = [f"step {step}/{total}", f"loss {info.get('train/loss', math.nan):.4g}",
                 f"{self.metric} {info.get(f'train/{self.metric}', math.nan):.4g}"]
        if self.val is not None:
            parts.append(f"val {self.metric} {self.val:.4g}")
        parts += [f"{info['steps_per_s']:.1f} steps/s", f"ETA {_duration(info['eta_s'])}"]
        text = "  ".join(parts)
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()


def print_summary(store: RunStore, run_id: int) -> None:
    run = store.run(run_id)
    latest = store.latest(run_id)
    took = (run["finished_at"] or time.time()) - (run["started_at"] or run["created_at"])
    print(f"run {run_id} {run['status']} at step {_or_blank(run['step'])}/{_or_blank(run['total_steps'])} "
          f"in {_duration(took)}")
    if run["error"]:
        print(f"  {run['error']}")
    finals = {name: value for name, value in sorted(latest.items()) if name.startswith("test/")}
    for name, value in finals.items():
        line = f"  {name} {value:.4g}"
        if run["baseline"] is not None and name == f"test/{run['metric']}":
            line += f"  (baseline {run['baseline']:.4g}: {run['baseline_label'] or 'memoryless'})"
        print(line)
    print(f"  store: {store}  (python -m stability show {run_id})")


def _final_metric(run) -> str:
    """``test <metric> value`` once the run has one, else the latest validation value."""
    for split in ("test", "val"):
        name = f"{split}/{run.metric}"
        if name in run.latest:
            return f"{split} {run.metric} {run.latest[name]:.4g}"
    return ""


def _or_blank(value) -> str:
    return "-" if value is None or pd.isna(value) else str(value)


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    if seconds < 60:
        return f"{seconds:.1f} s"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except BrokenPipeError:  # e.g. `python -m stability export 3 | head`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except BAD_INPUT as error:
        _print_error(error)
        return 2


if __name__ == "__main__":
    sys.exit(main())
