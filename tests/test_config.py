"""RunConfig: defaults, JSON round trip and one-line validation errors."""
import json
import re

import pytest

from stability.admission.preflight import check_buildable
from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig


def test_defaults_validate_and_round_trip_through_json():
    config = RunConfig(cell=CellConfig("sgornn", 64, {"k": 8, "clip_beta": False}),
                       task=TaskConfig("copy", {"seq_len": 50}),
                       train=TrainConfig(optimizer="rmsprop", lr=1e-2, lr_schedule="linear", clip_grad_norm=1.0,
                                         dtype="float64", log_every=5),
                       name="demo")
    config.validate()
    text = config.to_json()
    assert json.loads(text)["cell"]["options"] == {"k": 8, "clip_beta": False}
    assert RunConfig.from_json(text) == config
    assert RunConfig.from_dict(config.to_dict()) == config
    check_buildable(RunConfig().validate())


def test_resolved_intervals_log_about_200_points():
    train = TrainConfig(steps=2000)
    assert train.resolved_log_every() == 10 and train.resolved_eval_every() == 100
    assert TrainConfig(steps=50).resolved_log_every() == 1
    assert TrainConfig(steps=50, log_every=7).resolved_log_every() == 7


@pytest.mark.parametrize("data,message", [
    ({"cell": {"name": "lstmm"}}, "cell must be one of rnn, irnn, lstm"),
    ({"task": {"name": "adding", "options": {"length": 5}}}, "unknown task option(s) length .* valid options: seq_len"),
    ({"cell": {"name": "rnn", "options": {"m1": 3}}}, "unknown cell option(s) m1 for cell 'rnn'"),
    ({"train": {"lr": 0}}, "lr must be a positive number; got 0"),
    ({"train": {"optimizer": "adagrad"}}, "optimizer must be one of adam, rmsprop, sgd"),
    ({"train": {"steps": 2.5}}, "steps must be an integer >= 1"),
    ({"train": {"dtype": "float16"}}, "dtype must be one of float32, float64"),
    ({"train": {"clip_grad_norm": -1}}, "clip_grad_norm must be a positive number"),
    ({"train": {"momentum": 0.9}}, "unknown train field(s) momentum"),
    ({"train": {"freeze_recurrent": "yes"}}, "freeze_recurrent must be true or false; got 'yes'"),
    ({"model": {}}, "unknown configuration section(s) model"),
])
def test_bad_values_raise_one_line_naming_field_and_choices(data, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        RunConfig.from_dict(data).validate()
    assert "\n" not in str(error.value)


def test_check_buildable_catches_option_values():
    with pytest.raises(ConfigError, match="vprnn.*even"):
        check_buildable(RunConfig(cell=CellConfig("vprnn", 7)).validate())
    with pytest.raises(ConfigError, match="spectral"):
        check_buildable(RunConfig(cell=CellConfig("spectral", 8, {"r": 5.0})).validate())


def test_invalid_json_is_a_config_error():
    with pytest.raises(ConfigError, match="not valid JSON"):
        RunConfig.from_json("{cell:")


# ------------------------------------------- issue 10 §3: refused when submitted, not in the worker
@pytest.fixture
def no_data(monkeypatch, tmp_path):
    monkeypatch.setenv("STABILITY_OFFLINE", "1")
    monkeypatch.setenv("STABILITY_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.mark.parametrize("task,message", [
    (TaskConfig("adding", {"seq_len": 0}), "task 'adding': seq_len must be an integer >= 2, got 0"),
    (TaskConfig("adding", {"seq_len": -10}), "task 'adding': seq_len must be an integer >= 2, got -10"),
    (TaskConfig("adding", {"seq_len": "abc"}), "got 'abc'"),
    (TaskConfig("adding", {"seq_len": float("inf")}), "got inf"),
    (TaskConfig("copy", {"seq_len": 0}), "task 'copy': seq_len (the time lag T)"),
    (TaskConfig("ucr", {"dataset": "../../etc/passwd"}), "task 'ucr': dataset must be a UCR dataset name"),
    (TaskConfig("mnist", {"pixels_per_step": 5}), "task 'mnist': pixels_per_step must divide 784"),
])
def test_check_buildable_checks_every_task_option_value_without_data(task, message, no_data):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        check_buildable(RunConfig(cell=CellConfig("rnn", 8), task=task).validate())
    assert "\n" not in str(error.value)
    assert not no_data.exists()


