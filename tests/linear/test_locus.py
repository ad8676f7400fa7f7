"""Smooth / crossing / critical classification: spec linear_networks.md §4.2, §4.6, §7.12."""

from __future__ import annotations

import json

import numpy as np
import pytest

from neuromanifold.linear.accuracy import second_order_term, sigma_floor
from neuromanifold.linear.architecture import LCN
from neuromanifold.linear.converge import RANK_RTOL as CONVERGE_RANK_RTOL
from neuromanifold.linear.fiber import lcn_fiber
from neuromanifold.linear.fiber_numeric import RANK_RTOL as FIBER_RANK_RTOL
from neuromanifold.linear.locus import classify_locus, min_root_gap
from neuromanifold.linear.metric import RTOL_RANK, is_smooth_point, jacobian_rank
from neuromanifold.linear.ntk import jacobian
from neuromanifold.linear.polynomial import mu
from neuromanifold.linear.relu_fiber import RANK_RTOL as RELU_RANK_RTOL

ATOL_EXACT = 1e-12
# np.roots splits a double root by O(√eps · scale) ≈ 1e-8 (measured 4.6e-9 here)
DOUBLE_ROOT_GAP_MAX = 1e-6
RTOL_ZERO_SV = 1e-12  # a vanishing singular value, relative to σ_max (measured 2.4e-17)
OFF_RESIDUAL_MIN = 1e-6  # best fiber residual of an off-manifold v (measured 0.67)


def test_crossing_example() -> None:
    """(z² − 1/4)(z² − 9/4) has two factorisations with different tangent 4-planes."""
    arch = LCN((3, 2), (2,))
    theta = [np.array([-0.25, 0.0, 1.0]), np.array([-2.25, 1.0])]
    np.testing.assert_allclose(mu(arch, theta), [0.5625, 0, -2.5, 0, 1], rtol=0, atol=ATOL_EXACT)
    rep = classify_locus(arch, theta=theta)
    assert rep.classification == "crossing"
    assert rep.n_fiber_points == 2
    assert set(rep.ranks) == {4} and rep.dim_M == 4
    assert rep.pair_ranks == (5,)
    assert abs(rep.ntk_gap - 80 / 17) <= ATOL_EXACT * 10
    fib = lcn_fiber(arch, mu(arch, theta), [5.0])
    assert abs(fib.max_ntk_diff_abs - 80 / 17) <= ATOL_EXACT * 10


def test_critical_point_examples() -> None:
    arch = LCN((3, 2), (2,))
    crit = classify_locus(arch, theta=[np.array([-0.49, 0.0, 1.0]), np.array([-0.49, 1.0])])
    assert crit.ranks[0] == 3 and crit.classification == "critical"
    # one common root only: still regular
    w1 = np.polynomial.polynomial.polyfromroots([0.7, -1.3])
    reg = classify_locus(arch, theta=[w1, np.array([-0.49, 1.0])])
    assert reg.ranks[0] == 4 and reg.classification == "smooth"
    assert (
        reg.min_root_gap is not None and reg.min_root_gap < DOUBLE_ROOT_GAP_MAX
    )  # the double root 0.7
    assert crit.singular_values[0][3] < RTOL_ZERO_SV * crit.singular_values[0][0]


def test_generic_strided_point_is_smooth() -> None:
    arch = LCN((2, 3, 2), (2, 3))
    rng = np.random.default_rng(0)
    theta = [rng.standard_normal(s) for s in arch.param_shapes]
    rep = classify_locus(arch, v=mu(arch, theta))
    assert rep.classification == "smooth" and rep.n_fiber_points == 1
    assert rep.ranks == (arch.dim_M,)
    json.dumps(rep.to_dict())


def test_stride_one_sheets_are_not_crossings_in_full_dimension() -> None:
    """All strides 1: M is full-dimensional, so two sheets never give rank [J|J'] > dim M."""
    arch = LCN((2, 2), (1,))
    rep = classify_locus(arch, v=[1.0, 1.0, -2.0])
    assert rep.n_fiber_points == 2 and rep.max_pair_rank == arch.dim_M == 3
    assert rep.classification == "smooth"


