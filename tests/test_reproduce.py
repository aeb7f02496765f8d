"""stability/presets/ (stability.presets): presets load and validate, run at a CI scale, and are judged from the stored rows."""
from __future__ import annotations

import json
import math
import time

import pytest

from stability import presets
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.config.fields import field_value
from stability.presets import PresetError
from statuses import set_status

# A handful of steps of a tiny model: the machinery, not the paper's outcome.
TINY = {"cell": {"hidden_size": 8},
        "task": {"options": {"seq_len": 6, "val_size": 32, "test_size": 32}},
        "train": {"steps": 3, "batch_size": 8, "eval_examples": 16, "probe_examples": 4, "log_every": 1}}
SHIPPED = sorted(path.stem for path in presets.PRESETS_DIR.iterdir() if path.suffix in presets.SUFFIXES)
TINY_TASK = {"seq_len": 6, "val_size": 32, "test_size": 32, "data": "standin"}


def tiny(preset) -> dict:
    """TINY for ``preset``: only the task options its tasks declare (MNIST has no seq_len; a dataset task
    with a synthetic stand-in trains on it: no download in a test)."""
    from stability import tasks

    names = {config.task.name for scale in presets.SCALES for config in preset.all_configs(scale)}
    declared = set.intersection(*({option.name for option in tasks.describe(name).options} for name in names))
    return {**TINY, "task": {"options": {k: v for k, v in TINY_TASK.items() if k in declared}}}


def test_the_issue_presets_are_shipped():
    assert {"spectral-fig1", "maso-fig4", "sgornn-table1", "kru-copy"} <= set(SHIPPED)
    assert [info.name for info in presets.available()] == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_preset_loads_and_validates(name):
    preset = presets.load(name)
    assert preset.name == name  # the name a user types is the file's stem
    assert set(presets.SCALES) <= set(preset.scales)
    for field in (preset.title, preset.paper, preset.figure, preset.section, preset.shows):
        assert field.strip()
    for claim in preset.claims:
        assert claim.paper_source.strip(), f"{name}: claim {claim.text!r} cites no source"
    for scale in presets.SCALES:
        assert preset.run_count(scale) >= 1
        assert preset.scales[scale].get("note")
        if preset.is_sweep:
            preset.sweep_spec(scale)
        else:
            configs = preset.configs(scale)
            assert all(config.name == f"{name}/{run}" for run, config in configs.items())


def test_scales_override_the_runs_fields():
    preset = presets.load("spectral-fig1")
    classroom, paper = preset.configs("classroom"), preset.configs("paper")
    assert classroom["spectral"].task.options["seq_len"] == 200
    assert paper["spectral"].task.options["seq_len"] == 300
    assert classroom["spectral"].train.steps < paper["spectral"].train.steps
    assert classroom["spectral"].cell.options == {"m1": 16, "m2": 16, "r": 0.01}
    assert classroom["rnn"].cell.options == {}  # the base's cell options do not leak into another cell
    kru = presets.load("kru-copy").configs("classroom")
    assert kru["kru-fixed"].train.freeze_recurrent and not kru["kru"].train.freeze_recurrent


def _direct(store, run_id: int, metric: str, stat: str, last: int | None, from_step: int = 0) -> float:
    """The statistic read straight from the store's rows at steps >= ``from_step``, independently of reproduce."""
    values = [row.value for row in store.metrics(run_id, names=[metric]).itertuples() if row.step >= from_step]
    return {"final": values[-1], "first": values[0], "min": min(values), "max": max(values),
            "mean": sum(values) / len(values), "mean_last": sum(values[-(last or 1):]) / len(values[-(last or 1):])
            }[stat]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_preset_runs_at_ci_scale_and_is_judged_from_its_rows(name, store):
    preset = presets.load(name)
    lines = []
    run_ids = presets.run(preset, store, "classroom", progress=lines.append, override=tiny(preset))
    assert len(run_ids) == preset.run_count("classroom")
    assert len(set(run_ids)) == len(run_ids)
    records = [store.record(run_id) for run_id in run_ids]
    assert all(record.status == "completed" and record.step == 3 for record in records)
    assert {presets.group_of(record, preset) for record in records} == set(preset.groups("classroom"))
    assert any("completed" in line for line in lines)

    verdicts = presets.verdicts(preset, store, run_ids)
    assert [v.claim for v in verdicts] == [c.text for c in preset.claims]
    checked = 0
    for claim, verdict in zip(preset.claims, verdicts):
        assert verdict.held in (True, False), verdict.why  # every row a claim needs is there
        assert verdict.why and "\n" not in verdict.why
        if claim.metric in presets.RUN_FIELDS:
            continue
        (record,) = [r for r in records if presets.group_of(r, preset) == claim.run]  # one seed each
        assert verdict.ours == pytest.approx(_direct(store, record.id, claim.metric, claim.stat, claim.last,
                                                      claim.from_step))
        checked += 1
    assert checked >= 1
    json.dumps([verdict.to_dict() for verdict in verdicts])


