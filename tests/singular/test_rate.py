"""The window rule of `fit_rate` on synthetic power laws: floors, noise, crossovers, curvature."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from neuromanifold.singular import RateFit, fit_rate, local_slopes

K_TOL = 0.05  # |k̂ − k| on the selected window (spec §9.1 "Slope estimator")
EXACT = 1e-9  # exact power laws: k̂ and c_k to rounding of log/OLS
NOISE_SIGMA = 0.05  # multiplicative noise level of the noisy-power-law test (5 % in F)


def grid(lo: float = 1e-4, hi: float = 1.0, n: int = 32) -> np.ndarray:
    return np.logspace(math.log10(lo), math.log10(hi), n)


@pytest.mark.parametrize("p", [0, 2, 4, 6, 8, 10])
def test_exact_power_law(p: int) -> None:
    t, c = grid(), 3.7
    fit = fit_rate(t, c * t**p)
    assert fit.k == 1 + p // 2
    assert abs(fit.k_hat - (1 + p / 2)) <= EXACT
    assert abs(fit.magnitude - c) <= EXACT * c
    assert fit.r2 >= 1 - EXACT
    assert fit.lambda_dir == 1 / (2 * fit.k)
    assert fit.residual <= EXACT


def test_preference_is_the_shortest_small_t_window_on_an_exact_law() -> None:
    """All windows tie on r² = 1: the rule takes the smallest geometric centre, i.e. the window
    that starts at the first grid point and ends at the first point a decade above it."""
    t = grid()
    fit = fit_rate(t, t**4)
    first_decade = int(np.argmax(t >= 10 * t[0] * (1 - 1e-12)))
    assert fit.window == (0, first_decade)
    assert fit.t_window == (t[0], t[first_decade])


@pytest.mark.parametrize("p", [2, 4, 6])
def test_floor_drops_points_and_the_read_survives(p: int) -> None:
    """Below the floor F is rounding noise; the window must sit above 10·floor."""
    rng = np.random.default_rng(p)
    t, floor = grid(), 1e-20
    clean = t**p
    f = np.where(clean > floor, clean, floor * rng.uniform(0.1, 3.0, t.size))
    fit = fit_rate(t, f, floor=floor)
    assert fit.k == 1 + p // 2
    assert abs(fit.k_hat - (1 + p / 2)) <= EXACT
    i0, i1 = fit.window
    assert np.all(f[i0 : i1 + 1] >= 10 * floor)
    # Without the floor the noisy plateau can be selected (slope ≈ 0 at the small-t end).
    assert fit.n_above_floor == int(np.sum(f >= 10 * floor))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("p", [0, 2, 4])
def test_multiplicative_noise(p: int, seed: int) -> None:
    rng = np.random.default_rng(100 * p + seed)
    t = grid()
    f = 2.0 * t**p * np.exp(NOISE_SIGMA * rng.standard_normal(t.size))
    if p == 0:
        # On a slope-0 law the r² of 5 % noise is ~0 by construction (the TSS floor is 1 %):
        # constant directional Fisher is deterministic in practice, so noise there is unresolved.
        fit = fit_rate(t, f)
        assert fit.k is None
        assert "r²<0.95" in fit.reason
        return
    fit = fit_rate(t, f)
    assert fit.k == 1 + p // 2
    assert abs(fit.k_hat - fit.k) <= K_TOL


def test_crossover_constant_plus_t2_reads_the_asymptotic_constant() -> None:
    """F = δ² + t²: the t → 0 regime is flat (k = 1, a regular point); the t² regime lies above
    the crossover t = δ and is not the asymptotic read."""
    t, delta = grid(1e-6, 1.0, 48), 1e-3
    fit = fit_rate(t, delta**2 + t**2)
    assert fit.k == 1
    assert abs(fit.k_hat - 1) <= K_TOL
    assert fit.t_window[1] <= delta
    s_t, s = local_slopes(t, delta**2 + t**2)
    assert np.all(np.abs(s[s_t >= 30 * delta] - 2) <= 0.01)


def test_crossover_t2_plus_t4_reads_the_small_t_order() -> None:
    """F = t² + t⁴/s²: order 2 below the crossover t = s, apparent order 3 above it."""
    t, s = grid(1e-5, 10.0, 48), 1e-2
    f = t**2 + t**4 / s**2
    fit = fit_rate(t, f)
    assert fit.k == 2
    assert abs(fit.k_hat - 2) <= K_TOL
    assert fit.t_window[1] <= s
    # Restricted to the large-t branch the same rule reads the t⁴ regime: the window choice,
    # not the estimator, decides which regime is reported.
    above = t >= 30 * s
    assert fit_rate(t[above], f[above]).k == 3


def test_order3_behind_a_constant_leak_reads_the_leak() -> None:
    """Moment t^{2k} + s²t² with k = 3 (rotated node death): F ≈ s² + 9t⁴ reads k = 1 below the
    crossover t ≈ s^{1/(k−1)} and the order-3 slope only above it."""
    t, s = grid(1e-5, 1.0, 40), 1e-3
    f = s**2 + 9 * t**4
    fit = fit_rate(t, f)
    assert fit.k == 1
    assert fit.t_window[1] <= s**0.5
    mid, slopes = local_slopes(t, f)
    assert np.all(np.abs(slopes[mid >= 30 * s**0.5] - 4) <= 0.01)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_reparametrising_t_with_leading_rate_one_keeps_k(k: int) -> None:
    """Along s(t) = t + t² the Fisher in t is F_s(s(t))·s'(t)²: same leading rate (spec §9.1)."""
    t = grid()
    s = t + t**2
    fit = fit_rate(t, 3.0 * s ** (2 * (k - 1)) * (1 + 2 * t) ** 2)
    assert fit.k == k
    assert abs(fit.k_hat - k) <= K_TOL


