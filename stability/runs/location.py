"""Where a run store lives: a path or a URL, and this machine's folder for the files that go with it.

    parse_location("runs.db")                              # sqlite:////abs/path/runs.db
    parse_location("postgresql://lab:secret@gpu/stab")     # postgresql+psycopg://lab:secret@gpu/stab
    masked("postgresql://lab:secret@gpu/stab")             # postgresql://lab:***@gpu/stab
    masked("postgresql://lab@gpu/stab?password=secret")    # postgresql://lab@gpu/stab?password=***
    store_home(url)                                        # ~/.stability/stores/gpu-5432-stab/

Note [locations]
    A store is a path (``runs.db``, ``~/lab/runs.db``) or a URL: ``sqlite:///PATH`` names the same
    file as PATH, ``postgresql://USER:PASSWORD@HOST:PORT/DATABASE`` (or ``postgresql+psycopg://``)
    a PostgreSQL database, reached through the psycopg 3 driver. Both go through one
    implementation on SQLAlchemy Core (:mod:`stability.runs.store`); the few differences between
    the two SQL dialects are the column types and the write-order column
    (:mod:`stability.runs.schema`). ``store.url`` is the URL with its password, what Optuna's
    storage for a sweep's study is given; ``store.location`` (also ``str(store)``) masks the
    password and is what every message names. ``store.home`` is a folder on this machine for the
    files that belong with the store (``logs/``, ``checkpoints/``, ``locks/``): an SQLite
    file's own folder, and for a URL store ``~/.stability/stores/<host>-<port>-<database>/``
    (``$STABILITY_HOME`` replaces ``~/.stability``), so each machine keeps its own workers' logs
    beside one shared database.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from urllib.parse import quote, unquote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .errors import StoreError

DEFAULT_PATH = Path("~/.stability/runs.db")
ENV_VAR = "STABILITY_STORE"
HOME_ENV_VAR = "STABILITY_HOME"
ACCEPTED = "a file path, sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DATABASE"


def default_path() -> Path:
    """``$STABILITY_STORE`` if set, else ``~/.stability/runs.db`` (as a path; see :func:`default_location`)."""
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH).expanduser()


def default_location() -> str:
    """``$STABILITY_STORE`` if set (a path or a URL), else ``~/.stability/runs.db``."""
    return os.environ.get(ENV_VAR) or str(DEFAULT_PATH.expanduser())


def parse_location(location: str | os.PathLike | None = None) -> URL:
    """The SQLAlchemy URL of a store location (Note [locations]): a path or an ``sqlite:///`` URL
    becomes ``sqlite:////absolute/path``, ``postgresql://`` gets the psycopg driver; anything else
    is a one-line :class:`StoreError`."""
    if location is None:
        location = default_location()
    if isinstance(location, str) and "://" in location:
        return _parse_url(location)
    try:
        path = Path(location).expanduser().absolute()
    except TypeError:
        raise StoreError(f"cannot use {location!r} as a run store; give {ACCEPTED}") from None
    return URL.create("sqlite", database=str(path))


def _parse_url(location: str) -> URL:
    try:
        url = make_url(_password_encoded(location))
    except (ArgumentError, ValueError):
        raise StoreError(f"cannot read the run store URL {masked(location)!r}; give {ACCEPTED}") from None
    backend, _, driver = url.drivername.partition("+")
    if backend == "sqlite" and driver in ("", "pysqlite"):
        if not url.database or url.database == ":memory:":
            raise StoreError(f"run store URL {masked(location)!r} names no file; give {ACCEPTED}")
        return URL.create("sqlite", database=str(Path(url.database).expanduser().absolute()))
    if backend in ("postgresql", "postgres") and driver in ("", "psycopg"):
        if not url.database:
            raise StoreError(f"run store URL {masked(location)!r} names no database; give {ACCEPTED}")
        return url.set(drivername="postgresql+psycopg")
    raise StoreError(f"unsupported run store URL {masked(location)!r}; give {ACCEPTED}")


def _password_encoded(location: str) -> str:
    """``location`` with its password percent-encoded, the password being everything between the user's
    ``:`` and the last ``@`` (as :func:`masked` reads it): SQLAlchemy ends it at the first ``@``, and
    ``postgresql://lab:pa@ss@host`` would reach ``ss@host`` as the host, in whose error line the rest of
    the password shows. An encoded password (``pa%40ss``) stays as it is."""
    scheme, sep, rest = location.partition("://")
    if not sep or "@" not in rest:
        return location
    userinfo, _, host = rest.rpartition("@")
    user, colon, password = userinfo.partition(":")
    if not colon:
        return location
    return f"{scheme}://{user}:{quote(unquote(password), safe='')}@{host}"


# a query parameter whose value is a secret or names one: password, sslpassword, pass, passfile, sslkey, ...
_SECRET_QUERY = re.compile(r"([?&;][^=&;?#]*(?:pass|secret|token|sslkey|key_?file)[^=&;?#]*=)[^&;#]*", re.IGNORECASE)


def masked(text: str) -> str:
    """A URL as typed with its secrets replaced by ``***`` (Note [Masked locations]): the value of every
    query parameter that is or names one (``?password=``, ``sslpassword``, ``passfile``, ``sslkey``, any
    key holding ``pass``, ``secret`` or ``token``), and everything between ``://`` and the last ``@`` but
    the user name: a password typed unencoded may hold ``/``, ``:`` or ``@``, so nothing short of the last
    ``@`` is sure to end it (``postgresql://lab:pa/ss@host`` -> ``postgresql://lab:***@host``). A user
    name is kept only when it is one (letters, digits, ``._%+-``); a text without ``@`` has no password
    there.

    Note [Masked locations]
        libpq, and SQLAlchemy after it, takes the password from the query string as well as from the
        user part (``postgresql://lab@gpu/stab?password=secret``), which SQLAlchemy's
        ``hide_password`` leaves as it is; so :func:`described`, and through it ``store.location`` and
        every message that names a store, goes through this one function."""
    text = _SECRET_QUERY.sub(r"\1***", text) if "://" in text else text
    scheme, sep, rest = text.partition("://")
    if not sep or "@" not in rest:
        return text
    userinfo, _, host = rest.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    if not re.fullmatch(r"[\w.%+-]*", user):
        return f"{scheme}://***@{host}"
    return f"{scheme}://{user}:***@{host}" if colon else text


def described(url: URL) -> str:
    """What messages call the store: an SQLite file's path, a server's URL with its password masked
    (also where SQLAlchemy read part of an unencoded password as the host: :func:`masked`)."""
    if url.get_backend_name() == "sqlite":
        return str(Path(url.database))
    return masked(url.render_as_string(hide_password=True))


def store_home(url: URL) -> Path:
    """This machine's folder for the store's logs, checkpoints and runner lock, created if need be
    (Note [locations])."""
    if url.get_backend_name() == "sqlite":
        return Path(url.database).parent
    root = Path(os.environ.get(HOME_ENV_VAR) or "~/.stability").expanduser().absolute()
    name = f"{url.host or 'localhost'}-{url.port or 5432}-{url.database}"
    folder = root / "stores" / re.sub(r"[^A-Za-z0-9._-]", "_", name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StoreError(f"cannot create the folder {folder} for run store {described(url)}: "
                         f"{error.strerror or error}") from None
    return folder


def private_folder(folder: Path) -> None:
    """Check that ``folder`` (and a link to it, if it is one) is a directory of this user's, and leave
    nobody else a way to write in it; StoreError (one line) when another user owns it. For the folders
    beside a store (``checkpoints/``) in a folder others may write: they must not choose its files."""
    status = os.stat(folder)
    others = {os.lstat(folder).st_uid, status.st_uid} - {os.geteuid()}
    if others:
        raise StoreError(f"{folder} belongs to another user (uid {others.pop()}); it is not used: remove it, "
                         "or keep the store in a folder of your own")
    if not stat.S_ISDIR(status.st_mode):
        raise StoreError(f"{folder} is not a folder; it is not used: move it aside")
    if status.st_mode & 0o022:  # writable by others: someone could swap a checkpoint or plant a link
        os.chmod(folder, stat.S_IMODE(status.st_mode) & 0o700)
