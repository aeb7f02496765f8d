"""``python -m stability``: every command run as a user would, in a subprocess, on a tiny adding problem."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stability import cells, tasks
from stability.cli.output import ProgressLine
from stability.runs.status import TERMINAL
from stability.runs.store import RunStore

from store_files import corrupt
from statuses import set_status

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


def test_cells_lists_every_cell_with_its_summary(store):
    result = cli("cells", store=store)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == cells.available()
    assert all(cells.describe(line.split()[0]).summary in line for line in lines)


def test_tasks_lists_every_task_with_metric_and_paper(store):
    result = cli("tasks", store=store)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == tasks.available()
    for line in lines:
        described = tasks.describe(line.split()[0])
        assert line.split()[1] == described.metric and described.paper in line


def test_cells_name_shows_the_equations_paper_and_every_option_from_the_class(store):
    result = cli("cells", "spectral", store=store)
    assert result.returncode == 0, result.stderr
    info = cells.describe("spectral")
    text = result.stdout
    assert text.splitlines()[0] == f"spectral: {info.summary}" and f"paper: {info.paper}" in text
    assert all(equation in text for equation in info.equations)
    rows = {line.split()[0]: line for line in text.split("options:\n")[1].splitlines()}
    assert list(rows) == [option.name for option in info.options]
    assert "in [1, inf]" in rows["m1"] and "one of zero, learned, noisy" in rows["h0"]
    assert info.option("r").help in rows["r"]


def test_tasks_name_shows_required_options(store):
    result = cli("tasks", "ucr", store=store)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.split("options:\n")[1].splitlines()}
    assert "required" in rows["dataset"] and "= 0.2" in rows["val_fraction"]
    assert "metric: accuracy" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["cells", "nope"], "unknown cell 'nope'; valid cells: rnn,"),
    (["cells", "no_such_module_xyz:Cell"], "cannot import cell 'no_such_module_xyz:Cell': ModuleNotFoundError"),
    (["tasks", "stability.tasks:SPLITS"], "task 'stability.tasks:SPLITS' must be a subclass of stability.tasks.Task"),
    (["train", "--cell", "no_such_module_xyz:Cell"], "cannot import cell 'no_such_module_xyz:Cell'"),
    (["train", "--cell", "stability.cells.base:check_bool"], "must be a torch.nn.Module class"),
    (["train", "--task", "stability.tasks:nothing_here"], "module 'stability.tasks' has no 'nothing_here'"),
])
def test_a_bad_cell_or_task_path_is_one_line_and_exit_2(store, args, message):
    if args[:2] == ["train", "--cell"] and "xyz" in args[2]:  # one as a user runs it (IN_A_SUBPROCESS's reason)
        result = cli(*args, store=store)
        stdout, stderr, returncode = result.stdout, result.stderr, result.returncode
    else:
        stdout, stderr, returncode = in_process(args, store)
    assert returncode == 2 and stdout == ""
    assert stderr.startswith("stability: error: ") and message in stderr
    assert stderr.count("\n") == 1


def test_train_json_prints_one_object_with_the_final_metrics(store, trained):
    summary, result = trained
    assert set(summary) == {"run_id", "status", "final"}
    assert summary["status"] == "completed"
    with RunStore(store) as opened:
        run = opened.record(summary["run_id"], latest=False)
        assert summary["final"] == pytest.approx(opened.latest(summary["run_id"]))
    assert run.status == "completed" and run.name == "tiny"
    assert run.raw_config["task"]["options"] == {"seq_len": 10}
    assert run.raw_config["train"]["steps"] == 30
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
    assert header.split() == ["id", "name", "status", "cell", "task", "step", "final", "sweep", "created"]
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
        while opened.record(run_id, latest=False).status != "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert opened.record(run_id, latest=False).status == "running"
        stopped = cli("stop", str(run_id), store=store)
        assert (stopped.returncode, stopped.stdout.strip()) == (0, "stopped")
        assert opened.record(run_id, latest=False).status in TERMINAL


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
    # issue 10 §3: refused when submitted, foreground or background, before any run is stored
    "hidden size beyond memory": (["train", "--hidden-size", "1000000000"],
                                  "hidden_size 1000000000 of cell 'spectral' needs ~"),
    "activations beyond memory": (["train", "--cell", "rnn", "--seq-len", "1000000000000"], "of activations"),
    "run id beyond SQLite": (["show", "1180591620717411303424"], "no run with id 1180591620717411303424"),
    "stop id beyond SQLite": (["stop", "1180591620717411303424"], "no run with id 1180591620717411303424"),
    "seq-len 0": (["train", *TINY, "--seq-len", "0"], "seq_len must be an integer >= 2, got 0"),
    "seq-len -10": (["train", *TINY, "--seq-len", "-10"], "seq_len must be an integer >= 2, got -10"),
    "seq_len=abc": (["train", *TINY, "--task-option", "seq_len=abc"], "got 'abc'"),
    "seq_len=Infinity": (["train", *TINY, "--task-option", "seq_len=Infinity"], "got inf"),
    "copy lag 0": (["train", *TINY, "--task", "copy", "--seq-len", "0"], "seq_len (the time lag T)"),
    "train_size 0": (["train", *TINY, "--task-option", "train_size=0"], "train_size must be an integer >= 1"),
    "epochs on fresh data": (["train", *TINY, "--epochs", "1"], "epochs needs a fixed training set"),
    "unsafe UCR name": (["train", "--cell", "rnn", "--task", "ucr", "--task-option", "dataset=../../etc/passwd"],
                        "dataset must be a UCR dataset name"),
    "bad mnist option": (["train", "--cell", "rnn", "--task", "mnist", "--task-option", "pixels_per_step=5"],
                         "pixels_per_step must divide 784"),
    "background seq-len 0": (["train", *TINY, "--seq-len", "0", "--background"], "seq_len must be an integer"),
    "background seq_len=abc": (["train", *TINY, "--task-option", "seq_len=abc", "--background"], "got 'abc'"),
    "background epochs": (["train", *TINY, "--epochs", "1", "--background"], "epochs needs a fixed training set"),
    "background unsafe UCR name": (["train", "--cell", "rnn", "--task", "ucr", "--task-option", "dataset=../x",
                                    "--background"], "dataset must be a UCR dataset name"),
    "empty file as store": (["runs", "--store", "{empty_file}"], "is not a run store (an empty file)"),
    "1-byte file as store": (["train", *TINY, "--store", "{one_byte}"], "is not a run store (not an SQLite"),
}
# where the data is missing, the run is stored and fails when it starts (its data is looked for then)
STORES_A_RUN = {"missing dataset"}


@pytest.fixture(scope="module")
def bad_store(tmp_path_factory):
    return tmp_path_factory.mktemp("bad") / "runs.db"


# These few run as a user runs them, each a fresh `python -m stability`; the rest run in this process through
# the same `main(argv)` (a fresh interpreter importing torch is ~2 s of CPU each: ~30 of them were most of
# this file's time). Both paths print the same one line and exit 2.
IN_A_SUBPROCESS = {"unknown cell", "missing command", "1-byte file as store", "background seq-len 0"}


def in_process(args: list[str], store: Path) -> tuple[str, str, int]:
    """``stability.cli.main.main(args)`` here, as `python -m stability ARGS` would run: (stdout, stderr, exit
    status), argparse's own exit included."""
    from stability.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for name, value in environment(store).items():
            if os.environ.get(name) != value:
                patch.setenv(name, value)
        try:
            code = main(args)
        except SystemExit as exit_:
            code = exit_.code
    return out.getvalue(), err.getvalue(), code


