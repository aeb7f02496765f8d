"""Bring your own cell, bring your own task: a cell and a task written in temporary modules outside the
package, registered by ``register()``, by their import path, and through a real entry point, then
described, trained through the CLI (in this process and in subprocesses, a background worker included)
and drawn on the Train, Race and Gradient flow pages; the package itself is never touched."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from stability import cells, tasks
from stability.core.registry import PluginWarning
from stability.runs.status import TERMINAL
from stability.runs.store import RunStore
from stability.workers import scheduler

# The folder's broken entry point warns wherever the plugins are first read; the tests that mean it catch it.
pytestmark = pytest.mark.filterwarnings("ignore::stability.core.registry.PluginWarning")

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "pages"
MODULE = "stability_plugin_demo"  # the cell module written for these tests
TASK_MODULE = "stability_plugin_tasks"
LEAKY = f"{MODULE}:LeakyRNN"
TINY = ["--hidden-size", "8", "--seq-len", "10", "--steps", "3", "--batch-size", "8", "--eval-examples", "16",
        "--probe-examples", "4", "--log-every", "1"]

CELL_SOURCE = '''
"""A leaky tanh RNN, written the way a researcher would add one."""
import torch
from torch import nn

from stability.cells import RecurrentCell


class LeakyRNN(RecurrentCell):
    """A leaky tanh RNN (this line is not its summary: the class says it below)."""

    summary = "Leaky RNN: h_t = (1 - a) h_{t-1} + a tanh(W h_{t-1} + U x_t + b)"
    equations = (r"h_t = (1 - a) \\, h_{t-1} + a \\tanh(W h_{t-1} + U x_t + b)",)
    paper = "a lab notebook, p. 1"
    option_help = {"leak": "a: the share of the new update in the state"}
    option_ranges = {"leak": (0.0, 1.0)}

    def __init__(self, input_size, hidden_size, *, leak: float = 0.5, h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__(input_size, hidden_size, h0=h0, h0_noise_std=h0_noise_std)
        if isinstance(leak, bool) or not isinstance(leak, (int, float)) or not 0 <= leak <= 1:
            raise ValueError(f"leak must be a number in [0, 1]; got {leak!r}")
        self.leak = float(leak)
        self.input_proj = nn.Linear(input_size, hidden_size)
        self.weight_hh = nn.Parameter(torch.randn(hidden_size, hidden_size) / hidden_size ** 0.5)
        self._init_initial_state()

    def _prepare(self, x):
        return {"inputs": self.input_proj(x).transpose(0, 1)}

    def _step(self, u_t, h, context):
        return (1 - self.leak) * h + self.leak * torch.tanh(u_t + h @ self.weight_hh.t())

    def recurrent_matrix(self):
        return self.weight_hh

    def recurrent_parameter_count(self):
        return self.hidden_size ** 2


class Bare(LeakyRNN):
    """Bare cell: nothing declared, so this line is its summary.

    Its options come from the signature alone.
    """

    def __init__(self, input_size, hidden_size, scale=2.0):
        super().__init__(input_size, hidden_size, leak=0.5)
        self.scale = scale
'''

TASK_SOURCE = '''
"""Parity of a bit stream, a task written outside the package."""
import torch

from stability.tasks.synthetic import SyntheticTask


class ParityTask(SyntheticTask):
    summary = "Parity of T random bits"
    description = "Read T random bits, one per step, and answer whether an odd number of them were 1."
    paper = "Minsky & Papert 1969, ch. 2"
    metric = "accuracy"
    target_mode = "last"
    option_help = {"seq_len": "T: bits to read"}

    def __init__(self, *, seed: int = 0, seq_len: int = 8, train_size: int | None = None, val_size: int = 64,
                 test_size: int = 64):
        super().__init__(seed=seed, seq_len=seq_len, input_size=1, output_size=2, train_size=train_size,
                         val_size=val_size, test_size=test_size)
        self.baseline = 0.5
        self.baseline_label = "a coin"

    def sample(self, generator, count):
        return {"bits": generator.integers(0, 2, (count, self.seq_len))}

    def encode(self, arrays):
        bits = torch.from_numpy(arrays["bits"])
        return bits.float().unsqueeze(-1), bits.sum(dim=1) % 2
'''

ENTRY_POINTS = f'''
[stability.tasks]
parity = {TASK_MODULE}:ParityTask
broken = stability_plugin_missing_xyz:Task

[stability.cells]
leaky_ep = {MODULE}:LeakyRNN
'''


# ----------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    """A folder outside the package with the cell and task modules and an installed-distribution record
    (``*.dist-info/entry_points.txt``), put on sys.path for this module's tests."""
    folder = tmp_path_factory.mktemp("plugins")
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(CELL_SOURCE))
    (folder / f"{TASK_MODULE}.py").write_text(textwrap.dedent(TASK_SOURCE))
    (folder / "marker_on_import.py").write_text(f"open({str(folder / 'imported')!r}, 'w').close()\n")
    dist = folder / "stability_plugin_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: stability-plugin-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        yield folder
    for name in (MODULE, TASK_MODULE):
        sys.modules.pop(name, None)
    tasks.registry.discover(again=True)  # forget the entry points of the folder now gone from sys.path
    cells.registry.discover(again=True)