def test_odd_slope_fails_integrality() -> None:
    t = grid()
    fit = fit_rate(t, t**3)
    assert fit.k is None
    assert "|slope−even|>0.3" in fit.reason
    assert fit.n_passing == 0


def test_half_slope_check_rejects_a_kinked_window() -> None:
    """Slopes 1.8 then 2.2 around a kink: every window spanning the kink has halves 0.4 apart.
    With windows forced to span it (min_decades = 1.6 of a 2-decade grid) nothing passes."""
    t = grid(1e-2, 1.0, 21)
    kink = 1e-1
    f = np.where(t < kink, (t / kink) ** 1.8, (t / kink) ** 2.2)
    fit = fit_rate(t, f, min_decades=1.6)
    assert fit.k is None
    assert "half-slope gap>0.3" in fit.reason
    # The same curve with single-branch windows allowed reads the small-t branch (slope 1.8).
    fit = fit_rate(t, f, min_decades=0.5)
    assert fit.k == 2
    assert abs(fit.slope - 1.8) <= 1e-9


def test_r2_tss_floor_makes_a_flat_law_a_perfect_fit() -> None:
    t = grid()
    rng = np.random.default_rng(0)
    f = 0.3 * (1 + 1e-14 * rng.standard_normal(t.size))
    fit = fit_rate(t, f)
    assert fit.k == 1 and fit.r2 >= 1 - 1e-9


def test_too_few_points_above_floor() -> None:
    t = grid()
    f = t**10
    fit = fit_rate(t, f, floor=1e-3)  # only t^10 ≥ 1e-2, i.e. t ≥ 0.63: 2 points
    assert fit.k is None
    assert fit.reason.startswith("no run of ≥ 6 consecutive points")


def test_zero_values_split_runs() -> None:
    t = grid()
    f = t**2
    f[10] = 0.0
    fit = fit_rate(t, f)
    assert fit.k == 2
    assert fit.window[0] > 10 or fit.window[1] < 10


def test_local_slopes_of_a_power_law() -> None:
    t = grid(n=9)
    mid, s = local_slopes(t, t**6)
    np.testing.assert_allclose(mid, np.sqrt(t[1:] * t[:-1]), rtol=1e-15)
    np.testing.assert_allclose(s, 6.0, rtol=1e-12)


def test_ratefit_json_round_trip() -> None:
    t = grid()
    for f in (t**2, t**3):
        fit = fit_rate(t, f)
        again = RateFit.from_dict(json.loads(json.dumps(fit.to_dict())))
        assert again == fit


# --- errors -------------------------------------------------------------------------------


def test_error_grid_not_increasing() -> None:
    with pytest.raises(
        ValueError, match=r"grid must be strictly increasing; got t\[0\] = 1 ≥ t\[1\] = 1"
    ):
        fit_rate([1.0, 1.0, 2.0], [1.0, 1.0, 1.0])


def test_error_grid_not_positive() -> None:
    with pytest.raises(ValueError, match="grid must be positive and finite"):
        fit_rate([-1.0, 1.0, 2.0], [1.0, 1.0, 1.0])


def test_error_length_mismatch() -> None:
    with pytest.raises(ValueError, match="F has 2 values but ts has 3"):
        fit_rate([1.0, 2.0, 3.0], [1.0, 1.0])


def test_error_nonfinite_F() -> None:
    with pytest.raises(ValueError, match="F contains non-finite values"):
        fit_rate([1.0, 2.0, 3.0], [1.0, math.nan, 1.0])


def test_error_negative_floor() -> None:
    with pytest.raises(ValueError, match="floor must be a finite float ≥ 0"):
        fit_rate([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], floor=-1.0)


def test_error_min_points() -> None:
    with pytest.raises(ValueError, match="min_points must be an int ≥ 4"):
        fit_rate(grid(), grid(), min_points=2)
