"""The window rule of `fit_rate` on synthetic power laws: floors, noise, crossovers, curvature."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from neuromanifold.singular import RateFit, fit_rate, local_slopes
from neuromanifold.singular.classify import DirectionClass, classify_with_reason
from neuromanifold.singular.rate import MIN_DECADES, MIN_POINTS, R2_TIE, SLOPE_TOL

K_TOL = 0.05  # |k̂ − k| on the selected window (spec §9.1 "Slope estimator")
EXACT = 1e-12  # exact power laws: k̂, c_k, slope and r² to rounding of log/OLS (measured ≤ 1.8e-15)
LOCAL_SLOPE_TOL = 0.01  # local slope a factor 30 past a crossover (deviation ≈ 2/901 for δ² + t²)
RTOL_LOCAL_SLOPE = 1e-12  # finite-difference log–log slopes of t^p (measured ≤ 6.3e-15 relative)
RTOL_MID = 1e-15  # t_mid is √(t_i t_{i+1}) computed the same way: equal to rounding
PLATEAU_JITTER = 1e-3  # relative jitter of the synthetic floor plateau (well under R2_TSS_FLOOR)
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
    """Below the floor F is a rounding plateau (flat to 0.1 %); the window must sit above
    10·floor. The floor is set relative to the grid so that the first 12 points are replaced,
    and without it the plateau (slope 0, r² ≈ 1 under the TSS floor) is the small-t window."""
    rng = np.random.default_rng(p)
    t = grid()
    floor = t[11] ** p
    clean = t**p
    f = np.where(clean > floor, clean, floor * (1 + PLATEAU_JITTER * rng.uniform(-1, 1, t.size)))
    assert int(np.sum(clean <= floor)) == 12
    fit = fit_rate(t, f, floor=floor)
    assert fit.k == 1 + p // 2
    assert abs(fit.k_hat - (1 + p / 2)) <= EXACT
    i0, i1 = fit.window
    assert np.all(f[i0 : i1 + 1] >= 10 * floor)
    assert fit.n_above_floor == int(np.sum(f >= 10 * floor))
    # Without the floor the plateau is selected: a wrong order 1 read on points below 10·floor.
    blind = fit_rate(t, f)
    assert blind.k == 1
    j0, j1 = blind.window
    assert np.all(f[j0 : j1 + 1] < 10 * floor)


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
    assert np.all(np.abs(s[s_t >= 30 * delta] - 2) <= LOCAL_SLOPE_TOL)


@pytest.mark.parametrize("s", [3e-3, 1e-2])
def test_short_plateau_reads_the_order_above_it_and_says_so(s: float) -> None:
    """F = 1 + (t/s)² with s 1.5–2 decades above the default grid's start: the plateau bends
    within its decade, so the t² law above it is read (k = 2, the order a near-locus point shows),
    and ``plateau_below`` records that F is flat at the small-t end (k = 1 as t → 0)."""
    t = grid()
    f = 1.0 + (t / s) ** 2
    fit = fit_rate(t, f)
    assert fit.k == 2
    assert fit.plateau_below
    lo, hi = fit.small_t_window
    assert lo == t[0] and hi == t[MIN_POINTS - 1]
    x, y = np.log(t[:MIN_POINTS]), np.log(f[:MIN_POINTS])
    assert abs(fit.small_t_slope - np.polyfit(x, y, 1)[0]) <= EXACT
    klass, reason = classify_with_reason(fit, F=f, floor=0.0, scale=1.0)
    assert klass is DirectionClass.GENUINE_SINGULARITY
    assert "regular along u as t → 0" in reason


@pytest.mark.parametrize("s", [3e-2, 1e-1])
def test_long_plateau_reads_k1(s: float) -> None:
    """The same curve with s ≥ 2.5 decades above the grid start: the plateau is a fit as good as
    the t² law (within R2_TIE) and the smallest-t rule reads the asymptotic k = 1."""
    t = grid()
    fit = fit_rate(t, 1.0 + (t / s) ** 2)
    assert fit.k == 1
    assert fit.t_window[1] <= s
    assert not fit.plateau_below


@pytest.mark.parametrize("p", [2, 4])
def test_a_clean_law_has_no_plateau_below(p: int) -> None:
    fit = fit_rate(grid(), grid() ** p)
    assert fit.window[0] == 0
    assert fit.small_t_slope is None and fit.small_t_window is None
    assert not fit.plateau_below


def test_a_lower_order_below_the_window_is_stated() -> None:
    """Trial F: F = t² + t⁴/s² with s = 1e-3 on the default grid: the t⁴ branch above s wins the
    window (k = 3), while F falls as t² below s (true order 2 as t → 0). The small-t slope was
    computed and dropped, because only a plateau was flagged. ``order_below`` = 2 now, and the
    classification's reason says so; a plateau is the case order_below = 1."""
    t = grid()
    f = t**2 + t**4 / 1e-3**2
    fit = fit_rate(t, f)
    assert fit.k == 3
    assert fit.order_below == 2 and not fit.plateau_below
    assert abs(fit.small_t_slope - 2.0) <= SLOPE_TOL
    _, reason = classify_with_reason(fit, F=f, floor=0.0, scale=1.0)
    assert "the order along u as t → 0 is 2, and k = 3 is the order of the branch above" in reason
    assert RateFit.from_dict(fit.to_dict()).order_below == 2
    plateau = fit_rate(t, 1.0 + (t / 1e-2) ** 2)
    assert plateau.order_below == 1 and plateau.plateau_below
    assert fit_rate(t, t**4).order_below is None


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
    assert np.all(np.abs(slopes[mid >= 30 * s**0.5] - 4) <= LOCAL_SLOPE_TOL)


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
    assert abs(fit.slope - 1.8) <= EXACT


