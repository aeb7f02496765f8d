"""stability/runs/records.py and RunStore.record/records/active_runs: a stored run as one typed value."""
import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from store_files import raw_connection, statements_while

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.runs.records import RunRecord
from stability.runs.status import STATUSES, TERMINAL
from stability.runs.store import RunNotFound, RunStore
from statuses import set_status

CONFIG = RunConfig(cell=CellConfig("lstm", 12, {}), task=TaskConfig("copy", {"seq_len": 30}),
                   train=TrainConfig(steps=300, lr=2e-3, seed=4), name="copy lstm")


@pytest.fixture
def store(store_location):
    """A fresh store on each backend (conftest.store_location: SQLite file, PostgreSQL database)."""
    with RunStore(store_location) as store:
        yield store


def test_a_record_carries_the_typed_config_the_columns_and_the_latest_values(store):
    run_id = store.create_run(CONFIG.to_dict())
    set_status(store, run_id, "running")
    store.update_run(run_id, device="cpu", pid=77, total_params=1000, recurrent_params=144, metric="cross_entropy",
                     baseline=0.3, baseline_label="memoryless", resumes=1)
    store.flush(run_id, [(10, 1.0, "val/loss", 0.9), (20, 2.0, "val/loss", 0.5), (20, 2.0, "sv/max", math.inf)],
                heartbeat_step=20)
    record = store.record(run_id)
    with raw_connection(store) as conn:  # the run's row as stored
        row = dict(conn.execute(text("SELECT * FROM runs WHERE id = :id"), {"id": run_id}).mappings().one())
    assert isinstance(record, RunRecord) and record.config == CONFIG and record.config_problem is None
    assert dict(record.raw_config) == json.loads(row["config"]) == CONFIG.to_dict()
    for column in ("name", "status", "created_at", "started_at", "finished_at", "heartbeat", "device", "pid",
                   "total_params", "recurrent_params", "metric", "baseline", "baseline_label", "step", "error",
                   "resumes", "stop_requested", "sweep_id", "trial", "host"):
        assert getattr(record, column) == row[column], column
    assert store.record(run_id, latest=False) == dataclasses.replace(record, latest={})  # the same run, no latest
    assert (record.sweep_id, record.trial, dict(record.params), record.host) == (None, None, {}, None)
    assert (record.id, record.cell, record.task, record.active) == (run_id, "lstm", "copy", True)
    assert record.total_steps == 300 and record.progress == pytest.approx(20 / 300)  # budget from the config
    assert dict(record.latest) == store.latest(run_id) == {"val/loss": 0.5, "sv/max": math.inf}
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.status = "completed"
    with pytest.raises(TypeError):
        record.latest["val/loss"] = 0.0  # a read-only view: the record cannot drift from the store


def test_a_stored_config_that_no_longer_parses_keeps_the_run_readable(store):
    stored = {**CONFIG.to_dict(), "cell": {"name": "spectral", "hidden_size": 8, "options": {}, "m3": 2}}
    run_id = store.create_run(stored)
    store.update_run(run_id, total_steps=50, step=25)
    record = store.record(run_id)
    assert record.config is None and dict(record.raw_config) == stored
    assert "unknown cell field(s) m3" in record.config_problem and "\n" not in record.config_problem
    assert (record.cell, record.task, record.progress) == ("spectral", "copy", 0.5)
    assert store.record(run_id, latest=False).raw_config == stored  # the stored dict is unchanged


def test_a_config_that_is_not_even_json_is_one_line_too(store):
    run_id = store.create_run(CONFIG.to_dict())
    with raw_connection(store) as conn:
        conn.execute(text("UPDATE runs SET config = '{\"cell\": ' WHERE id = :id"), {"id": run_id})
    record = store.record(run_id)
    assert record.config is None and dict(record.raw_config) == {} and record.cell is None
    assert record.config_problem.startswith("the stored config is not JSON") and "\n" not in record.config_problem


