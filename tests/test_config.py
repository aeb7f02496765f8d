"""RunConfig: defaults, JSON round trip and one-line validation errors."""
import json

import pytest

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
    RunConfig().validate().check_buildable()


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
        RunConfig(cell=CellConfig("vprnn", 7)).validate().check_buildable()
    with pytest.raises(ConfigError, match="spectral"):
        RunConfig(cell=CellConfig("spectral", 8, {"r": 5.0})).validate().check_buildable()


def test_invalid_json_is_a_config_error():
    with pytest.raises(ConfigError, match="not valid JSON"):
        RunConfig.from_json("{cell:")