# An uneven grid (two significant digits) on which the smallest geometric centre and the
# smallest index sum pick different windows of F = t² + t⁴/s².
UNEVEN_T = [
    0.00012,
    0.00029,
    0.0029,
    0.0044,
    0.017,
    0.021,
    0.029,
    0.031,
    0.057,
    0.12,
    0.16,
    0.43,
    0.72,
]
UNEVEN_S = 0.0125


def _passing_windows(t: np.ndarray, f: np.ndarray) -> list[tuple[int, int, float]]:
    """Brute force: every candidate window, fitted alone (it is the only candidate of its
    sub-grid when min_points is its length), with its r² when it passes."""
    lt, out = np.log(t), []
    for i0 in range(t.size):
        for i1 in range(i0 + MIN_POINTS - 1, t.size):
            if (lt[i1] - lt[i0]) / math.log(10) >= MIN_DECADES - 1e-9:
                one = fit_rate(t[i0 : i1 + 1], f[i0 : i1 + 1], min_points=i1 - i0 + 1)
                assert one.n_candidates == 1
                if one.ok:
                    out.append((i0, i1, one.r2))
    return out


def test_preference_is_the_smallest_geometric_centre_on_an_uneven_grid() -> None:
    """Step 5 of the rule on a grid that is not log-even: among the r²-tier the window with the
    smallest √(t_i0 t_i1) is read, not the one with the smallest i0 + i1."""
    t = np.array(UNEVEN_T)
    f = t**2 + t**4 / UNEVEN_S**2
    passing = _passing_windows(t, f)
    best = max(r2 for _, _, r2 in passing)
    tier = [(i0, i1) for i0, i1, r2 in passing if r2 >= best - R2_TIE]
    centre = {w: t[w[0]] * t[w[1]] for w in tier}
    lowest = min(centre.values())
    expected = max((w for w in tier if centre[w] == lowest), key=lambda w: w[1] - w[0])
    by_index = min(tier, key=lambda w: (w[0] + w[1], w[0]))
    assert by_index != expected  # the grid does separate the two keys
    assert centre[by_index] > centre[expected]
    fit = fit_rate(t, f)
    assert fit.window == expected
    assert fit.t_window == (t[expected[0]], t[expected[1]])


def test_r2_tss_floor_makes_a_flat_law_a_perfect_fit() -> None:
    t = grid()
    rng = np.random.default_rng(0)
    f = 0.3 * (1 + 1e-14 * rng.standard_normal(t.size))
    fit = fit_rate(t, f)
    assert fit.k == 1 and fit.r2 >= 1 - EXACT


def test_too_few_points_above_floor() -> None:
    t = grid()
    f = t**10
    fit = fit_rate(t, f, floor=1e-3)  # only t^10 ≥ 1e-2, i.e. t ≥ 0.63: 2 points
    assert fit.k is None
    assert fit.reason.startswith("no run of ≥ 6 consecutive points")


def test_a_floor_prefix_is_said_where_no_window_passes() -> None:
    """F at 0 up to a switch-on distance, then a jump (s26 trial CNN #7): the reason names the
    last t at the floor and the largest F; a read above the floor from the start says nothing."""
    t = grid()
    on = t > 0.3
    f = np.where(on, (t - 0.3) ** 3 + 1e-4, 0.0)
    fit = fit_rate(t, f, floor=1e-12)
    assert fit.k is None
    last_off = t[~on][-1]
    assert fit.reason.endswith(
        f"; F ≤ 10×floor for t ≤ {last_off:.3g}, then rises to {f[-1]:.3g} at t = {t[-1]:.3g}"
    )
    noisy = np.abs(np.sin(40 * np.log(t))) + 1e-3  # above the floor everywhere, no power law
    fit = fit_rate(t, noisy, floor=1e-12)
    assert fit.k is None and fit.reason.startswith("no window passes") and "rises" not in fit.reason


