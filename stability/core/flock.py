"""An exclusive ``flock`` on a file, held for a ``with`` block: the one advisory lock between processes of
one machine (the run queue's and a sweep's locks, stability.execution.locks; a new SQLite store's
creation, stability.runs.opening). A ``flock`` is held by an open file, so a process that dies releases
it; on Windows there is none, and what it guards is then best effort."""
from __future__ import annotations

import contextlib
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no advisory locks
    fcntl = None


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` block."""
    with open(path, "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)
