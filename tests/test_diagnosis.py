"""stability/analysis/diagnosis.py: every rule on synthetic metric frames whose answer is known by construction
(when the gradient fell below 1e-10, when the loss reached the baseline, ...), then on the rows of a
real tiny run, to check the rules accept the names the trainer writes."""
import dataclasses
import math
import time
from types import MappingProxyType

import numpy as np
import pandas as pd
import pytest

from stability.analysis import diagnosis
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.analysis.diagnosis import Finding, diagnose
from stability.runs.records import RunRecord
from stability.runs.store import RunStore
from stability.execution.lifecycle import train_run


def frame(**series) -> pd.DataFrame:
    """Long rows (run_id, step, wall_time, name, value) from ``name=(steps, values)``; ``__`` in a keyword
    stands for ``/`` (``grad__h0_norm`` is ``grad/h0_norm``)."""
    rows = [(1, int(step), 1000.0 + step, name.replace("__", "/"), float(value))
            for name, (steps, values) in series.items() for step, value in zip(steps, values)]
    return pd.DataFrame(rows, columns=["run_id", "step", "wall_time", "name", "value"]).sort_values("step")


def record(cell="rnn", options=None, status="running", metric="mse", baseline=1 / 6, step=None, error=None):
    config = RunConfig(CellConfig(cell, 8, dict(options or {})), TaskConfig("adding", {"seq_len": 10}))
    return RunRecord(id=1, name="", status=status, config=config, raw_config=MappingProxyType(config.to_dict()),
                     config_problem=None, created_at=0.0, started_at=0.0, finished_at=None, heartbeat=None,
                     device="cpu", pid=None, total_params=None, recurrent_params=None, metric=metric,
                     baseline=baseline, baseline_label="always predict 1", step=step, total_steps=1000,
                     error=error, resumes=0, stop_requested=False)


def rules(findings) -> list[str]:
    return [finding.rule for finding in findings]


def only(findings, rule) -> Finding:
    [finding] = [finding for finding in findings if finding.rule == rule]
    return finding


STEPS = np.arange(0, 200, 10)


# ------------------------------------------------------------------------------------- vanishing
def test_a_gradient_below_1e_10_since_step_40_is_vanishing_since_step_40():
    values = np.where(STEPS < 40, 1e-3, 1e-20)
    found = only(diagnose(frame(grad__h0_norm=(STEPS, values))), "vanishing")
    assert found.since_step == 40 and found.severity == "problem" and found.chart == "h0"
    assert "below 1e-10 since step 40" in found.text and "1.00e-20" in found.text
    assert found.chart_title == "‖∂L/∂h₀‖"


def test_a_dip_below_1e_10_that_recovers_is_not_vanishing():
    values = np.where((STEPS >= 40) & (STEPS < 120), 1e-20, 1e-3)
    assert "vanishing" not in rules(diagnose(frame(grad__h0_norm=(STEPS, values))))


def test_the_onset_is_the_start_of_the_last_stretch_below_the_threshold():
    values = np.full(len(STEPS), 1e-12)
    values[STEPS == 90] = 1e-9  # one reading above: the stretch that holds now starts after it
    assert only(diagnose(frame(grad__h0_norm=(STEPS, values))), "vanishing").since_step == 100


def test_exactly_at_the_threshold_is_not_below_it_and_a_stored_zero_is():
    assert "vanishing" not in rules(diagnose(frame(grad__h0_norm=(STEPS, np.full(len(STEPS), 1e-10)))))
    zeros = np.where(STEPS < 150, 1e-5, 0.0)
    found = only(diagnose(frame(grad__h0_norm=(STEPS, zeros))), "vanishing")
    assert found.since_step == 150 and "reads 0" in found.text and "float64" in found.text


def test_too_few_readings_below_say_nothing_and_nan_readings_are_skipped():
    values = np.where(STEPS < 180, 1e-3, 1e-20)  # two readings below
    assert "vanishing" not in rules(diagnose(frame(grad__h0_norm=(STEPS, values))))
    values = np.where(STEPS < 150, 1e-3, 1e-20)
    values[STEPS == 170] = math.nan
    assert only(diagnose(frame(grad__h0_norm=(STEPS, values))), "vanishing").since_step == 150


