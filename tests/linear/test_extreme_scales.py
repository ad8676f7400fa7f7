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
#: the log path's λ carries a relative error of about |log λ| · ε (|log λ| ≈ 391 at 1e±170,
#: 391 · 2.2e-16 ≈ 9e-14); K has degree 2 in λ
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
