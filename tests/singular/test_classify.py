"""Classification rules and the gauge-span overlap."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from neuromanifold.singular import (
    GAUGE_OVERLAP_MIN,
    LIVE_REL,
    DirectionClass,
    classify,
    classify_with_reason,
    fit_rate,
    floor_from_scale,
    gauge_overlap,
)
from neuromanifold.singular.classify import FLOOR_MARGIN, check_live_threshold

EXACT = 1e-12
T = np.logspace(-4, 0, 32)
FLOOR = 1e-26


def test_flat_gauge_when_everything_is_at_the_floor() -> None:
    f = np.full(T.size, 3 * FLOOR)
    fit = fit_rate(T, f, floor=FLOOR)
    assert classify(fit, F=f, floor=FLOOR) is DirectionClass.FLAT_GAUGE


def test_live_when_slope_zero_and_magnitude_high() -> None:
    f = np.full(T.size, 0.7)
    fit = fit_rate(T, f, floor=FLOOR)
    assert classify(fit, F=f, floor=FLOOR) is DirectionClass.LIVE


def test_slope_zero_below_live_threshold_is_flat() -> None:
    """Magnitude resolves the slope-0 ambiguity: a plateau far above 10·floor but below
    LIVE_REL × the block's typical Fisher (float32-rounding level) is not live."""
    scale = 2.0
    floor = floor_from_scale(scale)
    f = np.full(T.size, 0.5 * LIVE_REL * scale)
    assert f.min() > FLOOR_MARGIN * floor  # above the flat cut of rule 1: the magnitude decides
    fit = fit_rate(T, f, floor=floor)
    assert fit.k == 1
    klass, reason = classify_with_reason(fit, F=f, floor=floor, scale=scale)
    assert klass is DirectionClass.FLAT_GAUGE
    # F is ~1e15× the floor: the reason says it is below the default live threshold, relative to
    # F's scale, and not that it is at noise level (s17 trial AD #5)
    assert "below the live threshold" in reason and f"{LIVE_REL:g}·F_scale" in reason
    assert "noise level" not in reason
    # An explicit live threshold (e.g. 1e−3 × median live Fisher) overrides the default.
    assert classify(fit, F=f, floor=floor, live_threshold=1e-30) is DirectionClass.LIVE
    # Without an explicit scale it is recovered from the floor: same class.
    assert classify(fit, F=f, floor=floor) is DirectionClass.FLAT_GAUGE
    f_live = np.full(T.size, 2 * LIVE_REL * scale)
    fit_live = fit_rate(T, f_live, floor=floor)
    assert classify(fit_live, F=f_live, floor=floor) is DirectionClass.LIVE


@pytest.mark.parametrize("p", [2, 4, 6])
def test_genuine_without_gauge_or_outside_its_span(p: int) -> None:
    f = T**p
    fit = fit_rate(T, f, floor=FLOOR)
    assert fit.k == 1 + p // 2
    assert classify(fit, F=f, floor=FLOOR) is DirectionClass.GENUINE_SINGULARITY
    assert classify(fit, F=f, floor=FLOOR, gauge_overlap=0.5) is (
        DirectionClass.GENUINE_SINGULARITY
    )


def test_apparent_order_two_in_a_gauge_span_is_curved_gauge() -> None:
    f = T**2
    fit = fit_rate(T, f, floor=FLOOR)
    klass, reason = classify_with_reason(fit, F=f, floor=FLOOR, gauge_overlap=GAUGE_OVERLAP_MIN)
    assert klass is DirectionClass.CURVED_GAUGE
    assert "straight probe of a gauge orbit" in reason
    below = math.nextafter(GAUGE_OVERLAP_MIN, 0.0)
    assert classify(fit, F=f, floor=FLOOR, gauge_overlap=below) is (
        DirectionClass.GENUINE_SINGULARITY
    )


@pytest.mark.parametrize("p", [4, 6])
def test_order_three_or_more_in_a_gauge_span_stays_genuine(p: int) -> None:
    """Spec §7.2 step 8: a curved gauge is the apparent order 2 (slope ≈ 2) of a straight probe;
    a higher order is not that mimic, whatever the overlap."""
    f = T**p
    fit = fit_rate(T, f, floor=FLOOR)
    for overlap in (GAUGE_OVERLAP_MIN, 1.0):
        klass, reason = classify_with_reason(fit, F=f, floor=FLOOR, gauge_overlap=overlap)
        assert klass is DirectionClass.GENUINE_SINGULARITY
        assert f"order {fit.k} ≠ 2" in reason


def test_unresolved_when_no_window() -> None:
    f = T**3
    fit = fit_rate(T, f, floor=FLOOR)
    klass, reason = classify_with_reason(fit, F=f, floor=FLOOR)
    assert klass is DirectionClass.UNRESOLVED
    assert reason.startswith("no rate window")


def test_class_values_are_the_json_strings() -> None:
    assert {c.value for c in DirectionClass} == {
        "genuine_singularity",
        "flat_gauge",
        "curved_gauge",
        "live",
        "unresolved",
    }
    assert DirectionClass("curved_gauge") is DirectionClass.CURVED_GAUGE


def test_gauge_overlap_is_the_norm_of_the_projection() -> None:
    d = torch.float64
    u = {"a": torch.tensor([1.0, 2.0], dtype=d), "b": torch.tensor([2.0], dtype=d)}  # ‖u‖ = 3
    g1 = {"a": torch.tensor([1.0, 0.0], dtype=d)}
    g2 = {"b": torch.tensor([5.0], dtype=d)}
    assert gauge_overlap(u, [g1]) == pytest.approx(1 / 3, abs=EXACT)
    assert gauge_overlap(u, [g1, g2]) == pytest.approx(math.sqrt(5) / 3, abs=EXACT)
    # dependent generators span the same space
    g3 = {"a": torch.tensor([2.0, 0.0], dtype=d), "b": torch.tensor([5.0], dtype=d)}
    assert gauge_overlap(u, [g1, g2, g3]) == pytest.approx(math.sqrt(5) / 3, abs=EXACT)
    assert gauge_overlap(u, [u]) == pytest.approx(1.0, abs=EXACT)


