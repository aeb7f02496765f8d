"""stability/live/pace.py: how often a live panel looks at a run, without Streamlit."""
import dataclasses
import math
import time

import pandas as pd
import pytest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.live import pace
from stability.runs.records import RunRecord


class Rows:
    """A session's rows of a run as the pace reads them (stability/live/tail.py's LiveRows): metrics and last()."""

    def __init__(self, metrics):
        self.metrics = metrics

    def last(self, name):
        values = self.metrics.loc[self.metrics["name"] == name, "value"]
        return float(values.iloc[-1]) if len(values) else math.nan


def run_record(status="running", steps=2000, log_every=None, step=0, started=None, heartbeat=None):
    """A ``RunRecord`` as ``store.record`` gives it, of unknown age (``created_at`` None) and every column not
    given None."""
    config = RunConfig(CellConfig("rnn", 16), TaskConfig("adding", {"seq_len": 20}),
                       TrainConfig(steps=steps, log_every=log_every))
    unset = {field.name: None for field in dataclasses.fields(RunRecord)
             if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING}
    return RunRecord(**{**unset, "id": 1, "name": "", "status": status, "config": config,
                        "raw_config": config.to_dict(), "step": step, "started_at": started,
                        "heartbeat": heartbeat, "resumes": 0, "stop_requested": False})


def rows_with_speed(speed):
    metrics = pd.DataFrame({"run_id": 1, "step": [10, 20], "wall_time": [1.0, 2.0],
                            "name": ["speed/steps_per_s"] * 2, "value": [speed / 2, speed]})
    return Rows(metrics)


@pytest.mark.parametrize("refresh, every", [("2", 2.0), ("5", 5.0), ("10", 10.0), ("30", 30.0), ("off", None)])
def test_a_chosen_refresh_is_the_panels_timer_and_paused_is_none(refresh, every):
    assert pace.live_every(refresh, run_record(), rows_with_speed(100.0)) == every


@pytest.mark.parametrize("status", ["completed", "stopped", "diverged", "failed", "interrupted"])
def test_an_ended_run_is_not_polled_whatever_the_setting(status):
    assert all(pace.live_every(refresh, run_record(status)) is None for refresh in pace.REFRESH_CHOICES)


@pytest.mark.parametrize("log_every, speed, every", [
    (10, 50.0, 1.5),     # a row every 0.2 s: no faster than the lower bound
    (35, 20.0, 1.75),    # a row every 1.75 s: at that pace
    (100, 10.0, 2.0),    # a row every 10 s: the panel still looks every 2 s (status, heartbeat)
    (1000, 1.0, 2.0),
])
def test_auto_follows_the_runs_logging_interval_within_its_bounds(log_every, speed, every):
    run = run_record(log_every=log_every)
    assert pace.log_interval(run, rows_with_speed(speed)) == pytest.approx(log_every / speed)
    assert pace.live_every("auto", run, rows_with_speed(speed)) == pytest.approx(every)


def test_auto_without_speed_rows_uses_the_runs_own_progress_and_else_its_lower_bound():
    now = time.time()
    progressed = run_record(log_every=100, step=400, started=now - 200, heartbeat=now)  # 2 steps/s
    assert pace.log_interval(progressed) == pytest.approx(50.0)
    assert pace.live_every("auto", progressed) == pytest.approx(pace.AUTO_EVERY_S[1])
    assert pace.log_interval(run_record(status="queued")) is None
    assert pace.live_every("auto", run_record(status="queued")) == pace.AUTO_EVERY_S[0]
    unparsed = dataclasses.replace(run_record(), config=None, raw_config={"cell": "not a config"},
                                   config_problem="the stored config no longer parses: cell")
    assert pace.log_interval(unparsed) is None


def test_the_refresh_line_says_what_the_panel_does():
    run = run_record(log_every=100)
    assert "every 10 s" in pace.describe_refresh("auto", 10.0, run, rows_with_speed(10.0))
    assert "the run logs every 10 s" in pace.describe_refresh("auto", 10.0, run, rows_with_speed(10.0))
    assert "paused" in pace.describe_refresh("off", None, run, None).lower()
    assert "ended" in pace.describe_refresh("auto", None, run_record("completed"), None)


# --------------------------------------------------------------------------- the first point (Start)
def just_created(status="queued", age=1.0):
    return dataclasses.replace(run_record(status), created_at=time.time() - age)


def empty_rows():
    return Rows(pd.DataFrame({"run_id": [], "step": [], "wall_time": [], "name": [], "value": []}))


@pytest.mark.parametrize("refresh", ["auto", "2", "10", "30"])
def test_a_run_awaiting_its_first_point_is_looked_at_four_times_a_second_whatever_the_setting(refresh):
    fast = pace.FIRST_POINT_EVERY_S
    assert pace.live_every(refresh, just_created("queued")) == fast
    assert pace.live_every(refresh, just_created("running")) == fast               # no rows read yet
    assert pace.live_every(refresh, just_created("running"), empty_rows()) == fast  # none stored yet
    assert pace.live_every(refresh, just_created("running"), rows_with_speed(100.0)) != fast
    assert pace.live_every("off", just_created("queued")) is None  # paused means paused
    assert pace.live_every(refresh, just_created("failed")) is None


def test_a_run_still_queued_long_after_start_is_looked_at_in_the_usual_rhythm():
    queued_long = just_created("queued", age=pace.FIRST_POINT_FOR_S + 1)
    assert pace.live_every("auto", queued_long) == pace.AUTO_EVERY_S[0]
    assert pace.live_every("10", queued_long) == 10.0
    assert not pace.awaiting_first_point(run_record("queued"), None)  # of unknown age: never the fast pace


def test_the_refresh_line_says_the_panel_waits_for_the_first_point():
    text = pace.describe_refresh("auto", pace.FIRST_POINT_EVERY_S, just_created(), None)
    assert "first point" in text and f"{pace.FIRST_POINT_EVERY_S:g} s" in text


def test_an_external_run_has_no_log_interval_and_is_paced_at_autos_lower_bound():
    """An external run (stability.watch) has no RunConfig: no logging interval to follow."""
    external = dataclasses.replace(run_record(log_every=35), config=None, raw_config={"hidden": 8}, external=True)
    assert pace.log_interval(external, rows_with_speed(20.0)) is None
    assert pace.live_every("auto", external, rows_with_speed(20.0)) == pace.AUTO_EVERY_S[0]
    assert pace.live_every("auto", run_record(log_every=35), rows_with_speed(20.0)) == pytest.approx(1.75)
