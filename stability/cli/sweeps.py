"""The sweep commands: ``sweep`` and ``sweeps [show|join|resume|stop] ID`` (:mod:`stability.sweeps`).

    python -m stability sweep --cell rnn --vary lr=1e-3,1e-2 --seeds 3 [--workers K] [--background]
    python -m stability sweeps | sweeps show ID [--json] | sweeps join ID | sweeps resume ID | sweeps stop ID
    python -m stability sweeps join ID [--workers K] [--gpus 0,1]   # K workers here, round robin over the GPUs

In the foreground ``sweep``, ``join`` and ``resume`` wait for this machine's workers, a line
on stderr as each run ends, and end with the sweep's table (best setting first); Ctrl-C stops
the sweep, whose runs keep their rows.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import TYPE_CHECKING

from ..core import gpus as gpu_facts
from ..core.formatting import shown
from ..execution.signals import signals_deferred
from ..workers.gpu_slots import gpu_for
from .arguments import add_config_flags, config_from_args, store_parent
from .output import print_error, print_rows, printable

if TYPE_CHECKING:
    from ..runs.store import RunStore

# stability.sweeps (Optuna, the queue, the trainer) and the store are imported by the commands that use
# them (Note [A command line without torch] in stability/cli/main.py); so the parser's two values of
# stability.sweeps.spec are written here, and tests/test_cli_startup.py checks that they are the spec's.
SAMPLERS = ("grid", "random", "tpe")
MAX_RUNS = 10_000
DONE_STATUSES = ("completed", "diverged", "pruned", "failed")


def add_commands(commands, store) -> None:
    """``sweep`` (the train flags plus what to vary) and ``sweeps [show|join|stop|resume] ID``."""
    _add_sweep_command(commands, store)
    sweeps_command = commands.add_parser("sweeps", parents=[store], help="list sweeps; show, join, stop or resume one")
    sweeps_command.set_defaults(handler=cmd_sweeps)
    actions = sweeps_command.add_subparsers(dest="action", metavar="ACTION")
    # --store before or after the action: an action's own default must not overwrite one given before it
    store = store_parent(default=argparse.SUPPRESS)
    show = actions.add_parser("show", parents=[store], help="a sweep's results by setting")
    show.add_argument("--json", action="store_true", help="one JSON object per setting")
    join = actions.add_parser("join", parents=[store], help="add workers on this machine to a running sweep")
    join.add_argument("--workers", type=int, metavar="K",
                      help="default: one per GPU (of --gpus), else 1; with more workers than GPUs several share one")
    join.add_argument("--gpus", metavar="LIST",
                      help="GPUs to spread the workers over, round robin, as CUDA_VISIBLE_DEVICES names them "
                           "(0,1 or GPU-UUIDs; default: every GPU visible here)")
    join.add_argument("--background", action="store_true", help="do not wait for the workers")
    resume = actions.add_parser("resume", parents=[store], help="continue a stopped sweep")
    resume.add_argument("--workers", type=int, default=1, metavar="K")
    resume.add_argument("--background", action="store_true", help="do not wait for the workers")
    stop = actions.add_parser("stop", parents=[store], help="stop a sweep (its runs keep their rows)")
    for action, handler in ((show, cmd_sweeps_show), (join, cmd_sweeps_join), (resume, cmd_sweeps_resume),
                            (stop, cmd_sweeps_stop)):
        action.add_argument("sweep_id", type=int, metavar="ID")
        action.set_defaults(handler=handler)


def _add_sweep_command(commands, store) -> None:
    sweep = commands.add_parser("sweep", parents=[store],
                                help="train a config over varied fields x seeds (an Optuna study)")
    sweep.set_defaults(handler=cmd_sweep)
    add_config_flags(sweep)
    sweep.add_argument("--name", default="", help="a label for the sweep (its runs' names add the varied values)")
    sweep.add_argument("--vary", action="append", default=[], metavar="FIELD=V1,V2,...",
                       help="a field and its values (repeatable): FIELD=V1,V2 or LOW:HIGH:COUNT[:log]; "
                            "LOW:HIGH[:log] for random/tpe; FIELD is cell, hidden_size, lr, cell.m1, "
                            "task.seq_len, ... (see the README)")
    sweep.add_argument("--seeds", type=int, default=1, metavar="N", help="seeds per setting (default: 1)")
    sweep.add_argument("--sampler", choices=SAMPLERS, default="grid", help="default: grid")
    sweep.add_argument("--trials", type=int, metavar="N", help="settings to sample (random, tpe)")
    sweep.add_argument("--prune", action="store_true",
                       help="stop hopeless trials early (Optuna's median pruner on val/loss)")
    sweep.add_argument("--workers", type=int, default=1, metavar="K",
                       help="runs in parallel on this machine (default: 1)")
    sweep.add_argument("--yes", action="store_true", help=f"allow a sweep of more than {MAX_RUNS:,} runs")
    sweep.add_argument("--background", action="store_true", help="leave it to its workers; print the sweep id")
    sweep.add_argument("--json", action="store_true", help="end with one JSON object per setting on stdout")


def cmd_sweep(args) -> int:
    from .. import sweeps
    from ..core.devices import resolve_device

    config = config_from_args(args)
    if not args.vary:
        raise sweeps.SweepError("give at least one --vary FIELD=V1,V2,... (or use `train` for one run)")
    spec = sweeps.build_spec(config, args.vary, seeds=args.seeds, sampler=args.sampler, trials=args.trials,
                             prune=args.prune, allow_large=args.yes)
    note = spec.check_note()  # some models checked without building their cells, as the Sweep page says
    if note:
        print(f"note: {note}", file=sys.stderr)
    workers = _capped_workers(args.workers)
    resolve_device(config.train.device)
    sweep_id = sweeps.start_sweep(spec, args.store, workers=workers, name=args.name)
    if args.background:
        print(sweep_id)
        print(f"sweep {sweep_id} started: {printable(spec.describe())}; watch it with "
              f"`python -m stability sweeps show {sweep_id}` or on the Sweep page", file=sys.stderr)
        return 0
    print(f"sweep {sweep_id}: {printable(spec.describe())}", file=sys.stderr)
    return _follow_sweep(args.store, sweep_id, spec, args.json)


def _follow_sweep(store_location, sweep_id: int, spec, as_json: bool) -> int:
    """Print each run as it ends, until the sweep is done; Ctrl-C stops the sweep. Ends with the table."""
    from .. import sweeps
    from ..runs.store import RunStore

    reported: set[int] = set()
    try:
        with RunStore(store_location) as store:
            finished = False
            while not finished:
                finished = store.sweep(sweep_id).status != "running" or not _workers_here(store_location, store,
                                                                                          sweep_id)
                for run in sweeps.results(store, sweep_id).itertuples():
                    if run.run_id not in reported and run.status in DONE_STATUSES:
                        reported.add(run.run_id)
                        _print_run_ended(run, len(reported), spec)
                if not finished:
                    time.sleep(1.0)
    except KeyboardInterrupt:
        with signals_deferred():
            status = sweeps.stop_sweep(sweep_id, store_location)
        print(f"sweep {sweep_id} {status}; continue it with `python -m stability sweeps resume {sweep_id}`",
              file=sys.stderr)
    with RunStore(store_location) as store:
        _print_sweep(store, sweep_id, as_json)
    return 0


def _capped_workers(workers) -> int:
    """``--workers``, at most this machine's run slots (``STABILITY_MAX_RUNS``, set by whoever starts the
    CLI or the server: stability.workers.slots, Note [Slots]); one line on stderr when it is capped."""
    from .. import sweeps
    from ..workers import processes, scheduler

    workers = sweeps.check_workers(workers)
    limit = scheduler.max_concurrent_runs()
    if workers > limit:
        print(f"--workers {workers} is more than this machine's {limit} run slot{'s' * (limit > 1)} "
              f"({processes.MAX_RUNS_ENV}={limit}): {limit} worker{'s' * (limit > 1)}", file=sys.stderr)
    return min(workers, limit)


def _workers_here(store_location, store, sweep_id: int) -> bool:
    """Whether a worker of the sweep lives on this machine or waits for a slot here (started by the
    scheduler as one frees, from this process or from a worker handing its slot on)."""
    from ..workers import processes, scheduler, slots

    processes.launched_workers()  # reaps the ones this process started
    if slots.waiting(store, sweep_id):
        scheduler.reconcile(store_location)
        return True
    return bool(slots.sweep_worker_pids(store, sweep_id))


def _print_run_ended(run, count: int, spec) -> None:
    """``[count/size] run ID SETTING seed=S: STATUS  OBJECTIVE VALUE`` on stderr."""
    from .. import sweeps

    value = "" if math.isnan(run.objective) else f"  {sweeps.objective_name(spec)} {run.objective:.4g}"
    print(f"[{count}/{spec.size()}] run {run.run_id} {printable(run.setting)} seed={run.seed}: {run.status}{value}",
          file=sys.stderr, flush=True)


def cmd_sweeps(args) -> int:
    from .. import sweeps
    from ..runs.store import RunStore

    with RunStore(args.store) as store:
        listed = store.sweeps()
        if not listed:
            print(f"no sweeps in {printable(store)}")
            return 0
        rows = [("id", "name", "status", "runs", "done", "sweep")]
        for sweep in listed:
            spec = sweeps.SweepSpec.from_dict(sweep.spec)
            counts = sweep.counts
            done = sum(n for status, n in counts.items() if status not in ("queued", "running"))
            rows.append((str(sweep.id), sweep.name or "", sweep.status, str(spec.size()), str(done),
                         spec.describe()))
    print_rows(rows)
    return 0


def cmd_sweeps_show(args) -> int:
    from ..runs.store import RunStore

    with RunStore(args.store) as store:
        _print_sweep(store, args.sweep_id, args.json)
    return 0


def _print_sweep(store: RunStore, sweep_id: int, as_json: bool) -> None:
    """The sweep's settings: a table (best first), or one JSON object per setting."""
    from .. import sweeps

    sweep = store.sweep(sweep_id)
    spec = sweeps.SweepSpec.from_dict(sweep.spec)
    settings = sweeps.setting_rows(sweeps.results(store, sweep_id), spec)
    if as_json:
        for row in settings:
            print(json.dumps({"sweep_id": sweep_id, **row}))
        return
    objective = sweeps.objective_name(spec)
    print(f"sweep {sweep_id} {sweep.status}: {printable(spec.describe())}")
    fields_ = [vary.field for vary in spec.vary]
    header = (*fields_, f"mean {objective}", "min", "max", "seeds", "diverged", "pruned", "runs")
    sign = -1 if sweeps.direction(spec) == "maximize" else 1
    ordered = sorted(settings, key=lambda row: (row["mean"] is None, sign * (row["mean"] or 0.0)))
    rows = [header]
    for row in ordered:
        rows.append((*(shown(row["setting"][path]) for path in fields_),
                     *(_statistic(row[key]) for key in ("mean", "min", "max")),
                     f"{row['completed']}/{len(row['runs'])}", str(row["diverged"]), str(row["pruned"]),
                     ",".join(str(run["run_id"]) for run in row["runs"])))
    print_rows(rows)


