"""urnn (Arjovsky et al. 2016) and exponential (expRNN) cells, and their parametrizations."""
import math

import pytest
import torch
from torch.func import functional_call

from stability import cells
from stability.cells.modrelu import modrelu, modrelu_scan
from stability.cells.unitary import URNN, ExponentialRNN
from stability.parametrizations.exponential import skew_block_init

F64 = torch.float64


def _grads(cell, x, h0, weights):
    """Outputs, h_last and the gradients of a fixed loss w.r.t. h0 and every parameter."""
    outputs, h_last = cell(x, h0)
    loss = (outputs * weights).sum() + h_last.abs().square().sum()
    params = [h0] + list(cell.parameters())
    return outputs.detach(), h_last.detach(), torch.autograd.grad(loss, params)


def _large_steps(cell, steps=5, lr=1.0):
    """A few Adam steps at a learning rate far above any sane one."""
    optimizer = torch.optim.Adam(cell.parameters(), lr=lr)
    x = torch.randn(3, 6, cell.input_size)
    for _ in range(steps):
        outputs, _ = cell(x)
        optimizer.zero_grad()
        (outputs.square().sum() + outputs.sum()).backward()
        optimizer.step()


# ------------------------------------------------------------------- urnn

def _dense_urnn_matrix(cell):
    """W = D3 R2 F^-1 D2 Pi R1 F D1 from explicit dense matrices (uRNN paper §3)."""
    factors = cell.parametrizations.weight_hh.original.detach().to(F64)
    n = factors.shape[1]
    j = torch.arange(n, dtype=F64)
    dft = torch.exp(-2j * math.pi * torch.outer(j, j) / n) / math.sqrt(n)
    diag = [torch.diag(torch.exp(1j * factors[k])) for k in range(3)]

    def reflection(re, im):
        v = torch.complex(re, im)[:, None]
        return torch.eye(n, dtype=torch.complex128) - 2 * (v @ v.conj().T) / (v.conj().T @ v)

    r1 = reflection(factors[3], factors[4])
    r2 = reflection(factors[5], factors[6])
    perm = torch.eye(n, dtype=torch.complex128)[cell.parametrizations.weight_hh[0].permutation]
    return diag[2] @ r2 @ dft.conj().T @ diag[1] @ perm @ r1 @ dft @ diag[0]


def test_urnn_shapes_and_dtypes():
    cell = cells.build("urnn", input_size=3, hidden_size=8)
    assert isinstance(cell, URNN)
    assert (cell.state_size, cell.output_size) == (8, 16)
    h0 = cell.initial_state(5)
    assert h0.dtype == torch.complex64 and h0.shape == (5, 8) and not h0.abs().any()
    for impl in ("auto", "scan", "loop"):
        cell.impl = impl
        outputs, h_last = cell(torch.randn(5, 4, 3))
        assert outputs.shape == (5, 4, 16) and outputs.dtype == torch.float32
        assert h_last.shape == (5, 8) and h_last.dtype == torch.complex64
        torch.testing.assert_close(outputs[:, -1], torch.cat([h_last.real, h_last.imag], dim=-1))
    assert cell.recurrent_matrix().shape == (8, 8) and cell.recurrent_matrix().is_complex()


def test_urnn_matrix_equals_explicit_dense_product():
    cell = cells.build("urnn", input_size=2, hidden_size=12).double()
    torch.testing.assert_close(cell.recurrent_matrix().detach(), _dense_urnn_matrix(cell),
                               rtol=0, atol=1e-12)


def test_urnn_parameter_count_is_7n():
    cell = cells.build("urnn", input_size=2, hidden_size=10)
    assert cell.recurrent_parameter_count() == 70
    assert cell.parametrizations.weight_hh.original.shape == (7, 10)


def test_urnn_parameter_counts_match_the_kru_paper():
    """KRU paper Table 2, pixel MNIST: RC uRNN, n = 512, ~16K parameters, ~3.6K recurrent."""
    cell = cells.build("urnn", input_size=1, hidden_size=512, h0="learned")
    assert round(cell.recurrent_parameter_count() / 100) == 36
    real_numbers = sum(p.numel() * (2 if p.is_complex() else 1) for p in cell.parameters())
    readout = 2 * 512 * 10 + 10  # o_t = U [Re h; Im h] + b_o, 10 classes
    assert round((real_numbers + readout) / 1000) == 16


