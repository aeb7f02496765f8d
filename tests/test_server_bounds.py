"""Issue 33, item 3: the server's work bounded by cost, not by count.

- one timing child per server process, timing only the shapes someone still waits for
  (stability/workers/timing.py, Note [One timing child]): real child processes, counted with psutil;
- the Gradient flow page bounded by its operation count, every exception one line;
- float options with finite bounds, and a build's every exception one line in the forms' checks;
- checks that build models: builds keyed on what changes a build, at most a few per sweep check
  (counted through a registered cell that counts its own constructions).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest
from streamlit.testing.v1 import AppTest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.workers.processes import TIMING_MODULE

ROOT = Path(__file__).resolve().parent.parent


def tiny(cell="gru", hidden=8, **train):
    settings = dict(steps=3, batch_size=8, eval_examples=16, probe_examples=4, log_every=1, eval_every=1)
    settings.update(train)
    return RunConfig(cell=CellConfig(cell, hidden), task=TaskConfig("adding", {"seq_len": 10}),
                     train=TrainConfig(**settings))


def timing_children() -> list[psutil.Process]:
    """This process's live shape-timing children, found as processes (not through the module's records)."""
    found = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and TIMING_MODULE in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def exec_d_timing_children(seconds: float = 10.0) -> list[psutil.Process]:
    """:func:`timing_children` once there is one: a child just started shows its parent's command line until it
    has exec'd (between fork and exec it is a copy of pytest), so it is looked for a few seconds (CI saw 0)."""
    deadline = time.monotonic() + seconds
    while not (found := timing_children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


# ------------------------------------------------------------------ one timing child
@pytest.fixture
def timing():
    from stability.workers import timing as shape_timing

    shape_timing.stop_children()
    shape_timing._known.clear()
    yield shape_timing
    shape_timing.stop_children()
    shape_timing._known.clear()


def test_six_requests_in_a_row_keep_one_timing_child_and_the_last_shape_is_the_one_timed(timing):
    """Six edits, each asking for a shape not seen before: before, six children were alive at once; now one,
    and the shape the last request asked for is timed while the five dropped ones are never timed."""
    configs = [tiny(hidden=8 * (number + 1)) for number in range(6)]
    alive = []
    for config in configs:
        known, waiting = timing.timed_apart([config], requester="session")
        assert known == {} and waiting == {timing.shape_of(config)}
        alive.append(len(exec_d_timing_children()))
        if alive[-1] != 1:  # what this process's children were, for a failure to say
            alive.append([(child.pid, child.status(), child.cmdline()[-3:]) for child in
                          psutil.Process(os.getpid()).children(recursive=True)])
    assert alive == [1] * 6
    last = timing.shape_of(configs[-1])
    for _ in range(1200):  # until the child answers (it ends itself at its limit)
        known, waiting = timing.timed_apart([configs[-1]], requester="session")
        assert len(timing_children()) <= 1
        if not waiting:
            break
        time.sleep(0.1)
    assert known[last] is not None and known[last] > 0
    assert not any(timing.shape_of(config) in timing._known for config in configs[:-1])


def test_a_shape_another_session_waits_for_is_kept_and_timed_after_the_running_child(timing):
    """Two sessions: the second's shape waits for the first's child (never a second child), then is timed."""
    first, second = tiny(hidden=8), tiny(hidden=16)
    timing.timed_apart([first], requester="a")
    known, waiting = timing.timed_apart([second], requester="b")
    # one child at most: the first's (a tiny shape's child may already have ended on a busy machine)
    assert waiting == {timing.shape_of(second)} and len(timing_children()) <= 1
    for _ in range(2400):
        known_a, waiting_a = timing.timed_apart([first], requester="a")
        known_b, waiting_b = timing.timed_apart([second], requester="b")
        assert len(timing_children()) <= 1
        if not waiting_a and not waiting_b:
            break
        time.sleep(0.1)
    assert known_a[timing.shape_of(first)] and known_b[timing.shape_of(second)]


def test_six_edits_of_the_sweep_form_keep_one_timing_child(store, timing):
    """The Sweep page through AppTest: each edit of the hidden size asks for unseen shapes; one child at most."""
    app = AppTest.from_file(str(ROOT / "pages" / "sweep.py"), default_timeout=60).run()
    assert not app.exception
    alive = [len(timing_children())]
    for hidden in (24, 40, 56, 72, 88, 104):
        app.number_input(key="sweep_hidden").set_value(hidden).run()
        assert not app.exception and not app.error
        alive.append(len(timing_children()))
    assert max(alive) == 1
    wanted = {shape for wish in timing._wishes.values() for shape in wish.configs}
    assert wanted and all('"rnn", 104' in shape or '"spectral", 104' in shape for shape in wanted)


# ------------------------------------------------------------------ checks that build models
class _Counted:
    """Mixed into an Elman cell: every construction counted on its class (a real build, counted)."""

    made = 0

    def __init__(self, input_size: int, hidden_size: int, *, init_gain: float = 1.0, h0: str = "zero",
                 h0_noise_std: float = 0.1):
        type(self).made += 1
        super().__init__(input_size, hidden_size, init_gain=init_gain, h0=h0, h0_noise_std=h0_noise_std)


@pytest.fixture
def counted():
    """A freshly registered cell ``counted`` whose class counts its builds; unregistered afterwards."""
    from stability import cells
    from stability.cells.rnn import ElmanRNN

    cls = type("Counted", (_Counted, ElmanRNN), {"made": 0, "summary": "an Elman cell counting its builds"})
    cells.register("counted", cls, replace=True)
    yield cls
    cells.unregister("counted")


def test_a_check_builds_the_cell_once_whatever_the_seed_lr_or_steps(counted):
    """Issue 33: a form's check built the cell again at every change of seed, lr or steps."""
    from stability.admission.preflight import check_buildable

    for seed, lr, steps in [(0, 1e-3, 10), (1, 1e-3, 10), (1, 1e-2, 10), (1, 1e-2, 20), (2, 3e-2, 30)]:
        check_buildable(tiny("counted", seed=seed, lr=lr, steps=steps))
    assert counted.made == 1
    check_buildable(tiny("counted", hidden=16))  # a size changes the build
    assert counted.made == 2


def test_the_train_form_builds_its_cell_once_as_seed_lr_and_steps_change(store, counted):
    app = AppTest.from_file(str(ROOT / "pages" / "train.py"), default_timeout=60).run()
    app.selectbox(key="train_cell").set_value("counted").run()
    assert not app.exception and not app.error
    app.number_input(key="train_seed").set_value(7).run()
    app.number_input(key="train_lr").set_value(0.02).run()
    app.number_input(key="train_steps").set_value(300).run()
    assert not app.exception and not app.error
    assert counted.made == 1


def test_a_sweep_check_builds_at_most_a_few_models(counted):
    """16 hidden sizes x 4 sequence lengths: 85 checks of which 16 distinct cells; before, every check built
    its cell (85 builds); now a few, the rest checked without building."""
    from stability.sweeps import build_spec
    from stability.sweeps.spec import MAX_CHECK_BUILDS

    spec = build_spec(tiny("counted"), [f"cell.hidden_size={','.join(str(8 * n) for n in range(1, 17))}",
                                        "task.seq_len=10,20,30,40"])
    assert spec.size() == 64 and 1 <= counted.made <= MAX_CHECK_BUILDS
    assert spec.unbuilt and spec.check_note().startswith(f"{spec.unbuilt} of this sweep's models were checked without")


def test_a_cell_past_the_build_cost_is_not_built_by_a_check(counted):
    from stability.admission import budget, preflight

    config = tiny("counted", hidden=4096)
    assert budget.build_cost(config)[0] > preflight.MAX_CHECK_BUILD_WORK
    preflight.check_buildable(config)
    assert counted.made == 0


# ------------------------------------------------------------------ one line, finite options
class _Raising:
    """Mixed into an Elman cell: a RuntimeError from deep inside its build for a gain over 2."""

    def __init__(self, input_size: int, hidden_size: int, *, init_gain: float = 1.0, h0: str = "zero",
                 h0_noise_std: float = 0.1):
        if init_gain > 2:
            raise RuntimeError("from is out of bounds for float\n  (deep inside torch)")
        super().__init__(input_size, hidden_size, init_gain=init_gain, h0=h0, h0_noise_std=h0_noise_std)


def test_any_exception_of_a_build_is_one_config_error_line_and_its_traceback_is_logged(caplog):
    from stability import cells
    from stability.admission.preflight import check_buildable
    from stability.cells.rnn import ElmanRNN
    from stability.config import ConfigError

    cells.register("raising", type("Raising", (_Raising, ElmanRNN), {}), replace=True)
    try:
        config = tiny("raising")
        config.cell.options = {"init_gain": 3.0}
        with caplog.at_level("ERROR"), pytest.raises(ConfigError) as raised:
            check_buildable(config)
    finally:
        cells.unregister("raising")
    assert str(raised.value) == "cell 'raising': RuntimeError: from is out of bounds for float (deep inside torch)"
    assert "Traceback" in caplog.text and "RuntimeError" in caplog.text


@pytest.mark.parametrize("cell", ["vprnn", "sgornn"])
@pytest.mark.parametrize("value", [1e308, float("inf"), float("nan"), -1e308, 10**400],
                         ids=["1e308", "inf", "nan", "-1e308", "10**400"])
def test_a_float_option_beyond_its_finite_bounds_is_one_validation_line(cell, value):
    from stability.config import ConfigError

    config = tiny(cell)
    config.cell.options = {"angle_init": value}
    with pytest.raises(ConfigError, match=r"cell option angle_init of cell '\w+' must be a finite number from 0 to "
                                          r"1e\+06; got ") as raised:
        config.validate()
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("page, select", [
    ("train", lambda app: app.selectbox(key="train_cell").set_value("vprnn")),
    ("race", lambda app: app.multiselect(key="race_cells").set_value(["vprnn"])),
    ("sweep", lambda app: app.selectbox(key="sweep_cell").set_value("vprnn")),
])
def test_angle_init_1e308_is_one_error_line_on_each_form(store, page, select):
    """Issue 33: it crashed the Train, Race and Sweep forms with a traceback (RuntimeError in the build)."""
    app = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=60).run()
    select(app).run()
    app.number_input(key=f"{page}_vprnn_angle_init").set_value(1e308).run()
    assert not app.exception
    [error] = [error.value for error in app.error]
    assert "angle_init" in error and "finite number" in error and "\n" not in error


