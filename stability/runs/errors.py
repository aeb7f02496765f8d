"""What the run store raises. Each is one line naming the store (``store.location``, its password
masked), what was wrong and what to do; the CLI prints it and exits 2, a page shows it.

    StoreError      the store cannot be used (a directory, unwritable, not a run store, corrupted,
                    a newer schema, a server that cannot be reached)
    StoreBusy       a StoreError: another writer held the lock past the busy timeout
    StoreDamaged    a StoreError: SQLite finds the file damaged (``lasting``: no wait mends it)
    StoreFull       a StoreError: the disk holding the store is full (reads still answer)
    RunNotFound     no run with that id (a ValueError)
    SweepNotFound   no sweep with that id (a ValueError)
"""
from __future__ import annotations


class StoreError(RuntimeError):
    """The store cannot be used (a directory, unwritable, not a run store, corrupted, a newer schema,
    a server that cannot be reached).  ``lasting``: whether waiting cannot mend it, so a writer that
    rides out a busy store (stability.training.sinks, Note [A busy store]) gives up at once."""

    lasting = False


class StoreBusy(StoreError):
    """Another process held the store's write lock for longer than the busy timeout."""


class StoreDamaged(StoreError):
    """SQLite finds the store's file damaged ("database disk image is malformed", "file is not a
    database"): every command and page says so in one line at once; it is never waited out as a
    busy store is, nor written to."""

    lasting = True


class StoreFull(StoreError):
    """A write failed because the disk holding the store is full (SQLite's "database or disk is full",
    or its "disk I/O error" with no space left): one line naming the disk; reading still works."""


class RunNotFound(ValueError):
    """No run with the given id."""


class SweepNotFound(ValueError):
    """No sweep with the given id."""


def not_a_store(location: str, what: str) -> StoreError:
    """A file or database that holds something else than a run store: refused, never changed."""
    return StoreError(f"{location} is not a run store ({what}); it was left untouched: "
                      "move it aside or choose another --store (or $STABILITY_STORE)")


def not_readable(location: str, what: str) -> StoreDamaged:
    """A store that SQLite finds damaged: refused, never written to."""
    return StoreDamaged(f"{location} is not a readable run store ({what}); it was left untouched: "
                      "move it aside or choose another --store (or $STABILITY_STORE)")