@pytest.fixture(scope="module")
def bad_results(bad_store):
    """Every bad input: the subprocess ones side by side, then the rest in this process."""
    folder = bad_store.parent
    paths = {"empty": folder / "no-data", "empty_file": folder / "empty.db", "one_byte": folder / "one.db"}
    paths["empty"].mkdir(exist_ok=True)
    paths["empty_file"].write_bytes(b"")
    paths["one_byte"].write_bytes(b"x")
    argv = {label: [arg.format(**paths) for arg in args] for label, (args, _) in BAD_INPUTS.items()}
    processes = {label: subprocess.Popen(command(*argv[label]), cwd=REPO, env=environment(bad_store),
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for label in IN_A_SUBPROCESS}
    results = {label: in_process(args, bad_store) for label, args in argv.items() if label not in IN_A_SUBPROCESS}
    results |= {label: (*process.communicate(timeout=300), process.returncode) for label, process in processes.items()}
    assert paths["empty_file"].read_bytes() == b"" and paths["one_byte"].read_bytes() == b"x"  # never overwritten
    return results


@pytest.mark.parametrize("label", list(BAD_INPUTS))
def test_bad_input_exits_2_with_one_line(bad_results, label):
    stdout, stderr, returncode = bad_results[label]
    assert returncode == 2
    assert stdout == ""
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("stability: error: ") and "Traceback" not in stderr
    assert BAD_INPUTS[label][1] in stderr


def test_bad_input_stores_no_run(bad_results, bad_store):
    with RunStore(bad_store) as opened:
        stored = [json.dumps(dict(run.raw_config)) for run in opened.records(latest=False)]
    assert len(stored) == len(STORES_A_RUN) and all('"mnist"' in config for config in stored)


@pytest.mark.parametrize("where", ["all but the header", "the metric pages"])
def test_a_corrupted_store_is_one_line_naming_it_and_is_never_written(tmp_path, where):
    path = tmp_path / "runs.db"
    with RunStore(path) as opened:
        run_id = opened.create_run({"cell": {"name": "rnn"}, "task": {"name": "adding"}})
        opened.log(run_id, [(step, 0.0, "train/loss", step) for step in range(2000)])
        set_status(opened, run_id, "completed")  # nothing for `runs` to schedule
    corrupt(path, where)
    before = path.read_bytes()
    # `runs` and `show` read the runs and latest-value tables only: with just the metric pages
    # corrupted they still answer; whatever reads a corrupted page answers in one line
    readers = [["export", str(run_id)]]
    if where == "all but the header":
        readers += [["runs"], ["show", str(run_id)]]
    else:
        assert cli("runs", store=path).returncode == 0
    for args in readers:
        result = cli(*args, store=path)
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
        assert str(path) in result.stderr and "move it aside or choose another --store" in result.stderr
    assert path.read_bytes() == before


def test_runs_and_show_read_while_another_writer_holds_the_lock(tmp_path):
    path = tmp_path / "runs.db"
    with RunStore(path) as opened:
        run_id = opened.create_run({"cell": {"name": "rnn"}, "task": {"name": "adding"}}, name="held")
        set_status(opened, run_id, "completed")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # held until both commands have answered (longer than the 10 s busy timeout)
    try:
        processes = [subprocess.Popen(command(*args), cwd=REPO, env=environment(path), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for args in (["runs"], ["show", str(run_id)])]
        (runs, runs_err), (show, show_err) = (process.communicate(timeout=120) for process in processes)
    finally:
        holder.close()
    assert [process.returncode for process in processes] == [0, 0], runs_err + show_err
    assert "held" in runs and show.startswith(f"run {run_id} 'held': completed")


INTERRUPT_SCRIPT = """
import json, os, signal, sys
import stability.runs.engine
from stability.__main__ import main
from stability.runs.store import RunStore

real_begin = stability.runs.engine._begin


def interrupt_after_begin(conn):  # Ctrl-C (SIGINT) right after the n-th write's BEGIN IMMEDIATE took the lock
    global begins
    real_begin(conn)
    if conn.get_execution_options().get("stability_write"):
        begins += 1
        if begins == target:
            os.kill(os.getpid(), signal.SIGINT)


stability.runs.engine._begin = interrupt_after_begin  # engines made from here on call it for every BEGIN
results = []
for target in map(int, sys.argv[2:]):
    begins = 0
    store = f"{sys.argv[1]}-{target}.db"
    code = main(["train", "--store", store, *TINY])
    with RunStore(store) as opened:
        results.append((target, code, [run.status for run in opened.records(latest=False)]))
print(json.dumps(results))
"""


def test_ctrl_c_between_begin_and_commit_ends_the_run_stopped(tmp_path):
    # BEGINs: 1 creates the store, 2 the run, 3 claims it, 4 the trainer's first write, then its flushes
    script = f"TINY = {TINY!r}\n" + INTERRUPT_SCRIPT
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "store"), "2", "3", "4", "7", "10"],
                            cwd=REPO,
                            env=environment(tmp_path / "unused.db"), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    for target, code, statuses in json.loads(result.stdout.splitlines()[-1]):
        assert (code, statuses) == (0, ["stopped"]), (target, result.stderr)


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


