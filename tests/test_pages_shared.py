"""pages/ui/shared.py: many sessions of the server watching one run read its rows once a refresh for all of them
(stability/live/tail.py, Note [Many watchers]; the tail's own tests: tests/test_live_tail.py). The SQL each statement sends to a real SQLite store is counted with SQLAlchemy's own
event, and the server's one-second rhythm is driven by a hand-moved clock (no sleeping, no timing)."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

from stability.live import tail
from test_live_tail import clock, metric_reads, reads  # noqa: F401 - the tail's fixtures: a hand-moved clock, the SELECTs counted
from test_pages_train import add_run, log
from statuses import set_status

TRAIN = Path(__file__).resolve().parent.parent / "pages" / "train.py"
SESSIONS = 3


def test_sessions_watching_one_run_read_its_rows_once_a_refresh_for_all(store, clock, reads):
    run_id = add_run(store, status="running", cell="rnn", steps=(0, 10))
    apps = [AppTest.from_file(str(TRAIN), default_timeout=30) for _ in range(SESSIONS)]
    for app in apps:
        app.query_params["run"] = str(run_id)
        app.run()
        assert not app.exception
    assert metric_reads(reads) == 1  # the first session read the rows; the others drew what it read

    log(store, run_id, (20, 30))
    reads.clear()
    for app in apps:  # within the same second: nobody reads, everybody still draws the rows read
        app.run()
    assert metric_reads(reads) == 0
    assert {len(app.session_state["_live_rows"][(store.location, run_id)].metrics) for app in apps} == {24}

    clock.now += tail.READ_EVERY_S
    for app in apps:  # a second later: one read of the rows after step 10, for all of them
        app.run()
        assert not app.exception
    assert metric_reads(reads) == 1
    stored = store.metrics(run_id)
    for app in apps:
        rows = app.session_state["_live_rows"][(store.location, run_id)]
        assert list(rows.metrics["step"]) == list(stored["step"]) and list(rows.metrics["name"]) == list(stored["name"])


def test_the_session_that_stops_a_run_sees_it_stopped_at_once(store, clock, monkeypatch):
    """Its panel is no longer polled once the run has ended, so the look it draws is read then, not a second
    later (the other sessions see it at their next look)."""
    from stability.workers import scheduler

    run_id = add_run(store, status="running", cell="rnn", steps=(0, 10))
    monkeypatch.setattr(scheduler, "stop_run", lambda run_id, store_path=None, timeout=5.0:
                        set_status(store, run_id, "stopped") or "stopped")
    app = AppTest.from_file(str(TRAIN), default_timeout=30)
    app.query_params["run"] = str(run_id)
    app.run()
    next(button for button in app.button if button.label == "Stop").click().run()  # the clock has not moved
    assert not app.exception
    assert any("was stopped at step" in block.value for block in app.info)