@pytest.fixture
def leaky(plugin_dir):
    """The plugin cell class, registered as ``leaky`` for one test."""
    module = __import__(MODULE)
    cells.register("leaky", module.LeakyRNN)
    yield module.LeakyRNN
    cells.unregister("leaky")


@pytest.fixture
def entry_points(plugin_dir):
    """The folder's entry points read afresh: the broken one is left out with one warning."""
    with pytest.warns(PluginWarning) as caught:
        tasks.registry.discover(again=True)
    cells.registry.discover(again=True)
    yield [str(warning.message) for warning in caught]


def cli(*args, store, plugin_dir, **env):
    environment = {**os.environ, "STABILITY_STORE": str(store), "STABILITY_OFFLINE": "1",
                   "PYTHONPATH": os.pathsep.join([str(plugin_dir), str(ROOT)]), **env}
    return subprocess.run([sys.executable, "-m", "stability", *args], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=240)


# ----------------------------------------------------------------------------------- register()
def test_register_describes_and_builds_a_cell_from_outside_the_package(leaky):
    assert cells.available()[-1] == "leaky" and cells.get_class("leaky") is leaky
    info = cells.describe("leaky")
    assert (info.summary, info.equations, info.paper) == (leaky.summary, leaky.equations, leaky.paper)
    leak = info.option("leak")
    assert (leak.type, leak.default, leak.range, leak.help) == ("float", 0.5, (0.0, 1.0), leaky.option_help["leak"])
    assert info.option("h0") == cells.describe("rnn").option("h0")  # inherited from RecurrentCell, help and all

    torch.manual_seed(0)
    cell = cells.build("leaky", 2, 4, leak=0.25).double()
    x = torch.randn(3, 5, 2, dtype=torch.float64)
    outputs, h_last = cell(x)
    h = torch.zeros(3, 4, dtype=torch.float64)  # the update written out once more, by hand
    for t in range(5):
        h = 0.75 * h + 0.25 * torch.tanh(x[:, t] @ cell.input_proj.weight.t() + cell.input_proj.bias
                                         + h @ cell.weight_hh.t())
        torch.testing.assert_close(outputs[:, t], h)
    torch.testing.assert_close(h_last, h)
    with pytest.raises(ValueError, match="leak must be a number in"):
        cells.build("leaky", 2, 4, leak=2.0)


def test_register_exports_the_name_for_worker_processes_and_unregister_takes_it_back(leaky, plugin_dir, tmp_path):
    assert f"leaky={LEAKY}" in os.environ["STABILITY_CELLS"].split(",")
    result = cli("cells", store=tmp_path / "runs.db", plugin_dir=plugin_dir)  # a new process, this environment
    assert result.returncode == 0, result.stderr
    assert ["leaky", leaky.summary] in [line.split(maxsplit=1) for line in result.stdout.splitlines()]
    cells.unregister("leaky")
    assert "leaky" not in cells.available() and "leaky=" not in os.environ.get("STABILITY_CELLS", "")
    cells.register("leaky", leaky)  # for the fixture to unregister