def test_deterministic_flag_reaches_the_stored_config_and_the_runs_torch(store):
    result = cli("train", *TINY, "--deterministic", "--steps", "3", "--json", store=store)
    assert result.returncode == 0, result.stderr
    run_id = strict_json(result.stdout)["run_id"]
    with RunStore(store) as runs:
        assert runs.record(run_id, latest=False).raw_config["train"]["deterministic"] is True
        assert runs.record(run_id, latest=False).device.endswith("; deterministic")  # as the process's torch was set
    assert "--deterministic" in cli("train", "--help", store=store).stdout


def test_sweeps_join_spreads_its_workers_over_the_gpus_it_is_given(store):
    wrong = cli("sweeps", "join", "1", "--gpus", "cuda:0", store=store)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "comma-separated indices" in wrong.stderr
    usage = cli("sweeps", "join", "--help", store=store).stdout
    assert "--gpus LIST" in usage and "round robin" in usage


def test_freeze_recurrent_flag_reaches_the_stored_config(store):
    result = cli("train", *TINY, "--freeze-recurrent", "--steps", "3", "--json", store=store)
    assert result.returncode == 0, result.stderr
    run_id = strict_json(result.stdout)["run_id"]
    with RunStore(store) as runs:
        assert runs.record(run_id, latest=False).raw_config["train"]["freeze_recurrent"] is True
        names = set(runs.metrics(run_id)["name"])
    assert "grad/recurrent_norm" not in names and "grad/h0_norm" in names


