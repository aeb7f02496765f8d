"""Kronecker-factored matrices (KRU paper §3, eq. 4–7), against independent computations."""
import math

import pytest
import torch
from torch import nn

from stability.parametrizations.kronecker import (KroneckerProduct, check_factor_sizes, factor_parameter_count,
                                                  haar_factors, kron_chain, kronecker, kronecker_factors,
                                                  unitarity_penalty)


def dense_kron(factors):
    product = factors[0]
    for factor in factors[1:]:
        product = torch.kron(product, factor)
    return product


def random_factors(sizes, count=1, dtype=torch.complex128):
    return [torch.randn(count, n, n, dtype=dtype) for n in sizes]


def stored(factors):
    return [torch.view_as_real(f) if f.is_complex() else f for f in factors]


@pytest.mark.parametrize("sizes", [(2,), (2, 2), (2, 3, 4), (3, 2, 2, 2)])
def test_kron_chain_equals_torch_kron(sizes):
    factors = random_factors(sizes, count=3)
    batched = kron_chain(factors)
    for c in range(3):
        torch.testing.assert_close(batched[c], dense_kron([f[c] for f in factors]), rtol=0, atol=1e-12)


def test_entries_follow_the_mixed_radix_rule_of_eq_5():
    a, b, c = (torch.randn(n, n, dtype=torch.float64) for n in (2, 3, 2))
    w = kron_chain([a, b, c])
    for i in range(12):
        for j in range(12):
            (i0, i1, i2), (j0, j1, j2) = (i // 6, i // 2 % 3, i % 2), (j // 6, j // 2 % 3, j % 2)
            assert w[i, j] == pytest.approx(float(a[i0, j0] * b[i1, j1] * c[i2, j2]), abs=1e-12)


@pytest.mark.parametrize("complex_", [True, False])
def test_forward_stacks_count_products_vertically(complex_):
    dtype = torch.complex128 if complex_ else torch.float64
    factors = random_factors((2, 4), count=4, dtype=dtype)
    weight = KroneckerProduct((2, 4), complex=complex_, count=4)(*stored(factors))
    assert weight.shape == (32, 8) and weight.dtype == dtype
    for g in range(4):
        torch.testing.assert_close(weight[8 * g:8 * (g + 1)], torch.kron(factors[0][g], factors[1][g]))


@pytest.mark.parametrize("complex_", [True, False])
@pytest.mark.parametrize("sizes", [(2, 2, 2), (4, 2), (3, 5), (16,)])
def test_right_inverse_recovers_an_exact_kronecker_product(sizes, complex_):
    dtype = torch.complex128 if complex_ else torch.float64
    parametrization = KroneckerProduct(sizes, complex=complex_, count=2)
    weight = torch.cat([dense_kron([f[0] for f in random_factors(sizes, dtype=dtype)]) for _ in range(2)])
    recovered = parametrization.right_inverse(weight)
    assert [r.shape[:3] for r in recovered] == [(2, n, n) for n in sizes]
    torch.testing.assert_close(parametrization(*recovered), weight, rtol=1e-10, atol=1e-10)


def test_right_inverse_of_unitary_factors_returns_unitary_factors():
    unitary = [haar_factors(1, n, complex=True, dtype=torch.float64) for n in (2, 4, 2)]
    scaled = [unitary[0] * 3.0, unitary[1] / 6.0, unitary[2] * 2.0]  # same product
    parametrization = KroneckerProduct((2, 4, 2), complex=True)
    factors = parametrization.factors(*parametrization.right_inverse(dense_kron([f[0] for f in scaled])))
    for factor in factors:
        torch.testing.assert_close(torch.linalg.svdvals(factor[0]), torch.ones(factor.shape[-1], dtype=torch.float64))


def test_right_inverse_is_the_nearest_product_for_two_factors():
    torch.manual_seed(1)
    weight = torch.randn(6, 6, dtype=torch.float64)
    parametrization = KroneckerProduct((2, 3), complex=False)
    a, b = parametrization.right_inverse(weight)
    best = (weight - torch.kron(a[0], b[0])).norm()
    for _ in range(50):
        da, db = torch.randn_like(a[0]) * 0.05, torch.randn_like(b[0]) * 0.05
        assert (weight - torch.kron(a[0] + da, b[0] + db)).norm() >= best - 1e-12


def test_haar_factors_are_unitary_and_orthogonal():
    for complex_ in (True, False):
        q = haar_factors(5, 7, complex=complex_, dtype=torch.float64)
        assert q.is_complex() == complex_
        torch.testing.assert_close(torch.linalg.svdvals(q), torch.ones(5, 7, dtype=torch.float64))


def test_unitarity_penalty_is_eq_7():
    factors = random_factors((2, 3, 2), count=2)
    expected = 0.0
    for factor in factors:
        for matrix in factor:
            gram = matrix.conj().T @ matrix
            expected += float(sum(abs(complex(gram[i, j]) - (i == j)) ** 2
                                  for i in range(gram.shape[0]) for j in range(gram.shape[1])))
    assert float(unitarity_penalty(factors)) == pytest.approx(expected, rel=1e-12)


def test_registered_weight_is_a_unitary_product_of_its_factors():
    module = nn.Module()
    kronecker(module, "weight", (2, 2, 2, 2), complex=True)
    factors = kronecker_factors(module, "weight")
    torch.testing.assert_close(module.weight, dense_kron([f[0] for f in factors]), rtol=0, atol=1e-6)
    torch.testing.assert_close(torch.linalg.svdvals(module.weight.detach()), torch.ones(16), atol=1e-5, rtol=0)
    assert unitarity_penalty(factors).item() < 1e-10
    assert factor_parameter_count(module, "weight") == 8 * 4


def test_registered_factors_train_and_convert_to_float64():
    module = nn.Module()
    kronecker(module, "weight", (2, 3), complex=True, count=4)
    assert module.weight.shape == (24, 6)
    assert all(p.dtype == torch.float32 for p in module.parameters())
    module.double()
    assert module.weight.dtype == torch.complex128
    module.weight.abs().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())


def test_assigning_a_kronecker_matrix_sets_the_factors():
    module = nn.Module()
    kronecker(module, "weight", (2, 4), complex=False)
    target = torch.kron(torch.randn(2, 2), torch.randn(4, 4))
    with torch.no_grad():
        module.weight = target
    torch.testing.assert_close(module.weight, target, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", [2, 4, 64, 1024])
def test_default_factor_sizes_are_log2_n_twos(size):
    assert check_factor_sizes(None, size) == (2,) * int(math.log2(size))


@pytest.mark.parametrize("sizes,size,match", [
    (None, 12, "power of two"), (None, 1, "power of two"), ((2, 3), 8, "multiply to the hidden size 8"),
    ((2, 0, 4), 8, "positive integers"), ((2.0, 4), 8, "positive integers"), ((), 8, "positive integers"),
    ("24", 8, "positive integers"), (3, 3, "sequence"),
])
def test_bad_factor_sizes_are_clear_errors(sizes, size, match):
    with pytest.raises(ValueError, match=match):
        check_factor_sizes(sizes, size)


def test_right_inverse_rejects_the_wrong_shape_or_field():
    parametrization = KroneckerProduct((2, 2), complex=True)
    with pytest.raises(ValueError, match=r"\(4, 4\)"):
        parametrization.right_inverse(torch.zeros(4, 5, dtype=torch.complex64))
    with pytest.raises(ValueError, match="complex"):
        parametrization.right_inverse(torch.zeros(4, 4))
