"""stability/watch: a run logged from someone's own loop (run.py), the matrices it finds (units.py), the
gates it replays (gates.py) and the readings it stores (readings.py), each checked against an independent
computation (torch.linalg.svdvals, torch.autograd on a float64 copy, our own LSTM cell's gates)."""
import copy
import math
import os

import numpy as np
import pytest
import torch
from torch import nn

import stability.watch as sw
from stability import cells, tasks
from stability.core import metric_names as names
from stability.execution import lifecycle
from stability.runs.store import RunStore
from stability.training.checkpoints import ResumeError

HIDDEN, T, BATCH = 6, 8, 5


def adding_lstm_loop(run, steps=6, every=2, seed=0, snapshots=None):
    """Train an nn.LSTM on the adding task through the API; ``snapshots``: step -> (weight_hh, ‖∂L/∂(h0, c0)‖)
    as read independently at each logged step, before the backward."""
    torch.manual_seed(seed)
    task = tasks.build("adding", seed=seed, seq_len=T)
    lstm, head = nn.LSTM(task.input_size, HIDDEN, batch_first=True), nn.Linear(HIDDEN, 1)
    model = nn.ModuleDict({"lstm": lstm, "head": head})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run.watch(model, every=every)
    batches = task.batches("train", BATCH)
    for step in range(1, steps + 1):
        x, y = next(batches)
        h0 = torch.zeros(1, BATCH, HIDDEN, requires_grad=True)
        c0 = torch.zeros(1, BATCH, HIDDEN, requires_grad=True)
        out, _ = lstm(x, (h0, c0))
        loss = task.loss(head(out[:, -1]), y)
        if snapshots is not None and run.watcher.due(step):
            gh, gc = torch.autograd.grad(loss, (h0, c0), retain_graph=True)
            norm = math.sqrt((gh.double() ** 2).sum().item() + (gc.double() ** 2).sum().item())
            snapshots[step] = (lstm.weight_hh_l0.detach().clone(), norm)
        run.step(loss, h0=(h0, c0))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model


def rows(store, run_id, name):
    frame = store.metrics(run_id, names=[name])
    return dict(zip(frame["step"], frame["value"]))


def test_a_plain_lstm_loop_on_the_adding_task_stores_what_svdvals_and_autograd_read(store):
    snapshots = {}
    with sw.init(name="mine", store=store, config={"lr": 0.1}) as run:
        adding_lstm_loop(run, snapshots=snapshots)
    record = store.record(run.id)
    assert (record.status, record.external, record.config, record.step) == ("completed", True, None, 6)
    assert record.raw_config["config"] == {"lr": 0.1} and record.cell == "ModuleDict (LSTM)"
    assert sorted(snapshots) == [1, 2, 4, 6] and sorted(rows(store, run.id, names.TRAIN_LOSS)) == [1, 2, 4, 6]
    metrics = store.metrics(run.id).set_index(["name", "step"])["value"]
    spectra = {gate: store.series(run.id, names.block_name(names.SPECTRUM, f"lstm.l0.{gate}")) for gate in "ifgo"}
    for step, (weight, h0_norm) in snapshots.items():
        for index, gate in enumerate("ifgo"):
            sigma = torch.linalg.svdvals(weight[index * HIDDEN:(index + 1) * HIDDEN].double()).numpy()
            place = f"lstm.l0.{gate}"
            stored = spectra[gate]
            np.testing.assert_allclose(stored[stored["step"] == step]["value"], sigma, rtol=1e-12)
            assert metrics[names.block_name(names.SV_MIN, place), step] == pytest.approx(sigma[-1], rel=1e-12)
            assert metrics[names.block_name(names.SV_MARGIN, place), step] == pytest.approx(
                np.abs(sigma - 1).max(), rel=1e-12)
            if gate == "g":  # the primary block: the names alone read as our lstm cell's (its U_g)
                assert metrics[names.SV_MAX, step] == pytest.approx(sigma[0], rel=1e-12)
        assert metrics[names.H0_NORM_TRAIN, step] == pytest.approx(h0_norm, rel=1e-6)
    assert {names.RECURRENT_NORM, names.TOTAL_NORM, "gate/forget"} <= set(store.latest(run.id))


