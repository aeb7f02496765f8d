"""stability/run_table.py: one summary row per stored run."""
import math
from datetime import datetime

import pandas as pd
import pytest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.run_table import SUMMARY_COLUMNS, run_table
from stability.store import RunStore


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
    store.set_status(first, "failed", error="boom")
    store.log(first, [(50, 1.0, "val/accuracy", 0.6), (100, 2.0, "val/accuracy", 0.7), (100, 2.0, "test/loss", 0.4),
                      (100, 2.0, "val/loss", 0.5), (100, 2.0, "train/loss", 0.3), (100, 2.0, "test/accuracy", 0.65)])
    second = create(store, cell="lstm", task=TaskConfig("mnist", {}))
    table = run_table(store).set_index("id")
    assert list(table.index) == [second, first]  # newest first, like RunStore.runs()
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
