"""The presets spectral-fig2, kru-fig2 and kru-fig6: the paper's settings they cite, KRU Fig. 2's parameter
claims against counts by hand, and KRU Fig. 6's claims following hand-written singular values.

Loading and a CI-sized run of every shipped preset (these three included) is tests/test_reproduce.py's.
"""
from __future__ import annotations

import math
import time

import pytest

from stability import presets
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from statuses import set_status

MINE = ("spectral-fig2", "kru-fig2", "kru-fig6")


def _values(preset: presets.Preset, scale: str, field: str) -> list:
    (vary,) = [vary for vary in preset.sweep_spec(scale).vary if vary.field == field]
    return list(vary.values)


@pytest.mark.parametrize("name", MINE)
def test_the_presets_are_sweeps_whose_claims_read_settings_of_both_scales(name):
    preset = presets.load(name)
    assert preset.is_sweep and preset.layout is not None
    classroom, paper = set(preset.groups("classroom")), set(preset.groups("paper"))
    assert {claim.run for claim in preset.claims} <= classroom & paper
    assert preset.run_count("classroom") < preset.run_count("paper")
    classroom_steps = preset.sweep_spec("classroom").base.train.steps
    assert classroom_steps < preset.sweep_spec("paper").base.train.steps


def test_spectral_fig2_runs_the_copy_task_at_the_lags_it_cites():
    preset = presets.load("spectral-fig2")
    base = preset.sweep_spec("paper").base
    assert (base.task.name, base.cell.hidden_size, base.train.optimizer) == ("copy", 128, "adam")
    assert _values(preset, "paper", "task.seq_len") == [100, 200, 300, 500]
    assert {"irnn", "lstm", "spectral", "orthogonal"} <= set(_values(preset, "paper", "cell"))
    # the long lag of the classroom is the one the claims read, and the paper scale's shortest
    assert max(_values(preset, "classroom", "task.seq_len")) == min(_values(preset, "paper", "task.seq_len"))
    assert preset.layout.columns == "task.seq_len"


def test_kru_fig2_runs_the_four_lengths_of_section_4_2():
    preset = presets.load("kru-fig2")
    paper = preset.sweep_spec("paper").base
    assert _values(preset, "paper", "task.seq_len") == [100, 200, 400, 750]
    assert (paper.train.optimizer, paper.train.lr, paper.train.batch_size) == ("rmsprop_tf", 1e-3, 50)
    assert (paper.task.options["train_size"], paper.task.options["test_size"]) == (100_000, 10_000)
    assert _values(preset, "classroom", "task.seq_len") == [100]


def test_kru_fig6_sweeps_lambda_over_the_papers_decades():
    preset = presets.load("kru-fig6")
    strengths = _values(preset, "paper", "cell.penalty_strength")
    assert strengths == pytest.approx([10.0 ** k for k in range(-7, 0)])
    assert min(_values(preset, "classroom", "cell.penalty_strength")) == pytest.approx(1e-7)
    assert max(_values(preset, "classroom", "cell.penalty_strength")) == pytest.approx(1e-1)


# ------------------------------------------------------------------ KRU Fig. 2: parameters, counted by hand
def test_kru_fig2_parameter_claims_hold_at_the_presets_size_and_match_a_hand_count(store):
    """Each classroom setting trained one step at its real size N = 128 (a parameter count does not
    depend on T, so T = 5 here): the counts the trainer stores are the hand counts, and the parameter
    claims, judged from them, hold as §4.2 and §3 say."""
    from stability import sweeps
    from stability.execution.lifecycle import train_run

    preset = presets.load("kru-fig2")
    spec = preset.sweep_spec("classroom")
    sweep_id = store.create_sweep(spec.to_dict(), name=preset.name)
    run_ids, records = [], {}
    for setting in spec.settings():
        config = sweeps.apply(spec.base, setting)
        config.task.options.update(seq_len=5, val_size=4, test_size=4)
        config.train.steps, config.train.batch_size, config.train.eval_examples = 1, 2, 2
        config.train.probe_examples = 1
        run_id = store.create_run(config.to_dict(), f"kru-fig2 {setting['cell']}", sweep_id=sweep_id, params=setting)
        assert train_run(config, store, run_id).status == "completed"
        run_ids.append(run_id)
        records[setting["cell"]] = store.record(run_id)
    n, inputs = 128, 2                                     # adding: a value and a marker per step
    lstm = 4 * (n * inputs + n * n + 2 * n) + (n + 1)      # four gates (two biases each, as torch), a readout
    assert records["lstm"].total_params == lstm == 67_713
    assert records["kru"].recurrent_params == 2 * 2 * 2 * int(math.log2(n))   # log2 N complex 2x2 factors
    verdicts = {verdict.claim: verdict for verdict in presets.verdicts(preset, store, run_ids)}
    counted = [claim.text for claim in preset.claims if claim.metric in presets.RUN_FIELDS]
    assert len(counted) == 4
    for text in counted:
        assert verdicts[text].held is True, verdicts[text].why
    assert verdicts[counted[0]].reference == pytest.approx(0.1 * lstm)


# ------------------------------------------------------------------ KRU Fig. 6: verdicts follow the rows
def _sweep_run(store, sweep_id: int, strength: float, rows: dict[str, list[float]]) -> int:
    config = RunConfig(CellConfig("kru", 4, {"penalty_strength": strength}), TaskConfig("adding", {"seq_len": 5}),
                       TrainConfig(steps=len(next(iter(rows.values())))))
    run_id = store.create_run(config.to_dict(), f"kru-fig6 {strength:g}", sweep_id=sweep_id,
                              params={"cell.penalty_strength": strength})
    store.flush(run_id, [(step, time.time(), metric, value) for metric, series in rows.items()
                         for step, value in enumerate(series, 1)])
    set_status(store, run_id, "completed", baseline=1 / 6)
    return run_id


def _spectrum(sigmas: list[float]) -> dict[str, list[float]]:
    """The rows a probe stores for a matrix with these singular values (one probe)."""
    return {"sv/max": [max(sigmas)], "sv/min": [min(sigmas)], "sv/condition": [max(sigmas) / min(sigmas)],
            "sv/margin": [max(abs(s - 1) for s in sigmas)], "val/loss": [0.1]}


@pytest.mark.parametrize("unitary_at_big_lambda", [True, False])
def test_kru_fig6_claims_follow_hand_written_singular_values(store, unitary_at_big_lambda):
    preset = presets.load("kru-fig6")
    near, spread, wider = [1.01, 0.99], [1.6, 0.5], [2.5, 0.3]
    sweep_id = store.create_sweep({"hand": True}, name="kru-fig6")
    by_strength = {1e-7: wider, 1e-4: spread, 1e-1: near} if unitary_at_big_lambda else \
        {1e-7: near, 1e-4: spread, 1e-1: wider}
    run_ids = [_sweep_run(store, sweep_id, strength, _spectrum(sigmas)) for strength, sigmas in by_strength.items()]
    verdicts = presets.verdicts(preset, store, run_ids)
    assert [verdict.held for verdict in verdicts] == [unitary_at_big_lambda] * len(preset.claims)
    condition = {verdict.claim: verdict for verdict in verdicts}["λ = 1e-1 leaves W better conditioned than λ = 1e-7 "
                                                                  "(smaller final condition number)"]
    big = by_strength[1e-1]
    assert condition.ours == pytest.approx(max(big) / min(big))
