"""DirectionRecord's derived λ_dir = 1/(2k) and ν(k): values, classes, JSON round trip."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from neuromanifold.singular.nu import K_MAX, lambda_dir_exact, nu
from neuromanifold.singular.reading import DERIVED_KEYS, DirectionRecord, NotCovered, Reading


def _record(klass: str, k: int | None) -> DirectionRecord:
    return DirectionRecord(
        layer="fc1",
        layers=("fc1", "fc2"),
        detector="duality",
        k=k,
        k_hat=None if k is None else k + 0.01,
        slope=None if k is None else 2.0 * (k - 1) + 0.02,
        r2=None if k is None else 0.999,
        magnitude=None if k is None else 1.5,
        klass=klass,
        window=None if k is None else (1e-3, 1e-1),
        offset=0.0,
        gauge_overlap=None,
        ratio=1e-9,
        info={"chain_length": 2},
        sweep={"t": [0.1, 0.2], "F": [1e-2, 4e-2], "floor": 1e-30},
    )


@pytest.mark.parametrize(
    ("klass", "k"),
    [
        ("genuine_singularity", 2),
        ("genuine_singularity", 3),
        ("genuine_singularity", 5),
        ("live", 1),
    ],
)
def test_lambda_dir_and_nu_of_ordered_records(klass: str, k: int) -> None:
    rec = _record(klass, k)
    assert rec.lambda_dir == float(lambda_dir_exact(k))  # 1/(2k), correctly rounded
    assert rec.nu_k == nu(k)
    d = rec.to_dict()
    assert (d["lambda_dir"], d["nu_k"]) == (rec.lambda_dir, rec.nu_k)


@pytest.mark.parametrize(
    ("klass", "k"),
    [
        ("curved_gauge", 2),  # apparent order of the straight probe: no λ_dir, no ν
        ("flat_gauge", None),
        ("genuine_singularity", None),  # no window passed
        ("unresolved", 2),
    ],
)
def test_no_lambda_dir_without_a_kl_order(klass: str, k: int | None) -> None:
    rec = _record(klass, k)
    assert rec.lambda_dir is None and rec.nu_k is None
    assert rec.to_dict()["lambda_dir"] is None and rec.to_dict()["nu_k"] is None


def test_nu_beyond_k_max_is_none() -> None:
    rec = _record("genuine_singularity", K_MAX + 1)
    assert rec.lambda_dir == 1 / (2 * (K_MAX + 1)) and rec.nu_k is None


def test_derived_keys_round_trip_and_old_json() -> None:
    rec = _record("genuine_singularity", 3)
    d = json.loads(json.dumps(rec.to_dict()))
    assert set(DERIVED_KEYS) <= set(d)
    assert DirectionRecord.from_dict(d) == rec
    old = {key: v for key, v in d.items() if key not in DERIVED_KEYS}  # JSON from before
    assert DirectionRecord.from_dict(old) == rec
    # the derived keys are not state: a stale value in the JSON is ignored, not carried
    stale = {**d, "lambda_dir": 0.5, "nu_k": 0.5}
    assert DirectionRecord.from_dict(stale).lambda_dir == 1 / 6
    reading = Reading(
        directions=(rec, replace(rec, klass="flat_gauge", k=None)),
        not_covered=(NotCovered("ln", "LayerNorm", 4, "no detector"),),
        meta={"n": 8},
    )
    text = json.dumps(reading.to_dict())
    assert Reading.from_dict(json.loads(text)) == reading
    dirs = json.loads(text)["directions"]
    assert [x["nu_k"] for x in dirs] == [nu(3), None]


def test_whole_model_read_reports_lambda_dir_and_nu() -> None:
    from neuromanifold.cells.planted import planted_deep_linear
    from neuromanifold.singular.read import read

    net = planted_deep_linear(depth=3, width=4)
    reading = read(net.model, net.data, net.family, progress=False)
    genuine = [r for r in reading.directions if r.klass == "genuine_singularity"]
    assert [r.k for r in genuine] == [3]  # the dead path of a depth-3 chain
    d = reading.to_dict()["directions"][reading.directions.index(genuine[0])]
    assert d["lambda_dir"] == 1 / 6 and d["nu_k"] == nu(3)


def test_by_layer_follows_the_module_order_then_the_records() -> None:
    """s33 trial USER D3: layers came in the order of the first record touching each, so the
    first layer of an MLP came last; ``meta["module_order"]`` (the read's ``named_modules``
    order) decides now, and layers it does not name follow in record order."""
    recs = [
        replace(_record("live", 1), layer=a, layers=ls)
        for a, ls in [("2", ("2",)), ("4", ("4", "x")), ("0", ("0", "2"))]
    ]
    ordered = Reading(tuple(recs), (), {"module_order": ["0", "2", "4"]})
    assert list(ordered.by_layer()) == ["0", "2", "4", "x"]
    assert [r.layer for r in ordered.by_layer()["2"]] == ["2", "0"]  # records keep their order
    old = Reading(tuple(recs), (), {})  # a reading written before module_order
    assert list(old.by_layer()) == ["2", "4", "x", "0"]
    back = Reading.from_dict(json.loads(json.dumps(ordered.to_dict())))
    assert list(back.by_layer()) == ["0", "2", "4", "x"]


def test_a_read_records_its_module_order() -> None:
    import torch
    from torch import nn

    from neuromanifold.singular.family import Gaussian
    from neuromanifold.singular.read import read

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    reading = read(model, torch.randn(32, 3, dtype=torch.float64), Gaussian(), progress=False)
    assert reading.meta["module_order"] == ["0", "2"]
