"""pages/ui/live.py without a page: the refresh cadence, the first point's pace and the charts drawn in turn
(the specs themselves: tests/test_live_specs.py)."""
import time
from types import SimpleNamespace

import pandas as pd
import pytest

from pages.ui import live
from test_live_specs import PANELS
from stability.live import specs
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig


def run_record(status="running", steps=2000, log_every=None, step=0, started=None, heartbeat=None):
    config = RunConfig(CellConfig("rnn", 16), TaskConfig("adding", {"seq_len": 20}),
                       TrainConfig(steps=steps, log_every=log_every))
    return {"id": 1, "status": status, "config": config.to_dict(), "step": step, "started_at": started,
            "heartbeat": heartbeat}


def rows_with_speed(speed):
    metrics = pd.DataFrame({"run_id": 1, "step": [10, 20], "wall_time": [1.0, 2.0],
                            "name": ["speed/steps_per_s"] * 2, "value": [speed / 2, speed]})
    return live.LiveRows(metrics)


@pytest.mark.parametrize("refresh, every", [("2", 2.0), ("5", 5.0), ("10", 10.0), ("30", 30.0), ("off", None)])
def test_a_chosen_refresh_is_the_panels_timer_and_paused_is_none(refresh, every):
    assert live.live_every(refresh, run_record(), rows_with_speed(100.0)) == every


@pytest.mark.parametrize("status", ["completed", "stopped", "diverged", "failed", "interrupted"])
def test_an_ended_run_is_not_polled_whatever_the_setting(status):
    assert all(live.live_every(refresh, run_record(status)) is None for refresh in live.REFRESH_CHOICES)


@pytest.mark.parametrize("log_every, speed, every", [
    (10, 50.0, 1.5),     # a row every 0.2 s: no faster than the lower bound
    (35, 20.0, 1.75),    # a row every 1.75 s: at that pace
    (100, 10.0, 2.0),    # a row every 10 s: the panel still looks every 2 s (status, heartbeat)
    (1000, 1.0, 2.0),
])
def test_auto_follows_the_runs_logging_interval_within_its_bounds(log_every, speed, every):
    run = run_record(log_every=log_every)
    assert live.log_interval(run, rows_with_speed(speed)) == pytest.approx(log_every / speed)
    assert live.live_every("auto", run, rows_with_speed(speed)) == pytest.approx(every)


def test_auto_without_speed_rows_uses_the_runs_own_progress_and_else_its_lower_bound():
    now = time.time()
    progressed = run_record(log_every=100, step=400, started=now - 200, heartbeat=now)  # 2 steps/s
    assert live.log_interval(progressed) == pytest.approx(50.0)
    assert live.live_every("auto", progressed) == pytest.approx(live.AUTO_EVERY_S[1])
    assert live.log_interval(run_record(status="queued")) is None
    assert live.live_every("auto", run_record(status="queued")) == live.AUTO_EVERY_S[0]
    assert live.log_interval({**run_record(), "config": {"cell": "not a config"}}) is None


def test_the_refresh_line_says_what_the_panel_does():
    run = run_record(log_every=100)
    assert "every 10 s" in live.describe_refresh("auto", 10.0, run, rows_with_speed(10.0))
    assert "the run logs every 10 s" in live.describe_refresh("auto", 10.0, run, rows_with_speed(10.0))
    assert "paused" in live.describe_refresh("off", None, run, None).lower()
    assert "ended" in live.describe_refresh("auto", None, run_record("completed"), None)


def test_auto_retimes_the_panel_when_the_runs_pace_moved_and_not_twice_in_a_row(monkeypatch):
    """The panel's timer is set by a full rerun: Auto asks for one when the run now logs every 2 s and
    the panel looks every second, not again straight away, and never for a chosen setting."""
    reruns = []
    monkeypatch.setattr(live, "st", SimpleNamespace(session_state={}, rerun=lambda: reruns.append("rerun")))
    run, slower = run_record(log_every=20), rows_with_speed(10.0)  # a row every 2 s
    live.retime_if_needed("auto", 2.0, run, slower)
    assert reruns == []  # already right
    live.retime_if_needed("5", 5.0, run, slower)
    assert reruns == []  # the user's choice stays
    live.retime_if_needed("auto", 1.0, run, slower)
    live.retime_if_needed("auto", 1.0, run, slower)
    assert reruns == ["rerun"]


