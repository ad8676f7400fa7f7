"""Smooth / crossing / critical classification: spec linear_networks.md §4.2, §4.6, §7.12."""

from __future__ import annotations

import json

import numpy as np
import pytest

from neuromanifold.linear.architecture import LCN
from neuromanifold.linear.converge import RANK_RTOL as CONVERGE_RANK_RTOL
from neuromanifold.linear.fiber import lcn_fiber
from neuromanifold.linear.fiber_numeric import RANK_RTOL as FIBER_RANK_RTOL
from neuromanifold.linear.locus import classify_locus, min_root_gap
from neuromanifold.linear.metric import RTOL_RANK, is_smooth_point, jacobian_rank
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
