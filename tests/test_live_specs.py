"""stability/live/specs.py: chart specs that stay the same when only rows change (what lets the browser swap
rows in the Vega view it has; Note [Stable specs]), Arrow rows that read back as the chart's rows, and the
caches of a session and of the server, without Streamlit."""
import json

import numpy as np
import pandas as pd
import pytest

from stability import charts
from stability.live import specs


# --------------------------------------------------------------------------------------- chart specs
def metric_frame(steps, spike=None):
    steps = np.arange(steps)
    values = 1.0 / (1.0 + steps)
    if spike is not None:
        values[spike] = 0.0
    return pd.concat([pd.DataFrame({"run_id": 1, "run": "rnn", "step": steps, "wall_time": steps * 0.1,
                                    "name": name, "value": values * scale})
                      for name, scale in (("train/loss", 1.0), ("val/loss", 1.1))], ignore_index=True)


def flow_frame(steps):
    return pd.DataFrame([(1, step, float(step), "grad/h_t_norm", t, 10.0 ** (t - 20 - step / 100))
                         for step in range(0, steps, 10) for t in range(21)],
                        columns=["run_id", "step", "wall_time", "name", "index", "value"])


NAMES = ["train/loss", "val/loss"]
OPTIONS = dict(log_y=True, smoothing=0.5, baseline=0.2, baseline_label="chance", max_points=50, hover_points=10)
PANELS = {
    "metric": (metric_frame, lambda f: charts.metric_chart(f, names=NAMES, title="loss", **OPTIONS),
               lambda f: charts.metric_chart_rows(f, names=NAMES, **OPTIONS).datasets()),
    # a Race's linear loss chart: every row hovered, early outliers clamped (pages/race.py, race_chart_parts)
    "linear metric": (metric_frame, lambda f: charts.metric_chart(f, names=NAMES, title="loss", baseline=0.2,
                                                                  ignore_outliers=True),
                      lambda f: charts.metric_chart_rows(f, names=NAMES, baseline=0.2, ignore_outliers=True).datasets()),
    "singular values": (lambda n: metric_frame(n).assign(name=lambda f: f["name"].map(
                            {"train/loss": "sv/min", "val/loss": "sv/max"})),
                        lambda f: charts.singular_value_band_chart(f, max_points=50),
                        lambda f: charts.singular_value_band_rows(f, max_points=50)),
    "heatmap": (flow_frame, lambda f: charts.gradient_flow_heatmap(f, height=300),
                lambda f: charts.gradient_flow_heatmap_rows(f)),
}


def without_data(spec):
    return json.dumps({key: value for key, value in spec.items() if key != "datasets"}, sort_keys=True)


@pytest.mark.parametrize("kind", PANELS)
def test_new_rows_leave_a_live_charts_spec_as_it_was(kind):
    """Only the Arrow datasets differ, named by place; Altair's generated names are numbered per chart."""
    make, build, _ = PANELS[kind]
    (before, _), (after, _) = specs.vega_lite_spec(build(make(60))), specs.vega_lite_spec(build(make(90)))
    assert without_data(before) == without_data(after)
    assert before["datasets"] != after["datasets"]
    assert sorted(before["datasets"]) == [f"rows_{index}" for index in range(len(before["datasets"]))]
    assert "data_" not in without_data(before)  # Vega-Lite's own source names: a dataset so named draws nothing
    assert before["usermeta"]["embedOptions"]["renderer"] == "canvas" and before["config"]["aria"] is False


@pytest.mark.parametrize("kind", PANELS)
def test_rows_put_into_a_kept_spec_are_what_a_full_build_sends(kind):
    make, build, rows = PANELS[kind]
    entry = specs.ChartSpecs()
    old, new = make(60), make(90)
    specs.refresh_chart(entry, specs.LiveChart("p", (), 60, lambda: build(old), lambda: rows(old)))
    built_calls = []
    specs.refresh_chart(entry, specs.LiveChart("p", (), 90, lambda: built_calls.append(1) or build(new), lambda: rows(new)))
    assert built_calls == []  # the chart was not built again
    assert entry.specs["p"] == specs.vega_lite_spec(build(new))[0]