def test_a_run_the_store_lacks_is_could_not_tell(store):
    preset = presets.load("sgornn-table1")
    run_ids = presets.run(preset, store, override=TINY)
    only_sgornn = [r for r in run_ids if presets.group_of(store.record(r), preset) == "sgornn"]
    verdicts = {v.claim: v for v in presets.verdicts(preset, store, only_sgornn)}
    assert verdicts["FastRNN has 16,899 parameters"].held is None
    assert "fastrnn" in verdicts["FastRNN has 16,899 parameters"].why
    assert verdicts["SGORNN has 1,411 parameters"].held is not None


def test_an_unknown_scale_is_one_line():
    with pytest.raises(PresetError, match="no scale 'huge'; it has classroom, paper"):
        presets.load("maso-fig4").scale("huge")


# ------------------------------------------------------------------ claims over rows written by hand
def _hand_preset(claims: list[dict]) -> presets.Preset:
    run = {"cell": {"name": "rnn", "hidden_size": 4}, "task": {"name": "adding", "options": {"seq_len": 5}}}
    return presets.from_dict({
        "name": "hand", "title": "t", "paper": "p", "figure": "Fig. 0", "section": "§0", "shows": "s",
        "runs": [{"name": "a", **run}, {"name": "b", **run}],
        "scales": {"classroom": {"note": "n"}, "paper": {"note": "n"}}, "claims": claims})


def _hand_run(store, name: str, values: dict[str, list[float]], **fields) -> int:
    config = RunConfig(CellConfig("rnn", 4), TaskConfig("adding", {"seq_len": 5}), TrainConfig(steps=3))
    run_id = store.create_run(config.to_dict(), f"hand/{name}")
    rows = [(step, time.time(), metric, value) for metric, series in values.items()
            for step, value in enumerate(series, 1)]
    store.flush(run_id, rows)
    set_status(store, run_id, fields.pop("status", "queued"), **fields)
    return run_id


def _claim(run="a", metric="val/loss", op="<", than=0.1, **rest):
    return {"text": f"{run} {metric} {op} {than} {rest}", "run": run, "metric": metric, "op": op, "than": than,
            **rest}


