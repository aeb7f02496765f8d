"""Householder products and the SVD parametrization, against dense reflectors built here."""
from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from stability.parametrizations.householder import (
    HouseholderProduct,
    HouseholderSVD,
    householder_product,
    register_householder_product,
    register_householder_svd,
)

F64 = torch.float64


def dense_reflector(u: torch.Tensor, n: int) -> torch.Tensor:
    """H_k^n(u) of spectral paper eq. 1, written out."""
    hat = torch.cat([torch.zeros(n - u.numel(), dtype=u.dtype), u])
    if hat.norm() == 0:
        return torch.eye(n, dtype=u.dtype)
    return torch.eye(n, dtype=u.dtype) - 2 * torch.outer(hat, hat) / hat.dot(hat)


def reflectors_of(flat: torch.Tensor, n: int, m: int) -> list[torch.Tensor]:
    """Flat storage -> [u_n, u_{n-1}, ..., u_{n-m+1}], u_k of length k."""
    return list(flat.split([n - j for j in range(m)]))


def explicit_product(flat: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """H_n(u_n) H_{n-1}(u_{n-1}) ... H_{n-m+1}(u_{n-m+1}) (eq. 2) by dense matmuls."""
    dense = [dense_reflector(u, n) for u in reflectors_of(flat, n, m)]
    return functools.reduce(torch.matmul, dense)


def eq4_sigma(sigma_hat: torch.Tensor, r: float, sigma_star: float) -> torch.Tensor:
    return 2 * r * (torch.sigmoid(sigma_hat) - 0.5) + sigma_star


def test_householder_product_matches_dense_reflectors_including_a_zero_one():
    torch.manual_seed(0)
    vectors = torch.randn(4, 6, dtype=F64)
    vectors[2] = 0.0  # H(0) = I (eq. 1)
    expected = functools.reduce(torch.matmul, [dense_reflector(v, 6) for v in vectors])
    torch.testing.assert_close(householder_product(vectors), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n, m", [(5, 1), (5, 3), (5, 5), (7, 4)])
def test_product_follows_the_papers_layout(n, m):
    torch.manual_seed(n * 10 + m)
    product = HouseholderProduct(n, m)
    flat = torch.randn(product.parameter_count, dtype=F64)
    torch.testing.assert_close(product(flat), explicit_product(flat, n, m), rtol=0, atol=1e-12)


@pytest.mark.parametrize("j", range(5))
def test_reflector_k_leaves_the_first_n_minus_k_coordinates_untouched(j):
    n, m = 6, 5
    torch.manual_seed(j)
    product = HouseholderProduct(n, m)
    lengths = [n - i for i in range(m)]
    k = lengths[j]
    flat = torch.zeros(product.parameter_count, dtype=F64)
    start = sum(lengths[:j])
    flat[start:start + k] = torch.randn(k, dtype=F64)
    reflector = product(flat)  # only H_k(u_k) is not the identity
    h = torch.randn(n, dtype=F64)
    moved = reflector @ h
    torch.testing.assert_close(moved[:n - k], h[:n - k], rtol=0, atol=1e-14)
    torch.testing.assert_close(reflector[:n - k], torch.eye(n, dtype=F64)[:n - k], rtol=0, atol=1e-14)
    assert (moved[n - k:] - h[n - k:]).abs().max() > 1e-3


def test_zero_reflectors_give_the_identity_with_finite_gradients():
    product = HouseholderProduct(5, 3)
    flat = torch.zeros(product.parameter_count, dtype=F64, requires_grad=True)
    q = product(flat)
    torch.testing.assert_close(q, torch.eye(5, dtype=F64), rtol=0, atol=0)
    (q * torch.randn(5, 5, dtype=F64)).sum().backward()
    assert torch.isfinite(flat.grad).all()


@pytest.mark.parametrize("m", [1, 4, 8])
def test_product_is_orthogonal_and_invariant_to_reflector_scale(m):
    torch.manual_seed(m)
    n = 8
    product = HouseholderProduct(n, m)
    flat = torch.randn(product.parameter_count, dtype=F64)
    q = product(flat)
    torch.testing.assert_close(q.t() @ q, torch.eye(n, dtype=F64), rtol=0, atol=1e-12)
    # H(c u) = H(u) for any c != 0 (spectral paper §3, after Thm. 2)
    scales = torch.cat([torch.full((n - j,), 10.0 ** (j % 5 - 2) * (-1) ** j, dtype=F64) for j in range(m)])
    torch.testing.assert_close(product(flat * scales), q, rtol=0, atol=1e-12)


def test_svd_form_matches_dense_factors_and_eq4():
    torch.manual_seed(1)
    n, m1, m2, r, sigma_star = 6, 3, 5, 0.4, 1.2
    svd = HouseholderSVD(n, m1, m2, r, sigma_star)
    theta = torch.randn(svd.parameter_count, dtype=F64)
    u, v, sigma_hat = theta.split([svd.left.parameter_count, svd.right.parameter_count, n])
    sigma = eq4_sigma(sigma_hat, r, sigma_star)
    # W = H_n(u_n)...H_k1(u_k1) diag(sigma) H_k2(v_k2)...H_n(v_n)  (§3-4)
    right = [dense_reflector(x, n) for x in reversed(reflectors_of(v, n, m2))]
    expected = explicit_product(u, n, m1) @ torch.diag(sigma) @ functools.reduce(torch.matmul, right)
    torch.testing.assert_close(svd(theta), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(svd.singular_values(theta), sigma, rtol=0, atol=1e-15)


def test_svd_singular_values_are_the_eq4_sigmas():
    torch.manual_seed(2)
    n, r, sigma_star = 7, 0.3, 1.0
    svd = HouseholderSVD(n, 2, 3, r, sigma_star)
    theta = torch.randn(svd.parameter_count, dtype=F64) * 3
    expected = eq4_sigma(theta[-n:], r, sigma_star).sort(descending=True).values
    torch.testing.assert_close(torch.linalg.svdvals(svd(theta)), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n, m1, m2", [(1, 1, 1), (6, 2, 6), (128, 16, 16)])
def test_parameter_counts_are_the_reflector_lengths(n, m1, m2):
    left = sum(range(n - m1 + 1, n + 1))
    right = sum(range(n - m2 + 1, n + 1))
    assert HouseholderProduct(n, m1).parameter_count == left
    assert HouseholderSVD(n, m1, m2, 0.1, 1.0).parameter_count == left + right + n


def test_samples_are_unit_reflectors_and_sigma_star():
    torch.manual_seed(3)
    n, m = 6, 4
    product = HouseholderProduct(n, m)
    flat = product.sample(F64)
    assert flat.dtype == F64
    norms = torch.stack([u.norm() for u in reflectors_of(flat, n, m)])
    torch.testing.assert_close(norms, torch.ones(m, dtype=F64))
    svd = HouseholderSVD(n, m, 2, 0.1, 1.5)
    torch.testing.assert_close(svd.singular_values(svd.sample()), torch.full((n,), 1.5))


def test_gradcheck_product_and_svd():
    torch.manual_seed(4)
    product = HouseholderProduct(4, 3)
    flat = torch.randn(product.parameter_count, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(product, (flat,))
    svd = HouseholderSVD(4, 2, 4, 0.5, 1.0)
    theta = torch.randn(svd.parameter_count, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(svd, (theta,))


def test_bad_sizes_raise_value_error():
    with pytest.raises(ValueError, match="reflectors"):
        HouseholderProduct(4, 5)
    with pytest.raises(ValueError, match="reflectors"):
        HouseholderProduct(4, 0)
    with pytest.raises(ValueError, match="expected 7 reflector entries"):
        HouseholderProduct(4, 2)(torch.zeros(8))
    svd = HouseholderSVD(4, 2, 2, 0.1, 1.0)
    with pytest.raises(ValueError, match=f"expected {svd.parameter_count} parameters"):
        svd(torch.zeros(3))


def test_register_functions_store_exactly_the_free_parameters():
    torch.manual_seed(5)
    module = nn.Module()
    register_householder_product(module, "weight", 5, 3)
    assert module.weight.shape == (5, 5)
    assert module.parametrizations.weight.original.numel() == 5 + 4 + 3
    torch.testing.assert_close(module.weight.t() @ module.weight, torch.eye(5), rtol=0, atol=1e-6)

    module = nn.Module()
    register_householder_svd(module, "weight", 5, 2, 3, 0.1, 2.0)
    assert module.weight.shape == (5, 5)
    assert [name for name, _ in module.named_parameters()] == ["parametrizations.weight.original"]
    assert module.parametrizations.weight.original.numel() == (5 + 4) + (5 + 4 + 3) + 5
    torch.testing.assert_close(torch.linalg.svdvals(module.weight), torch.full((5,), 2.0), rtol=0, atol=1e-5)


# ------------------------------------------------ renormalisation (Note [Reflector length])
def scaled_reflectors(n, m, seed):
    """Random flat reflectors with lengths far from 1 (0.01 .. 100)."""
    generator = torch.Generator().manual_seed(seed)
    pieces = [torch.randn(n - j, dtype=F64, generator=generator) * 10.0 ** (2 * j % 5 - 2) for j in range(m)]
    return torch.cat(pieces)


@pytest.mark.parametrize("n, m", [(6, 1), (6, 4), (6, 6), (9, 5)])
def test_normalized_scales_every_reflector_to_unit_length_and_keeps_the_product(n, m):
    product = HouseholderProduct(n, m)
    flat = scaled_reflectors(n, m, seed=n + m)
    normalized = product.normalized(flat)
    for before, after in zip(reflectors_of(flat, n, m), reflectors_of(normalized, n, m)):
        torch.testing.assert_close(after, before / torch.sqrt((before ** 2).sum()), rtol=0, atol=1e-15)
    torch.testing.assert_close(product(normalized), product(flat), rtol=0, atol=1e-12)
    torch.testing.assert_close(product(flat), explicit_product(normalized, n, m), rtol=0, atol=1e-12)


def test_normalized_leaves_a_zero_reflector_at_zero_like_l2_normalize():
    # Spectral-RNN renormalises with tf.nn.l2_normalize: u / sqrt(max(||u||^2, 1e-12)).
    n, m = 5, 3
    product = HouseholderProduct(n, m)
    zero, tiny, big = torch.zeros(5, dtype=F64), torch.full((4,), 5e-9, dtype=F64), torch.full((3,), 7.0, dtype=F64)
    normalized = product.normalized(torch.cat([zero, tiny, big]))
    assert torch.isfinite(normalized).all()
    parts = reflectors_of(normalized, n, m)
    assert (parts[0] == 0).all()  # H(0) = I stays the identity
    torch.testing.assert_close(parts[1], tiny / 1e-6, rtol=1e-15, atol=0)  # below the floor: divided by 1e-6
    torch.testing.assert_close(parts[2], torch.full((3,), 3 ** -0.5, dtype=F64), rtol=0, atol=1e-15)


def test_svd_normalized_touches_the_reflectors_only():
    torch.manual_seed(6)
    n, m1, m2 = 6, 3, 6
    svd = HouseholderSVD(n, m1, m2, 0.4, 1.0)
    sizes = [svd.left.parameter_count, svd.right.parameter_count, n]
    theta = torch.cat([scaled_reflectors(n, m1, 1), scaled_reflectors(n, m2, 2), torch.randn(n, dtype=F64)])
    normalized = svd.normalized(theta)
    u, v, sigma_hat = theta.split(sizes)
    new_u, new_v, new_sigma_hat = normalized.split(sizes)
    assert torch.equal(new_sigma_hat, sigma_hat)
    for new, m in [(new_u, m1), (new_v, m2)]:
        norms = torch.stack([torch.sqrt((x ** 2).sum()) for x in reflectors_of(new, n, m)])
        torch.testing.assert_close(norms, torch.ones(m, dtype=F64), rtol=0, atol=1e-15)
    torch.testing.assert_close(svd(normalized), svd(theta), rtol=0, atol=1e-12)


# ----------------------------------------- the length-1 reflector (Note [The length-1 reflector])
def orthogonal_rnn_code_matrix(flat: torch.Tensor, n: int) -> torch.Tensor:
    """W of zmhammedi/Orthogonal_RNN for m = n, from its maths (RNN_models.py, sgd.py, C_fun.c).

    That code keeps the reflectors as the columns of a lower-triangular (n, n) U,
    each divided by its norm after every update; a step multiplies h's last
    entry by U[n-1, n-1] and then applies H(U[:, n-2]) first, ..., H(U[:, 0])
    last.  So W = H(u_n) H(u_{n-1}) ... H(u_2) diag(1, ..., 1, U[n-1, n-1]).
    """
    columns = [u / u.norm() for u in reflectors_of(flat, n, n)]  # renormalised, as after every update
    scale = torch.ones(n, dtype=F64)
    scale[-1] = columns[-1][0]
    dense = [dense_reflector(u, n) for u in columns[:-1]] + [torch.diag(scale)]
    return functools.reduce(torch.matmul, dense)


@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize("last", [0.7, -2.5])
def test_sign_convention_is_the_orthogonal_rnn_codes_matrix(n, last):
    torch.manual_seed(n)
    product = HouseholderProduct(n, n, length_one="sign")
    flat = scaled_reflectors(n, n, seed=n)
    flat[-1] = last
    expected = orthogonal_rnn_code_matrix(flat, n)
    torch.testing.assert_close(product(flat), expected, rtol=0, atol=1e-12)
    det = (-1.0) ** (n - 1) * (1 if last > 0 else -1)
    torch.testing.assert_close(torch.linalg.det(expected), torch.tensor(det, dtype=F64), rtol=0, atol=1e-12)
    # eq. 1's convention (the default) is the same matrix only where u_1 < 0
    eq1 = HouseholderProduct(n, n)(flat)
    assert torch.allclose(eq1, expected, rtol=0, atol=1e-12) == (last < 0)


def test_sign_convention_matters_only_with_all_n_reflectors():
    flat = scaled_reflectors(5, 4, seed=3)
    torch.testing.assert_close(HouseholderProduct(5, 4, length_one="sign")(flat), explicit_product(flat, 5, 4),
                               rtol=0, atol=1e-12)


def test_sign_convention_zero_last_reflector_is_the_identity_and_gets_no_gradient():
    n = 4
    product = HouseholderProduct(n, n, length_one="sign")
    flat = scaled_reflectors(n, n, seed=4)
    flat[-1] = 0.0
    flat.requires_grad_()
    w = product(flat)
    torch.testing.assert_close(w, explicit_product(flat.detach()[:-1], n, n - 1), rtol=0, atol=1e-12)
    (w * torch.randn(n, n, dtype=F64)).sum().backward()
    assert torch.isfinite(flat.grad).all() and flat.grad[-1] == 0
    assert HouseholderProduct(1, 1, length_one="sign")(torch.tensor([0.0], dtype=F64)).item() == 1.0
    assert HouseholderProduct(1, 1, length_one="sign")(torch.tensor([-0.3], dtype=F64)).item() == -1.0


def test_gradcheck_sign_convention():
    torch.manual_seed(7)
    product = HouseholderProduct(4, 4, length_one="sign")
    flat = torch.randn(product.parameter_count, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(product, (flat,))


def test_bad_length_one_raises_value_error():
    with pytest.raises(ValueError, match="length_one must be one of 'reflector', 'sign'"):
        HouseholderProduct(4, 4, length_one="diag")


def test_gradient_at_unit_reflectors_is_the_orthogonal_rnn_codes_backward():
    # zmhammedi/Orthogonal_RNN (C_fun.c) back-propagates through I - 2 u u^T for unit u,
    # reflector by reflector: for y = H(u) x and upstream g, with g_in = H(u) g,
    # dL/du = -2 (u.x) g_in - 2 (u.g) x.  With renormalisation its u are always unit,
    # so training with renormalize=True follows the same gradients.
    torch.manual_seed(8)
    n, m = 6, 4
    product = HouseholderProduct(n, m)
    flat = product.sample(F64).requires_grad_()
    units = reflectors_of(flat.detach(), n, m)
    padded = [torch.cat([torch.zeros(n - len(u), dtype=F64), u]) for u in units]
    x, upstream = torch.randn(n, dtype=F64), torch.randn(n, dtype=F64)
    (upstream @ product(flat) @ x).backward()
    # forward, shortest reflector first: inputs[j] is what reflector j acts on
    inputs = [None] * m
    state = x
    for j in reversed(range(m)):
        inputs[j] = state
        state = state - 2 * padded[j].dot(state) * padded[j]
    g = upstream
    expected = []
    for j in range(m):
        g_in = g - 2 * padded[j].dot(g) * padded[j]
        full = -2 * padded[j].dot(inputs[j]) * g_in - 2 * padded[j].dot(g) * inputs[j]
        expected.append(full[n - len(units[j]):])
        g = g_in
    torch.testing.assert_close(flat.grad, torch.cat(expected), rtol=0, atol=1e-13)
