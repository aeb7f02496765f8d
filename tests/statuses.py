"""A test's shortcut to a run in a given status.

Only :mod:`stability.execution.lifecycle` changes a run's status in the package (by compare-and-set,
each change from the states it may come from; ``tests/test_lifecycle_writes.py`` reads the source for
it). A test that needs a run in some state without training it puts it there with :func:`set_status`,
through the same ``RunStore.compare_and_set`` the lifecycle uses, from any status.
"""
from stability.runs.status import STATUSES


def set_status(store, run_id: int, status: str, error: str | None = None, **fields) -> None:
    """Run ``run_id`` in ``status`` (a terminal one sets ``finished_at``, 'running' ``started_at`` if
    unset, as the lifecycle's changes do), with ``error`` if given, then the other columns ``fields``
    (``RunStore.update_run``'s)."""
    store.compare_and_set(run_id, statuses=STATUSES,
                          fields={"status": status, **({} if error is None else {"error": error})})
    if fields:
        store.update_run(run_id, **fields)
