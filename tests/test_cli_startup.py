"""The command line answers without torch, and a foreground run takes the workers' thread policy
(Note [A command line without torch] in stability/cli/main.py; stability/workers/threads.py).

Each check runs the CLI's ``main`` in a fresh Python process (``PROBE``) and reads, from inside that process,
which heavy modules it imported and, for a foreground run, its OpenMP environment at the moment torch was first
imported and its torch thread counts after the run. Nothing is mocked: the stores are real SQLite files and the
runs really train.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stability import RunConfig, train_run
from stability.config import CellConfig, TaskConfig, TrainConfig
from stability.runs.store import RunStore

from stopping import StopAt

REPO = Path(__file__).resolve().parent.parent
TINY = ["--cell", "rnn", "--hidden-size", "8", "--seq-len", "10", "--steps", "12", "--log-every", "3",
        "--batch-size", "16", "--eval-examples", "32", "--probe-examples", "4"]
HEAVY = ("torch", "pandas", "sqlalchemy", "optuna")
POLICY_ENV = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

# Runs main(argv) in this process and writes, to the file named first, its exit code, the heavy modules it
# imported, the OpenMP environment when torch was first imported (a finder on sys.meta_path sees the import
# statement before torch's libraries load) and, where torch was imported, its thread counts.
PROBE = r"""
import importlib.abc, json, os, sys
report, argv = sys.argv[1], sys.argv[2:]
seen = {}

class FirstTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" and "torch" not in seen:
            seen["torch"] = {key: os.environ.get(key) for key in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
        return None

sys.meta_path.insert(0, FirstTorch())
from stability.cli.main import main
try:
    code = main(argv)
except SystemExit as exit:
    code = exit.code
sys.stdout.flush()
out = {"code": code, "modules": [name for name in %r if name in sys.modules], "at_torch": seen.get("torch"),
       "env": {key: os.environ.get(key) for key in %r}}
if "torch" in sys.modules:
    import torch
    from stability.workers import threads
    out.update(threads=torch.get_num_threads(), interop=torch.get_num_interop_threads(),
               expected=threads.worker_threads(int(os.environ.get("STABILITY_MAX_RUNS", "1"))))
with open(report, "w") as file:
    json.dump(out, file)
""" % (HEAVY, POLICY_ENV)


def probe(tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> tuple[dict, subprocess.CompletedProcess]:
    """``main(argv)`` in a new process: what it reported about itself, and the process (its output)."""
    report = tmp_path / "report.json"
    report.unlink(missing_ok=True)
    environment = {key: value for key, value in os.environ.items() if key not in POLICY_ENV}
    environment.update({"STABILITY_STORE": str(tmp_path / "default.db"), "STABILITY_OFFLINE": "1",
                        "STABILITY_MAX_RUNS": "1"})
    environment.pop("STABILITY_THREADS", None)
    environment.update(env or {})
    process = subprocess.run([sys.executable, "-c", PROBE, str(report), *argv], cwd=REPO, env=environment,
                             capture_output=True, text=True, timeout=600)
    assert report.exists(), process.stderr
    return json.loads(report.read_text()), process


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and sub-command of ``parser``, as the words that name it."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((*prefix, name))
                found += _commands(sub, (*prefix, name))
    return found


def _help_argvs() -> list[list[str]]:
    from stability.cli.main import build_parser

    return [["--help"]] + [[*words, "--help"] for words in _commands(build_parser())]


def test_every_help_is_answered_without_torch_or_pandas(tmp_path):
    argvs = _help_argvs()
    assert ["train", "--help"] in argvs and ["sweeps", "show", "--help"] in argvs
    for argv in argvs:
        report, process = probe(tmp_path, *argv)
        assert report["code"] == 0 and "usage:" in process.stdout, (argv, process.stderr)
        assert report["modules"] == [], (argv, report["modules"])


@pytest.mark.parametrize("argv, message", [
    (["show", "abc"], "stability: error: argument ID: invalid int value: 'abc'"),
    (["frobnicate"], "stability: error: argument COMMAND: invalid choice: 'frobnicate'"),
    (["train", "--steps", "many"], "stability: error: argument --steps: invalid int value: 'many'"),
    (["sweep", "--sampler", "bogus"], "stability: error: argument --sampler: invalid choice: 'bogus' "
                                      "(choose from 'grid', 'random', 'tpe')"),
    (["delete"], "stability: error: the following arguments are required: ID"),
])
def test_an_argument_error_is_one_line_without_torch_or_pandas(tmp_path, argv, message):
    report, process = probe(tmp_path, *argv)
    assert report["code"] == 2
    assert process.stderr.strip().startswith(message), process.stderr
    assert len(process.stderr.strip().splitlines()) == 1
    assert report["modules"] == []


def _tiny_config(steps: int = 12) -> RunConfig:
    return RunConfig(cell=CellConfig("rnn", 8), task=TaskConfig("adding", {"seq_len": 10}),
                     train=TrainConfig(steps=steps, log_every=3, batch_size=16, eval_examples=32, probe_examples=4,
                                       device="cpu"))


def test_runs_and_show_read_a_real_store_without_torch(tmp_path):
    store = tmp_path / "runs.db"
    with RunStore(store) as opened:
        done = train_run(_tiny_config(), store=opened)
        stopped = train_run(_tiny_config(steps=30), store=opened, hooks=[StopAt(6)])
    assert (done.status, stopped.status) == ("completed", "stopped")
    listed, process = probe(tmp_path, "runs", "--store", str(store))
    assert listed["code"] == 0, process.stderr
    lines = process.stdout.splitlines()
    assert lines[0].split()[:3] == ["id", "name", "status"] and len(lines) == 3
    rows = {int(line.split()[0]): line for line in lines[1:]}
    assert " completed " in rows[done.run_id] and " stopped " in rows[stopped.run_id]
    assert "torch" not in listed["modules"] and "optuna" not in listed["modules"]
    for run in (done, stopped):
        shown, process = probe(tmp_path, "show", str(run.run_id), "--store", str(store))
        assert shown["code"] == 0, process.stderr
        assert process.stdout.startswith(f"run {run.run_id}") and "latest metrics:" in process.stdout
        assert "torch" not in shown["modules"] and "optuna" not in shown["modules"]
    missing, process = probe(tmp_path, "show", "999", "--store", str(store))
    assert missing["code"] == 2 and "no run with id 999" in process.stderr
    assert "torch" not in missing["modules"]


def _assert_worker_policy(report: dict, process) -> None:
    assert report["code"] == 0, process.stderr
    # set before torch was first imported in that process: libgomp reads it when it loads
    assert report["at_torch"] == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": str(report["expected"])}
    assert report["env"] == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": str(report["expected"]),
                             "MKL_NUM_THREADS": str(report["expected"])}
    assert report["threads"] == report["expected"] and report["interop"] == 1


def test_a_foreground_train_takes_the_workers_thread_policy(tmp_path):
    store = tmp_path / "runs.db"
    report, process = probe(tmp_path, "train", "--store", str(store), *TINY, "--json")
    _assert_worker_policy(report, process)
    assert json.loads(process.stdout.splitlines()[-1])["status"] == "completed"


def test_a_foreground_resume_takes_the_workers_thread_policy(tmp_path):
    store = tmp_path / "runs.db"
    with RunStore(store) as opened:
        stopped = train_run(_tiny_config(steps=30), store=opened, hooks=[StopAt(6)])
    assert stopped.status == "stopped"
    report, process = probe(tmp_path, "resume", str(stopped.run_id), "--store", str(store), "--json")
    _assert_worker_policy(report, process)
    assert json.loads(process.stdout.splitlines()[-1])["status"] == "completed"


def test_the_thread_count_follows_the_slots_and_a_chosen_wait_policy_is_kept(tmp_path):
    # STABILITY_THREADS overrides the count, as it does a worker's; a user's OMP_WAIT_POLICY stays theirs
    report, process = probe(tmp_path, "train", "--store", str(tmp_path / "runs.db"), *TINY,
                            env={"STABILITY_THREADS": "3", "OMP_WAIT_POLICY": "ACTIVE"})
    assert report["code"] == 0, process.stderr
    assert report["expected"] == 3 and report["threads"] == 3 and report["interop"] == 1
    assert report["at_torch"] == {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "3"}


def test_the_parsers_own_copies_of_names_are_the_registries():
    # the parser knows these without importing what defines them (torch, Optuna, the store)
    from stability.cli import deleting, sweeps as sweep_commands
    from stability.config import run_config
    from stability.execution import lifecycle
    from stability.models import optimizers
    from stability.sweeps import spec

    assert run_config.OPTIMIZERS == optimizers.OPTIMIZERS
    assert (sweep_commands.SAMPLERS, sweep_commands.MAX_RUNS) == (spec.SAMPLERS, spec.MAX_RUNS)
    assert deleting.ABANDONED_AFTER_MIN == int(lifecycle.ABANDONED_AFTER_S // 60)
