"""D ≥ 2 algebraic route: which ``v`` read as small rationals (trial A #3).

Random real ``v`` must make the rational route not applicable (it used to accept about a
quarter of random Gaussian 2-D pairs, then found 0 points and the report said the routes
disagree); ``v`` built from small-denominator filters must still run the route, and its points
must agree with the numeric route.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from neuromanifold.linear.architecture import LCN
from neuromanifold.linear.fiber import fiber_of_params, lcn_fiber
from neuromanifold.linear.fiber_algebraic import (
    RATIONAL_MAX_DEN,
    algebraic_fiber,
    rational_coefficients,
)
from neuromanifold.linear.invariants import delta
from neuromanifold.linear.ntk import ntk
from neuromanifold.linear.polynomial import mu

N_RANDOM = 30  # the trial's batch size (before the fix 10 of its 30 draws were accepted here)
RTOL_NTK = 1e-9  # NTK of a found point vs the NTK of the generating θ (as in test_fiber.py)
# the same fiber point from two polished solves (unit-scale residuals ~1e-13), entries O(1)
ATOL_POINTS = 1e-9


def _gaussian(arch: LCN, seed: int, scale: float = 1.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [scale * rng.standard_normal(s) for s in arch.param_shapes]


def _rational_filters(arch: LCN, seed: int, max_den: int) -> tuple[list[np.ndarray], int]:
    """Entries p/q, |p| ≤ 6, 1 ≤ q ≤ max_den (a nonzero corner per layer), and the product over
    layers of each layer's common denominator."""
    rng = np.random.default_rng(seed)
    out, den_product = [], 1
    for shape in arch.param_shapes:
        num = rng.integers(-6, 7, size=shape)
        num[(0,) * len(shape)] = rng.integers(1, 7)
        den = rng.integers(1, max_den + 1, size=shape)
        out.append(num / den)
        den_product *= math.lcm(
            *(
                Fraction(int(p), int(q)).denominator
                for p, q in zip(num.ravel(), den.ravel(), strict=True)
            )
        )
    return out, den_product


def _trial_batch(seed: int, scale: float = 1.0) -> list[np.ndarray]:
    """The trial's draw: each 2×2 layer from a fresh ``default_rng(seed)`` (equal layers)."""
    return [scale * np.random.default_rng(seed).standard_normal((2, 2)) for _ in range(2)]


@pytest.mark.parametrize("scale", [1.0, 1e-4, 1e4, 1e9])
def test_random_gaussian_pairs_are_not_read_as_rational(scale: float) -> None:
    # two 2×2 layers, stride (1,1), seeds 0..29, drawn as in the trial and independently; scale
    # 1e9 gives |v| ~ 1e18, where every double is an integer (the numerator bound rejects it)
    arch = LCN(((2, 2), (2, 2)), ((1, 1),), dim=2)
    for seed in range(N_RANDOM):
        for th in (_trial_batch(seed, scale), _gaussian(arch, seed, scale)):
            v = mu(arch, th)
            assert rational_coefficients(v) is None, seed
            alg = algebraic_fiber(arch, v, delta(th))
            assert not alg.applicable and alg.n_groupings == 0, seed
            assert "not (small) rationals" in alg.note


def test_trial_report_case_routes_no_longer_disagree() -> None:
    # seed 1 of the trial's batch: the rational route used to run, find 0 points and make the
    # report say "routes agree: False"
    arch = LCN(((2, 2), (2, 2)), ((1, 1),), dim=2)
    th = _trial_batch(1)
    rep = lcn_fiber(arch, mu(arch, th), delta(th))
    alg, num = rep.routes
    assert alg.name == "algebraic" and not alg.applicable and alg.n_points == 0
    assert num.applicable and num.n_points >= 1
    assert rep.routes_agree is None  # one route only: nothing to compare


