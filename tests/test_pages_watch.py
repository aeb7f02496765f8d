"""An external run (stability.watch, logged from a loop of the test's own) on the Train, Runs and Compare
pages through Streamlit's AppTest: shown live while its loop runs, with its diagnosis in words, and
"external run — logged from your own loop" where the pages would offer Start, Stop or Resume."""
import time
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest
from torch import nn

import stability.watch as sw
from pages.ui.status import EXTERNAL, QUIET_AFTER_S, quiet_for
from stability.watch import run as watch_run

PAGES = Path(__file__).resolve().parent.parent / "pages"


@pytest.fixture(autouse=True)
def read_at_every_rerun(monkeypatch):
    """The server reads a watched run at most every 0.75 s (stability/live/tail.py); these tests rerun at once."""
    import stability.live.tail

    monkeypatch.setattr(stability.live.tail, "READ_EVERY_S", 0.0)


class Loop:
    """An Elman RNN trained on one fixed batch, whose float64 probe watches ‖∂L/∂h0‖ vanish (W = 0.05 I)."""

    def __init__(self, run):
        torch.manual_seed(0)
        self.rnn, self.head = nn.RNN(2, 4, batch_first=True), nn.Linear(4, 1)
        with torch.no_grad():
            self.rnn.weight_hh_l0.copy_(0.05 * torch.eye(4))
        self.model = nn.ModuleDict({"rnn": self.rnn, "head": self.head})
        self.x, self.y = torch.randn(3, 30, 2), torch.randn(3, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.run = run
        run.watch(self.model, every=1, probe=sw.Probe(self.loss_of, h0=torch.zeros(1, 3, 4), inputs=(self.x, self.y)))

    @staticmethod
    def loss_of(model, h0, x, y):
        return ((model["head"](model["rnn"](x, h0)[0][:, -1]) - y) ** 2).mean()

    def steps(self, count):
        for _ in range(count):
            h0 = torch.zeros(1, 3, 4, requires_grad=True)
            loss = self.loss_of(self.model, h0, self.x, self.y)
            self.run.step(loss, h0=h0)
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()


def page(name, **query):
    app = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=30)
    for key, value in query.items():
        app.query_params[key] = str(value)
    return app.run()


def texts(app):
    return " ".join(str(element.value) for kind in ("markdown", "caption", "info", "warning", "error")
                    for element in getattr(app, kind))


def test_an_external_run_shows_live_on_train_with_its_diagnosis_and_no_stop(store, monkeypatch):
    monkeypatch.setattr(watch_run, "WRITE_EVERY_S", 0.0)  # every whole step written at once
    run = sw.init("my rnn", store=store, config={"lr": 1e-3})
    loop = Loop(run)
    loop.steps(8)
    app = page("train", run=run.id)
    assert not app.exception and not app.error
    assert EXTERNAL in texts(app) and "train_stop" not in [button.key for button in app.button]
    assert "ModuleDict (RNN)" in texts(app) and "running" in texts(app)
    assert "What is happening" in texts(app) and "vanish" in texts(app).lower()
    before = store.record(run.id).step
    loop.steps(4)  # the loop goes on: the page's next look draws the new rows
    app.run()
    data = b"".join(dataset.data.data for chart in app.get("vega_lite_chart") for dataset in chart.proto.datasets)
    assert not app.exception and store.record(run.id).step == before + 4 and data
    assert any(f"step {before + 3:,}" in p.proto.text or f"step {before + 4:,}" in p.proto.text
               for p in app.get("progress"))
    run.finish()


def test_runs_and_compare_say_external_instead_of_stop_and_resume(store):
    with sw.init("mine", store=store) as run:
        Loop(run).steps(3)
    runs = page("runs")
    runs.session_state["runs_table"] = {"selection": {"rows": [0]}}
    runs.run()
    assert not runs.exception and EXTERNAL in texts(runs)
    buttons = {button.key: button for button in runs.button}
    assert buttons["runs_resume"].disabled and buttons["runs_stop"].disabled
    compare = page("compare", runs=run.id)
    assert not compare.exception and not compare.error and EXTERNAL in texts(compare)
    assert compare.get("vega_lite_chart")


def test_a_silent_external_run_is_no_word_for_n_minutes_never_failed(store):
    run = sw.init(store=store)
    record = store.record(run.id)
    assert quiet_for(record) is None
    later = (record.heartbeat or record.started_at) + QUIET_AFTER_S + 12 * 60
    assert quiet_for(record, now=later) == f"no word for {int((QUIET_AFTER_S + 12 * 60) // 60)} min"
    run.finish()
    assert quiet_for(store.record(run.id), now=time.time() + 3600) is None
