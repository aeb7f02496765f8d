"""`stability resume ID --no-cuda-graphs` / `--cuda-graphs`: a run continues with its execution choice switched
(``train.cuda_graphs`` is execution only: stability.training.checkpoints.EXECUTION_ONLY), its stored config
updated, its rows those of an uninterrupted run; a checkpoint of another config is still refused."""
from __future__ import annotations

import contextlib
import io
import json
import time
from dataclasses import replace

import pandas as pd
import pytest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.execution.lifecycle import train_run
from stability.training.checkpoints import ResumeError, read_for_resume, save_checkpoint

from stopping import StopAt

# the readings that follow from the seed alone (no wall time)
DETERMINISTIC = ["train/loss", "train/mse", "train/lr", "val/loss", "gap/loss", "grad/total_norm", "sv/max",
                 "grad/h0_norm_train", "test/loss"]


def resumable(**train) -> RunConfig:
    """A run with state to restore exactly: noisy h0 (torch's RNG every step), a fixed training set
    reshuffled every epoch, a plateau schedule and Adam (as tests/test_train.py's)."""
    fields = dict(steps=40, log_every=4, eval_every=8, probe_every=12, lr_schedule="plateau", lr_gamma=0.5,
                  batch_size=16, eval_examples=64, probe_examples=8)
    fields.update(train)
    return RunConfig(cell=CellConfig("rnn", 8, {"h0": "noisy", "h0_noise_std": 0.3}),
                     task=TaskConfig("adding", {"seq_len": 10, "train_size": 48}), train=TrainConfig(**fields))


def rows_by_step(store, run_id) -> pd.Series:
    frame = store.metrics(run_id, DETERMINISTIC)
    assert not frame.duplicated(["step", "name"]).any(), "a step was logged twice"
    return frame.set_index(["name", "step"])["value"].sort_index()


def cli(args: list[str], monkeypatch) -> tuple[str, str, int]:
    """``stability.cli.main.main(args)`` here (the store is $STABILITY_STORE, the conftest's ``store``), with the
    torch threads of this process kept, so a run resumed here computes as the one trained here before."""
    from stability.cli import runs
    from stability.cli.main import main

    monkeypatch.setattr(runs, "_foreground_threads", lambda: None)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exit_:
            code = exit_.code
    return out.getvalue(), err.getvalue(), code


def stopped_run(store, config: RunConfig, step: int = 18) -> int:
    run_id = store.create_run(config.to_dict())
    assert train_run(config, store, run_id, hooks=[StopAt(step)]).status == "stopped"
    return run_id


def stored_train(store, run_id) -> dict:
    return dict(store.record(run_id, latest=False).raw_config["train"])


def test_resume_with_no_cuda_graphs_continues_exactly_and_the_stored_config_says_so(store, monkeypatch):
    config = resumable()  # cuda_graphs on, the default
    assert config.train.cuda_graphs is True
    whole = store.create_run(config.to_dict())
    assert train_run(config, store, whole).status == "completed"
    run_id = stopped_run(store, config)
    assert stored_train(store, run_id)["cuda_graphs"] is True

    out, err, code = cli(["resume", str(run_id), "--no-cuda-graphs", "--json"], monkeypatch)
    assert code == 0, err
    outcome = json.loads(out.splitlines()[-1])
    assert outcome["run_id"] == run_id and outcome["status"] == "completed", outcome
    record = store.record(run_id, latest=False)
    assert record.resumes == 1 and record.status == "completed"
    assert stored_train(store, run_id)["cuda_graphs"] is False  # how it trains from now on
    assert record.config.train == replace(config.train, cuda_graphs=False)  # nothing else changed
    # from its checkpoint (step 16), not from step 0: the rows of an uninterrupted run, each step once
    pd.testing.assert_series_equal(rows_by_step(store, run_id), rows_by_step(store, whole))


