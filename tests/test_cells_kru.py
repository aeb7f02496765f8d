"""kru and kru_lstm (KRU paper §3, §4.4–4.5) against independent computations.

The contract (shapes, gradients to every parameter and h0, fused vs loop,
probes, seeds) is also checked for both cells in test_cells_common.py.
"""
import math

import pytest
import torch
from torch import nn

from stability import cells
from stability.cells.kru import two_factor_split
from stability.cells.modrelu import kronecker_step_operands, modrelu, modrelu_scan, real_block_form


def kru(hidden=8, input_size=3, **options):
    torch.manual_seed(0)
    return cells.build("kru", input_size, hidden, **options)


def kru_lstm(hidden=8, input_size=3, **options):
    torch.manual_seed(0)
    return cells.build("kru_lstm", input_size, hidden, **options)


def dense_kron(matrices):
    product = matrices[0]
    for matrix in matrices[1:]:
        product = torch.kron(product, matrix)
    return product


def perturb_factors(cell, scale=0.3):
    with torch.no_grad():
        for p in cell.parametrizations.weight_hh.parameters():
            p.add_(torch.randn_like(p) * scale)


def complex_state(batch, size, dtype=torch.float64):
    return torch.complex(torch.randn(batch, size, dtype=dtype), torch.randn(batch, size, dtype=dtype)) * 0.5


def randomise_modrelu_bias(cell):
    """Mixed signs so that some units are switched off (|z| + c <= 0) and some are not."""
    with torch.no_grad():
        cell.modrelu_bias.copy_(torch.linspace(-0.6, 0.4, cell.hidden_size, dtype=cell.modrelu_bias.dtype))


# --------------------------------------------------------------------- kru: the maths


@pytest.mark.parametrize("sizes", [None, (4, 2), (2, 4), (8,)])
def test_recurrent_matrix_is_torch_kron_of_the_factors(sizes):
    cell = kru(factor_sizes=sizes)
    perturb_factors(cell)
    factors = cell.factors()
    assert [tuple(f.shape) for f in factors] == [(n, n) for n in cell.factor_sizes]
    assert all(f.is_complex() for f in factors)
    torch.testing.assert_close(cell.recurrent_matrix(), dense_kron(factors), rtol=0, atol=1e-6)


def test_penalty_is_strength_times_eq_7_computed_separately():
    cell = kru(hidden=16, factor_sizes=(2, 2, 4), penalty_strength=0.02).double()
    perturb_factors(cell)
    expected = 0.0
    for factor in cell.factors():
        a = factor.detach().numpy()
        gram = a.conj().T @ a
        expected += sum(abs(gram[i, j] - (i == j)) ** 2 for i in range(len(a)) for j in range(len(a)))
    assert cell.penalty().item() == pytest.approx(0.02 * expected, rel=1e-12)
    assert kru(penalty_strength=0.0).penalty().item() == 0.0


@pytest.mark.parametrize("hidden", [2, 4, 8, 32, 128, 512])
def test_two_by_two_factors_give_8_log2_n_real_recurrent_parameters(hidden):
    cell = kru(hidden=hidden)
    stored = sum(p.numel() for p in cell.parametrizations.weight_hh.parameters())
    assert cell.recurrent_parameter_count() == stored == 8 * math.log2(hidden)


def test_recurrent_matrix_starts_unitary_with_zero_penalty():
    cell = kru(hidden=32)
    torch.testing.assert_close(torch.linalg.svdvals(cell.recurrent_matrix().detach()), torch.ones(32),
                               atol=1e-5, rtol=0)
    assert cell.penalty().item() < 1e-9


def test_gradient_of_the_penalty_pulls_factors_towards_unitary():
    cell = kru(penalty_strength=1.0).double()
    perturb_factors(cell)
    before = cell.penalty()
    before.backward()
    with torch.no_grad():
        for p in cell.parametrizations.weight_hh.parameters():
            p -= 1e-3 * p.grad
    assert cell.penalty().item() < before.item()


