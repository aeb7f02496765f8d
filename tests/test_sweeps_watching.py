"""stability/sweeps/watching.py and starting.py: what a page reads off a sweep and offers before one, without
Streamlit or a store."""
from types import SimpleNamespace

import pandas as pd

from stability import cells
from stability.config import CellConfig, RunConfig
from stability.sweeps import build_spec, starting, watching


def spec():
    return build_spec(RunConfig(), ["cell=spectral,rnn", "lr=1e-3,1e-2"], seeds=2)


def test_progress_counts_the_specs_runs_not_yet_in_the_store_and_names_each_status():
    fraction, text = watching.progress(spec(), {"completed": 3, "running": 1})
    assert fraction == 3 / 8 and text == "3 / 8 runs done · 3 completed · 1 running"
    sweep = SimpleNamespace(id=3, name="", status="running", spec=spec().to_dict(), counts={"completed": 3})
    assert watching.label(sweep) == "#3 · running · 3/8 runs"
    assert watching.is_active(sweep) and not watching.is_active(SimpleNamespace(status="completed", counts={}))


def test_runs_are_ordered_as_the_spec_lists_their_values_then_by_seed():
    results = pd.DataFrame({"run_id": [1, 2, 3, 4], "cell": ["rnn", "spectral", "rnn", "spectral"],
                            "train.lr": [1e-3] * 4, "seed": [1, 0, 0, 1]})
    ordered = watching.in_spec_order(results, spec())
    assert ordered["run_id"].tolist() == [2, 4, 3, 1]  # spectral first, as listed
    assert watching.listed_values(spec(), "cell") == ("spectral", "rnn")


def test_a_training_step_moves_the_curves_version_only_and_an_evaluation_the_objectives_too():
    before = pd.DataFrame({"run_id": [1], "status": ["running"], "step": [10], "objective": [float("nan")]})
    stepped = before.assign(step=[20])
    evaluated = stepped.assign(objective=[0.5])
    assert watching.objective_version(before) == watching.objective_version(stepped)  # NaN equal to NaN
    assert watching.results_version(before) != watching.results_version(stepped)
    assert watching.objective_version(stepped) != watching.objective_version(evaluated)


def test_a_form_offers_the_usual_fields_first_and_drops_the_options_left_at_their_defaults():
    choices = starting.field_choices("spectral")
    assert choices[:len(starting.FIELD_HINTS)] == list(starting.FIELD_HINTS) and "cell.r" in choices
    config = RunConfig(CellConfig("spectral", 16, {"r": 0.01, "m1": 3}))
    defaults = {option.name: option.default for option in cells.describe("spectral").options}
    kept = starting.without_default_options(config).cell.options
    assert all(kept[name] != defaults.get(name) for name in kept)
