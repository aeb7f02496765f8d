"""Sweeps (stability/sweeps/spec.py): --vary parsing and typing, one-line errors, the grid, Optuna studies
(grid coverage, seeded random/TPE), configs of trials, and a tiny grid trained end to end."""
import collections
import itertools
import math
import json
import re
import subprocess
import sys
import time

import numpy as np
import optuna
import pandas as pd
import pytest

from stability.core import metric_names
from stability import sweeps
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.runs.store import RunStore
from stability.sweeps import spec as spec_module
from stability.sweeps import (SweepError, SweepSpec, build_spec, create_study, load_study, next_trial, objective_name,
                              parse_varies, setting_of, tell)
from stability.execution.lifecycle import train_run
from statuses import set_status

optuna.logging.set_verbosity(optuna.logging.WARNING)


def tiny(cell="spectral", **train):
    settings = dict(steps=3, batch_size=8, eval_examples=16, probe_examples=4, log_every=1, eval_every=1)
    settings.update(train)
    return RunConfig(cell=CellConfig(cell, 8), task=TaskConfig("adding", {"seq_len": 10}),
                     train=TrainConfig(**settings))


def one(text, base=None):
    (vary,) = parse_varies([text], base or tiny())
    return vary


# ------------------------------------------------------------------------------ parsing and types
@pytest.mark.parametrize("text, field, values", [
    ("lr=1e-3,0.01", "train.lr", (0.001, 0.01)),
    ("train.lr=1", "train.lr", (1.0,)),
    ("steps=10,1e2", "train.steps", (10, 100)),
    ("optimizer=adam,sgd", "train.optimizer", ("adam", "sgd")),
    ("clip_grad_norm=none,1", "train.clip_grad_norm", (None, 1.0)),
    ("freeze_recurrent=true,false", "train.freeze_recurrent", (True, False)),
    ("hidden_size=8,16", "cell.hidden_size", (8, 16)),
    ("cell.m1=4,8", "cell.m1", (4, 8)),
    ("cell.h0=zero,noisy", "cell.h0", ("zero", "noisy")),
    ("cell.h0_noise_std=0.1,1", "cell.h0_noise_std", (0.1, 1.0)),
    ("task.seq_len=50,100", "task.seq_len", (50, 100)),
    ("task.seq-len=20", "task.seq_len", (20,)),
    ("cell=rnn,lstm", "cell", ("rnn", "lstm")),
])
def test_values_take_the_type_the_config_declares(text, field, values):
    vary = one(text)
    assert vary.field == field
    assert vary.values == values
    assert [type(value) for value in vary.values] == [type(value) for value in values]


def test_a_cell_option_is_typed_from_the_varied_cells_and_checked_against_its_choices():
    (cell, nonlinearity) = parse_varies(["cell=rnn,exponential", "cell.nonlinearity=tanh,relu"], tiny("spectral"))
    assert nonlinearity.values == ("tanh", "relu")
    with pytest.raises(SweepError, match="sigmoid.*tanh, relu, leaky_relu"):
        one("cell.nonlinearity=tanh,sigmoid", tiny("rnn"))


def test_a_json_valued_option_splits_outside_brackets_and_survives_the_study():
    spec = build_spec(tiny("kru"), ["cell.factor_sizes=[2,4],[4,2]"])
    assert spec.vary[0].values == ([2, 4], [4, 2])
    study = create_study(spec)
    built = sorted(next_trial(study, spec)[1].cell.options["factor_sizes"] for _ in range(spec.size()))
    assert built == [[2, 4], [4, 2]]


@pytest.mark.parametrize("low, high, count", [(1e-4, 1e-1, 4), (3e-5, 0.2, 7)])
def test_a_log_range_matches_numpy_geomspace(low, high, count):
    vary = one(f"lr={low}:{high}:{count}:log")
    assert np.allclose(vary.values, np.geomspace(low, high, count), rtol=1e-10, atol=0)
    assert (vary.values[0], vary.values[-1]) == (low, high)


def test_a_linear_range_matches_linspace_and_an_int_range_is_rounded_without_repeats():
    assert np.allclose(one("cell.h0_noise_std=0:1:5").values, np.linspace(0, 1, 5))
    expected = list(dict.fromkeys(int(round(v)) for v in np.geomspace(8, 10, 5)))
    assert list(one("hidden_size=8:10:5:log").values) == expected
    assert len(expected) < 5


def test_a_range_without_count_is_sampled_by_random_search_within_its_bounds():
    spec = build_spec(tiny(), ["lr=1e-4:1e-1:log", "cell.m1=2:8"], sampler="random", trials=6)
    study = create_study(spec)
    configs = [next_trial(study, spec)[1] for _ in range(spec.size())]
    assert all(1e-4 <= c.train.lr <= 1e-1 for c in configs)
    assert all(isinstance(c.cell.options["m1"], int) and 2 <= c.cell.options["m1"] <= 8 for c in configs)
    assert len({c.train.lr for c in configs}) == 6
    distributions = study.trials[0].distributions
    assert isinstance(distributions["train.lr"], optuna.distributions.FloatDistribution)
    lr = distributions["train.lr"]
    assert lr.log and (lr.low, lr.high) == (1e-4, 0.1)
    assert isinstance(distributions["cell.m1"], optuna.distributions.IntDistribution)


