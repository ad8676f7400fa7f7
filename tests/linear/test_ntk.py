"""Structured Jacobian / NTK versus jacrev, unit-vector columns and finite differences (spec §7.2),
the closed forms of spec §4.3 and §6, and the FC NTK operator."""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear import (
    FC,
    LCN,
    _gram,
    complement_products,
    delta,
    fc_balanced_operator,
    fc_balanced_params,
    fc_jacobian,
    fc_jacobian_reference,
    fc_mu,
    fc_ntk,
    fc_ntk_apply,
    fc_ntk_reference,
    gram_blocks,
    jacobian,
    jacobian_blocks,
    jacobian_reference,
    mu,
    mu_and_jacobian,
    ntk,
    ntk_reference,
)
from neuromanifold.linear._gram import ntk_recursive_1d
from neuromanifold.linear.architecture import validate_params

RTOL_STRUCTURED = 1e-12  # structured vs jacrev, relative to the largest entry
ATOL_EXACT = 1e-12  # closed forms with O(1) entries
# central differences, step 1e-5, relative to the largest entry: μ is multilinear, so they are
# exact up to rounding (measured ≤ 2.1e-11 over seeds 0-9 of the FD architectures)
RTOL_FD = 5e-9
RTOL_RANK_CUT = 1e-10  # singular values of K below this fraction of the largest count as zero
FD_STEP = 1e-5

ARCHS = [
    LCN((2, 2), (1,)),
    LCN((3, 2, 3), (2, 3)),
    LCN((4, 3, 2, 2), (1, 2, 3)),
    LCN((5,), ()),
    LCN(((2, 3), (3, 2), (2, 2)), ((2, 1), (1, 3)), dim=2),
    LCN(((2, 2, 2), (2, 3, 2)), ((2, 1, 3),), dim=3),
]
IDS = ["k22s1", "k323s23", "k4322s123", "L1", "2d", "3d"]


# 1-D architectures for the recursion: strides 1–3 and beyond the filter size, depths 1–6,
# scalar layers (k_l = 1), uneven per-layer sizes, last-step sizes not a multiple of S_{L−1}.
RECURSION_ARCHS = [
    LCN((2, 2), (1,)),
    LCN((3, 2, 3), (2, 3)),
    LCN((4, 3, 2, 2), (1, 2, 3)),
    LCN((5,), ()),
    LCN((1, 3, 2), (2, 1)),
    LCN((3, 1, 2), (3, 2)),
    LCN((1, 1), (3,)),
    LCN((2, 2, 2), (5, 4)),
    LCN((2, 3), (4,)),
    LCN((7, 2, 5, 3), (3, 1, 2)),
    LCN((4,) * 6, (2,) * 5),
    LCN((3,) * 5, (3,) * 4),
    LCN((2,) * 6, (1,) * 5),
    LCN((16, 16, 16), (2, 2)),
]
RECURSION_IDS = [
    "k22s1", "k323s23", "k4322s123", "L1", "k1first", "k1mid", "k11", "s>k", "k23s4",
    "k7253s312", "k4L6s2", "k3L5s3", "k2L6s1", "k16L3s2",
]  # fmt: skip
# residues per product: 0 bytes forces one residue at a time, 3000 a few, 2 MiB all at once
CHUNKS = [0, 3000, 2**21]


def _theta(arch: LCN, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(f) for f in arch.filters]


@pytest.mark.parametrize("arch", ARCHS, ids=IDS)
def test_structured_matches_jacrev(arch: LCN) -> None:
    theta = _theta(arch, 0)
    J, Jr = jacobian(arch, theta), jacobian_reference(arch, theta)
    assert J.shape == (arch.n_v, arch.n_params)
    np.testing.assert_allclose(J, Jr, rtol=0, atol=RTOL_STRUCTURED * np.max(np.abs(Jr)))
    K, Kr = ntk(arch, theta), ntk_reference(arch, theta)
    np.testing.assert_allclose(K, Kr, rtol=0, atol=RTOL_STRUCTURED * np.max(np.abs(Kr)))
    np.testing.assert_allclose(
        sum(gram_blocks(arch, theta)), K, rtol=0, atol=ATOL_EXACT * np.max(K)
    )


