"""pages/ui/live.py without a page: Auto's re-timing, the first point's one rerun and the charts drawn in turn
(the pace itself: tests/test_live_pace.py; the specs: tests/test_live_specs.py)."""
from types import SimpleNamespace

from pages.ui import live
from stability.live import specs
from test_live_pace import empty_rows, just_created, run_record, rows_with_speed
from test_live_specs import PANELS


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
