"""An exclusive ``flock`` on a file, held for a ``with`` block: the one advisory lock between processes of
one machine (the run queue's and a sweep's locks, stability.execution.locks; a new SQLite store's
creation, stability.runs.opening). A ``flock`` is held by an open file, so a process that dies releases
it; on Windows there is none, and what it guards is then best effort.

    with file_lock(folder / "runner.lock", timeout=60): ...   # LockTimeout (one line) after 60 s

Note [Lock files]
    A lock file is opened without following a link (``O_NOFOLLOW``: a link planted where the lock
    belongs is refused, never created or locked through) and without writing to it (``flock`` needs
    no write access, so a file another user made is locked, not rewritten). The lock is waited for
    ``timeout`` seconds at most (``$STABILITY_LOCK_TIMEOUT`` replaces every timeout, for a machine whose
    holders are slow, or for tests), then :class:`LockTimeout`, one line naming the file: a holder
    that never lets go (another user's process holding the file, a process stopped with SIGSTOP) no
    longer hangs every process that wants the lock. Where the file lives is its caller's choice; the
    run queue's and the sweeps' are in a private folder of the store's home (stability.execution.locks).
"""
from __future__ import annotations

import contextlib
import errno
import os
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no advisory locks
    fcntl = None

TIMEOUT_ENV = "STABILITY_LOCK_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0
POLL_S = 0.05


class LockTimeout(TimeoutError):
    """The lock was not had within its timeout (a TimeoutError, so an OSError: one line)."""


class LockRefused(OSError):
    """The lock file is a link, or cannot be opened: it is not used (one line)."""


def lock_timeout(timeout: float | None = None) -> float:
    """``$STABILITY_LOCK_TIMEOUT`` if set (seconds), else ``timeout``, else :data:`DEFAULT_TIMEOUT_S`."""
    text = os.environ.get(TIMEOUT_ENV)
    if text:
        try:
            return max(0.0, float(text))
        except ValueError:
            pass
    return DEFAULT_TIMEOUT_S if timeout is None else timeout


@contextlib.contextmanager
def file_lock(path: Path, timeout: float | None = None):
    """Hold an exclusive ``flock`` on ``path`` (created 0600 if missing, never through a link) for the
    ``with`` block, waiting at most :func:`lock_timeout` seconds for it (Note [Lock files])."""
    handle = _open(Path(path))
    try:
        if fcntl is not None:
            _acquire(handle, Path(path), lock_timeout(timeout))
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        os.close(handle)


def _open(path: Path) -> int:
    flags = os.O_RDONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP or path.is_symlink():
            raise LockRefused(f"the lock file {path} is a link; it is not used: remove it") from None
        raise LockRefused(f"cannot open the lock file {path}: {error.strerror or error}") from None


def _acquire(handle: int, path: Path, timeout: float) -> None:
    """``flock(LOCK_EX)`` within ``timeout`` seconds, else :class:`LockTimeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LockTimeout(f"the lock {path} is held by another process and was not freed within "
                                  f"{timeout:g} s ({TIMEOUT_ENV}); try again when it is, or end that "
                                  "process") from None
            time.sleep(POLL_S)