def test_urnn_initialisation_follows_the_paper():
    factors = cells.build("urnn", input_size=2, hidden_size=500).parametrizations.weight_hh.original
    phases, reflections = factors[:3], factors[3:]
    assert phases.abs().max() <= math.pi and phases.abs().max() > 3.0
    assert reflections.abs().max() <= 1.0 and reflections.abs().max() > 0.99
    assert not cells.build("urnn", input_size=2, hidden_size=4).modrelu_bias.any()


def test_urnn_stays_unitary_after_large_steps():
    cell = cells.build("urnn", input_size=2, hidden_size=16)
    before = cell.recurrent_matrix().detach().clone()
    _large_steps(cell)
    w = cell.recurrent_matrix().detach()
    assert (w - before).abs().max() > 0.1  # the steps did move W
    torch.testing.assert_close(w.mH @ w, torch.eye(16, dtype=w.dtype), rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.linalg.svdvals(w.to(torch.complex128)),
                               torch.ones(16, dtype=F64), rtol=0, atol=1e-5)


def test_modrelu_matches_polar_form_and_is_finite_at_zero():
    z = torch.randn(50, dtype=torch.complex128)
    b = torch.randn(50, dtype=F64)
    expected = torch.relu(z.abs() + b) * torch.exp(1j * torch.angle(z))
    torch.testing.assert_close(modrelu(z, b), expected)

    zero = torch.zeros(3, dtype=torch.complex128, requires_grad=True)
    bias = torch.tensor([0.5, -0.5, 0.0], dtype=F64, requires_grad=True)
    out = modrelu(zero, bias)
    assert not out.abs().any()
    out.real.sum().backward()
    assert torch.isfinite(zero.grad).all() and torch.isfinite(bias.grad).all()


def test_modrelu_scan_gradcheck():
    steps, batch, n = 4, 2, 3
    u = torch.randn(steps, batch, 2 * n, dtype=F64, requires_grad=True)
    weight = torch.randn(2 * n, 2 * n, dtype=F64, requires_grad=True)
    s0 = torch.randn(batch, 2 * n, dtype=F64, requires_grad=True)
    bias = (torch.rand(n, dtype=F64) - 0.5).requires_grad_()
    assert torch.autograd.gradcheck(modrelu_scan, (u, weight, s0, bias))


def test_urnn_scan_and_loop_agree_in_float64():
    cell = cells.build("urnn", input_size=3, hidden_size=6).double()
    with torch.no_grad():
        cell.modrelu_bias.uniform_(-1.0, 0.5)  # some units switched off
    x = torch.randn(4, 9, 3, dtype=F64)
    x[0, :2] = 0.0  # with h0[0] = 0, the first two pre-activations of row 0 are exactly 0
    h0 = torch.randn(4, 6, dtype=torch.complex128)
    h0[0] = 0.0
    h0.requires_grad_()
    weights = torch.randn(4, 9, 12, dtype=F64)
    cell.impl = "loop"
    reference = _grads(cell, x, h0, weights)
    for impl in ("auto", "scan"):
        cell.impl = impl
        fused = _grads(cell, x, h0, weights)
        torch.testing.assert_close(fused[0], reference[0], rtol=0, atol=1e-10)
        torch.testing.assert_close(fused[1], reference[1], rtol=0, atol=1e-10)
        for got, want in zip(fused[2], reference[2]):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("impl", ["loop", "scan"])
def test_urnn_gradcheck(impl):
    """Through the inputs, h0, the 7N factors and the modReLU bias."""
    cell = cells.build("urnn", input_size=2, hidden_size=3).double()
    cell.impl = impl
    x = torch.randn(1, 3, 2, dtype=F64, requires_grad=True)
    h0 = torch.randn(1, 3, dtype=torch.complex128, requires_grad=True)
    factors = torch.randn(7, 3, dtype=F64, requires_grad=True)
    bias = (torch.rand(3, dtype=F64) - 0.5).requires_grad_()

    def run(x, h0, factors, bias):
        params = {"parametrizations.weight_hh.original": factors, "modrelu_bias": bias}
        return functional_call(cell, params, (x, h0))[0]

    assert torch.autograd.gradcheck(run, (x, h0, factors, bias))


