"""Geometry identities of spec §7.12: rank K = dim M, range K = range J, the crossing and
critical-point examples, g_v(K∇ℓ, η) = ⟨∇ℓ, η⟩ on T_vM; error paths."""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear import LCN, delta, jacobian, mu, ntk, rescale_to_delta
from neuromanifold.linear.fiber import lcn_fiber
from neuromanifold.linear.locus import classify_locus
from neuromanifold.linear.metric import (
    RTOL_RANK,
    balanced_representative,
    is_smooth_point,
    jacobian_rank,
    metric_inner,
    metric_tensor,
    riemannian_gradient,
    tangent_basis,
    tangent_condition_number,
)

ATOL_EXACT = 1e-12
# metric identities involve K⁺: error relative to the condition number scale
# (measured over 10 seeds: ≤ 1.7e-16 · cond for GK = P, ≤ 1.0e-16 · cond · max K for KGK = K,
# ≤ 2.9e-16 · ‖∇ℓ‖ · cond for the Riemannian-gradient identity)
RTOL_IDENTITY = 1e-13
RTOL_SUBSPACE = 1e-10  # distance between orthogonal projectors

REGULAR = [
    LCN((3, 2, 2), (2, 2)),
    LCN((3, 2, 3), (2, 3)),
    LCN((2, 2), (1,)),
    LCN(((2, 2), (3, 3)), ((1, 1),), dim=2),
]


def _proj(B: np.ndarray) -> np.ndarray:
    return B @ B.T


@pytest.mark.parametrize("arch", REGULAR, ids=["k322", "k323", "k22s1", "2d"])
def test_rank_and_range_at_regular_points(arch: LCN) -> None:
    rng = np.random.default_rng(0)
    theta = [rng.standard_normal(f) for f in arch.filters]
    K = ntk(arch, theta)
    rep = is_smooth_point(arch, theta)
    assert rep.smooth and rep.rank == arch.dim_M == jacobian_rank(arch, theta)
    s = np.linalg.svd(K, compute_uv=False)
    assert int(np.sum(s > RTOL_RANK * s[0])) == arch.dim_M
    # range K = range J: equal orthogonal projectors
    _, U = np.linalg.eigh(K)
    UK = U[:, ::-1][:, : arch.dim_M]
    T = tangent_basis(arch, theta)
    assert T.shape == (arch.n_v, arch.dim_M)
    np.testing.assert_allclose(_proj(UK), _proj(T), rtol=0, atol=RTOL_SUBSPACE)
    assert rep.to_dict()["rank"] == arch.dim_M


@pytest.mark.parametrize("arch", REGULAR, ids=["k322", "k323", "k22s1", "2d"])
def test_riemannian_gradient_identity(arch: LCN) -> None:
    """g_v(K∇ℓ, η) = ⟨∇ℓ, η⟩ for η ∈ T_vM; K∇ℓ ∈ T_vM."""
    rng = np.random.default_rng(1)
    theta = [rng.standard_normal(f) for f in arch.filters]
    K = ntk(arch, theta)
    T = tangent_basis(arch, theta)
    grad = rng.standard_normal(arch.out_shape)  # any ∇ℓ, not necessarily tangent
    xi = riemannian_gradient(K, grad)
    assert xi.shape == grad.shape
    scale = np.linalg.norm(grad) * tangent_condition_number(K, arch.dim_M)
    for _ in range(3):
        eta = T @ rng.standard_normal(arch.dim_M)
        lhs = metric_inner(K, arch.dim_M, xi, eta)
        assert lhs == pytest.approx(float(grad.ravel() @ eta), abs=RTOL_IDENTITY * scale)
    # K∇ℓ lies in T_vM
    np.testing.assert_allclose(
        _proj(T) @ xi.ravel(), xi.ravel(), rtol=0, atol=RTOL_SUBSPACE * scale
    )