def test_modrelu_matches_its_polar_form():
    z = complex_state(50, 6)
    bias = torch.linspace(-1.0, 1.0, 6, dtype=torch.float64)
    expected = torch.polar(torch.relu(z.abs() + bias), z.angle())
    torch.testing.assert_close(modrelu(z, bias), expected)
    zero = torch.zeros(2, 6, dtype=torch.complex128, requires_grad=True)
    out = modrelu(zero, bias)
    out.real.sum().backward()
    assert out.abs().sum() == 0 and torch.isfinite(zero.grad).all()


def test_a_step_is_modrelu_of_the_complex_affine_map():
    cell = kru().double()
    randomise_modrelu_bias(cell)
    perturb_factors(cell)
    cell.impl = "auto"
    x = torch.randn(4, 1, 3, dtype=torch.float64)
    h0 = complex_state(4, 8)
    outputs, h1 = cell(x, h0)
    proj = cell.input_proj(x[:, 0])
    u = torch.complex(proj[:, :8], proj[:, 8:])
    expected = modrelu(h0 @ cell.recurrent_matrix().T + u, cell.modrelu_bias)
    torch.testing.assert_close(h1, expected)
    torch.testing.assert_close(outputs[:, 0], torch.cat([expected.real, expected.imag], dim=1))
    assert outputs.shape == (4, 1, 16) and not outputs.is_complex() and h1.is_complex()


def test_linear_unitary_cell_preserves_the_state_norm():
    """modReLU bias 0 and zero input: h_t = W^t h_0 with W unitary."""
    cell = kru(hidden=16, input_size=1).double()
    with torch.no_grad():
        cell.input_proj.weight.zero_()
    h0 = complex_state(3, 16)
    outputs, h_last = cell(torch.zeros(3, 50, 1, dtype=torch.float64), h0)
    norms = outputs.pow(2).sum(-1).sqrt()  # (B, T)
    # The factors were drawn in float32, so W is unitary to ~1e-7 per step.
    torch.testing.assert_close(norms, h0.abs().pow(2).sum(-1).sqrt()[:, None].expand(3, 50), rtol=1e-4, atol=0)


# ----------------------------------------------------------------- kru: the fused scan


