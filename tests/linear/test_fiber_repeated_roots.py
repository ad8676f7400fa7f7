"""Fibers at a v whose roots repeat three or more times (s29 trial LIN2 F1): the numeric route's
starts end anywhere within ~FIBER_RTOL^{1/m} of the one true point, and were counted as distinct
points with distinct NTKs. Truth by hand: the factorisations of v into the layers' (dilated)
polynomials, one point each after the rescaling lemma."""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear.architecture import LCN, flatten_params, unflatten_params
from neuromanifold.linear.fiber import lcn_fiber
from neuromanifold.linear.fiber_algebraic import algebraic_fiber_1d, merge_multiple_roots
from neuromanifold.linear.fiber_numeric import (
    SEGMENT_MAX,
    phi,
    problem_scale,
    same_fiber_point,
    target_vector,
    unit_problem,
)
from neuromanifold.linear.polynomial import mu

FIBER_ATOL = 1e-12
"""A polished point reproduces v = O(1) to rounding."""
CENTROID_ATOL = 1e-9
"""The merged triple root of (z − ½)³(z − 0.505) from np.poly's rounded coefficients: 2.2e-10 off
½ (the cluster's centroid has condition ~1/0.005 against the root beside it); polish follows."""


def _v(roots: list[float]) -> np.ndarray:
    """Coefficients of Π (z − r) in increasing degree."""
    return np.poly(roots)[::-1].copy()


@pytest.mark.parametrize(
    ("filters", "strides", "roots", "n_true", "n_starts"),
    [
        # (z² − 0.49)³ = w1(z)·w2(z²): w2 = z² − 0.49 only (as a polynomial in y = z²: (y − 0.49)³)
        ((5, 2), (2,), [0.7] * 3 + [-0.7] * 3, 1, 40),
        # (z − ½)³: w2 = z − ½, w1 = (z − ½)²
        ((3, 2), (1,), [0.5] * 3, 1, 40),
        # (z − ½)³(z + 2): w2 = z − ½ or z + 2
        ((4, 2), (1,), [0.5] * 3 + [-2.0], 2, 40),
    ],
)
def test_a_triple_root_gives_the_true_number_of_points_and_ntks(
    filters: tuple, strides: tuple, roots: list[float], n_true: int, n_starts: int
) -> None:
    rep = lcn_fiber(LCN(filters, strides), _v(roots), [0.0], n_starts=n_starts)
    assert (rep.n_points, rep.n_distinct_ntks) == (n_true, n_true)
    assert rep.routes_agree is True
    numeric = next(r for r in rep.routes if r.name == "numeric")
    assert numeric.n_points == n_true


def test_two_distinct_factorisations_closer_than_the_segment_gate_stay_apart() -> None:
    """Roots ½ and ½ + 10⁻³ swap between the layers: two points 10⁻³ apart, both counted; the
    residual midway between them (1.3e-7) is far above the merge level."""
    arch = LCN((3, 2), (1,))
    v = _v([0.5, 0.5 + 1e-3, 0.2])
    rep = lcn_fiber(arch, v, [0.0])
    assert (rep.n_points, rep.n_distinct_ntks) == (3, 3)
    rho = problem_scale(arch, v, np.zeros(1))
    target = target_vector(arch, *unit_problem(arch, v, np.zeros(1), rho))
    xs = [flatten_params(arch, p) / rho for p in rep.points]
    close = [(a, b) for i, a in enumerate(xs) for b in xs[i + 1 :] if np.linalg.norm(a - b) < 1e-2]
    assert close and all(np.linalg.norm(a - b) < SEGMENT_MAX for a, b in close)
    assert not any(same_fiber_point(arch, target, a, b) for a, b in close)
    for x in xs:  # each is a fiber point
        assert np.linalg.norm(phi(arch, x) - target) <= 1e-10


@pytest.mark.parametrize("roots", [[0.5, 0.5001, 0.2], [3.0, 3.0003, 0.2]])
def test_exact_points_closer_than_the_numeric_resolution_are_all_kept(roots: list[float]) -> None:
    """s29b audit #1: the algebraic route's exact points 10⁻⁴ apart (unit scale) were joined by
    the segment rule, whose midpoint residual falls under its level for points that close: 2 of
    3 points, once with the routes said to agree. Exact points are never joined to each other;
    the numeric route, which cannot resolve them, is reported as disagreeing."""
    rep = lcn_fiber(LCN((3, 2), (1,)), _v(roots), [0.0])
    algebraic = next(r for r in rep.routes if r.name == "algebraic")
    assert rep.n_points == algebraic.n_points == 3
    numeric = next(r for r in rep.routes if r.name == "numeric")
    assert rep.routes_agree is (numeric.n_points == 3)


