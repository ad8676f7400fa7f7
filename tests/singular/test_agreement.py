"""`reading_differences`: two readings agree up to rounding, or the difference is named."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from neuromanifold.cells.planted import (
    planted_conv,
    planted_deep_linear,
    planted_embedding,
    planted_mlp,
    planted_transformer,
)
from neuromanifold.singular.agreement import (
    F_RTOL,
    NOISE_FACTOR,
    decisions,
    fisher_excess,
    grid_gap,
    reading_differences,
)
from neuromanifold.singular.read import read


@pytest.fixture(scope="module")
def reading() -> dict:
    net = planted_deep_linear(n=64)
    out = read(net.model, net.data, net.family, progress=False).to_dict()
    assert [d["k"] for d in out["directions"]] == [3]  # the planted order-3 chain
    return out


def _bottom(reading: dict) -> tuple[int, float, float]:
    """(index, F, floor) of the smallest F above the floor on the first direction's grid."""
    sweep = reading["directions"][0]["sweep"]
    above = [(f, i) for i, f in enumerate(sweep["F"]) if f > 100 * sweep["floor"]]
    f, i = min(above)
    return i, f, sweep["floor"]


def test_a_reading_agrees_with_itself_and_a_second_read(reading: dict) -> None:
    net = planted_deep_linear(n=64)
    again = read(net.model, net.data, net.family, progress=False).to_dict()
    assert reading_differences(reading, reading) == []
    assert reading_differences(reading, again) == []


def test_rounding_at_the_bottom_of_a_dead_direction_is_tolerated(reading: dict) -> None:
    """The F of an order-3 chain near its grid's bottom is a small difference of O(1) terms: a
    change of √(F·floor) (rounding of v = SJu) is within the tolerance although it is far more
    than F_RTOL relative; twice the tolerance's noise term is not."""
    i, f, floor = _bottom(reading)
    noise = math.sqrt(f * floor)
    assert noise > 100 * F_RTOL * f  # the case the noise term is for
    within = copy.deepcopy(reading)
    within["directions"][0]["sweep"]["F"][i] = f + noise
    assert reading_differences(within, reading) == []
    beyond = copy.deepcopy(reading)
    beyond["directions"][0]["sweep"]["F"][i] = f + 2 * NOISE_FACTOR * noise
    (message,) = reading_differences(beyond, reading)
    assert message.startswith("direction 0: F differs by ") and "the rounding tolerance" in message


def test_a_relative_change_above_the_noise_is_caught(reading: dict) -> None:
    sweep = reading["directions"][0]["sweep"]
    top = max(range(len(sweep["F"])), key=lambda j: sweep["F"][j])
    changed = copy.deepcopy(reading)
    changed["directions"][0]["sweep"]["F"][top] *= 1 + 1e-6
    assert reading_differences(changed, reading) == [
        "direction 0: F differs by "
        f"{fisher_excess(changed['directions'][0]['sweep']['F'], sweep['F'], sweep['floor']):.3g}"
        "× the rounding tolerance"
    ]
    changed["directions"][0]["sweep"]["F"][top] = sweep["F"][top] * (1 + F_RTOL / 2)
    assert reading_differences(changed, reading) == []


def test_decisions_name_the_order_class_and_window(reading: dict) -> None:
    other = copy.deepcopy(reading)
    other["directions"][0]["k"] = 2
    assert reading_differences(other, reading) == [
        "direction 0: k differs: 0+1+2 duality k=2 genuine_singularity against "
        "0+1+2 duality k=3 genuine_singularity"
    ]
    other["directions"][0]["class"] = "live"
    assert reading_differences(other, reading)[0].startswith("direction 0: k, class differ: ")
    moved = copy.deepcopy(reading)
    moved["directions"][0]["window"] = [1e-3, 1e-2]
    (message,) = reading_differences(moved, reading)
    assert message.startswith("direction 0: the rate windows differ: [0.001, 0.01] against [")