def test_resume_continues_a_stopped_run_in_the_foreground_and_refuses_others(tmp_path):
    path = tmp_path / "runs.db"
    with RunStore(path) as opened:
        done = opened.create_run({"cell": {"name": "rnn"}, "task": {"name": "adding"}})
        set_status(opened, done, "completed")
    # 2,500 steps (~5 s here): `stop`, through main() in this process (no interpreter to start), arrives
    # while the worker still trains; the foreground resume, a fresh process, then trains what is left
    started = cli("train", "--cell", "rnn", "--hidden-size", "8", "--seq-len", "10", "--steps", "2500",
                  "--log-every", "50", "--batch-size", "8", "--eval-examples", "16", "--probe-examples", "4",
                  "--background", store=path)
    run_id = int(started.stdout.strip())
    with RunStore(path) as opened:
        deadline = time.monotonic() + 120
        while (run := opened.record(run_id, latest=False)).status != "running" or run.step in (None, 0):
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.1)
    assert in_process(["stop", str(run_id)], path)[0].strip() == "stopped"
    resumed = cli("resume", str(run_id), "--json", store=path)
    assert resumed.returncode == 0, resumed.stderr
    outcome = json.loads(resumed.stdout.splitlines()[-1])
    assert outcome["run_id"] == run_id and outcome["status"] == "completed" and "test/loss" in outcome["final"]
    with RunStore(path) as opened:
        assert opened.record(run_id, latest=False).resumes == 1
        steps = opened.metrics(run_id, ["train/loss"]).step
        assert sorted(steps) == [0, *range(50, 2501, 50)]  # step 0's reading, then nothing lost, nothing twice
    for args, message in ((["resume", str(done)], f"run {done} is completed; only a stopped"),
                          (["resume", "999"], "no run with id 999")):
        _, stderr, returncode = in_process(args, path)
        assert returncode == 2 and len(stderr.splitlines()) == 1, stderr
        assert message in stderr


