"""Issue 33, item 3: the server's work bounded by cost, not by count.

- one timing child per server process, timing only the shapes someone still waits for
  (stability/sweeps/shape_timing.py, Note [One timing child]): real child processes, counted with psutil;
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
            if child.status() != psutil.STATUS_ZOMBIE and "stability.sweeps.shape_timing" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


# ------------------------------------------------------------------ one timing child
@pytest.fixture
def timing():
    from stability.sweeps import shape_timing

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
        alive.append(len(timing_children()))
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
    assert waiting == {timing.shape_of(second)} and len(timing_children()) == 1
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