# --------------------------------------------------------------------------- the first point (Start)
def just_created(status="queued", age=1.0):
    return {**run_record(status), "created_at": time.time() - age}


def empty_rows():
    return live.LiveRows(pd.DataFrame({"run_id": [], "step": [], "wall_time": [], "name": [], "value": []}))


@pytest.mark.parametrize("refresh", ["auto", "2", "10", "30"])
def test_a_run_awaiting_its_first_point_is_looked_at_four_times_a_second_whatever_the_setting(refresh):
    fast = live.FIRST_POINT_EVERY_S
    assert live.live_every(refresh, just_created("queued")) == fast
    assert live.live_every(refresh, just_created("running")) == fast               # no rows read yet
    assert live.live_every(refresh, just_created("running"), empty_rows()) == fast  # none stored yet
    assert live.live_every(refresh, just_created("running"), rows_with_speed(100.0)) != fast
    assert live.live_every("off", just_created("queued")) is None  # paused means paused
    assert live.live_every(refresh, just_created("failed")) is None


def test_a_run_still_queued_long_after_start_is_looked_at_in_the_usual_rhythm():
    queued_long = just_created("queued", age=live.FIRST_POINT_FOR_S + 1)
    assert live.live_every("auto", queued_long) == live.AUTO_EVERY_S[0]
    assert live.live_every("10", queued_long) == 10.0
    assert not live.awaiting_first_point(run_record("queued"), None)  # of unknown age: never the fast pace


def test_the_first_point_pace_ends_with_one_full_rerun_and_auto_does_not_retime_it(monkeypatch):
    reruns = []
    monkeypatch.setattr(live, "st", SimpleNamespace(session_state={}, rerun=lambda: reruns.append("rerun")))
    fast, run = live.FIRST_POINT_EVERY_S, just_created("running")
    live.retime_if_needed("auto", fast, run, rows_with_speed(10.0))
    live.leave_first_point_pace(fast, live.awaiting_first_point(run, empty_rows()))
    assert reruns == []  # still waiting: the fast timer stays, no rerun
    live.leave_first_point_pace(fast, live.awaiting_first_point(run, rows_with_speed(10.0)))
    assert reruns == ["rerun"]  # drawn: the page sets its usual timer
    live.leave_first_point_pace(5.0, False)
    assert reruns == ["rerun"]  # at the usual pace nothing is rerun


def test_the_refresh_line_says_the_panel_waits_for_the_first_point():
    text = live.describe_refresh("auto", live.FIRST_POINT_EVERY_S, just_created(), None)
    assert "first point" in text and f"{live.FIRST_POINT_EVERY_S:g} s" in text


def test_drawn_in_turn_draws_the_charts_built_before_and_only_then_builds_the_next(monkeypatch):
    """Note [Drawn in turn] (stability/live/specs.py): at the first point's pace a look draws what earlier looks built, then builds
    one new chart and draws it into its place, so the chart on the page is not stale through the build."""
    monkeypatch.setattr(live.st, "session_state", {})
    make, build, _ = PANELS["metric"]
    events = []

    def chart(key):
        return specs.LiveChart(key, (), 1, lambda: events.append(("build", key)) or build(make(60)))

    class Place:
        def __init__(self, index):
            self.index = index

        def vega_lite_chart(self, spec, width):
            events.append(("show", self.index))

    def draw(specs):
        events.append(("draw", [spec is not None for spec in specs]))
        return [Place(index) for index in range(len(specs))]

    panel = [chart("loss"), chart("h0"), chart("sv")]
    first = live.drawn_in_turn("slot", panel, draw)
    assert events == [("draw", [False, False, False]), ("build", "loss"), ("show", 0)]
    events.clear()
    second = live.drawn_in_turn("slot", panel, draw)
    assert events == [("draw", [True, False, False]), ("build", "h0"), ("show", 1)]
    assert [spec is not None for spec in first] == [True, False, False]
    assert [spec is not None for spec in second] == [True, True, False] and second[0] == first[0]