def test_a_name_is_taken_once_unless_replaced(leaky):
    module = sys.modules[MODULE]
    cells.register("leaky", leaky)  # the same class again: nothing to refuse
    with pytest.raises(ValueError, match=r"cell name 'leaky' is already taken by stability_plugin_demo:LeakyRNN; "
                                         r"pass replace=True"):
        cells.register("leaky", module.Bare)
    with pytest.raises(ValueError, match="already taken by stability.cells.rnn:ElmanRNN"):
        cells.register("rnn", leaky)
    cells.register("rnn", leaky, replace=True)
    try:
        assert cells.get_class("rnn") is leaky and cells.available().count("rnn") == 1
    finally:
        cells.unregister("rnn")
    assert cells.get_class("rnn").__name__ == "ElmanRNN"  # the built-in comes back
    with pytest.raises(ValueError, match="no cell 'never_registered' is registered"):
        cells.unregister("never_registered")


def test_register_works_as_a_decorator(plugin_dir):
    module = __import__(MODULE)

    @cells.register("leaky_decorated")
    class Decorated(module.LeakyRNN):
        """Decorated leaky RNN."""

    try:
        assert cells.get_class("leaky_decorated") is Decorated
        assert cells.describe("leaky_decorated").summary == "Decorated leaky RNN."
        assert "leaky_decorated=" not in os.environ.get("STABILITY_CELLS", "")  # defined in a function: no path
    finally:
        cells.unregister("leaky_decorated")


class NoInputs(cells.RecurrentCell):
    def __init__(self):
        super().__init__(1, 1)


@pytest.mark.parametrize("registry, name, cls, message", [
    (cells, "x", object, "cell 'x' must be a torch.nn.Module class"),
    (cells, "x", torch.nn.Linear, "lacks initial_state, recurrent_matrix, gate_values, penalty, "
                                  "recurrent_parameters, recurrent_parameter_count, after_optimizer_step"),
    (cells, "x", NoInputs, r"must be built as cls\(input_size, hidden_size, \*\*options\)"),
    (cells, "two words", NoInputs, "without spaces, commas or '='"),
    (cells, "a,b", NoInputs, "without spaces, commas or '='"),
    (cells, "", NoInputs, "non-empty string"),
    (cells, "elsewhere:Cell", cells.RecurrentCell, "must be the class's own import path"),
    (tasks, "x", cells.RecurrentCell, "task 'x' must be a subclass of stability.tasks.Task"),
    (tasks, "x", type("AucTask", (tasks.Task,), {"metric": "auc"}), "metric must be one of mse, accuracy"),
    (tasks, "x", type("SideTask", (tasks.Task,), {"target_mode": "first"}), "target_mode must be one of last, every"),
])
def test_a_class_that_breaks_the_contract_is_refused_in_one_line(registry, name, cls, message):
    with pytest.raises(ValueError, match=message) as error:
        registry.register(name, cls)
    assert "\n" not in str(error.value)
    assert name not in registry.available()


def test_a_cell_that_declares_nothing_falls_back_on_its_docstring_and_signature(plugin_dir):
    bare = __import__(MODULE).Bare
    cells.register("bare", bare)
    try:
        info = cells.describe("bare")
        assert info.summary == "Bare cell: nothing declared, so this line is its summary."
        assert info.equations == () and info.paper == ""
        [scale] = info.options  # a positional-or-keyword option after input_size, hidden_size
        assert (scale.name, scale.type, scale.default, scale.help, scale.range) == ("scale", "float", 2.0, "", None)
        assert cells.build("bare", 2, 4, scale=3.0).scale == 3.0
    finally:
        cells.unregister("bare")


# --------------------------------------------------------------------------- package.module:Class
def test_an_import_path_is_a_name_everywhere_and_is_imported_once(plugin_dir):
    from stability.config import CellConfig, RunConfig

    try:
        config = RunConfig(cell=CellConfig(LEAKY, 8, {"leak": 0.2}))
        config.validate()
        assert LEAKY in cells.available() and cells.get_class(LEAKY) is sys.modules[MODULE].LeakyRNN
        assert cells.build(LEAKY, 1, 8, leak=0.2).leak == 0.2
        assert cells.describe(LEAKY).summary.startswith("Leaky RNN")
    finally:
        cells.unregister(LEAKY)


