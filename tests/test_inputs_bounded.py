"""Every input bounded and escaped (issue 33, item 4): id lists in links capped with one warning, the runs
table's metric columns capped, a queue cap and a sidebar of counts, text from links escaped before markdown,
store URLs masked in every form, a delete guarded in its own write, lock files private, not followed and
waited for with a timeout. Real stores (SQLite files, the PostgreSQL fixture), real pages (AppTest), real
processes."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from statuses import set_status

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "pages"


@pytest.fixture(autouse=True)
def read_at_every_rerun(monkeypatch):
    """A live panel reads its runs at once (the server's shared look waits otherwise)."""
    import pages.ui.live
    import stability.live.tail

    monkeypatch.setattr(stability.live.tail, "READ_EVERY_S", 0.0)
    monkeypatch.setattr(pages.ui.live, "FIRST_ROWS_WAIT_S", 0.0)


def page(name: str, **query) -> AppTest:
    app = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=60)
    for key, value in query.items():
        app.query_params[key] = str(value)
    return app.run()


def small_config(steps: int = 20) -> RunConfig:
    return RunConfig(CellConfig("rnn", 8), TaskConfig("adding", {"seq_len": 10}), TrainConfig(steps=steps))


def texts(app) -> list[str]:
    """The text of every element of a page that shows one (markdown, captions, alerts)."""
    elements = [*app.markdown, *app.caption, *app.warning, *app.error, *app.info, *app.success]
    return [str(element.value) for element in elements]


# ------------------------------------------------------------------ id lists in links
def test_a_link_of_20000_ids_reads_100_with_one_warning(store):
    present = [store.create_run(small_config().to_dict()) for _ in range(2)]
    app = page("race", runs=",".join(map(str, range(1, 20001))))
    assert not app.exception
    warnings = [warning.value for warning in app.warning]
    # the link's line (the first 100 of 20,000) and one line for the 98 ids the store does not have
    assert len(warnings) == 2, warnings[:5]
    assert "the ids after the first 100 of 20,000" in warnings[0]
    assert "Runs 3, 4, 5" in warnings[1] and "and 88 more are not in this store" in warnings[1]
    assert all(str(run_id) in app.dataframe[0].value["id"].astype(str).tolist() for run_id in present)


def test_unknown_ids_are_one_warning_on_every_page_that_reads_them(store):
    store.create_run(small_config().to_dict())
    race = page("race", runs="1,7,8,9")
    assert [warning.value for warning in race.warning] == ["Runs 7, 8, 9 are not in this store."]
    reproduce = page("reproduce", preset="spectral-fig1", runs=",".join(map(str, range(1, 300))))
    warnings = [warning.value for warning in reproduce.warning]
    assert len(warnings) == 1 and "the ids after the first 100 of 299" in warnings[0], warnings
    compare = page("compare", runs=",".join(map(str, range(1, 5000))))
    warnings = [warning.value for warning in compare.warning]
    assert len(warnings) == 1 and "first 100 of 4,999" in warnings[0], warnings


# ------------------------------------------------------------------ text from links escaped
def test_a_markdown_link_in_a_url_is_shown_as_text(store):
    typed = "[Log in](http://evil.example/login) <img src=x> :red[alarm] $x^2$"
    app = page("reproduce", preset=typed)
    warning = app.warning[0].value
    assert "[Log in](" not in warning and "<img" not in warning and ":red[" not in warning and "$x" not in warning
    assert r"\[Log in\]\(http\://evil.example/login\)" in warning
    from pages.ui.links import escaped

    # every escape is a backslash before ASCII punctuation, which markdown shows as the character itself
    assert re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", escaped(typed)) == typed
    run_id = store.create_run(small_config().to_dict())
    store.log(run_id, [(0, 0.0, "train/loss", 1.0)])
    compare = page("compare", runs=run_id, metrics="[x](http://evil.example)")
    assert any(r"\[x\]" in text for text in texts(compare))
    assert all("](http" not in text for text in texts(compare))


def test_a_number_typed_as_markdown_is_escaped(store):
    app = page("race", hidden="[Log in](http://evil.example)")
    assert "[Log in](" not in app.warning[0].value and r"\[Log in\]" in app.warning[0].value