# ------------------------------------------------------------------------------ sweeps
SWEEP = [*TINY[:-10], "--steps", "6", "--log-every", "2", "--eval-every", "2", "--batch-size", "8",
         "--eval-examples", "16", "--probe-examples", "4"]


@pytest.mark.parametrize("vary, message", [
    (["--vary", "hidden_sizes=8,16"], "unknown field"),
    (["--vary", "lr=-1,0.1"], "lr"),
    (["--vary", "lr="], "lr"),
    (["--vary", "cell=rnn,nosuchcell"], "nosuchcell"),
    (["--vary", "hidden_size=1:10000:10000", "--vary", "lr=1e-4:1e-1:10:log"], "pass --yes"),
    ([], "--vary"),
    (["--vary", "lr=1e-3", "--workers", "0"], "workers"),
])
def test_bad_sweep_input_exits_2_with_one_line_and_stores_nothing(tmp_path, vary, message):
    store = tmp_path / "runs.db"
    if message == "unknown field":  # one as a user runs it, the rest through main() here (IN_A_SUBPROCESS's reason)
        result = cli("sweep", *SWEEP, *vary, store=store)
        stderr, returncode = result.stderr, result.returncode
    else:
        _, stderr, returncode = in_process(["sweep", *SWEEP, *vary], store)
    assert returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stability: error: ") and message in lines[0], lines
    assert not store.exists() or RunStore(store).sweeps() == []


def test_a_foreground_sweep_prints_progress_and_its_table_and_sweeps_show_json_gives_each_setting(tmp_path,
                                                                                                   monkeypatch):
    monkeypatch.setenv("STABILITY_MAX_RUNS", "2")  # two run slots for its two workers (Note [Slots])
    store = tmp_path / "runs.db"
    result = cli("sweep", *SWEEP, "--vary", "lr=1e-3,1e-1", "--vary", "cell=rnn,lstm", "--seeds", "2",
                 "--workers", "2", store=store)
    assert result.returncode == 0, result.stderr
    assert "sweep 1: grid:" in result.stderr and "[8/8] run" in result.stderr
    table = result.stdout.splitlines()
    assert table[0].startswith("sweep 1 completed: grid:") and "mean val/loss" in table[1]
    assert len(table) == 2 + 4 and all("2/2" in line for line in table[2:])

    shown = cli("sweeps", "show", "1", "--json", store=store)
    assert shown.returncode == 0, shown.stderr
    objects = [strict_json(line) for line in shown.stdout.splitlines()]
    assert len(objects) == 4
    with RunStore(store) as opened:
        latest = opened.latest_many()
        for item in objects:
            assert set(item) >= {"setting", "runs", "mean", "min", "max"} and set(item["setting"]) == {"train.lr", "cell"}
            finals = [latest[run["run_id"]]["val/loss"] for run in item["runs"]]
            assert [run["objective"] for run in item["runs"]] == finals
            assert item["mean"] == pytest.approx(sum(finals) / 2) and item["min"] == min(finals)
            assert {opened.record(run["run_id"]).config.train.seed for run in item["runs"]} == {0, 1}
    listed = cli("sweeps", store=store)
    assert listed.returncode == 0 and "completed" in listed.stdout.splitlines()[1]
    runs = cli("runs", store=store).stdout.splitlines()
    assert "sweep" in runs[0].split() and sorted(line.split()[-3] for line in runs[1:]) == [f"1#{n}" for n in range(8)]
    for order in (["sweeps", "--store", str(store), "show", "1"], ["sweeps", "show", "1", "--store", str(store)]):
        elsewhere = cli(*order, store=tmp_path / "other.db")  # --store wins over $STABILITY_STORE, either place
        assert elsewhere.returncode == 0 and elsewhere.stdout.splitlines()[2:] == table[2:], elsewhere.stderr


