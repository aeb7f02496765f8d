"""stability/live/tail.py: many sessions watching one run read its rows once a refresh for all of them (Note
[Many watchers]), only the rows after the last step read, step 0 again, and the first rows waited for. The SQL
each statement sends to a real SQLite store is counted with SQLAlchemy's own event, and the server's one-second
rhythm is driven by a hand-moved clock (no sleeping, no timing). No Streamlit: the pages' sessions on top of it
are tests/test_pages_shared.py's."""
import re
import threading
import time

import pandas as pd
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from stability.live import tail
from statuses import set_status
from test_pages_train import add_run, log


@pytest.fixture
def clock(monkeypatch):
    """The server's clock, moved by hand: ``clock.now += 1.0``."""
    class Clock:
        now = 1000.0

    monkeypatch.setattr(tail, "clock", lambda: Clock.now)
    return Clock


@pytest.fixture
def reads(store):
    """The tables each SELECT sent to ``store``'s file reads, by any connection of this process."""
    seen = []

    def note(conn, cursor, statement, parameters, context, executemany):
        if conn.engine.url.database == str(store.location) and statement.lstrip().upper().startswith("SELECT"):
            seen.append(set(re.findall(r"\bFROM\s+(\w+)", statement, flags=re.IGNORECASE)))

    event.listen(Engine, "before_cursor_execute", note)
    yield seen
    event.remove(Engine, "before_cursor_execute", note)


def metric_reads(seen) -> int:
    return sum("metrics" in tables for tables in seen)