@pytest.mark.parametrize("name, message", [
    ("stability_plugin_missing_xyz:Cell", "cannot import cell 'stability_plugin_missing_xyz:Cell': "
                                          "ModuleNotFoundError: No module named 'stability_plugin_missing_xyz'"),
    (f"{MODULE}:Missing", f"cannot import cell '{MODULE}:Missing': module '{MODULE}' has no 'Missing'"),
    (":Cell", "expected the form package.module:Class"),
])
def test_an_import_path_that_fails_is_one_config_error(plugin_dir, name, message):
    from stability.config import CellConfig, ConfigError, RunConfig

    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        RunConfig(cell=CellConfig(name, 8)).validate()
    assert "\n" not in str(error.value) and name not in cells.available()


def test_the_cli_trains_a_cell_named_by_its_import_path_here_and_in_a_background_worker(plugin_dir, tmp_path):
    store = tmp_path / "runs.db"
    result = cli("train", "--cell", LEAKY, "--cell-option", "leak=0.3", *TINY, "--json", store=store,
                 plugin_dir=plugin_dir)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "completed" and summary["final"]["test/mse"] > 0
    background = cli("train", "--cell", LEAKY, "--cell-option", "leak=0.3", *TINY, "--background", "--json",
                     store=store, plugin_dir=plugin_dir)
    assert background.returncode == 0, background.stderr
    run_id = json.loads(background.stdout)["run_id"]
    with RunStore(store) as opened:
        deadline = time.monotonic() + 180
        while opened.record(run_id, latest=False).status not in TERMINAL and time.monotonic() < deadline:
            time.sleep(0.5)
        worker_run, foreground_run = opened.record(run_id, latest=False), opened.record(summary["run_id"], latest=False)
    assert worker_run.status == "completed", worker_run.error
    for run in (worker_run, foreground_run):
        assert run.raw_config["cell"] == {"name": LEAKY, "hidden_size": 8, "options": {"leak": 0.3}}
    described = cli("cells", LEAKY, store=store, plugin_dir=plugin_dir)
    assert described.stdout.splitlines()[:3] == [f"{LEAKY}: {sys.modules[MODULE].LeakyRNN.summary}",
                                                 "paper: a lab notebook, p. 1", "equations (LaTeX):"]