# ------------------------------------------------------------------------------ bad input
BAD = [
    (["foo=1"], {}, "vary foo: unknown field"),
    (["seq_len=10"], {}, "vary seq_len: unknown field"),
    (["lr"], {}, "expected FIELD=V1,V2"),
    (["lr="], {}, "vary train.lr: no values"),
    (["lr=1e-3,,1e-2"], {}, "vary train.lr: an empty value"),
    (["lr=abc"], {}, "'abc' is not a finite number"),
    (["lr=-1"], {}, "vary train.lr=-1: lr must be a positive number"),
    (["lr=1e-3,0.001"], {}, "listed twice"),
    (["lr=1e-1:1e-4:3"], {}, "LOW < HIGH"),
    (["lr=0:1:3:log"], {}, "log range needs LOW > 0"),
    (["lr=1:2:3:4"], {}, "a range is LOW:HIGH:COUNT"),
    (["lr=1e-4:1e-1:1"], {}, "COUNT must be at least 2"),
    (["lr=1e-4:1e-1"], {}, "a grid needs LOW:HIGH:COUNT"),
    (["seed=1,2"], {}, "the seeds come from --seeds"),
    (["lr=1e-3", "train.lr=1e-2"], {}, "named twice"),
    (["cell=nope"], {}, "vary cell=nope: cell must be one of rnn"),
    (["cell.m1=1.5"], {}, "vary cell.m1: '1.5' is not an integer"),
    (["cell.m1=0"], {}, "vary cell.m1=0: cell 'spectral': m1"),
    (["cell.m9=1"], {}, "has no option 'm9'; valid options: m1, m2"),
    (["cell.r=0.5,2"], {}, "vary cell.r=2: cell 'spectral': r must be <= sigma_star"),
    (["cell=rnn,spectral", "cell.m1=4"], {}, "vary cell=rnn, cell.m1=4: unknown cell option(s) m1"),
    (["hidden_size=7", "cell=spectral,vprnn"], {}, "hidden_size=7, cell=vprnn: cell 'vprnn'"),
    (["task.seq_len=1"], {}, "vary task.seq_len=1: task 'adding': seq_len"),
    (["freeze_recurrent=maybe"], {}, "not true or false"),
    (["lr=1e-3,1e-2"], {"seeds": 0}, "seeds must be an integer >= 1"),
    (["lr=1e-3,1e-2"], {"sampler": "bayes"}, "sampler must be one of grid, random, tpe"),
    (["lr=1e-3,1e-2"], {"sampler": "tpe"}, "--sampler tpe needs --trials N"),
    (["lr=1e-3,1e-2"], {"trials": 4}, "trials is for --sampler random or tpe"),
    (["lr=1e-5:1:101:log", "steps=1:100:100"], {}, "this sweep is 10,100 runs, over 10,000; pass --yes"),
]


@pytest.mark.parametrize("vary, options, message", BAD)
def test_bad_input_is_one_sweep_error_line_before_any_config_is_built_twice(monkeypatch, vary, options, message):
    built = collections.Counter()
    check_buildable = spec_module.check_buildable

    def counted(config):
        built[config.to_json()] += 1
        return check_buildable(config)

    monkeypatch.setattr(spec_module, "check_buildable", counted)
    with pytest.raises(SweepError) as raised:
        build_spec(tiny(), vary, **options)
    text = str(raised.value)
    assert isinstance(raised.value, ValueError) and "\n" not in text
    assert message in text
    assert max(built.values(), default=1) == 1


def test_a_large_grid_runs_with_allow_large_and_a_good_sweep_builds_each_distinct_config_once(monkeypatch):
    assert build_spec(tiny(), ["lr=1e-5:1:101:log", "steps=1:100:100"], allow_large=True).size() == 10_100
    built = collections.Counter()
    check_buildable = spec_module.check_buildable
    monkeypatch.setattr(spec_module, "check_buildable",
                        lambda config: (built.update([config.to_json()]), check_buildable(config))[1])
    # m1=16 and cell=spectral are the base's own values: the same configs as the base and as each other
    build_spec(tiny(), ["cell=spectral,orthogonal", "lr=1e-3,1e-2", "cell.renormalize=true,false"], seeds=2)
    assert built and max(built.values()) == 1


# ------------------------------------------------------------------------------ bounded work (Note [Bounded checks])
@pytest.fixture
def spied(monkeypatch):
    """Counts of what a check costs: values spaced by a range, configs built (each delegated to the real
    function, so nothing changes but the count); building more than 20 models is stopped at once."""
    counts = collections.Counter()
    spaced, check_buildable = spec_module.spaced, spec_module.check_buildable

    def spacing(low, high, count, log):
        counts["spaced"] += count
        return spaced(low, high, count, log)

    def building(config):
        counts["built"] += 1
        assert counts["built"] <= 20, "built models before refusing the sweep's size"
        return check_buildable(config)

    monkeypatch.setattr(spec_module, "spaced", spacing)
    monkeypatch.setattr(spec_module, "check_buildable", building)
    return counts


