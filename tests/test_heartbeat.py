"""A run's step moves between its log steps, and the Train page's status line follows it at every look.

stability/training/sinks.py, Note [A moving step]: between flushes a store's run writes its step and heartbeat
(one compare-and-set on its claim, no metric row) at most every STEP_BEAT_EVERY_S. pages/ui/status.py, Note [A
status that moves]: the Train page's status line, drawn in the charts' fragment, shows that step at every look. Real training runs, a real
store, Streamlit's AppTest with the messages it sends, and (where Chromium is here) a real server and browser.
"""
import re
import time
import types
from pathlib import Path

import pytest
from browsers import browser, server  # noqa: F401 - the fixtures of tests/browsers.py

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.execution import lifecycle
from stability.runs.store import RunStore
from stability.training import sinks
from stability.training.hooks import Hook
from statuses import set_status

PAGE = Path(__file__).resolve().parent.parent / "pages" / "train.py"


def tiny(steps: int, log_every: int | None = None) -> RunConfig:
    """rnn 16 on adding T = 10: a few ms a step; logging only at its ends unless ``log_every``."""
    log_every = log_every or steps
    return RunConfig(CellConfig("rnn", 16), TaskConfig("adding", {"seq_len": 10}),
                     TrainConfig(steps=steps, log_every=log_every, eval_every=steps, probe_every=steps))


class StepsSeen(Hook):
    """Reads the run's stored step from a connection of its own every ``every`` training steps."""

    def __init__(self, path, run_id: int, every: int = 10):
        self.reader, self.run_id, self.every, self.seen = RunStore(path), run_id, every, []

    def on_step(self, trainer, result):
        if trainer.step % self.every == 0:
            self.seen.append((trainer.step, self.reader.record(self.run_id).step))


def test_the_step_moves_between_log_steps_of_a_real_run_and_no_metric_row_is_added(store, monkeypatch):
    """A run logging only at steps 0 and 400: its stored step moves in between, never ahead of the trainer,
    and its metric rows are those of the log steps alone (fails without the beat: the step stays 0)."""
    monkeypatch.setattr(sinks, "STEP_BEAT_EVERY_S", 0.02, raising=False)  # a beat every 20 ms: a short run
    config = tiny(400)
    run_id = store.create_run(config.to_dict())
    seen = StepsSeen(store.path, run_id)
    result = lifecycle.train_run(config, store, run_id, hooks=[seen])
    seen.reader.close()
    assert result.status == "completed"
    between = sorted({stored for _, stored in seen.seen if stored not in (None, 0, 400)})
    assert len(between) >= 3, seen.seen  # the step moved at least three times between the two log steps
    assert all(stored is None or stored <= step for step, stored in seen.seen)
    assert set(store.metrics(run_id)["step"]) == {0, 400}
    assert store.record(run_id).step == 400


def test_the_beat_moves_nothing_once_another_process_holds_the_claim(store):
    """The beat is a compare-and-set on the claim: a sink whose run was claimed by another process writes
    neither the step nor the heartbeat, and its next poll ends the run (ClaimLost)."""
    config = tiny(100)
    run_id = store.create_run(config.to_dict())
    set_status(store, run_id, "running", claim="mine", step=0)
    sink = sinks.StoreSink(store, run_id, claim="mine")
    trainer = types.SimpleNamespace(step=5, stop=lambda *args: None)
    sink.last_beat = sink.last_poll = time.time() - 60  # a beat and a poll are due
    sink.on_step(trainer, None)
    assert store.record(run_id).step == 5  # ours: the step moved
    store.update_run(run_id, claim="theirs", step=3, heartbeat=123.0)
    trainer.step = 9
    sink.last_beat, sink.last_poll = time.time() - 60, time.time()  # a beat due, the poll not yet
    sink.on_step(trainer, None)
    record = store.record(run_id)
    assert (record.step, record.heartbeat) == (3, 123.0)  # not ours any more: nothing written
    with pytest.raises(sinks.ClaimLost):
        trainer.step = 10
        sink.on_step(trainer, None)  # the poll the failed beat hastened
    assert store.record(run_id).step == 3


# ------------------------------------------------------------------------------------ the page
@pytest.fixture
def sent(monkeypatch):
    """Every ForwardMsg a page's script run sends (AppTest runs the script in this process)."""
    from streamlit.runtime.forward_msg_queue import ForwardMsgQueue

    messages = []
    enqueue = ForwardMsgQueue.enqueue

    def recorded(self, msg):
        messages.append(msg)
        return enqueue(self, msg)

    monkeypatch.setattr(ForwardMsgQueue, "enqueue", recorded)
    return messages


def fragments(messages) -> tuple[dict, dict]:
    """(fragment id -> its auto-rerun interval, element type -> the fragment ids that drew one) of a run."""
    intervals, drawn = {}, {}
    for msg in messages:
        kind = msg.WhichOneof("type")
        if kind == "auto_rerun":
            intervals[msg.auto_rerun.fragment_id] = msg.auto_rerun.interval
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            drawn.setdefault(msg.delta.new_element.WhichOneof("type"), set()).add(msg.delta.fragment_id)
    return intervals, drawn


