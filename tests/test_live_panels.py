"""stability/live/panels.py: which charts a run's live panel draws, without Streamlit or a store."""
import math

import pandas as pd
import pytest

from stability.live import panels


class Rows:
    """A session's rows of a run as a panel reads them (stability/live/tail.py's LiveRows): long metric rows,
    counts per name, versions, a memo, and the series."""

    def __init__(self, names, flow=None, depth=None, spectrum=None):
        self.metrics = pd.DataFrame([(1, step, float(step), name, 1.0 / (1 + step)) for name in names
                                     for step in (0, 10)], columns=["run_id", "step", "wall_time", "name", "value"])
        self.counts = {name: (2, 10) for name in names}
        self.flow, self.depth, self.spectrum = flow, depth, spectrum

    def version(self, names):
        return tuple(self.counts.get(name, (0, None)) for name in names)

    def memo(self, key, compute):
        return compute()

    def last(self, name):
        values = self.metrics.loc[self.metrics["name"] == name, "value"]
        return float(values.iloc[-1]) if len(values) else math.nan

    def flow_version(self):
        return (0, None)

    depth_version = spectrum_version = flow_version


BASE = ["train/loss", "val/loss", "grad/h0_norm", "sv/min", "sv/max", "sv/margin", "gap/loss"]


def keys(charts):
    return [chart.key for chart in charts]


def test_a_run_whose_metric_is_the_loss_draws_the_baseline_on_the_loss_and_no_metric_chart():
    charts = panels.run_panels(Rows(BASE), cell="rnn", metric="mse", baseline=0.167, baseline_label="memoryless")
    assert keys(charts) == ["loss", "h0", "sv", "gap"]
    assert ("baseline", 0.167) in charts[0].controls[2] and charts[0].metric == "val/loss"


def test_a_run_with_an_accuracy_gets_a_metric_chart_with_the_baseline_and_a_loss_without():
    names = BASE + ["train/accuracy", "val/accuracy", "gap/accuracy", "gate/alpha", "grad/A_h_norm"]
    charts = panels.run_panels(Rows(names), cell="sgornn", metric="accuracy", baseline=0.5, baseline_label="chance")
    assert keys(charts) == ["loss", "metric", "h0", "maso", "sv", "gates", "gap"]
    assert not any(name == "baseline" for name, _ in charts[0].controls[2])
    assert ("baseline", 0.5) in charts[1].controls[2] and charts[1].metric == "val/accuracy"
    assert charts[-1].controls[0] == ("gap/accuracy",)


@pytest.mark.parametrize("series", [{"flow"}, {"flow", "spectrum"}, {"flow", "depth", "spectrum"}])
def test_the_heatmaps_a_run_has_rows_for_come_last_and_are_counted_as_wide(series):
    frame = pd.DataFrame({"run_id": [1], "step": [0], "name": ["x"], "index": [0], "value": [1.0]})
    rows = Rows(BASE, **{name: frame for name in series})
    charts = panels.run_panels(rows, cell="mlp", metric="mse")
    assert set(keys(charts)[-len(series):]) == series and panels.heatmaps(rows) == len(series)


def test_the_summary_says_dash_for_what_is_not_logged_yet():
    values = dict(panels.summary_values(None, Rows(BASE)))
    assert values["val loss"] == "0.09091" and values["test loss"] == "—" and values["max |σ − 1|"] == "9.09e-02"