def test_crossing_point_of_section_4_2() -> None:
    arch = LCN((3, 2), (2,))
    theta = [np.array([-0.25, 0.0, 1.0]), np.array([-2.25, 1.0])]
    d = delta(theta)
    np.testing.assert_allclose(d, [5.0], rtol=0, atol=ATOL_EXACT)
    other = rescale_to_delta([np.array([-2.25, 0.0, 1.0]), np.array([-0.25, 1.0])], d)
    np.testing.assert_allclose(mu(arch, other), mu(arch, theta), rtol=0, atol=ATOL_EXACT)
    assert jacobian_rank(arch, theta) == jacobian_rank(arch, other) == 4 == arch.dim_M
    J2 = np.hstack([jacobian(arch, theta), jacobian(arch, other)])
    s = np.linalg.svd(J2, compute_uv=False)
    assert int(np.sum(s > RTOL_RANK * s[0])) == 5
    gap = np.max(np.abs(ntk(arch, theta) - ntk(arch, other)))
    assert gap == pytest.approx(80 / 17, abs=ATOL_EXACT * 100)


def test_critical_points_of_section_4_6() -> None:
    arch = LCN((3, 2), (2,))
    critical = [np.array([-0.49, 0.0, 1.0]), np.array([-0.49, 1.0])]
    one_root = [np.array([-0.91, 0.6, 1.0]), np.array([-0.49, 1.0])]  # (z − 0.7)(z + 1.3)
    rep_c, rep_r = is_smooth_point(arch, critical), is_smooth_point(arch, one_root)
    assert (rep_c.rank, rep_r.rank) == (3, 4)
    assert not rep_c.smooth and rep_r.smooth
    assert rep_c.sigma_dim <= RTOL_RANK * rep_c.sigma_max < rep_r.sigma_dim
    assert not is_smooth_point(arch, [np.zeros(3), np.ones(2)]).smooth


RTOL_ORBIT = 1e-12  # σ's at the balanced point: the same for every point of a rescaling orbit


@pytest.mark.parametrize(
    ("arch", "theta"),
    [
        (LCN((2, 2), (1,)), [[1.0, 2.0], [1.0, -1.0]]),  # spec §4.3, dim M = 3
        (LCN((3, 2, 2), (2, 2)), [[0.3, -1.1, 0.7], [0.9, 0.4], [-0.5, 1.3]]),  # dim M = 5
    ],
    ids=["k22s1", "k322s22"],
)
def test_regularity_verdict_is_the_same_along_the_rescaling_orbit(arch: LCN, theta) -> None:
    """w_1 → c w_1, w_2 → w_2 / c keeps μ, so rank Jμ (= dim M here) and the verdict must not
    change (s15 trial R #2: σ_dimM/σ_max of Jμ(θ) itself fell to 6e-10 at c = 3e4 and 5e-17 at
    c = 1e8, and θ was called singular, rank 2 < dim M = 3)."""
    ref = is_smooth_point(arch, theta)
    assert ref.smooth and ref.rank == arch.dim_M
    for c in (1e4, 3e4, 1e5, 1e8, 1e-8):
        th = [np.asarray(theta[0]) * c, np.asarray(theta[1]) / c, *theta[2:]]
        rep = is_smooth_point(arch, th)
        assert rep.smooth and rep.rank == arch.dim_M == jacobian_rank(arch, th)
        for a, b in [(rep.sigma_max, ref.sigma_max), (rep.sigma_dim, ref.sigma_dim)]:
            assert abs(a - b) <= RTOL_ORBIT * ref.sigma_max
        assert classify_locus(arch, theta=th, n_starts=4).classification == "smooth"
        fib = lcn_fiber(arch, mu(arch, th), delta(th), n_starts=4)
        assert fib.jacobian_ranks and set(fib.jacobian_ranks) == {arch.dim_M}


def test_fc_regularity_verdict_is_the_same_along_the_scalar_rescaling_orbit() -> None:
    """s15 audit U #1: widths (3, 2, 3) with W_1 → c W_1, W_2 → W_2 / c had rank 7 at c = 3e4
    and 6 at c = 1e5 (dim M = 8); FC layers are balanced by their Frobenius norms now."""
    from neuromanifold.linear import FC

    arch = FC((3, 2, 3))
    rng = np.random.default_rng(0)
    W = [rng.standard_normal((2, 3)), rng.standard_normal((3, 2))]
    ref = is_smooth_point(arch, W)
    assert ref.smooth and ref.rank == arch.dim_M == 8
    for c in (3e4, 1e5, 1e8):
        rep = is_smooth_point(arch, [W[0] * c, W[1] / c])
        assert rep.smooth and rep.rank == ref.rank
        assert abs(rep.sigma_dim - ref.sigma_dim) <= RTOL_ORBIT * ref.sigma_max