def test_claims_over_hand_written_rows(store):
    a = _hand_run(store, "a", {"val/loss": [0.5, 0.2, 0.05], "grad/h0_norm": [1e-3, 1e-12, 1e-14],
                               "sv/margin": [0.001, 0.004, 0.002]},
                  baseline=1 / 6, total_params=1000, status="completed")
    b = _hand_run(store, "b", {"val/loss": [0.3, 0.17, 0.16], "grad/h0_norm": [1e-2, 1e-2, 2e-2]},
                  baseline=1 / 6, total_params=100, status="diverged")
    claims = [
        _claim(than=0.1),                                                          # 0.05 < 0.1
        _claim(than="baseline", factor=0.2),                                       # 0.05 < 0.0333: no
        _claim(run="b", op="within", than="baseline", tolerance=0.1),              # 0.16 vs 0.1667
        _claim(run="b", op="within", than="baseline", tolerance=0.01),             # 4% off: no
        _claim(metric="grad/h0_norm", than=1e-10),                                 # final 1e-14
        _claim(metric="grad/h0_norm", stat="first", than=1e-10),                   # first 1e-3: no
        _claim(metric="sv/margin", stat="max", op="<=", than=0.004),               # stays <= 0.004
        _claim(metric="sv/margin", stat="max", op="<", than=0.003),                # no
        _claim(metric="val/loss", stat="mean_last", last=2, op="<", than={"run": "b"}),  # 0.125 < b's own mean of its last 2, 0.165
        _claim(run="b", metric="grad/h0_norm", stat="min", op=">", than={"run": "a", "stat": "max"}),  # 1e-2 > 1e-3
        _claim(metric="total_params", op=">", than={"run": "b"}, factor=5),         # 1000 > 500
        _claim(run="b", metric="status", op="==", than="diverged"),
        _claim(run="a", metric="status", op="==", than="diverged"),                 # no
        _claim(metric="gate/alpha", than=1.0),                                      # no rows: could not tell
        _claim(run="b", metric="sv/margin", stat="max", than={"run": "a"}),         # b has none: could not tell
    ]
    preset = _hand_preset(claims)
    verdicts = presets.verdicts(preset, store, [a, b])
    held = [v.held for v in verdicts]
    assert held == [True, False, True, False, True, False, True, False, True, True, True, True, False, None, None]
    assert verdicts[0].ours == pytest.approx(0.05) and verdicts[0].reference == pytest.approx(0.1)
    assert verdicts[1].reference == pytest.approx(0.2 / 6)
    assert verdicts[8].ours == pytest.approx(0.125) and verdicts[8].reference == pytest.approx(0.165)
    assert verdicts[10].ours == 1000 and verdicts[10].reference == 500
    assert verdicts[11].ours == "diverged"
    assert "no rows of gate/alpha" in verdicts[13].why
    assert "no rows of sv/margin" in verdicts[14].why
    # the same claims over other rows give other verdicts: nothing is read from the preset's numbers
    store.flush(a, [(4, time.time(), "val/loss", 0.5)])
    assert presets.verdicts(preset, store, [a, b])[0].held is False
    # a group missing from the run ids: could not tell, saying which
    alone = presets.verdicts(preset, store, [a])
    assert alone[2].held is None and "'b'" in alone[2].why


def test_a_nan_is_could_not_tell_and_an_infinity_compares(store):
    a = _hand_run(store, "a", {"val/loss": [0.5, math.nan], "grad/total_norm": [1.0, math.inf]},
                  status="diverged")
    b = _hand_run(store, "b", {"grad/total_norm": [2.0, 3.0]})
    nan, inf = presets.verdicts(_hand_preset([
        _claim(), _claim(metric="grad/total_norm", stat="max", op=">", than={"run": "b"}, factor=1000)]), store, [a, b])
    assert nan.held is None and "NaN" in nan.why
    assert json.loads(json.dumps(nan.to_dict()))["ours"] is None
    assert inf.held is True and inf.ours == math.inf and inf.reference == 3000
    assert strict(json.dumps(inf.to_dict()))["ours"] == "inf"


def strict(text: str):
    return json.loads(text, parse_constant=lambda constant: pytest.fail(f"{constant} is not JSON"))


# ------------------------------------------------------------------ bad presets: one line each
GOOD = """
name = "x"
title = "t"
paper = "p"
figure = "Fig. 1"
section = "§1"
shows = "s"
[[runs]]
name = "a"
cell = { name = "rnn", hidden_size = 4 }
task = { name = "adding", options = { seq_len = 5 } }
[scales.classroom]
note = "n"
[scales.paper]
note = "n"
[[claims]]
text = "c"
run = "a"
metric = "val/loss"
op = "<"
than = 0.5
"""


RUNS = 'name = "a"\ncell = { name = "rnn", hidden_size = 4 }\ntask = { name = "adding", options = { seq_len = 5 } }\n'
RUNS = "[[runs]]\n" + RUNS


