"""A throwaway PostgreSQL server for the tests: a cluster in a temporary folder, on a free
127.0.0.1 port, removed when the test session ends.

    cluster = Cluster.start()            # or a one-line reason why not (ClusterUnavailable)
    url = cluster.new_database()         # postgresql+psycopg://stability@127.0.0.1:PORT/test_3
    cluster.stop()                       # stops the server and removes the folder

Note [Unprivileged server]
    PostgreSQL refuses to run as root. When the tests run as root (a container), ``initdb`` and the
    server run as the ``postgres`` user (else ``nobody``) through ``subprocess``'s ``user=``, in a
    temporary folder handed to that user. The server listens on 127.0.0.1 only (and on a Unix socket
    inside the folder, never /var/run), trusts local connections (a throwaway cluster holds nothing
    to protect) except those of ``PASSWORD_USER``, whose password is checked (a test of a wrong
    password needs one), and runs without fsync: a test never outlives a crash of its server.

Note [Binaries]
    ``initdb`` and ``pg_ctl`` come from /usr/lib/postgresql/<version>/bin (Debian's ``postgresql``
    package, newest version first), else from PATH; ``STABILITY_POSTGRES_BIN`` names the one folder
    to look in instead (tests of the skip set it to an empty one). Where they are missing the PostgreSQL tests skip
    with that reason; ``STABILITY_REQUIRE_POSTGRES=1`` (set by ``.ci/run``) makes the skip a failure.
"""
from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

REQUIRE_ENV = "STABILITY_REQUIRE_POSTGRES"
BIN_ENV = "STABILITY_POSTGRES_BIN"
SUPERUSER = "stability"
PASSWORD_USER, PASSWORD = "with_password", "right-password"  # the one login that checks a password
START_TIMEOUT_S = 60


class ClusterUnavailable(RuntimeError):
    """No PostgreSQL binaries here (the one-line reason is the message)."""


def find_binaries() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl`` (Note [Binaries])."""
    folders = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    on_path = shutil.which("initdb")
    folders += [os.path.dirname(on_path)] if on_path else []
    if os.environ.get(BIN_ENV):
        folders = [os.environ[BIN_ENV]]
    for folder in folders:
        if all(os.access(os.path.join(folder, tool), os.X_OK) for tool in ("initdb", "pg_ctl", "postgres")):
            return Path(folder)
    raise ClusterUnavailable("PostgreSQL binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin or on "
                             "PATH; install the Debian package postgresql")


def _version(folder: str) -> tuple:
    name = Path(folder).parent.name
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _server_user() -> pwd.struct_passwd | None:
    """The unprivileged user the server runs as when we are root; None when we are not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise ClusterUnavailable("running as root and neither a 'postgres' nor a 'nobody' user exists to run "
                             "the PostgreSQL server as")


class Cluster:
    """A running throwaway PostgreSQL server (Note [Unprivileged server])."""

    def __init__(self, bin_dir: Path, root: Path, port: int, user: pwd.struct_passwd | None):
        self.bin_dir, self.root, self.port, self.user = bin_dir, root, port, user
        self._numbers = itertools.count(1)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        auth = SUPERUSER if password is None else f"{SUPERUSER}:{password}"
        return f"postgresql+psycopg://{auth}@127.0.0.1:{self.port}/{database}"

    @classmethod
    def start(cls) -> Cluster:
        """initdb + pg_ctl start on a free port; raises ClusterUnavailable (no binaries) or
        RuntimeError (the server would not start, with its log's last lines)."""
        bin_dir, user = find_binaries(), _server_user()
        # under /tmp when the server runs as another user: $TMPDIR may be a folder only we can enter
        root = Path(tempfile.mkdtemp(prefix="stability-postgres-", dir="/tmp" if user is not None else None))
        if user is not None:
            os.chown(root, user.pw_uid, user.pw_gid)
        try:
            cluster = cls(bin_dir, root, free_port(), user)
            cluster._run("initdb", "-D", str(cluster.data), "-U", SUPERUSER, "--auth=trust", "--no-sync",
                         "-E", "UTF8", "--locale=C")
            (cluster.data / "pg_hba.conf").write_text(
                "local all all trust\n"
                f"host all {PASSWORD_USER} 127.0.0.1/32 scram-sha-256\n"
                "host all all 127.0.0.1/32 trust\n")
            for attempt in range(3):  # the free port may be taken between probing and listening
                options = (f"-h 127.0.0.1 -p {cluster.port} -k {root} -c fsync=off -c synchronous_commit=off"
                           " -c full_page_writes=off -c max_connections=300")
                try:
                    cluster._run("pg_ctl", "-D", str(cluster.data), "-l", str(cluster.log), "-o", options,
                                 "-w", "-t", str(START_TIMEOUT_S), "start")
                    cluster.execute(f"CREATE ROLE {PASSWORD_USER} LOGIN PASSWORD '{PASSWORD}'")
                    return cluster
                except RuntimeError:
                    if attempt == 2:
                        raise
                    cluster.port = free_port()
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        raise AssertionError("unreachable")

    def _run(self, tool: str, *args: str) -> None:
        kwargs = {} if self.user is None else {"user": self.user.pw_uid, "group": self.user.pw_gid}
        done = subprocess.run([str(self.bin_dir / tool), *args], capture_output=True, text=True, cwd=self.root,
                              env={**os.environ, "LC_ALL": "C"}, **kwargs)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()[-2000:]} {log}")

    def execute(self, sql: str, database: str = "postgres") -> None:
        """One statement outside a transaction (CREATE/DROP DATABASE need that)."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER, dbname=database,
                             autocommit=True) as conn:
            conn.execute(sql)

    def new_database(self) -> str:
        """A fresh, empty database's URL."""
        name = f"test_{next(self._numbers)}"
        self.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def drop_database(self, url: str) -> None:
        self.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the server (fast: connections still open are ended) and remove the folder."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