def test_the_status_line_shows_the_beats_step_in_the_one_fragment_a_watcher_reruns(store, sent, monkeypatch):
    """The progress bar is drawn by the charts' own fragment (one fragment a watcher, 1.5 s or more at Auto:
    Note [A status that moves]) with the step the beat wrote between log steps and the ETA scaled to it;
    paused or once the run has ended, the page polls nothing."""
    from streamlit.testing.v1 import AppTest

    import stability.live.tail

    monkeypatch.setattr(stability.live.tail, "READ_EVERY_S", 0.0)
    config = tiny(10_000, 100)
    run_id = store.create_run(config.to_dict())
    store.update_run(run_id, total_steps=10_000, metric="mse")
    set_status(store, run_id, "running")
    now = time.time()
    for step in (0, 100):
        store.flush(run_id, [(step, now, name, value) for name, value in (
            ("train/loss", 0.2), ("val/loss", 0.2), ("speed/steps_per_s", 50.0), ("progress/eta_s", 198.0))],
            [], heartbeat_step=step)
    store.update_run(run_id, step=150)  # a beat between log steps
    app = AppTest.from_file(str(PAGE), default_timeout=30)
    app.query_params["run"] = str(run_id)
    app.run()
    assert not app.exception
    intervals, drawn = fragments(sent)
    [status] = drawn["progress"]
    charts = drawn["arrow_vega_lite_chart"] if "arrow_vega_lite_chart" in drawn else drawn["vega_lite_chart"]
    assert status and charts == {status} and list(intervals) == [status]  # one fragment: no second rerun a watcher
    assert intervals[status] >= 1.5
    [progress] = app.get("progress")
    assert "step 150 / 10,000" in progress.proto.text
    assert "ETA 3 min 17 s" in progress.proto.text  # 198 s at step 100, scaled to the 9,850 steps left
    sent.clear()
    app.selectbox(key="train_refresh").set_value("off").run()  # paused: nothing polled, the status line neither
    assert not app.exception and fragments(sent)[0] == {}
    app.selectbox(key="train_refresh").set_value("auto").run()
    assert not app.exception
    set_status(store, run_id, "completed")
    sent.clear()
    app.run()
    assert not app.exception
    intervals, drawn = fragments(sent)
    assert intervals == {} and drawn["progress"]


# ---------------------------------------------------------------------------------- a real browser
def test_a_run_logging_rarely_moves_its_progress_line_in_the_browser_every_second_or_so(browser, server):
    """A real worker whose run logs only at its ends: the Train page's progress line still changes, three
    times within a bounded wait (fails without the beat: it stands still)."""
    from browsers import STORES
    from stability.workers import scheduler

    config = tiny(1_000_000)
    run_id = scheduler.start_run(config, STORES[server], max_concurrent=1)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{server}/?run={run_id}")
        line = '[data-testid="stMain"] [data-testid="stProgress"]'
        page.wait_for_function(f"() => /step [1-9]/.test(document.querySelector('{line}')?.innerText || '')",
                               timeout=120_000)  # the worker's start: torch imported, the run begun
        texts = [page.locator(line).first.inner_text()]
        for _ in range(3):
            page.wait_for_function(f"before => document.querySelector('{line}').innerText !== before",
                                   arg=texts[-1], timeout=10_000)
            texts.append(page.locator(line).first.inner_text())
        steps = [int(re.search(r"step ([\d,]+)", text).group(1).replace(",", "")) for text in texts]
        with RunStore(STORES[server]) as store:
            logged = set(store.metrics(run_id)["step"])
    finally:
        page.close()
        scheduler.stop_run(run_id, STORES[server])
    assert steps == sorted(steps) and len(set(steps)) == 4
    assert logged == {0}  # every one of those steps moved between log steps


def test_a_look_that_finds_only_the_step_moved_keeps_its_rows_and_token(store):
    """stability/live/tail.py, Note [Between log steps]: a beat moves the run's position, not its rows, so what is
    computed from the rows (keyed by the look's token) is not computed again; the record has the new step."""
    from stability.live.tail import SharedRuns

    config = tiny(1000, 100)
    run_id = store.create_run(config.to_dict())
    set_status(store, run_id, "running")
    for step in (0, 100):
        store.flush(run_id, [(step, time.time(), "train/loss", 0.1)], [], heartbeat_step=step)
    looks = SharedRuns(read_every_s=0.0)
    first = looks.look(store, run_id, series=True)
    store.update_run(run_id, step=150, heartbeat=time.time())  # a beat
    moved = looks.look(store, run_id, series=True)
    assert moved.record.step == 150 and moved.position != first.position
    assert moved.token == first.token and moved.metrics is first.metrics and moved.flow is first.flow
    store.flush(run_id, [(200, time.time(), "train/loss", 0.05)], [], heartbeat_step=200)
    logged = looks.look(store, run_id, series=True)
    assert logged.token != first.token and list(logged.metrics["step"]) == [0, 100, 200]


def test_an_external_runs_step_moves_between_its_logged_steps_and_never_back(store, monkeypatch):
    """stability.watch: a loop watched every 400 steps has rows at steps 1 and 400 only; its stored step moves
    in between all the same (the beat), never ahead of the loop and never back when the rows are written
    (fails without the loop's step in the sink's view: the step stays at the rows')."""
    import torch
    from torch import nn

    import stability.watch as sw

    monkeypatch.setattr(sinks, "STEP_BEAT_EVERY_S", 0.02, raising=False)
    reader, seen = RunStore(store.path), []
    model = nn.RNN(2, 4, batch_first=True)
    with sw.init(name="mine", store=store, total_steps=400) as run:
        run.watch(model, every=400)
        for step in range(1, 401):
            out, _ = model(torch.zeros(1, 3, 2))
            run.step(out.square().mean())
            time.sleep(0.004)  # ~2 s: the rows of step 1 are written after a second (WRITE_EVERY_S), mid-loop
            if step % 2 == 0:
                seen.append((step, reader.record(run.id).step))
    reader.close()
    stored = [value for _, value in seen if value is not None]
    assert len({value for value in stored if value not in (0, 1, 400)}) >= 3, seen
    assert all(value is None or value <= step for step, value in seen)
    assert stored == sorted(stored), seen  # never back
    assert set(store.metrics(run.id)["step"]) == {1, 400}
