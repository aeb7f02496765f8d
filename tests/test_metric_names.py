"""stability/core/metric_names.py names exactly what a training run stores."""
from types import SimpleNamespace

import pytest

from stability.core import metric_names
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.tasks.base import HIGHER_IS_BETTER, Task
from stability.execution.lifecycle import train_run

NAMES = {value for key, value in vars(metric_names).items()
         if key.isupper() and isinstance(value, str) and "/" in value and not value.endswith("/")}


def stored_names(store, cell, options=None):
    """Scalar and series names a tiny run of ``cell`` on the adding task stores."""
    config = RunConfig(cell=CellConfig(cell, 8, options or {}), task=TaskConfig("adding", {"seq_len": 12}),
                       train=TrainConfig(steps=20, batch_size=16, log_every=5, eval_every=10, probe_every=10,
                                         eval_examples=32, probe_examples=8))
    run_id = store.create_run(config.to_dict())
    assert train_run(config, store, run_id).status == "completed"
    scalars = set(store.metrics(run_id)["name"])
    return scalars, {name for name in NAMES if len(store.series(run_id, name))}, store.record(run_id, latest=False).metric


def test_every_defined_name_is_one_a_run_stores(store):
    scalars, series, metric = stored_names(store, "sgornn")
    penalised, _, _ = stored_names(store, "kru", {"penalty_strength": 0.1})  # the one name a penalty adds
    _, deep, _ = stored_names(store, "mlp", {"layers": 3})  # the one series a cell of layers adds
    assert deep == {metric_names.H_T_NORM, metric_names.SPECTRUM, metric_names.LAYER_NORM}
    watched = {metric_names.H_T_NORM_TRAIN}  # stored by stability.watch only (tests/test_watch.py)
    assert NAMES - watched <= scalars | series | penalised | deep
    assert series == {metric_names.H_T_NORM, metric_names.SPECTRUM}
    assert not series & scalars
    for split in ("train", "val", "test", "gap"):
        assert metric_names.split_name(split, metric) in scalars
    finals = {name for name in scalars if metric_names.is_final(name)}
    assert finals == {name for name in scalars if name.split("/")[0] in ("val", "test")}


@pytest.mark.parametrize("metric", sorted(HIGHER_IS_BETTER))
def test_the_loss_metrics_are_those_a_task_reports_as_its_mean_loss(metric):
    """A metric is the loss itself where the task turns a mean loss into that metric unchanged
    (perplexity = exp, bits per character = / ln 2, accuracy: not a function of the loss)."""
    task = SimpleNamespace(metric=metric)
    for loss in (0.7, 2.5):
        assert metric_names.is_loss_metric(metric) is (Task.metric_from_loss(task, loss) == loss)


def test_the_margin_is_drawn_on_a_linear_axis_wherever_a_metric_picks_its_own_axis():
    """One log-axis rule (metric_names.is_log_metric): a preset without a layout of its own used to draw
    sv/margin on a log axis (its ``grad/``, ``sv/`` prefix test), the Sweep page's curves on a linear one."""
    from stability.presets.layout import default_layout

    logged = {panel.metric: panel.log for panel in default_layout(["sv/margin", "sv/min", "grad/h0_norm",
                                                                   "val/loss"]).panels}
    assert logged == {"sv/margin": False, "sv/min": True, "grad/h0_norm": True, "val/loss": False}
    assert not metric_names.is_log_metric("sv/margin/lstm.l0.f")
    from stability.charts import curves_on_log  # the Sweep page's curves over seeds

    assert not curves_on_log("sv/margin", True) and curves_on_log("sv/min", False)
    assert curves_on_log("val/loss", True) and not curves_on_log("val/loss", False) and not curves_on_log("gap/loss", True)