@pytest.mark.parametrize("arch", ARCHS, ids=IDS)
def test_mu_and_jacobian_agree_with_separate_calls(arch: LCN) -> None:
    theta = _theta(arch, 3)
    v, J = mu_and_jacobian(arch, theta)
    np.testing.assert_allclose(v, mu(arch, theta), rtol=0, atol=ATOL_EXACT * np.max(np.abs(v)))
    np.testing.assert_array_equal(J, jacobian(arch, theta))


@pytest.mark.parametrize("arch", ARCHS, ids=IDS)
def test_columns_are_mu_with_unit_vectors(arch: LCN) -> None:
    """μ is linear in w_l, so column p of J_l is μ with w_l replaced by the p-th unit vector."""
    theta = _theta(arch, 1)
    for l, Jl in enumerate(jacobian_blocks(arch, theta)):
        for p in range(arch.layer_sizes[l]):
            e = np.zeros(arch.layer_sizes[l])
            e[p] = 1.0
            th = list(theta)
            th[l] = e.reshape(arch.filters[l])
            np.testing.assert_allclose(Jl[:, p], mu(arch, th).ravel(), rtol=0, atol=ATOL_EXACT)


@pytest.mark.parametrize("arch", ARCHS[:3] + ARCHS[4:5], ids=IDS[:3] + IDS[4:5])
def test_jacobian_matches_central_differences(arch: LCN) -> None:
    theta = _theta(arch, 2)
    J = jacobian(arch, theta)
    x = np.concatenate([w.ravel() for w in theta])
    offs = np.concatenate([[0], np.cumsum(arch.layer_sizes)])

    def f(y: np.ndarray) -> np.ndarray:
        return mu(
            arch, [y[a:b].reshape(s) for a, b, s in zip(offs, offs[1:], arch.filters, strict=False)]
        ).ravel()

    fd = np.empty_like(J)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = FD_STEP
        fd[:, i] = (f(x + e) - f(x - e)) / (2 * FD_STEP)
    np.testing.assert_allclose(fd, J, rtol=0, atol=RTOL_FD * np.max(np.abs(J)))


def test_complement_products_are_the_other_layers() -> None:
    arch, theta = LCN((3, 2, 2), (2, 2)), _theta(LCN((3, 2, 2), (2, 2)), 3)
    R = complement_products(arch, theta)
    # R_2 = w_1(z) w_3(z^4)
    expected = np.convolve(theta[0], np.array([theta[2][0], 0, 0, 0, theta[2][1]]))
    np.testing.assert_allclose(R[1], expected, rtol=0, atol=ATOL_EXACT)


def test_stride_one_closed_forms() -> None:
    """Spec §4.3: both stride-one examples, θ and the swapped, Lemma-rescaled θ'."""
    arch = LCN((2, 2), (1,))
    theta = [np.array([1.0, 2.0]), np.array([1.0, -1.0])]
    np.testing.assert_array_equal(ntk(arch, theta), [[2, 1, 0], [1, 7, 1], [0, 1, 5]])
    swapped = [np.sqrt(5 / 2) * np.array([1.0, -1.0]), np.sqrt(2 / 5) * np.array([1.0, 2.0])]
    np.testing.assert_allclose(mu(arch, swapped), [1, 1, -2], rtol=0, atol=ATOL_EXACT)
    np.testing.assert_allclose(delta(swapped), [-3.0], rtol=0, atol=ATOL_EXACT)
    K2 = ntk(arch, swapped)
    np.testing.assert_allclose(
        K2, [[2.9, -1.7, 0], [-1.7, 7, -1.7], [0, -1.7, 4.1]], rtol=0, atol=ATOL_EXACT
    )
    # general two-layer swap: K' − K = (B − A)(G(w_1)/A − G(w_2)/B)
    A, B = 5.0, 2.0
    G1, G2 = gram_blocks(arch, [theta[0], theta[1]])  # G_l = J_l J_lᵀ, J_1 = T(w_2) etc.
    # T(w) is the product matrix of w; G(w_1) = T(w_1)T(w_1)ᵀ is the Gram block of layer 2
    np.testing.assert_allclose(
        K2 - ntk(arch, theta), (B - A) * (G2 / A - G1 / B), rtol=0, atol=ATOL_EXACT
    )
    simple = [np.array([1.0, 0.0]), np.array([1.0, 1.0])]
    np.testing.assert_array_equal(ntk(arch, simple), [[2, 1, 0], [1, 3, 1], [0, 1, 1]])
    simple2 = [np.array([1.0, 1.0]) / np.sqrt(2), np.sqrt(2) * np.array([1.0, 0.0])]
    np.testing.assert_allclose(
        ntk(arch, simple2), [[2.5, 0.5, 0], [0.5, 3, 0.5], [0, 0.5, 0.5]], rtol=0, atol=ATOL_EXACT
    )