@pytest.mark.parametrize("vary, message", [
    (["lr=1e-4:1e-1:1000000:log"], "vary train.lr: 1,000,000 values, over the 10,000 runs a sweep may have"),
    (["lr=1e-4:1e-1:1000000000000:log"], "vary train.lr: 1,000,000,000,000 values, over the 10,000"),
    (["steps=1:100000:50000"], "vary train.steps: 50,000 values, over the 10,000"),
    (["lr=" + ",".join(f"{i + 1}e-6" for i in range(10_001))], "vary train.lr: 10,001 values, over the 10,000"),
    (["lr=" + "1e-3," * 60_000 + "1e-2"], "characters, over 200,000"),
])
def test_a_field_with_more_values_than_runs_is_refused_before_a_value_is_made(spied, vary, message):
    with pytest.raises(SweepError, match=re.escape(message)):
        build_spec(tiny(), vary)
    assert spied == {}  # no value spaced, no model built


def test_with_allow_large_a_field_may_list_more_values_up_to_the_hard_limit(spied):
    with pytest.raises(SweepError, match="20,000 values, over the 10,000"):
        parse_varies(["lr=1e-4:1e-1:20000:log"], tiny())
    (vary,) = parse_varies(["lr=1e-4:1e-1:20000:log"], tiny(), max_values=spec_module.MAX_LARGE_RUNS)
    assert len(vary.values) == 20_000
    with pytest.raises(SweepError, match="2,000,000 values, over the 1,000,000 runs a sweep may have"):
        build_spec(tiny(), ["lr=1e-4:1e-1:2000000:log"], allow_large=True)
    assert spied["spaced"] == 20_000


def test_a_grid_whose_check_builds_too_many_models_is_refused_before_one_is_built(spied):
    vary = ["cell.hidden_size=8:1024:100", "task.seq_len=10:1000:33"]
    with pytest.raises(SweepError) as raised:
        build_spec(tiny(), vary)
    assert str(raised.value) == ("checking this sweep would build up to 3,434 models (every combination of "
                                 "cell.hidden_size, task.seq_len), over 512; vary fewer of their values at "
                                 "once, or pass --yes to check them all")
    assert spied["built"] == 0


def test_training_only_values_are_checked_but_built_once(spied):
    spec = build_spec(tiny(), ["lr=1e-4:1e-1:5000:log", "steps=1,2"])
    assert spec.size() == 10_000
    assert spied["built"] == 1  # lr and steps change nothing a builder reads: the base's one build
    with pytest.raises(SweepError, match="vary train.lr=-1: lr must be a positive number"):
        build_spec(tiny(), ["lr=1e-3,-1"])


class Counted:
    """A value that counts the comparisons made between values like it."""
    comparisons = 0

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        Counted.comparisons += 1
        return self.value == other.value

    def __hash__(self):
        return hash(self.value)


def test_listed_values_are_told_apart_in_linear_time():
    from stability.config.fields import Field

    Counted.comparisons = 0
    values = tuple(Counted(i) for i in range(3000))
    assert spec_module._listed(Field("cell.option", "any"), values).values == values
    assert Counted.comparisons < 3000  # pairwise: 4.5 million
    with pytest.raises(SweepError, match="listed twice"):
        spec_module._listed(Field("cell.option", "any"), values + (Counted(17),))
    lists = parse_varies(["cell.factor_sizes=[2,2],[4,4],[2,4]"], tiny("kru"))[0]
    assert lists.values == ([2, 2], [4, 4], [2, 4])
    with pytest.raises(SweepError, match=r"\[2, 2\] is listed twice"):
        parse_varies(["cell.factor_sizes=[2,2],[4,4],[2,2]"], tiny("kru"))


# ------------------------------------------------------------------------------ what a page offers (Note [Offered fields])
def offered():
    """What a page whose form shows these train fields offers."""
    return spec_module.Offered(train=frozenset({"lr", "steps", "optimizer", "batch_size"}))


