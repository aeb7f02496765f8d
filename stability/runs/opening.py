"""Opening a store: a new one is created, an older one brought up to date, anything else refused.

    engine = open_engine(parse_location("runs.db"))   # an Engine on a store of SCHEMA_VERSION

Note [creating and refusing]
    A new SQLite store is built under a temporary name beside its path and linked into
    place (``os.link`` fails rather than overwrite), so a file found at the path
    is always a finished store. The link is made under a lock beside the path, and
    first the ``-wal``, ``-shm`` and ``-journal`` files of a deleted store at that
    path are removed: SQLite would replay them into the new file (a new store that
    held a deleted one's runs). An existing file that is empty, not SQLite, or
    an SQLite database without the run tables is refused with a
    :class:`StoreError`, never turned into a store. A store that SQLite finds
    corrupted is a :class:`StoreError` naming the file and what to do; it is
    never written to. A PostgreSQL database gets the tables on first use, beside
    any others it holds (a sweep's Optuna tables live there too); processes that open
    a new database at once serialise on an advisory lock, and the second finds the
    tables made. A database with a ``runs`` table but no store ``meta`` is refused.
    A server that cannot be reached, a refused login, an unknown database: one
    line naming ``store.location``.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from ..core.flock import file_lock
from .engine import WRITE, driver_errors, postgresql_engine, sqlite_engine, store_error
from .errors import StoreError, not_a_store
from .location import described
from .migrations import create_or_migrate, schema_version
from .schema import SCHEMA_VERSION

SMALLEST_DATABASE = 512  # bytes: an SQLite file holds at least one page


def open_engine(url: URL) -> Engine:
    """An engine on the store at ``url``, its tables made or brought up to ``SCHEMA_VERSION``
    (Note [creating and refusing]); anything that is no store of this version is a one-line
    :class:`StoreError`."""
    dialect, location = url.get_backend_name(), described(url)
    if dialect == "sqlite":
        path = Path(url.database)
        _prepare_file(path)
        engine = sqlite_engine(path, pool_size=2, max_overflow=8)
    else:
        engine = postgresql_engine(url)
    try:
        version = _open_tables(engine, location)
    except BaseException as error:
        engine.dispose()
        if isinstance(error, driver_errors(dialect)):
            raise store_error(error, location, dialect, opening=True) from None
        raise
    if version > SCHEMA_VERSION:
        engine.dispose()
        raise StoreError(f"run store {location} has schema version {version}, newer than the "
                         f"{SCHEMA_VERSION} this version of stability reads; "
                         "upgrade stability or use another store")
    return engine


def _open_tables(engine: Engine, location: str) -> int:
    """Read the schema version; create the tables of a new PostgreSQL store, migrate an older
    store, switch an SQLite file to WAL. Returns the version found."""
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as conn:
        version, tables = schema_version(conn)
    if version is None and (sqlite or "runs" in tables or "meta" in tables):
        raise not_a_store(location, "an SQLite database without a runs table" if sqlite
                          else "a database without the run store's tables")
    if version is None or version < SCHEMA_VERSION:
        with engine.execution_options(**WRITE).begin() as conn:
            found = create_or_migrate(conn)
        version = SCHEMA_VERSION if found is None else found
    if sqlite:  # a PRAGMA is SQLite's own statement, with no Core form
        with engine.connect() as conn:
            if conn.exec_driver_sql("PRAGMA journal_mode").scalar().lower() != "wal":
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    return version


def _prepare_file(path: Path) -> None:
    """The SQLite file's folder, a new store linked into place, a file that is no store refused."""
    if path.is_dir():
        raise StoreError(f"run store {path} is a directory; give a file path such as {path / 'runs.db'}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StoreError(f"cannot create the run store's folder {path.parent}: {error.strerror}") from None
    if not path.exists():
        _create_file(path)
    _check_is_store_file(path)


def _create_file(path: Path) -> None:
    """Build a new store under a temporary name and link it into place (Note [creating and refusing])."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    try:
        temporary.unlink(missing_ok=True)
        engine = sqlite_engine(temporary, poolclass=NullPool)
        try:
            with engine.execution_options(**WRITE).begin() as conn:
                create_or_migrate(conn)  # in a rollback journal: WAL is switched on under the final name
        finally:
            engine.dispose()
        with file_lock(path.with_name(f"{path.name}.create.lock")):  # one creator at a time (kept, as runner.lock)
            if not path.exists():  # else another process created the store first: use theirs
                _remove_orphaned_journals(path)
                os.link(temporary, path)
    except DBAPIError as error:
        raise StoreError(f"cannot create run store {path}: {error.orig}") from None
    except OSError as error:
        raise StoreError(f"cannot create run store {path}: {error.strerror or error}") from None
    finally:
        for leftover in (temporary, Path(f"{temporary}-wal"), Path(f"{temporary}-shm")):
            leftover.unlink(missing_ok=True)


def _remove_orphaned_journals(path: Path) -> None:
    """Remove the ``-wal``, ``-shm`` and ``-journal`` files beside a store file that does not exist: a deleted
    store's, left behind (Note [creating and refusing]). SQLite would take them for the new file's own and
    replay the old store's last transactions into it: its runs, or a table of an older schema."""
    for suffix in ("-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _check_is_store_file(path: Path) -> None:
    """Refuse an existing empty file before SQLite would take it for a new database.

    Only ``stat``: opening and closing the file here would drop the POSIX locks that
    SQLite connections of this process hold on it (SQLite's "How to corrupt" §2.2), and a
    file that is not SQLite at all is recognised by SQLite's first read, which writes nothing.
    """
    try:
        size = path.stat().st_size
    except OSError as error:
        raise StoreError(f"cannot read run store {path}: {error.strerror or error}") from None
    if size == 0:
        raise not_a_store(str(path), "an empty file")
    if size < SMALLEST_DATABASE:  # SQLite would read it as an empty database
        raise not_a_store(str(path), f"not an SQLite database: {size} byte{'s' * (size != 1)}")
