"""Secrets and files (issue 20, section 3): a store URL's password is masked up to the last ``@`` (the real
PostgreSQL answering), ``export`` never overwrites a file unasked nor the store at all, a second TensorBoard
export does not draw every point twice, a store's ``checkpoints/`` is private and its files are opened
without following links, and names are printed with what is not printable escaped.  Every command runs as
a user would, in a subprocess."""
from __future__ import annotations

import math
import os
import pwd
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.execution.lifecycle import train_run
from stability.runs.location import described, masked, parse_location
from stability.runs.store import RunStore, StoreError
from stability.training.checkpoints import ResumeError, load_checkpoint, read_for_resume
from statuses import set_status

REPO = Path(__file__).resolve().parent.parent
ESCAPE = "\x1b]0;pwned\x07\x1b[2J\r\u202e"  # sets the window title, clears the screen, returns, flips text


def cli(*args: str, store) -> subprocess.CompletedProcess:
    env = {**os.environ, "STABILITY_STORE": str(store), "STABILITY_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "stability", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=180)


def tiny(steps: int = 12) -> RunConfig:
    return RunConfig(CellConfig("rnn", 8), TaskConfig("adding", {"seq_len": 10}),
                     TrainConfig(steps=steps, batch_size=8, eval_examples=16, probe_examples=4, log_every=3,
                                 probe_every=6))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A store with one tiny finished run; returns (store path, run id)."""
    path = tmp_path_factory.mktemp("files") / "runs.db"
    with RunStore(path) as store:
        run_id = train_run(tiny(), store).run_id
    return path, run_id


# ---------------------------------------------------------------------------------------------- the mask
@pytest.mark.parametrize("typed, shown", [
    ("postgresql://lab:pa/ss@host/db", "postgresql://lab:***@host/db"),
    ("postgresql://lab:pa@ss@host:5432/db", "postgresql://lab:***@host:5432/db"),
    ("postgresql+psycopg://lab:p:a/s?s#x@host/db", "postgresql+psycopg://lab:***@host/db"),
    ("postgresql://lab:secret@gpu/stab", "postgresql://lab:***@gpu/stab"),
    ("postgresql://lab@host/db", "postgresql://lab@host/db"),
    ("postgresql://host/db", "postgresql://host/db"),
    ("postgresql://l/a:b@host/db", "postgresql://***@host/db"),
])
def test_everything_between_the_scheme_and_the_last_at_but_the_user_is_masked(typed, shown):
    assert masked(typed) == shown


def test_a_parsed_url_is_described_without_any_piece_of_an_unencoded_password():
    url = parse_location("postgresql://lab:pa@ss@host/db")  # SQLAlchemy alone reads 'pa', host 'ss@host'
    assert (url.password, url.host) == ("pa@ss", "host")
    assert described(url) == "postgresql+psycopg://lab:***@host/db"


def test_a_password_with_slashes_and_ats_typed_unencoded_opens_the_store(postgres_cluster):
    from postgres import PASSWORD, PASSWORD_USER

    secret = "s3/cr:et@x"
    database = postgres_cluster.new_database().rsplit("/", 1)[1]
    postgres_cluster.execute(f"ALTER ROLE {PASSWORD_USER} PASSWORD '{secret}'")
    postgres_cluster.execute(f"GRANT ALL ON SCHEMA public TO {PASSWORD_USER}", database=database)
    try:
        location = f"postgresql://{PASSWORD_USER}:{secret}@127.0.0.1:{postgres_cluster.port}/{database}"
        with RunStore(location) as store:
            assert not store.records(latest=False)
            assert secret not in store.location and f"{PASSWORD_USER}:***@127.0.0.1" in store.location
    finally:
        postgres_cluster.execute(f"ALTER ROLE {PASSWORD_USER} PASSWORD '{PASSWORD}'")
        postgres_cluster.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def test_a_password_with_slashes_and_ats_is_never_printed_by_the_cli(postgres_cluster, tmp_path):
    from postgres import PASSWORD_USER

    secret = "s3/cr:et@x"
    port = postgres_cluster.port
    for location in (f"postgresql://{PASSWORD_USER}:{secret}@127.0.0.1:{port}",            # no database named
                     f"postgresql://{PASSWORD_USER}:{secret}@127.0.0.1:{port}/postgres"):   # a wrong password
        result = cli("runs", "--store", location, store=tmp_path / "unused.db")
        assert result.returncode == 2, result.stderr
        line = result.stderr.strip()
        assert line.startswith("stability: error: ") and "\n" not in line
        assert f"{PASSWORD_USER}:***@127.0.0.1" in line, line
        for piece in ("s3", "cr", "et@", "x@", secret):
            assert piece not in line.replace(PASSWORD_USER, "").replace("127.0.0.1", ""), line


# ---------------------------------------------------------------------------------------------- workers
def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_a_worker_gets_the_store_password_outside_its_command_line(postgres_cluster, tmp_path, monkeypatch):
    """``ps`` shows every user every command line: a worker of a PostgreSQL store must not carry the URL
    (its password) there. The worker still trains its run: the URL reached it through its environment."""
    from postgres import PASSWORD, PASSWORD_USER

    from stability.workers import processes, scheduler

    monkeypatch.setenv("STABILITY_HOME", str(tmp_path / "home"))
    database = postgres_cluster.new_database().rsplit("/", 1)[1]
    postgres_cluster.execute(f"GRANT ALL ON SCHEMA public TO {PASSWORD_USER}", database=database)
    location = f"postgresql://{PASSWORD_USER}:{PASSWORD}@127.0.0.1:{postgres_cluster.port}/{database}"
    try:
        run_id = scheduler.start_run(tiny(steps=60), location, max_concurrent=1)
        [worker] = processes.launched_workers()
        shown = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(worker.pid)], capture_output=True,
                               text=True, check=True).stdout
        assert "stability.cli.worker --worker" in shown, shown
        assert PASSWORD not in shown and "postgresql" not in shown, shown
        assert PASSWORD.encode() not in Path(f"/proc/{worker.pid}/cmdline").read_bytes()
        assert worker.wait(timeout=180) == 0
        with RunStore(location) as store:
            assert store.record(run_id).status == "completed"
            logs = store.home / "logs"
        assert PASSWORD not in (logs / f"run-{run_id}.log").read_text()
    finally:
        postgres_cluster.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def test_the_worker_logs_folder_is_made_private(tmp_path):
    from stability.workers import processes, scheduler

    old_mask = os.umask(0o022)
    try:
        run_id = scheduler.start_run(tiny(), tmp_path / "runs.db", max_concurrent=1)
    finally:
        os.umask(old_mask)
    [worker] = [process for process in processes.launched_workers()]
    assert worker.wait(timeout=180) == 0
    assert stat.S_IMODE((tmp_path / "logs").stat().st_mode) == 0o700
    assert (tmp_path / "logs" / f"run-{run_id}.log").is_file()


def test_a_logs_folder_another_user_made_is_refused_in_one_line(tmp_path):
    other = someone_else()
    (tmp_path / "logs").mkdir(mode=0o777)
    os.chown(tmp_path / "logs", other.pw_uid, other.pw_gid)
    result = cli("train", "--cell", "rnn", "--hidden-size", "8", "--task", "adding", "--steps", "5",
                 "--background", store=tmp_path / "runs.db")
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert "belongs to another user" in line and str(tmp_path / "logs") in line
    assert list((tmp_path / "logs").iterdir()) == []


# ---------------------------------------------------------------------------------------------- export -o
def test_export_refuses_an_existing_file_unless_forced(trained, tmp_path):
    path, run_id = trained
    output = tmp_path / "rows.csv"
    output.write_text("keep me\n")
    refused = cli("export", str(run_id), "-o", str(output), store=path)
    assert refused.returncode == 2 and refused.stderr.strip() == \
        f"stability: error: {output} exists; pass --force to overwrite it"
    assert output.read_text() == "keep me\n"
    forced = cli("export", str(run_id), "-o", str(output), "--force", store=path)
    assert forced.returncode == 0, forced.stderr
    with RunStore(path) as store:
        assert len(output.read_text().splitlines()) == len(store.metrics(run_id)) + 1
    fresh = tmp_path / "fresh.csv"
    assert cli("export", str(run_id), "-o", str(fresh), store=path).returncode == 0
    assert fresh.read_text() == output.read_text()
    missing = cli("export", "999", "-o", str(tmp_path / "none.csv"), store=path)
    assert missing.returncode == 2 and not (tmp_path / "none.csv").exists()


def test_export_never_writes_over_the_store_whatever_path_names_it(trained, tmp_path):
    path, run_id = trained
    before = path.read_bytes()
    (tmp_path / "link.db").symlink_to(path)
    os.link(path, tmp_path / "hard.db")
    names = [str(path), str(tmp_path / "link.db"), str(tmp_path / "hard.db"),
             os.path.relpath(path, REPO), f"{path.parent}/../{path.parent.name}/{path.name}"]
    for name in names:
        result = cli("export", str(run_id), "-o", name, "--force", store=path)
        assert result.returncode == 2, (name, result.stderr)
        assert "is the run store" in result.stderr and result.stderr.count("\n") == 1
    assert path.read_bytes() == before
    listed = cli("runs", store=path)
    assert listed.returncode == 0 and str(run_id) in listed.stdout


# ---------------------------------------------------------------------------------------------- TensorBoard
def event_scalars(folder: Path) -> int:
    from test_export import events, scalars

    return len(scalars(events(folder)))


def test_a_second_tensorboard_export_is_refused_and_force_replaces_the_first(trained, tmp_path):
    pytest.importorskip("tensorboardX")
    path, run_id = trained
    folder = tmp_path / "tb"
    with RunStore(path) as store:
        stored = len(store.metrics(run_id))
    first = cli("export", str(run_id), "--tensorboard", str(folder), store=path)
    assert first.returncode == 0, first.stderr
    run_folder = folder / f"run-{run_id}"
    assert event_scalars(run_folder) == stored
    again = cli("export", str(run_id), "--tensorboard", str(folder), store=path)
    assert again.returncode == 2 and "already holds TensorBoard event files" in again.stderr
    assert "pass --force to replace them" in again.stderr and again.stderr.count("\n") == 1
    assert event_scalars(run_folder) == stored  # not drawn twice
    (run_folder / "notes.txt").write_text("mine")
    forced = cli("export", str(run_id), "--tensorboard", str(folder), "--force", store=path)
    assert forced.returncode == 0, forced.stderr
    assert len(list(run_folder.glob("events.out.tfevents.*"))) == 1
    assert event_scalars(run_folder) == stored
    assert (run_folder / "notes.txt").read_text() == "mine"  # only event files are replaced


# ---------------------------------------------------------------------------------------------- checkpoints
def test_the_checkpoint_folder_is_made_private(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(tiny().to_dict())
        old_mask = os.umask(0o022)
        try:
            folder = store.checkpoint_path(run_id).parent
        finally:
            os.umask(old_mask)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_checkpoint_folder_open_to_others_is_closed(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    os.chmod(tmp_path / "checkpoints", 0o777)
    with RunStore(tmp_path / "runs.db") as store:
        store.checkpoint_path(1)
    assert stat.S_IMODE((tmp_path / "checkpoints").stat().st_mode) == 0o700


def someone_else() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("making a folder another user owns needs root")
    for name in ("nobody", "postgres", "daemon"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.skip("no other user to own a folder")


@pytest.mark.parametrize("how", ["a folder", "a link to a folder"])
def test_a_checkpoint_folder_another_user_made_is_refused_in_one_line(tmp_path, how):
    other = someone_else()
    theirs = tmp_path / ("checkpoints" if how == "a folder" else "theirs")
    theirs.mkdir(mode=0o777)
    os.chown(theirs, other.pw_uid, other.pw_gid)
    if how != "a folder":
        (tmp_path / "checkpoints").symlink_to(theirs)
    config = tiny()
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(config.to_dict())
        with pytest.raises(StoreError) as raised:
            store.checkpoint_path(run_id)
        message = str(raised.value)
        assert "belongs to another user" in message and str(tmp_path / "checkpoints") in message
        assert "\n" not in message
        set_status(store, run_id, "stopped")
        result = cli("resume", str(run_id), store=tmp_path / "runs.db")
    assert result.returncode == 2 and "belongs to another user" in result.stderr
    assert list(theirs.iterdir()) == []


def test_a_checkpoint_is_written_and_read_without_following_links(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    config = tiny()
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(config.to_dict())
        path = store.checkpoint_path(run_id)
        Path(f"{path}.partial").symlink_to(victim)  # where the checkpoint is written first
        train_run(config, store, run_id, keep_checkpoint=True)
        assert victim.read_text() == "precious"
        assert path.is_file() and not path.is_symlink()
        assert load_checkpoint(path)["step"] == config.train.steps
        elsewhere = tmp_path / "elsewhere.pt"
        path.rename(elsewhere)
        path.symlink_to(elsewhere)  # a link where the checkpoint is read from
        with pytest.raises(OSError):
            load_checkpoint(path)
        with pytest.raises(ResumeError, match="cannot be read"):
            read_for_resume(path, f"run {run_id}", config.to_dict())


# ---------------------------------------------------------------------------------------------- names
@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """A store with a run and a sweep whose names hold terminal escape sequences."""
    from stability import sweeps

    path = tmp_path_factory.mktemp("names") / "runs.db"
    with RunStore(path) as store:
        run_id = store.create_run(tiny().to_dict(), f"run {ESCAPE}")
        store.update_run(run_id, error=f"failed {ESCAPE}")
        spec = sweeps.build_spec(tiny(), ["lr=1e-3,1e-2"])
        sweep_id = sweeps.store_sweep(store, spec, name=f"sweep {ESCAPE}")
    return path, run_id, sweep_id


@pytest.mark.parametrize("command", [("runs",), ("sweeps",), ("show", "{run_id}")])
def test_names_are_printed_with_what_is_not_printable_escaped(named, command):
    path, run_id, sweep_id = named
    result = cli(*(part.format(run_id=run_id) for part in command), store=path)
    assert result.returncode == 0, result.stderr
    for char in "\x1b\x07\r\u202e":
        assert char not in result.stdout + result.stderr
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\r\\u202e" in result.stdout


def test_printable_escapes_control_and_format_characters_only():
    from stability.cli.output import printable

    assert printable("cell=rnn lr=0.001 é 日本 ∂h") == "cell=rnn lr=0.001 é 日本 ∂h"
    assert printable(ESCAPE) == "\\x1b]0;pwned\\x07\\x1b[2J\\r\\u202e"
    assert printable(math.pi) == str(math.pi)