def test_a_background_sweep_prints_its_id_then_stops_and_resumes_from_the_cli(tmp_path):
    store = tmp_path / "runs.db"
    # long enough that both stops (fresh CLI processes) arrive while its runs still train; it never finishes
    result = cli("sweep", *SWEEP[:-10], "--steps", "100000", "--log-every", "50", "--vary", "lr=1e-3,1e-2",
                 "--background", store=store)
    assert result.returncode == 0, result.stderr
    sweep_id = int(result.stdout)
    with RunStore(store) as opened:
        deadline = time.monotonic() + 120
        while not any(r.step for r in opened.records(sweep_id=sweep_id)) and time.monotonic() < deadline:
            time.sleep(0.2)
    stopped = cli("sweeps", "stop", str(sweep_id), store=store)
    assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped", stopped.stderr
    again = cli("sweeps", "join", str(sweep_id), "--workers", "1", store=store)
    assert again.returncode == 2 and "sweeps resume" in again.stderr
    resumed = cli("sweeps", "resume", str(sweep_id), "--background", store=store)
    assert resumed.returncode == 0 and "1 run continue" in resumed.stderr, resumed.stderr
    assert cli("sweeps", "stop", str(sweep_id), store=store).stdout.strip() == "stopped"
    missing = cli("sweeps", "show", "99", store=store)
    assert missing.returncode == 2 and missing.stderr.strip() == f"stability: error: no sweep with id 99 in {store}"


def test_sweep_workers_past_the_run_slots_are_capped_in_one_line(tmp_path, monkeypatch, capsys):
    """Issue 20: ``--workers`` had no upper bound (10000 started 10000 processes). It is capped at the slots
    whoever starts the CLI sets (STABILITY_MAX_RUNS), in one line; here the one slot is held by a run this
    test claims (a live claimant on this host), so the sweep's one worker waits for it and none starts.
    The command runs in this process (``main``), as its own interpreter would."""
    from stability import sweeps
    from stability.cli.main import main
    from stability.config import CellConfig, RunConfig
    from stability.execution import lifecycle
    from stability.workers import slots

    monkeypatch.setenv("STABILITY_MAX_RUNS", "1")
    store = tmp_path / "runs.db"
    with RunStore(store) as opened:
        holder = lifecycle.create_claimed(opened, RunConfig(CellConfig("rnn", 4)))  # holds the slot
        code = main(["sweep", *SWEEP, "--vary", "lr=1e-3", "--workers", "10000", "--background", "--store", str(store)])
        result = capsys.readouterr()
        assert code == 0, result.err
        sweep_id = int(result.out)
        try:
            assert result.err.splitlines()[0] == ("--workers 10000 is more than this machine's 1 run slot "
                                                  "(STABILITY_MAX_RUNS=1): 1 worker")
            assert opened.sweep(sweep_id).workers == 1 and slots.waiting(opened, sweep_id) == 1
            assert not (opened.home / "logs" / f"sweep-{sweep_id}.workers").exists()  # no worker started
        finally:
            sweeps.stop_sweep(sweep_id, store, timeout=2.0)
            lifecycle.settle(opened, holder, "stopped")
        assert slots.waiting(opened, sweep_id) == 0



