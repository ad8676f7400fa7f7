"""`DirectionReading.lambda_dir` follows the rule of `DirectionRecord` (s17 user trial AE #6).

docs/triple.md §1: a curved gauge has no λ_dir (its k = 2 is an artefact of the straight probe
leaving the orbit); a genuine singularity or live direction of order k has λ_dir = 1/(2k).
`read_direction` reported 1/4 for the `relu_rescale` curved gauge.
"""

from __future__ import annotations

import json

import pytest

from neuromanifold.cells.registry import get_cell
from neuromanifold.singular.classify import DirectionClass
from neuromanifold.singular.direction import DirectionReading, read_direction
from neuromanifold.singular.reading import ORDERED_CLASSES, DirectionRecord


def _read_cell(name: str) -> DirectionReading:
    c = get_cell(name)
    return read_direction(
        c.model,
        c.params,
        c.direction,
        c.data,
        c.family,
        snap=c.snap,
        gauge_generators=c.gauge_generators,
    )


def _record_rule(r: DirectionReading) -> float | None:
    """λ_dir of a `DirectionRecord` carrying the reading's class and order."""
    rec = DirectionRecord(
        "x", ("x",), "test", r.k, r.k_hat, r.slope, r.r2, 1.0, r.klass.value, None, 0.0,
        r.gauge_overlap, None,
    )  # fmt: skip
    return rec.lambda_dir


def test_curved_gauge_reading_has_no_lambda_dir() -> None:
    r = _read_cell("relu_rescale")
    assert r.klass is DirectionClass.CURVED_GAUGE
    assert r.klass.value not in ORDERED_CLASSES
    assert r.k == 2  # the order of the straight probe is still reported
    assert r.lambda_dir is None
    assert r.to_dict()["lambda_dir"] is None
    assert r.lambda_dir == _record_rule(r)
    back = DirectionReading.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.lambda_dir is None and back.k == 2


@pytest.mark.parametrize("name", ["node_death_relu", "scalar_chain_L3", "gaussian_location_k5"])
def test_genuine_singularity_reading_keeps_one_over_two_k(name: str) -> None:
    r = _read_cell(name)
    assert r.klass is DirectionClass.GENUINE_SINGULARITY
    assert r.k == get_cell(name).expected_k
    assert r.lambda_dir == 1 / (2 * r.k)
    assert r.to_dict()["lambda_dir"] == r.lambda_dir
    assert r.lambda_dir == _record_rule(r)
