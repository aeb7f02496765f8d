"""The commands on single runs: ``train``, ``runs``, ``show``, ``stop``, ``resume``, ``export``.

    python -m stability train --cell spectral --task adding --seq-len 100 [--background] [--json]
    python -m stability runs | show ID | stop ID | resume ID [--no-cuda-graphs] [--background] [--json]
    python -m stability export ID [--output FILE] | export ID ... --tensorboard DIR

A foreground ``train`` or ``resume`` claims the run for this process and trains it here
(:mod:`stability.execution.lifecycle`) with a progress line on stderr; Ctrl-C or SIGTERM stops the
run, its rows and checkpoint kept. ``--background`` hands it to a worker
(:mod:`stability.workers.scheduler`). ``resume --no-cuda-graphs`` (``--cuda-graphs``) continues a run
with that execution choice, written into its stored config first (``lifecycle.execution_switched``). The exit
status is :data:`EXIT_CODES` of the run's status; ``stop`` exits 1 when the run could not be stopped (one
line says why; it is left as it is).
"""
from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from typing import TYPE_CHECKING

from ..execution.signals import Terminated
from ..runs.errors import StoreBusy, StoreFull
from ..runs.status import TERMINAL
from .arguments import add_config_flags, add_execution_flags, config_from_args
from .output import ProgressLine, or_blank, print_error, print_rows, print_summary, printable

if TYPE_CHECKING:
    from ..runs.store import RunStore

# The store, the queue and the trainer are imported by the commands that use them: the parser, `runs`
# and `show` never import torch, and a foreground `train` or `resume` sets its thread policy before
# torch is first imported (Note [A command line without torch] in stability/cli/main.py).

EXIT_CODES = {"completed": 0, "stopped": 0, "diverged": 1, "failed": 1}


def add_commands(commands, store) -> None:
    """``train``, ``runs``, ``show``, ``stop``, ``resume`` and ``export``, each with ``--store`` (``store``)."""
    train = commands.add_parser("train", parents=[store], help="train a cell on a task")
    train.set_defaults(handler=cmd_train)
    add_config_flags(train)
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
    add_execution_flags(resume)
    resume.set_defaults(handler=cmd_resume)
    export = commands.add_parser("export", parents=[store],
                                 help="a run's metric rows as CSV, or runs as TensorBoard event files")
    export.add_argument("run_id", type=int, metavar="ID", nargs="+")
    where = export.add_mutually_exclusive_group()
    where.add_argument("--output", "-o", metavar="FILE", help="the CSV file (default: stdout)")
    where.add_argument("--tensorboard", metavar="DIR",
                       help="write TensorBoard event files, DIR/run-<id> a run (then: tensorboard --logdir DIR)")
    export.add_argument("--force", action="store_true",
                        help="overwrite FILE, or replace a run's earlier event files in DIR (never the store)")
    export.set_defaults(handler=cmd_export)


def cmd_train(args) -> int:
    threads = None if args.background else _foreground_environment()  # before anything here imports torch
    config = config_from_args(args)
    config.validate()  # a number out of bounds: one line before torch is imported
    if threads is not None:
        _apply_threads(threads)
    from ..admission.preflight import check_buildable
    from ..core.devices import resolve_device
    from ..execution import lifecycle
    from ..runs.store import RunStore
    from ..workers import scheduler

    check_buildable(config)
    resolve_device(config.train.device)  # a missing GPU is bad input, before any run is stored
    if args.background:
        run_id = scheduler.start_run(config, args.store)
        if args.json:
            with RunStore(args.store) as store:
                print(json.dumps({"run_id": run_id, "status": store.record(run_id).status, "final": {}}))
        else:
            print(run_id)
        print(f"run {run_id} handed to a background worker; watch it with `python -m stability show {run_id}`",
              file=sys.stderr)
        return 0

    with RunStore(args.store) as store:
        return _train_attached(store, lambda: lifecycle.create_claimed(store, config, args.name or None), config, args)