def test_rows_that_no_longer_fit_the_kept_spec_build_the_chart_again():
    """A zero appears on a log scale: the flagged rows need a layer the kept spec does not have."""
    make, build, rows = PANELS["metric"]
    entry = specs.ChartSpecs()
    specs.refresh_chart(entry, specs.LiveChart("p", (), 1, lambda: build(make(60)), lambda: rows(make(60))))
    flagged = make(60, spike=30)
    specs.refresh_chart(entry, specs.LiveChart("p", (), 2, lambda: build(flagged), lambda: rows(flagged)))
    assert entry.specs["p"] == specs.vega_lite_spec(build(flagged))[0]
    assert "triangle-down" in without_data(entry.specs["p"])


def test_changed_controls_build_the_chart_again_even_when_the_rows_fit():
    make, build, rows = PANELS["metric"]
    entry = specs.ChartSpecs()
    specs.refresh_chart(entry, specs.LiveChart("p", ("loss",), 1, lambda: build(make(60)), lambda: rows(make(60))))
    retitled = lambda: charts.metric_chart(make(60), names=NAMES, title="renamed", **OPTIONS)  # noqa: E731
    specs.refresh_chart(entry, specs.LiveChart("p", ("renamed",), 1, retitled, lambda: rows(make(60))))
    assert json.loads(without_data(entry.specs["p"]))["title"] == "renamed"


@pytest.mark.parametrize("kind", PANELS)
def test_a_specs_datasets_read_back_as_the_rows_the_chart_draws(kind):
    """The Arrow bytes a spec carries (Note [Arrow rows]) are streams of the chart's own rows, their index
    included: read back with pyarrow, independently of how they were written, each is its frame."""
    import pyarrow as pa

    make, build, rows = PANELS[kind]
    spec, columns = specs.vega_lite_spec(build(make(60)))
    frames = rows(make(60))
    assert columns == [list(frame.columns) for frame in frames] and len(spec["datasets"]) == len(frames)
    for index, frame in enumerate(frames):
        back = pa.ipc.open_stream(spec["datasets"][f"rows_{index}"]).read_pandas()
        pd.testing.assert_frame_equal(back, frame, check_dtype=False)
        assert back.index.equals(frame.index)


class Memo:
    """What shared_specs needs of the server's memo (stability/live/tail.py's SharedMemo): get and lock."""

    def __init__(self):
        import threading

        self.values, self._lock = {}, threading.RLock()

    def get(self, key, make):
        if key not in self.values:
            self.values[key] = make()
        return self.values[key]

    def lock(self):
        return self._lock


def counted(key, built, frame):
    make, build, rows = PANELS["metric"]
    return specs.LiveChart(key, (), len(frame), lambda: built.append(key) or build(frame), lambda: rows(frame))


def test_a_session_keeps_its_specs_a_slot_for_its_last_slots_and_builds_a_chart_once(monkeypatch):
    monkeypatch.setattr(specs, "REBUILD_FACTOR", 0.0)
    cache, built = {}, []
    first = specs.session_specs(cache, "a", [counted("loss", built, metric_frame(60))])
    again = specs.session_specs(cache, "a", [counted("loss", built, metric_frame(60))])
    assert built == ["loss"] and again == first  # same rows: the same spec, not built again
    for slot in range(specs.KEPT_SLOTS):
        specs.session_specs(cache, slot, [counted("loss", built, metric_frame(60))])
    assert "a" not in cache and len(cache) == specs.KEPT_SLOTS


def test_the_server_builds_a_chart_once_for_every_session_and_one_new_chart_a_look_in_turn():
    memo, built = Memo(), []
    panel = [counted(key, built, metric_frame(60)) for key in ("loss", "h0")]
    first = specs.shared_specs(memo, "run", panel, in_turn=True)
    assert built == ["loss"] and first[1] is None  # Note [Drawn in turn]: one new chart a look
    second = specs.shared_specs(memo, "run", panel, in_turn=True)
    third = specs.shared_specs(memo, "run", panel)  # another session, the usual pace
    assert built == ["loss", "h0"] and second == third and None not in third
