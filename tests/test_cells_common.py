"""The cell contract, checked on every registered cell.

Family-specific maths lives in test_cells_<family>.py; here every cell is
held to what the trainer and the dashboard rely on.
"""
import pytest
import torch

from stability import cells

HIDDEN = 8  # a power of two (kru) and even (vprnn)
INPUT = 3
ALL = cells.available()


def make(name, **options):
    torch.manual_seed(0)
    return cells.build(name, INPUT, HIDDEN, **options)


def loss_of(outputs):
    # Depends on every step, nonlinearly, so no gradient is trivially zero.
    return (outputs.sin() * torch.linspace(0.5, 1.5, outputs.shape[1], dtype=outputs.dtype)[None, :, None]).sum()


def random_state(cell, batch, dtype=torch.float64):
    state = torch.randn(batch, cell.state_size, dtype=dtype) * 0.3
    if cell.complex_state:
        state = torch.complex(state, torch.randn_like(state) * 0.3)
    return state


def test_registry_lists_the_issue_cells():
    required = {"rnn", "irnn", "lstm", "gru", "spectral", "orthogonal", "vprnn", "fastrnn", "sgornn",
                "kru", "kru_lstm"}
    assert required <= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_shapes_and_contract(name):
    cell = make(name)
    x = torch.randn(4, 5, INPUT)
    outputs, h_last = cell(x)
    assert outputs.shape == (4, 5, cell.output_size)
    assert not outputs.is_complex()
    assert h_last.shape == (4, cell.state_size)
    assert h_last.is_complex() == cell.complex_state
    matrix = cell.recurrent_matrix()
    assert matrix.shape == (HIDDEN, HIDDEN)
    assert isinstance(cell.gate_values(), dict)
    assert all(isinstance(v, float) for v in cell.gate_values().values())
    assert torch.as_tensor(cell.penalty()).dim() == 0
    assert cell.recurrent_parameter_count() > 0


@pytest.mark.parametrize("name", ALL)
def test_gradients_reach_every_parameter_and_h0(name):
    cell = make(name, h0="learned").double()
    x = torch.randn(3, 6, INPUT, dtype=torch.float64)
    h0 = random_state(cell, 3).requires_grad_()
    outputs, _ = cell(x, h0)
    (loss_of(outputs) + cell.penalty()).backward()
    assert h0.grad is not None and h0.grad.abs().sum() > 0
    missing = [n for n, p in cell.named_parameters()
               if p.requires_grad and n != "h0_learned" and (p.grad is None or p.grad.abs().sum() == 0)]
    assert not missing, f"no gradient reaches {missing}"
    # h0 was given explicitly, so the learned h0 is unused here; without it, it trains.
    cell.zero_grad()
    outputs, _ = cell(x)
    loss_of(outputs).backward()
    assert cell.h0_learned.grad is not None and cell.h0_learned.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ALL)