def _bad(tmp_path, text: str, suffix: str = ".toml") -> str:
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    with pytest.raises(PresetError) as caught:
        presets.load(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    return message


def test_a_good_file_loads_by_path(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD)
    preset = presets.load(path)
    assert preset.name == "x" and preset.run_names() == ["a"] and preset.claims[0].than == 0.5
    as_json = tmp_path / "mine.json"
    import tomllib
    as_json.write_text(json.dumps(tomllib.loads(GOOD)))
    assert presets.load(str(as_json)).claims == preset.claims


@pytest.mark.parametrize("change, expected", [
    (lambda t: t.replace('title = "t"', 'title = "t"\ncolour = 1'), "unknown key(s) colour"),
    (lambda t: t.replace('figure = "Fig. 1"\n', ""), "missing key 'figure'"),
    (lambda t: t.replace('[scales.paper]\nnote = "n"\n', ""), "missing scale(s) paper"),
    (lambda t: t.replace('run = "a"\nmetric', 'run = "z"\nmetric'), "names 'z', which the preset does not run"),
    (lambda t: t.replace('op = "<"', 'op = "<<"'), "op must be one of"),
    (lambda t: t.replace('metric = "val/loss"', 'metric = "val/loss"\nstat = "median"'), "stat must be one of"),
    (lambda t: t.replace('op = "<"', 'op = "within"'), "within needs tolerance"),
    (lambda t: t.replace("than = 0.5", 'than = "the moon"'), "'than' must be a number"),
    (lambda t: t.replace('name = "rnn"', 'name = "nocell"'), "run 'a' (classroom): cell must be one of"),
    (lambda t: t.replace("seq_len = 5", "seq_len = 5, colour = 2"), "unknown task option(s) colour"),
    (lambda t: t.replace('[scales.paper]\nnote = "n"', '[scales.paper]\nnote = "n"\nseeds = 2'),
     "seeds and vary are for sweep presets"),
    (lambda t: t.replace(RUNS, "runs = []\n"), "'runs' must be a non-empty list"),
    (lambda t: t + '[sweep]\nvary = ["lr=1"]\n', "either 'runs'"),
    (lambda t: t + "\n[[claims]]\ntext = 'd'\n", "needs 'run'"),
    (lambda t: t.replace("than = 0.5", "than = 0.5\nlast = 3"), "mean_last needs last"),
    (lambda t: t.replace('metric = "val/loss"', 'metric = "status"'), "== and != compare a status"),
    (lambda t: t.replace("than = 0.5", "than = { stat = \"max\" }"), "'than' as a table takes run (required"),
    (lambda t: t.replace("than = 0.5", "than = { run = \"a\", stat = \"mean_last\" }"), "needs last = k"),
    (lambda t: t.replace('cell = { name = "rnn", hidden_size = 4 }', 'cell = "rnn"'), "'cell' must be a table"),
    (lambda t: t.replace(RUNS, '[base]\ncell = "rnn"\n' + RUNS), "(classroom): 'cell' must be a table"),
    (lambda t: t.replace('note = "n"', 'note = "n"\noverride = { train = { steps = "many" } }', 1),
     "(classroom): steps must be an integer"),
])
def test_a_malformed_preset_is_one_line_naming_what(tmp_path, change, expected):
    text = change(GOOD)
    assert text != GOOD
    assert expected in _bad(tmp_path, text)


LAYOUT = '\n[layout]\ncolor = "cell"\n[[layout.panels]]\nmetric = "val/loss"\n'


@pytest.mark.parametrize("change, expected", [
    (lambda t: t.replace('color = "cell"', 'colour = "cell"'), "unknown key(s) colour in layout"),
    (lambda t: t.replace('color = "cell"', 'color = "cell.nothing"'), "layout.color: cell.nothing: cell rnn has no option"),
    (lambda t: t.replace('color = "cell"', 'columns = 3'), "layout.columns must be a config field"),
    (lambda t: t.replace('panels]]\nmetric = "val/loss"\n', 'panels]]\ntitle = "no metric"\n'),
     "layout.panels[0] needs 'metric'"),
    (lambda t: t + 'stat = "max"\n', "stat and last go with a config field as x"),
    (lambda t: t + 'x = "cell.hidden_size"\nstat = "median"\n', "stat must be one of"),
    (lambda t: t + 'x = "lr"\nstat = "mean_last"\n', "mean_last needs last = k"),
    (lambda t: t + 'marks = [0.5]\n', 'each mark is "baseline" or'),
    (lambda t: t + 'marks = [{ value = "high" }]\n', 'each mark is "baseline" or'),
    (lambda t: t + 'log = "yes"\n', "log is true or false"),
    (lambda t: t + 'range = [1, 0]\n', "range must be [low, high] with low < high"),
    (lambda t: t + 'log = true\nrange = [0, 1]\n', "low > 0 on a log axis"),
    (lambda t: t.replace('[[layout.panels]]\nmetric = "val/loss"\n', 'panels = []\n'), "non-empty list of panels"),
])
def test_a_malformed_layout_is_one_line_naming_what(tmp_path, change, expected):
    good = GOOD + LAYOUT
    path = tmp_path / "good.toml"
    path.write_text(good)
    assert presets.load(path).layout.color == "cell"
    assert expected in _bad(tmp_path, change(good))


def test_a_layout_names_fields_canonically_and_reads_them_from_any_config(tmp_path):
    path = tmp_path / "laid.toml"
    path.write_text(GOOD + LAYOUT.replace('color = "cell"', 'columns = "task.seq_len"') + 'x = "hidden_size"\nstat = "min"\n'
                    + 'marks = ["baseline", { value = 0.25, label = "paper" }]\n')
    layout = presets.load(path).layout
    assert layout.columns == "task.seq_len"
    (panel,) = layout.panels
    assert (panel.x, panel.stat, panel.over_training) == ("cell.hidden_size", "min", False)
    assert [(mark.value, mark.label, mark.baseline) for mark in panel.marks] == [(None, "baseline", True),
                                                                               (0.25, "paper", False)]
    from stability import cells, sweeps

    base = presets.load("spectral-fig1").configs("classroom")["spectral"]
    # set through the sweep engine's own writer, read back by field_value
    for setting in ({"cell.r": 0.05}, {"task.seq_len": 17}, {"train.lr": 0.25}, {"cell.hidden_size": 12},
                    {"cell": "orthogonal"}):
        changed = sweeps.apply(base, setting)
        for path_, value in setting.items():
            assert field_value(changed, path_) == value
    rnn = sweeps.apply(base, {"cell": "rnn"})
    assert "nonlinearity" not in rnn.cell.options  # left out: the declared default is read
    assert field_value(rnn, "cell.nonlinearity") == cells.describe("rnn").option("nonlinearity").default
    assert field_value(rnn, "cell.m1") is None and field_value(None, "cell") is None


def test_without_a_layout_the_claims_metrics_are_drawn(tmp_path):
    text = (presets.PRESETS_DIR / "sgornn-table1.toml").read_text()
    path = tmp_path / "bare.toml"
    path.write_text(text[:text.index("[layout]")] if "[layout]" in text else text)
    preset = presets.load(path)
    assert preset.layout is None
    drawn = preset.drawn()
    assert [panel.metric for panel in drawn.panels] == presets.claim_metrics(preset)
    for panel in drawn.panels:
        assert panel.log == panel.metric.startswith(("grad/", "sv/"))
        assert bool(panel.marks) == panel.metric.endswith("/loss")


def test_unreadable_presets_are_one_line(tmp_path):
    assert "is not valid TOML" in _bad(tmp_path, "name = [")
    assert "is not valid JSON" in _bad(tmp_path, "{", ".json")
    assert "a preset is one object" in _bad(tmp_path, "[1, 2]", ".json")


def test_a_bad_sweep_preset_is_one_line(tmp_path):
    sweep = GOOD.replace(RUNS, "[sweep]\nbase = { cell = { name = \"rnn\", hidden_size = 4 } }\nvary = [\"colour=1,2\"]\n")
    assert "vary colour: unknown field" in _bad(tmp_path, sweep)
    assert "'sweep.base' must be a table (an object); got int" in _bad(tmp_path, sweep.replace(
        'base = { cell = { name = "rnn", hidden_size = 4 } }', "base = 5"))
    assert "names 'a'" in _bad(tmp_path, sweep.replace("colour=1,2", "lr=0.1,0.01"))
    path = tmp_path / "fine.toml"
    path.write_text(sweep.replace("colour=1,2", "lr=0.1,0.01").replace('run = "a"', 'run = "lr=0.1"'))
    assert presets.load(path).groups("paper") == ["lr=0.1", "lr=0.01"]


def test_an_unknown_preset_name_lists_the_shipped_ones():
    with pytest.raises(PresetError) as caught:
        presets.load("spectral-fig99")
    assert "unknown preset 'spectral-fig99'; available: " in str(caught.value)
    assert all(name in str(caught.value) for name in SHIPPED)


@pytest.mark.parametrize("name, target", [("maso-fig4", "stability.sweeps.workers.train_trial"),
                                          ("sgornn-table1", "stability.training.run.build_and_train")])
def test_ctrl_c_leaves_the_run_stopped(name, target, store, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(target, interrupted)
    with pytest.raises(KeyboardInterrupt):
        presets.run(presets.load(name), store, override=TINY)
    (record,) = store.records()
    assert record.status == "stopped" and "keyboard" in record.error
    if record.sweep_id is not None:
        assert store.sweep(record.sweep_id).status == "stopped"


def test_trainable_params_leave_out_a_frozen_recurrent_matrix(store, tmp_path):
    path = tmp_path / "frozen.toml"
    path.write_text(GOOD.replace(RUNS, RUNS + RUNS.replace('name = "a"', 'name = "b"').replace(
        "seq_len = 5 } }", "seq_len = 5 } }\ntrain = { freeze_recurrent = true }")).replace(
        'metric = "val/loss"\nop = "<"\nthan = 0.5', 'metric = "trainable_params"\nop = ">"\nthan = { run = "b" }'))
    preset = presets.load(path)
    ids = []
    for name, config in preset.configs("classroom").items():
        run_id = store.create_run(config.to_dict())
        store.update_run(run_id, total_params=100, recurrent_params=30)
        ids.append(run_id)
    (verdict,) = presets.verdicts(preset, store, ids)
    assert (verdict.ours, verdict.reference, verdict.held) == (100, 70, True)  # b trains 100 - 30


# ------------------------------------------------------------------ needs paper scale, a run's grid
NEEDS = GOOD.replace('than = 0.5', 'than = 0.5\nneeds = { scale = "paper", why = "the long runs show it" }')


def _finished(store, preset, losses: dict[str, float]) -> list[int]:
    ids = []
    for name, config in preset.configs("classroom").items():
        run_id = store.create_run(config.to_dict())
        store.flush(run_id, [(step, float(step), "val/loss", losses[name]) for step in (0, 5)])
        set_status(store, run_id, "completed")
        ids.append(run_id)
    return ids


def test_a_claim_that_needs_the_paper_scale_is_placed_not_failed(store, tmp_path):
    path = tmp_path / "needs.toml"
    path.write_text(NEEDS)
    preset = presets.load(path)
    assert (preset.claims[0].needs, preset.claims[0].needs_why) == ("paper", "the long runs show it")
    ids = _finished(store, preset, {"a": 0.9})
    (placed,) = presets.verdicts(preset, store, ids, scale="classroom")
    assert (placed.held, placed.outcome, placed.ours) == (None, "needs paper scale", 0.9)
    assert "the long runs show it" in placed.why and "0.9" in placed.why
    assert placed.to_dict()["outcome"] == "needs paper scale"
    assert presets.Verdict.from_dict(json.loads(json.dumps(placed.to_dict()))) == placed
    (judged,) = presets.verdicts(preset, store, ids, scale="paper")  # at the scale it needs: judged as any
    assert (judged.held, judged.outcome) == (False, "did not hold")
    store2_ids = _finished(store, preset, {"a": 0.1})
    (held,) = presets.verdicts(preset, store, store2_ids, scale="classroom")
    assert (held.held, held.outcome) == (True, "held")


@pytest.mark.parametrize("needs, expected", [
    ('{ scale = "classroom", why = "w" }', "needs takes scale (one of paper)"),
    ('{ scale = "paper" }', "needs takes scale"),
    ('{ scale = "paper", why = "w", when = 1 }', "when"),
])
def test_a_malformed_needs_is_one_line(tmp_path, needs, expected):
    assert expected in _bad(tmp_path, GOOD.replace("than = 0.5", f"than = 0.5\nneeds = {needs}"))


def test_a_run_grid_trains_its_own_combinations_and_a_scale_may_change_it(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(GOOD.replace(RUNS, RUNS + 'vary = ["lr=1e-3,1e-2", "cell.hidden_size=4,8"]\n').replace(
        '[scales.paper]', '[scales.paper]\nruns = { a = { vary = ["lr=1e-3", "cell.hidden_size=8"] } }').replace(
        'run = "a"', 'run = "a lr=0.001 cell.hidden_size=8"\nneeds = { scale = "paper", why = "w" }'))
    preset = presets.load(path)
    assert preset.run_names() == ["a"]
    configs = preset.configs("classroom")
    assert sorted(configs) == sorted(f"a lr={lr} cell.hidden_size={n}" for lr in (0.001, 0.01) for n in (4, 8))
    one = configs["a lr=0.001 cell.hidden_size=8"]
    assert (one.train.lr, one.cell.hidden_size, one.name) == (1e-3, 8, "x/a lr=0.001 cell.hidden_size=8")
    assert list(preset.configs("paper")) == ["a lr=0.001 cell.hidden_size=8"] and preset.run_count("paper") == 1
    assert preset.run_count("classroom") == 4 and preset.groups("classroom") == list(configs)


def test_table3_is_its_48_cells_each_optimizer_at_its_own_rates():
    preset = presets.load("maso-table3")
    configs = preset.configs("paper")
    assert len(configs) == 48
    rates = {"rmsprop": {1e-5, 1e-4, 1.5e-4, 2e-4}, "sgd": {1e-7, 1e-6, 1.25e-6, 1.5e-6}}
    for optimizer, lrs in rates.items():
        cells = {(c.train.lr, c.cell.options["h0_noise_std"]) for c in configs.values()
                 if c.train.optimizer == optimizer}
        assert cells == {(lr, sigma) for lr in lrs for sigma in (0, 0.001, 0.01, 0.1, 1, 5)}
    assert set(preset.groups("classroom")) <= set(configs)  # classroom trains some of Table 3's own cells


# ------------------------------------------------------------------ measured results as data
def test_reproduce_json_is_what_save_writes_and_the_loader_reads_back(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from stability.presets import measured

    path = tmp_path / "tiny.toml"
    path.write_text(NEEDS.replace('[scales.classroom]\nnote = "n"', '[scales.classroom]\nnote = "n"\n'
                                  'override = { train = { steps = 3, batch_size = 4, eval_every = 3 } }'))
    saved = tmp_path / "tiny.classroom.json"
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "stability", "reproduce", "--store", str(tmp_path / "r.db"),
                           str(path), "--json", "--save", str(saved)], cwd=root, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert measured.read(saved) == printed
    assert tuple(printed) == measured.KEYS and printed["schema"] == measured.SCHEMA
    assert str(tmp_path) not in saved.read_text(encoding="utf-8")  # shipped as it is: no folder of this machine
    (verdict,) = printed["verdicts"]
    assert printed["counts"] == measured.counts(printed["verdicts"])
    assert printed["counts"][verdict["outcome"]] == 1 and printed["counts"]["claims"] == 1
    cost = printed["measured"]
    assert cost["cpu_seconds"] > 0 and cost["wall_seconds"] > 0 and cost["cores"] >= 1
    assert printed["runs"] == [{"id": printed["run_ids"][0], "name": "a", "status": "completed", "step": 3}]


def _saved_results():
    from stability.presets import measured

    return sorted(measured.MEASURED_DIR.glob("*.json")) if measured.MEASURED_DIR.is_dir() else []


@pytest.mark.parametrize("path", _saved_results(), ids=lambda path: path.name)
def test_every_saved_result_is_of_its_preset_as_it_is(path):
    """A saved result reads back, its counts are its verdicts', its claims are the preset's claims today."""
    from stability.presets import measured

    data = measured.read(path)
    assert path.name == f"{data['preset']}.{data['scale']}.json"
    assert data["counts"] == measured.counts(data["verdicts"])
    preset = presets.load(data["preset"])
    assert [v["claim"] for v in data["verdicts"]] == [claim.text for claim in preset.claims]
    assert sorted(run["name"] for run in data["runs"]) == sorted(preset.groups(data["scale"]))


def test_the_readme_table_is_the_generators_output():
    """README's presets table is ``python -m stability reproduce --table``, from the saved results."""
    from pathlib import Path

    from stability.presets import measured

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    begin, end = "<!-- presets table: python -m stability reproduce --table -->", "<!-- end of the presets table -->"
    assert begin in readme and end in readme
    assert readme.split(begin, 1)[1].split(end, 1)[0].strip() == measured.table("classroom")
    for info in presets.available():
        data = measured.load(info.name, "classroom")
        if data is not None:
            count = data["counts"]
            assert f"| `{info.name}` |" in readme and f"| {count['held']} of {count['claims']} |" in readme


def test_a_verdict_table_writes_values_one_way_in_the_cli_and_on_the_page():
    """presets.verdict_value: the CLI's reproduce table and the Reproduce page's (each had its own)."""
    from stability.presets import verdict_value

    assert [verdict_value(v) for v in (None, 16899.0, 0.012345, float("nan"), 3, "10 log 8 / (T + 20)")] == [
        "-", "16899", "0.01235", "nan", "3", "10 log 8 / (T + 20)"]
