"""The MNIST presets spectral-fig4, spectral-fig4-margin and maso-table3: what the files say against the papers.

tests/test_reproduce.py runs every shipped preset at a CI size; these check what is particular to these
three, with no training: the data they read at each scale, that maso-table3's claims read Table 3's own
cells (a sweep grid also pairs each optimizer with the other's learning rates), and that each margin claim's
bound is the r its run is configured with.
"""
from __future__ import annotations

import pytest

from stability import presets
from stability.config.fields import field_value, setting_label

MNIST_PRESETS = ("spectral-fig4", "spectral-fig4-margin", "maso-table3")
# MASO paper App. B and Table 3: the learning rates of each optimizer, and the σ columns.
TABLE3_LR = {"rmsprop": {1e-5, 1e-4, 1.5e-4, 2e-4}, "sgd": {1e-7, 1e-6, 1.25e-6, 1.5e-6}}
TABLE3_SIGMA = {0.0, 0.001, 0.01, 0.1, 1.0, 5.0}


def _configs(preset: presets.Preset, scale: str):
    return preset.all_configs(scale)


@pytest.mark.parametrize("name", MNIST_PRESETS)
def test_paper_scale_reads_real_mnist_and_classroom_a_shorter_variant_or_its_stand_in(name):
    preset = presets.load(name)
    paper, classroom = _configs(preset, "paper"), _configs(preset, "classroom")
    assert {c.task.name for c in paper + classroom} == {"mnist"}
    assert {c.task.options["data"] for c in paper} == {"real"}
    assert {c.task.options["pixels_per_step"] for c in paper} == {1}  # pixel MNIST, T = 784
    assert {c.task.options["data"] for c in classroom} == {"auto"}
    assert all(c.task.options["pixels_per_step"] > 1 for c in classroom)  # the shorter variant
    assert "stand-in" in preset.title and "STAND-IN" in preset.notes


def _setting(preset: presets.Preset, scale: str, label: str) -> dict:
    (setting,) = [s for s in preset.sweep_spec(scale).settings() if setting_label(s) == label]
    return setting


def test_maso_table3_claims_read_only_cells_of_table3():
    preset = presets.load("maso-table3")
    names = [claim.run for claim in preset.claims] + [
        claim.than["run"] for claim in preset.claims if isinstance(claim.than, dict)]
    for scale in presets.SCALES:
        configs = preset.configs(scale)
        for name in names:
            config = configs[name]
            optimizer, lr = config.train.optimizer, config.train.lr
            assert lr in TABLE3_LR[optimizer], f"{name}: lr {lr} is not one of Table 3's {optimizer} rates"
            assert config.cell.options["h0_noise_std"] in TABLE3_SIGMA


def test_maso_table3_paper_scale_is_every_cell_of_table3_and_no_other():
    configs = presets.load("maso-table3").configs("paper").values()
    cells = [(c.train.optimizer, c.train.lr, c.cell.options["h0_noise_std"]) for c in configs]
    wanted = {(opt, lr, sigma) for opt, rates in TABLE3_LR.items() for lr in rates for sigma in TABLE3_SIGMA}
    assert len(wanted) == 48 and len(cells) == 48 and set(cells) == wanted


def test_each_margin_claim_bounds_by_its_own_runs_r():
    preset = presets.load("spectral-fig4-margin")
    bounds = [claim for claim in preset.claims if claim.metric == "sv/margin"]
    assert len(bounds) == len(preset.groups("classroom"))  # every r of the classroom sweep is checked
    for scale in presets.SCALES:
        spec = preset.sweep_spec(scale)
        for claim in bounds:
            config = spec.config_for(_setting(preset, scale, claim.run), spec.seed_values()[0])
            r = field_value(config, "cell.r")
            assert (claim.stat, claim.op, float(claim.than)) == ("max", "<=", r)
            assert claim.factor * r - r <= 1e-3 * r  # only a rounding allowance above r


def test_spectral_fig4_runs_the_five_cells_of_fig4_with_table2_sizes():
    configs = presets.load("spectral-fig4").configs("paper")
    assert {name: c.cell.name for name, c in configs.items()} == {
        "irnn": "irnn", "rnn": "rnn", "lstm": "lstm", "orthogonal": "orthogonal", "spectral": "spectral"}
    assert (configs["spectral"].cell.hidden_size, configs["spectral"].cell.options["m1"],
            configs["spectral"].cell.options["m2"]) == (128, 16, 16)
    assert (configs["orthogonal"].cell.hidden_size, configs["orthogonal"].cell.options["m"]) == (256, 32)
    assert configs["rnn"].cell.options["nonlinearity"] == "leaky_relu"  # §7: leaky_relu except LSTM