def test_the_window_of_a_direction_without_an_order_is_not_compared(reading: dict) -> None:
    """A flat record's window lies in rounding noise: another device may place it elsewhere."""
    flat = copy.deepcopy(reading)
    flat["directions"][0].update(k=None, **{"class": "flat_gauge", "lambda_dir": None})
    moved = copy.deepcopy(flat)
    moved["directions"][0]["window"] = [1e-6, 1e-5]
    assert decisions(flat) == [(("0", "1", "2"), "duality", None, "flat_gauge", None)]
    assert reading_differences(moved, flat) == []


def test_counts_and_grids(reading: dict) -> None:
    empty = {**reading, "directions": []}
    assert reading_differences(empty, reading) == [
        "0 directions against 1",
        "only in the second: 0+1+2 duality k=3 genuine_singularity",
    ]
    regrid = copy.deepcopy(reading)
    regrid["directions"][0]["sweep"]["t"][0] *= 2
    assert reading_differences(regrid, reading) == [
        "direction 0: the t-grids differ by 0.5 relative"
    ]
    shorter = copy.deepcopy(reading)
    del shorter["directions"][0]["sweep"]["t"][-1]
    n = len(reading["directions"][0]["sweep"]["t"])
    assert reading_differences(shorter, reading) == [
        f"direction 0: the t-grids differ by length: {n - 1} and {n} points"
    ]
    ulp = copy.deepcopy(reading)  # ρ_W summed in another order: the last bits of every t
    d = ulp["directions"][0]
    d["sweep"]["t"] = [t * (1 + 4e-16) for t in d["sweep"]["t"]]
    d["window"] = [t * (1 + 4e-16) for t in d["window"]]  # a window is two of the grid's points
    assert reading_differences(ulp, reading) == []


def test_old_json_cut_records_and_counts(reading: dict) -> None:
    """s35 trial AGREE D3–D5: a reading written before λ_dir was recorded, a record without its
    sweep, and the singular of a count."""
    old = copy.deepcopy(reading)
    del old["directions"][0]["lambda_dir"]
    assert reading_differences(old, old) == []
    (message,) = reading_differences(old, reading)
    lam = reading["directions"][0]["lambda_dir"]
    assert message.startswith("direction 0: lambda_dir differs: ")
    assert message.endswith(f"(λ_dir None against {lam})")  # the values, not two equal strings
    cut = copy.deepcopy(reading)
    cut["directions"][0]["sweep"] = {}
    assert reading_differences(cut, reading) == ["direction 0: one record has no sweep"]
    assert reading_differences(cut, cut) == []
    short = copy.deepcopy(reading)
    del short["directions"][0]["sweep"]["F"][-1]
    n = len(reading["directions"][0]["sweep"]["F"])
    assert reading_differences(short, reading) == [
        f"direction 0: the sweeps hold {n - 1} and {n} F values"
    ]
    two = {**reading, "directions": reading["directions"] * 2}
    assert reading_differences(reading, two)[0] == "1 direction against 2"


def test_values_that_are_not_finite_never_agree(reading: dict) -> None:
    """s35 review #5: NaN compared as agreement (every comparison with NaN is False)."""
    for bad in (math.nan, math.inf):
        broken = copy.deepcopy(reading)
        broken["directions"][0]["sweep"]["F"] = [bad] * len(broken["directions"][0]["sweep"]["F"])
        assert reading_differences(broken, reading) == [
            "direction 0: F differs by inf× the rounding tolerance"
        ]
        assert reading_differences(broken, broken)  # not even with itself
        grid = copy.deepcopy(reading)
        grid["directions"][0]["sweep"]["t"][3] = bad
        assert reading_differences(grid, reading) == [
            "direction 0: the t-grids differ by a value that is not finite"
        ]
    for bad in (math.nan, -math.inf, -1.0):  # a floor on either side (s35 retrial: NaN passed)
        floor = copy.deepcopy(reading)
        floor["directions"][0]["sweep"]["floor"] = bad
        for pair in ((floor, reading), (reading, floor)):
            (message,) = reading_differences(*pair)
            assert message.startswith("direction 0: a sweep floor is not a finite number ≥ 0: (")
    assert grid_gap([0.0, 1.0], [0.0, 1.0]) == 0.0  # t = 0 (a user grid): no division by zero
    assert grid_gap([0.0], [1e-300]) == 1.0
    assert grid_gap(None, None) == 0.0 and grid_gap(None, [1.0]) == math.inf


