"""Layer scales at the ends of float64 (s16 trial Z #2, #3): the Lemma and the closed-form NTK
work from the logs of the layer norms where the squared norms or their product do not fit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from neuromanifold.linear import (
    LCN,
    mu,
    ntk,
    ntk_closed_form,
    ntk_from_function,
    rescale_to_delta,
)

#: spec §6 reference: k = (2, 2), s = 2, u = ((1, 2), (3, 1)), its own δ = 5
SPEC6 = LCN((2, 2), (2,))
SPEC6_U = [np.array([1.0, 2.0]), np.array([3.0, 1.0])]
SPEC6_K = np.array([[10.0, 2, 3, 0], [2, 13, 0, 3], [3, 0, 2, 2], [0, 3, 2, 5]])
#: the log path's λ carries a relative error of about |log ‖u_l‖²| · ε (|log ‖u_l‖²| ≈ 780 at
#: 1e±170: 780 · 2.2e-16 ≈ 1.7e-13); K has degree 2 in λ
RTOL_LOG_PATH = 1e-12
#: closed form against ntk at the Lemma point, both at the same (tiny) scale: round-off of two
#: different evaluation orders of the same sums (1e-13 measured at 1e-70, three layers)
RTOL_ROUTES = 1e-11


def _spread(c: float) -> list[np.ndarray]:
    """The spec §6 factorisation with layer 1 scaled by c and layer 2 by 1/c (same μ, δ ≈ ±c⁻²)."""
    return [c * SPEC6_U[0], SPEC6_U[1] / c]


@pytest.mark.parametrize("c", [1e-170, 1e170])
def test_lemma_reaches_the_spec_point_from_norms_beyond_float64_squares(c: float) -> None:
    """‖u_1‖² = 5e∓340 is not a float64, yet the Lemma image at δ = 5 is ((1, 2), (3, 1))."""
    u = _spread(c)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow / underflow warning escapes
        got = rescale_to_delta(u, [5.0])
    for g, want in zip(got, SPEC6_U, strict=True):
        np.testing.assert_allclose(g, want, rtol=RTOL_LOG_PATH, atol=0)
    K = ntk_closed_form(SPEC6, u, [5.0])
    np.testing.assert_allclose(K, SPEC6_K, rtol=RTOL_LOG_PATH, atol=RTOL_LOG_PATH * 13)


def test_fiber_newton_from_a_guess_with_unrepresentable_squared_norms() -> None:
    """The guess (1e-170·u_1, 1e170·u_2) made the Gauss–Newton residual δ(θ) − δ overflow
    ("x: entries must be finite"); the guess is moved to δ by the Lemma first."""
    u = _spread(1e-170)
    K = ntk_from_function(SPEC6, mu(SPEC6, u), [5.0], theta_guess=u)
    np.testing.assert_allclose(K, SPEC6_K, rtol=RTOL_LOG_PATH, atol=RTOL_LOG_PATH * 13)


@pytest.mark.parametrize(
    ("arch", "c", "d"),
    [
        (SPEC6, 1e-100, [0.0]),  # N = Π‖u_l‖² ≈ 5e-400 underflowed: K came out exactly 0
        (SPEC6, 1e-150, [5e-300]),  # K ≈ 1e-300, δ unbalanced at that scale: came out 0
        (LCN((2, 2, 2), (2, 2)), 1e-70, [0.0, 0.0]),  # K ≈ 3e-279 came out 0
    ],
)
def test_closed_form_at_small_scales_matches_ntk_at_the_lemma_point(arch, c, d) -> None:
    rng = np.random.default_rng(3)
    u = [c * rng.standard_normal(k) for k in arch.layer_sizes]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        K = ntk_closed_form(arch, u, d)
        ref = ntk(arch, rescale_to_delta(u, d))
    assert np.abs(ref).max() > 0  # the reference is representable
    np.testing.assert_allclose(K, ref, rtol=RTOL_ROUTES, atol=RTOL_ROUTES * np.abs(ref).max())


def test_closed_form_that_underflows_float64_is_refused() -> None:
    """Filters of norm about 1e-200: K_0(v) ≈ 1e-400 is not a float64; an error, not K = 0."""
    u = [1e-200 * w for w in SPEC6_U]
    with pytest.raises(ValueError, match="K_δ\\(v\\) is not representable in float64"):
        ntk_closed_form(SPEC6, u, [0.0])


def test_zero_filters_are_named() -> None:
    with pytest.raises(ValueError, match="u layer 2 is the zero filter"):
        ntk_closed_form(SPEC6, [np.ones(2), np.zeros(2)], [0.0])
    with pytest.raises(ValueError, match="theta layer 2 is the zero filter"):
        rescale_to_delta([np.ones(2), np.zeros(2)], [0.0])


def test_depth_one_rescaling_is_the_identity_even_for_the_zero_filter() -> None:
    """L = 1: no invariant, λ = 1; δ must be empty."""
    got = rescale_to_delta([np.zeros(3)], [])
    assert len(got) == 1 and not np.any(got[0])
    w = np.array([1.0, -2.0, 3.0])
    assert np.array_equal(rescale_to_delta([w], [])[0], w)
    with pytest.raises(ValueError, match=r"delta has shape \(1,\): expected \(0,\)"):
        rescale_to_delta([w], [1.0])


#: the Lemma's λ against its closed form (δ = 0: λ_1 = (a_2/a_1)^{1/4}), a few ulps of the
#: log path (|log ‖u_1‖²| · ε ≈ 740 · 2.2e-16 ≈ 1.6e-13 at 1e-162)
RTOL_SUBNORMAL_BAND = 1e-12


@pytest.mark.parametrize("c", [1e-158, 1e-160, 1e-162])
def test_lemma_in_the_subnormal_band_of_squared_norms(c: float) -> None:
    """s16 audit AA #3: ‖u_1‖² = 5c² is subnormal here; the direct path kept few bits of it and
    λ_1 was off by up to 3e-3 (at 1e-162)."""
    u = [c * SPEC6_U[0], SPEC6_U[1]]
    lam1 = rescale_to_delta(u, [0.0])[0][0] / c  # u_1[0] = c
    want = 2.0**0.25 / np.sqrt(c)  # (a_2 / a_1)^{1/4} = (10 / (5 c²))^{1/4}
    assert lam1 == pytest.approx(want, rel=RTOL_SUBNORMAL_BAND)


@pytest.mark.parametrize("c", [1e-79, 1e-80, 1e-81])
def test_closed_form_with_a_subnormal_product_of_norms(c: float) -> None:
    """s16 audit AA #1: N = Π‖u_l‖² ≈ 5e-319 (subnormal) gave K off by 1e-6 (1e-80) and 1.2 %
    (1e-81). δ = 0: K_0(c·u) = c² K_0(u) (degree 2(L − 1) = 2)."""
    K0 = ntk_closed_form(SPEC6, SPEC6_U, [0.0])
    K = ntk_closed_form(SPEC6, [c * w for w in SPEC6_U], [0.0])
    np.testing.assert_allclose(K, c**2 * K0, rtol=RTOL_ROUTES, atol=RTOL_ROUTES * c**2 * 13)


@pytest.mark.parametrize("c", [1e-77, 1e-78, 1e-90, 1e-150])
def test_closed_form_with_one_negligible_coefficient(c: float) -> None:
    """s16 audit AA #1, #2: at δ = 1 and tiny u, x_1 ≈ N/δ is subnormal or underflows while K ≈
    G_1 is ordinary; 1e-78 gave inf entries, 1e-90 and below refused a representable K."""
    u = [c * w for w in SPEC6_U]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        K = ntk_closed_form(SPEC6, u, [1.0])
    ref = ntk(SPEC6, rescale_to_delta(u, [1.0]))
    np.testing.assert_allclose(K, ref, rtol=RTOL_ROUTES, atol=RTOL_ROUTES * np.abs(ref).max())


def test_rescaling_whose_result_underflows_is_refused() -> None:
    """s16 audit AA #4: λ_1 = 1e-300 times a filter of norm 1e-150 underflowed to a zero filter
    (μ changed from 1e-300 to 0) with no error."""
    u = [1e-150 * np.array([1.0, 0.0]), 1e-150 * np.array([1.0, 0.0])]
    with pytest.raises(ValueError, match="layer 1 rescaled by λ = 1e-300 under- or overflows"):
        rescale_to_delta(u, [1e300])


@pytest.mark.parametrize(
    ("theta", "d", "layer"),
    [
        ([[np.nan, 1.0], [1.0, 2.0]], [0.0], 1),
        ([[1.0, 1.0], [1.0, -np.inf]], [0.0], 2),
        ([[np.nan, 1.0]], [], 1),
    ],
)
def test_non_finite_filters_are_not_called_zero(theta, d, layer: int) -> None:
    """s16 audit AA #5: NaN/inf filters were reported as 'the zero filter' (L = 1: accepted)."""
    with pytest.raises(ValueError, match=f"theta layer {layer}: entries must be finite"):
        rescale_to_delta(theta, d)