def test_zero_and_off_manifold() -> None:
    arch = LCN((3, 2), (2,))
    assert classify_locus(arch, v=np.zeros(5)).classification == "zero"
    off = classify_locus(arch, v=[1.0, 0.3, -2.0, 0.7, 1.5], n_starts=8)
    assert off.classification == "off_manifold" and off.n_fiber_points == 0
    assert off.fiber_residual > OFF_RESIDUAL_MIN


def test_bad_arguments() -> None:
    arch = LCN((3, 2), (2,))
    with pytest.raises(ValueError, match="exactly one of v= and theta="):
        classify_locus(arch)
    with pytest.raises(ValueError, match="exactly one of v= and theta="):
        classify_locus(arch, v=np.ones(5), theta=[np.ones(3), np.ones(2)])
    with pytest.raises(ValueError, match="v has shape"):
        classify_locus(arch, v=np.ones(4))
    with pytest.raises(TypeError, match="expected an LCN"):
        classify_locus("lcn", v=np.ones(5))  # type: ignore[arg-type]


def test_min_root_gap_closed_form() -> None:
    assert abs(min_root_gap(np.array([-2.0, 1.0, 1.0])) - 1.5) <= ATOL_EXACT  # roots 1, −2


@pytest.mark.parametrize(
    ("filters", "r"), [((2, 2), -0.7), ((2, 2), 2.0), ((3, 2), 0.3), ((2, 3), 1.5), ((3, 3), -1.2)]
)
def test_stride_one_common_root_is_critical(filters: tuple, r: float) -> None:
    """Spec §4.6: with stride one, w_1 and w_2 sharing a root r is a critical point of μ."""
    arch = LCN(filters, (1,))
    rng = np.random.default_rng(5)
    P = np.polynomial.polynomial
    others = [rng.uniform(-2, 2, k - 2) for k in filters]  # k − 2 more real roots per factor
    scales = rng.uniform(0.5, 2.0, len(filters))
    common = [c * P.polyfromroots([r, *o]) for c, o in zip(scales, others, strict=True)]
    assert jacobian_rank(arch, common) < arch.dim_M
    assert not is_smooth_point(arch, common).smooth
    rep = classify_locus(arch, theta=common, n_starts=4)
    assert rep.classification == "critical" and rep.ranks[0] < arch.dim_M
    # moving the shared root of the last factor off r restores full rank
    apart = [*common[:-1], scales[-1] * P.polyfromroots([r + 0.5, *others[-1]])]
    assert jacobian_rank(arch, apart) == arch.dim_M


def test_stride_one_two_by_two_image_is_real_rooted_quadratics() -> None:
    """Spec §1.1: k = (2, 2), stride one: M is the set of real-rooted quadratics (dim M = 3)."""
    arch = LCN((2, 2), (1,))
    assert arch.dim_M == arch.n_v == 3
    for d in (0.0, -3.0):
        off = lcn_fiber(arch, [1.0, 0.0, 1.0], [d], n_starts=6)  # 1 + z²: roots ±i
        assert not off.on_manifold and off.n_points == 0 and off.residual > OFF_RESIDUAL_MIN
        on = lcn_fiber(arch, [1.0, 0.0, -1.0], [d], n_starts=6)  # 1 − z² = (1 − z)(1 + z)
        assert on.on_manifold and on.n_points >= 1


@pytest.mark.parametrize("eps", [1e-8, 3e-9, 1e-9, 3e-10])
def test_locus_and_smooth_point_share_the_rank_threshold(eps: float) -> None:
    """Near the §4.6 critical point (common root 0.7 moved by ε) both verdicts use RTOL_RANK."""
    arch = LCN((3, 2), (2,))
    theta = [np.array([-0.49, 0.0, 1.0]), np.array([-0.49 + eps, 1.0])]
    sp = is_smooth_point(arch, theta)
    loc = classify_locus(arch, theta=theta, n_starts=4)
    assert loc.rank_rtol == sp.rtol == RTOL_RANK
    assert loc.ranks[0] == sp.rank == jacobian_rank(arch, theta)
    assert (loc.classification == "critical") == (not sp.smooth)
    assert FIBER_RANK_RTOL == CONVERGE_RANK_RTOL == RELU_RANK_RTOL == RTOL_RANK


# --- v= path: fiber points rebuilt from v (trial A #1) ---------------------------------------

