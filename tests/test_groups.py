"""Seed-group statistics (stability/analysis/groups.py) against independent pandas computations over random frames."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from stability import cells
from stability.analysis import groups
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.config.fields import field_value

STATUSES = ["completed", "completed", "completed", "diverged", "pruned", "stopped", "failed", "running",
            "queued", "interrupted"]


def random_results(seed, runs=60):
    """A sweep's results frame: cell x lr (x an optional clip that may be None), random statuses and
    objectives (NaN for diverged runs and now and then for others)."""
    rng = np.random.default_rng(seed)
    status = rng.choice(STATUSES, size=runs)
    objective = rng.lognormal(-2, 1, size=runs)
    objective[status == "diverged"] = np.nan
    objective[rng.random(runs) < 0.1] = np.nan
    objective[rng.random(runs) < 0.05] = np.inf
    clip = rng.choice(np.array([None, 1.0], dtype=object), size=runs)
    return pd.DataFrame({"run_id": np.arange(1, runs + 1, dtype="int64"), "status": status,
                         "objective": objective, "cell": rng.choice(["rnn", "lstm", "spectral"], size=runs),
                         "train.lr": rng.choice([1e-4, 1e-3, 1e-2], size=runs), "train.clip_grad_norm": clip})


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_setting_table_matches_a_pandas_groupby(seed, direction):
    results = random_results(seed)
    fields = ["cell", "train.lr", "train.clip_grad_norm"]
    table = groups.setting_table(results, fields, direction)

    keyed = results.assign(clip=results["train.clip_grad_norm"].map(lambda v: "none" if v is None else str(v)))
    keys = ["cell", "train.lr", "clip"]
    finite = keyed[(keyed["status"] == "completed") & np.isfinite(keyed["objective"])]
    stats = finite.groupby(keys)["objective"].agg(["mean", "min", "max", "std", "size"])
    counts = keyed.groupby(keys)["status"].value_counts().unstack(fill_value=0)
    seeds = keyed.groupby(keys).size()
    assert len(table) == len(seeds)
    for row in table.itertuples(index=False):
        key = (row.cell, row._1, "none" if row._2 is None else str(row._2))
        assert row.seeds == seeds[key]
        got = counts.loc[key]
        assert row.completed == got.get("completed", 0) and row.diverged == got.get("diverged", 0)
        assert row.pruned == got.get("pruned", 0) and row.stopped == got.get("stopped", 0)
        assert row.failed == got.get("failed", 0) + got.get("interrupted", 0)
        assert row.running == got.get("running", 0) + got.get("queued", 0)
        if key in stats.index:
            expected = stats.loc[key]
            assert row.n == expected["size"]
            assert row.mean == pytest.approx(expected["mean"]) and row.min == expected["min"]
            assert row.max == expected["max"]
            assert (np.isnan(row.std) and expected["size"] < 2) or row.std == pytest.approx(expected["std"])
            best_value = expected["min"] if direction == "minimize" else expected["max"]
            assert results.loc[results["run_id"] == row.best_run, "objective"].item() == best_value
        else:
            assert row.n == 0 and np.isnan(row.mean) and pd.isna(row.best_run) and pd.isna(row.rank)
    means = table["mean"].dropna()
    expected_rank = means.rank(method="min", ascending=direction == "minimize")
    assert table["rank"].dropna().astype(int).tolist() == expected_rank.astype(int).tolist()
    assert table["rank"].dropna().is_monotonic_increasing  # best first, settings without a mean last
    assert table["rank"].isna().sum() == table["mean"].isna().sum()


def test_setting_table_labels_and_shape():
    results = pd.DataFrame({"run_id": [1, 2, 3], "status": ["completed"] * 3, "objective": [0.5, 0.25, 1.0],
                            "cell": ["rnn", "rnn", "lstm"], "train.lr": [1e-3, 1e-3, 1e-2]})
    table = groups.setting_table(results, ["cell", "train.lr"])
    assert table["setting"].tolist() == ["cell=rnn lr=0.001", "cell=lstm lr=0.01"]
    assert table["best_run"].tolist() == [2, 3] and table["rank"].tolist() == [1, 2]
    given = groups.setting_table(results.assign(setting=["cell=rnn lr=0.001"] * 2 + ["cell=lstm lr=0.01"]), ["cell"])
    assert given["setting"].tolist() == ["cell=rnn", "cell=lstm"]  # the label of the fields grouped by
    whole = groups.setting_table(results, [])
    assert len(whole) == 1 and whole["seeds"].item() == 3 and whole["mean"].item() == pytest.approx(1.75 / 3)
    empty = groups.setting_table(results.iloc[:0], ["cell"])
    assert empty.empty and "mean" in empty and "rank" in empty


def test_setting_table_refuses_a_bad_direction_or_missing_columns():
    results = random_results(0)
    with pytest.raises(ValueError, match="direction"):
        groups.setting_table(results, ["cell"], "down")
    with pytest.raises(ValueError, match="task.seq_len"):
        groups.setting_table(results, ["task.seq_len"])


def random_metrics(seed, log):
    """Long metric rows of 7 runs with different step sets, NaNs, a duplicated step, and (log) zeros."""
    rng = np.random.default_rng(seed)
    rows = []
    for run_id in range(1, 8):
        steps = np.sort(rng.choice(np.arange(0, 200, 10), size=rng.integers(3, 15), replace=False))
        values = 10.0 ** rng.uniform(-20, 2, size=len(steps)) if log else rng.normal(0, 3, size=len(steps))
        values[rng.random(len(steps)) < 0.15] = np.nan
        if log:
            values[rng.random(len(steps)) < 0.15] = 0.0
        rows += [(run_id, int(step), 1000.0 + step, "m", float(value)) for step, value in zip(steps, values)]
        rows.append((run_id, int(steps[-1]), 2000.0, "m", 0.5))  # a resumed run wrote its last step again
        rows += [(run_id, int(step), 0.0, "other", 99.0) for step in steps]
    return pd.DataFrame(rows, columns=["run_id", "step", "wall_time", "name", "value"])


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("log", [False, True])
def test_group_curves_match_a_pandas_groupby(seed, log):
    metrics = random_metrics(seed, log)
    mapping = {1: "a", 2: "a", 3: "b", 4: "b", 5: "b", 6: "c"}  # run 7 is in no group
    curves = groups.group_curves(metrics, mapping, "m", log=log)

    rows = metrics[metrics["name"] == "m"].groupby(["run_id", "step"]).last().reset_index()
    rows = rows[rows["run_id"].isin(list(mapping))].dropna(subset=["value"])
    rows["group"] = rows["run_id"].map(mapping)
    grouped = rows.groupby(["group", "step"])["value"]
    expected = pd.DataFrame({"min": grouped.min(), "max": grouped.max(), "n": grouped.size()})
    if log:
        positive = rows[rows["value"] > 0]
        expected["mean"] = 10.0 ** positive.groupby(["group", "step"])["value"].apply(lambda v: np.log10(v).mean())
        expected["zeros"] = rows.assign(z=rows["value"] <= 0).groupby(["group", "step"])["z"].sum()
        expected["mean"] = expected["mean"].fillna(0.0)  # every value 0: the mean is 0
    else:
        expected["mean"] = grouped.mean()
        expected["zeros"] = 0
    got = curves.set_index(["group", "step"])
    assert list(curves.columns) == groups.CURVE_COLUMNS
    assert sorted(got.index) == sorted(expected.index)
    expected = expected.loc[got.index]
    np.testing.assert_allclose(got["mean"], expected["mean"], rtol=1e-9)
    np.testing.assert_array_equal(got["min"], expected["min"])
    np.testing.assert_array_equal(got["max"], expected["max"])
    assert got["n"].tolist() == expected["n"].tolist() and got["zeros"].tolist() == expected["zeros"].tolist()
    assert curves["group"].drop_duplicates().tolist() == [g for g in ["a", "b", "c"] if g in set(curves["group"])]
    for _, group in curves.groupby("group"):
        assert group["step"].is_monotonic_increasing


def test_geometric_mean_keeps_zeros_honest():
    metrics = pd.DataFrame({"run_id": [1, 2, 3, 1, 2], "step": [0, 0, 0, 10, 10], "wall_time": 0.0,
                            "name": "grad/h0_norm", "value": [1e-3, 1e-21, 0.0, 0.0, 0.0]})
    curves = groups.group_curves(metrics, {1: "g", 2: "g", 3: "g"}, "grad/h0_norm")
    first, last = curves.iloc[0], curves.iloc[1]
    assert first["mean"] == pytest.approx(1e-12) and first["min"] == 0.0 and first["zeros"] == 1
    assert first["n"] == 3 and last["mean"] == 0.0 and last["zeros"] == 2
    linear = groups.group_curves(metrics.assign(name="val/loss"), {1: "g", 2: "g", 3: "g"}, "val/loss")
    assert linear["mean"].iloc[0] == pytest.approx((1e-3 + 1e-21) / 3) and linear["zeros"].sum() == 0


def test_which_metrics_are_log():
    assert groups.is_log_metric("grad/h0_norm") and groups.is_log_metric("sv/min")
    assert groups.is_log_metric("sv/max") and not groups.is_log_metric("sv/margin")
    assert not groups.is_log_metric("val/loss")


def test_group_curves_of_nothing_has_the_columns():
    empty = pd.DataFrame(columns=["run_id", "step", "wall_time", "name", "value"])
    assert list(groups.group_curves(empty, {1: "a"}, "m").columns) == groups.CURVE_COLUMNS


def record(run_id, cell="rnn", lr=1e-3, seed=0, name="", seq_len=50, **options):
    config = RunConfig(cell=CellConfig(cell, 16, options), task=TaskConfig("adding", {"seq_len": seq_len}),
                       train=TrainConfig(lr=lr, seed=seed), name=name)
    return SimpleNamespace(id=run_id, raw_config=config.to_dict())


def test_seed_groups_gather_runs_that_differ_only_in_seed_and_name():
    records = [record(1, seed=0, name="a"), record(2, seed=1, name="b"), record(3, lr=1e-2, seed=0),
               record(4, cell="lstm", seed=5), record(5, lr=1e-2, seed=3), record(6, seed=2, seq_len=100)]
    found = groups.seed_groups(reversed(records))  # the store lists newest first
    assert found == {"cell=rnn task.seq_len=50 lr=0.001": [1, 2], "cell=rnn task.seq_len=50 lr=0.01": [3, 5],
                     "cell=lstm task.seq_len=50 lr=0.001": [4], "cell=rnn task.seq_len=100 lr=0.001": [6]}


def test_seed_groups_by_chosen_fields():
    records = [record(1), record(2, lr=1e-2), record(3, cell="lstm"), record(4, seq_len=100)]
    assert groups.seed_groups(records, by=["cell"]) == {"cell=rnn": [1, 2, 4], "cell=lstm": [3]}
    assert groups.seed_groups(records, by=["lr", "task.seq_len"]) == {
        "lr=0.001 task.seq_len=50": [1, 3], "lr=0.01 task.seq_len=50": [2], "lr=0.001 task.seq_len=100": [4]}


def test_one_group_is_named_by_its_cell_and_task():
    assert groups.seed_groups([record(1, seed=0), record(2, seed=1)]) == {"rnn on adding": [1, 2]}


def test_field_value_reads_sweep_paths_from_a_stored_config():
    config = record(1, cell="spectral", lr=0.5, m1=2).raw_config
    assert field_value(config, "cell") == "spectral" and field_value(config, "cell.m1") == 2
    assert field_value(config, "cell.hidden_size") == 16 and field_value(config, "lr") == 0.5
    assert field_value(config, "train.lr") == 0.5 and field_value(config, "task.seq_len") == 50
    assert field_value(config, "task") == "adding" and field_value(config, "cell.nope") is None



def test_an_option_a_stored_config_leaves_out_is_read_as_the_cells_declared_default():
    default = cells.describe("spectral").option("m1").default
    implicit, explicit, other = record(1, cell="spectral"), record(2, cell="spectral", m1=default), \
        record(3, cell="spectral", m1=default + 1)
    assert "m1" not in implicit.raw_config["cell"]["options"]
    assert field_value(implicit.raw_config, "cell.m1") == default
    assert groups.seed_groups([implicit, explicit, other], by=["cell.m1"]) == {
        f"cell.m1={default}": [1, 2], f"cell.m1={default + 1}": [3]}
