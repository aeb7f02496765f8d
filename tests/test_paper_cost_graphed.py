"""Issue 32, item 4: a preset's paper-scale cost timed eager and graphed (benchmarks/paper_scale.py), read by the
gallery's line (stability.presets.measured.paper_cost_line, Note [Paper cost]), the presets that fit in a GPU
session's seconds picked by benchmarks/paper_fit.py, and a saved paper-scale result shown in the gallery beside
the classroom one. On the CPU: the graphed figure is absent there and the table says why; CUDA's own numbers
come from benchmarks/gpu_check.sh on a lent GPU."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stability import presets
from stability.presets import measured

ROOT = Path(__file__).resolve().parent.parent
TINY = """
name = "tiny-paper"
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
override = { train = { steps = 1000, batch_size = 4 } }
[[claims]]
text = "c"
run = "a"
metric = "val/loss"
op = "<"
than = 0.5
"""


def _benchmark(name: str):
    """benchmarks/NAME.py as a module (the folder is no package)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ benchmarks/paper_scale.py on the CPU
def test_paper_scale_on_the_cpu_saves_eager_seconds_and_says_why_there_is_no_graphed_figure(tmp_path):
    """A shipped preset (kru-fig6, 7 shapes) and a file's tiny one, one step a shape: every row has its eager
    seconds, ``graphed_seconds`` null and "no CUDA"; the saved command names no folder of this machine; the
    gallery's reader reads it back as an eager-only line."""
    (tmp_path / "tiny.toml").write_text(TINY)
    saved = tmp_path / "cost.json"
    done = subprocess.run([sys.executable, "benchmarks/paper_scale.py", "--device", "cpu", "--steps", "1",
                           "kru-fig6", str(tmp_path / "tiny.toml"), "--save", str(saved)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "| projected eager | projected graphed |" in done.stdout and "- (no CUDA)" in done.stdout
    data = json.loads(saved.read_text())
    assert data["schema"] == measured.PAPER_COST_SCHEMA and data["device"].startswith("cpu")
    assert str(saved) not in data["command"] and data["command"].endswith("--save")  # where it wrote: not kept
    rows = {row["preset"]: row for row in data["rows"]}
    assert set(rows) == {"kru-fig6", "tiny-paper"}
    assert rows["kru-fig6"]["runs"] == presets.load("kru-fig6").run_count("paper")
    for name, row in rows.items():
        assert row["failed"] == [] and row["seconds"] > 0 and 0 < row["slowest"][1] <= row["seconds"], name
        assert row["graphed_seconds"] is None and row["graphed_slowest"] is None, name
        assert row["graphed_note"] == "no CUDA", name
        cost = measured.paper_cost(name, saved)
        assert cost["seconds"] == row["seconds"] and cost["graphed_seconds"] is None
        line = measured.paper_cost_line(name, saved)
        assert line.startswith(f"paper scale: ~{row['seconds'] / 3600:.2g} h of training steps on {data['device']}, "
                               f"its {row['runs']} runs") and "graphed" not in line


def test_the_graphed_timing_says_why_it_has_no_figure_and_times_replays_on_cuda():
    """graphed_seconds_per_step: "no CUDA" on the CPU, "train.cuda_graphs is off" before touching a GPU, and on a
    CUDA device either a replay's seconds (a GPU here) or a one-line reason, never an exception."""
    paper_scale = _benchmark("paper_scale")
    config = presets.load("spectral-fig1").all_configs("paper")[0]
    assert paper_scale.graphed_seconds_per_step(config, torch.device("cpu"), 1) == (None, "no CUDA")
    config.train.cuda_graphs = False
    assert paper_scale.graphed_seconds_per_step(config, torch.device("cuda"), 1) == (None, "train.cuda_graphs is off")
    config.train.cuda_graphs = True
    config.cell.hidden_size, config.task.options["seq_len"], config.train.batch_size = 8, 5, 4
    seconds, why = paper_scale.graphed_seconds_per_step(config, torch.device("cuda"), 2)
    if torch.cuda.is_available():
        assert why is None and seconds > 0
    else:
        assert seconds is None and why.startswith("could not be graphed (") and "\n" not in why


# ------------------------------------------------------------------ the gallery's line (measured.paper_cost_line)
def _table(path: Path, rows: list[dict], schema: int = 1) -> Path:
    path.write_text(json.dumps({"schema": schema, "device": "cuda (a GPU)", "torch": "2.x", "when": "2026-11-28",
                                "command": "python benchmarks/paper_scale.py --save", "what": "steps", "rows": rows}))
    return path


def test_an_eager_only_table_reads_as_before(tmp_path):
    """A schema-1 table without graphed keys (as the shipped one of 2026-11-26): the line as it always was."""
    path = _table(tmp_path / "eager.json", [{"preset": "kru-fig6", "runs": 7, "shapes": 7, "steps": 70000,
                                             "seconds": 7200.0, "slowest": ["kru T=100", 1800.0], "failed": []}])
    cost = measured.paper_cost("kru-fig6", path)
    assert (cost["seconds"], cost["graphed_seconds"], cost["graphed_slowest"], cost["graphed_note"]) == (
        7200.0, None, None, None)
    assert measured.paper_cost_line("kru-fig6", path) == (
        "paper scale: ~2 h of training steps on cuda (a GPU), its 7 runs one after another (the longest, "
        "kru T=100, 0.5 h)")
    assert measured.paper_cost("kru-copy", path) is None and measured.paper_cost_line("kru-copy", path) == ""


def test_a_graphed_figure_leads_the_line_with_the_eager_one_beside_it(tmp_path):
    path = _table(tmp_path / "graphed.json", [
        {"preset": "kru-fig6", "runs": 7, "shapes": 7, "steps": 70000, "seconds": 7200.0,
         "slowest": ["kru T=100", 1800.0], "failed": [], "graphed_seconds": 720.0,
         "graphed_slowest": ["kru T=100", 180.0], "graphed_note": None},
        {"preset": "kru-copy", "runs": 4, "shapes": 3, "steps": 80000, "seconds": 3600.0,
         "slowest": ["kru T=1000", 1800.0], "failed": [], "graphed_seconds": None, "graphed_slowest": None,
         "graphed_note": "trains eagerly: some reason"}])
    cost = measured.paper_cost("kru-fig6", path)
    assert (cost["graphed_seconds"], cost["graphed_slowest"]) == (720.0, ("kru T=100", 180.0))
    assert measured.paper_cost_line("kru-fig6", path) == (
        "paper scale: ~0.2 h of training steps on cuda (a GPU) graphed (~2 h eager), its 7 runs one after "
        "another (the longest, kru T=100, 0.05 h graphed)")
    assert measured.paper_cost("kru-copy", path)["graphed_note"] == "trains eagerly: some reason"
    assert measured.paper_cost_line("kru-copy", path).startswith("paper scale: ~1 h of training steps on cuda (a GPU), "
                                                                 "its 4 runs")
    other = _table(tmp_path / "other.json", [{"preset": "kru-fig6", "runs": 7, "seconds": 1.0, "slowest": ["x", 1.0],
                                              "failed": []}], schema=3)
    assert measured.paper_cost("kru-fig6", other) is None  # a schema this reader does not know: nothing said


# ------------------------------------------------------------------ benchmarks/paper_fit.py
def test_the_selector_takes_the_smallest_that_fit_and_leaves_out_what_reads_a_missing_data_set(
        tmp_path, monkeypatch, capsys):
    """Graphed seconds where there are some, else eager, times the factor; smallest first while they fit
    together; a preset whose task reads MNIST or HAR-2 is left out where the data cache lacks their files."""
    monkeypatch.setenv("STABILITY_DATA", str(tmp_path / "empty-cache"))
    paper_fit = _benchmark("paper_fit")
    row = {"runs": 1, "shapes": 1, "steps": 1, "slowest": ["x", 1.0], "failed": []}
    path = _table(tmp_path / "cost.json", [
        {**row, "preset": "spectral-fig1", "seconds": 1000.0, "graphed_seconds": 100.0},  # 200 s graphed x2
        {**row, "preset": "maso-fig4", "seconds": 50.0},                                  # 100 s (schema-1 row)
        {**row, "preset": "kru-fig6", "seconds": 9000.0, "graphed_seconds": 400.0},       # 800 s: over
        {**row, "preset": "spectral-fig5", "seconds": 10.0, "graphed_seconds": 5.0},      # MNIST: left out
        {**row, "preset": "sgornn-fig4", "seconds": 10.0},                                # HAR-2 (auto): left out
        {**row, "preset": "kru-copy", "seconds": 0.0, "failed": ["kru: out of memory"]},  # not timed
        {**row, "preset": "no-such-preset", "seconds": 1.0}])
    said = []
    assert paper_fit.fitting(path, 800, 2.0, say=said.append) == [("maso-fig4", 100), ("spectral-fig1", 200)]
    text = "\n".join(said)
    assert "spectral-fig5: its task mnist reads a data set" in text and "sgornn-fig4: its task har2" in text
    assert "kru-fig6: needs ~800 s" in text and "kru-copy: not timed in the table (kru: out of memory)" in text
    assert "no-such-preset: not a shipped preset" in text
    assert paper_fit.fitting(path, 1200, 2.0) == [("maso-fig4", 100), ("spectral-fig1", 200), ("kru-fig6", 800)]
    assert paper_fit.fitting(path, 50, 2.0) == []
    assert paper_fit.main(["--cost", str(path), "--budget-s", "350"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["maso-fig4 100", "spectral-fig1 200"] and "left out kru-fig6" in err
    assert paper_fit.main(["--cost", str(tmp_path / "none.json"), "--budget-s", "350"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "cannot read the paper-cost table" in err


# ------------------------------------------------------------------ a saved paper-scale result in the gallery
def test_a_result_records_the_devices_its_runs_trained_on(store):
    preset = presets.load("spectral-fig1")
    config = preset.configs("paper")["rnn"]
    run_id = store.create_run(config.to_dict())  # named as the preset names it: its group is "rnn"
    line = "cuda (NVIDIA H200); tf32 · graphed: each training step replayed as one CUDA graph after 3 eager steps"
    store.update_run(run_id, device=line)
    data = measured.result(preset, "paper", store, [run_id], [], measured.Clock())
    assert data["measured"]["devices"] == [line] and data["runs"][0]["name"] == "rnn"
    assert tuple(data) == measured.KEYS


def test_the_gallery_shows_a_saved_paper_scale_result_beside_the_classroom_one(store, tmp_path, monkeypatch):
    """measured/NAME.paper.json (reproduce NAME --scale paper --json --save on a GPU): its counts and wall minutes
    on its runs' device, beside the classroom line; a preset without one shows none."""
    from streamlit.testing.v1 import AppTest

    classroom = measured.load("spectral-fig1", "classroom")
    assert classroom is not None
    paper = json.loads(json.dumps(classroom))  # a result of this preset's claims, placed as a paper one
    paper["scale"] = "paper"
    paper["verdicts"] = [{**verdict, "outcome": "did not hold"} for verdict in paper["verdicts"]][:1] + \
        paper["verdicts"][1:]
    paper["counts"] = measured.counts(paper["verdicts"])
    paper["measured"] = {**paper["measured"], "wall_seconds": 600.0,
                         "devices": ["cuda (NVIDIA H200); tf32 · graphed: each training step replayed"]}
    folder = tmp_path / "measured"
    folder.mkdir()
    (folder / "spectral-fig1.classroom.json").write_text(json.dumps(classroom))
    (folder / "spectral-fig1.paper.json").write_text(json.dumps(paper))
    monkeypatch.setattr(measured, "MEASURED_DIR", folder)
    app = AppTest.from_file(str(ROOT / "pages" / "reproduce.py"), default_timeout=60).run()
    assert not app.exception
    shown = [caption.value for caption in app.caption]
    count = paper["counts"]
    expected = (f"measured at paper scale: {count['held']} of {count['claims']} claims held · 10.0 min wall on "
                "cuda (NVIDIA H200) graphed")
    assert expected in shown
    assert sum(line.startswith("measured at paper scale") for line in shown) == 1
    assert sum(line.startswith("measured at classroom scale") for line in shown) == 1
    index = shown.index(expected)
    assert shown[index - 1].startswith("measured at classroom scale: "
                                       f"{classroom['counts']['held']} of {classroom['counts']['claims']}")