#: invariants δ at which the v= verdict is checked (spec §4.1: δ only picks the scale)
DELTAS = (None, [-5.0], [-1.0], [0.0], [1.0], [3.0], [10.0])
#: spec §4.6 critical examples: w_1 divisible by z² − c for the root c of w_2 (rank 3 < 4)
CRITICAL_THETAS = {
    "z2-0.49": (np.array([-0.49, 0.0, 1.0]), np.array([-0.49, 1.0])),
    "z2+1": (np.array([1.0, 0.0, 1.0]), np.array([1.0, 1.0])),  # v = (z² + 1)²
    "scaled": (2.3 * np.array([-1.7, 0.0, 1.0]), np.array([-1.7, 1.0])),
}
#: smooth points near the critical ones: w_1 = z² + b z − 0.49, w_2 = y − 0.49 (two pairs of
#: distinct roots of v, 0.7 and ≈ 0.7 − b/2, one factorisation); and one common root 0.7 with the
#: other orbit moved to ±(0.7 + g) (spec §4.6: one common root is regular)
P = np.polynomial.polynomial
SMOOTH_THETAS = {
    "b=1e-5": (np.array([-0.49, 1e-5, 1.0]), np.array([-0.49, 1.0])),
    "b=1e-6": (np.array([-0.49, 1e-6, 1.0]), np.array([-0.49, 1.0])),
    "one-common-root": (P.polyfromroots([0.7, -1.3]), np.array([-0.49, 1.0])),
    "gap=1e-6": (P.polyfromroots([0.7, -1.3]), np.array([-((0.7 + 1e-6) ** 2), 1.0])),
}
#: random starts of the numeric fiber route (the algebraic route finds these one-orbit fibers)
N_STARTS = 8
#: roots of v at most this far apart (relative) count as a near-collision in these examples
NEAR_ROOT_GAP = 1e-5
#: homogeneity of sigma_floor under θ ↦ 2θ (exact in binary), v ↦ 2^L v: SVD round-off only
RTOL_HOMOGENEOUS = 1e-10


@pytest.mark.parametrize("name", list(CRITICAL_THETAS))
@pytest.mark.parametrize("d", DELTAS, ids=str)
def test_critical_examples_from_v_are_critical_for_every_delta(name: str, d: list | None) -> None:
    """Spec §4.6, §7.12: the v= path gives the theta= verdict (rank 3 < dim M = 4) for each δ."""
    arch = LCN((3, 2), (2,))
    theta = CRITICAL_THETAS[name]
    assert classify_locus(arch, theta=theta).classification == "critical"
    rep = classify_locus(arch, v=mu(arch, theta), delta=d, n_starts=N_STARTS)
    assert rep.classification == "critical" and rep.n_fiber_points == 1
    assert rep.ranks == (arch.dim_M - 1,)
    # the rebuilt point's σ_dimM is not at round-off but below the point's accuracy floor
    assert rep.sigma_floors[0] > 0
    s = rep.singular_values[0]
    assert s[arch.dim_M - 1] <= rep.sigma_floors[0]
    # the note says so exactly when the plain RTOL_RANK rank would have been full
    floored = s[arch.dim_M - 1] > RTOL_RANK * s[0]
    assert any("accuracy floor" in n for n in rep.notes) == floored
    # the fiber report counts the same ranks (s25 trial LIN #1: it used RTOL_RANK alone and
    # printed rank J = dim M at δ = 0.5), and says why where the floor decides
    fib = lcn_fiber(arch, mu(arch, theta), [0.0] if d is None else d, n_starts=N_STARTS)
    assert fib.jacobian_ranks == rep.ranks
    assert any("accuracy floor" in n for n in fib.notes) == floored


@pytest.mark.parametrize("name", list(SMOOTH_THETAS))
@pytest.mark.parametrize("d", DELTAS, ids=str)
def test_smooth_points_near_critical_stay_smooth_from_v(name: str, d: list | None) -> None:
    """Near-collisions of roots that are resolvable keep rank dim M, as with theta=."""
    arch = LCN((3, 2), (2,))
    theta = SMOOTH_THETAS[name]
    v = mu(arch, theta)
    assert classify_locus(arch, theta=theta).classification == "smooth"
    rep = classify_locus(arch, v=v, delta=d, n_starts=N_STARTS)
    assert rep.classification == "smooth" and rep.n_fiber_points == 1
    assert rep.ranks == (arch.dim_M,)
    pairs = zip(rep.singular_values, rep.sigma_floors, strict=True)
    assert all(s[arch.dim_M - 1] > f for s, f in pairs)
    assert rep.min_root_gap is not None and rep.min_root_gap <= NEAR_ROOT_GAP
    fib = lcn_fiber(arch, v, [0.0] if d is None else d, n_starts=N_STARTS)
    assert fib.jacobian_ranks == (arch.dim_M,)
    assert not any("accuracy floor" in n for n in fib.notes)