def test_resume_with_cuda_graphs_turns_it_back_on(store, monkeypatch):
    config = resumable(steps=12, log_every=2, eval_every=4, probe_every=6, cuda_graphs=False)
    whole = store.create_run(config.to_dict())
    assert train_run(config, store, whole).status == "completed"
    run_id = stopped_run(store, config, step=6)
    out, err, code = cli(["resume", str(run_id), "--cuda-graphs", "--json"], monkeypatch)
    assert code == 0 and json.loads(out.splitlines()[-1])["status"] == "completed", err
    assert stored_train(store, run_id)["cuda_graphs"] is True
    pd.testing.assert_series_equal(rows_by_step(store, run_id), rows_by_step(store, whole))


def test_a_checkpoint_of_another_config_is_still_refused_in_one_line_and_nothing_changes(store, monkeypatch):
    config = resumable(steps=12, log_every=2, eval_every=4, probe_every=6)
    run_id = stopped_run(store, config, step=6)
    other = config.to_dict()
    other["train"]["lr"] = 0.5  # the stored config no longer the checkpoint's
    store.update_run(run_id, config=other)
    for switch in ([], ["--no-cuda-graphs"]):
        out, err, code = cli(["resume", str(run_id), *switch], monkeypatch)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"run {run_id}'s checkpoint belongs to a different config" in err
        record = store.record(run_id, latest=False)
        assert (record.status, record.resumes) == ("stopped", 0)
        assert dict(record.raw_config) == other  # the switch put back: the record as it was
        assert stored_train(store, run_id)["cuda_graphs"] is True


def test_the_checkpoint_match_ignores_cuda_graphs_alone(tmp_path):
    config = resumable().to_dict()
    path = tmp_path / "run.pt"
    save_checkpoint({"config": config, "step": 3}, path)
    for value in (True, False):
        read_for_resume(path, "run 1", {**config, "train": {**config["train"], "cuda_graphs": value}})
    missing = {**config, "train": {k: v for k, v in config["train"].items() if k != "cuda_graphs"}}
    read_for_resume(path, "run 1", missing)  # a config written before the field
    for field, value in (("device", "cpu"), ("dtype", "float64"), ("deterministic", True), ("lr", 0.5),
                         ("seed", 1)):
        with pytest.raises(ResumeError, match="belongs to a different config"):
            read_for_resume(path, "run 1", {**config, "train": {**config["train"], field: value,
                                                               "cuda_graphs": False}})


def test_a_background_resume_with_no_cuda_graphs_hands_the_worker_the_switched_config(store, monkeypatch):
    config = resumable(steps=12, log_every=2, eval_every=4, probe_every=6)
    run_id = stopped_run(store, config, step=6)
    out, err, code = cli(["resume", str(run_id), "--no-cuda-graphs", "--background"], monkeypatch)
    assert code == 0 and out.strip() == str(run_id), err
    assert stored_train(store, run_id)["cuda_graphs"] is False  # written before the worker reads it
    deadline = time.monotonic() + 120
    while (record := store.record(run_id, latest=False)).status not in ("completed", "failed", "diverged"):
        assert time.monotonic() < deadline, f"the worker did not finish: {record.status}"
        time.sleep(0.2)
    assert (record.status, record.error, record.resumes) == ("completed", None, 1)
    assert set(store.metrics(run_id, ["train/loss"]).step) == {0, 2, 4, 6, 8, 10, 12}


def test_the_python_api_s_resume_with_cuda_graphs_switched_writes_the_switch_to_the_record(store):
    config = resumable()
    whole = store.create_run(config.to_dict())
    assert train_run(config, store, whole).status == "completed"
    run_id = stopped_run(store, config)
    eager = replace(config, train=replace(config.train, cuda_graphs=False))
    assert train_run(eager, store, run_id, resume=True).status == "completed"
    train = stored_train(store, run_id)
    assert train["cuda_graphs"] is False
    assert {**train, "cuda_graphs": True} == stored_train(store, whole)  # nothing else changed
    pd.testing.assert_series_equal(rows_by_step(store, run_id), rows_by_step(store, whole))
    # a resume refused (the run completed, its checkpoint removed) changes nothing
    with pytest.raises(ResumeError, match="no checkpoint"):
        train_run(config, store, run_id, resume=True)
    assert stored_train(store, run_id)["cuda_graphs"] is False