@pytest.mark.parametrize("impl", ["loop", "scan"])
def test_urnn_gradients_reach_every_parameter_and_h0(impl):
    cell = cells.build("urnn", input_size=3, hidden_size=5, h0="learned")
    cell.impl = impl
    h0 = (cell.initial_state(2) + 0.1).detach().requires_grad_()
    outputs, h_last = cell(torch.randn(2, 4, 3), h0)
    (outputs.sum() + h_last.abs().sum()).backward()
    assert h0.grad is not None and h0.grad.abs().sum() > 0
    for name, param in cell.named_parameters():
        if name == "h0_learned":  # an explicit h0 replaces it
            continue
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    cell.zero_grad()
    cell(torch.randn(2, 4, 3))[0].sum().backward()
    assert cell.h0_learned.grad.abs().sum() > 0


def test_urnn_float64():
    cell = cells.build("urnn", input_size=2, hidden_size=4).double()
    outputs, h_last = cell(torch.randn(3, 5, 2, dtype=F64))
    assert outputs.dtype == F64 and h_last.dtype == torch.complex128
    assert cell.recurrent_matrix().dtype == torch.complex128


def test_urnn_same_seed_same_output():
    x = torch.randn(2, 5, 3)
    results = []
    for _ in range(2):
        torch.manual_seed(7)
        cell = cells.build("urnn", input_size=3, hidden_size=6)
        results.append(cell(x)[0])
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)


def test_urnn_state_probe_is_complex():
    cell = cells.build("urnn", input_size=2, hidden_size=4)
    probe = torch.zeros(3, 5, 4, dtype=torch.complex64, requires_grad=True)
    outputs, h_last = cell(torch.randn(3, 5, 2), state_probe=probe)
    h_last.abs().square().sum().backward()
    # The loss depends only on h_T, so dL/dh_T = 2 h_T (PyTorch's conjugate convention).
    torch.testing.assert_close(probe.grad[:, -1], 2 * h_last.detach())


def test_urnn_bad_options():
    with pytest.raises(ValueError, match="h0"):
        cells.build("urnn", input_size=2, hidden_size=4, h0="bogus")
    with pytest.raises(ValueError, match="unknown option"):
        cells.build("urnn", input_size=2, hidden_size=4, nonlinearity="relu")
    with pytest.raises(ValueError, match="hidden_size"):
        cells.build("urnn", input_size=2, hidden_size=0)
    cell = cells.build("urnn", input_size=2, hidden_size=4)
    cell.impl = "native"
    with pytest.raises(ValueError, match="native"):
        cell(torch.randn(1, 2, 2))


# ------------------------------------------------------------ exponential

def _expm_skew_by_eigh(skew):
    """exp(S) for real skew-symmetric S from the eigendecomposition of the Hermitian -iS."""
    eigenvalues, vectors = torch.linalg.eigh(-1j * skew.to(torch.complex128))
    return (vectors @ torch.diag(torch.exp(1j * eigenvalues)) @ vectors.mH).real


def test_exponential_shapes():
    cell = cells.build("exponential", input_size=3, hidden_size=8)
    assert isinstance(cell, ExponentialRNN) and cell.nonlinearity == "modrelu"
    outputs, h_last = cell(torch.randn(5, 4, 3))
    assert outputs.shape == (5, 4, 8) and h_last.shape == (5, 8)
    assert cell.recurrent_matrix().shape == (8, 8)


def test_exponential_defaults_follow_the_reference_code():
    """expRNN (github Lezcano/expRNN, orthogonal.py): modReLU with b ~ U[-0.01, 0.01], a bias-free
    He-normal input kernel, h0 = 0."""
    cell = cells.build("exponential", input_size=3, hidden_size=2000)
    b = cell.modrelu_bias
    assert b.shape == (2000,) and b.requires_grad
    assert b.abs().max() <= 0.01 and b.max() > 0.009 and b.min() < -0.009
    assert cell.input_proj.bias is None
    assert {name for name, _ in cell.named_parameters()} == {
        "modrelu_bias", "input_proj.weight", "parametrizations.weight_hh.original"}
    assert 0.9 * math.sqrt(2 / 3) < cell.input_proj.weight.std().item() < 1.1 * math.sqrt(2 / 3)
    assert cell.h0_mode == "zero" and not cell.initial_state(2).any()
    assert cell.recurrent_lr_scale == 0.1  # the reference trains A at lr / 10
    # relu (and tanh, leaky_relu) stay available, with a zero-initialised input bias instead of b.
    plain = cells.build("exponential", input_size=3, hidden_size=8, nonlinearity="relu")
    assert plain.modrelu_bias is None and not plain.input_proj.bias.any()