# ------------------------------------------------------------------------------------- exploding
def growing(per_100: float, start: int = 0, steps=np.arange(0, 600, 10), level=1.0, noise=0.0, seed=0):
    """A norm flat at ``level`` until ``start``, then growing ``per_100``× per 100 steps, times log-normal noise."""
    decades = np.where(steps < start, 0.0, (steps - start) / 100 * math.log10(per_100))
    jitter = np.random.default_rng(seed).normal(0.0, noise, len(steps))
    return steps, level * 10.0 ** (decades + jitter)


def test_a_norm_growing_20x_per_100_steps_is_exploding_since_its_growth_started():
    found = only(diagnose(frame(grad__recurrent_norm=growing(20.0, start=300))), "exploding")
    assert found.severity == "problem" and found.chart == "maso"
    assert "20× per 100 steps" in found.text
    assert 250 <= found.since_step <= 320  # the fit from a little before the bend still grows fast enough


def test_exploding_at_exactly_the_threshold_is_reported_and_just_under_it_is_not():
    assert "exploding" in rules(diagnose(frame(grad__total_norm=growing(10.0 * (1 + 1e-9)))))
    assert only(diagnose(frame(grad__total_norm=growing(10.0 * (1 + 1e-9)))), "exploding").chart == "compare"
    assert "exploding" not in rules(diagnose(frame(grad__total_norm=growing(9.5))))


def test_noisy_flat_norms_and_short_windows_are_not_exploding():
    for seed in range(5):
        assert "exploding" not in rules(diagnose(frame(grad__total_norm=growing(1.0, noise=0.3, seed=seed))))
    # fast growth, but over 40 steps only: too short to tell from noise
    assert "exploding" not in rules(diagnose(frame(grad__total_norm=growing(1000.0, steps=np.arange(0, 50, 10)))))


def test_a_norm_climbing_back_to_where_it_started_is_recovering_not_exploding():
    steps = np.arange(0, 600, 10)
    values = np.where(steps < 300, 10.0 ** (-steps / 100), 1e-3 * 20.0 ** ((steps - 300) / 100))  # 1 -> 1e-3 -> 5.9
    assert "exploding" not in rules(diagnose(frame(grad__total_norm=(steps, values))))
    values = np.where(steps < 300, 10.0 ** (-steps / 100), 1e-3 * 100.0 ** ((steps - 300) / 100))  # ... -> 630
    assert "exploding" in rules(diagnose(frame(grad__total_norm=(steps, values))))


def test_zeros_and_nan_in_a_norm_are_left_out_of_the_fit():
    steps, values = growing(30.0)
    values[[3, 20, 50]] = [0.0, math.nan, 0.0]
    assert "exploding" in rules(diagnose(frame(grad__recurrent_norm=(steps, values))))


# -------------------------------------------------------------------------------------- diverged
def test_a_diverged_run_or_an_infinite_loss_is_diverged():
    rows = frame(train__loss=(STEPS, np.full(len(STEPS), 0.2)))
    found = only(diagnose(rows, record(status="diverged", step=190, error="NaN loss at step 191")), "diverged")
    assert found.since_step == 190 and "NaN loss at step 191" in found.text and found.chart == "loss"
    losses = np.where(STEPS < 150, 0.2, math.inf)
    assert only(diagnose(frame(train__loss=(STEPS, losses))), "diverged").since_step == 150
    assert "diverged" not in rules(diagnose(rows, record(status="running")))


# --------------------------------------------------------------------------------- spectral band
def test_sigma_outside_a_spectral_cells_band_is_reported_since_it_left():
    low = np.where(STEPS < 100, 0.995, 0.9)
    rows = frame(sv__min=(STEPS, low), sv__max=(STEPS, np.full(len(STEPS), 1.005)))
    found = only(diagnose(rows, record("spectral", {"r": 0.01})), "band_left")
    assert found.since_step == 100 and "[0.99, 1.01]" in found.text and found.chart == "sv"
    assert "band_left" not in rules(diagnose(rows, record("spectral", {"r": 0.2})))  # inside [0.8, 1.2]
    assert "band_left" not in rules(diagnose(rows, record("rnn")))  # no band: sigma_star and r are the spectral cell's


