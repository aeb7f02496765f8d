"""stability/models/optimizers.py: the optimizer registry and RMSprop as torch, Keras 2 and TF1 define it.

Expected values are computed here, by hand or with a numpy re-implementation
of TF1's ApplyRMSProp recurrence, never by calling the optimizer under test.
"""
import io
import math

import numpy as np
import pytest
import torch

from stability import cells, tasks
from stability.models.optimizers import OPTIMIZERS, RMSpropTF, build_optimizer, describe
from stability.models.sequence import SequenceModel

GRAD = np.array([1e-3, -0.5, 2.0, 0.0, -3e-6])
LR = 1e-2


def first_step(name, grad=GRAD, lr=LR, weight_decay=0.0, theta0=None):
    """theta_1 - theta_0 after one step of ``name`` with gradient ``grad``, in float64."""
    theta0 = np.zeros_like(grad) if theta0 is None else theta0
    param = torch.nn.Parameter(torch.tensor(theta0, dtype=torch.float64))
    optimizer = build_optimizer([param], name, lr=lr, weight_decay=weight_decay)
    param.grad = torch.tensor(grad, dtype=torch.float64)
    optimizer.step()
    return param.detach().numpy() - theta0


# Each first update written out from the framework's definition (v_0 = 0 or 1).
EXPECTED_FIRST_STEP = {
    "rmsprop": lambda g: -LR * g / (np.sqrt((1 - 0.99) * g ** 2) + 1e-8),
    "rmsprop_keras": lambda g: -LR * g / (np.sqrt((1 - 0.9) * g ** 2) + 1e-7),
    "rmsprop_tf": lambda g: -LR * g / np.sqrt(0.9 * 1.0 + 0.1 * g ** 2 + 1e-10),
    # Adam's bias-corrected moments are g and g^2 after one step.
    "adam": lambda g: -LR * g / (np.abs(g) + 1e-8),
    "sgd": lambda g: -LR * g,
}


def test_registry_names():
    assert set(OPTIMIZERS) == set(EXPECTED_FIRST_STEP)
    assert OPTIMIZERS[:3] == ("adam", "rmsprop", "sgd")  # the names configs already hold
    for name in OPTIMIZERS:
        assert isinstance(build_optimizer([torch.nn.Parameter(torch.zeros(2))], name, 0.1), torch.optim.Optimizer)
        assert describe(name) and "\n" not in describe(name)


@pytest.mark.parametrize("name", sorted(EXPECTED_FIRST_STEP))
def test_first_step_size(name):
    np.testing.assert_allclose(first_step(name), EXPECTED_FIRST_STEP[name](GRAD), rtol=1e-9, atol=1e-15)


def test_first_step_magnitudes_that_decide_divergence():
    """Zero-started accumulators move every coordinate by lr / sqrt(1 - rho), however small its gradient."""
    g = np.array([1e-3, 1e-2, 1.0])
    np.testing.assert_allclose(np.abs(first_step("rmsprop", g)), 10 * LR, rtol=1e-3)
    np.testing.assert_allclose(np.abs(first_step("rmsprop_keras", g)), LR / math.sqrt(0.1), rtol=1e-3)
    # TF1 starts at v = 1: the step is about lr * g for |g| << 1.
    np.testing.assert_allclose(np.abs(first_step("rmsprop_tf", g)), LR * g / np.sqrt(0.9 + 0.1 * g ** 2), rtol=1e-9)
    assert np.abs(first_step("rmsprop_tf", g))[0] < 1.1e-5


def test_weight_decay_is_added_to_the_gradient_as_torch_does():
    theta0 = np.array([0.3, -2.0, 1.5, 0.0, 4.0])
    effective = GRAD + 0.1 * theta0
    for name in OPTIMIZERS:
        np.testing.assert_allclose(first_step(name, weight_decay=0.1, theta0=theta0),
                                   EXPECTED_FIRST_STEP[name](effective), rtol=1e-9, atol=1e-15)