def test_a_sweep_checked_without_building_every_cell_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    """Issue 33: a sweep's check builds at most a few cells (stability.sweeps.spec, Note [Bounded checks]); the
    Sweep page says when others were checked without building, and so does the CLI (it did not). Five hidden
    sizes need 11 models; the run slot is held, so no worker starts."""
    from stability import sweeps
    from stability.cli.main import main
    from stability.config import CellConfig, RunConfig
    from stability.admission import preflight
    from stability.execution import lifecycle

    monkeypatch.setenv("STABILITY_MAX_RUNS", "1")
    monkeypatch.setattr(preflight, "_verdicts", type(preflight._verdicts)())  # no cell built before in this process
    store = tmp_path / "runs.db"
    with RunStore(store) as opened:
        holder = lifecycle.create_claimed(opened, RunConfig(CellConfig("rnn", 4)))
        code = main(["sweep", *SWEEP, "--vary", "hidden_size=8,12,16,20,24", "--background", "--store", str(store)])
        result = capsys.readouterr()
        try:
            assert code == 0, result.err
            notes = [line for line in result.err.splitlines() if line.startswith("note: ")]
            assert len(notes) == 1 and "checked without building their cells" in notes[0], result.err
        finally:
            sweeps.stop_sweep(int(result.out), store, timeout=2.0)
            lifecycle.settle(opened, holder, "stopped")


# ------------------------------------------------------------------ reproduce
TINY_PRESET = {
    "name": "tiny-preset", "title": "Two tiny runs", "paper": "a paper", "figure": "Fig. 9", "section": "§9",
    "shows": "spectral keeps its margin", "base": {"task": {"name": "adding", "options": {"seq_len": 6}},
                                                  "train": {"steps": 3, "batch_size": 8, "log_every": 1,
                                                            "eval_examples": 16, "probe_examples": 4}},
    "runs": [{"name": "rnn", "cell": {"name": "rnn", "hidden_size": 8}},
             {"name": "spectral", "cell": {"name": "spectral", "hidden_size": 8, "options": {"r": 0.01}}}],
    "scales": {"classroom": {"note": "3 steps"}, "paper": {"note": "30 steps", "override": {"train": {"steps": 30}}}},
    "claims": [{"text": "spectral's margin stays within r", "run": "spectral", "metric": "sv/margin", "stat": "max",
                "op": "<=", "than": 0.01, "factor": 1.001, "paper": {"value": 0.01, "source": "eq. 4"}},
               {"text": "rnn gets to zero loss", "run": "rnn", "metric": "val/loss", "op": "<", "than": 1e-9},
               {"text": "rnn has a gate", "run": "rnn", "metric": "gate/alpha", "op": "<", "than": 1}]}


@pytest.fixture(scope="module")
def tiny_preset(tmp_path_factory):
    path = tmp_path_factory.mktemp("preset") / "tiny-preset.json"
    path.write_text(json.dumps(TINY_PRESET))
    return path


def test_reproduce_list_gives_a_line_per_shipped_preset(store):
    from stability import presets

    result = cli("reproduce", "--list", store=store)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["name", "paper"]
    for info in presets.available():
        (line,) = [line for line in lines if line.startswith(info.name + " ")]
        assert info.figure in line and info.shows in line and f"{info.runs['classroom']} classroom" in line


def test_reproduce_json_runs_the_preset_and_prints_the_verdicts_from_its_rows(tmp_path, tiny_preset):
    store = tmp_path / "runs.db"
    result = cli("reproduce", str(tiny_preset), "--json", store=store)
    assert result.returncode == 0, result.stderr
    report = strict_json(result.stdout)
    assert report["preset"] == "tiny-preset" and report["scale"] == "classroom"
    assert [v["held"] for v in report["verdicts"]] == [True, False, None]
    assert "no rows of gate/alpha" in report["verdicts"][2]["why"]
    assert report["verdicts"][0]["paper"] == 0.01 and report["verdicts"][0]["source"] == "eq. 4"
    assert "[1/2] run" in result.stderr and "[2/2] run" in result.stderr
    assert "step 3/3" in result.stderr  # each run's progress line
    assert result.stderr.splitlines()[1].startswith("about ")  # the rough time, before the runs
    with RunStore(store) as opened:
        records = {opened.record(run_id).name: opened.record(run_id) for run_id in report["run_ids"]}
        assert set(records) == {"tiny-preset/rnn", "tiny-preset/spectral"}
        assert all(record.status == "completed" and record.step == 3 for record in records.values())
        margin = opened.metrics(records["tiny-preset/spectral"].id, names=["sv/margin"])["value"].max()
        final = opened.metrics(records["tiny-preset/rnn"].id, names=["val/loss"])["value"].iloc[-1]
    assert report["verdicts"][0]["ours"] == pytest.approx(margin)
    assert report["verdicts"][1]["ours"] == pytest.approx(final)


