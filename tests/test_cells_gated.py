"""lstm and gru: agreement with torch.nn and gate statistics."""
import pytest
import torch

from stability import cells


def copy_into(reference, cell):
    with torch.no_grad():
        reference.weight_ih_l0.copy_(cell.weight_ih)
        reference.weight_hh_l0.copy_(cell.weight_hh)
        reference.bias_ih_l0.copy_(cell.bias_ih)
        reference.bias_hh_l0.copy_(cell.bias_hh)


@pytest.mark.parametrize("name,module", [("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU)])
def test_matches_torch_nn_on_both_paths(name, module):
    cell = cells.build(name, 3, 6).double()
    reference = module(3, 6, batch_first=True).double()
    copy_into(reference, cell)
    x = torch.randn(2, 9, 3, dtype=torch.float64)
    expected, _ = reference(x)
    for impl in ("auto", "loop"):
        cell.impl = impl
        outputs, _ = cell(x)
        torch.testing.assert_close(outputs, expected, rtol=1e-12, atol=1e-12)


def test_lstm_state_is_h_then_c():
    cell = cells.build("lstm", 3, 6).double()
    reference = torch.nn.LSTM(3, 6, batch_first=True).double()
    copy_into(reference, cell)
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    h0, c0 = torch.randn(2, 6, dtype=torch.float64), torch.randn(2, 6, dtype=torch.float64)
    _, (h_n, c_n) = reference(x, (h0[None], c0[None]))
    _, state = cell(x, torch.cat([h0, c0], dim=1))
    torch.testing.assert_close(state, torch.cat([h_n[0], c_n[0]], dim=1))


def test_forget_bias_is_added_to_the_forget_block_only():
    torch.manual_seed(0)
    plain = cells.build("lstm", 2, 4, forget_bias=0.0)
    torch.manual_seed(0)
    biased = cells.build("lstm", 2, 4, forget_bias=1.0)
    difference = (biased.bias_ih - plain.bias_ih).detach()
    torch.testing.assert_close(difference, torch.tensor([0.0] * 4 + [1.0] * 4 + [0.0] * 8))


def manual_lstm_gates(cell, x):
    """Gate means from an explicit loop, independent of gate_values()."""
    H = cell.hidden_size
    h = torch.zeros(x.shape[0], H, dtype=x.dtype)
    c = torch.zeros_like(h)
    collected = {"input": [], "forget": [], "output": []}
    for t in range(x.shape[1]):
        z = x[:, t] @ cell.weight_ih.t() + cell.bias_ih + h @ cell.weight_hh.t() + cell.bias_hh
        i, f, g, o = torch.sigmoid(z[:, :H]), torch.sigmoid(z[:, H:2 * H]), torch.tanh(z[:, 2 * H:3 * H]), \
            torch.sigmoid(z[:, 3 * H:])
        c = f * c + i * g
        h = o * torch.tanh(c)
        for key, value in (("input", i), ("forget", f), ("output", o)):
            collected[key].append(value)
    return {k: torch.stack(v).mean().item() for k, v in collected.items()}


def test_lstm_gate_values_are_the_mean_activations_of_the_last_forward():
    cell = cells.build("lstm", 3, 5).double()
    assert cell.gate_values() == {}
    x = torch.randn(4, 7, 3, dtype=torch.float64)
    with torch.no_grad():
        expected = manual_lstm_gates(cell, x)
    cell(x)
    assert cell.gate_values() == pytest.approx(expected, rel=1e-10)
    cell.impl = "loop"
    cell(x)
    assert cell.gate_values() == pytest.approx(expected, rel=1e-10)


def test_gru_gate_values():
    cell = cells.build("gru", 3, 5).double()
    x = torch.randn(4, 7, 3, dtype=torch.float64)
    H = 5
    h = torch.zeros(4, H, dtype=torch.float64)
    zs, rs = [], []
    with torch.no_grad():
        for t in range(7):
            gi = x[:, t] @ cell.weight_ih.t() + cell.bias_ih
            gh = h @ cell.weight_hh.t() + cell.bias_hh
            r = torch.sigmoid(gi[:, :H] + gh[:, :H])
            z = torch.sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
            n = torch.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
            h = (1 - z) * n + z * h
            zs.append(z)
            rs.append(r)
    cell(x)
    values = cell.gate_values()
    assert values["update"] == pytest.approx(torch.stack(zs).mean().item(), rel=1e-10)
    assert values["reset"] == pytest.approx(torch.stack(rs).mean().item(), rel=1e-10)
