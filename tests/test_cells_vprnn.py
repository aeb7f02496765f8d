"""VPRNN: h_t = f(W_in x_t + b + W h_{t-1}), W = R_1 Q_1 ... R_k Q_k (SGORNN paper eq. 2)."""
import math

import pytest
import torch

from stability import cells


def make(hidden=8, input_size=3, **options):
    return cells.build("vprnn", input_size, hidden, **options)


def test_defaults_follow_the_sgornn_paper():
    cell = make(128, 2)
    assert cell.k == 14 and cell.nonlinearity == "relu"  # §3.1: k = 14 at hidden size 128
    angles = cell.parametrizations.weight_hh.original
    assert angles.shape == (14, 64)
    assert angles.abs().max() <= 0.05
    assert cell.recurrent_parameter_count() == 14 * 64 == angles.numel()
    assert cell.gate_values() == {}
    # Table 1: 1,409 parameters on the addition problem, with a 128 -> 1 readout.
    assert sum(p.numel() for p in cell.parameters()) + 128 + 1 == 1409


@pytest.mark.parametrize("hidden", [2, 4, 6, 10, 12, 30, 64, 100, 256])
def test_default_k_is_twice_ceil_log2_of_the_hidden_size(hidden):
    """The VPRNN code's n_rotations = ceil(log2(units)) on each side of the layer: k = 2 ceil(log2 n)."""
    expected = 2 * math.ceil(math.log2(hidden))
    cell = make(hidden, 2)
    assert cell.k == expected
    angles = cell.parametrizations.weight_hh.original
    assert angles.shape == (expected, hidden // 2)
    assert cell.recurrent_parameter_count() == expected * hidden // 2 == angles.numel()
    assert cell.parametrizations.weight_hh[0].permutations.shape == (expected, hidden)
    w = cell.recurrent_matrix().detach().double()
    torch.testing.assert_close(w.T @ w, torch.eye(hidden, dtype=torch.float64), rtol=0, atol=1e-5)


def test_explicit_k_overrides_the_rule():
    cell = make(128, 2, k=3)
    assert cell.k == 3 and cell.recurrent_parameter_count() == 3 * 64
    assert cell.parametrizations.weight_hh.original.shape == (3, 64)
    assert make(128, 2, k=None).k == 14


def test_update_equation_with_the_built_matrix():
    cell = make(6, 3, k=4, angle_init=math.pi).double()
    x = torch.randn(2, 1, 3, dtype=torch.float64)
    h0 = torch.randn(2, 6, dtype=torch.float64)
    _, h1 = cell(x, h0)
    w = cell.recurrent_matrix()
    expected = torch.relu(x[:, 0] @ cell.input_proj.weight.t() + cell.input_proj.bias + h0 @ w.t())
    torch.testing.assert_close(h1, expected, rtol=0, atol=1e-12)


def test_zero_angle_init_starts_at_a_permutation_matrix():
    w = make(10, angle_init=0.0).recurrent_matrix()
    assert set(w.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(w.sum(0), torch.ones(10)) and torch.equal(w.sum(1), torch.ones(10))


def test_stays_orthogonal_after_optimizer_steps():
    cell = make(32, 3, angle_init=math.pi)
    optimizer = torch.optim.Adam(cell.parameters(), lr=0.5)
    x, y = torch.randn(8, 20, 3), torch.randn(8, 32)
    angles_before = cell.parametrizations.weight_hh.original.detach().clone()
    for _ in range(10):
        optimizer.zero_grad()
        outputs, _ = cell(x)
        (outputs[:, -1] - y).pow(2).mean().backward()
        optimizer.step()
    assert not torch.allclose(cell.parametrizations.weight_hh.original, angles_before)
    w = cell.recurrent_matrix().detach()
    assert (w.t() @ w - torch.eye(32)).abs().max() < 1e-5
    assert (torch.linalg.svdvals(w.double()) - 1).abs().max() < 1e-5


def test_gradcheck_fused_path(gradcheck_through_parameters):
    cell = make(4, 2, k=3, angle_init=math.pi).double()
    cell.impl = "scan"
    x = torch.randn(2, 5, 2, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    assert gradcheck_through_parameters(cell, x, h0)


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_native_kernel_runs_the_parametrized_matrix(nonlinearity):
    cell = make(8, 3, nonlinearity=nonlinearity, angle_init=1.0).double()
    x = torch.randn(3, 7, 3, dtype=torch.float64)
    results = {}
    for impl in ("native", "scan"):
        cell.impl = impl
        cell.zero_grad()
        outputs, _ = cell(x)
        outputs.sin().sum().backward()
        results[impl] = outputs.detach(), cell.parametrizations.weight_hh.original.grad.clone()
    torch.testing.assert_close(results["native"][0], results["scan"][0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(results["native"][1], results["scan"][1], rtol=1e-9, atol=1e-11)


def test_state_dict_restores_angles_and_permutations():
    torch.manual_seed(1)
    first = make(8, 3, angle_init=1.0)
    torch.manual_seed(2)
    second = make(8, 3, angle_init=1.0)
    x = torch.randn(2, 6, 3)
    assert not torch.allclose(first(x)[0], second(x)[0])
    second.load_state_dict(first.state_dict())
    torch.testing.assert_close(first(x)[0], second(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize("hidden", [7, 1])
def test_odd_hidden_size_is_a_clear_error(hidden):
    with pytest.raises(ValueError, match=f"hidden_size must be even for the VPRNN rotations.*got {hidden}"):
        make(hidden)


@pytest.mark.parametrize("option,value", [("k", 0), ("k", 2.5), ("k", True), ("angle_init", -1.0),
                                          ("nonlinearity", "sigmoid")])
def test_bad_options_name_themselves(option, value):
    with pytest.raises(ValueError, match=option):
        make(8, **{option: value})