def test_fused_scan_passes_gradcheck():
    torch.manual_seed(3)
    n, batch, steps = 3, 2, 4
    u = torch.randn(steps, batch, 2 * n, dtype=torch.float64, requires_grad=True)
    weight = (torch.randn(2 * n, 2 * n, dtype=torch.float64) * 0.5).requires_grad_()
    s0 = torch.randn(batch, 2 * n, dtype=torch.float64, requires_grad=True)
    bias = torch.tensor([-0.3, 0.2, 0.5], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(modrelu_scan, (u, weight, s0, bias))


@pytest.mark.parametrize("sizes", [None, (4, 2)])
def test_fused_path_matches_loop_with_mixed_bias_signs(sizes):
    cell = kru(factor_sizes=sizes, h0="learned").double()
    randomise_modrelu_bias(cell)
    perturb_factors(cell)
    with torch.no_grad():
        cell.h0_learned.copy_(torch.view_as_real(complex_state(1, 8)[0]))  # kept as [Re, Im] pairs
    x = torch.randn(3, 12, 3, dtype=torch.float64)
    results = {}
    for impl in ("scan", "loop"):
        cell.impl = impl
        cell.zero_grad()
        outputs, h_last = cell(x)
        (outputs.sin().sum() + h_last.abs().sum() + cell.penalty()).backward()
        results[impl] = outputs.detach(), h_last.detach(), {n: p.grad.clone() for n, p in cell.named_parameters()}
    (out_s, h_s, grads_s), (out_l, h_l, grads_l) = results["scan"], results["loop"]
    torch.testing.assert_close(out_s, out_l, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(h_s, h_l, rtol=1e-10, atol=1e-12)
    assert grads_s.keys() == grads_l.keys() and len(grads_s) == 4 + len(cell.factor_sizes)
    for name in grads_s:
        torch.testing.assert_close(grads_s[name], grads_l[name], rtol=1e-9, atol=1e-11, msg=name)


@pytest.mark.parametrize("sizes,cut", [((2,) * 7, 3), ((2,) * 9, 4), ((2,) * 6, None), ((4, 32), None),
                                       ((128,), None), ((8, 16), 1), ((2, 2, 2, 16), 3)])
def test_two_factor_split_is_used_only_where_it_saves_work(sizes, cut):
    assert two_factor_split(sizes) == cut


def test_two_factor_step_operands_apply_the_kronecker_product():
    torch.manual_seed(2)
    p, q, batch = 3, 4, 5
    left, right = complex_state(p, p), complex_state(q, q)
    h = complex_state(batch, p * q)
    k, r = kronecker_step_operands(left, right)
    s = torch.cat([h.real, h.imag], dim=1)  # (B, 2N)
    inner = (s.reshape(batch * 2 * p, q) @ r).reshape(batch, 4 * p, q)
    structured = (k @ inner).reshape(batch, 2 * p * q)
    expected = h @ torch.kron(left, right).T
    torch.testing.assert_close(structured, torch.cat([expected.real, expected.imag], dim=1))


def test_two_factor_scan_passes_gradcheck_through_the_factors():
    torch.manual_seed(4)
    p, q, batch, steps = 2, 3, 2, 3
    n = p * q

    def run(u, left_re, left_im, right_re, right_im, s0, bias):
        left, right = torch.complex(left_re, left_im), torch.complex(right_re, right_im)
        weight = real_block_form(torch.kron(left, right))
        return modrelu_scan(u, weight, s0, bias, (left, right))

    inputs = [torch.randn(steps, batch, 2 * n, dtype=torch.float64)]
    inputs += [torch.randn(k, k, dtype=torch.float64) * 0.6 for k in (p, p, q, q)]
    inputs += [torch.randn(batch, 2 * n, dtype=torch.float64), torch.linspace(-0.4, 0.3, n, dtype=torch.float64)]
    assert torch.autograd.gradcheck(run, [t.requires_grad_() for t in inputs])


def test_two_factor_path_matches_dense_path_and_loop_at_hidden_128():
    cell = kru(hidden=128, input_size=2).double()
    assert cell.kronecker_split == 3
    randomise_modrelu_bias(cell)
    perturb_factors(cell, scale=0.1)
    x = torch.randn(2, 5, 2, dtype=torch.float64)
    h0 = complex_state(2, 128)
    results = {}
    for name, impl, cut in (("two_factor", "auto", 3), ("dense", "auto", None), ("loop", "loop", None)):
        cell.impl, cell.kronecker_split = impl, cut
        cell.zero_grad()
        outputs, h_last = cell(x, h0)
        (outputs.sin().sum() + h_last.abs().sum()).backward()
        results[name] = outputs.detach(), {n: p.grad.clone() for n, p in cell.named_parameters()}
    for name in ("two_factor", "dense"):
        torch.testing.assert_close(results[name][0], results["loop"][0], rtol=1e-10, atol=1e-12)
        for param, grad in results[name][1].items():
            torch.testing.assert_close(grad, results["loop"][1][param], rtol=1e-9, atol=1e-10, msg=f"{name} {param}")


def test_zero_preactivation_gives_zero_state_and_finite_gradients_in_both_paths():
    cell = kru().double()
    with torch.no_grad():
        cell.modrelu_bias.fill_(0.1)  # modReLU jumps at 0 when its bias is positive
    x = torch.zeros(2, 3, 3, dtype=torch.float64)
    grads = {}
    for impl in ("scan", "loop"):
        cell.impl = impl
        cell.zero_grad()
        h0 = torch.zeros(2, 8, dtype=torch.complex128, requires_grad=True)
        outputs, _ = cell(x, h0)
        assert outputs.abs().sum() == 0
        outputs.sum().backward()
        grads[impl] = h0.grad
        assert all(torch.isfinite(p.grad).all() for p in cell.parameters() if p.grad is not None)
    torch.testing.assert_close(grads["scan"], grads["loop"])


def test_real_block_form_acts_like_the_complex_matrix():
    w = complex_state(5, 5)
    h = complex_state(4, 5)
    s = torch.cat([h.real, h.imag], dim=1)
    wh = h @ w.T
    torch.testing.assert_close(s @ real_block_form(w).T, torch.cat([wh.real, wh.imag], dim=1))


def test_long_sequences_stay_finite():
    cell = kru(hidden=16, input_size=2)
    x = torch.randn(4, 1000, 2)
    outputs, h_last = cell(x)
    (outputs[:, -1].sum() + cell.penalty()).backward()
    assert torch.isfinite(outputs).all() and torch.isfinite(h_last).all()
    assert all(torch.isfinite(p.grad).all() for p in cell.parameters())


def test_kru_float64():
    cell = kru().double()
    outputs, h_last = cell(torch.randn(2, 5, 3, dtype=torch.float64))
    assert outputs.dtype == torch.float64 and h_last.dtype == torch.complex128
    assert cell.recurrent_matrix().dtype == torch.complex128


# -------------------------------------------------------------------------- kru_lstm


def test_kru_lstm_blocks_are_real_kronecker_products():
    cell = kru_lstm(hidden=8, factor_sizes=(2, 4))
    perturb_factors(cell)
    weight = cell.weight_hh
    factors = cell.factors()
    assert weight.shape == (32, 8) and not weight.is_complex()
    for g in range(4):
        torch.testing.assert_close(weight[8 * g:8 * (g + 1)], dense_kron([f[g] for f in factors]),
                                   rtol=0, atol=1e-6)
    torch.testing.assert_close(cell.recurrent_matrix(), dense_kron([f[2] for f in factors]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("hidden", [4, 16, 128])
def test_kru_lstm_has_4_times_4_log2_h_real_recurrent_parameters(hidden):
    cell = kru_lstm(hidden=hidden)
    assert cell.recurrent_parameter_count() == 4 * 4 * math.log2(hidden)


def test_kru_lstm_starts_with_orthogonal_recurrent_matrices():
    cell = kru_lstm(hidden=16)
    blocks = cell.weight_hh.detach().reshape(4, 16, 16)
    torch.testing.assert_close(torch.linalg.svdvals(blocks), torch.ones(4, 16), atol=1e-5, rtol=0)


@pytest.mark.parametrize("impl", ["auto", "loop"])
def test_kru_lstm_is_an_lstm_with_the_built_matrices(impl):
    cell = kru_lstm().double()
    perturb_factors(cell)
    cell.impl = impl
    reference = nn.LSTM(3, 8, batch_first=True).double()
    with torch.no_grad():
        reference.weight_ih_l0.copy_(cell.weight_ih)
        reference.weight_hh_l0.copy_(cell.weight_hh)
        reference.bias_ih_l0.copy_(cell.bias_ih)
        reference.bias_hh_l0.copy_(cell.bias_hh)
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    h0 = torch.randn(2, 16, dtype=torch.float64)
    outputs, state = cell(x, h0)
    expected, (h_n, c_n) = reference(x, (h0[None, :, :8].contiguous(), h0[None, :, 8:].contiguous()))
    torch.testing.assert_close(outputs, expected)
    torch.testing.assert_close(state, torch.cat([h_n[0], c_n[0]], dim=1))


def test_kru_lstm_fused_path_matches_loop_with_gradients():
    cell = kru_lstm(penalty_strength=0.1).double()
    perturb_factors(cell)
    x = torch.randn(3, 7, 3, dtype=torch.float64)
    h0 = torch.randn(3, 16, dtype=torch.float64)
    results = {}
    for impl in ("auto", "loop"):
        cell.impl = impl
        cell.zero_grad()
        outputs, state = cell(x, h0)
        (outputs.sin().sum() + state.square().sum() + cell.penalty()).backward()
        results[impl] = outputs.detach(), {n: p.grad.clone() for n, p in cell.named_parameters()}
    torch.testing.assert_close(results["auto"][0], results["loop"][0], rtol=1e-10, atol=1e-12)
    for name, grad in results["auto"][1].items():
        torch.testing.assert_close(grad, results["loop"][1][name], rtol=1e-9, atol=1e-11, msg=name)


@pytest.mark.parametrize("name", ["kru", "kru_lstm"])
def test_gradients_reach_every_parameter_and_an_explicit_h0(name):
    torch.manual_seed(0)
    cell = cells.build(name, 3, 8).double()
    perturb_factors(cell)
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    h0 = (complex_state(2, 8) if cell.complex_state else torch.randn(2, 16, dtype=torch.float64)).requires_grad_()
    outputs, _ = cell(x, h0)
    (outputs.sin().sum() + cell.penalty()).backward()
    assert h0.grad.abs().sum() > 0
    for param_name, param in cell.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, param_name


def test_kru_lstm_gate_values_are_the_mean_gates_of_the_last_forward():
    cell = kru_lstm().double()
    assert cell.gate_values() == {}
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    cell(x)
    values = cell.gate_values()
    h = torch.zeros(2, 8, dtype=torch.float64)
    c = torch.zeros(2, 8, dtype=torch.float64)
    sums = {"input": 0.0, "forget": 0.0, "output": 0.0}
    with torch.no_grad():
        for t in range(5):
            pre = x[:, t] @ cell.weight_ih.T + cell.bias_ih + cell.bias_hh + h @ cell.weight_hh.T
            i, f, g, o = pre.split(8, dim=1)
            for name, gate in (("input", i), ("forget", f), ("output", o)):
                sums[name] += torch.sigmoid(gate).mean().item() / 5
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
    assert values.keys() == sums.keys()
    for name in sums:
        assert values[name] == pytest.approx(sums[name], rel=1e-12)


def test_kru_lstm_forget_bias_and_penalty():
    assert kru_lstm().penalty().item() == 0.0  # off by default (KRU paper §1)
    cell = kru_lstm(penalty_strength=0.5, forget_bias=2.0).double()
    bias = cell.bias_ih.detach()
    assert bias[8:16].min() > 2.0 - 8 ** -0.5 - 1e-12 and bias[:8].max() < 8 ** -0.5
    perturb_factors(cell)
    expected = sum(((f.detach().transpose(-1, -2) @ f.detach() - torch.eye(f.shape[-1], dtype=f.dtype)) ** 2).sum()
                   for f in cell.factors())
    assert cell.penalty().item() == pytest.approx(0.5 * expected.item(), rel=1e-12)


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize("name", ["kru", "kru_lstm"])
@pytest.mark.parametrize("options,match", [
    ({}, "power of two"),
    ({"factor_sizes": (2, 5)}, "multiply to the hidden size 12"),
    ({"factor_sizes": (3, 4), "penalty_strength": -1.0}, "penalty_strength"),
    ({"factor_sizes": "3x4"}, "factor_sizes"),
])
def test_bad_options_are_clear_errors(name, options, match):
    with pytest.raises(ValueError, match=match):
        cells.build(name, 3, 12, **options)


def test_non_power_of_two_hidden_sizes_work_with_explicit_factors():
    cell = kru(hidden=12, factor_sizes=(3, 4))
    outputs, _ = cell(torch.randn(2, 4, 3))
    assert outputs.shape == (2, 4, 24) and cell.recurrent_parameter_count() == 2 * (9 + 16)
    assert kru_lstm(hidden=12, factor_sizes=(3, 2, 2)).recurrent_parameter_count() == 4 * (9 + 4 + 4)


def test_kru_has_no_native_kernel_and_kru_lstm_rejects_a_bad_forget_bias():
    cell = kru()
    cell.impl = "native"
    with pytest.raises(ValueError, match="native"):
        cell(torch.randn(2, 3, 3))
    with pytest.raises(ValueError, match="forget_bias"):
        cells.build("kru_lstm", 3, 8, forget_bias="high")
