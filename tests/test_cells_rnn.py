"""rnn and irnn: initialisations and the native kernel path."""
import pytest
import torch

from stability import cells


@pytest.mark.parametrize("gain", [0.5, 1.0, 1.5])
def test_orthogonal_init_has_all_singular_values_equal_to_gain(gain):
    cell = cells.build("rnn", 2, 32, init="orthogonal", init_gain=gain)
    torch.testing.assert_close(torch.linalg.svdvals(cell.recurrent_matrix().detach()),
                               torch.full((32,), gain), rtol=1e-5, atol=1e-5)


def test_identity_init_and_irnn():
    cell = cells.build("irnn", 2, 16)
    assert cell.nonlinearity == "relu"
    torch.testing.assert_close(cell.recurrent_matrix().detach(), torch.eye(16))
    scaled = cells.build("rnn", 2, 16, init="identity", init_gain=0.9)
    torch.testing.assert_close(scaled.recurrent_matrix().detach(), 0.9 * torch.eye(16))


def test_gaussian_init_spectral_radius_tracks_gain():
    torch.manual_seed(3)
    for gain in (0.5, 1.5):
        weight = cells.build("rnn", 2, 400, init="gaussian", init_gain=gain).recurrent_matrix().detach()
        radius = torch.linalg.eigvals(weight.double()).abs().max().item()
        assert abs(radius - gain) < 0.1 * gain  # circular law: radius -> gain


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_native_kernel_matches_torch_rnn(nonlinearity):
    cell = cells.build("rnn", 3, 8, nonlinearity=nonlinearity).double()
    reference = torch.nn.RNN(3, 8, nonlinearity=nonlinearity, batch_first=True).double()
    with torch.no_grad():
        reference.weight_ih_l0.copy_(cell.input_proj.weight)
        reference.weight_hh_l0.copy_(cell.recurrent_matrix())
        reference.bias_ih_l0.copy_(cell.input_proj.bias)
        reference.bias_hh_l0.zero_()
    x = torch.randn(2, 11, 3, dtype=torch.float64)
    expected, _ = reference(x)
    for impl in ("native", "scan", "loop"):
        cell.impl = impl
        outputs, h_last = cell(x)
        torch.testing.assert_close(outputs, expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(h_last, expected[:, -1])


def test_native_refuses_leaky_relu():
    cell = cells.build("rnn", 3, 8, nonlinearity="leaky_relu")
    cell.impl = "native"
    with pytest.raises(ValueError, match="native"):
        cell(torch.randn(1, 2, 3))


@pytest.mark.parametrize("option,value", [("init", "xavier"), ("nonlinearity", "sigmoid"), ("init_gain", -1)])
def test_bad_options_name_the_choices(option, value):
    with pytest.raises(ValueError, match=option):
        cells.build("rnn", 2, 8, **{option: value})