def test_theta_path_uses_no_floor() -> None:
    """θ given: it is exact, so the verdict is is_smooth_point's at RTOL_RANK (no floor)."""
    arch = LCN((3, 2), (2,))
    rep = classify_locus(arch, theta=SMOOTH_THETAS["b=1e-6"], n_starts=4)
    assert set(rep.sigma_floors) == {0.0} and len(rep.sigma_floors) == len(rep.ranks)


def test_second_order_term_is_the_t_squared_coefficient() -> None:
    """μ multilinear: for L = 3, (μ(θ + n) + μ(θ − n))/2 − μ(θ) is exactly Q(n); L = 2: μ(n)."""
    arch = LCN((3, 2, 2), (2, 2))
    rng = np.random.default_rng(7)
    theta = [rng.standard_normal(k) for k in arch.layer_sizes]
    n = rng.standard_normal(arch.n_params)
    parts = np.split(n, np.cumsum(arch.layer_sizes)[:-1])
    plus = mu(arch, [w + p for w, p in zip(theta, parts, strict=True)])
    minus = mu(arch, [w - p for w, p in zip(theta, parts, strict=True)])
    want = (plus + minus) / 2 - mu(arch, theta)
    got = second_order_term(arch, theta, n)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL_EXACT * np.abs(want).max())
    two = LCN((3, 2), (2,))
    m2 = rng.standard_normal(two.n_params)
    np.testing.assert_allclose(
        second_order_term(two, [np.ones(3), np.ones(2)], m2), mu(two, [m2[:3], m2[3:]]), atol=0
    )
    with pytest.raises(ValueError, match="n has 4 entries: expected n_params = 5"):
        second_order_term(two, [np.ones(3), np.ones(2)], np.ones(4))


@pytest.mark.parametrize("t", [1e-8, 1e-6, 1e-4])
def test_sigma_floor_covers_points_off_a_critical_point(t: float) -> None:
    """θ* + t n (n the extra null direction at a critical θ*) is within τ ≈ t²‖Q(n)‖ of v = μ(θ*)
    and has σ_dimM ≈ 2t‖Q(n)‖ — never above the floor, whatever t."""
    arch = LCN((3, 2), (2,))
    star = CRITICAL_THETAS["z2-0.49"]
    n = np.linalg.svd(jacobian(arch, star))[2][arch.dim_M - 1]
    th = [star[0] + t * n[:3], star[1] + t * n[3:]]
    sigma = np.linalg.svd(jacobian(arch, th), compute_uv=False)[arch.dim_M - 1]
    assert sigma > RTOL_RANK * np.linalg.norm(jacobian(arch, th), 2)  # plain rank: full
    assert sigma <= sigma_floor(arch, th, mu(arch, star))


def test_sigma_floor_homogeneous_and_zero_for_one_layer() -> None:
    """Scaling every w_l by 2 (v by 2^L) scales σ_dimM and the floor by 2^(L−1)."""
    arch = LCN((3, 2, 2), (2, 2))
    rng = np.random.default_rng(3)
    theta = [rng.standard_normal(k) for k in arch.layer_sizes]
    v = mu(arch, theta) * (1 + 1e-9)  # a residual, so τ is not round-off alone
    f1 = sigma_floor(arch, theta, v)
    f2 = sigma_floor(arch, [2 * w for w in theta], 2**arch.L * v)
    assert abs(f2 / f1 - 2 ** (arch.L - 1)) <= RTOL_HOMOGENEOUS * 2 ** (arch.L - 1)
    one = LCN((3,), (1,))
    assert sigma_floor(one, [np.array([1.0, 2.0, 3.0])], [1.0, 2.0, 3.0]) == 0.0