def test_a_registered_cell_trains_through_the_cli_in_this_process(leaky, tmp_path, capsys):
    from stability.cli.main import main

    code = main(["train", "--cell", "leaky", *TINY, "--store", str(tmp_path / "runs.db"), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["status"] == "completed" and "sv/max" in summary["final"]


# --------------------------------------------------------------------------------------- pages
def run_page(page, **query):
    app = AppTest.from_file(str(PAGES / f"{page}.py"), default_timeout=60)
    for key, value in query.items():
        app.query_params[key] = str(value)
    return app.run()


@pytest.fixture
def started(store, monkeypatch):
    """scheduler.start_run records the configs and stores them; nothing trains."""
    calls = []

    def start_run(config, store_path=None, name=None, max_concurrent=None, owner=None):
        calls.append(config)
        return store.create_run(config.to_dict())

    monkeypatch.setattr(scheduler, "start_run", start_run)
    return calls


def button(app, label):
    return next(b for b in app.button if b.label == label)


def test_train_page_shows_the_plugin_cell_from_its_class_and_starts_it(leaky, started):
    app = run_page("train", cell="leaky")
    assert not app.exception and not app.error
    assert app.selectbox(key="train_cell").value == "leaky"
    assert any(leaky.equations[0] in element.value for element in app.latex)
    assert any(leaky.summary == caption.value for caption in app.caption)
    leak = app.number_input(key="train_leaky_leak")
    assert leak.value == 0.5 and leaky.option_help["leak"] in leak.help and "range [0.0, 1.0]" in leak.help
    leak.set_value(0.25).run()
    button(app, "Start").click().run()
    assert not app.exception and not app.error
    [config] = started
    assert (config.cell.name, config.cell.options["leak"]) == ("leaky", 0.25)


def test_race_page_races_the_plugin_cell_beside_a_built_in(leaky, started):
    app = run_page("race", cells="leaky,rnn")
    assert not app.exception and not app.error
    assert app.multiselect(key="race_cells").value == ["leaky", "rnn"]
    app.number_input(key="race_leaky_leak").set_value(0.75)
    button(app, "Start race").click().run()
    assert not app.exception and not app.error
    assert [(config.cell.name, config.cell.options.get("leak")) for config in started] == [("leaky", 0.75),
                                                                                          ("rnn", None)]


def test_gradient_flow_page_measures_the_plugin_cell(leaky):
    app = run_page("gradient_flow", cell="leaky", hidden=16, T=50)
    assert not app.exception and not app.error
    assert len(app.get("vega_lite_chart")) == 2
    first = next(m.value for m in app.metric if m.label == "‖∂h_T/∂h_0‖")
    app.number_input(key="gf_leaky_leak").set_value(0.05).run()  # mostly carry h over: more reaches back
    assert not app.exception and not app.error
    assert float(next(m.value for m in app.metric if m.label == "‖∂h_T/∂h_0‖")) > float(first)


def test_a_link_cannot_make_the_server_import_a_module(store, plugin_dir):
    for page, key in (("train", "cell"), ("race", "cells"), ("gradient_flow", "cell")):
        app = run_page(page, **{key: "marker_on_import:Cell"})
        assert not app.exception
        [warning] = app.warning
        assert "marker_on_import:Cell" in warning.value.replace("\\", "")  # as drawn: the link's text escaped
    assert not (plugin_dir / "imported").exists() and "marker_on_import" not in sys.modules


# ------------------------------------------------------------------------------------ entry points
def test_an_installed_task_plugin_joins_through_its_entry_point(entry_points):
    [warning] = [message for message in entry_points if "'broken'" in message]
    assert warning.startswith("skipped task plugin 'broken' (stability_plugin_missing_xyz:Task): "
                              "ModuleNotFoundError") and "\n" not in warning
    names = tasks.available()
    assert names[:10] == ["adding", "adding_ternary", "copy", "mnist", "permuted_mnist", "mnist_rows", "har2",
                          "ptb_word", "ptb_char", "ucr"]
    assert "parity" in names and "broken" not in names and "leaky_ep" in cells.available()
    info = tasks.describe("parity")
    assert (info.summary, info.paper, info.metric) == ("Parity of T random bits", "Minsky & Papert 1969, ch. 2",
                                                      "accuracy")
    assert info.option("seq_len").help == "T: bits to read"
    x, y = next(tasks.build("parity", seed=1, seq_len=6).batches("val", 5))
    assert x.shape == (5, 6, 1) and torch.equal(y, x.squeeze(-1).sum(dim=1).long() % 2)


def test_the_cli_trains_on_an_entry_point_task_and_warns_once_about_the_broken_one(plugin_dir, tmp_path):
    result = cli("train", "--task", "parity", "--cell", "rnn", *TINY, "--json", store=tmp_path / "runs.db",
                 plugin_dir=plugin_dir)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "completed"
    [line] = [line for line in result.stderr.splitlines() if "broken" in line]
    assert line.startswith("stability:0: PluginWarning: skipped task plugin 'broken'")
    listed = cli("tasks", store=tmp_path / "runs.db", plugin_dir=plugin_dir)
    assert "parity" in [line.split()[0] for line in listed.stdout.splitlines()]


def test_train_page_offers_the_entry_point_task_with_its_options(entry_points, store):
    app = run_page("train", task="parity", seq_len=12)
    assert not app.exception and not app.error
    assert app.selectbox(key="train_task").value == "parity"
    assert app.number_input(key="train_parity_seq_len").value == 12
    assert any("Parity of T random bits" == caption.value for caption in app.caption)


# ------------------------------------------------------------------------------------ no page names one
def test_no_page_names_a_cell_or_a_task():
    """Everything a page shows about a cell or task comes from describe(), so no page spells a name."""
    sources = {path.name: path.read_text() for path in [ROOT / "app.py", *PAGES.glob("*.py")]}
    names = cells.available() + tasks.available()
    found = [f"{file}: {quote}{name}{quote}" for file, text in sources.items() for name in names
             for quote in "\"'" if f"{quote}{name}{quote}" in text]
    assert found == []