def cmd_resume(args) -> int:
    """Continue a stopped, interrupted or failed run from its checkpoint, here or in a worker; with
    ``--no-cuda-graphs`` or ``--cuda-graphs`` (``args.cuda_graphs``), trained that way from now on
    (``lifecycle.execution_switched``), on every path: here, a sweep's run here, a worker."""
    if not args.background:
        _foreground_threads()  # before anything below imports torch
    from ..execution import lifecycle
    from ..runs.store import RunStore
    from ..workers import scheduler

    if args.background:
        with RunStore(args.store) if args.cuda_graphs is not None else contextlib.nullcontext() as store, \
                lifecycle.execution_switched(store, args.run_id, args.cuda_graphs):
            scheduler.resume_run(args.run_id, args.store)  # the worker reads the run's config as stored
        print(args.run_id)
        print(f"run {args.run_id} handed to a background worker; watch it with "
              f"`python -m stability show {args.run_id}`", file=sys.stderr)
        return 0
    with RunStore(args.store) as store:
        scheduler.check_resume_room(store, args.run_id)  # room for its checkpoints, as the queue's resume checks
        if store.record(args.run_id).sweep_id is not None:  # claimed under its sweep's lock, its trial told
            with lifecycle.execution_switched(store, args.run_id, args.cuda_graphs):  # its claim reads the stored config
                return _resume_trial(store, args)
        config = lifecycle.check_resumable(store, args.run_id)  # one line when it cannot resume, nothing changed
        with lifecycle.execution_switched(store, args.run_id, args.cuda_graphs):
            if args.cuda_graphs is not None:  # as the record says now
                config.train.cuda_graphs = args.cuda_graphs
            return _train_attached(store, lambda: lifecycle.claim_resume(store, args.run_id, checkpoint=False)[0],
                                   config, args, resume=True)


def _train_attached(store: RunStore, take, config, args, resume: bool = False) -> int:
    """Claim a run with ``take()`` and train (or resume) it here (``lifecycle.claimed``), with a progress
    line; Ctrl-C stops it."""
    from .. import tasks
    from ..execution import lifecycle

    progress, run = ProgressLine(tasks.describe(config.task.name).metric), None
    try:
        with lifecycle.claimed(store, take) as run:
            status = run.train(config, resume=resume, progress=progress).status
    except (KeyboardInterrupt, Terminated):
        if run is None:
            raise
        status = "stopped"  # and so stored, with its rows and checkpoint
    except Exception as error:
        if run is None:  # the claim itself: its one line, nothing stored
            raise
        if isinstance(error, (ValueError, tasks.DatasetUnavailable)):  # the task's options or data
            print_error(error)
            return 2
        status = "failed"
    finally:
        progress.finish()
    return _report(store, run.run_id, status, args)


def _resume_trial(store: RunStore, args) -> int:
    """Continue a sweep's run in this process and tell its trial how it ended (stability.sweeps)."""
    from .. import sweeps, tasks

    lines = []

    def progress_line(config):
        lines.append(ProgressLine(tasks.describe(config.task.name).metric))
        return lines[0]

    try:
        status = sweeps.workers.resume_trial(store, args.run_id, step_progress=progress_line)
    except (KeyboardInterrupt, Terminated):
        if not lines:  # before its claim: nothing to report
            raise
        status = "stopped"
    finally:
        for line in lines:
            line.finish()
    return _report(store, args.run_id, status, args)


def _report(store: RunStore, run_id: int, status: str, args) -> int:
    """The run's summary (or its JSON object), its error where it failed; the exit status."""
    if args.json:
        final = {name: (value if math.isfinite(value) else None) for name, value in store.latest(run_id).items()}
        print(json.dumps({"run_id": run_id, "status": status, "final": final}))
    else:
        print_summary(store, run_id)
    if status == "failed":
        print_error(f"run {run_id} failed: {store.record(run_id).error}")
    return EXIT_CODES.get(status, 1)


def _reconcile(store_path) -> None:
    """Mark runs whose worker is gone and start queued ones; this housekeeping writes, so a
    store locked by a writer, or on a full disk, skips it: listing and showing only read."""
    from ..workers import scheduler

    try:
        scheduler.reconcile(store_path)
    except (StoreBusy, StoreFull):
        pass