def test_check_buildable_passes_good_real_data_options_without_the_data(no_data):
    for task in (TaskConfig("ucr", {"dataset": "ECG200"}), TaskConfig("mnist", {}), TaskConfig("ptb_char", {})):
        check_buildable(RunConfig(cell=CellConfig("rnn", 8), task=task).validate())
    assert not no_data.exists()


def test_epochs_need_a_fixed_training_set_when_submitted():
    fresh = RunConfig(cell=CellConfig("rnn", 8), train=TrainConfig(epochs=1.0)).validate()
    with pytest.raises(ConfigError, match="epochs needs a fixed training set"):
        check_buildable(fresh)
    check_buildable(RunConfig(cell=CellConfig("rnn", 8), task=TaskConfig("adding", {"seq_len": 10, "train_size": 100}),
                              train=TrainConfig(epochs=1.0)).validate())


def test_a_model_that_cannot_fit_is_refused_with_an_estimate_before_it_is_built(monkeypatch):
    from stability.admission import budget
    from stability import cells

    def never(*args, **kwargs):
        raise AssertionError("the cell was built")

    monkeypatch.setattr(cells, "build", never)
    gib = budget.physical_memory() / 2**30
    for cell in ("spectral", "rnn", "lstm", "vprnn", "kru"):
        with pytest.raises(ConfigError) as error:
            check_buildable(RunConfig(cell=CellConfig(cell, 1_000_000_000)).validate())
        message = str(error.value)
        assert message.startswith(f"hidden_size 1000000000 of cell '{cell}' needs ~")
        assert re.search(r"needs ~\d(\.\d)?e\+1[89] bytes of parameters", message) and f"this machine has {gib:.3g} GiB" in message
    with pytest.raises(ConfigError, match="of activations for batch_size 64 x 1000000000000 steps"):
        check_buildable(RunConfig(cell=CellConfig("rnn", 8), task=TaskConfig("adding", {"seq_len": 10**12})).validate())
    with pytest.raises(ConfigError, match=r"needs ~10\^40\d bytes"):
        check_buildable(RunConfig(cell=CellConfig("rnn", 10**200)).validate())


def test_the_estimate_lets_the_papers_sizes_through():
    from stability.admission import budget
    from stability import tasks

    for cell, hidden, task, options, batch in [("lstm", 1024, "ptb_word", {"seq_len": 300}, 64),
                                               ("spectral", 128, "copy", {"seq_len": 2000}, 64),
                                               ("sgornn", 128, "adding", {"seq_len": 5000}, 128),
                                               ("rnn", 2048, "adding", {"seq_len": 1000}, 64)]:
        config = RunConfig(cell=CellConfig(cell, hidden), task=TaskConfig(task, options),
                           train=TrainConfig(batch_size=batch))
        built = tasks.check(task, **options) if task != "ptb_word" else None
        used = budget.footprint(config, built)  # a training step's share: its weights and its activations
        assert 0 < used.parameters + used.step < 8 * 2**30


