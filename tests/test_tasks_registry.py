"""The registry: names, options, errors, and the contract every generated task keeps."""

import inspect
import json

import pytest
import torch

from stability import tasks
from stability.tasks import HIGHER_IS_BETTER, available, build, describe

SYNTHETIC = ["adding", "adding_ternary", "copy"]


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("STABILITY_OFFLINE", "1")
    monkeypatch.setenv("STABILITY_DATA", str(tmp_path / "data"))


def test_available_lists_every_task_of_the_issue():
    assert available() == [
        "adding",
        "adding_ternary",
        "copy",
        "mnist",
        "permuted_mnist",
        "mnist_rows",
        "har2",
        "ptb_word",
        "ptb_char",
        "ucr",
    ]


@pytest.mark.parametrize("name", available())
def test_describe_needs_no_data(name):
    info = describe(name)
    assert info["name"] == name
    assert info["metric"] in HIGHER_IS_BETTER
    assert info["target_mode"] in ("last", "every")
    assert len(info["description"]) > 200 and "\n" not in info["description"]
    assert "§" in info["paper"] or "App." in info["paper"]
    assert "seed" not in info["options"]


def test_unknown_task_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown task 'addition'; valid tasks: adding, adding_ternary"):
        build("addition")


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown option length for task 'adding'; valid options: seq_len, train_size"):
        build("adding", length=10)


def test_missing_required_option_is_named():
    with pytest.raises(ValueError, match="needs the option dataset"):
        build("ucr")
    assert tasks.options("ucr")["dataset"] is inspect.Parameter.empty
    assert describe("ucr")["required_options"] == ["dataset"] and describe("adding")["required_options"] == []
    json.dumps(describe("ucr"))  # the CLI can print it


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("adding", {"seq_len": 1}, "seq_len must be an integer >= 2"),
        ("adding", {"seq_len": 2.5}, "seq_len must be an integer"),
        ("adding", {"train_size": 0}, "train_size must be an integer >= 1"),
        ("copy", {"seq_len": 0}, r"seq_len \(the time lag T\) must be an integer >= 1"),
        ("adding_ternary", {"val_size": True}, "val_size must be an integer"),
    ],
)
def test_bad_option_values_say_what_was_expected(name, options, message):
    with pytest.raises(ValueError, match=message):
        build(name, **options)


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        build("adding", seed=seed)


def test_bad_split_and_batch_size():
    task = build("adding", seq_len=5)
    with pytest.raises(ValueError, match="valid splits: train, val, test"):
        next(task.batches("validation", 4))
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        next(task.batches("train", 0))


@pytest.mark.parametrize("name", SYNTHETIC)
def test_synthetic_task_contract(name):
    task = build(name, seed=0, seq_len=16, val_size=10, test_size=10)
    assert task.name == name and task.stateful is False
    assert isinstance(task.baseline, float) and task.baseline_label
    for split in ("train", "val", "test"):
        x, y = next(task.batches(split, 5))
        assert x.dtype == torch.float32 and x.shape == (5, task.seq_len, task.input_size)
        outputs = torch.randn(5, task.seq_len, task.output_size, requires_grad=True)
        pred = outputs[:, -1] if task.target_mode == "last" else outputs
        loss = task.loss(pred, y)
        assert loss.shape == () and torch.isfinite(loss)
        loss.backward()
        assert outputs.grad is not None
        assert isinstance(task.score(pred, y), float)
        if task.metric == "mse":
            assert y.dtype == torch.float32 and y.shape == (5, 1)
        elif task.target_mode == "last":
            assert y.dtype == torch.int64 and y.shape == (5,)
        else:
            assert y.dtype == torch.int64 and y.shape == (5, task.seq_len)