def test_the_band_comes_from_sigma_star_and_r_with_the_cells_defaults():
    assert diagnosis.singular_value_band(record("spectral")) == pytest.approx((0.99, 1.01))
    assert diagnosis.singular_value_band(record("spectral", {"sigma_star": 2.0, "r": 0.5})) == (1.5, 2.5)
    assert diagnosis.singular_value_band(record("lstm")) is None
    assert diagnosis.singular_value_band(None) is None
    # a stored config the code no longer reads: the cell's defaults, or nothing; never an exception
    broken = dataclasses.replace(record("spectral"), config=None, raw_config=MappingProxyType(
        {"cell": {"name": "spectral", "options": "not a mapping"}}))
    assert diagnosis.singular_value_band(broken) == pytest.approx((0.99, 1.01))
    unknown = dataclasses.replace(broken, raw_config=MappingProxyType({"cell": {"name": "no.such:Cell"}}))
    assert diagnosis.singular_value_band(unknown) is None
    # the mlp takes sigma_star and r for its spectral layers only: a dense mlp has no band to leave
    assert diagnosis.singular_value_band(record("mlp", {"layer": "spectral"})) == pytest.approx((0.99, 1.01))
    assert diagnosis.singular_value_band(record("mlp", {"layer": "dense"})) is None
    assert diagnosis.singular_value_band(record("mlp")) is None  # its default layer is dense


def test_sigma_at_the_edge_of_its_band_and_within_float_error_of_it():
    high = np.where(STEPS < 60, 1.004, 1.01 + 1e-7)  # at the edge, above it by float32 SVD error only
    rows = frame(sv__min=(STEPS, np.full(len(STEPS), 0.995)), sv__max=(STEPS, high))
    findings = diagnose(rows, record("spectral"))
    assert "band_left" not in rules(findings)
    found = only(findings, "band_edge")
    assert found.since_step == 60 and found.severity == "info" and "σ* + r" in found.text
    assert "band_edge" not in rules(diagnose(frame(sv__min=(STEPS, np.full(len(STEPS), 0.995)),
                                                   sv__max=(STEPS, np.full(len(STEPS), 1.005))), record("spectral")))


def test_a_cell_that_started_orthogonal_and_drifted_is_reported_from_when_it_drifted():
    margin = np.where(STEPS < 70, 0.001 * (1 + STEPS), 0.4)
    found = only(diagnose(frame(sv__margin=(STEPS, margin)), record("irnn")), "drifted")
    assert found.since_step == 70 and "0.4" in found.text and found.severity == "warning"
    # a gaussian RNN is far from orthogonal from the start: nothing drifted
    assert "drifted" not in rules(diagnose(frame(sv__margin=(STEPS, np.full(len(STEPS), 0.9))), record("rnn")))


# ----------------------------------------------------------------------------------------- gates
def sgornn_gates(clip_from: int):
    alpha = np.full(len(STEPS), 0.02)
    raw = np.where(STEPS < clip_from, 0.95, 0.99)
    beta = np.minimum(raw, 1 - 2 * alpha)
    return dict(gate__alpha=(STEPS, alpha), gate__beta=(STEPS, beta), gate__beta_raw=(STEPS, raw))


def test_beta_pinned_at_its_bound_since_the_clip_became_active():
    found = only(diagnose(frame(**sgornn_gates(clip_from=80))), "beta_clipped")
    assert found.since_step == 80 and "1 − 2α = 0.96" in found.text and found.chart == "gates"
    assert "beta_clipped" not in rules(diagnose(frame(**sgornn_gates(clip_from=10_000))))
    # clip_beta=False: beta_raw == beta, never pinned
    unclipped = sgornn_gates(clip_from=0)
    unclipped["gate__beta"] = unclipped["gate__beta_raw"]
    assert "beta_clipped" not in rules(diagnose(frame(**unclipped)))