def test_reference_values_section6() -> None:
    arch = LCN((2, 2), (2,))
    K = ntk(arch, [[1, 2], [3, 1]])
    np.testing.assert_array_equal(K, [[10, 2, 3, 0], [2, 13, 0, 3], [3, 0, 2, 2], [0, 3, 2, 5]])
    arch3 = LCN((3, 2, 3), (2, 3))
    K3 = ntk(arch3, _theta(arch3, 4))
    assert K3.shape == (17, 17)
    s = np.linalg.svd(K3, compute_uv=False)
    assert int(np.sum(s > RTOL_RANK_CUT * s[0])) == 6 == arch3.dim_M


def test_rescaling_law() -> None:
    """K(c·θ) = Σ_l c_l^{-2} G_l(θ) when Π c_l = 1 (spec §2.5)."""
    arch = LCN((3, 2, 2), (2, 2))
    theta = _theta(arch, 5)
    c = np.array([2.0, -0.25, 2.0])
    scaled = [ci * w for ci, w in zip(c, theta, strict=True)]
    expected = sum(G / ci**2 for G, ci in zip(gram_blocks(arch, theta), c, strict=True))
    np.testing.assert_allclose(
        ntk(arch, scaled), expected, rtol=0, atol=ATOL_EXACT * np.max(expected)
    )


def test_fc_ntk_matches_jacrev_and_operator() -> None:
    rng = np.random.default_rng(6)
    for widths in [(3, 2, 4), (2, 3, 3, 2), (1, 1, 1), (4, 5)]:
        arch = FC(widths)
        Ws = [rng.standard_normal(s) for s in arch.param_shapes]
        K, Kr = fc_ntk(arch, Ws), fc_ntk_reference(arch, Ws)
        np.testing.assert_allclose(K, Kr, rtol=0, atol=RTOL_STRUCTURED * np.max(np.abs(Kr)))
        Jr = fc_jacobian_reference(arch, Ws)
        np.testing.assert_allclose(
            fc_jacobian(arch, Ws), Jr, rtol=0, atol=RTOL_STRUCTURED * np.max(np.abs(Jr))
        )
        Z = rng.standard_normal(arch.out_shape)
        np.testing.assert_allclose(
            fc_ntk_apply(arch, Ws, Z).ravel(),
            K @ Z.ravel(),
            rtol=0,
            atol=RTOL_STRUCTURED * np.max(np.abs(K)) * np.sum(np.abs(Z)),
        )


def test_fc_counterexample_of_section_4_5() -> None:
    """W = I reached by two factorisations with the same Δ but K(E_11) = 4.25 E_11 vs 2 E_11."""
    arch = FC((2, 2, 2))
    E11 = np.array([[1.0, 0.0], [0.0, 0.0]])
    a = [np.diag([2.0, 1.0]), np.diag([0.5, 1.0])]
    b = [np.array([[0.0, -2.0], [1.0, 0.0]]), np.array([[0.0, 1.0], [-0.5, 0.0]])]
    np.testing.assert_allclose(fc_mu(arch, b), np.eye(2), rtol=0, atol=ATOL_EXACT)
    np.testing.assert_allclose(fc_ntk_apply(arch, a, E11), 4.25 * E11, rtol=0, atol=ATOL_EXACT)
    np.testing.assert_allclose(fc_ntk_apply(arch, b, E11), 2.0 * E11, rtol=0, atol=ATOL_EXACT)