@pytest.mark.parametrize("impl", ["loop", "scan"])
def test_exponential_step_is_sign_times_relu_of_magnitude_plus_bias(impl):
    cell = cells.build("exponential", input_size=3, hidden_size=6).double()
    cell.impl = impl
    with torch.no_grad():
        cell.modrelu_bias.copy_(torch.tensor([-0.5, 0.3, -50.0, 0.0, 0.1, -0.2]))
    x = torch.randn(4, 2, 3, dtype=F64)
    h0 = torch.randn(4, 6, dtype=F64)
    outputs, _ = cell(x, h0)
    w_in = cell.input_proj.weight.detach()
    w = cell.recurrent_matrix().detach()
    b = cell.modrelu_bias.detach()
    h = h0
    for t in range(2):
        a = x[:, t] @ w_in.T + h @ w.T  # no input bias: b is the unit's only bias
        h = torch.sign(a) * torch.clamp(a.abs() + b, min=0.0)
        torch.testing.assert_close(outputs[:, t].detach(), h, rtol=0, atol=1e-12)
    assert (outputs[:, :, 2] == 0).all()  # |a| < 50: the unit with b = -50 is off
    assert (outputs[:, :, 1] != 0).all()  # b > 0 keeps every nonzero a on


def test_exponential_matrix_equals_independent_exponential():
    cell = cells.build("exponential", input_size=2, hidden_size=9).double()
    with torch.no_grad():
        cell.parametrizations.weight_hh.original.normal_()
    free = cell.parametrizations.weight_hh.original.detach()
    upper = torch.triu(free, diagonal=1)
    torch.testing.assert_close(cell.recurrent_matrix().detach(), _expm_skew_by_eigh(upper - upper.T),
                               rtol=0, atol=1e-10)


def test_exponential_ignores_the_lower_triangle():
    cell = cells.build("exponential", input_size=2, hidden_size=6)
    before = cell.recurrent_matrix().detach().clone()
    with torch.no_grad():
        cell.parametrizations.weight_hh.original.add_(torch.randn(6, 6).tril())
    torch.testing.assert_close(cell.recurrent_matrix().detach(), before, rtol=0, atol=0)
    assert cell.recurrent_parameter_count() == 15


def test_exponential_stays_orthogonal_after_large_steps():
    cell = cells.build("exponential", input_size=2, hidden_size=16)
    before = cell.recurrent_matrix().detach().clone()
    _large_steps(cell)
    w = cell.recurrent_matrix().detach()
    assert (w - before).abs().max() > 0.1
    torch.testing.assert_close(w.T @ w, torch.eye(16), rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.linalg.svdvals(w.double()), torch.ones(16, dtype=F64), rtol=0, atol=1e-5)
    assert torch.linalg.det(w.double()).item() == pytest.approx(1.0, abs=1e-4)  # SO(N), not O(N)