# ------------------------------------------------------------------ a field by its path (stability.config.fields)
def test_a_field_is_resolved_with_its_type_from_the_annotations_and_the_cells_options():
    from dataclasses import fields as dataclass_fields

    from stability import cells
    from stability.config.fields import Field, resolve_field

    base = RunConfig(cell=CellConfig("spectral", 8))
    assert resolve_field("lr", base) == Field("train.lr", "float")
    assert resolve_field("train.clip-grad-norm", base) == Field("train.clip_grad_norm", "float", optional=True)
    assert resolve_field("hidden_size", base) == Field("cell.hidden_size", "int")
    assert resolve_field("cell.name", base).path == "cell" and resolve_field("task", base).path == "task"
    m1 = cells.describe("spectral").option("m1")
    assert resolve_field("cell.m1", base) == Field("cell.m1", m1.base_type, m1.optional, m1.choices)
    # an option of another cell than the base's: looked up on the cells in use
    nonlinearity = cells.describe("rnn").option("nonlinearity")
    assert resolve_field("cell.nonlinearity", base, ["rnn"]).choices == nonlinearity.choices
    trains = [item.name for item in dataclass_fields(TrainConfig)]
    assert all(resolve_field(name, base).path == f"train.{name}" for name in trains if name != "seed")
    for name, message in (("foo", "foo: unknown field"), ("cell.m9", "has no option 'm9'; valid options: m1, m2"),
                          ("train.seed", "never names the seed"), ("train", "train: unknown field")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            resolve_field(name, base)


def test_a_setting_applied_is_read_back_and_a_new_cell_drops_the_old_ones_options():
    from stability import cells
    from stability.config.fields import apply, field_value, flat_fields

    base = RunConfig(cell=CellConfig("spectral", 8, {"m1": 2}), task=TaskConfig("adding", {"seq_len": 10}))
    setting = {"cell.m2": 3, "task.seq_len": 17, "train.lr": 0.25, "cell.hidden_size": 12}
    changed = apply(base, setting)
    assert all(field_value(changed, path) == value for path, value in setting.items())
    assert all(field_value(changed.to_dict(), path) == value for path, value in setting.items())  # a stored dict
    assert base.cell.options == {"m1": 2} and field_value(changed, "cell.m1") == 2
    rnn = apply(base, {"cell": "rnn"})
    assert rnn.cell.name == "rnn" and "m1" not in rnn.cell.options
    assert field_value(rnn, "cell.nonlinearity") == cells.describe("rnn").option("nonlinearity").default
    assert field_value(rnn, "cell.m1") is None and field_value(None, "cell") is None
    flat = flat_fields(changed.to_dict())
    assert flat["cell"] == "spectral" and flat["cell.m1"] == 2 and flat["train.lr"] == 0.25 and "name" not in flat
    assert all(field_value(changed, path) == value for path, value in flat.items())


def test_a_field_is_labelled_whole_for_a_run_name_and_by_its_last_part_in_a_figure():
    from stability.config.fields import field_label, setting_label

    assert [field_label(path) for path in ("train.lr", "cell.m1", "task.seq_len", "cell", None)] == \
        ["lr", "cell.m1", "task.seq_len", "cell", ""]
    assert [field_label(path, short=True) for path in ("train.lr", "cell.h0_noise_std", "task.seq_len", "cell")] == \
        ["lr", "h0_noise_std", "seq_len", "cell"]
    assert setting_label({"cell": "rnn", "train.lr": 1e-3, "cell.m1": 4}) == "cell=rnn lr=0.001 cell.m1=4"


def test_depth_within_a_step_is_bounded_and_counted_before_anything_is_built(monkeypatch):
    """Issue 20: mlp ``layers`` and VPRNN/SGORNN ``k`` had no upper bound and no place in the memory
    budget (``layers=1e9`` reached the allocator)."""
    from stability import cells
    from stability.admission import budget

    for cell, option, hidden in (("mlp", "layers", 8), ("vprnn", "k", 8), ("sgornn", "k", 8)):
        built = cells.build(cell, 2, hidden, **{option: 3})
        assert budget.step_depth(RunConfig(cell=CellConfig(cell, hidden, {option: 3}))) == getattr(built, option) == 3
        default = cells.build(cell, 2, 64)
        assert budget.step_depth(RunConfig(cell=CellConfig(cell, 64))) == getattr(default, option)
        with pytest.raises(ValueError, match=rf"^{option} must be at most \d+; got 1000000000$"):
            cells.build(cell, 2, hidden, **{option: 10**9})
    assert budget.step_depth(RunConfig(cell=CellConfig("rnn", 8))) == 1

    def never(*args, **kwargs):
        raise AssertionError("the cell was built")

    monkeypatch.setattr(cells, "build", never)
    shallow = RunConfig(cell=CellConfig("sgornn", 512, {"k": 1}), task=TaskConfig("adding", {"seq_len": 20_000}),
                        train=TrainConfig(batch_size=16))
    deep = RunConfig(cell=CellConfig("sgornn", 512, {"k": 1000}), task=TaskConfig("adding", {"seq_len": 20_000}),
                     train=TrainConfig(batch_size=16))
    assert budget.footprint(deep).step > 500 * budget.footprint(shallow).step
    with pytest.raises(ConfigError, match="needs ~"):
        check_buildable(deep.validate())
    mlp = RunConfig(cell=CellConfig("mlp", 4096, {"layers": 1000}))
    assert budget.footprint(mlp).parameters > 1000 * 4096 * 4096 * 4


def test_eval_examples_are_counted_and_a_sample_past_memory_is_refused_before_anything_is_built(monkeypatch):
    """Issue 20: ``eval_examples`` (settable through Vary) was not in the budget: the evaluator keeps a fixed
    training sample of that many examples for the whole run, and 10**9 of them reached the allocator."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from stability import cells, tasks
    from stability.admission import budget
    from stability.training.build import build_model
    from stability.training.evaluation import Evaluator

    for name, options, examples in (("adding", {"seq_len": 12}, 300), ("copy", {"seq_len": 5}, 700),
                                    ("adding", {"seq_len": 12, "train_size": 100}, 300)):
        config = RunConfig(cell=CellConfig("rnn", 8), task=TaskConfig(name, options),
                           train=TrainConfig(eval_examples=examples, batch_size=4))
        task = tasks.check(name, **options)
        held = Evaluator(tasks.build(name, **options), config.train, torch.device("cpu"), torch.float32)
        assert budget.footprint(config, task).evaluation_set == sum(x.nbytes for x, _ in held.train_batches) > 0
        model = build_model(config, tasks.build(name, **options))
        with FlopCounterMode(display=False) as counted:  # an independent count of the forward's matrix products
            model(torch.randn(1, task.seq_len, task.input_size))
        operations = budget.work(config, task)
        assert operations.step / (3 * 4) == counted.get_total_flops()
        assert operations.evaluation == 2 * examples * operations.step / (3 * 4)  # the fixed sample and val

    def never(*args, **kwargs):
        raise AssertionError("the cell was built")

    monkeypatch.setattr(cells, "build", never)
    huge = RunConfig(cell=CellConfig("rnn", 8), task=TaskConfig("adding", {"seq_len": 10}),
                     train=TrainConfig(eval_examples=10**9)).validate()
    with pytest.raises(ConfigError) as error:
        check_buildable(huge)
    message = str(error.value)
    assert message.startswith("eval_examples 1000000000 keeps a fixed training sample of ~74.5 GiB")
    assert message.endswith("lower eval_examples") and "\n" not in message



@pytest.mark.parametrize("option", ["val_size", "test_size", "train_size"])
def test_a_generated_tasks_fixed_sets_are_counted_before_one_is_drawn(option):
    from stability import tasks
    from stability.admission import budget

    options = {"seq_len": 10, "val_size": 300, "test_size": 200, "train_size": 100}
    config = RunConfig(cell=CellConfig("rnn", 8), task=TaskConfig("adding", options)).validate()
    task = tasks.check("adding", **options)
    built = tasks.build("adding", **options)
    drawn = sum(array.nbytes for split in ("train", "val", "test") for array in built.fixed_split(split).values())
    assert budget.footprint(config, task).data_sets == drawn
    huge = RunConfig(cell=CellConfig("rnn", 8), task=TaskConfig("adding", {**options, option: 2 * 10**9})).validate()
    with pytest.raises(ConfigError) as error:
        check_buildable(huge)
    message = str(error.value)
    assert message.startswith("task 'adding' draws fixed sets of ~") and f"{option} 2,000,000,000" in message
    assert message.endswith("lower val_size, test_size or train_size") and "\n" not in message
