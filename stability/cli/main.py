"""The command line: ``python -m stability <command>``.

    python -m stability train --cell spectral --task adding --seq-len 100
    python -m stability train --cell rnn --steps 500 --background
    python -m stability runs | show ID | export ID [--output FILE] | stop ID | resume ID [--background]
    python -m stability delete ID [ID ...] [--mark-ended]   # finished runs; a silent external one with the flag
    python -m stability export 3 4 --tensorboard tb   # then: tensorboard --logdir tb
    python -m stability cells | tasks [NAME]
    python -m stability train --cell mylab.cells:LeakyRNN --steps 100     # a cell of your own
    python -m stability reproduce --list | reproduce NAME [--scale classroom|paper] [--json]
    python -m stability classroom      # the room's view-only server and yours on 127.0.0.1, one store

``train`` takes the :class:`~stability.config.RunConfig` fields as flags
(``--hidden-size``, ``--seq-len``, ``--lr``, ..., ``--cell-option K=V``,
``--task-option K=V``). In the foreground it trains in this process with a
progress line on stderr and ends with a summary, under the background workers'
thread policy (:mod:`stability.workers.threads`: passive OpenMP waiting, one
core kept free, the threads of one of ``STABILITY_MAX_RUNS`` workers; so does a
foreground ``resume`` and ``reproduce``); ``--background`` hands the
run to a worker (:mod:`stability.workers.scheduler`) and prints its id; ``--json`` ends
with exactly one JSON object on stdout,
``{"run_id": ..., "status": ..., "final": {name: value}}``.

``reproduce NAME`` (a shipped preset, or a path to a preset file; :mod:`stability.presets`)
trains the preset's runs one after another in this process, a line on stderr as each starts and
ends, and ends with the verdict table (claim, the paper's value, ours, held / did not hold /
could not tell); ``--json`` prints the verdicts as one JSON object instead. It exits 0 once the
runs ran, whatever the verdicts.

Exit status: 0 completed or stopped, 1 diverged or failed, 2 bad input
(one line on stderr, ``stability: error: ...``, never a traceback).
The store is ``--store PATH``, else ``$STABILITY_STORE``, else ``~/.stability/runs.db``.

One module a concern: :mod:`.arguments` (the parser, the config flags), :mod:`.runs` (train,
runs, show, stop, resume, export), :mod:`.deleting` (delete), :mod:`.sweeps` (sweep, sweeps),
:mod:`.catalogue` (cells, tasks), :mod:`.presets` (reproduce), :mod:`.output` (the error line,
tables, the progress line, a run's summary); this module builds the parser from them and runs the command. Ctrl-C and
SIGTERM around a run are handled by :mod:`stability.execution.signals`.

Note [A command line without torch]
    ``stability --help``, a command's ``--help``, an argument error, ``runs`` and ``show`` import no
    torch, and the help and argument errors no pandas, SQLAlchemy or Optuna either (on a loaded
    2-core machine ``show abc`` took 4.2-5.3 s, ``--help`` 6.2-8.5 s and ``runs`` 4.8-8.0 s while
    every command imported torch; then 0.3-0.9 s, 0.5-0.7 s and 1.6-2.5 s, the store's pandas and
    SQLAlchemy most of the last): the modules of this package import at their top only what building
    the parser needs (the config dataclasses, the output helpers, the signals), and each command
    imports the store, the queue, the sweeps or the trainer when it runs. The lower rooms keep the
    chain cut: ``config`` imports the cell and task registries in ``validate()``, the lifecycle and
    the queue import the trainer and the preflight checks where a run is created or trained,
    ``workers/threads`` imports torch only to set its threads. A name the parser shows that is
    defined beside torch or Optuna is written where the parser reads it (the optimizers in
    ``config/run_config.py``, the samplers and the largest sweep in ``cli/sweeps.py``, the minutes
    before an external run may be marked ended in ``cli/deleting.py``);
    ``tests/test_cli_startup.py`` checks each against its source, and checks, in a fresh process
    each, that no ``--help`` or argument error imports torch or pandas and that ``runs`` and
    ``show`` of a real store import no torch. A foreground run (``train``, ``resume``,
    ``reproduce``) sets the workers' OpenMP environment before its command first imports torch,
    which is why those imports too wait for the command.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..runs.errors import StoreError
from . import catalogue, classroom, deleting, presets, runs, sweeps
from .arguments import Parser, store_parent
from .output import PROG, print_error

# cells, tasks, presets, the store and the trainer are imported by the commands that use them
# (Note [A command line without torch]).

# ConfigError and RunNotFound are ValueErrors; OSError: e.g. an export file that cannot be written
BAD_INPUT = (ValueError, StoreError, OSError)


def build_parser() -> argparse.ArgumentParser:
    """The ``stability`` parser: each command's sub-parser, its handler in ``args.handler``."""
    parser = Parser(prog=PROG, description="Train recurrent cells and watch their gradients.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    store = store_parent()
    runs.add_commands(commands, store)
    deleting.add_command(commands, store)
    sweeps.add_commands(commands, store)
    catalogue.add_commands(commands)
    presets.add_command(commands, store)
    classroom.add_command(commands, store)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except BrokenPipeError:  # e.g. `python -m stability export 3 | head`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except BAD_INPUT as error:
        print_error(error)
        return 2


if __name__ == "__main__":
    sys.exit(main())