def test_records_filter_by_status_newest_first_and_match_one_record_each(store):
    ids = {}
    for status in STATUSES:
        ids[status] = store.create_run(CONFIG.to_dict(), name=status)
        set_status(store, ids[status], status)
        store.flush(ids[status], [(1, 0.0, "train/loss", float(ids[status]))])
    every = store.records()
    assert [record.id for record in every] == sorted(ids.values(), reverse=True)
    assert every == [store.record(record.id) for record in every]
    for statuses in (["completed"], ["failed", "queued"], TERMINAL):
        assert [r.id for r in store.records(statuses)] == [r.id for r in every if r.status in statuses]
    assert [r.id for r in store.records("running")] == [ids["running"]]
    assert store.records([]) == []
    with pytest.raises(ValueError, match="unknown run status 'done'; valid: queued"):
        store.records(["done"])


def test_a_trial_record_carries_its_sweep_and_records_filter_by_sweep(store):
    first, second = store.create_sweep({"seeds": 2}), store.create_sweep({"seeds": 1})
    plain = store.create_run(CONFIG.to_dict())
    trials = {}
    for number, (sweep_id, lr) in enumerate([(first, 0.1), (second, 0.1), (first, 0.01), (first, 0.001)]):
        trials[number] = store.create_run(CONFIG.to_dict(), sweep_id=sweep_id, trial=number, params={"train.lr": lr})
    store.update_run(trials[2], host="gpu-2")
    set_status(store, trials[3], "pruned")
    record = store.record(trials[2])
    assert (record.sweep_id, record.trial, dict(record.params), record.host) == (first, 2, {"train.lr": 0.01}, "gpu-2")
    with pytest.raises(TypeError):
        record.params["train.lr"] = 1.0
    assert [r.id for r in store.records(sweep_id=first)] == [trials[3], trials[2], trials[0]]
    assert [r.id for r in store.records(sweep_id=second)] == [trials[1]]
    assert [r.id for r in store.records(["queued"], sweep_id=first)] == [trials[2], trials[0]]
    assert [r.id for r in store.records("pruned", sweep_id=first)] == [trials[3]]
    assert store.records(sweep_id=99) == [] and store.records([], sweep_id=first) == []
    assert plain not in [r.id for r in store.records(sweep_id=first)]


def test_params_that_are_not_a_json_object_read_as_empty(store):
    run_id = store.create_run(CONFIG.to_dict(), params={"lr": 1})
    for stored in ("[1, 2]", "{broken"):
        with raw_connection(store) as conn:
            conn.execute(text("UPDATE runs SET params = :params WHERE id = :id"), {"params": stored, "id": run_id})
        assert dict(store.record(run_id).params) == {} == store.record(run_id, latest=False).params


def test_active_runs_are_the_queued_and_running_ones_oldest_first(store):
    statuses = ["running", "completed", "queued", "failed", "running", "interrupted"]
    for status in statuses:
        set_status(store, store.create_run(CONFIG.to_dict()), status)
    expected = sorted(record.id for record in store.records(latest=False) if record.status in ("queued", "running"))
    active = store.active_runs()
    assert [record.id for record in active] == expected == [1, 3, 5]
    assert all(record.active for record in active)
    assert not any(record.active for record in store.records(TERMINAL))


def test_record_of_a_missing_run_is_one_line(store):
    with pytest.raises(RunNotFound) as info:
        store.record(5)
    assert str(info.value) == f"no run with id 5 in {store.location}"


def test_records_read_the_store_in_two_queries_however_many_runs(store):
    for _ in range(15):
        run_id = store.create_run(CONFIG.to_dict())
        store.flush(run_id, [(step, time.time(), "val/loss", step) for step in range(4)])
    records = []
    sent = statements_while(store, lambda: records.extend(store.records()))
    assert len(records) == 15 and all(record.latest == {"val/loss": 3.0} for record in records)
    assert len(sent) == 2


def test_the_store_module_alone_does_not_import_torch():
    code = "import sys, stability.runs.store, stability.runs.records, stability.core.metric_names; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parent.parent).stdout.strip() == "False"