def test_not_covered_modules_and_reading_objects() -> None:
    net = planted_deep_linear(n=64)
    first = read(net.model, net.data, net.family, progress=False)
    assert reading_differences(first, first.to_dict()) == []  # a Reading or its dict
    other = first.to_dict()
    other["not_covered"] = [{"name": "head", "type": "Bilinear", "n_params": 3, "reason": "-"}]
    assert reading_differences(other, first) == [
        "the modules not covered differ: [head] against []"
    ]


@pytest.mark.parametrize("case", ["mlp", "conv", "transformer", "embedding", "deep-linear"])
def test_permuted_probes_agree_up_to_rounding(case: str) -> None:
    """The probes in another order: every sum the read takes is summed in another order, the
    CPU's own version of another device. The tolerance must absorb it (and is exercised: F moves
    on most cells; s35 review #7, the first test compared a read with a bitwise equal one)."""
    net = {
        "mlp": planted_mlp,
        "conv": planted_conv,
        "transformer": planted_transformer,
        "embedding": planted_embedding,
        "deep-linear": lambda: planted_deep_linear(n=64),
    }[case]()
    data = net.data
    perm = torch.randperm(data.shape[0], generator=torch.Generator().manual_seed(5))
    one = read(net.model, data, net.family, progress=False).to_dict()
    two = read(net.model, data[perm], net.family, progress=False).to_dict()
    assert reading_differences(one, two) == []
    pairs = zip(one["directions"], two["directions"], strict=True)
    worst = max(
        fisher_excess(
            x["sweep"]["F"], y["sweep"]["F"], max(x["sweep"]["floor"], y["sweep"]["floor"])
        )
        for x, y in pairs
    )
    assert worst <= PERMUTED_EXCESS_MAX


PERMUTED_EXCESS_MAX = 1e-3
"""The probes permuted moved F by at most 3.4e-5 of the tolerance on these cells (mlp 2.9e-5,
conv 2.2e-5, transformer 3.4e-5, deep-linear 1.4e-5, embedding 0; measured 2026-12-04): this
bound leaves a thirtyfold margin above that and still a thousandfold below the tolerance."""


def test_fisher_excess_values_and_errors() -> None:
    assert fisher_excess([], [], 0.0) == 0.0
    assert fisher_excess([1.0, 2.0], [1.0, 2.0], 0.0) == 0.0
    assert fisher_excess([1.0], [1.0 + 2e-9], 0.0) == pytest.approx(2e-9 / (F_RTOL * (1 + 2e-9)))
    assert fisher_excess([0.0], [1e-300], 0.0) == pytest.approx(1 / F_RTOL)
    assert fisher_excess([0.0], [5e-324], 0.0) == math.inf  # the tolerance underflows to 0
    with pytest.raises(ValueError, match=r"the sweeps have 2 and 1 points; expected one grid"):
        fisher_excess([1.0, 2.0], [1.0], 0.0)
    with pytest.raises(ValueError, match=r"floor must be a finite number ≥ 0; got -1.0"):
        fisher_excess([1.0], [1.0], -1.0)
    with pytest.raises(ValueError, match=r"floor must be a finite number ≥ 0; got nan"):
        fisher_excess([1.0], [1.0], math.nan)
    with pytest.raises(TypeError, match=r"expected a Reading, or a reading as a dict with a"):
        reading_differences("report.json", {"directions": []})  # type: ignore[arg-type]