def test_reproduce_ends_with_the_verdict_table(tmp_path, tiny_preset, capsys):
    from stability.cli.main import main

    assert main(["reproduce", str(tiny_preset), "--store", str(tmp_path / "runs.db")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["claim", "paper", "ours", "verdict"]
    rows = {line.split("  ")[0]: line for line in out[2:5]}
    assert rows["spectral's margin stays within r"].endswith(" held")
    assert rows["rnn gets to zero loss"].endswith("did not hold")
    assert rows["rnn has a gate"].endswith("could not tell")
    assert any(line.startswith('  could not tell "rnn has a gate": ') for line in out)


@pytest.mark.parametrize("args, message", [
    (["no-such-preset"], "unknown preset 'no-such-preset'; available: "),
    (["{preset}", "--scale", "huge"], "preset 'tiny-preset' has no scale 'huge'; it has classroom, paper"),
    (["{bad}"], "is not valid JSON"),
    ([], "give a preset NAME"),
    (["{preset}", "--list"], "give one of --list, --table or a preset NAME"),
])
def test_reproduce_bad_input_exits_2_with_one_line_and_stores_nothing(tmp_path, tiny_preset, capsys, args, message):
    from stability.cli.main import main

    bad = tmp_path / "bad.json"
    bad.write_text('{"name": ')
    store = tmp_path / "runs.db"
    args = [arg.format(preset=tiny_preset, bad=bad) for arg in args]
    assert main(["reproduce", *args, "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stability: error: ") and message in err and err.count("\n") == 1
    assert not store.exists() or not RunStore(store).records()


def test_export_writes_tensorboard_event_files_for_several_runs(store, trained, tmp_path):
    run_id = trained[0]["run_id"]
    result = cli("export", str(run_id), str(run_id), "--tensorboard", str(tmp_path / "tb"), store=store)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(tmp_path / "tb" / f"run-{run_id}")] * 2
    assert list((tmp_path / "tb" / f"run-{run_id}").glob("events.out.tfevents.*"))
    several = cli("export", str(run_id), str(run_id), store=store)
    assert several.returncode == 2 and several.stderr.strip() == (
        "stability: error: CSV export takes one run id; give several with --tensorboard DIR")


@pytest.mark.parametrize("students, view_only", [("view", "1"), ("run", "0"), ("sweep", "0")])
def test_classroom_students_set_the_rooms_server_and_the_lecturers_stays_its_own(students, view_only):
    """`stability classroom --students sweep` opens a room where signed-in students sweep (it took view|run only);
    the lecturer's own server names no students whatever the room allows."""
    from stability.cli.classroom import server_commands
    from stability.cli.main import build_parser

    args = build_parser().parse_args(["classroom", "--students", students])
    (_, room, room_env), (_, own, own_env) = server_commands(args, None)
    assert (room_env["STABILITY_STUDENTS"], room_env["STABILITY_VIEW_ONLY"]) == (students, view_only)
    assert (own_env["STABILITY_STUDENTS"], own_env["STABILITY_VIEW_ONLY"]) == ("", "0")
    assert "0.0.0.0" in room and "127.0.0.1" in own