def test_route_agreement_of_a_stretched_regular_fiber_uses_the_regular_tolerance(
    monkeypatch,
) -> None:
    """s15 audit U #2: lcn_fiber's "is a fiber point singular?" test read Jμ at the raw point,
    so a regular fiber rescaled by c = 1e5 was compared at the looser singular tolerance."""
    import neuromanifold.linear.fiber as fiber

    used: list[float] = []
    real = fiber._ntks_agree
    monkeypatch.setattr(
        fiber, "_ntks_agree", lambda a, b, rtol: used.append(rtol) or real(a, b, rtol)
    )
    arch = LCN((2, 2), (2,))
    th = [np.array([1.0, 2.0]) * 1e5, np.array([1.0, -1.0]) / 1e5]
    rep = fiber.lcn_fiber(arch, mu(arch, th), delta(th), n_starts=4)
    assert rep.routes_agree is not None and used == [fiber.ROUTE_AGREE_RTOL]


def test_balanced_representative() -> None:
    """Equal filter norms, the same μ; θ kept where the orbit is not the scalar one."""
    arch = LCN((3, 2, 2), (2, 2))
    th = [np.array([1e8, -2e8, 3e8]), np.array([1e-8, 2e-8]), np.array([0.5, 0.25])]
    b = balanced_representative(arch, th)
    norms = [np.linalg.norm(w) for w in b]
    np.testing.assert_allclose(norms, norms[0], rtol=1e-14)
    np.testing.assert_allclose(mu(arch, b), mu(arch, th), rtol=1e-14)
    zero = [th[0], np.zeros(2), th[2]]
    for x, y in zip(balanced_representative(arch, zero), zero, strict=True):
        np.testing.assert_array_equal(x, y)
    one = LCN((3,), (1,))
    w = [np.array([1.0, 2.0, 3.0])]
    assert balanced_representative(one, w) is w


def test_min_filter_norm_does_not_underflow() -> None:
    """A filter of scale 1e-200 has norm 2.2e-200, not 0 (its squares underflow), and θ is a
    regular point (s15 trial R #2: 'min |w_l| = 0', smooth: no)."""
    rep = is_smooth_point(LCN((2, 2), (1,)), [[1e-200, 2e-200], [1.0, -1.0]])
    assert rep.min_filter_norm == pytest.approx(np.sqrt(5) * 1e-200, rel=1e-15)
    assert rep.smooth and rep.rank == 3


def test_metric_undefined_on_the_critical_family() -> None:
    """Spec §4.6: w_1 = z² − c, w_2 = y − c (k = (3, 2), s = 2) is critical (rank Jμ = 3 < 4)
    for every c ≠ 0. There λ_dimM of K is round-off of either sign (~1e-16 λ_max), which
    metric_tensor used to invert (entries ~1e16) whenever it came out positive."""
    arch = LCN((3, 2), (2,))
    for c in np.linspace(0.1, 2.0, 40):
        theta = [np.array([-c, 0.0, 1.0]), np.array([-c, 1.0])]
        assert is_smooth_point(arch, theta).rank == arch.dim_M - 1
        K = ntk(arch, theta)
        with pytest.raises(ValueError, match=r"undefined at this \(singular\) point"):
            metric_tensor(K, arch.dim_M)
        assert tangent_condition_number(K, arch.dim_M) == float("inf")
        # a generic point next to it (w_1 gains a z term) is regular and has a metric
        near = [np.array([-c, 0.5, 1.0]), np.array([-c, 1.0])]
        assert is_smooth_point(arch, near).smooth
        K = ntk(arch, near)
        G = metric_tensor(K, arch.dim_M)
        cond = tangent_condition_number(K, arch.dim_M)
        P = _proj(tangent_basis(arch, near))
        np.testing.assert_allclose(G @ K, P, rtol=0, atol=RTOL_IDENTITY * cond)