def test_error_empty_generators() -> None:
    with pytest.raises(ValueError, match="gauge_generators is empty"):
        gauge_overlap({"a": torch.ones(2)}, [])


def test_error_zero_generators() -> None:
    with pytest.raises(ValueError, match="gauge generators are all zero"):
        gauge_overlap({"a": torch.ones(2)}, [{"a": torch.zeros(2)}])


def test_error_generator_shape() -> None:
    with pytest.raises(ValueError, match=r"gauge generator entry 'a' has shape \(3,\)"):
        gauge_overlap({"a": torch.ones(2)}, [{"a": torch.ones(3)}])


def test_error_zero_direction() -> None:
    with pytest.raises(ValueError, match="direction u has zero norm"):
        gauge_overlap({"a": torch.zeros(2)}, [{"a": torch.ones(2)}])


def test_error_non_finite_generators() -> None:
    with pytest.raises(
        ValueError, match=r"gauge generators contain non-finite values \(nan or inf\)"
    ):
        gauge_overlap({"a": torch.ones(2)}, [{"a": torch.tensor([1.0, float("nan")])}])


# --- a plateau at noise level below a t^{2(k−1)} branch (s15 trial R #3) ---------------------

NOISE_T = np.logspace(-4.4, -0.45, 32)  # the grid of the float32 chains' reads
NOISE_SCALE = 0.1  # F_scale: default live threshold LIVE_REL · F_scale = 1e-11
NOISE_PLATEAU = 1e-17  # ≈ ε_32² · F_scale, what float32 rounding of the weights leaves
SLOPE_NEAR_EVEN = 0.05  # the cross term 2⟨a, b⟩t^{k−1} biases the slope read above 100 × m


def _noise_read(F: np.ndarray):
    from neuromanifold.singular.classify import fit_past_noise_plateau

    floor = floor_from_scale(NOISE_SCALE)
    fit = fit_past_noise_plateau(
        fit_rate(NOISE_T, F, floor=floor), NOISE_T, F, floor=floor, scale=NOISE_SCALE
    )
    return fit, classify_with_reason(fit, F=F, floor=floor, scale=NOISE_SCALE)


@pytest.mark.parametrize(("k", "b"), [(4, 3e-3), (5, 1e-1)])
def test_noise_plateau_below_a_branch_reads_the_branch(k: int, b: float) -> None:
    """F = (a + b t^{k−1})² with a² at float32 noise: the plateau alone read as a flat gauge
    ("magnitude at noise level"); the order k of the branch above it is read now."""
    F = (math.sqrt(NOISE_PLATEAU) + b * NOISE_T ** (k - 1)) ** 2
    plain = fit_rate(NOISE_T, F, floor=floor_from_scale(NOISE_SCALE))
    assert plain.k == 1 and plain.magnitude < LIVE_REL * NOISE_SCALE  # what was read before
    fit, (klass, reason) = _noise_read(F)
    assert klass is DirectionClass.GENUINE_SINGULARITY and fit.k == k
    assert abs(fit.slope - 2 * (k - 1)) < SLOPE_NEAR_EVEN
    assert fit.plateau_below and "flat at noise level" in reason


def test_noise_plateau_with_no_branch_stays_a_flat_gauge() -> None:
    """A flat direction rounded to float32: F at noise level on the whole grid (rounding moves
    it by ~1e-3 of itself)."""
    rng = np.random.default_rng(0)
    F = NOISE_PLATEAU * (1.0 + 1e-3 * rng.uniform(-1, 1, NOISE_T.size))
    _, (klass, reason) = _noise_read(F)
    assert klass is DirectionClass.FLAT_GAUGE
    # 2e9× the float64 floor: below the live threshold, which the reason names as the cause; it
    # cannot tell float32 rounding from a weak regular direction (s17 trial AD #5)
    assert "below the live threshold" in reason and "rounding of weights" in reason
    assert "noise level" not in reason


def test_noise_plateau_below_a_short_branch_is_unresolved_not_flat() -> None:
    """F rises 1e10× above the plateau but only over the last few grid points: not flat, and
    no window to read an order from (the float32 depth-6 chain)."""
    F = NOISE_PLATEAU + 1e-6 * (NOISE_T / NOISE_T[-1]) ** 40
    fit, (klass, reason) = _noise_read(F)
    assert F.max() > 1e9 * NOISE_PLATEAU
    assert klass is DirectionClass.UNRESOLVED and fit.k is None
    assert "a plateau at noise level" in reason and "not flat" in reason


@pytest.mark.parametrize("value", [np.float32(1e-3), np.float64(1e-3), np.int64(1), 1])
def test_live_threshold_accepts_numpy_scalars(value) -> None:
    """s16 trial X #5: a threshold computed as 1e-3 · median over float32 values is a np.float32
    and was refused although the docs ask only for 'a positive finite number'."""
    assert check_live_threshold(value) == pytest.approx(float(value), rel=0)


@pytest.mark.parametrize("value", [True, "1e-3", np.float32("nan"), np.int64(0), -1.0])
def test_live_threshold_refuses_non_numbers_and_non_positive(value) -> None:
    with pytest.raises((TypeError, ValueError), match="live_threshold must be a positive finite"):
        check_live_threshold(value)