def tf1_rmsprop_numpy(theta, grads, lr, rho=0.9, momentum=0.0, eps=1e-10):
    """TF1 ApplyRMSProp, written from tensorflow/core/kernels/training_ops.cc, with slots as in rmsprop.py.
    ``lr``: a number, or one per step."""
    lrs = np.broadcast_to(lr, (len(grads),))
    ms = np.ones_like(theta)  # the "rms" slot: ones_initializer
    mom = np.zeros_like(theta)  # the "momentum" slot: zeros
    trajectory = []
    for g, lr in zip(grads, lrs):
        ms += (g * g - ms) * (1 - rho)
        mom = mom * momentum + (g * lr) / np.sqrt(ms + eps)
        theta = theta - mom
        trajectory.append(theta.copy())
    return trajectory


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_rmsprop_tf_follows_the_tf1_recurrence(momentum):
    rng = np.random.default_rng(3)
    theta0 = rng.normal(size=(4, 3))
    grads = [rng.normal(scale=scale, size=(4, 3)) for scale in (1e-3, 0.1, 1.0, 10.0, 1e-2, 0.5, 3.0, 1e-4)]
    expected = tf1_rmsprop_numpy(theta0, grads, lr=0.05, momentum=momentum)
    param = torch.nn.Parameter(torch.tensor(theta0))
    optimizer = RMSpropTF([param], lr=0.05, momentum=momentum)
    for g, want in zip(grads, expected):
        param.grad = torch.tensor(g)
        optimizer.step()
        np.testing.assert_allclose(param.detach().numpy(), want, rtol=1e-12, atol=1e-14)
    assert optimizer.state[param]["step"].item() == len(grads)


def test_rmsprop_tf_keeps_the_learning_rate_inside_the_momentum_buffer():
    """TF1 accumulates lr * g / sqrt(v + eps), so a schedule's new rate acts on new gradients only
    (torch's RMSprop would rescale the whole buffer)."""
    rng = np.random.default_rng(8)
    theta0 = rng.normal(size=6)
    grads = [rng.normal(size=6) for _ in range(6)]
    lrs = [0.1, 0.1, 0.01, 0.01, 0.5, 0.001]
    expected = tf1_rmsprop_numpy(theta0, grads, lr=lrs, momentum=0.9)
    param = torch.nn.Parameter(torch.tensor(theta0))
    optimizer = RMSpropTF([param], lr=lrs[0], momentum=0.9)
    for g, lr, want in zip(grads, lrs, expected):
        optimizer.param_groups[0]["lr"] = lr  # as stability.training.trainer.LearningRate sets it
        param.grad = torch.tensor(g)
        optimizer.step()
        np.testing.assert_allclose(param.detach().numpy(), want, rtol=1e-12, atol=1e-14)


def test_rmsprop_keras_follows_the_keras_recurrence():
    rng = np.random.default_rng(4)
    theta = rng.normal(size=5)
    grads = [rng.normal(scale=s, size=5) for s in (1e-2, 1.0, 0.1, 5.0)]
    param = torch.nn.Parameter(torch.tensor(theta))
    optimizer = build_optimizer([param], "rmsprop_keras", lr=LR)
    accumulator = np.zeros(5)  # keras: K.zeros accumulators
    for g in grads:
        accumulator = 0.9 * accumulator + 0.1 * g ** 2
        theta = theta - LR * g / (np.sqrt(accumulator) + 1e-7)
        param.grad = torch.tensor(g)
        optimizer.step()
        np.testing.assert_allclose(param.detach().numpy(), theta, rtol=1e-12)


def test_param_groups_keep_their_own_settings():
    a = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    b = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    optimizer = build_optimizer([{"params": [a]}, {"params": [b], "lr": 1.0, "weight_decay": 0.5}],
                                "rmsprop_tf", lr=LR)
    g = np.array([0.1, -1.0, 2.0])
    a.grad, b.grad = torch.tensor(g), torch.tensor(g)
    optimizer.step()
    np.testing.assert_allclose(a.detach().numpy(), -LR * g / np.sqrt(0.9 + 0.1 * g ** 2 + 1e-10), rtol=1e-12)
    g_b = g + 0.5 * 1.0  # b's group adds weight_decay * b
    np.testing.assert_allclose(b.detach().numpy(), 1.0 - 1.0 * g_b / np.sqrt(0.9 + 0.1 * g_b ** 2 + 1e-10),
                               rtol=1e-12)