def test_balanced_operator_equals_fc_ntk_at_balanced_point() -> None:
    rng = np.random.default_rng(7)
    arch = FC((3, 2, 4, 3))
    W = rng.standard_normal((3, 2)) @ rng.standard_normal((2, 3))
    Ws = fc_balanced_params(arch, W, rng=rng)
    for _ in range(3):
        Z = rng.standard_normal(arch.out_shape)
        K = fc_ntk_apply(arch, Ws, Z)
        np.testing.assert_allclose(
            fc_balanced_operator(W, Z, depth=3), K, rtol=0, atol=RTOL_STRUCTURED * np.max(np.abs(K))
        )


def test_fc_ntk_overflow_is_said_as_for_the_lcn() -> None:
    """s30 trial LINFLOW #3: weights of 1e200 gave a matrix of inf and NaN, silently."""
    import warnings

    from neuromanifold.linear.ntk import NTKOverflowError

    arch = FC((2, 2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning on the way either
        with pytest.raises(NTKOverflowError, match="fc_ntk: K is not representable in float64"):
            fc_ntk(arch, [np.full((2, 2), 1e200)] * 2)
    big = [np.full((2, 2), 1e100)] * 2  # K ~ 1e200 · 4: still finite, and returned as it is
    assert np.all(np.isfinite(fc_ntk(arch, big)))


def test_error_paths() -> None:
    with pytest.raises(TypeError, match="expected an LCN"):
        ntk(FC((2, 2)), [np.ones((2, 2))])
    with pytest.raises(TypeError, match="expected an FC"):
        fc_ntk(LCN((2, 2), (1,)), [np.ones(2)] * 2)
    arch = FC((2, 3))
    with pytest.raises(ValueError, match=r"Z has shape \(2, 3\): expected \(3, 2\)"):
        fc_ntk_apply(arch, [np.ones((3, 2))], np.ones((2, 3)))
    with pytest.raises(ValueError, match="two matrices of equal shape"):
        fc_balanced_operator(np.ones((2, 2)), np.ones((2, 3)), depth=2)
    with pytest.raises(ValueError, match="depth = 0"):
        fc_balanced_operator(np.ones((2, 2)), np.ones((2, 2)), depth=0)


@pytest.mark.parametrize("chunk", CHUNKS, ids=["one", "few", "all"])
@pytest.mark.parametrize("arch", RECURSION_ARCHS, ids=RECURSION_IDS)
def test_recursion_matches_dense_and_jacrev(
    arch: LCN, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_gram, "_CHUNK_BYTES", chunk)
    theta = _theta(arch, 8)
    K = ntk_recursive_1d(arch, validate_params(arch, theta))
    Kd = ntk(arch, theta)
    assert K.shape == (arch.n_v, arch.n_v) and K.flags.c_contiguous
    scale = np.max(np.abs(Kd))
    np.testing.assert_allclose(K, Kd, rtol=0, atol=RTOL_STRUCTURED * scale)
    if chunk == CHUNKS[0]:  # the jacrev oracle once per architecture
        Kr = ntk_reference(arch, theta)
        np.testing.assert_allclose(K, Kr, rtol=0, atol=RTOL_STRUCTURED * np.max(np.abs(Kr)))


def test_recursion_error_path() -> None:
    arch = LCN(((2, 2), (2, 2)), ((2, 2),), dim=2)
    with pytest.raises(ValueError, match=r"arch.dim = 2: .*1-D LCNs only"):
        ntk_recursive_1d(arch, validate_params(arch, _theta(arch, 0)))