# ------------------------------------------------------------------ store URLs masked
@pytest.mark.parametrize("typed, shown", [
    ("postgresql://lab@gpu/stab?password=secret", "postgresql://lab@gpu/stab?password=***"),
    ("postgresql://lab@gpu/stab?sslmode=require&sslpassword=secret", "postgresql://lab@gpu/stab?sslmode=require&sslpassword=***"),
    ("postgresql://lab@gpu/stab?PASS=secret&application_name=x", "postgresql://lab@gpu/stab?PASS=***&application_name=x"),
    ("postgresql://lab@gpu/stab?sslkey=/home/lab/secret.key", "postgresql://lab@gpu/stab?sslkey=***"),
    ("postgresql://lab:secret@gpu/stab?my_password=secret", "postgresql://lab:***@gpu/stab?my_password=***"),
])
def test_masked_hides_query_passwords(typed, shown):
    from stability.runs.location import described, masked, parse_location

    assert masked(typed) == shown
    assert "secret" not in described(parse_location(typed))


def test_a_query_string_password_is_named_nowhere(postgres_cluster, tmp_path, monkeypatch):
    """A store reached with ?password= (a login whose password the server checks): the store's own lines,
    its errors and a page naming a missing run never show it."""
    from postgres import PASSWORD, PASSWORD_USER
    from stability.runs.store import RunNotFound, RunStore

    url = postgres_cluster.new_database()
    database = url.rsplit("/", 1)[1]
    postgres_cluster.execute(f"GRANT ALL ON SCHEMA public TO {PASSWORD_USER}", database=database)
    location = f"postgresql://{PASSWORD_USER}@127.0.0.1:{postgres_cluster.port}/{database}?password={PASSWORD}"
    monkeypatch.setenv("STABILITY_STORE", location)
    monkeypatch.setenv("STABILITY_HOME", str(tmp_path / "home"))
    try:
        with RunStore(location) as store:
            assert PASSWORD not in store.location and PASSWORD not in str(store) and PASSWORD not in repr(store)
            with pytest.raises(RunNotFound) as missing:
                store.record(999)
            assert PASSWORD not in str(missing.value) and "password=***" in str(missing.value)
        app = page("race", runs=999)
        assert not app.exception and app.warning
        assert not [text for text in texts(app) if PASSWORD in text]
        wrong = location.replace(PASSWORD, "wrong-" + PASSWORD)
        from stability.runs.errors import StoreError
        with pytest.raises(StoreError) as refused:
            RunStore(wrong).records()
        assert PASSWORD not in str(refused.value)
    finally:
        postgres_cluster.drop_database(url)


# ------------------------------------------------------------------ metric columns capped
def test_a_run_logging_3000_names_keeps_the_runs_table_narrow(store):
    from stability.runs.table import SUMMARY_COLUMNS, run_table

    run_id = store.create_run(small_config().to_dict())
    store.update_run(run_id, metric="accuracy")
    set_status(store, run_id, "completed")
    names = ["val/loss", "val/accuracy", "test/loss"] + [f"val/m{index:04d}" for index in range(3000)]
    store.log(run_id, [(10, 0.0, name, 0.5) for name in names])
    table = run_table(store)
    finals = [column for column in table.columns if column not in SUMMARY_COLUMNS]
    # the loss's and the task metric's first, then 20 others; the note's count of the rest
    assert finals[:2] == ["val/loss", "val/accuracy"] and "test/loss" in finals
    assert len(finals) == 3 + 20 and table.attrs.get("finals_left_out") == 2980
    app = page("runs")
    assert not app.exception
    shown = app.dataframe[0].value.columns
    assert len(shown) < 50 and "val/accuracy" in shown and "val/m0000" in shown and "val/m2999" not in shown
    assert any("2,980 more held-out metrics not shown" in caption.value for caption in app.caption)


# ------------------------------------------------------------------ the queue
def waiting_runs(store, count: int, claimed_by: int | None = None) -> list[int]:
    """``count`` queued runs; ``claimed_by``: a live pid of this host holding each (so no reconcile launches
    a worker for them: a claimed run waits for its claimant)."""
    from stability.execution import lifecycle

    ids = [store.create_run(small_config().to_dict()) for _ in range(count)]
    if claimed_by is not None:
        for run_id in ids:
            store.update_run(run_id, pid=claimed_by, host=lifecycle.this_host())
    return ids


