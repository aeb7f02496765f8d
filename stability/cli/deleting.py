"""The ``delete`` command: runs removed from the store with their rows and checkpoints.

    python -m stability delete 3 4 7                  # finished runs (completed, stopped, failed, ...)
    python -m stability delete --mark-ended 12        # an external run silent for 10 min: marked ended, deleted

A run that is queued or running is not deleted: one line says why and what would end it (``stop``;
for an external run, its own loop, or ``--mark-ended`` once it has said nothing for
:data:`~stability.execution.lifecycle.ABANDONED_AFTER_S`, which
:func:`stability.execution.lifecycle.mark_abandoned` decides). The delete itself is the store's
(``RunStore.delete_run``), which refuses an active run in its own write, so a run resumed between
the check and the delete is never deleted under its worker. Exit 0 when every run was deleted,
1 when some were not (one line each on stderr), 2 for bad input.
"""
from __future__ import annotations

import sys

from ..runs.errors import RunNotFound, StoreError
from ..runs.status import ACTIVE_STATUSES
from .output import print_error

# lifecycle.ABANDONED_AFTER_S in minutes, for the parser's help: the lifecycle and the store are imported
# by the command itself (Note [A command line without torch] in stability/cli/main.py);
# tests/test_cli_startup.py checks that the two agree.
ABANDONED_AFTER_MIN = 10


def add_command(commands, store) -> None:
    """``delete ID [ID ...] [--mark-ended]`` with ``--store`` (``store``)."""
    delete = commands.add_parser(
        "delete", parents=[store], help="delete finished runs with their metric rows and checkpoints",
        description="Delete finished runs with every metric row and checkpoint (this cannot be undone). "
                    "A queued or running run is left as it is, with one line saying why.")
    delete.add_argument("run_id", type=int, metavar="ID", nargs="+", help="the runs to delete")
    delete.add_argument("--mark-ended", action="store_true",
                        help="first mark ended (interrupted) an external run, logged from your own loop, that has "
                             f"said nothing for {ABANDONED_AFTER_MIN} min, e.g. its "
                             "process died on another machine; then delete it")
    delete.set_defaults(handler=cmd_delete)


def cmd_delete(args) -> int:
    """Delete each run given; a line on stdout for each deleted, on stderr for each not."""
    from ..runs.store import RunStore

    refused = 0
    with RunStore(args.store) as store:
        for run_id in dict.fromkeys(args.run_id):  # each once, in the order given
            reason = _delete(store, run_id, args.mark_ended)
            if reason is None:
                print(f"deleted run {run_id}")
            else:
                print_error(reason)
                refused += 1
    sys.stdout.flush()
    return 1 if refused else 0


def _delete(store, run_id: int, mark_ended: bool) -> str | None:
    """Delete one run; why not, in one line, or None once deleted."""
    from ..execution import lifecycle

    try:
        run = store.record(run_id)
        if run.status in ACTIVE_STATUSES:
            if not run.external:
                return f"run {run_id} is {run.status}; stop it first (`stability stop {run_id}`)"
            why = lifecycle.abandoned(run)
            if why is not None:
                return why
            if not mark_ended:
                return (f"run {run_id} is an external run with no word from its loop for "
                        f"{int(lifecycle.heartbeat_age(run) // 60)} min; `stability delete --mark-ended {run_id}` "
                        "marks it ended and deletes it")
            if not lifecycle.mark_abandoned(store, run):
                return f"run {run_id} changed meanwhile (its loop spoke, or it ended); it is left as it is"
        store.delete_run(run_id)
    except (RunNotFound, StoreError, ValueError) as error:  # the store's own refusal included
        return " ".join(str(error).split())
    return None
