"""What the run store raises. Each is one line naming the store (``store.location``, its password
masked), what was wrong and what to do; the CLI prints it and exits 2, a page shows it.

    StoreError      the store cannot be used (a directory, unwritable, not a run store, corrupted,
                    a newer schema, a server that cannot be reached)
    StoreBusy       a StoreError: another writer held the lock past the busy timeout
    RunNotFound     no run with that id (a ValueError)
    SweepNotFound   no sweep with that id (a ValueError)
"""
from __future__ import annotations


class StoreError(RuntimeError):
    """The store cannot be used (a directory, unwritable, not a run store, corrupted, a newer schema,
    a server that cannot be reached)."""


class StoreBusy(StoreError):
    """Another process held the store's write lock for longer than the busy timeout."""


class RunNotFound(ValueError):
    """No run with the given id."""


class SweepNotFound(ValueError):
    """No sweep with the given id."""


def not_a_store(location: str, what: str) -> StoreError:
    """A file or database that holds something else than a run store: refused, never changed."""
    return StoreError(f"{location} is not a run store ({what}); it was left untouched: "
                      "move it aside or choose another --store (or $STABILITY_STORE)")


def not_readable(location: str, what: str) -> StoreError:
    """A store that SQLite finds damaged: refused, never written to."""
    return StoreError(f"{location} is not a readable run store ({what}); it was left untouched: "
                      "move it aside or choose another --store (or $STABILITY_STORE)")