def test_a_full_queue_refuses_a_start_in_one_line(store, monkeypatch):
    from stability.config import ConfigError
    from stability.workers import scheduler

    monkeypatch.setenv("STABILITY_MAX_QUEUED", "3")
    waiting_runs(store, 3)
    with pytest.raises(ConfigError) as refused:
        scheduler.start_run(small_config(), str(store.path))
    assert "3 runs already wait in the queue" in str(refused.value) and "\n" not in str(refused.value)
    assert len(store.records()) == 3
    done = subprocess.run([sys.executable, "-m", "stability", "train", "--cell", "rnn", "--hidden-size", "8",
                           "--steps", "10", "--background", "--store", str(store.path)],
                          capture_output=True, text=True, env={**os.environ, "STABILITY_MAX_QUEUED": "3"})
    assert done.returncode == 2 and "already wait in the queue" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and len(store.records()) == 3


def test_the_sidebar_shows_counts_and_the_first_five(store):
    running = store.create_run(small_config().to_dict())
    store.update_run(running, pid=os.getpid())
    set_status(store, running, "running")
    waiting_runs(store, 60, claimed_by=os.getpid())
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not app.exception
    bars = app.sidebar.get("progress")
    assert len(bars) == 5 and bars[0].proto.text.startswith(f"#{running} ")
    captions = [caption.value for caption in app.sidebar.caption]
    assert any("**61** runs in progress: 1 training, 60 queued" in caption for caption in captions), captions
    assert any(caption.startswith("and 56 more") for caption in captions), captions


# ------------------------------------------------------------------ delete guarded in its write
def finished_run(store) -> int:
    run_id = store.create_run(small_config().to_dict())
    set_status(store, run_id, "completed")
    store.log(run_id, [(0, 0.0, "train/loss", 1.0), (10, 1.0, "val/loss", 0.5)])
    return run_id


def test_a_run_resumed_after_the_check_is_not_deleted(store_location):
    from stability.runs.store import RunStore

    with RunStore(store_location) as store:
        resumed, finished = finished_run(store), finished_run(store)
        assert store.record(resumed).status == "completed"  # what the page saw when it drew Delete
        set_status(store, resumed, "queued")                  # resumed meanwhile, from another tab or the CLI
        with pytest.raises(ValueError) as refused:           # RunActive, a ValueError: one line for the CLI
            store.delete_run(resumed)
        assert type(refused.value).__name__ == "RunActive" and str(refused.value) == f"run {resumed} is queued now; it was not deleted (stop it first)"
        assert store.delete_runs([resumed, finished, 999]) == ([finished], {resumed: "queued"})
        assert store.record(resumed).status == "queued" and len(store.metrics(resumed)) == 2
        assert [run.id for run in store.records()] == [resumed]


def test_a_delete_waiting_for_a_resume_reads_the_status_it_commits(postgres_url):
    """PostgreSQL: a resume holding the run's row when the delete comes; the delete waits for it and reads
    the status it committed (the WHERE of the DELETE itself), so the resumed run is kept."""
    import threading

    import sqlalchemy

    from stability.runs.store import RunStore

    with RunStore(postgres_url) as store:
        run_id = finished_run(store)
        engine = sqlalchemy.create_engine(store.url)
        outcome = []
        with engine.connect() as resume:
            resume.execute(sqlalchemy.text("UPDATE runs SET status = 'queued' WHERE id = :id"), {"id": run_id})
            def delete():
                try:
                    store.delete_run(run_id)
                    outcome.append("deleted")
                except ValueError as error:
                    outcome.append(type(error).__name__)

            deleting = threading.Thread(target=delete)
            deleting.start()
            with engine.connect() as watcher:  # until the delete waits for the resume's row lock
                while not watcher.execute(sqlalchemy.text(
                        "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE%'")).first():
                    assert deleting.is_alive(), outcome
                    time.sleep(0.05)
            resume.commit()
        deleting.join()
        engine.dispose()
        assert outcome == ["RunActive"]
        assert store.record(run_id).status == "queued" and len(store.metrics(run_id)) == 2


def test_the_runs_page_keeps_a_run_resumed_before_the_confirm(store):
    run_id = finished_run(store)
    app = AppTest.from_file(str(PAGES / "runs.py"), default_timeout=60).run()
    app.session_state["runs_table"] = {"selection": {"rows": [0]}}
    app.run()
    next(b for b in app.button if b.key == "runs_delete").click().run()
    confirm = next(b for b in app.button if b.key == "runs_delete_confirm")
    assert not confirm.disabled  # drawn while the run was completed
    set_status(store, run_id, "queued")  # resumed before the click
    confirm.click().run()
    assert not app.exception
    assert store.record(run_id).status == "queued"
    assert [success.value for success in app.success] == [
        f"#{run_id} not deleted: queued or running again (resumed meanwhile); stop it first."]