def cmd_runs(args) -> int:
    from ..runs.store import RunStore

    _reconcile(args.store)
    with RunStore(args.store) as store:
        records = store.records()  # newest first, latest values included: two queries in all
        if not records:
            print(f"no runs in {printable(store)}")
            return 0
        header = ("id", "name", "status", "cell", "task", "step", "final", "sweep", "created")
        rows = [header]
        for run in records:
            rows.append((str(run.id), run.name or "", run.status, run.cell or "?", run.task or "?",
                         f"{or_blank(run.step)}/{or_blank(run.total_steps)}", _final_metric(run),
                         "" if run.sweep_id is None else f"{run.sweep_id}#{run.trial}",
                         time.strftime("%Y-%m-%d %H:%M", time.localtime(run.created_at))))
    print_rows(rows)
    return 0


def _final_metric(run) -> str:
    """``test <metric> value`` once the run has one, else the latest validation value."""
    for split in ("test", "val"):
        name = f"{split}/{run.metric}"
        if name in run.latest:
            return f"{split} {run.metric} {run.latest[name]:.4g}"
    return ""


def cmd_show(args) -> int:
    from ..runs.store import RunStore

    _reconcile(args.store)
    with RunStore(args.store) as store:
        run = store.record(args.run_id)
    latest = run.latest
    print(f"run {run.id}{' ' + repr(run.name) if run.name else ''}: {printable(run.status)}")
    for label in ("error", "device", "pid", "step", "total_steps", "total_params", "recurrent_params"):
        if getattr(run, label) is not None:
            print(f"{label}: {printable(getattr(run, label))}")
    if run.baseline is not None:
        print(f"baseline: {printable(run.metric)} {run.baseline:.4g} ({printable(run.baseline_label or 'memoryless')})")
    print("config:")
    print(json.dumps(dict(run.raw_config), indent=2, sort_keys=True))
    if latest:
        print("latest metrics:")
        width = max(len(printable(name)) for name in latest)
        for name in sorted(latest):
            print(f"  {printable(name).ljust(width)}  {latest[name]:.6g}")
    return 0


def cmd_export(args) -> int:
    """CSV on stdout or into ``--output`` (refused where it exists, unless ``--force``; never the store),
    or TensorBoard event files (runs/export.py, Note [Exporting over files])."""
    from ..runs.export import csv_output, to_tensorboard
    from ..runs.store import RunStore

    with RunStore(args.store) as store:
        if args.tensorboard is not None:
            for folder in to_tensorboard(store, args.run_id, args.tensorboard, replace=args.force):
                print(printable(folder))
            return 0
        if len(args.run_id) > 1:
            raise ValueError("CSV export takes one run id; give several with --tensorboard DIR")
        if args.output is None:
            store.export_csv(args.run_id[0], sys.stdout)
        else:
            store.record(args.run_id[0])  # RunNotFound before the file is made
            with csv_output(args.output, store, force=args.force) as file:
                store.export_csv(args.run_id[0], file)
    return 0


def cmd_stop(args) -> int:
    """The run's status once stopped (exit 0); a run that could not be stopped is left as it is, with
    one line on stderr saying why (exit 1)."""
    from ..workers import scheduler

    outcome = scheduler.stop_run(args.run_id, args.store)
    if outcome in TERMINAL:
        print(outcome)
        return 0
    print_error(outcome)
    return 1


def _foreground_threads() -> None:
    """A run trained in this process gets the background workers' thread policy (stability.workers.threads):
    passive OpenMP waiting set before torch is first imported here, one core kept free, the threads of one of
    ``STABILITY_MAX_RUNS`` workers."""
    _apply_threads(_foreground_environment())


def _foreground_environment() -> int:
    """The environment half of :func:`_foreground_threads` (no torch); the thread count for :func:`_apply_threads`."""
    from ..workers import scheduler, threads

    return threads.adopt_worker_environment(scheduler.max_concurrent_runs())


def _apply_threads(count: int) -> None:
    from ..workers import threads

    threads.apply_worker_threads(count)
