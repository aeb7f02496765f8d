"""The VPRNN map W = R_1 Q_1 ... R_k Q_k (SGORNN paper eq. 2), checked
against dense rotation and permutation matrices built here one by one."""
import math

import pytest
import torch
from torch import nn

from stability.parametrizations.rotations import PlaneRotations, register_plane_rotations, rotation_sublayers


def dense_rotation(angles):
    """Block diagonal of 2x2 rotations [[c, -s], [s, c]] on pairs (2i, 2i+1)."""
    n = 2 * len(angles)
    matrix = torch.zeros(n, n, dtype=torch.float64)
    for i, theta in enumerate(angles.tolist()):
        c, s = math.cos(theta), math.sin(theta)
        matrix[2 * i, 2 * i], matrix[2 * i, 2 * i + 1] = c, -s
        matrix[2 * i + 1, 2 * i], matrix[2 * i + 1, 2 * i + 1] = s, c
    return matrix


def dense_permutation(perm):
    """Q with (Q x)_i = x_{perm[i]}."""
    n = len(perm)
    matrix = torch.zeros(n, n, dtype=torch.float64)
    for i, j in enumerate(perm.tolist()):
        matrix[i, j] = 1.0
    return matrix


def dense_product(angles, permutations):
    result = torch.eye(permutations.shape[1], dtype=torch.float64)
    for theta, perm in zip(angles, permutations):
        result = result @ dense_rotation(theta) @ dense_permutation(perm)
    return result


@pytest.mark.parametrize("size,k", [(2, 1), (4, 3), (6, 2), (10, 5), (16, 8)])
def test_matches_the_dense_product_of_rotations_and_permutations(size, k):
    rotations = PlaneRotations(size, k)
    angles = torch.empty(k, size // 2, dtype=torch.float64).uniform_(-math.pi, math.pi)
    expected = dense_product(angles, rotations.permutations)
    torch.testing.assert_close(rotations(angles), expected, rtol=0, atol=1e-12)


def test_rotates_pairs_counterclockwise_on_a_known_case():
    rotations = PlaneRotations(2, 1)
    w = rotations(torch.tensor([[math.pi / 2]], dtype=torch.float64))
    # Q is the identity or the swap; R turns e_0 into e_1.
    swap = rotations.permutations[0].tolist() == [1, 0]
    expected = torch.tensor([[-1.0, 0.0], [0.0, 1.0]] if swap else [[0.0, -1.0], [1.0, 0.0]],
                            dtype=torch.float64)
    torch.testing.assert_close(w, expected, rtol=0, atol=1e-15)


def test_zero_angles_give_the_composed_permutation():
    rotations = PlaneRotations(12, 4)
    w = rotations(torch.zeros(4, 6, dtype=torch.float64))
    # (Q_1 ... Q_k x)_i = x_{pi_k(...pi_1(i))}
    index = torch.arange(12)
    for perm in rotations.permutations:
        index = perm[index]
    expected = torch.zeros(12, 12, dtype=torch.float64)
    expected[torch.arange(12), index] = 1.0
    assert torch.equal(w, expected)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_orthogonal_for_any_angles(dtype, tol):
    rotations = PlaneRotations(128, 14)
    angles = torch.randn(14, 64, dtype=dtype) * 10
    w = rotations(angles)
    assert w.dtype == dtype
    eye = torch.eye(128, dtype=dtype)
    assert (w.t() @ w - eye).abs().max() < tol
    singular_values = torch.linalg.svdvals(w.double())
    assert (singular_values - 1).abs().max() < tol


def test_gradcheck_in_float64():
    rotations = PlaneRotations(6, 3)
    angles = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(rotations, (angles,))


def test_permutations_are_seeded_and_travel_with_the_state_dict():
    torch.manual_seed(3)
    first = PlaneRotations(10, 4)
    torch.manual_seed(3)
    again = PlaneRotations(10, 4)
    assert torch.equal(first.permutations, again.permutations)
    other = PlaneRotations(10, 4)
    assert not torch.equal(first.permutations, other.permutations)
    other.load_state_dict(first.state_dict())
    assert torch.equal(first.permutations, other.permutations)
    assert all(sorted(p.tolist()) == list(range(10)) for p in first.permutations)


def test_register_puts_the_angles_behind_the_matrix():
    module = nn.Module()
    rotations = register_plane_rotations(module, "weight", 8, 3, angle_init=0.2)
    angles = module.parametrizations.weight.original
    assert angles.shape == (3, 4)
    assert angles.abs().max() <= 0.2
    assert module.weight.shape == (8, 8)
    torch.testing.assert_close(module.weight, rotations(angles))
    module.weight.sum().backward()
    assert angles.grad is not None and angles.grad.abs().sum() > 0


def test_odd_size_and_wrong_angle_shape_are_clear_errors():
    with pytest.raises(ValueError, match="must be even; got 5"):
        PlaneRotations(5, 2)
    with pytest.raises(ValueError, match=r"angles of shape \(2, 3\)"):
        PlaneRotations(6, 2)(torch.zeros(3, 3))


@pytest.mark.parametrize("size", [2, 3, 4, 5, 6, 8, 10, 64, 100, 127, 128, 129, 256, 1000, 1024])
def test_rotation_sublayers_is_twice_ceil_log2(size):
    """k = 2 ceil(log2 n) (SGORNN paper App. A.3; VPRNN code's ceil(log2(units)) per side)."""
    assert rotation_sublayers(size) == 2 * math.ceil(math.log2(size))


def test_rotation_sublayers_on_the_papers_sizes_and_bad_sizes():
    assert rotation_sublayers(128) == 14  # §3.1, §3.2
    assert rotation_sublayers(256) == 16  # §3.3
    assert rotation_sublayers(2) == 2     # ceil(log2 2) = 1
    for bad in (1, 0, -4, 2.0, True):
        with pytest.raises(ValueError, match="size"):
            rotation_sublayers(bad)