def test_fused_path_matches_reference_loop_in_float64(name):
    cell = make(name).double()
    x = torch.randn(3, 9, INPUT, dtype=torch.float64)
    h0 = random_state(cell, 3)
    results = {}
    for impl in ("auto", "loop"):
        cell.impl = impl
        cell.zero_grad()
        outputs, h_last = cell(x, h0)
        loss_of(outputs).backward()
        results[impl] = (outputs.detach(), h_last.detach(),
                         {n: p.grad.clone() for n, p in cell.named_parameters() if p.grad is not None})
    fused, loop = results["auto"], results["loop"]
    torch.testing.assert_close(fused[0], loop[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(fused[1], loop[1], rtol=1e-10, atol=1e-12)
    assert fused[2].keys() == loop[2].keys()
    for n in fused[2]:
        torch.testing.assert_close(fused[2][n], loop[2][n], rtol=1e-9, atol=1e-11, msg=f"gradient of {n}")


@pytest.mark.parametrize("name", ALL)
def test_state_probe_gives_dl_dh_t(name):
    """Probe gradients against an independent computation: restart the
    sequence from h_t as a leaf and differentiate the rest of the loss."""
    cell = make(name).double()
    x = torch.randn(2, 7, INPUT, dtype=torch.float64)
    h0 = random_state(cell, 2)
    probe_dtype = torch.complex128 if cell.complex_state else torch.float64
    probe = torch.zeros(2, 7, cell.state_size, dtype=probe_dtype, requires_grad=True)
    outputs, _ = cell(x, h0, state_probe=probe)
    outputs[:, -1].sum().backward()
    for t in (0, 3, 6):
        with torch.no_grad():
            _, h_t = cell(x[:, :t + 1], h0)
        h_t = h_t.clone().requires_grad_()
        if t == 6:
            rest = cell._emit(h_t)
        else:
            rest, _ = cell(x[:, t + 1:], h_t)
            rest = rest[:, -1]
        rest.sum().backward()
        torch.testing.assert_close(probe.grad[:, t], h_t.grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_output_and_float32_float64_agree(name):
    x = torch.randn(2, 5, INPUT)
    first, _ = make(name)(x)
    second, _ = make(name)(x)
    assert torch.equal(first, second)
    cell = make(name)
    wide, _ = cell.double()(x.double())
    torch.testing.assert_close(first.double(), wide, rtol=1e-4, atol=1e-5)
    assert wide.dtype == torch.float64


@pytest.mark.parametrize("name", ALL)
def test_noisy_h0_is_random_in_training_and_zero_in_eval(name):
    cell = make(name, h0="noisy", h0_noise_std=0.5)
    first = cell.initial_state(64)
    second = cell.initial_state(64)
    assert not torch.equal(first, second)
    assert 0.4 < first.abs().pow(2).mean().sqrt() < 0.6  # rms = sigma, real or complex
    cell.eval()
    assert cell.initial_state(4).abs().sum() == 0


@pytest.mark.parametrize("name", ALL)
def test_state_is_not_leaking_between_sequences(name):
    cell = make(name)
    x = torch.randn(2, 4, INPUT)
    together, _ = cell(torch.cat([x, x]))
    alone, _ = cell(x)
    torch.testing.assert_close(together[:2], alone, rtol=1e-5, atol=1e-6)


def test_unknown_cell_and_option_name_the_valid_ones():
    with pytest.raises(ValueError, match="valid cells: .*spectral"):
        cells.build("spectrall", 2, 8)
    with pytest.raises(ValueError, match="valid options: .*nonlinearity"):
        cells.build("rnn", 2, 8, nonlinarity="relu")


@pytest.mark.parametrize("name", ALL)
def test_bad_input_shape_is_a_clear_error(name):
    cell = make(name)
    with pytest.raises(ValueError, match=r"\(batch, time, 3\)"):
        cell(torch.randn(2, 5, INPUT + 1))


@pytest.mark.parametrize("option,value", [("h0", "random"), ("h0_noise_std", -1.0)])
def test_bad_h0_options(option, value):
    with pytest.raises(ValueError, match=option):
        cells.build("rnn", 2, 8, **{option: value})


# ------------------------------------------------------------------------------ describe()
def _just_outside(bound, side):
    """A value just beyond a declared bound: the next integer for an int bound, 1e-3 off for a float."""
    step = 1 if isinstance(bound, int) else 1e-3
    return bound - step if side == "low" else bound + step


@pytest.mark.parametrize("name", ALL)
def test_describe_reads_the_class_and_its_signature(name):
    import inspect

    info = cells.describe(name)
    assert info.summary and "\n" not in info.summary and info.paper and info.equations
    signature = inspect.signature(cells.get_class(name))
    keyword = {p.name: p for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY}
    assert [option.name for option in info.options] == list(keyword)
    for option in info.options:
        assert option.default == keyword[option.name].default and option.help, option.name
        assert option.type == keyword[option.name].annotation  # as written in the signature
    assert cells.options(name) == info.defaults()


@pytest.mark.parametrize("name", ALL)
def test_every_declared_choice_builds_and_every_declared_range_is_no_tighter_than_the_cell(name):
    """The form offers exactly the declared choices and never blocks a value the cell accepts: each
    choice builds, and a value just outside a declared bound is refused by the cell itself."""
    for option in cells.describe(name).options:
        for choice in option.choices or ():
            make(name, **{option.name: choice})
        for side, bound in zip(("low", "high"), option.range or ()):
            if bound is not None:
                with pytest.raises(ValueError, match=option.name):
                    make(name, **{option.name: _just_outside(bound, side)})


def test_describe_of_an_unknown_cell_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown cell 'spectrall'; valid cells: .*spectral"):
        cells.describe("spectrall")