def test_unusable_guess_leaves_the_random_starts() -> None:
    """s16 audit AA #6: a guess (0, 1e170·u_2) made δ(θ) overflow inside Gauss–Newton and the
    whole solve failed, though random starts find a point over (0, δ = 5)."""
    from neuromanifold.linear import delta as lcn_delta
    from neuromanifold.linear.solve import solve_fiber_point

    guess = [np.zeros(2), 1e170 * SPEC6_U[1]]
    res = solve_fiber_point(SPEC6, np.zeros(4), [5.0], theta_guess=guess)
    assert res.converged
    assert np.abs(mu(SPEC6, res.theta)).max() <= RTOL_ROUTES
    assert lcn_delta(res.theta)[0] == pytest.approx(5.0, rel=RTOL_ROUTES)
    with pytest.raises(ValueError, match="theta_guess cannot start Gauss–Newton"):
        solve_fiber_point(SPEC6, np.zeros(4), [5.0], theta_guess=guess, n_starts=0)


def test_closed_form_at_depth_one_is_the_identity_also_at_zero() -> None:
    """s16 audit AA #7: K_δ(v) = I for L = 1, v = 0 included (was 'the zero filter')."""
    one = LCN((3,), ())
    assert np.array_equal(ntk_closed_form(one, [np.zeros(3)], []), np.eye(3))
    with pytest.raises(ValueError, match=r"delta has shape \(1,\): expected \(0,\)"):
        ntk_closed_form(one, [np.zeros(3)], [1.0])
