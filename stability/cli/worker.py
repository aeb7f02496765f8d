"""The entry point of a background worker process: ``python -m stability.cli.worker``.

    python -m stability.cli.worker --worker RUN_ID --store URL     # train one run
    python -m stability.cli.worker --sweep SWEEP_ID --store URL    # work on a sweep until it is done

:mod:`stability.execution.runner` starts these (never forks), one per run or
sweep worker, in their own session; it recognises its own workers by this
module's name on their command line.
"""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stability.cli.worker",
                                     description="A run's (or a sweep's) worker process.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--worker", type=int, metavar="RUN_ID")
    which.add_argument("--sweep", type=int, metavar="SWEEP_ID")
    parser.add_argument("--store", required=True, metavar="PATH_OR_URL")
    args = parser.parse_args(argv)
    if args.sweep is not None:
        from ..sweeps.workers import run_sweep_worker

        trained = run_sweep_worker(args.sweep, args.store)
        print(f"sweep {args.sweep}: this worker trained {trained} run{'s' * (trained != 1)}", flush=True)
        return 0
    from ..execution.runner import run_worker

    status = run_worker(args.worker, args.store)
    print(f"run {args.worker}: {status}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