@pytest.mark.parametrize("init", ["henaff", "cayley"])
def test_exponential_init_is_a_block_diagonal_of_rotations(init):
    n = 7
    free = skew_block_init(n, init, dtype=F64)
    cell = cells.build("exponential", input_size=2, hidden_size=n, init=init).double()
    with torch.no_grad():
        cell.parametrizations.weight_hh.original.copy_(free)
    w = cell.recurrent_matrix().detach()
    expected = torch.zeros(n, n, dtype=F64)
    for k in range(n // 2):
        a = free[2 * k, 2 * k + 1]
        expected[2 * k:2 * k + 2, 2 * k:2 * k + 2] = torch.tensor(
            [[torch.cos(a), torch.sin(a)], [-torch.sin(a), torch.cos(a)]])
    expected[-1, -1] = 1.0  # odd N: the last coordinate is left alone
    torch.testing.assert_close(w, expected, rtol=0, atol=1e-12)
    angles = skew_block_init(2000, init).diagonal(1)[::2]
    if init == "henaff":
        assert angles.abs().max() <= math.pi and angles.abs().max() > 3.0
    else:  # -tan(theta / 2), theta ~ U[0, pi/2]
        assert angles.max() <= 0 and angles.min() >= -1.0 and angles.min() < -0.99


@pytest.mark.parametrize("nonlinearity,impls", [("modrelu", ("auto", "scan")),
                                                 ("relu", ("auto", "scan", "native"))])
def test_exponential_scan_and_loop_agree_in_float64(nonlinearity, impls):
    cell = cells.build("exponential", input_size=3, hidden_size=6, nonlinearity=nonlinearity).double()
    if nonlinearity == "modrelu":
        with torch.no_grad():
            cell.modrelu_bias.uniform_(-1.0, 0.5)  # some units switched off
    x = torch.randn(4, 9, 3, dtype=F64)
    h0 = torch.randn(4, 6, dtype=F64, requires_grad=True)
    weights = torch.randn(4, 9, 6, dtype=F64)
    cell.impl = "loop"
    reference = _grads(cell, x, h0, weights)
    if nonlinearity == "modrelu":
        assert (reference[0] == 0).any() and (reference[0] != 0).any()
    for impl in impls:
        cell.impl = impl
        fused = _grads(cell, x, h0, weights)
        for got, want in zip([*fused[:2], *fused[2]], [*reference[:2], *reference[2]]):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


def test_exponential_modrelu_has_no_native_kernel():
    cell = cells.build("exponential", input_size=3, hidden_size=6)
    cell.impl = "native"
    with pytest.raises(ValueError, match="nonlinearity='modrelu'"):
        cell(torch.randn(2, 3, 3))


@pytest.mark.parametrize("impl", ["loop", "scan"])
def test_exponential_gradcheck(impl):
    """Through the inputs, h0 and the free matrix behind the parametrization."""
    cell = cells.build("exponential", input_size=2, hidden_size=3, nonlinearity="tanh").double()
    cell.impl = impl
    x = torch.randn(2, 3, 2, dtype=F64, requires_grad=True)
    h0 = torch.randn(2, 3, dtype=F64, requires_grad=True)
    free = torch.randn(3, 3, dtype=F64, requires_grad=True)

    def run(x, h0, free):
        return functional_call(cell, {"parametrizations.weight_hh.original": free}, (x, h0))[0]

    assert torch.autograd.gradcheck(run, (x, h0, free))


@pytest.mark.parametrize("impl", ["loop", "scan"])
def test_exponential_modrelu_gradcheck(impl, gradcheck_through_parameters):
    """The default modReLU cell, through x, h0, W_in, A and b."""
    cell = cells.build("exponential", input_size=2, hidden_size=4).double()
    cell.impl = impl
    with torch.no_grad():
        cell.modrelu_bias.copy_(torch.tensor([-0.3, 0.2, -0.05, 0.4]))
    x = torch.randn(2, 4, 2, dtype=F64, requires_grad=True)
    h0 = torch.randn(2, 4, dtype=F64, requires_grad=True)
    assert gradcheck_through_parameters(cell, x, h0)


@pytest.mark.parametrize("impl", ["loop", "scan"])
@pytest.mark.parametrize("nonlinearity", ["modrelu", "leaky_relu"])
def test_exponential_gradients_reach_every_parameter_and_h0(impl, nonlinearity):
    cell = cells.build("exponential", input_size=3, hidden_size=5, nonlinearity=nonlinearity)
    cell.impl = impl
    h0 = torch.randn(2, 5, requires_grad=True)
    cell(torch.randn(2, 4, 3), h0)[0].sum().backward()
    assert h0.grad.abs().sum() > 0
    for name, param in cell.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_exponential_float64_and_seed():
    x = torch.randn(2, 5, 3, dtype=F64)
    results = []
    for _ in range(2):
        torch.manual_seed(3)
        cell = cells.build("exponential", input_size=3, hidden_size=6).double()
        outputs, _ = cell(x)
        assert outputs.dtype == F64 and cell.recurrent_matrix().dtype == F64
        results.append(outputs)
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)


