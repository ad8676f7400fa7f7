"""A fiber count that rests on random starts says it is a lower bound (s31 trial LCN #1, #4).

Three 2×2 layers with irrational separable filters have 36 fiber points; 40 starts found 27 and
the report said "27 point(s)" with no note. In D ≥ 2 the exact route factors v over ℚ only, so
a rational v with real, irrational factorisations (1 − 2z₁² = (1 − √2 z₁)(1 + √2 z₁)) has points
only the numeric route reaches, and the routes' disagreement was blamed on "ill-conditioned
roots", which D ≥ 2 does not have. In 1-D the root route enumerates every grouping, so a count
it agrees with is exact and gets no such note.
"""

from __future__ import annotations

import numpy as np

from neuromanifold.linear import LCN, mu
from neuromanifold.linear.fiber import lcn_fiber
from neuromanifold.linear.fiber_report import LOWER_BOUND_NOTE

LOWER_BOUND = LOWER_BOUND_NOTE
SQRT2 = np.sqrt(2.0)


def test_a_rational_v_with_irrational_factorisations_names_the_rational_route() -> None:
    arch = LCN([(3, 2), (2, 2)], [(1, 1)], dim=2)
    w1 = np.outer(np.convolve([1, SQRT2], [1, 3]), [1, 1])  # (1 + √2 z₁)(1 + 3z₁)(1 + z₂)
    w2 = np.outer([1, -SQRT2], [1, 2])  # (1 − √2 z₁)(1 + 2z₂)
    v = np.round(mu(arch, [w1, w2]), 12)  # (1 − 2z₁²)(1 + 3z₁)(1 + z₂)(1 + 2z₂): integers
    rep = lcn_fiber(arch, v, [0.5], n_starts=40, seed=0)
    alg, num = rep.routes
    assert alg.applicable and num.n_points > alg.n_points  # the numeric route's extra points
    assert rep.n_points == num.n_points
    (disagree,) = [n for n in rep.notes if n.startswith("the routes disagree")]
    assert "factors v over ℚ only" in disagree and "irrational coefficients" in disagree
    assert "ill-conditioned roots" not in disagree
    (bound,) = [n for n in rep.notes if n.startswith(LOWER_BOUND)]
    assert "the rational route factors v over ℚ only (D ≥ 2)" in bound


def test_an_irrational_v_in_two_dimensions_is_a_sampled_count() -> None:
    arch = LCN([(2, 2), (2, 2)], [(1, 1)], dim=2)
    rng = np.random.default_rng(0)
    v = mu(arch, [rng.standard_normal((2, 2)), rng.standard_normal((2, 2))])
    rep = lcn_fiber(arch, v, [0.3], n_starts=8, seed=0)
    assert rep.n_points >= 1 and not rep.routes[0].applicable
    (bound,) = [n for n in rep.notes if n.startswith(LOWER_BOUND)]
    assert "no exact route applies to this v" in bound and "8 random starts" in bound


def test_the_one_dimensional_root_route_needs_no_such_note() -> None:
    rep = lcn_fiber(LCN((2, 2), (1,)), [1, 1, -2], [-3], n_starts=8)
    assert rep.routes_agree and rep.n_points == 2
    assert not any(n.startswith(LOWER_BOUND) for n in rep.notes)


def test_a_numeric_only_run_says_the_exact_route_was_not_run() -> None:
    rep = lcn_fiber(LCN((2, 2), (1,)), [1, 1, -2], [-3], routes=("numeric",), n_starts=8)
    (bound,) = [n for n in rep.notes if n.startswith(LOWER_BOUND)]
    assert "the exact route was not run" in bound