@pytest.mark.parametrize("name", ["rmsprop_tf", "rmsprop_keras", "rmsprop"])
def test_state_dict_round_trip_continues_identically(name):
    rng = np.random.default_rng(5)
    grads = [torch.tensor(rng.normal(scale=s, size=(3, 2))) for s in (0.1, 2.0, 1e-3, 1.0, 0.3, 5.0)]

    def make():
        param = torch.nn.Parameter(torch.tensor(rng.normal(size=(3, 2))))
        return param, build_optimizer([param], name, lr=0.03)

    param, optimizer = make()
    for g in grads[:3]:
        param.grad = g.clone()
        optimizer.step()
    buffer = io.BytesIO()
    torch.save({"param": param.detach().clone(), "optimizer": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)

    resumed, resumed_optimizer = make()
    with torch.no_grad():
        resumed.copy_(saved["param"])
    resumed_optimizer.load_state_dict(saved["optimizer"])
    for g in grads[3:]:
        param.grad, resumed.grad = g.clone(), g.clone()
        optimizer.step()
        resumed_optimizer.step()
        assert torch.equal(param, resumed)
    # Without the saved state the accumulator restarts and the first continued step differs.
    fresh, fresh_optimizer = make()
    restarted, restarted_optimizer = make()
    with torch.no_grad():
        fresh.copy_(saved["param"])
        restarted.copy_(saved["param"])
    restarted_optimizer.load_state_dict(saved["optimizer"])
    fresh.grad, restarted.grad = grads[3].clone(), grads[3].clone()
    fresh_optimizer.step()
    restarted_optimizer.step()
    assert not torch.allclose(fresh, restarted)


def test_rmsprop_tf_state_dict_keeps_momentum_buffer():
    param = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    optimizer = RMSpropTF([param], lr=0.1, momentum=0.5)
    param.grad = torch.tensor([1.0, -1.0], dtype=torch.float64)
    optimizer.step()
    state = optimizer.state_dict()["state"][0]
    np.testing.assert_allclose(state["square_avg"].numpy(), [1.0, 1.0])  # 0.9 * 1 + 0.1 * 1
    step = 0.1 / math.sqrt(1 + 1e-10)  # lr g / sqrt(v + eps), kept with lr inside as TF1 does
    np.testing.assert_allclose(state["momentum_buffer"].numpy(), [step, -step])
    assert optimizer.state_dict()["param_groups"][0]["initial_accumulator_value"] == 1.0


@pytest.mark.parametrize("name", list(EXPECTED_FIRST_STEP))
def test_complex_parameters_update_real_and_imaginary_parts_separately(name):
    rng = np.random.default_rng(6)
    z0 = rng.normal(size=4) + 1j * rng.normal(size=4)
    grads = [rng.normal(scale=s, size=4) + 1j * rng.normal(scale=s, size=4) for s in (1e-3, 1.0, 0.2)]
    complex_param = torch.nn.Parameter(torch.tensor(z0, dtype=torch.complex128))
    real_param = torch.nn.Parameter(torch.view_as_real(torch.tensor(z0, dtype=torch.complex128)).clone())
    complex_optimizer = build_optimizer([complex_param], name, lr=LR)
    real_optimizer = build_optimizer([real_param], name, lr=LR)
    for g in grads:
        g = torch.tensor(g, dtype=torch.complex128)
        complex_param.grad = g
        real_param.grad = torch.view_as_real(g).clone()
        complex_optimizer.step()
        real_optimizer.step()
        torch.testing.assert_close(torch.view_as_real(complex_param.detach()), real_param.detach(),
                                   rtol=1e-12, atol=1e-15)


def test_rmsprop_tf_complex_first_step_by_hand():
    param = torch.nn.Parameter(torch.zeros(1, dtype=torch.complex128))
    optimizer = RMSpropTF([param], lr=LR)
    param.grad = torch.tensor([0.5 - 2.0j], dtype=torch.complex128)
    optimizer.step()
    re, im = -LR * 0.5 / math.sqrt(0.9 + 0.1 * 0.25 + 1e-10), LR * 2.0 / math.sqrt(0.9 + 0.1 * 4.0 + 1e-10)
    assert param.item() == pytest.approx(complex(re, im), rel=1e-12)
    square_avg = optimizer.state[param]["square_avg"]
    assert square_avg.dtype == torch.complex128  # as torch keeps it: the param's shape and dtype
    assert square_avg.item() == pytest.approx(complex(0.9 + 0.1 * 0.25, 0.9 + 0.1 * 4.0))


def test_unknown_name_is_one_clear_line():
    with pytest.raises(ValueError) as error:
        build_optimizer([torch.nn.Parameter(torch.zeros(1))], "rmsprop_tf1", lr=0.1)
    message = str(error.value)
    assert "\n" not in message and "'rmsprop_tf1'" in message
    for name in OPTIMIZERS:
        assert name in message
    with pytest.raises(ValueError, match="adam"):
        describe("adagrad")


def test_invalid_hyperparameters_are_refused():
    param = torch.nn.Parameter(torch.zeros(1))
    for bad in ({"lr": -1.0}, {"decay": 1.5}, {"eps": -1e-3}, {"momentum": -0.1}, {"weight_decay": -1.0},
                {"initial_accumulator_value": -1.0}):
        with pytest.raises(ValueError):
            RMSpropTF([param], **bad)


def test_closure_is_evaluated_and_returned():
    param = torch.nn.Parameter(torch.tensor([2.0]))
    optimizer = RMSpropTF([param], lr=0.1)

    def closure():
        optimizer.zero_grad()
        loss = (param ** 2).sum()
        loss.backward()
        return loss

    assert optimizer.step(closure).item() == 4.0
    assert param.item() == pytest.approx(2.0 - 0.1 * 4.0 / math.sqrt(0.9 + 0.1 * 16.0 + 1e-10))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", list(EXPECTED_FIRST_STEP))
def test_cuda_steps_match_cpu_and_take_a_cpu_state_dict(name):
    rng = np.random.default_rng(7)
    theta0 = rng.normal(size=(5, 3))
    grads = [torch.tensor(rng.normal(scale=s, size=(5, 3))) for s in (1e-3, 1.0, 0.1, 2.0, 0.3)]
    cpu = torch.nn.Parameter(torch.tensor(theta0))
    cpu_optimizer = build_optimizer([cpu], name, lr=LR, weight_decay=0.01)
    for g in grads[:2]:
        cpu.grad = g.clone()
        cpu_optimizer.step()
    cuda = torch.nn.Parameter(cpu.detach().clone().cuda())
    cuda_optimizer = build_optimizer([cuda], name, lr=LR, weight_decay=0.01)
    cuda_optimizer.load_state_dict(cpu_optimizer.state_dict())
    for key, value in cuda_optimizer.state[cuda].items():
        if torch.is_tensor(value) and key != "step":
            assert value.is_cuda, key
    for g in grads[2:]:
        cpu.grad, cuda.grad = g.clone(), g.clone().cuda()
        cpu_optimizer.step()
        cuda_optimizer.step()
    torch.testing.assert_close(cuda.detach().cpu(), cpu.detach(), rtol=1e-10, atol=1e-12)


def steps_until_nonfinite(name, steps=20, hidden=96, seq_len=300, lr=1e-2, seed=0):
    """Train FastRNN on the adding task; the step whose loss is not finite, else None (and the losses)."""
    torch.manual_seed(seed)
    task = tasks.build("adding", seed=seed, seq_len=seq_len)
    model = SequenceModel(cells.build("fastrnn", task.input_size, hidden), task.output_size, task.target_mode)
    optimizer = build_optimizer(model.parameters(), name, lr=lr)
    batches = task.batches("train", 64)
    losses = []
    for step in range(1, steps + 1):
        x, y = next(batches)
        loss = task.loss(model(x)[0], y)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            return step, losses
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return None, losses


def test_fastrnn_at_t300_diverges_with_torch_rmsprop_not_with_tf1_or_keras():
    """Issue 9: torch's zero-started RMSprop moves every entry of U by 10 lr at step 1 and the adding
    task at T = 300 overflows at step 2; TF1's (v_0 = 1) and Keras's (3.16 lr) steps do not
    (docs/optimizers.md; the same at hidden 128, the paper's size)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: a second thread only spins when the machine is busy
    try:
        torch_diverged_at, _ = steps_until_nonfinite("rmsprop")
        tf_diverged_at, tf_losses = steps_until_nonfinite("rmsprop_tf")
        keras_diverged_at, keras_losses = steps_until_nonfinite("rmsprop_keras")
    finally:
        torch.set_num_threads(threads)
    assert torch_diverged_at == 2
    assert tf_diverged_at is None and max(tf_losses) < 5.0
    assert keras_diverged_at is None and keras_losses[-1] < 5.0