# ------------------------------------------------------------------ gradient flow, bounded
def gradient_flow(**query):
    app = AppTest.from_file(str(ROOT / "pages" / "gradient_flow.py"), default_timeout=120)
    for key, value in query.items():
        app.query_params[key] = value
    return app.run()


def test_gradient_flow_of_a_1000_layer_mlp_over_its_cost_is_one_line_and_builds_nothing(monkeypatch):
    from stability import cells

    built = []
    build = cells.build
    monkeypatch.setattr(cells, "build", lambda *args, **kwargs: built.append(kwargs) or build(*args, **kwargs))
    app = gradient_flow(cell="mlp", hidden="256", T="10")
    app.number_input(key="gf_mlp_layers").set_value(1000).run()
    assert not app.exception and not app.get("vega_lite_chart")
    [error] = [error.value for error in app.error]
    assert error.startswith("Not measured: mlp at hidden size 256, layers 1000 and T = 10") and "or layers" in error
    assert built and not any(options.get("layers") == 1000 for options in built)  # the refused one never built


def test_gradient_flow_of_a_1000_layer_mlp_within_its_cost_draws_its_charts():
    """Its bound ‖W‖^1000 overflowed a float: an OverflowError traceback on the page."""
    app = gradient_flow(cell="mlp", hidden="64", T="10")
    app.number_input(key="gf_mlp_layers").set_value(1000).run()
    assert not app.exception and not app.error
    assert len(app.get("vega_lite_chart")) == 2


def test_gradient_flow_angle_init_1e308_is_one_line():
    app = gradient_flow(cell="vprnn", hidden="16", T="10")
    app.number_input(key="gf_vprnn_angle_init").set_value(1e308).run()
    assert not app.exception
    [error] = [error.value for error in app.error]
    assert error.startswith("Cannot build vprnn: cell option angle_init") and "finite" in error