def test_a_switch_on_is_no_order() -> None:
    """F at rounding level up to t ≈ 0.025, then a jump to a short plateau and a t² rise (a dead
    ReLU unit the move revives; s29 trial SHARED #5 read it genuine k = 2 on the rise): the rise's
    law predicts far more than the floor where F sat at it, so no order is read and the reason
    says F switches on, with the floor prefix."""
    t = grid()
    f = np.where(t < 0.025, 1e-38, np.maximum(3e-3, 0.9 * t**2))
    fit = fit_rate(t, f, floor=3e-26)
    assert fit.k is None
    assert fit.reason.startswith("F switches on: the best window's law")
    assert "; F ≤ 10×floor for t ≤ " in fit.reason
    # the same rise with the floor points removed is a law again: the check is on the jump
    assert fit_rate(t[t >= 0.025], f[t >= 0.025], floor=3e-26).k == 2


def test_a_gradual_rise_from_zero_onto_a_plateau_is_no_live_order() -> None:
    """F = 0 up to t ≈ 0.02, then a gradual rise onto a plateau (a dead ReLU unit along its
    incoming weights, revived sample by sample, on a grid to t = 10; s34 trial CELLS D4 read it
    live, k = 1). No jump, but a plateau is no germ of a rise from zero: no order is read."""
    t = np.logspace(-4, 1, 40)
    f = np.where(t > 0.02, 0.725 * np.tanh((t - 0.02) / 0.03) ** 2, 0.0)
    fit = fit_rate(t, f, floor=1e-26)
    assert fit.k is None
    assert fit.reason.startswith("F switches on: the best window's law")
    assert "a plateau reached by a gradual rise from the floor" in fit.reason
    assert "; F ≤ 10×floor for t ≤ " in fit.reason
    # without the zero prefix the same values are a live plateau: the check is on the prefix
    assert fit_rate(t[t > 0.02], f[t > 0.02], floor=1e-26).k == 1


@pytest.mark.parametrize("t0", [0.001, 0.003, 0.01])
def test_a_rise_from_zero_past_a_nearby_node_death_is_read(t0: float) -> None:
    """A checkpoint t₀ off a node death: F = 0 up to t₀, then c·(t − t₀)², which rises from zero
    into the law rather than jumping onto it (`SWITCH_ON_JUMP`): the order of the node death is
    read, as for any point near the structure (module docstring)."""
    t = grid()
    f = np.where(t > t0, 2.0 * (t - t0) ** 2, 1e-38)
    fit = fit_rate(t, f, floor=1e-26)
    assert fit.k == 2


@pytest.mark.parametrize("p", [2, 4, 6, 8, 10])
def test_a_law_rising_out_of_the_floor_is_read(p: int) -> None:
    """A power law under which F is at rounding level (1e-38) until it passes 10·floor: the law
    predicts about the floor at the last point below it (within one grid step's factor), so the
    switch-on check (`SWITCH_ON_FACTOR`) keeps the order."""
    t = grid()
    floor = t[10] ** p / 10  # the first 10 points are below 10·floor
    clean = t**p
    f = np.where(clean >= 10 * floor * (1 - 1e-12), clean, 1e-38)
    assert int(np.sum(f == 1e-38)) == 10
    fit = fit_rate(t, f, floor=floor)
    assert fit.k == 1 + p // 2
    assert abs(fit.k_hat - (1 + p / 2)) <= EXACT


@pytest.mark.parametrize(("p", "gap"), [(0, 3), (2, 4), (4, 5), (2, 8)])
def test_an_early_drop_out_inside_a_law_is_no_switch_on(p: int, gap: int) -> None:
    """s29b audit #3: one grid point at 0 early in a clean law leaves a run too short for a
    window before it; the window after it was called a switch-on. The switch-on needs a prefix
    all below the floor, and the law's order is read."""
    t = grid()
    f = 1e-3 * t**p
    f[gap] = 0.0
    fit = fit_rate(t, f, floor=1e-20)
    assert fit.k == 1 + p // 2


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
    np.testing.assert_allclose(mid, np.sqrt(t[1:] * t[:-1]), rtol=RTOL_MID)
    np.testing.assert_allclose(s, 6.0, rtol=RTOL_LOCAL_SLOPE)


def test_ratefit_json_round_trip() -> None:
    t = grid()
    for f in (t**2, t**3, 1 + (t / 1e-2) ** 2):
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


def test_error_local_slopes_length_mismatch() -> None:
    with pytest.raises(ValueError, match="F has 2 values but ts has 3; expected one F per t"):
        local_slopes([1.0, 2.0, 3.0], [1.0, 1.0])