def test_threads_that_find_a_look_out_of_date_wait_for_one_read(store, clock, reads):
    """Sessions run in threads of the server: those that look at once wait for the one that reads."""
    run_id = add_run(store, status="running", cell="rnn", steps=(0, 10, 20))
    runs = tail.SharedRuns()
    start, looks = threading.Barrier(8), []

    def look():
        start.wait()
        looks.append(runs.look(store, run_id, series=True))

    threads = [threading.Thread(target=look) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert metric_reads(reads) == 1 and len({id(found) for found in looks}) == 1
    assert sum("series" in tables for tables in reads) == len(tail.SERIES)


def test_a_look_at_a_run_that_did_not_move_is_one_query_of_its_row(store, clock, reads):
    """The live poll reads the run as one row (RunStore.record without its latest values): the record's
    latest values are the look's own, the last of the rows it read."""
    run_id = add_run(store, status="running", cell="rnn", steps=(0, 10))
    runs = tail.SharedRuns()
    runs.look(store, run_id)
    reads.clear()
    clock.now += tail.READ_EVERY_S
    look = runs.look(store, run_id)
    assert reads == [{"runs"}]
    stored = store.record(run_id)  # with its latest values, read from the store's own table of them
    assert dict(look.record.latest) == pytest.approx(dict(stored.latest))
    assert look.record.status == stored.status and look.record.step == stored.step


def test_a_look_reads_only_new_rows_then_everything_once_when_the_run_ends(store, clock, reads):
    run_id = add_run(store, status="running", cell="rnn", steps=(0, 10))
    runs = tail.SharedRuns()
    first = runs.look(store, run_id)
    log(store, run_id, (20,))
    clock.now += tail.READ_EVERY_S
    second = runs.look(store, run_id)
    assert len(second.metrics) == len(store.metrics(run_id)) and second.token != first.token
    assert len(first.metrics) == len(store.metrics(run_id, since_step=None)) - 12  # the old look is left as it was
    assert second.latest["grad/h0_norm"] == pytest.approx(1e-20) and second.counts["train/loss"] == (3, 20)

    store.log(run_id, [(20, time.time(), "test/mse", 0.05)])  # a row at a step already read
    set_status(store, run_id, "completed")
    clock.now += tail.READ_EVERY_S
    reads.clear()
    final = runs.look(store, run_id)
    assert final.final and final.latest["test/mse"] == pytest.approx(0.05)
    assert metric_reads(reads) == 1 and len(final.metrics) == len(store.metrics(run_id))
    clock.now += tail.READ_EVERY_S
    reads.clear()
    assert runs.look(store, run_id).token == final.token and metric_reads(reads) == 0  # never read again


def test_a_step_stored_in_two_parts_is_whole_at_the_next_read(store, clock):
    """Note [Step 0 again]: step 0 comes in two transactions (its loss, then the evaluation and the
    probe); a look that read the first part has the second at its next read, rows, series and counts."""
    config_run = add_run(store, status="running", cell="rnn", steps=())
    now = time.time()
    store.flush(config_run, [(0, now, "train/loss", 0.5), (0, now, "grad/h0_norm_train", 1e-3)], [], heartbeat_step=0)
    runs = tail.SharedRuns()
    first = runs.look(store, config_run, series=True)
    assert sorted(first.metrics["name"]) == ["grad/h0_norm_train", "train/loss"] and first.flow.empty
    store.flush(config_run, [(0, now + 0.2, "val/loss", 0.6), (0, now + 0.2, "sv/min", 0.9)],
                [(0, now + 0.2, "grad/h_t_norm", t, 10.0 ** -t) for t in range(4)], heartbeat_step=0)
    clock.now += tail.READ_EVERY_S
    second = runs.look(store, config_run, series=True)
    assert sorted(second.metrics["name"]) == ["grad/h0_norm_train", "sv/min", "train/loss", "val/loss"]
    assert len(second.flow) == 4 and second.counts["train/loss"] == (1, 0) and second.counts["val/loss"] == (1, 0)
    log(store, config_run, (10,))
    clock.now += tail.READ_EVERY_S
    third = runs.look(store, config_run, series=True)
    stored = store.metrics(config_run)
    assert list(third.metrics["name"]) == list(stored["name"]) and list(third.metrics["step"]) == list(stored["step"])
    assert third.counts["train/loss"] == (2, 10) and third.counts["sv/min"] == (2, 10)
    assert len(third.flow) == len(store.series(config_run, "grad/h_t_norm"))


def test_a_panel_awaiting_the_first_rows_gets_them_within_its_wait(store, monkeypatch):
    """Note [Waiting for the first rows]: rows stored while the look waits are in the look it returns; a run
    that has ended is not waited for (its look is final)."""
    run_id = add_run(store, status="running", cell="rnn", steps=())
    runs = tail.SharedRuns()
    assert runs.first_rows(store, run_id).metrics.empty  # no wait asked: the look as it is
    writer = threading.Timer(0.3, lambda: log(store, run_id, (0,)))
    writer.start()
    try:
        look = runs.first_rows(store, run_id, wait_s=60.0)  # returns when the rows are read, not after 60 s
    finally:
        writer.join()
    assert list(look.metrics["name"]) == list(store.metrics(run_id)["name"]) and set(look.metrics["step"]) == {0}

    ended = add_run(store, status="failed", cell="rnn", steps=())

    def no_sleep(seconds):
        raise AssertionError(f"waited {seconds} s for the rows of a run that has ended")

    monkeypatch.setattr(tail.time, "sleep", no_sleep)
    assert runs.first_rows(store, ended, wait_s=60.0).final


def test_a_sessions_rows_say_once_that_the_run_has_just_ended_and_memoise_for_every_session():
    metrics = pd.DataFrame({"run_id": 1, "step": [0, 10], "wall_time": [0.0, 1.0], "name": ["train/loss"] * 2,
                            "value": [1.0, 0.5]})
    running = tail.Look(record=None, metrics=metrics, final=False, token=1, latest={"train/loss": 0.5})
    ended = tail.Look(record=None, metrics=metrics, final=True, token=2, latest={"train/loss": 0.5})
    memos, computed = tail.SharedMemo(), []
    before = tail.session_rows(running, None, memos)
    after = tail.session_rows(ended, before, memos)
    assert not before.just_finished and after.just_finished and not tail.session_rows(ended, after).just_finished
    assert after.last("train/loss") == 0.5 and tail.latest_value(metrics, "train/loss") == 0.5
    for _ in range(2):
        assert tail.session_rows(ended, None, memos).memo("ticks", lambda: computed.append(1) or "built") == "built"
    assert computed == [1]  # once for every session with the same rows
    assert tail.not_in_store([3]) == "Run 3 is not in this store."
    assert tail.not_in_store(list(range(12))).startswith("Runs 0, 1, 2") and "and 2 more are" in tail.not_in_store(
        list(range(12)))
