"""The entry point of a background worker process: ``python -m stability.cli.worker``.

    STABILITY_STORE=URL python -m stability.cli.worker --worker RUN_ID     # train one run
    STABILITY_STORE=URL python -m stability.cli.worker --sweep SWEEP_ID    # work on a sweep until it is done
    STABILITY_STORE=URL python -m stability.cli.worker --warm              # wait for a run on stdin (workers/warm.py)

This module is started by :mod:`stability.workers.scheduler` and :mod:`stability.sweeps` (never
forks), one per run or sweep worker, in their own session; :mod:`stability.workers.processes`
recognises its own workers by this module's name on their command line. A run of a sweep handed to a
``--worker`` (one resumed on its own) tells its trial how it ended. SIGTERM ends the run in training
'stopped' (stability.execution.lifecycle, Note [Interrupts]) and the worker with it. The store comes
in the environment (``STABILITY_STORE``), not on the command line: a server's URL holds its password,
and ``ps`` shows every user every command line, while a process's environment is its own user's to
read. ``--store`` still overrides it, for running a worker by hand.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..runs.location import ENV_VAR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stability.cli.worker",
                                     description="A run's (or a sweep's) worker process.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--worker", type=int, metavar="RUN_ID")
    which.add_argument("--sweep", type=int, metavar="SWEEP_ID")
    which.add_argument("--warm", action="store_true",
                       help="wait, with torch imported, for the run the queue hands over stdin ($STABILITY_STORE)")
    parser.add_argument("--store", metavar="PATH_OR_URL", default=os.environ.get(ENV_VAR) or None,
                        help=f"the run store (default: ${ENV_VAR}, where the queue puts it)")
    args = parser.parse_args(argv)
    if args.store is None and not args.warm:
        parser.error(f"no run store: set {ENV_VAR} or pass --store")
    from ..execution.signals import Terminated

    try:
        if args.warm:
            return _warm_worker()
        if args.sweep is not None:
            return _sweep_worker(args.sweep, args.store)
        return _run_worker(args.worker, args.store)
    except Terminated:
        print("terminated", flush=True)
        return 143


def _sweep_worker(sweep_id: int, store: str) -> int:
    from ..sweeps.workers import run_sweep_worker

    trained = run_sweep_worker(sweep_id, store)
    print(f"sweep {sweep_id}: this worker trained {trained} run{'s' * (trained != 1)}", flush=True)
    return 0


def _run_worker(run_id: int, store: str) -> int:
    from ..runs.store import RunStore
    from ..workers.scheduler import run_worker

    with RunStore(store) as opened:  # opened once: the worker trains in this store
        if opened.record(run_id, latest=False).sweep_id is not None:
            from ..sweeps.workers import run_trial_worker

            status = run_trial_worker(run_id, opened)
        else:
            status = run_worker(run_id, opened)
    print(f"run {run_id}: {status}", flush=True)
    return 0


def _warm_worker() -> int:
    """A warm worker (stability.workers.warm, Note [Warm workers]): import what training needs, then
    block on stdin until the queue hands a run, and train it as a fresh worker would."""
    import importlib
    import os

    # The point of a warm worker: what a run's start imports, imported before the run exists (none of it
    # calls CUDA): torch, torch._dynamo (torch.optim's first optimizer imports it: seconds on 2 cores), the
    # trainer with the cells and tasks it builds from.
    for module in ("torch", "torch._dynamo", "torch.optim", "stability.training.run", "stability.cells",
                   "stability.tasks"):
        importlib.import_module(module)
    from ..workers import threads
    from ..workers.processes import CLAIM_ENV
    from ..workers.scheduler import max_concurrent_runs
    from ..workers.warm import read_order

    threads.apply_worker_threads(threads.worker_threads(max_concurrent_runs()))
    print(f"warm worker {os.getpid()}: ready", flush=True)
    order = read_order(sys.stdin)
    if order is None:
        print("warm worker: its server closed the pipe; no run", flush=True)
        return 0
    os.environ.update(order.environment)  # the slot's GPU and STABILITY_MAX_RUNS, before any CUDA call
    os.environ[CLAIM_ENV] = order.token
    return _run_worker(order.run_id, os.environ[ENV_VAR])


if __name__ == "__main__":
    sys.exit(main())
