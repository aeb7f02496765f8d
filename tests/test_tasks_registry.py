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
    assert info.name == name
    assert info.metric in HIGHER_IS_BETTER
    assert info.target_mode in ("last", "every")
    assert len(info.description) > 200 and "\n" not in info.description
    assert info.summary and "\n" not in info.summary and len(info.summary) < len(info.description)
    assert "§" in info.paper or "App." in info.paper
    assert "seed" not in [option.name for option in info.options]
    assert all(option.help for option in info.options)


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
    assert describe("ucr").required_options == ["dataset"] and describe("adding").required_options == []
    assert describe("ucr").option("dataset").required and describe("ucr").option("dataset").default is None
    assert json.loads(json.dumps(describe("ucr").to_dict()))["options"][0]["name"] == "dataset"


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


# ------------------------------------------------ check: every option value, no data
BAD_VALUES = [
    ("adding", {"seq_len": 0}, "seq_len must be an integer >= 2, got 0"),
    ("adding", {"seq_len": -10}, "seq_len must be an integer >= 2, got -10"),
    ("adding", {"seq_len": "abc"}, "got 'abc'"),
    ("adding", {"seq_len": float("inf")}, "got inf"),
    ("adding", {"train_size": 0}, "train_size must be an integer >= 1"),
    ("adding_ternary", {"test_size": -1}, "test_size must be an integer >= 1"),
    ("copy", {"seq_len": 0}, r"seq_len \(the time lag T\) must be an integer >= 1"),
    ("mnist", {"pixels_per_step": 5}, "pixels_per_step must divide 784"),
    ("permuted_mnist", {"permutation_seed": -1}, "permutation_seed must be an integer >= 0"),
    ("mnist_rows", {"normalize": "zscore"}, "normalize must be one of"),
    ("mnist", {"val_size": 0}, "val_size must be an integer >= 1"),
    ("mnist", {"download": "no"}, "download must be true or false"),
    ("mnist", {"data_dir": 3}, "data_dir must be a folder path"),
    ("mnist", {"progress": "bar"}, "progress must be a function or None"),
    ("har2", {"val_fraction": 1.5}, "val_fraction must be a number between 0 and 1"),
    ("ptb_word", {"seq_len": 0}, "seq_len must be an integer >= 1"),
    ("ptb_char", {"seq_len": "long"}, "seq_len must be an integer"),
    ("ucr", {"dataset": "../../etc/passwd"}, "dataset must be a UCR dataset name"),
    ("ucr", {"dataset": "ECG200/../../x"}, "dataset must be a UCR dataset name"),
    ("ucr", {"dataset": ".."}, "dataset must be a UCR dataset name"),
    ("ucr", {"dataset": 200}, "dataset must be a UCR dataset name"),
    ("ucr", {"dataset": "ECG200", "val_fraction": 0}, "val_fraction must be a number between 0 and 1"),
]


@pytest.mark.parametrize(("name", "options", "message"), BAD_VALUES)
def test_check_refuses_bad_values_without_data(name, options, message, tmp_path):
    with pytest.raises(ValueError, match=message) as info:
        tasks.check(name, **options)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "data").exists()  # nothing looked for, nothing downloaded


@pytest.mark.parametrize("name", SYNTHETIC)
def test_check_builds_a_generated_task_without_drawing_examples(name):
    task = tasks.check(name, seq_len=10**9, train_size=10**9)
    assert task.name == name and task.fresh_training_data is False and task._sets == {}


@pytest.mark.parametrize(("name", "options"), [("mnist", {}), ("permuted_mnist", {"pixels_per_step": 28}),
                                               ("mnist_rows", {}), ("har2", {}), ("ptb_word", {"seq_len": 35}),
                                               ("ptb_char", {}), ("ucr", {"dataset": "ECG200"})])
def test_check_passes_good_real_data_options_without_looking_for_the_data(name, options, tmp_path, monkeypatch):
    monkeypatch.delenv("STABILITY_OFFLINE")  # a download attempt would reach the network: there is none
    assert tasks.check(name, data_dir=str(tmp_path / "mine"), **options) is None
    assert not (tmp_path / "mine").exists() and not (tmp_path / "data").exists()


def test_check_names_unknown_and_missing_options_as_build_does():
    with pytest.raises(ValueError, match="unknown option length for task 'adding'"):
        tasks.check("adding", length=10)
    with pytest.raises(ValueError, match="needs the option dataset"):
        tasks.check("ucr")


def _just_outside(bound, side):
    step = 1 if isinstance(bound, int) else 1e-3
    return bound - step if side == "low" else bound + step


@pytest.mark.parametrize("name", available())
def test_declared_choices_pass_and_declared_ranges_are_no_tighter_than_the_task(name):
    """What the form offers comes from describe(); each declared choice passes ``check`` (no data read)
    and a value just outside a declared bound is refused by the task's own check."""
    info = describe(name)
    required = {option.name: "ECG200" for option in info.options if option.required}
    for option in info.options:
        for choice in option.choices or ():
            tasks.check(name, **required, **{option.name: choice})
        if not option.in_form:
            continue  # e.g. ucr's input_size: checked against the data's length, after loading
        for side, bound in zip(("low", "high"), option.range or ()):
            if bound is not None:
                with pytest.raises(ValueError, match=option.name):
                    tasks.check(name, **required, **{option.name: _just_outside(bound, side)})