def test_metric_tensor_is_pseudo_inverse_on_tangent_space() -> None:
    arch = LCN((3, 2, 2), (2, 2))
    rng = np.random.default_rng(2)
    theta = [rng.standard_normal(f) for f in arch.filters]
    K = ntk(arch, theta)
    G = metric_tensor(K, arch.dim_M)
    P = _proj(tangent_basis(arch, theta))
    cond = tangent_condition_number(K, arch.dim_M)
    np.testing.assert_allclose(G @ K, P, rtol=0, atol=RTOL_IDENTITY * cond)
    np.testing.assert_allclose(K @ G @ K, K, rtol=0, atol=RTOL_IDENTITY * cond * np.max(K))


def test_error_paths() -> None:
    arch = LCN((2, 2), (1,))
    theta = [np.ones(2), np.ones(2)]
    with pytest.raises(ValueError, match=r"rtol = 0: expected a float in \(0, 1\)"):
        jacobian_rank(arch, theta, rtol=0)
    with pytest.raises(ValueError, match="rtol = 2"):
        is_smooth_point(arch, theta, rtol=2)
    with pytest.raises(TypeError, match="expected an LCN or FC"):
        jacobian_rank("arch", theta)
    with pytest.raises(ValueError, match=r"K has shape \(2, 3\)"):
        metric_tensor(np.ones((2, 3)), 1)
    with pytest.raises(ValueError, match="symmetric"):
        metric_tensor(np.array([[1.0, 2.0], [0.0, 1.0]]), 1)
    with pytest.raises(ValueError, match="finite"):
        metric_tensor(np.array([[np.nan, 0.0], [0.0, 1.0]]), 1)
    with pytest.raises(ValueError, match=r"dim_M = 3: expected an int in \[1, 2\]"):
        metric_tensor(np.eye(2), 3)
    with pytest.raises(ValueError, match=r"only 1 eigenvalues above RTOL_RANK .+ < dim_M = 2"):
        metric_tensor(np.diag([1.0, 0.0]), 2)
    with pytest.raises(ValueError, match="expected 2 each"):
        metric_inner(np.eye(2), 2, np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match=r"grad with K\.shape"):
        riemannian_gradient(np.eye(2), np.ones(3))
    assert tangent_condition_number(np.diag([1.0, 0.0]), 2) == float("inf")


def test_metric_refusal_says_singular_or_ill_conditioned() -> None:
    """metric_tensor tests λ = σ² of K at RTOL_RANK, so a point the rank tests call regular can
    be refused; the message calls a point singular only where λ_dimM is within K's round-off
    (rank < dim M), and otherwise names it regular but ill-conditioned, with its condition
    number. Before, both said "undefined at this (singular) point"."""
    arch = LCN((3, 2), (2,))
    near = [np.array([-0.49, 0.0, 1.0]), np.array([-0.49 + 1e-5, 1.0])]  # 1e-5 off spec §4.6
    assert jacobian_rank(arch, near) == arch.dim_M and is_smooth_point(arch, near).smooth
    K = ntk(arch, near)
    cond = tangent_condition_number(K, arch.dim_M)
    assert 1 / RTOL_RANK <= cond < float("inf")  # resolved by K, yet beyond the metric's bound
    with pytest.raises(ValueError, match=r"not singular.+too ill-conditioned.+≥ 1 / RTOL_RANK"):
        metric_tensor(K, arch.dim_M)
    critical = [np.array([-0.49, 0.0, 1.0]), np.array([-0.49, 1.0])]
    assert jacobian_rank(arch, critical) == arch.dim_M - 1
    with pytest.raises(ValueError, match=r"round-off .+ rank < dim_M.+\(singular\) point"):
        metric_tensor(ntk(arch, critical), arch.dim_M)
    # the same two verdicts on K alone: λ_2 = 1e-12 λ_1 is resolved (n_v ε ≈ 7e-16), λ_2 = 0 not
    with pytest.raises(ValueError, match=r"too ill-conditioned .+ = 1e\+12"):
        metric_tensor(np.diag([1.0, 1e-12, 0.0]), 2)
    with pytest.raises(ValueError, match=r"rank < dim_M.+\(singular\) point"):
        metric_tensor(np.diag([1.0, 0.0, 0.0]), 2)