def _statistic(value: float | None) -> str:
    """A setting's mean, min or max in the table: 4 significant figures, where ``shown`` (the setting's
    values, as run names write them) keeps 6; ``-`` when no seed has completed."""
    return "-" if value is None else f"{value:.4g}"


def cmd_sweeps_join(args) -> int:
    from .. import sweeps

    gpus = gpu_facts.parse_gpu_list(args.gpus) if args.gpus is not None else gpu_facts.visible_gpus()
    count = _capped_workers(args.workers if args.workers is not None else max(1, len(gpus)))
    workers = sweeps.join_sweep(args.sweep_id, args.store, workers=count, gpus=gpus)
    used = sorted({gpu_for(index, gpus) for index in range(len(workers))}, key=gpus.index) if gpus else []
    waiting = count - len(workers)
    print(f"sweep {args.sweep_id}: {len(workers)} worker{'s' * (len(workers) != 1)} joined"
          f"{' on GPUs ' + ','.join(used) if used else ''}"
          + (f", {waiting} more when a run slot frees" if waiting > 0 else ""), file=sys.stderr)
    return _wait_for_workers(args)


def cmd_sweeps_resume(args) -> int:
    from .. import sweeps

    requeued = sweeps.resume_sweep(args.sweep_id, args.store, workers=_capped_workers(args.workers))
    print(f"sweep {args.sweep_id} resumed: {requeued} run{'s' * (requeued != 1)} continue from their checkpoints",
          file=sys.stderr)
    return _wait_for_workers(args)


def _wait_for_workers(args) -> int:
    """In the foreground, wait for this machine's workers, those waiting for a slot included (a SLURM
    job must outlive them), then print the sweep's table; Ctrl-C stops the sweep."""
    from .. import sweeps
    from ..runs.store import RunStore

    if args.background:
        print(args.sweep_id)
        return 0
    try:
        with RunStore(args.store) as store:
            while _workers_here(args.store, store, args.sweep_id):
                time.sleep(1.0)
    except KeyboardInterrupt:
        with signals_deferred():
            print(f"sweep {args.sweep_id} {sweeps.stop_sweep(args.sweep_id, args.store)}", file=sys.stderr)
    with RunStore(args.store) as store:
        _print_sweep(store, args.sweep_id, False)
    return 0


def cmd_sweeps_stop(args) -> int:
    """The sweep's status once stopped (exit 0); one line on stderr and exit 1 when some of its runs
    could not be stopped (they are left as they are, the sweep's stop requested)."""
    from .. import sweeps

    outcome = sweeps.stop_sweep(args.sweep_id, args.store)
    if outcome in ("stopped", "completed"):
        print(outcome)
        return 0
    print_error(outcome)
    return 1
