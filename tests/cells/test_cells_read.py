"""The order read on the cell table: every cell reads its expected order or class (issue 4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from neuromanifold.cells import (
    CELLS,
    CLASS_CURVED_GAUGE,
    CLASS_FLAT_GAUGE,
    CLASS_GENUINE,
    CLASS_LIVE,
    K_HAT_ATOL,
    R2_MIN,
    CellResult,
    check_reading,
    conv_chain,
    get_cell,
    matrix_chain,
    mlp_node_death,
    node_death_offset,
    qk_rotation,
    read_cell,
    relu_rescale,
    swiglu_dead_dimension,
)
from neuromanifold.singular.rate import fit_rate

RTOL_SAME_SWEEP = 1e-8  # F_u(t) of two presentations of the same function (rounding only)
# Absolute rounding level of a tangent J u assembled from O(1) weights: in a rotated basis the
# exact zeros of the canonical one (live ∘ dead-path products) become O(ε) residues, so F = ‖Ju‖²
# of two presentations may differ by about 2·‖Ju‖·JV_ROUNDING + JV_ROUNDING².
JV_ROUNDING = 1e-13
# k̂ of two presentations: equal up to the rounding above (far inside K_HAT_ATOL).
K_HAT_SAME = 1e-4
SLOPE_ATOL = 0.1  # |slope − 2(k − 1)| accepted on a sub-window of a sweep (= 2·K_HAT_ATOL)
# A curved gauge's probe overlaps its supplied generator exactly (unit vectors; measured
# |overlap − 1| ≤ 4.4e-16).
ATOL_GAUGE_OVERLAP = 1e-12
# A live direction's Fisher sits many decades above the read's rounding floor (rmsnorm cell:
# min F / floor ≈ 2e25); this only asks for six.
LIVE_OVER_FLOOR = 1e6
RTOL_OFFSET = 1e-12  # the snapped read's offset vs the constructed one (measured: equal)


@pytest.mark.parametrize("name", list(CELLS), ids=list(CELLS))
def test_cell_reads_its_expected_answer(name: str) -> None:
    cell = get_cell(name)
    reading = read_cell(cell)
    result = check_reading(cell, reading)
    assert result.passed, f"{name}: {'; '.join(result.failures)}"
    if cell.expected_k is not None:
        assert reading.k == cell.expected_k
        assert abs(reading.k_hat - cell.expected_k) <= K_HAT_ATOL
        assert reading.r2 >= R2_MIN
    if cell.expected_class in (CLASS_FLAT_GAUGE, CLASS_CURVED_GAUGE):
        assert reading.klass.value != CLASS_GENUINE


def _variants():
    out = []
    for depth in (2, 3, 4, 5, 6):
        for basis in ("rotated", "permuted"):
            out.append(
                (
                    f"matrix_chain_L{depth}_{basis}",
                    lambda d=depth, b=basis: matrix_chain(depth=d, basis=b),
                    lambda d=depth: matrix_chain(depth=d),
                )
            )
    for basis in ("rotated", "permuted"):
        out.append(
            (f"mlp_node_death_{basis}", lambda b=basis: mlp_node_death(basis=b), mlp_node_death)
        )
        out.append(
            (
                f"conv1d_chain_L3_{basis}",
                lambda b=basis: conv_chain(depth=3, basis=b),
                lambda: conv_chain(depth=3),
            )
        )
    out.append(
        ("swiglu_permuted", lambda: swiglu_dead_dimension(basis="permuted"), swiglu_dead_dimension)
    )
    out.append(("relu_rescale_permuted", lambda: relu_rescale(basis="permuted"), relu_rescale))
    for basis in ("rotated", "permuted"):
        out.append((f"qk_rotation_{basis}", lambda b=basis: qk_rotation(basis=b), qk_rotation))
    return out


VARIANTS = _variants()


@pytest.mark.parametrize(
    ("label", "make", "make_canonical"), VARIANTS, ids=[v[0] for v in VARIANTS]
)
def test_rotated_and_permuted_hidden_bases_read_the_same(label, make, make_canonical) -> None:
    cell, canon = make(), make_canonical()
    ref = read_cell(canon)
    reading = read_cell(cell, grid=ref.sweep.ts)
    assert check_reading(cell, reading).passed, label
    F, F_ref = reading.sweep.F_array, ref.sweep.F_array
    allowed = RTOL_SAME_SWEEP * F_ref + 2.0 * np.sqrt(F_ref) * JV_ROUNDING + JV_ROUNDING**2
    assert np.all(np.abs(F - F_ref) <= allowed), label
    assert reading.k == ref.k
    assert reading.klass == ref.klass
    assert reading.k_hat == pytest.approx(ref.k_hat, abs=K_HAT_SAME)
    # With its own default grid the presentation reads the same order too.
    assert check_reading(cell, read_cell(cell)).passed


def test_flat_gauges_need_no_generator_curved_gauges_are_recognised_by_theirs() -> None:
    """Flat gauges are classed by magnitude alone; curved gauges by their supplied generator
    (the straight probe still shows its apparent order 2)."""
    for name in ("layernorm_kernel", "ce_logit_shift"):
        cell = get_cell(name)
        assert cell.gauge_generators == ()
        assert read_cell(cell).klass.value == CLASS_FLAT_GAUGE
    for name in ("relu_rescale", "qk_rotation"):
        cell = get_cell(name)
        assert len(cell.gauge_generators) == 1
        reading = read_cell(cell)
        assert reading.gauge_overlap == pytest.approx(1.0, abs=ATOL_GAUGE_OVERLAP)
        assert reading.k == 2  # the straight probe's apparent order


def test_rmsnorm_analogue_is_live_not_a_gauge() -> None:
    reading = read_cell(get_cell("rmsnorm_no_kernel"))
    assert reading.klass.value == CLASS_LIVE
    assert reading.k == 1
    assert min(reading.sweep.F) > LIVE_OVER_FLOOR * reading.sweep.floor


def test_offset_cell_rate_is_visible_only_above_the_offset() -> None:
    dead_weight = 1e-4
    cell = node_death_offset(offset=dead_weight)
    delta = cell.meta["offset"]
    grid = np.logspace(math.log10(delta) - 3, math.log10(delta) + 3, 49)
    unsnapped = read_cell(cell, grid=grid, snap=False)
    ts, F = unsnapped.sweep.t_array, unsnapped.sweep.F_array
    below, above = ts <= delta / 10, ts >= 10 * delta
    fit_below = fit_rate(ts[below], F[below], floor=unsnapped.sweep.floor)
    fit_above = fit_rate(ts[above], F[above], floor=unsnapped.sweep.floor)
    assert abs(fit_below.slope - 0.0) <= SLOPE_ATOL  # flat below the offset: looks live
    assert fit_below.k == 1
    assert abs(fit_above.slope - 2.0) <= SLOPE_ATOL  # slope 2(k − 1) only above it
    assert fit_above.k == 2
    # Unsnapped on the default grid (scaled to the tiny dead weights) the read sees only the
    # flat part: an apparent live reading, flagged as not rate-visible.
    default_unsnapped = read_cell(cell, snap=False)
    assert default_unsnapped.k == 1
    assert not default_unsnapped.rate_visible
    # The snapped read recovers the order.
    snapped = read_cell(cell)
    assert snapped.snapped
    assert snapped.offset == pytest.approx(delta, rel=RTOL_OFFSET, abs=0)
    assert check_reading(cell, snapped).passed


def test_check_reading_reports_each_failed_criterion() -> None:
    cell = get_cell("node_death_relu")
    reading = read_cell(cell)
    import dataclasses

    wrong = dataclasses.replace(cell, expected_k=3)
    result = check_reading(wrong, reading)
    assert not result.passed
    assert any("k = 2 != expected 3" in f for f in result.failures)
    assert any("|k̂ − k|" in f for f in result.failures)
    gauge = dataclasses.replace(cell, expected_k=None, expected_class=CLASS_FLAT_GAUGE)
    result = check_reading(gauge, reading)
    assert result.failures == ("class 'genuine_singularity' != expected 'flat_gauge'",)
    assert CellResult.from_dict(result.to_dict()) == result


def test_the_json_row_holds_why_it_passed_and_the_figure_data() -> None:
    """s26 audit CELLS #9: window, magnitude, reason, λ_dir, the sweep and the description
    travel with the verdict, through JSON text and back."""
    import json

    cell = get_cell("node_death_relu")
    reading = read_cell(cell)
    result = check_reading(cell, reading)
    back = CellResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back == result
    assert back.t_window == reading.fit.t_window and back.magnitude == reading.fit.magnitude
    assert back.lambda_dir == 1 / (2 * reading.k) == 0.25
    assert back.reason == reading.reason and back.description == cell.description
    assert back.sweep == {
        "t": list(reading.sweep.ts),
        "F": list(reading.sweep.F),
        "floor": reading.sweep.floor,
    }
    flat = check_reading(get_cell("ce_logit_shift"), read_cell(get_cell("ce_logit_shift")))
    assert flat.lambda_dir is None and flat.t_window is None
