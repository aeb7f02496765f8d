"""stability/runs/table.py: one summary row per stored run."""
import math
from datetime import datetime

import pandas as pd
import pytest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.runs.table import SUMMARY_COLUMNS, run_table
from stability.runs.store import RunStore

from store_files import statements_while
from statuses import set_status


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        yield store


def create(store, cell="rnn", task=None, **train):
    task = task or TaskConfig("adding", {"seq_len": 70})
    return store.create_run(RunConfig(cell=CellConfig(cell, 24), task=task, train=TrainConfig(**train)).to_dict(),
                            name=f"{cell} run")


def test_empty_store_has_the_columns_and_no_rows(store):
    table = run_table(store)
    assert table.empty and list(table.columns) == SUMMARY_COLUMNS


def test_config_summary_progress_and_final_metrics(store):
    first = create(store, steps=400, lr=3e-3, seed=7)
    store.update_run(first, step=100, total_steps=400, metric="accuracy", baseline=0.5, baseline_label="majority")
    set_status(store, first, "failed", error="boom")
    store.log(first, [(50, 1.0, "val/accuracy", 0.6), (100, 2.0, "val/accuracy", 0.7), (100, 2.0, "test/loss", 0.4),
                      (100, 2.0, "val/loss", 0.5), (100, 2.0, "train/loss", 0.3), (100, 2.0, "test/accuracy", 0.65)])
    second = create(store, cell="lstm", task=TaskConfig("mnist", {}))
    table = run_table(store).set_index("id")
    assert list(table.index) == [second, first]  # newest first, like RunStore.records()
    row = table.loc[first]
    assert (row["name"], row["status"], row["cell"], row["hidden"], row["task"]) == ("rnn run", "failed", "rnn", 24,
                                                                                     "adding")
    assert (row["seq_len"], row["steps"], row["lr"], row["seed"]) == (70, 400, 3e-3, 7)
    assert (row["step"], row["total_steps"], row["progress"]) == (100, 400, 0.25)
    assert (row["error"], row["metric"], row["baseline"], row["baseline_label"]) == ("boom", "accuracy", 0.5,
                                                                                      "majority")
    assert isinstance(row["created"], datetime)
    assert list(table.columns[len(SUMMARY_COLUMNS) - 1:]) == ["val/loss", "val/accuracy", "test/loss",
                                                              "test/accuracy"]
    assert row["val/accuracy"] == 0.7  # the last value, not the first
    assert "train/loss" not in table.columns
    fresh = table.loc[second]
    assert fresh["status"] == "queued" and fresh["progress"] == 0.0 and fresh["total_steps"] == 2000
    assert pd.isna(fresh["seq_len"])  # mnist has no free length
    assert math.isnan(fresh["val/accuracy"]) and math.isnan(fresh["baseline"])


def test_the_number_of_queries_does_not_grow_with_the_number_of_runs(store):
    counts = []
    for runs in (2, 12):
        while len(store.records(latest=False)) < runs:
            run_id = create(store)
            store.flush(run_id, [(step, 0.0, name, run_id + step) for step in range(3)
                                 for name in ("val/loss", "test/loss", "train/loss")], heartbeat_step=2)
        counts.append(len(statements_while(store, lambda: run_table(store))))
    assert counts[0] == counts[1] <= 2


def test_final_columns_equal_the_last_row_of_each_run_read_directly(store):
    ids = [create(store) for _ in range(4)]
    for position, run_id in enumerate(ids):
        steps = range(0, 10 * (position + 1), 5)
        store.flush(run_id, [(step, 0.0, "val/loss", (step + 1) / (run_id + 1)) for step in steps])
        if position % 2:
            store.flush(run_id, [(3, 0.0, "test/accuracy", 0.25 * position)])
    table = run_table(store).set_index("id")
    for run_id in ids:
        rows = store.metrics(run_id)
        for name in ("val/loss", "test/accuracy"):
            mine = rows[rows["name"] == name]
            expected = mine.loc[mine["step"].idxmax(), "value"] if len(mine) else math.nan
            assert table.loc[run_id, name] == pytest.approx(expected, nan_ok=True)


def test_a_run_whose_config_no_longer_parses_is_listed_with_the_reason(store):
    good = create(store)
    broken = store.create_run({"cell": {"name": "rnn", "hidden_size": 8, "colour": "red"},
                               "task": {"name": "adding"}}, name="old")
    table = run_table(store).set_index("id")
    row = table.loc[broken]
    assert (row["name"], row["cell"], row["task"], row["status"]) == ("old", "rnn", "adding", "queued")
    assert "colour" in row["error"] and "\n" not in row["error"]
    assert pd.isna(row["hidden"]) and pd.isna(row["steps"]) and row["progress"] == 0.0
    assert table.loc[good, "error"] == "" and table.loc[good, "hidden"] == 24