def test_a_saturated_gate_is_stuck_and_a_cell_without_gates_has_no_gate_finding():
    forget = np.where(STEPS < 110, 0.8, 0.9995)
    found = only(diagnose(frame(gate__forget=(STEPS, forget), gate__input=(STEPS, np.full(len(STEPS), 0.5)))),
                 "gate_saturated")
    assert found.since_step == 110 and "forget" in found.text and "stuck at 1" in found.text
    findings = diagnose(frame(grad__h0_norm=(STEPS, np.full(len(STEPS), 0.1))))
    assert not {"beta_clipped", "gate_saturated"} & set(rules(findings))


# -------------------------------------------------------------------------------------- baseline
def test_a_noisy_flat_loss_at_the_baseline_is_at_the_baseline_from_the_first_evaluation():
    noise = np.random.default_rng(0).normal(0.0, 0.004, len(STEPS))
    rows = frame(val__loss=(STEPS, 1 / 6 + noise))
    found = only(diagnose(rows, record()), "baseline")
    assert found.since_step == 0 and "0.1667" in found.text and "nothing is remembered yet" in found.text
    assert "learning" not in rules(diagnose(rows, record()))
    assert "baseline" not in rules(diagnose(rows))  # no record: no baseline known, no guess


def test_a_loss_that_leaves_the_baseline_is_learning_since_it_left():
    loss = np.where(STEPS < 100, 0.165, 0.05)
    findings = diagnose(frame(val__loss=(STEPS, loss)), record())
    assert "baseline" not in rules(findings)
    found = only(findings, "learning")
    assert found.since_step == 100 and found.severity == "info" and "below" in found.text


def test_an_accuracy_task_compares_its_metric_with_the_majority_baseline():
    accuracy = np.where(STEPS < 50, 0.52, 0.9)
    rows = frame(val__accuracy=(STEPS, accuracy), val__loss=(STEPS, np.full(len(STEPS), 0.69)))
    found = only(diagnose(rows, record(metric="accuracy", baseline=0.5)), "learning")
    assert found.since_step == 50 and found.chart == "metric" and "above" in found.text
    rows = frame(val__accuracy=(STEPS, np.full(len(STEPS), 0.51)))
    assert only(diagnose(rows, record(metric="accuracy", baseline=0.5)), "baseline").chart == "metric"
    assert diagnose(rows, record(metric="accuracy", baseline=None)) == []


# ------------------------------------------------------------------------------------------- gap
def test_a_gap_that_widens_is_reported_from_where_it_was_smallest():
    gap = np.where(STEPS < 80, 0.01 - 0.0001 * STEPS, 0.002 + 0.0005 * (STEPS - 80))
    rows = frame(gap__loss=(STEPS, gap), val__loss=(STEPS, np.full(len(STEPS), 0.1)))
    found = only(diagnose(rows), "gap_widening")
    assert found.since_step == 80 and found.chart == "gap" and "widening" in found.text  # its smallest: 0.002


def test_a_flat_or_closing_gap_is_not_widening():
    steady = 0.01 + np.random.default_rng(1).normal(0.0, 0.001, len(STEPS))
    for gap in (steady, 0.05 - 0.0002 * STEPS):
        rows = frame(gap__loss=(STEPS, gap), val__loss=(STEPS, np.full(len(STEPS), 0.1)))
        assert "gap_widening" not in rules(diagnose(rows))


# ------------------------------------------------------------------------------- all of it at once
def test_empty_frames_few_rows_and_missing_names_give_nothing():
    assert diagnose(pd.DataFrame(columns=["run_id", "step", "wall_time", "name", "value"]), record()) == []
    assert diagnose(frame(val__loss=([0, 10], [1 / 6, 1 / 6]), grad__h0_norm=([0, 10], [0.0, 0.0])), record()) == []


def test_findings_come_most_severe_first_then_by_onset():
    rows = frame(grad__h0_norm=(STEPS, np.where(STEPS < 40, 1e-3, 1e-20)), val__loss=(STEPS, np.full(len(STEPS), 0.17)),
                 **sgornn_gates(clip_from=20))
    findings = diagnose(rows, record("sgornn"))
    assert rules(findings) == ["vanishing", "baseline", "beta_clipped"]
    assert [finding.severity for finding in findings] == ["problem", "warning", "info"]


