"""``python -m stability``: every command run as a user would, in a subprocess, on a tiny adding problem."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stability import cells, tasks
from stability.__main__ import ProgressLine
from stability.store import TERMINAL, RunStore

REPO = Path(__file__).resolve().parent.parent
TINY = ["--cell", "rnn", "--hidden-size", "8", "--seq-len", "10", "--steps", "30", "--log-every", "3",
        "--batch-size", "16", "--eval-examples", "32", "--probe-examples", "4"]


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "stability", *args]


def environment(store: Path) -> dict[str, str]:
    return {**os.environ, "STABILITY_STORE": str(store), "STABILITY_OFFLINE": "1"}


def cli(*args: str, store: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args), cwd=REPO, env=environment(store),
                          capture_output=True, text=True, timeout=180)


def strict_json(text: str):
    """Parse ``text`` as exactly one JSON value; NaN and Infinity are not JSON."""
    def reject(constant):
        raise ValueError(f"{constant} is not valid JSON")

    return json.loads(text, parse_constant=reject)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("cli") / "runs.db"


@pytest.fixture(scope="module")
def trained(store):
    """One tiny foreground run with --json."""
    result = cli("train", *TINY, "--name", "tiny", "--json", store=store)
    assert result.returncode == 0, result.stderr
    return strict_json(result.stdout), result


def test_cells_lists_every_cell_with_its_description(store):
    result = cli("cells", store=store)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == cells.available()
    assert all(cells.DESCRIPTIONS[line.split()[0]] in line for line in lines)


def test_tasks_lists_every_task_with_metric_and_paper(store):
    result = cli("tasks", store=store)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == tasks.available()
    for line in lines:
        described = tasks.describe(line.split()[0])
        assert line.split()[1] == described["metric"] and described["paper"] in line


def test_train_json_prints_one_object_with_the_final_metrics(store, trained):
    summary, result = trained
    assert set(summary) == {"run_id", "status", "final"}
    assert summary["status"] == "completed"
    with RunStore(store) as opened:
        run = opened.run(summary["run_id"])
        assert summary["final"] == pytest.approx(opened.latest(summary["run_id"]))
    assert run["status"] == "completed" and run["name"] == "tiny"
    assert run["config"]["task"]["options"] == {"seq_len": 10}
    assert run["config"]["train"]["steps"] == 30
    assert 0 < summary["final"]["test/mse"] < 1
    assert "step 30/30" in result.stderr  # progress goes to stderr


def test_foreground_train_shows_progress_and_a_summary(store):
    result = cli("train", *TINY, store=store)
    assert result.returncode == 0, result.stderr
    progress = [line for line in result.stderr.splitlines() if line.startswith("step ")]
    assert 2 <= len(progress) <= 11 and "ETA" in progress[-1] and "steps/s" in progress[-1]
    assert "completed" in result.stdout and "test/mse" in result.stdout and "baseline 0.1667" in result.stdout
    assert str(store) in result.stdout


def test_a_diverging_run_exits_1_with_valid_json(store):
    result = cli("train", *TINY, "--cell-option", "nonlinearity=relu", "--lr", "1e6", "--json", store=store)
    assert result.returncode == 1, result.stderr
    summary = strict_json(result.stdout)
    assert summary["status"] == "diverged"


def test_runs_show_and_export(store, trained):
    run_id = trained[0]["run_id"]
    runs = cli("runs", store=store)
    assert runs.returncode == 0
    header, *rows = runs.stdout.splitlines()
    assert header.split() == ["id", "name", "status", "cell", "task", "step", "final", "created"]
    row = next(line.split() for line in rows if line.split()[0] == str(run_id))
    assert row[1:6] == ["tiny", "completed", "rnn", "adding", "30/30"]
    assert "test mse" in " ".join(row)

    show = cli("show", str(run_id), store=store)
    assert show.returncode == 0
    assert show.stdout.splitlines()[0] == f"run {run_id} 'tiny': completed"
    assert '"hidden_size": 8' in show.stdout and "test/mse" in show.stdout

    exported = cli("export", str(run_id), store=store)
    assert exported.returncode == 0
    table = list(csv.reader(io.StringIO(exported.stdout)))
    assert exported.stdout.splitlines()[0] == "run_id,step,wall_time,name,value"
    with RunStore(store) as opened:
        assert len(table) - 1 == len(opened.metrics(run_id))
    output = store.parent / "export.csv"
    assert cli("export", str(run_id), "--output", str(output), store=store).returncode == 0
    assert output.read_text() == exported.stdout


def test_background_run_then_stop(store):
    result = cli("train", *TINY, "--steps", "100000", "--background", store=store)
    assert result.returncode == 0, result.stderr
    run_id = int(result.stdout)
    with RunStore(store) as opened:
        deadline = time.monotonic() + 60
        while opened.run(run_id)["status"] != "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert opened.run(run_id)["status"] == "running"
        stopped = cli("stop", str(run_id), store=store)
        assert (stopped.returncode, stopped.stdout.strip()) == (0, "stopped")
        assert opened.run(run_id)["status"] in TERMINAL


BAD_INPUTS = {
    "unknown cell": (["train", "--cell", "nope"], "cell must be one of"),
    "unknown task": (["train", "--task", "nope"], "task must be one of"),
    "negative lr": (["train", "--lr", "-1"], "lr must be a positive number"),
    "unknown cell option": (["train", "--cell-option", "bogus=1"], "unknown cell option(s) bogus"),
    "odd vprnn size": (["train", "--cell", "vprnn", "--hidden-size", "7"], "hidden_size must be even"),
    "malformed option": (["train", "--task-option", "seq_len"], "KEY=VALUE"),
    "not a number": (["train", "--steps", "many"], "--steps"),
    "missing argument": (["show"], "required"),
    "missing command": ([], "required"),
    "unknown flag": (["train", "--bogus"], "--bogus"),
    "unknown run": (["show", "9999"], "no run with id 9999"),
    "export unknown run": (["export", "9999"], "no run with id 9999"),
    "stop unknown run": (["stop", "9999"], "no run with id 9999"),
    "missing dataset": (["train", "--task", "mnist", "--data-dir", "{empty}", "--steps", "5"], "downloads are off"),
}


@pytest.fixture(scope="module")
def bad_results(store):
    """Every bad input at once (each is a fresh interpreter importing torch: run them side by side)."""
    empty = store.parent / "no-data"
    empty.mkdir(exist_ok=True)
    processes = {label: subprocess.Popen(command(*[arg.format(empty=empty) for arg in args]),
                                         cwd=REPO, env=environment(store), stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
                 for label, (args, _) in BAD_INPUTS.items()}
    return {label: (*process.communicate(timeout=180), process.returncode) for label, process in processes.items()}


@pytest.mark.parametrize("label", list(BAD_INPUTS))
def test_bad_input_exits_2_with_one_line(bad_results, label):
    stdout, stderr, returncode = bad_results[label]
    assert returncode == 2
    assert stdout == ""
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("stability: error: ") and "Traceback" not in stderr
    assert BAD_INPUTS[label][1] in stderr


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def _progress(step, total=100):
    return {"step": step, "total_steps": total, "elapsed_s": 1.0, "eta_s": 61.0, "steps_per_s": 50.0,
            "train/loss": 0.5, "train/mse": 0.5}


def test_progress_line_rewrites_itself_on_a_terminal():
    stream = _Stream(tty=True)
    line = ProgressLine("mse", stream)
    for step in range(1, 101):
        line(_progress(step))
    line.finish()
    text = stream.getvalue()
    assert text.count("\r") == 100 and text.count("\n") == 1
    assert "step 100/100" in text and "ETA 1:01" in text


def test_progress_line_prints_every_tenth_when_not_a_terminal():
    stream = _Stream(tty=False)
    line = ProgressLine("mse", stream)
    for step in range(1, 101):
        line(_progress(step) | ({"val/mse": 0.25} if step == 50 else {}))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 11 and "\r" not in stream.getvalue()  # the first, then every tenth
    assert lines[0].startswith("step 1/100") and lines[-1].startswith("step 100/100")
    assert "val mse 0.25" in lines[-1]


def test_freeze_recurrent_flag_reaches_the_stored_config(store):
    result = cli("train", *TINY, "--freeze-recurrent", "--steps", "3", "--json", store=store)
    assert result.returncode == 0, result.stderr
    run_id = strict_json(result.stdout)["run_id"]
    with RunStore(store) as runs:
        assert runs.run(run_id)["config"]["train"]["freeze_recurrent"] is True
        names = set(runs.metrics(run_id)["name"])
    assert "grad/recurrent_norm" not in names and "grad/h0_norm" in names