# -------------------------------------------------------------------------- sweeps
def test_a_sweep_record_types_its_columns_parses_its_spec_and_counts_its_runs(store):
    from collections import Counter

    import numpy as np

    from stability.runs.records import SweepRecord
    from stability.sweeps.spec import SweepSpec, build_spec

    spec = build_spec(CONFIG, ["train.lr=0.1,0.01"], seeds=2)
    sweep_id = store.create_sweep(spec.to_dict(), name="lr check")
    empty = store.sweep(sweep_id)  # a sweep with no run yet
    assert isinstance(empty, SweepRecord) and type(empty.id) is int and empty.id == sweep_id
    assert (empty.name, empty.study, empty.status) == ("lr check", f"stability-sweep-{sweep_id}", "running")
    assert type(empty.created_at) is float and abs(empty.created_at - time.time()) < 60
    assert (empty.finished_at, empty.workers, empty.stop_requested, dict(empty.counts), empty.runs) == (
        None, None, False, {}, 0)
    assert dict(empty.spec) == spec.to_dict() and SweepSpec.from_dict(empty.spec).to_dict() == spec.to_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        empty.status = "stopped"
    with pytest.raises(TypeError):
        empty.spec["seeds"] = 3  # read-only, as a RunRecord's raw_config

    for trial, status in enumerate(["completed", "failed", "queued", "completed", "pruned"]):
        run_id = store.create_run(CONFIG.to_dict(), sweep_id=sweep_id, trial=trial, params={"train.lr": 0.1})
        set_status(store, run_id, status)
    store.create_run(CONFIG.to_dict())  # no sweep's: counted nowhere
    store.update_sweep(sweep_id, status="stopped", workers=np.int64(3), stop_requested=True, finished_at=5)
    sweep = store.sweep(sweep_id)
    assert sweep.counts == Counter(record.status for record in store.records(sweep_id=sweep_id))
    assert dict(sweep.counts) == {"completed": 2, "failed": 1, "queued": 1, "pruned": 1} and sweep.runs == 5
    assert (sweep.status, sweep.workers, sweep.stop_requested, sweep.finished_at) == ("stopped", 3, True, 5.0)
    assert type(sweep.workers) is int and type(sweep.stop_requested) is bool and type(sweep.finished_at) is float
    other = store.create_sweep(spec.to_dict())
    assert store.sweeps() == [store.sweep(other), sweep]  # newest first, each as sweep() reads it


@pytest.mark.parametrize("sweep_id", [2, 0, -1, "abc", 2**70])
def test_an_unknown_sweep_record_is_the_stores_one_line(store, sweep_id):
    from stability.runs.store import SweepNotFound

    store.create_sweep({"base": CONFIG.to_dict(), "vary": [], "seeds": 1, "sampler": "grid"})
    with pytest.raises(SweepNotFound) as info:
        store.sweep(sweep_id)
    assert str(info.value) == f"no sweep with id {sweep_id} in {store.location}" and "\n" not in str(info.value)


def test_records_without_latest_values_are_one_query_and_a_limit_keeps_the_newest(store):
    ids = [store.create_run(CONFIG.to_dict()) for _ in range(4)]
    for run_id in ids:
        store.flush(run_id, [(0, 1.0, "train/loss", float(run_id))], heartbeat_step=0)
    sent = statements_while(store, lambda: store.records(latest=False, limit=2))
    cheap = store.records(latest=False, limit=2)
    assert [record.id for record in cheap] == ids[:1:-1] and all(record.latest == {} for record in cheap)
    assert len([statement for statement in sent if statement.lstrip().upper().startswith("SELECT")]) == 1
    full = store.records(limit=2)
    assert [dict(record.latest) for record in full] == [{"train/loss": float(ids[3])}, {"train/loss": float(ids[2])}]
    assert [dataclasses.replace(record, latest={}) for record in full] == cheap
    assert store.record(ids[0], latest=False) == dataclasses.replace(store.record(ids[0]), latest={})