def test_diagnosing_a_few_thousand_rows_is_cheap():
    steps = np.arange(0, 20_000, 10)
    names = {f"name{index}": (steps, np.ones(len(steps))) for index in range(10)}
    rows = frame(grad__h0_norm=(steps, np.full(len(steps), 1e-20)), val__loss=(steps, np.full(len(steps), 0.17)),
                 **names)
    started = time.perf_counter()
    diagnose(rows, record("spectral"))
    assert time.perf_counter() - started < 0.5


def test_the_rows_of_a_real_tiny_run_are_read_by_their_stored_names(tmp_path):
    """sgornn on adding: the rules find the names the trainer writes, and its β clip or gates where they hold."""
    config = RunConfig(cell=CellConfig("sgornn", 8), task=TaskConfig("adding", {"seq_len": 12}),
                       train=TrainConfig(steps=40, batch_size=16, log_every=5, eval_every=5, probe_every=20,
                                         eval_examples=32, probe_examples=8))
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(config.to_dict())
        assert train_run(config, store, run_id).status == "completed"
        rows, run = store.metrics(run_id), store.record(run_id)
    readings = diagnosis.Readings(rows)
    for name in ("grad/h0_norm", "grad/recurrent_norm", "grad/total_norm", "sv/min", "sv/max", "sv/margin",
                 "gate/alpha", "gate/beta", "gate/beta_raw", "gap/loss", "val/loss"):
        assert len(readings[name][0]) >= MIN_READINGS_OF_A_TINY_RUN, name
    assert run.metric == "mse" and run.baseline == pytest.approx(1 / 6)
    findings = diagnose(rows, run)
    assert all(finding.severity in diagnosis.SEVERITIES and finding.chart in diagnosis.CHARTS for finding in findings)
    # forty steps of adding learn nothing: every validation loss is above the 1/6 baseline
    val = rows[rows["name"] == "val/loss"]
    assert (val["value"] > run.baseline).all() and only(findings, "baseline").since_step == int(val["step"].min())
    # beta is clipped where the raw beta is above it (checked here from the rows, independently of the rule)
    gates = rows[rows["name"].isin(["gate/beta", "gate/beta_raw"])].pivot(index="step", columns="name", values="value")
    clipped = (gates["gate/beta_raw"] > gates["gate/beta"]).to_numpy()
    if clipped[-MIN_READINGS_OF_A_TINY_RUN:].all():
        first = len(clipped) - np.argmin(clipped[::-1]) if not clipped.all() else 0
        assert only(findings, "beta_clipped").since_step == gates.index[first]
    else:
        assert "beta_clipped" not in rules(findings)
    # the gradient reaches h0 at T = 12; sgornn has no sigma_star/r band
    assert "vanishing" not in rules(findings) and "band_left" not in rules(findings)


MIN_READINGS_OF_A_TINY_RUN = 3


def test_a_gap_closing_from_below_is_not_widening_until_it_opens_above_zero():
    """Early on the training set's loss is the higher one (a negative gap); closing to 0 is not overfitting."""
    closing = np.minimum(-0.12 + 0.001 * STEPS, 0.002)
    rows = frame(gap__loss=(STEPS, closing), val__loss=(STEPS, np.full(len(STEPS), 0.17)))
    assert "gap_widening" not in rules(diagnose(rows))
    opening = np.where(STEPS < 100, -0.1 + 0.001 * STEPS, 0.001 * (STEPS - 100))  # 0 at step 100, then up
    rows = frame(gap__loss=(STEPS, opening), val__loss=(STEPS, np.full(len(STEPS), 0.2)))
    found = only(diagnose(rows), "gap_widening")
    assert found.since_step == 100 and "rose from 0 at step 100" in found.text


def test_a_step_logged_twice_reads_its_last_value():
    rows = frame(grad__h0_norm=(STEPS, np.full(len(STEPS), 1e-20)))
    again = frame(grad__h0_norm=([190], [1e-3]))  # a later row at the last step: the gradient is back
    assert "vanishing" in rules(diagnose(rows))
    assert "vanishing" not in rules(diagnose(pd.concat([rows, again], ignore_index=True)))