@pytest.mark.parametrize(
    ("filters", "strides", "max_den"),
    [
        (((2, 2), (2, 2)), ((1, 1),), 7),
        (((2, 2), (3, 3)), ((1, 1),), 5),
        (((2, 2), (2, 2)), ((2, 1),), 9),
        (((2, 2), (2, 2), (2, 2)), ((1, 1), (1, 1)), 4),
    ],
)
def test_small_denominator_filters_run_the_route_and_agree(
    filters: tuple, strides: tuple, max_den: int
) -> None:
    arch = LCN(filters, strides, dim=2)
    th, den_product = _rational_filters(arch, 3, max_den)
    assert np.all(delta(th) != 0)  # unbalanced: a swapped point has a different NTK
    assert den_product <= RATIONAL_MAX_DEN  # inside the documented rule
    coeffs = rational_coefficients(mu(arch, th))
    assert coeffs is not None
    # each coefficient of v is a sum of products of one entry per layer, so the exact common
    # denominator divides the product of the layers' common denominators
    assert den_product % math.lcm(*(c.denominator for c in coeffs)) == 0
    rep = fiber_of_params(arch, th)
    alg, num = rep.routes
    assert alg.applicable and alg.n_points >= 1
    assert alg.n_points == num.n_points and rep.routes_agree is True
    K = ntk(arch, th)
    assert any(np.max(np.abs(k - K)) <= RTOL_NTK * np.max(np.abs(K)) for k in rep.ntk_arrays())


def test_rational_reading_rules() -> None:
    # decimals as a user types them are read exactly
    assert rational_coefficients(np.array([0.25, -0.37, 1.5])) == [
        Fraction(1, 4),
        Fraction(-37, 100),
        Fraction(3, 2),
    ]
    # six decimals: Q = 10^6, the bound itself (e.g. three layers of two-decimal entries)
    assert rational_coefficients(np.array([0.123457, 0.000001])) is not None
    # each coefficient alone is a small rational, but no common denominator ≤ 10^6 exists
    assert rational_coefficients(np.array([1 / 999983, 1 / 999979])) is None  # two primes
    # an exactly representable large float is an integer: rejected by the numerator bound
    assert rational_coefficients(np.array([2.0**60 + 2.0**8, 1.0])) is None
    assert rational_coefficients(np.array([3.0e11, 1.0])) is not None  # integers below the bound
    # tiny random values are not read as zeros (the tolerance is relative to max|v|)
    assert rational_coefficients(np.array([1e-13 * np.sqrt(2), 1e-13 * np.pi])) is None


@pytest.mark.parametrize("scale", [1e-12, 1e-3, 1e6])
def test_scaled_rational_v_keeps_the_route_and_its_points(scale: float) -> None:
    """Φ(cθ) = (c^L v, c² δ): the fiber over a rational v scaled by a power of ten is the
    unscaled fiber times c = scale^{1/L}. The rule reads v / max|v| when v itself does not read
    as small rationals (1e-12 · integers has no denominator ≤ 10⁶)."""
    arch = LCN(((2, 2), (2, 2)), ((1, 1),), dim=2)
    th, _ = _rational_filters(arch, 3, 7)
    v, d = mu(arch, th), delta(th)
    base = lcn_fiber(arch, v, d)
    scaled = lcn_fiber(arch, scale * v, scale ** (2 / arch.L) * d)
    alg0, alg1 = base.routes[0], scaled.routes[0]
    assert alg0.applicable and alg1.applicable
    assert alg1.n_points == alg0.n_points == scaled.n_points == base.n_points >= 1
    c = scale ** (1 / arch.L)
    pts0 = sorted(np.concatenate([np.ravel(w) for w in p]).tolist() for p in base.point_arrays())
    pts1 = sorted(
        (np.concatenate([np.ravel(w) for w in p]) / c).tolist() for p in scaled.point_arrays()
    )
    np.testing.assert_allclose(np.array(pts1), np.array(pts0), rtol=0, atol=ATOL_POINTS)


def test_a_v_that_factors_only_over_the_reals_is_not_judged_by_the_rational_route() -> None:
    """s14 trial O #2: v = (1 + z₂)² − 2z₁² = (1 + z₂ + √2 z₁)(1 + z₂ − √2 z₁). The rational
    route found no distribution yet called itself applicable with 0 points (so the routes
    "disagreed" with the numeric route's 2 points), and alone it declared v off the
    neuromanifold."""
    arch = LCN(((2, 2), (2, 2)), ((1, 1),), dim=2)
    v = np.array([[1.0, 2.0, 1.0], [0.0, 0.0, 0.0], [-2.0, 0.0, 0.0]])
    rep = lcn_fiber(arch, v, [1.0])
    (alg,) = [r for r in rep.routes if r.name == "algebraic"]
    assert not alg.applicable and "irrational coefficients are not searched" in alg.note
    assert rep.on_manifold and rep.n_points == 2 and rep.routes_agree is None
    alone = lcn_fiber(arch, v, [1.0], routes=("algebraic",))
    assert not alone.points
    assert any("nothing was searched" in n for n in alone.notes)
    assert not any("off the neuromanifold" in n for n in alone.notes)