@pytest.mark.parametrize("vary, message", [
    (["cell=rnn,harden_marker_module:Cell"], "vary cell: 'harden_marker_module:Cell' is not a registered cell"),
    (["task=adding,harden_marker_module:Task"], "vary task: 'harden_marker_module:Task' is not a registered task"),
    (["cell=nope"], "vary cell: 'nope' is not a registered cell"),
    (["eval_examples=16,32"], "vary train.eval_examples: not a field this page offers"),
    (["train.probe_examples=4,8"], "vary train.probe_examples: not a field this page offers"),
    (["task.data_dir=/tmp/anywhere"], "vary task.data_dir: not an option this page offers"),
    (["task.download=true"], "vary task.download: not an option this page offers"),
    (["task.progress=none"], "vary task.progress: not an option this page offers"),
])
def test_a_page_varies_only_what_its_form_offers(tmp_path, monkeypatch, spied, vary, message):
    marker = tmp_path / "imported.txt"
    (tmp_path / "harden_marker_module.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\nclass Cell: pass\nclass Task: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    base = tiny() if "task." not in vary[0] else RunConfig(task=TaskConfig("ptb_char", {"seq_len": 20}))
    with pytest.raises(SweepError) as raised:
        build_spec(base, vary, offered=offered())
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert not marker.exists()
    assert spied["built"] == 0


def test_a_page_varies_registered_names_and_the_options_its_form_asks_for():
    spec = build_spec(tiny(), ["cell=rnn,spectral", "cell.h0=zero,learned", "optimizer=adam,sgd",
                               "task.seq_len=10,20", "hidden_size=8,16"], offered=offered())
    assert [vary.field for vary in spec.vary] == ["cell", "cell.h0", "train.optimizer", "task.seq_len",
                                                  "cell.hidden_size"]
    assert build_spec(tiny(), ["task=adding,copy"], offered=offered()).size() == 2
    # the CLI (no offered) keeps every field
    assert build_spec(tiny(), ["eval_examples=16,32"]).size() == 2


# ------------------------------------------------------------------------------ the grid and its study
def grid_spec(seeds=2):
    return build_spec(tiny(), ["lr=1e-3,1e-2,1e-1", "cell=rnn,spectral", "cell.h0=zero,noisy"], seeds=seeds)


def test_the_grid_is_the_cartesian_product_in_order():
    spec = grid_spec()
    product = itertools.product((1e-3, 1e-2, 1e-1), ("rnn", "spectral"), ("zero", "noisy"))
    assert [tuple(setting.values()) for setting in spec.settings()] == list(product)
    assert spec.size() == 3 * 2 * 2 * 2


def test_the_grid_study_asks_every_setting_and_seed_exactly_once_then_is_exhausted():
    spec = grid_spec()
    study = create_study(spec)
    asked = [next_trial(study, spec) for _ in range(spec.size())]  # none told yet: all running at once
    seen = collections.Counter((json.dumps(setting_of(t.params, spec)), c.train.seed) for t, c in asked)
    expected = {(json.dumps(s), seed) for s in spec.settings() for seed in (0, 1)}
    assert set(seen) == expected and set(seen.values()) == {1}
    assert next_trial(study, spec) is None
    for trial, _ in asked:
        tell(study, trial, 1.0)
    assert study.sampler.is_exhausted(study) and next_trial(study, spec) is None


def test_a_stored_study_is_loaded_with_its_spec_and_a_second_worker_finishes_its_grid(tmp_path):
    spec = grid_spec(seeds=1)
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    first = create_study(spec, storage=url, study_name="sweep-1")
    asked = [next_trial(first, spec) for _ in range(5)]
    for trial, _ in asked[:3]:
        tell(first, trial, 0.5)
    second, loaded = load_study("sweep-1", url)
    assert loaded == spec
    while (more := next_trial(second, loaded)) is not None:
        asked.append(more)
        tell(second, more[0], 0.5)
    names = [config.name for _, config in asked]
    assert len(names) == len(set(names)) == spec.size()
    with pytest.raises(SweepError, match="not a sweep"):
        optuna.create_study(storage=url, study_name="plain")
        load_study("plain", url)


def test_config_for_applies_the_setting_and_seeds_differ_only_in_train_seed():
    spec = grid_spec(seeds=3)
    setting = spec.settings()[5]
    configs = [spec.config_for(setting, seed) for seed in spec.seed_values()]
    for config in configs:
        config.validate()
        assert (config.train.lr, config.cell.name, config.cell.options["h0"]) == tuple(setting.values())
    assert [config.train.seed for config in configs] == [0, 1, 2]
    assert "lr=0.01" in configs[0].name and "seed=2" in configs[2].name

    def without_seed(config):
        data = config.to_dict()
        data["train"].pop("seed")
        data.pop("name")
        return data

    assert all(without_seed(config) == without_seed(configs[0]) for config in configs)
    with pytest.raises(SweepError, match="this sweep varies train.lr, cell, cell.h0"):
        spec.config_for({"train.lr": 1e-3}, 0)


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_seeded_random_and_tpe_studies_ask_the_same_sequence_twice(sampler):
    def sequence():
        spec = build_spec(tiny(seed=7), ["lr=1e-4:1e-1:log", "cell=rnn,spectral", "cell.h0=zero,noisy"],
                          sampler=sampler, trials=12, seeds=2)
        study = create_study(spec)
        names = []
        while (asked := next_trial(study, spec)) is not None:
            trial, config = asked
            names.append(config.name)
            tell(study, trial, abs(np.log10(config.train.lr) + 2) + (config.cell.name == "rnn"))
        return spec, names

    (spec, first), (_, second) = sequence(), sequence()
    assert first == second and len(first) == spec.size() == 24
    settings = collections.Counter(name.rpartition(" seed=")[0] for name in first)
    assert set(settings.values()) == {2}  # each sampled setting runs with both seeds, 7 and 8
    assert {name.rpartition("seed=")[2] for name in first} == {"7", "8"}


def test_the_spec_round_trips_through_json_and_describes_itself_on_one_line():
    for spec in (grid_spec(), build_spec(tiny("kru"), ["cell.factor_sizes=[2,4],[4,2]", "lr=1e-4:1e-2:log",
                                                       "clip_grad_norm=none,1"], sampler="tpe", trials=5,
                                         prune=True)):
        assert SweepSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
        line = spec.describe()
        assert "\n" not in line and f"= {spec.size():,} runs" in line
    with pytest.raises(SweepError, match="not a sweep description"):
        SweepSpec.from_dict({"base": {}})


def test_importing_sweeps_imports_neither_optuna_nor_streamlit():
    code = ("import sys, stability, stability.sweeps; "
            "print(sorted(m for m in ('optuna', 'streamlit') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------------------ end to end
def test_a_tiny_grid_trained_into_a_store_gives_optuna_the_best_setting(tmp_path):
    spec = build_spec(tiny("rnn"), ["lr=1e-3,3e-1", "cell.h0=zero,learned"], seeds=1)
    study = create_study(spec)
    settings = {}
    with RunStore(tmp_path / "runs.db") as store:
        while (asked := next_trial(study, spec)) is not None:
            trial, config = asked
            run_id = store.create_run(config.to_dict())
            assert train_run(config, store, run_id).status == "completed"
            settings[run_id] = setting_of(trial.params, spec)
            tell(study, trial, store.latest(run_id)[objective_name(spec)])
        rows = store.metrics_many(list(settings), names=[metric_names.VAL_LOSS])
    assert len(settings) == spec.size() == 4
    final = rows.sort_values("step").groupby("run_id")["value"].last()
    best_run = final.idxmin()
    assert {**settings[best_run], "train.seed": 0} == study.best_params
    assert study.best_value == final.min()


# ------------------------------------------------------------------------------ running sweeps
# Real worker processes (stability.cli.worker --sweep) on a real store; every wait is bounded and fails
# with what it saw, never a timed assertion about speed.
WAIT_S = 240.0


def wait_for(condition, what, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")


def sweep_done(store, sweep_id):
    return lambda: store.sweep(sweep_id).status != "running" and not sweeps.workers_alive(store, sweep_id)


def trials_by_number(store, sweep_id):
    study = optuna.load_study(study_name=store.sweep(sweep_id).study, storage=sweeps.storage(store))
    return {t.number: t for t in study.get_trials()}


def assert_each_setting_and_seed_once(store, spec, sweep_id):
    frame = sweeps.results(store, sweep_id)
    fields = [vary.field for vary in spec.vary]
    seen = collections.Counter((*(row[f] for f in fields), row["seed"]) for _, row in frame.iterrows())
    expected = {(*setting.values(), seed) for setting in spec.settings() for seed in spec.seed_values()}
    assert set(seen) == expected and set(seen.values()) == {1}, seen
    return frame


def test_two_worker_processes_run_every_setting_and_seed_exactly_once_and_tell_each_trial(store, monkeypatch):
    monkeypatch.setenv("STABILITY_MAX_RUNS", "2")  # two run slots: both workers start (Note [Slots])
    spec = build_spec(tiny("rnn", steps=60, log_every=10, eval_every=20), ["lr=1e-3,1e-2,1e-1", "cell=rnn,lstm"],
                      seeds=2)
    sweep_id = sweeps.start_sweep(spec, store.path, workers=2)
    wait_for(sweep_done(store, sweep_id), "the sweep to end")
    assert store.sweep(sweep_id).status == "completed"
    frame = assert_each_setting_and_seed_once(store, spec, sweep_id)
    assert (frame["status"] == "completed").all() and len(frame) == 12
    trials = trials_by_number(store, sweep_id)
    assert sorted(trials) == sorted(frame["trial"].tolist())
    for row in frame.to_dict("records"):  # each trial's value is its run's final val/loss, read independently
        rows = store.metrics(row["run_id"], names=[metric_names.VAL_LOSS])
        assert trials[row["trial"]].state == optuna.trial.TrialState.COMPLETE
        assert trials[row["trial"]].value == rows["value"].iloc[-1] == row["objective"]
        assert store.record(row["run_id"]).params == {"train.lr": row["train.lr"], "cell": row["cell"]}
    pids = {store.record(run_id).pid for run_id in frame["run_id"]}
    assert len(pids) == 2  # both workers trained


def test_a_stopped_sweep_resumes_where_it_stopped_and_its_resumed_run_ends_as_if_never_stopped(store):
    # long enough that the stop lands before the run ends on a fast machine (400 steps sometimes did not)
    spec = build_spec(tiny("rnn", steps=2000, log_every=50, eval_every=250), ["lr=1e-3,1e-2"], seeds=1)
    sweep_id = sweeps.start_sweep(spec, store.path, workers=1)
    wait_for(lambda: any(r.step and r.step >= 30 for r in store.records(sweep_id=sweep_id)),
             "the first run to pass step 30")
    assert sweeps.stop_sweep(sweep_id, store.path) == "stopped"
    (stopped,) = store.records(sweep_id=sweep_id)
    assert stopped.status == "stopped" and stopped.step < 2000
    assert store.sweep(sweep_id).stop_requested
    assert trials_by_number(store, sweep_id)[stopped.trial].state == optuna.trial.TrialState.RUNNING
    with pytest.raises(SweepError, match=f"is stopped; resume it with `python -m stability sweeps resume {sweep_id}`"):
        sweeps.join_sweep(sweep_id, store.path)

    assert sweeps.resume_sweep(sweep_id, store.path, workers=1) == 1
    wait_for(sweep_done(store, sweep_id), "the resumed sweep to end")
    assert store.sweep(sweep_id).status == "completed"
    frame = assert_each_setting_and_seed_once(store, spec, sweep_id)
    assert (frame["status"] == "completed").all()
    resumed = store.record(stopped.id)
    assert resumed.resumes == 1
    steps = store.metrics(stopped.id, names=["train/loss"])["step"].tolist()
    assert steps == [0, *range(50, 2001, 50)]  # step 0, then every log step exactly once across the stop
    # the same config trained in one go, in this process, ends with the same objective
    with RunStore(store.path.parent / "alone.db") as alone:
        config = RunConfig.from_dict(dict(resumed.raw_config))
        run_id = alone.create_run(config.to_dict())
        assert train_run(config, alone, run_id).status == "completed"
        assert alone.latest(run_id)[metric_names.VAL_LOSS] == resumed.latest[metric_names.VAL_LOSS]
    with pytest.raises(SweepError, match="completed"):
        sweeps.resume_sweep(sweep_id, store.path)


def test_an_orphaned_run_is_taken_over_from_step_zero_and_counted_once(store):
    spec = build_spec(tiny("rnn", steps=4, log_every=2, eval_every=2), ["lr=1e-3,1e-2"], seeds=1)
    sweep_id = store.create_sweep(spec.to_dict())
    study = create_study(spec, sweeps.storage(store), store.sweep(sweep_id).study)
    with sweeps.sweep_lock(store, sweep_id):
        job = sweeps.claim(store, study, spec, sweep_id)
    store.flush(job.run_id, [(2, 0.0, "train/loss", 9.0)], heartbeat_step=2)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    set_status(store, job.run_id, "running", pid=int(dead.stdout))  # its worker has died
    assert sweeps.work(store, sweep_id) == 2
    frame = assert_each_setting_and_seed_once(store, spec, sweep_id)
    assert (frame["status"] == "completed").all() and store.sweep(sweep_id).status == "completed"
    losses = store.metrics(job.run_id, names=["train/loss"])
    assert losses["step"].tolist() == [0, 2, 4] and 9.0 not in losses["value"].tolist()  # step 0's reading, then 2, 4


def test_a_hopeless_trial_is_pruned_at_an_evaluation_step_with_its_rows_kept(store):
    spec = build_spec(tiny("rnn", steps=40, log_every=5, eval_every=5), ["lr=1e-7:1e-6:log"], sampler="random",
                      trials=1, prune=True)
    sweep_id = store.create_sweep(spec.to_dict())
    study = create_study(spec, sweeps.storage(store), store.sweep(sweep_id).study)
    distribution = {"train.lr": spec.vary[0].distribution()}
    for value in (1e-7, 2e-7, 3e-7, 4e-7, 5e-7):  # five finished trials that reached a loss of 0 everywhere
        study.add_trial(optuna.trial.create_trial(params={"train.lr": value}, distributions=distribution, value=0.0,
                                                  intermediate_values={step: 0.0 for step in range(0, 41, 5)}))
    trial = study.ask(distribution)
    config = spec.config_for(setting_of(trial.params, spec), 0)
    run_id = store.create_run(config.to_dict(), sweep_id=sweep_id, trial=trial.number, params=trial.params)
    status = sweeps.train_trial(store, study, spec, sweeps.Job(run_id, trial.number, config, resume=False))
    assert status == "pruned" == store.record(run_id).status
    assert "pruned at step 5" in store.record(run_id).error
    assert study.get_trials()[-1].state == optuna.trial.TrialState.PRUNED
    val = store.metrics(run_id, names=[metric_names.VAL_LOSS])
    assert val["step"].tolist() == [0, 5]  # the rows up to the pruning step are kept
    assert study.get_trials()[-1].intermediate_values == {5: val["value"].iloc[-1]}


def test_a_diverged_trial_fails_its_trial_and_is_counted_in_its_setting(store):
    base = tiny("rnn", steps=30, log_every=5, eval_every=5)
    base.cell.options["nonlinearity"] = "relu"
    spec = build_spec(base, ["lr=1e-2,1e6"], seeds=1)
    sweep_id = store.create_sweep(spec.to_dict())
    create_study(spec, sweeps.storage(store), store.sweep(sweep_id).study)
    assert sweeps.work(store, sweep_id) == 2
    frame = sweeps.results(store, sweep_id)
    assert sorted(frame["status"]) == ["completed", "diverged"]
    trials = trials_by_number(store, sweep_id)
    diverged = frame[frame["status"] == "diverged"].iloc[0]
    assert trials[diverged["trial"]].state == optuna.trial.TrialState.FAIL
    assert trials[diverged["trial"]].user_attrs["status"] == "diverged"
    rows = {tuple(r["setting"].values()): r for r in sweeps.setting_rows(frame, spec)}
    assert rows[(1e6,)]["diverged"] == 1 and rows[(1e6,)]["mean"] is None
    assert rows[(1e-2,)]["completed"] == 1 and rows[(1e-2,)]["mean"] == frame.loc[
        frame["status"] == "completed", "objective"].iloc[0]


def test_setting_rows_agree_with_a_pandas_groupby_over_random_stored_sweeps(store):
    rng = np.random.default_rng(5)
    spec = build_spec(tiny("rnn"), ["lr=1e-3,1e-2,1e-1", "cell=rnn,lstm"], seeds=3)
    sweep_id = store.create_sweep(spec.to_dict())
    expected = []
    for number, (setting, seed) in enumerate(itertools.product(spec.settings(), spec.seed_values())):
        config = spec.config_for(setting, seed)
        run_id = store.create_run(config.to_dict(), sweep_id=sweep_id, trial=number, params=setting)
        status = rng.choice(["completed", "completed", "diverged", "pruned", "running"])
        value = float(rng.lognormal())
        store.flush(run_id, [(10, 0.0, metric_names.VAL_LOSS, value + 1), (20, 0.0, metric_names.VAL_LOSS, value)])
        set_status(store, run_id, str(status))
        expected.append({**setting, "seed": seed, "status": status, "value": value})
    truth = pd.DataFrame(expected)
    rows = sweeps.setting_rows(sweeps.results(store, sweep_id), spec)
    assert len(rows) == 6
    for row in rows:
        mine = truth[(truth["train.lr"] == row["setting"]["train.lr"]) & (truth["cell"] == row["setting"]["cell"])]
        done = mine[mine["status"] == "completed"]["value"]
        for key, value in (("mean", done.mean()), ("min", done.min()), ("max", done.max())):
            assert (row[key] is None) if done.empty else row[key] == pytest.approx(value, rel=1e-12)
        assert row["diverged"] == (mine["status"] == "diverged").sum()
        assert sorted(run["seed"] for run in row["runs"]) == sorted(mine["seed"])


def test_a_requeued_sweep_run_is_left_to_the_sweeps_workers_by_the_run_queue(store):
    from stability.workers import scheduler

    spec = build_spec(tiny("rnn"), ["lr=1e-3,1e-2"])
    sweep_id = store.create_sweep(spec.to_dict())
    run_id = store.create_run(tiny("rnn").to_dict(), sweep_id=sweep_id, trial=0, params={"train.lr": 1e-3})
    scheduler.reconcile(store.path)
    assert store.record(run_id).status == "queued" and store.record(run_id).pid is None


def test_sweep_errors_are_one_line(store):
    with pytest.raises(ValueError, match="no sweep with id 42"):
        sweeps.stop_sweep(42, store.path)
    with pytest.raises(SweepError, match="workers must be an integer >= 1"):
        sweeps.start_sweep(build_spec(tiny("rnn"), ["lr=1e-3"]), store.path, workers=0)
    assert store.sweeps() == []


def test_the_time_estimate_reads_completed_runs_of_each_shape_from_the_store(store):
    spec = build_spec(tiny("rnn", steps=50), ["cell=rnn,lstm", "lr=1e-3,1e-2"], seeds=3)
    per_step = {"rnn": 0.02, "lstm": 0.05}
    for cell, seconds in per_step.items():
        for factor in (0.5, 1.0, 4.0):  # the median of these is the one taken
            run_id = store.create_run(tiny(cell, lr=0.3).to_dict())
            set_status(store, run_id, "running", started_at=1000.0, step=100)
            set_status(store, run_id, "completed", finished_at=1000.0 + 100 * seconds * factor)
    estimate = sweeps.estimate_sweep_time(spec, store, workers=1)
    assert estimate["seconds"] == pytest.approx(sum(50 * s * 2 * 3 for s in per_step.values()))
    assert "2 shapes from completed runs in the store" in estimate["basis"]
    timed = sweeps.estimate_sweep_time(build_spec(tiny("gru", steps=50), ["lr=1e-3,1e-2"]), store, workers=1)
    assert timed["seconds"] > 0 and "1 shape timed by" in timed["basis"] and not timed["pending"]


def test_a_shape_timed_apart_is_timed_in_a_child_that_is_ended_at_its_time_limit(store):
    """Issue 20 (Note [Timing apart]): the server hands unknown shapes to a child process and never waits;
    a child past its limit is killed (our own, by its Popen) and its shape left to the operation count."""
    import psutil

    from stability.admission import shapes
    from stability.workers import timing as shape_timing

    config = tiny("gru", steps=50)
    shape = shapes.shape_of(config)
    try:
        known, timing = shape_timing.timed_apart([config], limit_s=0.5)  # less than the child needs to start
        assert known == {} and timing == {shape}
        [child] = [child.process for child in shape_timing._children if shape in child.shapes]
        estimate = sweeps.estimate_sweep_time(build_spec(config, ["lr=1e-3,1e-2"]), store, apart=True)
        assert estimate["pending"] and "1 shape from the operation count" in estimate["basis"]
        for _ in range(100):
            known, timing = shape_timing.timed_apart([config], limit_s=0.5)
            if not timing:
                break
            time.sleep(0.1)
        assert known == {shape: None} and child.returncode is not None and not psutil.pid_exists(child.pid)
        settled = sweeps.estimate_sweep_time(build_spec(config, ["lr=1e-3,1e-2"]), store, apart=True)
        assert not settled["pending"] and "separate process" not in settled["basis"]
    finally:
        shape_timing.stop_children()
        shape_timing._known.pop(shape, None)


def test_every_sweep_command_in_the_readme_parses_and_builds_its_sweep():
    import shlex
    from pathlib import Path

    from stability.cli.arguments import config_from_args
    from stability.cli.main import build_parser

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Sweeps", 1)[1].split("\n## ", 1)[0]
    commands = [" ".join(block.replace("\\\n", " ").split("#", 1)[0].split())
                for block in section.replace("\\\n", " ").splitlines() if "stability sweep " in block]
    assert len(commands) == 2
    for text in commands:
        args = build_parser().parse_args(shlex.split(text.split("python -m stability ", 1)[1]))
        spec = build_spec(config_from_args(args), args.vary, seeds=args.seeds, sampler=args.sampler,
                          trials=args.trials, prune=args.prune)
        assert spec.size() == args.seeds * math.prod(len(vary.values) for vary in spec.vary)


def test_two_machines_share_one_sweep_through_postgresql(postgres_url, tmp_path, monkeypatch):
    spec = build_spec(tiny("rnn", steps=60, log_every=10, eval_every=20), ["lr=1e-3,1e-2,1e-1", "cell=rnn,lstm"],
                      seeds=2)
    monkeypatch.setenv("STABILITY_HOME", str(tmp_path / "first"))
    sweep_id = sweeps.start_sweep(spec, postgres_url, workers=1)
    monkeypatch.setenv("STABILITY_HOME", str(tmp_path / "second"))  # another machine's local folder
    joined = sweeps.join_sweep(sweep_id, postgres_url, workers=1)
    assert len(joined) == 1
    with RunStore(postgres_url) as store:
        wait_for(sweep_done(store, sweep_id), "the shared sweep to end")
        assert store.sweep(sweep_id).status == "completed"
        frame = assert_each_setting_and_seed_once(store, spec, sweep_id)
        assert (frame["status"] == "completed").all()
        trials = trials_by_number(store, sweep_id)  # the study lives in the same database
        assert {t.state for t in trials.values()} == {optuna.trial.TrialState.COMPLETE} and len(trials) == 12
        assert len({store.record(run_id).pid for run_id in frame["run_id"]}) == 2
    for home in ("first", "second"):  # each machine's worker logged into its own folder
        assert list((tmp_path / home).rglob("sweep-*.log"))


def test_a_varied_cell_drops_the_base_cells_options_it_does_not_declare():
    base = tiny("spectral")
    base.cell.options.update(m1=4, nonlinearity="relu")
    spec = build_spec(base, ["cell=rnn,spectral"])
    built = {setting["cell"]: spec.config_for(setting, 0).cell.options for setting in spec.settings()}
    assert built["spectral"]["m1"] == 4 and "m1" not in built["rnn"]
    assert built["rnn"]["nonlinearity"] == built["spectral"]["nonlinearity"] == "relu"  # both declare it


def live_sweep_workers(store_url):
    """``(pid, sweep id)`` of the live sweep workers of the store at ``store_url`` (psutil: the worker module,
    ``--sweep ID``, the store in the environment), one a worker: a worker is its token (Note [Identity]), and a
    process a worker has forked and not yet exec'd (a worker at its end starting the next sweep's worker, a
    moment CI caught) shows its parent's command line, environment and token; it is not another worker."""
    import psutil

    from stability.workers.processes import TOKEN_ENV, WORKER_MODULE

    workers = {}
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if WORKER_MODULE in command and "--sweep" in command:
            try:
                environment = process.environ()
                if environment.get("STABILITY_STORE") == store_url and process.status() != psutil.STATUS_ZOMBIE:
                    token = environment.get(TOKEN_ENV) or f"pid {process.pid}"
                    workers.setdefault(token, (process.pid, int(command[command.index("--sweep") + 1])))
            except psutil.Error:
                continue
    return list(workers.values())


def test_sweeps_asking_more_workers_than_the_run_slots_start_at_most_the_slots_and_the_rest_wait(store, monkeypatch):
    """Issue 20: every Sweep Start started its workers outside STABILITY_MAX_RUNS. With two slots, a sweep asking
    four workers never has more than two alive (psutil, every 50 ms); a second sweep's worker waits while they
    hold the slots (Note [Slots]: none of its processes lives while it waits), starts when one is handed on,
    and both sweeps complete."""
    from stability.workers import slots

    monkeypatch.setenv("STABILITY_MAX_RUNS", "2")
    base = RunConfig(CellConfig("rnn", 4), TaskConfig("adding", {"seq_len": 5}),
                     TrainConfig(steps=5, batch_size=4, eval_examples=8, probe_examples=2))
    first = sweeps.start_sweep(build_spec(base, ["lr=1e-3,1e-2"], seeds=2), store.url, workers=4)
    second = sweeps.start_sweep(build_spec(base, ["lr=1e-1"]), store.url, workers=1)
    most, seen, deadline = 0, set(), time.monotonic() + 240
    try:
        assert store.sweep(first).workers == 2 and slots.waiting(store, second) == 1
        while "running" in (store.sweep(first).status, store.sweep(second).status) and time.monotonic() < deadline:
            alive = [sweep for _, sweep in live_sweep_workers(store.url)]
            waiting = slots.waiting(store, second)  # read after: a worker is taken off the list, then started
            most, seen = max(most, alive.count(first)), seen | set(alive)
            assert not (waiting and second in alive)
            time.sleep(0.05)
    finally:
        sweeps.stop_sweep(first, store.url, timeout=2.0)
        sweeps.stop_sweep(second, store.url, timeout=2.0)
    assert most == 2 and seen == {first, second}
    assert store.sweep(first).status == store.sweep(second).status == "completed"
    assert sorted(run.status for run in store.records(sweep_id=first)) == ["completed"] * 4