def test_the_float64_probe_reads_h0_norm_where_float32_reads_zero(store):
    """An Elman RNN whose W shrinks the state 20-fold a step: after 40 steps ∂L/∂h0 is ~1e-55, below
    float32's range. The training batch's float32 gradient is exactly 0 (and is stored as read); the probe's
    float64 copy reads the value an independent float64 autograd computes."""
    torch.manual_seed(1)
    rnn, head = nn.RNN(2, 4, batch_first=True), nn.Linear(4, 1)
    with torch.no_grad():
        rnn.weight_hh_l0.copy_(0.05 * torch.eye(4))
    model = nn.ModuleDict({"rnn": rnn, "head": head})
    x, y = torch.randn(3, 40, 2), torch.randn(3, 1)

    def loss_of(m, h0, x, y):
        return ((m["head"](m["rnn"](x, h0)[0][:, -1]) - y) ** 2).mean()

    h0 = torch.zeros(1, 3, 4)
    with sw.init(store=store) as run:
        run.watch(model, every=1, probe=sw.Probe(loss_of, h0=h0, inputs=(x, y)))
        train_h0 = h0.clone().requires_grad_()
        loss = loss_of(model, train_h0, x, y)
        (float32_grad,) = torch.autograd.grad(loss, train_h0, retain_graph=True)
        run.step(loss, h0=train_h0)
    wide = copy.deepcopy(model).double()
    h0_64 = torch.zeros(1, 3, 4, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(loss_of(wide, h0_64, x.double(), y.double()), h0_64)
    expected = math.sqrt(sum(v * v for v in (grad.abs() / grad.abs().max()).flatten().tolist())) * grad.abs().max().item()
    assert float32_grad.abs().max().item() == 0.0 and 0 < expected < 1e-40
    assert rows(store, run.id, names.H0_NORM)[1] == pytest.approx(expected, rel=1e-9)
    assert rows(store, run.id, names.H0_NORM_TRAIN)[1] == 0.0


def test_states_a_loop_carries_give_the_gradient_through_time(store):
    """‖∂L/∂h_t‖ for t = 0..T from the states an nn.RNNCell loop carried, against autograd on each."""
    torch.manual_seed(2)
    cell, x = nn.RNNCell(2, 4), torch.randn(3, 5, 2)
    with sw.init(store=store) as run:
        run.watch(cell, every=1)
        h = h0 = torch.zeros(3, 4, requires_grad=True)
        states = []
        for t in range(5):
            h = cell(x[:, t], h)
            states.append(h)
        loss = h.pow(2).sum()
        expected = [g.norm().item() for g in torch.autograd.grad(loss, [h0, *states], retain_graph=True)]
        run.step(loss, h0=h0, states=states)
    flow = store.series(run.id, names.H_T_NORM_TRAIN)
    np.testing.assert_allclose(flow["value"], expected, rtol=1e-6)


def test_a_crash_inside_the_with_block_leaves_the_run_failed_with_its_rows(store):
    with pytest.raises(ZeroDivisionError):
        with sw.init(store=store) as run:
            adding_lstm_loop(run, steps=3, every=1)
            1 / 0
    record = store.record(run.id)
    assert (record.status, record.error) == ("failed", "ZeroDivisionError: division by zero")
    assert sorted(rows(store, run.id, names.TRAIN_LOSS)) == [1, 2, 3]
    with pytest.raises(KeyboardInterrupt):
        with sw.init(store=store) as stopped:
            raise KeyboardInterrupt
    assert (store.record(stopped.id).status, store.record(stopped.id).error) == ("stopped", "interrupted from the keyboard")


def test_an_external_run_is_never_resumed_nor_taken_for_gone_while_its_process_lives(store):
    run = sw.init(store=store)
    record = store.record(run.id)
    assert (record.status, record.pid, record.host) == ("running", os.getpid(), lifecycle.this_host())
    old = store.record(run.id).__class__(**{**record.__dict__, "heartbeat": 0.0, "started_at": 0.0, "created_at": 0.0})
    assert not lifecycle.claimant_gone(old)  # silent for decades, its process alive: not gone
    assert not lifecycle.claimant_gone(old.__class__(**{**old.__dict__, "host": "elsewhere"}))
    assert lifecycle.claimant_gone(old.__class__(**{**old.__dict__, "pid": 2**22 + 12345}))  # a dead pid here
    run.finish("stopped", "mine")
    with pytest.raises(ResumeError, match="external run"):
        lifecycle.check_resumable(store, run.id)
    run.finish()  # once only
    assert store.record(run.id).status == "stopped"


def test_units_of_torch_modules_our_cells_and_the_protocol():
    gru = nn.GRU(3, 4, num_layers=2, bidirectional=True)
    places = [block.place for unit in sw.recurrent_units(gru) for block in unit.blocks]
    assert places[:6] == ["gru.l0.r", "gru.l0.z", "gru.l0.n", "gru.l0_reverse.r", "gru.l0_reverse.z", "gru.l0_reverse.n"]
    assert len(places) == 12 and [u.primary.place for u in sw.recurrent_units(gru)][0] == "gru.l0.n"
    torch.testing.assert_close(sw.recurrent_units(gru)[3].blocks[1].matrix(), gru.weight_hh_l1_reverse[4:8])
    spectral = cells.build("spectral", 2, 4)
    (unit,) = sw.recurrent_units(nn.Sequential(spectral))
    torch.testing.assert_close(unit.primary.matrix(), spectral.recurrent_matrix())

    class Mine(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3, 3))

        def recurrent_matrices(self):
            return {"w": self.w}

    (unit,) = sw.recurrent_units(nn.ModuleDict({"mine": Mine()}))
    assert unit.primary.place == "mine.w" and unit.parameters == [unit.primary.matrix()]
    with pytest.raises(ValueError, match="no recurrent matrix to watch"):
        sw.recurrent_units(nn.Linear(2, 2))


def test_lstm_gates_replayed_match_our_lstm_cells_gates():
    """The gate means of an nn.LSTM's last forward, replayed, against stability's own LSTM cell given
    the same weights (stability/cells/gated.py computes them its own way)."""
    torch.manual_seed(3)
    lstm, ours = nn.LSTM(2, 4, batch_first=True), cells.build("lstm", 2, 4)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(ours, name).copy_(getattr(lstm, f"{name}_l0"))
    watcher = sw.Watcher(nn.ModuleDict({"lstm": lstm}))
    x = torch.randn(3, 6, 2)
    lstm(x)
    ours(x)
    replayed = watcher.units[0].gates()
    for gate, value in ours.gate_values().items():
        assert replayed[gate] == pytest.approx(value, rel=1e-5)


def test_bad_input_is_one_line(store):
    with pytest.raises(ValueError, match="every must be"):
        sw.Watcher(nn.RNN(2, 2), every=0)
    with sw.init(store=store) as run:
        run.watch(nn.RNN(2, 2), every=1)
        with pytest.raises(ValueError, match="must be a number"):
            run.log({"x": "abc"})
        with pytest.raises(ValueError, match="requires_grad=True"):
            loss = run.watcher.model(torch.randn(1, 3, 2))[0].sum()
            run.step(loss, h0=torch.zeros(1, 1, 2))