@pytest.mark.parametrize(
    ("filters", "roots", "n_true"),
    [
        # one root per layer: every layer gets z − ½, one point; with z + 1 as well, four (which
        # layer gets z + 1); multiplicities 3, 4 and 5 split by ~eps^{1/m} in np.roots
        ((2, 2, 2), [0.5] * 3, 1),
        ((2, 2, 2, 2), [0.5] * 3 + [-1.0], 4),
        ((2, 2, 2, 2), [0.5] * 4, 1),
        ((2, 2, 2, 2, 2), [0.5] * 5, 1),
        ((2, 2, 2), [10.0] * 3, 1),
        ((2, 2, 2, 2), [0.5] * 3 + [0.505], 4),
        # a distinct root 1e-4 from a triple one: float roots scatter by 4e-5 and no cluster is
        # the triple; v's rationals give the multiplicities exactly (s32 review #6)
        ((2, 2, 2, 2), [0.5] * 3 + [0.5001], 4),
        ((2, 2, 2, 2), [2.0] * 3 + [2.0001], 4),
    ],
)
def test_the_algebraic_route_finds_points_over_a_root_of_multiplicity_three_or_more(
    filters: tuple, roots: list[float], n_true: int
) -> None:
    """s31 trial LCN #5: the computed triple root of (z − ½)³ is ½ + 6e-6·(cube roots of 1); the
    complex pair made each one-root layer non-real and the algebraic route found no point (the
    numeric route found the one, so only the cross-check was lost). Truth by hand, as above."""
    arch = LCN(filters, (1,) * (len(filters) - 1))
    delta = np.zeros(len(filters) - 1)
    alg = algebraic_fiber_1d(arch, _v(roots), delta)
    assert len(alg.points) == n_true
    target = _v(roots)
    for x in alg.points:
        assert np.linalg.norm(mu(arch, unflatten_params(arch, x)) - target) <= FIBER_ATOL
    rep = lcn_fiber(arch, target, delta)
    assert rep.n_points == n_true
    distinct = set(roots)
    if all(abs(r - q) > 1e-3 for r in distinct for q in distinct if r != q):
        # the numeric route agrees where the distinct roots are apart; points 1e-4 apart at a
        # near-quadruple root it resolves only in part
        assert rep.routes_agree is True


def test_distinct_close_roots_are_not_merged() -> None:
    """Three roots 10⁻³ apart rebuild v only to ~10⁻⁷ when merged: kept as computed."""
    core = _v([0.5, 0.501, 0.502])
    computed = np.roots(core[::-1]).astype(complex)
    assert np.array_equal(merge_multiple_roots(core, computed), computed)
    core = _v([0.5] * 3 + [0.505])
    merged = np.sort_complex(merge_multiple_roots(core, np.roots(core[::-1])))
    assert merged.tolist() == pytest.approx([0.5, 0.5, 0.5, 0.505], abs=CENTROID_ATOL)


@pytest.mark.parametrize(
    ("d", "merged", "n_points"), [(0.0, False, 1), (1e-6, True, 1), (1e-3, False, 6)]
)
def test_a_merged_multiple_root_is_said(d: float, merged: bool, n_points: int) -> None:
    """s32 trial NEWCODE #2: distinct roots ½, ½ + d, ½ + 2d with d ≤ 4e-6 (not small rationals:
    no exact route) are read as one triple root (float64 coefficients cannot tell them apart):
    one point where 6 are distinct. The report says a multiple root was read, so a count of 1 is
    not taken for the truth silently. At d = 0, v = (z − ½)³ reads as rationals and its
    multiplicity is exact (square-free factorisation): no caveat."""
    rep = lcn_fiber(LCN((2, 2, 2), (1, 1)), _v([0.5, 0.5 + d, 0.5 + 2 * d]), [0.0, 0.0])
    said = [n for n in rep.notes if n.startswith("v has a root of multiplicity ≥ 3")]
    assert bool(said) is merged
    assert rep.n_points == n_points
