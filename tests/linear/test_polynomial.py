"""μ as a product of dilated polynomials versus literal composition of strided cross-correlations
(spec §7.1), in 1-D, 2-D and 3-D."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuromanifold.linear import (
    FC,
    LCN,
    apply_network,
    dilate,
    fc_mu,
    mu,
    mu_reference,
    mu_torch,
    mul_dilated,
    poly_mul,
)

ATOL_EXACT = 1e-12  # relative to entry scale, for products of O(1) numbers
RTOL_COMPOSE = 1e-10  # spec §7.1 tolerance for composing convolutions on a random signal


def _random_arch(rng: np.random.Generator, dim: int) -> LCN:
    L = int(rng.integers(1, 5))
    filters = [tuple(int(k) for k in rng.integers(1, 5, size=dim)) for _ in range(L)]
    strides = [tuple(int(s) for s in rng.integers(1, 4, size=dim)) for _ in range(L)]
    if dim == 1:
        filters = [f[0] for f in filters]
        strides = [s[0] for s in strides]
    return LCN(tuple(filters), tuple(strides), dim=dim)


def _end_to_end(v: np.ndarray, stride: tuple[int, ...], x: np.ndarray) -> np.ndarray:
    """Valid cross-correlation of each sample of x with v at stride S_L (numpy, per definition)."""
    from numpy.lib.stride_tricks import sliding_window_view

    D = v.ndim
    win = sliding_window_view(x, v.shape, axis=tuple(range(1, D + 1)))
    win = win[(slice(None), *[slice(None, None, s) for s in stride])]
    return np.tensordot(win, v, axes=D)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_mu_equals_composed_cross_correlations(dim: int) -> None:
    rng = np.random.default_rng(100 + dim)
    for _ in range(8):
        arch = _random_arch(rng, dim)
        theta = [rng.standard_normal(f) for f in arch.filters]
        v = mu(arch, theta)
        # size formula of spec §1.1 / §1.4
        assert v.shape == tuple(
            1 + sum((f[d] - 1) * S[d] for f, S in zip(arch.filters, arch.dilations, strict=True))
            for d in range(dim)
        )
        # read off from the composed network
        np.testing.assert_allclose(mu_reference(arch, theta), v, rtol=0, atol=ATOL_EXACT)
        # the composed network on a random signal equals one strided cross-correlation with v
        n_out = rng.integers(1, 4, size=dim)
        sig = tuple(
            int(k + (o - 1) * S) for k, o, S in zip(v.shape, n_out, arch.total_stride, strict=True)
        )
        x = rng.standard_normal((3, *sig))
        y_net = apply_network(arch, theta, x)
        y_v = _end_to_end(v, arch.total_stride, x)
        assert y_net.shape == y_v.shape == (3, *(int(o) for o in n_out))
        scale = np.max(np.abs(y_v))
        np.testing.assert_allclose(y_net, y_v, rtol=0, atol=RTOL_COMPOSE * scale)


def test_last_stride_does_not_change_v() -> None:
    rng = np.random.default_rng(1)
    theta = [rng.standard_normal(k) for k in (3, 2, 4)]
    base = mu(LCN((3, 2, 4), (2, 3)), theta)
    for s_last in (1, 2, 7):
        np.testing.assert_array_equal(mu(LCN((3, 2, 4), (2, 3, s_last)), theta), base)
        np.testing.assert_allclose(
            mu_reference(LCN((3, 2, 4), (2, 3, s_last)), theta), base, rtol=0, atol=ATOL_EXACT
        )


def test_mu_torch_matches_mu() -> None:
    rng = np.random.default_rng(2)
    for dim in (1, 2, 3):
        for _ in range(4):
            arch = _random_arch(rng, dim)
            theta = [rng.standard_normal(f) for f in arch.filters]
            vt = mu_torch(arch, [torch.as_tensor(w) for w in theta]).numpy()
            np.testing.assert_allclose(vt, mu(arch, theta), rtol=0, atol=ATOL_EXACT)


def test_mu_closed_forms() -> None:
    # spec §4.3 and §6 reference values
    np.testing.assert_array_equal(mu(LCN((2, 2), (1,)), [[1, 2], [1, -1]]), [1, 1, -2])
    np.testing.assert_array_equal(mu(LCN((2, 2), (2,)), [[1, 2], [3, 1]]), [3, 6, 1, 2])
    # crossing example of §4.2: (z² − 1/4)(z² − 9/4)
    v = mu(LCN((3, 2), (2,)), [[-0.25, 0, 1], [-2.25, 1]])
    np.testing.assert_allclose(v, [0.5625, 0, -2.5, 0, 1], rtol=0, atol=ATOL_EXACT)
    # 2-D: w1(x, y) = 1 + x, w2 = 1 + y at dilation (1, 1) gives 1 + x + y + xy
    v2 = mu(LCN(((2, 1), (1, 2)), ((1, 1),), dim=2), [[[1.0], [1.0]], [[1.0, 1.0]]])
    np.testing.assert_array_equal(v2, [[1, 1], [1, 1]])


def test_mu_is_multilinear() -> None:
    rng = np.random.default_rng(3)
    arch = LCN((3, 2, 2), (2, 2))
    theta = [rng.standard_normal(k) for k in (3, 2, 2)]
    a, b = rng.standard_normal(2)
    other = rng.standard_normal(2)
    mixed = [theta[0], a * theta[1] + b * other, theta[2]]
    expected = a * mu(arch, theta) + b * mu(arch, [theta[0], other, theta[2]])
    np.testing.assert_allclose(mu(arch, mixed), expected, rtol=0, atol=ATOL_EXACT)


def test_fc_mu_is_the_product() -> None:
    rng = np.random.default_rng(4)
    arch = FC((3, 2, 4, 2))
    Ws = [rng.standard_normal(s) for s in arch.param_shapes]
    np.testing.assert_allclose(fc_mu(arch, Ws), Ws[2] @ Ws[1] @ Ws[0], rtol=0, atol=ATOL_EXACT)


def test_dilate_and_poly_mul() -> None:
    np.testing.assert_array_equal(
        dilate(np.array([[1.0, 2.0], [3.0, 4.0]]), (2, 1)), [[1, 2], [0, 0], [3, 4]]
    )
    np.testing.assert_array_equal(
        poly_mul(np.array([[1.0, 1.0]]), np.array([[1.0], [1.0]])), [[1, 1], [1, 1]]
    )


@pytest.mark.parametrize("b_len", [3, 70])  # shifted adds (short b) and polyphase (long b)
def test_mul_dilated_equals_product_with_dilated_factor(b_len: int) -> None:
    rng = np.random.default_rng(5)
    for S in (1, 2, 5):
        a, b = rng.standard_normal(11), rng.standard_normal(b_len)
        np.testing.assert_allclose(
            mul_dilated(a, b, (S,)), poly_mul(a, dilate(b, (S,))), rtol=0, atol=ATOL_EXACT
        )
    a2, b2 = rng.standard_normal((4, 3)), rng.standard_normal((9, 8))  # 72 > 64: polyphase
    for S in ((1, 1), (2, 3), (3, 1)):
        np.testing.assert_allclose(
            mul_dilated(a2, b2, S), poly_mul(a2, dilate(b2, S)), rtol=0, atol=ATOL_EXACT
        )


def test_error_paths() -> None:
    with pytest.raises(
        ValueError, match=r"mul_dilated: a\.ndim = 1, b\.ndim = 1, dilation = \(0,\)"
    ):
        mul_dilated(np.ones(2), np.ones(2), (0,))
    with pytest.raises(ValueError, match="expected equal ndim"):
        mul_dilated(np.ones(2), np.ones((2, 2)), (1, 1))
    with pytest.raises(ValueError, match=r"dilation = \(2,\): expected 2 positive ints"):
        dilate(np.ones((2, 2)), (2,))
    with pytest.raises(ValueError, match=r"dilation.*positive"):
        dilate(np.ones(2), (0,))
    with pytest.raises(ValueError, match=r"a\.ndim = 1 and b\.ndim = 2"):
        poly_mul(np.ones(2), np.ones((2, 2)))
    with pytest.raises(TypeError, match="expected an LCN"):
        mu(FC((2, 2)), [np.ones((2, 2))])
    with pytest.raises(TypeError, match="expected an FC"):
        fc_mu(LCN((2, 2), (1,)), [np.ones(2), np.ones(2)])
    with pytest.raises(ValueError, match=r"theta\[1\] has shape"):
        mu(LCN((2, 2), (1,)), [np.ones(2), np.ones(3)])
    with pytest.raises(ValueError, match="2 signal axes"):
        apply_network(LCN(((2, 2), (2, 2)), ((1, 1),), dim=2), [np.ones((2, 2))] * 2, np.ones(5))
    with pytest.raises(NotImplementedError, match="D ≤ 3"):
        mu_reference(LCN(((2,) * 4, (2,) * 4), ((1,) * 4,), dim=4), [np.ones((2,) * 4)] * 2)
