"""The reason of a slope-0 plateau below the live threshold (s17 trial AD #5).

It says "magnitude at noise level" only when the plateau is within ``NOISE_FLOOR_MARGIN ×`` the
sweep's floor. A plateau far above the floor is below the live threshold (by default
``LIVE_REL·F_scale``, set above float32 rounding), and the reason says so: a float64 unit whose
weights are 1e-6 is regular (constant F 1e12× above the floor) and read "magnitude at noise
level". The classes and thresholds are unchanged: such a plateau is still a flat gauge.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from neuromanifold.singular import (
    LIVE_REL,
    DirectionClass,
    classify_with_reason,
    fit_rate,
    floor_from_scale,
    read_direction,
)
from neuromanifold.singular.classify import FLOOR_MARGIN, NOISE_FLOOR_MARGIN
from neuromanifold.singular.family import Categorical

D = torch.float64
T = np.logspace(-4, 0, 32)
SCALE = 2.0  # F_scale of the synthetic sweeps: default live threshold LIVE_REL · SCALE
WEAK = 1e-6  # in- and out-weights of the weak unit (the trial's mymodels.weak_unit)


def _plateau_reason(level: float, *, live_threshold: float | None = None) -> tuple:
    floor = floor_from_scale(SCALE)
    f = np.full(T.size, level)
    fit = fit_rate(T, f, floor=floor)
    assert fit.k == 1
    return classify_with_reason(fit, F=f, floor=floor, scale=SCALE, live_threshold=live_threshold)


def test_a_plateau_within_the_floors_range_is_at_noise_level() -> None:
    floor = floor_from_scale(SCALE)
    level = 0.5 * NOISE_FLOOR_MARGIN * floor
    assert level > FLOOR_MARGIN * floor  # not rule 1's flat cut: the live threshold decides
    klass, reason = _plateau_reason(level)
    assert klass is DirectionClass.FLAT_GAUGE
    assert "magnitude at noise level" in reason


def test_a_plateau_far_above_the_floor_is_below_the_live_threshold_not_noise() -> None:
    floor = floor_from_scale(SCALE)
    level = 10 * NOISE_FLOOR_MARGIN * floor
    assert level < LIVE_REL * SCALE
    klass, reason = _plateau_reason(level)
    assert klass is DirectionClass.FLAT_GAUGE  # the class is unchanged
    assert "noise level" not in reason
    assert f"< live threshold {LIVE_REL * SCALE:.3g}" in reason
    assert f"{LIVE_REL:g}·F_scale, relative to the block's Fisher scale" in reason
    assert f"{level / floor:.3g}× the sweep's floor" in reason


def test_a_given_threshold_is_named_as_given() -> None:
    floor = floor_from_scale(SCALE)
    level = 10 * NOISE_FLOOR_MARGIN * floor
    tau = 10 * level
    klass, reason = _plateau_reason(level, live_threshold=tau)
    assert klass is DirectionClass.FLAT_GAUGE
    assert f"< live threshold {tau:.3g} (given)" in reason and "F_scale" not in reason
    assert "noise level" not in reason


def test_a_weak_float64_unit_reads_below_the_live_threshold_not_noise() -> None:
    """The trial's model: a float64 tanh MLP whose unit 2 has in- and out-weights ``WEAK``. The
    direction along layer 2's column 2 (the weights that read the weak unit) has F ≈ WEAK² times
    the block's scale, ~1e12× above the float64 floor and below the default live threshold."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3)).to(D).eval()
    with torch.no_grad():
        model[0].weight[2] *= WEAK
        model[0].bias[2] *= WEAK
        model[2].weight[:, 2] *= WEAK
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    u = {"2.weight": torch.zeros(3, 6, dtype=D)}
    u["2.weight"][:, 2] = torch.randn(3, dtype=D)
    x = torch.randn(200, 5, dtype=D)
    r = read_direction(model, params, u, x, Categorical())
    assert r.fit.k == 1 and r.klass is DirectionClass.FLAT_GAUGE  # the class is unchanged
    assert r.fit.magnitude > NOISE_FLOOR_MARGIN * r.sweep.floor  # not within the floor's range
    assert "below the live threshold" in r.reason and "noise level" not in r.reason
    # the direction is regular: a threshold at its magnitude reads it live
    live = read_direction(model, params, u, x, Categorical(), live_threshold=r.fit.magnitude)
    assert live.klass is DirectionClass.LIVE