# ------------------------------------------------------------------ lock files
HOLDER = """
import fcntl, os, sys
handles = [os.open(path, os.O_RDONLY | os.O_CREAT, 0o600) for path in sys.argv[1:]]
for handle in handles:
    fcntl.flock(handle, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_lock_held_by_another_process_is_one_line_not_a_hang(store, monkeypatch):
    """Another process holds the run queue's lock and never lets go (where it used to be, and where it is
    now): listing runs skips the reconcile and answers, a start is refused in one line."""
    from stability.workers import scheduler

    locks = store.home / "locks"
    locks.mkdir(mode=0o700, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store.home / "runner.lock"),
                               str(locks / "runner.lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    env = {**os.environ, "STABILITY_LOCK_TIMEOUT": "1"}
    try:
        assert holder.stdout.readline().strip() == "held"
        listed = subprocess.run([sys.executable, "-m", "stability", "runs", "--store", str(store.path)],
                                capture_output=True, text=True, env=env, timeout=120)  # a hang guard only
        assert listed.returncode == 0 and "no runs" in listed.stdout, listed.stderr
        started = subprocess.run([sys.executable, "-m", "stability", "train", "--cell", "rnn", "--hidden-size", "8",
                                  "--steps", "10", "--background", "--store", str(store.path)],
                                 capture_output=True, text=True, env=env, timeout=120)
        assert started.returncode == 2 and len(started.stderr.strip().splitlines()) == 1, started.stderr
        assert "runner.lock is held by another process" in started.stderr and store.records() == []
        monkeypatch.setenv("STABILITY_LOCK_TIMEOUT", "0")
        assert scheduler.reconcile(str(store.path)) == []  # the page's periodic reconcile: skipped, no error
    finally:
        holder.stdin.close()
        holder.wait()
    assert (locks / "runner.lock").exists() and (locks.stat().st_mode & 0o777) == 0o700
    assert scheduler.reconcile(str(store.path)) == []  # free again


def test_a_link_where_the_lock_belongs_is_refused(store, tmp_path):
    from stability.runs.store import StoreError
    from stability.workers import scheduler

    target = tmp_path / "elsewhere"
    (store.home / "locks").mkdir(mode=0o700, exist_ok=True)
    (store.home / "locks" / "runner.lock").symlink_to(target)
    with pytest.raises(StoreError) as refused:
        scheduler.reconcile(str(store.path))
    assert "runner.lock is a link; it is not used" in str(refused.value) and "\n" not in str(refused.value)
    assert not target.exists()


PG_HOLDER = """
import sys, sqlalchemy
from stability.execution.locks import SWEEP_LOCK_SPACE
engine = sqlalchemy.create_engine(sys.argv[1])
with engine.connect() as connection:
    connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:space, :id)"), {"space": SWEEP_LOCK_SPACE, "id": int(sys.argv[2])})
    print("held", flush=True)
    sys.stdin.read()  # until the test lets go
"""


def test_a_shared_sweeps_lock_held_on_another_machine_is_one_line_after_its_timeout(postgres_url, monkeypatch):
    """A sweep's lock in a shared PostgreSQL store, held by another process that never lets go (another
    machine's stopped worker): a claimant waits its timeout, then LockBusy in one line, a StoreBusy; the
    connection it asked on is not left in a transaction, and once the holder lets go the lock is had."""
    from stability.execution.locks import LockBusy, sweep_lock
    from stability.runs.errors import StoreBusy
    from stability.runs.store import RunStore

    sweep_id = 7
    holder = subprocess.Popen([sys.executable, "-c", PG_HOLDER, postgres_url, str(sweep_id)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    monkeypatch.setenv("STABILITY_LOCK_TIMEOUT", "1")
    try:
        assert holder.stdout.readline().strip() == "held"
        with RunStore(postgres_url) as store:
            started = time.monotonic()
            with pytest.raises(LockBusy) as busy:
                with sweep_lock(store, sweep_id):
                    pytest.fail("the lock was had while another process held it")
            waited = time.monotonic() - started
            assert isinstance(busy.value, StoreBusy) and len(str(busy.value).splitlines()) == 1
            assert f"sweep {sweep_id}" in str(busy.value)
            assert 1.0 <= waited < 60  # its timeout, not forever (the upper bound is a hang guard only)
            with sweep_lock(store, sweep_id + 1):  # another sweep's lock is free meanwhile
                pass
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    with RunStore(postgres_url) as store, sweep_lock(store, sweep_id):  # let go: had at once
        pass
