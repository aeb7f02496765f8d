"""The Reproduce page through Streamlit's AppTest on a temp store: the gallery of shipped presets, a preset
whose runs were written through the store with chosen rows (the verdicts on the page are the ones those rows
imply), Run starting the classroom-scale runs in the background, and a link naming a preset that is not there."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from stability import presets
from stability.runs.status import ACTIVE_STATUSES
from stability.workers import scheduler
from statuses import set_status

PAGE = Path(__file__).resolve().parent.parent / "pages" / "reproduce.py"


def run(**query):
    app = AppTest.from_file(str(PAGE), default_timeout=60)
    for key, value in query.items():
        app.query_params[key] = value
    return app.run()


def test_the_gallery_lists_every_shipped_preset_with_its_paper_and_figure(store):
    app = run()
    assert not app.exception
    shown = " ".join(markdown.value for markdown in app.markdown)
    infos = presets.available()
    assert len(infos) >= 4
    for info in infos:
        assert info.title in shown and info.figure in shown
    app.button(key=f"open_{infos[0].name}").click().run()
    assert app.query_params["preset"] == infos[0].name and app.subheader[0].value == infos[0].title


def write_fig1_runs(store, rnn_loss, spectral_loss):
    """The four runs of spectral-fig1, finished, with chosen final losses and gradients."""
    preset = presets.load("spectral-fig1")
    ids = {}
    for name, config in preset.configs("classroom").items():
        run_id = store.create_run(config.to_dict())
        loss = {"rnn": rnn_loss, "lstm": 0.166, "spectral": spectral_loss, "orthogonal": 0.05}[name]
        h0 = {"rnn": 1e-30, "lstm": 1e-15}.get(name, 1e-2)
        store.flush(run_id, [(step, float(step), metric, value) for step in (0, 750, 1500) for metric, value in
                             (("val/loss", loss), ("grad/h0_norm", h0), ("sv/margin", 0.005))])
        store.update_run(run_id, baseline=1 / 6, baseline_label="memoryless", metric="mse", total_steps=1500,
                         step=1500)
        set_status(store, run_id, "completed")
        ids[name] = run_id
    return ids


def verdicts_on(app):
    (table,) = [frame.value for frame in app.dataframe if "verdict" in frame.value.columns]
    return dict(zip(table["claim"], table["verdict"]))


def test_the_verdicts_on_the_page_follow_the_stored_rows(store):
    ids = write_fig1_runs(store, rnn_loss=0.165, spectral_loss=0.02)
    app = run(preset="spectral-fig1", runs=",".join(map(str, ids.values())))
    assert not app.exception
    shown = verdicts_on(app)
    assert shown["RNN's final validation MSE stays within 10% of the 0.167 baseline"] == "held"
    assert shown["Spectral-RNN's final validation MSE is below half the baseline"] == "held"
    assert shown["RNN's ‖∂L/∂h0‖ has vanished (< 1e-10) at the last probe"] == "held"
    assert len(app.get("vega_lite_chart")) == len(set(["val/loss", "grad/h0_norm", "sv/margin"]))
    happening = next(block.value for block in app.markdown if block.value.startswith("**What is happening**"))
    rnn_line = next(line for line in happening.split("\n") if line.startswith("**rnn**") or "rnn" in line.split(":")[0])
    assert "1e-10" in rnn_line  # the rnn's stored gradient (1e-30) reads as vanishing, in words

    other = write_fig1_runs(store, rnn_loss=0.02, spectral_loss=0.16)  # the opposite outcome
    shown = verdicts_on(run(preset="spectral-fig1", runs=",".join(map(str, other.values()))))
    assert shown["RNN's final validation MSE stays within 10% of the 0.167 baseline"] == "did not hold"
    assert shown["Spectral-RNN's final validation MSE is below half the baseline"] == "did not hold"


def test_run_starts_the_classroom_runs_in_the_background(store):
    app = run(preset="kru-copy")
    preset = presets.load("kru-copy")
    if preset.is_sweep:
        pytest.skip("kru-copy became a sweep preset")
    app.button(key="reproduce_run").click().run()
    assert not app.exception
    ids = [int(text) for text in app.query_params["runs"].split(",")]
    try:
        records = [store.record(run_id) for run_id in ids]
        expected = preset.configs("classroom")
        assert [record.name for record in records] == [config.name for config in expected.values()]
        assert [record.config for record in records] == list(expected.values())
        assert app.query_params["scale"] == "classroom"
    finally:
        for run_id in ids:
            if store.record(run_id).status in ACTIVE_STATUSES:
                scheduler.stop_run(run_id, store.path)


def test_a_link_to_an_unknown_preset_is_one_warning_and_the_gallery(store):
    app = run(preset="no-such-figure")
    assert not app.exception
    assert "no preset 'no-such-figure'" in app.warning[0].value
    assert any("Open" == button.label for button in app.button)


def test_the_figure_follows_the_layout_and_the_classroom_view_explains_it_without_controls(store):
    ids = write_fig1_runs(store, rnn_loss=0.165, spectral_loss=0.02)
    link = {"preset": "spectral-fig1", "runs": ",".join(map(str, ids.values()))}
    layout = presets.load("spectral-fig1").drawn()
    app = run(**link)
    assert not app.exception
    assert len(app.get("vega_lite_chart")) == len(layout.panels)  # one column: a chart per panel
    assert [button.key for button in app.button if button.key and button.key.startswith("reproduce_")] == [
        "reproduce_run", "reproduce_gallery", "reproduce_stop"]
    normal_words = " ".join(block.value for block in app.markdown)

    from stability.charts.classroom import explanation

    projector = run(**link, classroom="1")
    assert not projector.exception
    assert not [button for button in projector.button if button.key and button.key.startswith("reproduce_")]
    assert not projector.radio  # no scale to pick: the link names the runs
    assert len(projector.get("vega_lite_chart")) == len(layout.panels)
    words = " ".join(block.value for block in projector.markdown)
    for panel in layout.panels:  # beside each panel, what to look at in it (only in the classroom view)
        assert explanation(panel.metric) in words and explanation(panel.metric) not in normal_words
    equations = " ".join(block.value for block in projector.get("latex"))
    assert "Householder" in equations or r"\mathcal{H}" in equations  # the cells' own equations
    assert verdicts_on(projector) == verdicts_on(app)


def test_the_gallerys_counts_and_times_are_the_saved_measurements(store):
    """Each preset with a saved classroom result (stability/presets/measured/) shows that file's verdict
    counts and its CPU and wall minutes; one without says nothing measured."""
    from stability.presets import measured

    app = run()
    assert not app.exception
    shown = " ".join(caption.value for caption in app.caption)
    saved = 0
    for info in presets.available():
        data = measured.load(info.name, "classroom")
        if data is None:
            continue
        saved += 1
        count, cost = data["counts"], data["measured"]
        assert f"{count['held']} of {count['claims']} claims held" in shown
        assert f"{cost['cpu_seconds'] / 60:.1f} CPU min, {cost['wall_seconds'] / 60:.1f} min wall" in shown
    assert shown.count("measured at classroom scale") == saved


def test_the_gallery_says_what_each_paper_scale_costs_from_its_gpu_timing(store):
    """stability/presets/measured/gpu/paper-cost.json (benchmarks/paper_scale.py --save, Note [Paper cost]):
    every preset it has is a shipped preset with as many paper-scale runs today, and the gallery shows its
    hours as the file has them."""
    import json

    from stability.presets import measured

    data = json.loads(measured.PAPER_COST.read_text())
    shipped = {info.name for info in presets.available()}
    assert {row["preset"] for row in data["rows"]} <= shipped and data["rows"]
    for row in data["rows"]:
        assert row["runs"] == presets.load(row["preset"]).run_count("paper"), row["preset"]
        assert row["seconds"] > 0 and row["slowest"][1] <= row["seconds"]
    app = run()
    assert not app.exception
    shown = [caption.value for caption in app.caption if caption.value.startswith("paper scale: ~")]
    assert len(shown) == len(data["rows"])
    for row in data["rows"]:
        assert any(f"~{row['seconds'] / 3600:.2g} h of training steps on {data['device']}, its {row['runs']} runs"
                   in line for line in shown)


def test_a_missing_or_damaged_paper_cost_file_says_nothing(tmp_path):
    from stability.presets import measured

    assert measured.paper_cost("kru-fig6", tmp_path / "none.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert measured.paper_cost("kru-fig6", tmp_path / "bad.json") is None