def test_exponential_bad_options():
    with pytest.raises(ValueError, match="init"):
        cells.build("exponential", input_size=2, hidden_size=4, init="haar")
    with pytest.raises(ValueError, match="nonlinearity must be one of .*'modrelu'"):
        cells.build("exponential", input_size=2, hidden_size=4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="h0"):
        cells.build("exponential", input_size=2, hidden_size=4, h0="bogus")


# ------------------------------------------------------------------- both

@pytest.mark.parametrize("name", ["urnn", "exponential"])
def test_thousand_steps_stay_finite(name):
    cell = cells.build(name, input_size=2, hidden_size=16)
    h0 = cell.initial_state(4).requires_grad_()
    outputs, _ = cell(torch.randn(4, 1000, 2), h0)
    outputs[:, -1].sum().backward()
    assert torch.isfinite(outputs).all() and torch.isfinite(h0.grad).all()
    for param in cell.parameters():
        assert torch.isfinite(param.grad).all()


def test_exponential_trains_its_skew_parameter_at_a_tenth_of_the_learning_rate():
    """expRNN's reference trains A at lr / 10 (lezcano/expRNN: lr_orth = lr / 10 in every script)."""
    from stability import tasks
    from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
    from stability.training.build import build_model, build_optimizer

    config = RunConfig(CellConfig("exponential", 8), TaskConfig("adding", {"seq_len": 5}), TrainConfig(lr=2e-4))
    model = build_model(config, tasks.build("adding", seed=0, seq_len=5))
    skew = model.cell.parametrizations.weight_hh.original
    rates = {id(p): group["lr"] for group in build_optimizer(model, config).param_groups for p in group["params"]}
    assert rates[id(skew)] == pytest.approx(2e-5)
    assert [rate for key, rate in rates.items() if key != id(skew)] == pytest.approx([2e-4] * (len(rates) - 1))
    assert cells.build("exponential", 1, 4, recurrent_lr_scale=1.0).recurrent_lr_scale == 1.0
    with pytest.raises(ValueError, match="recurrent_lr_scale"):
        cells.build("exponential", 1, 4, recurrent_lr_scale=-1)


@pytest.mark.parametrize("name", ["kru", "urnn"])
def test_a_learned_complex_h0_keeps_its_imaginary_part_through_the_trainer_and_learns_it(name):
    """The Trainer moves the model to the run's real dtype (Module.to); a complex h0 parameter was cast to
    a real one there, its imaginary part dropped and never learned. Here h0 = a + ib is set with b != 0, the
    model moved as the Trainer moves it, and the state the cell starts from, and the gradient reaching b,
    are compared with a complex h0 given explicitly."""
    import warnings

    cell = cells.build(name, input_size=3, hidden_size=4, h0="learned")
    start = torch.complex(torch.randn(4), torch.randn(4))
    with torch.no_grad():
        cell.h0_learned.copy_(torch.view_as_real(start))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Casting complex values to real discards the imaginary part"
        cell = cell.to(dtype=torch.float32)
    h0 = cell.initial_state(2)
    assert h0.dtype == torch.complex64 and torch.equal(h0[1], start)
    x = torch.randn(2, 6, 3)
    explicit = start.clone().requires_grad_()
    outputs, _ = cell(x, explicit.expand(2, -1))
    outputs.square().sum().backward()
    cell.zero_grad()
    outputs, _ = cell(x)
    outputs.square().sum().backward()
    torch.testing.assert_close(cell.h0_learned.grad, torch.view_as_real(explicit.grad))
    assert cell.h0_learned.grad[:, 1].abs().sum() > 0  # the imaginary part learns


def test_a_checkpoint_with_a_complex_h0_loads_as_real_pairs():
    cell = cells.build("urnn", input_size=3, hidden_size=4, h0="learned")
    state = cell.state_dict()
    old = torch.complex(torch.randn(4), torch.randn(4))
    state["h0_learned"] = old  # as a checkpoint written before h0 was kept as pairs holds it
    cell.load_state_dict(state)
    assert torch.equal(cell.initial_state(1)[0], old)
