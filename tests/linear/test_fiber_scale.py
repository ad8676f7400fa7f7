"""Scale covariance of the fiber searches (user trial A #2; spec "Conventions": tolerances are
relative to entry scale).

``μ`` is homogeneous of degree ``L`` and the invariants of degree 2, so ``θ ↦ cθ`` maps the fiber
over ``(v, δ)`` onto the fiber over ``(c^L v, c² δ)``. With ``v ↦ αv`` (``c = α^{1/L}``) the laws
checked here are: the same ``on_manifold`` verdict, the same number of points and NTK clusters,
points ``θ(α) = α^{1/L} θ(1)`` (modulo signs), NTKs ``K(α) = α^{2(L−1)/L} K(1)`` (``K = Jμ Jμᵀ``,
``Jμ`` of degree ``L − 1``), and the same unit-scale residuals. Shallow ReLU networks: ``Φ`` is
homogeneous of degree 2, the fiber of ``cθ0`` is ``c`` times the fiber of ``θ0``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import pytest

from neuromanifold.linear import (
    LCN,
    classify_locus,
    delta,
    fiber_newton,
    mu,
    ntk,
    ntk_from_function,
)
from neuromanifold.linear.architecture import FC, flatten_params
from neuromanifold.linear.fiber import fiber_of_params, lcn_fiber
from neuromanifold.linear.fiber_numeric import sign_distance
from neuromanifold.linear.relu import ReluMLP
from neuromanifold.linear.relu_fiber import permutation_distance, relu_fiber
from neuromanifold.linear.rescale import fiber_scale, rescale_to_delta

#: The scales of ``v`` of the trial report (1e-12 was where the old absolute floor broke).
SCALES = (1e-12, 1e-6, 1.0, 1e6, 1e12)
#: Rescaled fiber points vs the unit-scale ones, relative to the largest parameter: both solve
#: a regular system (fiber dimension 0) to the residual FIBER_RTOL = 1e-10 (measured ≤ 8e-16).
RTOL_POINT = 1e-9
#: Rescaled NTKs vs the unit-scale ones, relative to the largest entry (spec §7.6's 1e-9;
#: measured ≤ 2e-15).
RTOL_NTK = 1e-9
#: Gauss–Newton from the same rescaled start: the unit-scale iterations differ only by the
#: rounding of v/ρ^L and δ/ρ² (measured ≤ 1e-15 relative).
RTOL_NEWTON = 1e-12
#: Unit-scale residual of the same least-squares point at different scales (measured ≤ 1e-15).
RTOL_RESIDUAL = 1e-9


def _theta(arch: LCN, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(f) for f in arch.filters]


# (arch, v, δ, routes): stride one (2 points, 2 NTKs, the lcn_fiber doctest), the spec §4.2
# crossing (2 points), a generic L = 3 strided point (1 point) and a D = 2 equal-shape swap
# (2 points; numeric route only: the rational route reads v's coefficients, not its scale)
_T3 = _theta(LCN((2, 2, 2), (2, 2)), 1)
_T2D = _theta(LCN(((2, 2), (2, 2)), ((1, 1),), dim=2), 2)
ON_MANIFOLD = [
    (LCN((2, 2), (1,)), np.array([1.0, 1.0, -2.0]), np.array([-3.0]), ("algebraic", "numeric")),
    (
        LCN((3, 2), (2,)),
        np.array([0.5625, 0.0, -2.5, 0.0, 1.0]),
        np.array([5.0]),
        ("algebraic", "numeric"),
    ),
    (
        LCN((2, 2, 2), (2, 2)),
        mu(LCN((2, 2, 2), (2, 2)), _T3),
        delta(_T3),
        ("algebraic", "numeric"),
    ),
    (
        LCN(((2, 2), (2, 2)), ((1, 1),), dim=2),
        mu(LCN(((2, 2), (2, 2)), ((1, 1),), dim=2), _T2D),
        delta(_T2D),
        ("numeric",),
    ),
]
ON_IDS = ["k22s1", "k32s2-crossing", "k222s22", "2d-22-22"]


def _matches(
    xs: Sequence[np.ndarray],
    refs: Sequence[np.ndarray],
    dist: Callable[[np.ndarray, np.ndarray], float],
    rtol: float,
) -> bool:
    """Every x is within rtol · (largest reference entry) of some reference."""
    scale = max(float(np.max(np.abs(r))) for r in refs)
    return all(min(dist(x, r) for r in refs) <= rtol * scale for x in xs)


def _max_gap(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.max(np.abs(x - y)))


def test_fiber_scale_is_homogeneous_of_degree_one() -> None:
    """ρ(c^L v, c² δ) = c ρ(v, δ); ρ = 1 only where v = 0 and δ = 0."""
    v, d = np.array([1.0, -2.0, 0.5]), np.array([3.0, -1.0])
    for c in (1e-100, 1e-3, 7.0, 1e90):
        assert fiber_scale(c**3 * v, c**2 * d, 3) == pytest.approx(
            c * fiber_scale(v, d, 3), rel=RTOL_NEWTON
        )
    assert fiber_scale(np.zeros(3), np.zeros(2), 3) == 1.0


@pytest.mark.parametrize(("arch", "v", "d", "routes"), ON_MANIFOLD, ids=ON_IDS)
def test_on_manifold_fiber_is_scale_covariant(
    arch: LCN, v: np.ndarray, d: np.ndarray, routes: tuple[str, ...]
) -> None:
    L = arch.L
    ref = lcn_fiber(arch, v, d, routes=routes)
    assert ref.on_manifold and ref.n_points >= 1
    ref_pts = [flatten_params(arch, p) for p in ref.point_arrays()]
    for alpha in SCALES:
        c = alpha ** (1.0 / L)
        rep = lcn_fiber(arch, alpha * v, c**2 * d, routes=routes)
        assert rep.on_manifold and rep.residual <= rep.tolerance
        assert (rep.n_points, rep.n_distinct_ntks) == (ref.n_points, ref.n_distinct_ntks)
        assert rep.fiber_dimension == ref.fiber_dimension
        assert rep.routes_agree == ref.routes_agree
        assert sorted(rep.jacobian_ranks) == sorted(ref.jacobian_ranks)
        pts = [flatten_params(arch, p) / c for p in rep.point_arrays()]
        sd = partial(sign_distance, arch)
        assert _matches(pts, ref_pts, sd, RTOL_POINT) and _matches(ref_pts, pts, sd, RTOL_POINT)
        ks = [k / c ** (2 * L - 2) for k in rep.ntk_arrays()]
        assert _matches(ks, ref.ntk_arrays(), _max_gap, RTOL_NTK)
        assert _matches(ref.ntk_arrays(), ks, _max_gap, RTOL_NTK)


def test_off_manifold_verdict_is_scale_free() -> None:
    """V = α·I is rank two, not on the rank-one 2×2 matrices M (k = (2, 2), s = 2), at every α.

    At α = 1e-12 the old absolute tolerance accepted three "fiber points" with 100 % relative
    error and ``classify_locus`` invented a crossing.
    """
    arch = LCN((2, 2), (2,))
    v = np.array([1.0, 0.0, 0.0, 1.0])
    ref = lcn_fiber(arch, v, [0.0])
    assert not ref.on_manifold and ref.residual > ref.tolerance
    for alpha in SCALES:
        rep = lcn_fiber(arch, alpha * v, [0.0])
        assert not rep.on_manifold and rep.n_points == 0
        # the best residual is the unit-scale distance to M: the same at every scale
        assert rep.residual == pytest.approx(ref.residual, rel=RTOL_RESIDUAL)
        assert classify_locus(arch, v=alpha * v).classification == "off_manifold"


def test_fiber_newton_is_scale_covariant() -> None:
    """From cθ0 towards (c^L v, c² δ) Gauss–Newton ends at c times the unit-scale end point."""
    arch = LCN((2, 2, 2), (2, 2))
    L = arch.L
    theta = _theta(arch, 3)
    v, d = mu(arch, theta), delta(theta)
    rng = np.random.default_rng(4)
    theta0 = [w + 0.1 * rng.standard_normal(w.shape) for w in theta]
    ref = fiber_newton(arch, v, d, theta0)
    assert ref.converged
    x_ref = flatten_params(arch, ref.theta)
    for alpha in SCALES:
        c = alpha ** (1.0 / L)
        res = fiber_newton(arch, alpha * v, c**2 * d, [c * w for w in theta0])
        assert res.converged and res.residual <= res.tolerance
        np.testing.assert_allclose(
            flatten_params(arch, res.theta) / c,
            x_ref,
            rtol=0,
            atol=RTOL_NEWTON * np.max(np.abs(x_ref)),
        )
        # μ and δ reproduced relative to their own scale
        np.testing.assert_allclose(
            mu(arch, res.theta), alpha * v, rtol=0, atol=RTOL_NEWTON * alpha * np.max(np.abs(v))
        )


def test_fiber_newton_off_manifold_is_scale_covariant() -> None:
    """The identity (off M): never converged, same unit-scale residual, least-squares point × c."""
    arch = LCN((2, 2), (2,))
    v = np.array([1.0, 0.0, 0.0, 1.0])
    theta0 = [np.array([1.0, 0.1]), np.array([1.0, 0.2])]
    ref = fiber_newton(arch, v, [0.0], theta0)
    assert not ref.converged
    x_ref = flatten_params(arch, ref.theta)
    for alpha in SCALES:
        c = alpha**0.5
        res = fiber_newton(arch, alpha * v, [0.0], [c * w for w in theta0])
        assert not res.converged
        assert res.residual == pytest.approx(ref.residual, rel=RTOL_RESIDUAL)
        np.testing.assert_allclose(
            flatten_params(arch, res.theta) / c,
            x_ref,
            rtol=0,
            atol=RTOL_NEWTON * np.max(np.abs(x_ref)),
        )
        with pytest.raises(RuntimeError, match="no fiber point found"):
            ntk_from_function(arch, alpha * v, [0.0], n_starts=2)


@pytest.mark.parametrize(
    "arch", [LCN((2, 2, 2), (2, 2)), LCN((3, 2), (2,))], ids=["k222s22", "k32s2"]
)
def test_ntk_from_function_is_scale_covariant(arch: LCN) -> None:
    """All strides > 1, generic θ: K_δ(v) is single-valued and K(cθ) = c^{2L−2} K(θ)."""
    L = arch.L
    theta = _theta(arch, 5)
    v, d = mu(arch, theta), delta(theta)
    K = ntk(arch, theta)
    for alpha in SCALES:
        c = alpha ** (1.0 / L)
        Ka = ntk_from_function(arch, alpha * v, c**2 * d)
        np.testing.assert_allclose(
            Ka / c ** (2 * L - 2), K, rtol=0, atol=RTOL_NTK * np.max(np.abs(K))
        )


def test_fc_fiber_verdict_is_scale_covariant() -> None:
    """FC((2, 2, 2)): the sampled fiber (dimension 1) at scale c has the same verdicts."""
    arch = FC((2, 2, 2))
    rng = np.random.default_rng(8)
    theta = [rng.standard_normal(s) for s in arch.param_shapes]
    ref = fiber_of_params(arch, theta)
    for c in (1e-6, 1e6):
        rep = fiber_of_params(arch, [c * w for w in theta])
        assert rep.on_manifold and rep.residual <= rep.tolerance
        assert (rep.n_points, rep.fiber_dimension) == (ref.n_points, ref.fiber_dimension)
        assert rep.n_distinct_ntks == ref.n_distinct_ntks


def test_relu_fiber_is_scale_covariant() -> None:
    """Φ(cθ) = c² Φ(θ): the fiber of cθ0 is c times the fiber of θ0 (two points, two NTKs)."""
    net = ReluMLP(2, 2)
    W = np.array([[1.0, 0.2], [-0.3, 1.0]])
    A = np.array([[1.5, -0.8]])
    X = np.random.default_rng(5).standard_normal((5, 2))
    ref = relu_fiber(net, (W, A), X, notion="global", seed=3)
    assert ref.n_points == 2
    ref_pts = [np.concatenate([np.ravel(t) for t in p]) for p in ref.point_arrays()]
    for c in (1e-6, 1e6):
        rep = relu_fiber(net, (c * W, c * A), X, notion="global", seed=3)
        assert (rep.n_points, rep.n_distinct_ntks) == (ref.n_points, ref.n_distinct_ntks)
        assert rep.fiber_dimension == ref.fiber_dimension
        # the threshold is relative: FIBER_RTOL · ‖Φ(cθ0)‖ = c² · (the unit-scale threshold)
        assert rep.tolerance == pytest.approx(c**2 * ref.tolerance, rel=RTOL_NEWTON)
        assert rep.residual <= rep.tolerance
        pts = [np.concatenate([np.ravel(t) for t in p]) / c for p in rep.point_arrays()]
        pd = partial(permutation_distance, net)
        assert _matches(pts, ref_pts, pd, RTOL_POINT) and _matches(ref_pts, pts, pd, RTOL_POINT)


#: The trial's filters (s14 trial O #1): D = 2, three 2×2 layers, strides 2×2.
UNBALANCED_ARCH = LCN(((2, 2), (2, 2), (2, 2)), ((2, 2), (2, 2)), dim=2)
UNBALANCED_U = [
    np.array([[1.0, np.sqrt(2)], [0.5, -1.0]]),
    np.array([[np.sqrt(3), 1.0], [-2.0, 0.25]]),
    np.array([[0.3, -1.0], [np.pi, 1.0]]),
]


@pytest.mark.parametrize("d", [(1e3, -2e3), (1e5, -3e5), (-2e3, 5e2)])
def test_strongly_unbalanced_invariants_are_reached(d: tuple[float, float]) -> None:
    """s14 trial O #1: at δ = (10³, −2·10³) the numeric route converged from 0 of 40 (and of 150)
    starts and called v off the neuromanifold, though the rescaling lemma reaches the point
    (strides > 1 in every layer: the fiber is one point modulo signs)."""
    arch, u = UNBALANCED_ARCH, UNBALANCED_U
    v = mu(arch, u)
    want = rescale_to_delta(u, d)  # the lemma: same μ, invariants d
    np.testing.assert_allclose(delta(want), d, rtol=1e-12)
    rep = lcn_fiber(arch, v, d)
    assert rep.on_manifold and rep.n_points == 1, rep.notes
    scale = max(float(np.abs(w).max()) for w in want)
    got = flatten_params(arch, rep.points[0])
    assert sign_distance(arch, got, flatten_params(arch, want)) <= RTOL_POINT * scale
    K = ntk_from_function(arch, v, d)
    np.testing.assert_allclose(
        K, ntk(arch, want), rtol=RTOL_POINT, atol=RTOL_POINT * np.abs(K).max()
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_strongly_unbalanced_invariants_in_1d_by_the_numeric_route_alone(seed: int) -> None:
    """Trial O #1, 1-D: the algebraic route found the point and hid the numeric route's miss
    (``routes_agree`` False); alone, the numeric route called v off the neuromanifold (10 of
    the filter draws of seeds 0-11)."""
    arch = LCN((3, 2, 2), (2, 2))
    rng = np.random.default_rng(seed)
    u = [rng.standard_normal(k) for k in (3, 2, 2)]
    v, d = mu(arch, u), (1e3, -2e3)
    rep = lcn_fiber(arch, v, d, routes=("numeric",))
    assert rep.on_manifold and rep.n_points == 1, rep.notes
    assert lcn_fiber(arch, v, d).routes_agree


@pytest.mark.parametrize("d", [1e8, 1e10, 1e16])
def test_invariant_dominated_fibers_hold_only_points_over_v(d: float) -> None:
    """s14 trial N #1: at δ = 1e10 the numeric route returned 17 "points" whose μ was 25-50 %
    off v (at unit scale the v part of the residual, |v|/δ, sat below the tolerance) and called
    the fiber a continuum; at δ = 1e8 it converged nowhere. v = (1 + 2z)(1 − z) has two
    factorisations, so the fiber over (v, δ) is two points modulo signs at every δ."""
    arch = LCN((2, 2), (1,))
    v = np.array([1.0, 1.0, -2.0])
    rep = lcn_fiber(arch, v, [d])
    assert rep.on_manifold and rep.n_points == 2 and rep.routes_agree, rep.notes
    for p in rep.points:
        np.testing.assert_allclose(mu(arch, p), v, rtol=RTOL_POINT, atol=RTOL_POINT)


@pytest.mark.parametrize(
    ("arch", "u", "d"),
    [
        (LCN((2, 2, 2), (1, 1)), [[1.0, 2.0], [1.0, -1.0], [1.0, 3.0]], (1e6, 1e6)),
        (LCN((2, 2), (1,)), [[1.0, 2.0], [1.0, -1.0]], (3e9,)),
        (LCN((2, 2), (1,)), [[1.0, 2.0], [1.0, -1.0]], (-1e10,)),
    ],
)
def test_a_finite_fiber_at_large_invariants_is_not_a_continuum(
    arch: LCN, u: list, d: tuple[float, ...]
) -> None:
    """s14 audit Q #1: at large |δ| one layer is tiny at unit scale, a singular value of dΦ fell
    below the rank threshold, and finite fibers (6 and 2 points) were called continua of
    dimension 2 and 1; the dimension is now read on the lemma image over (v, 0)."""
    v = mu(arch, [np.asarray(w) for w in u])
    rep = lcn_fiber(arch, v, d)
    assert rep.on_manifold and rep.fiber_dimension == 0 and not rep.continuum, rep.notes
    assert rep.n_points == (6 if arch.L == 3 else 2)


def test_an_unreachable_v_still_reports_the_search() -> None:
    """s14 audit Q #2: for v = 1 + z² (no real factorisation) the numeric route reported 0
    starts and best residual inf, since no balanced start converged and none was passed on."""
    rep = lcn_fiber(LCN((2, 2), (1,)), np.array([1.0, 0.0, 1.0]), [0.5])
    (num,) = [r for r in rep.routes if r.name == "numeric"]
    assert not rep.on_manifold and num.n_starts == 40 and np.isfinite(rep.residual)
    assert rep.residual > 1e-3  # a genuine miss, not a tolerance question


def test_ntk_from_function_refuses_v_zero() -> None:
    """s30 trial LINFLOW #2: at v = 0 the fiber is a continuum (any θ with a zero layer) whose
    NTKs differ, and ntk_from_function returned one of them, a different one per seed; the fiber
    itself says continuum, as the refusal does."""
    arch = LCN((3, 2, 2), (2, 2))
    zero, dlt = np.zeros(arch.n_v), np.array([1.0, 1.0])
    with pytest.raises(ValueError, match="v = 0: every parameter with a zero layer realises it"):
        ntk_from_function(arch, zero, dlt)
    assert lcn_fiber(arch, zero, dlt, seed=0).continuum
