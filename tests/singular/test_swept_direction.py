"""`swept_direction` rebuilds the unit direction a record's sweep went along from its candidate and
record, as `read_candidate` chose it: the candidate, projected off the curved-gauge span when
``info["projected"]``, negated when ``info["flipped"]``. A resumed read hands these to
``on_vector`` for the records it takes from its log (s23 trial VER #1)."""

from __future__ import annotations

import math

import torch
from torch import nn

from neuromanifold.singular import Gaussian
from neuromanifold.singular.detectors.base import Candidate
from neuromanifold.singular.read_candidate import read_candidate, swept_direction

H = 1.0 / math.sqrt(2.0)


def _two_units() -> nn.Module:
    model = nn.Sequential(nn.Linear(1, 2, bias=False), nn.ReLU(), nn.Linear(2, 1, bias=False))
    return model.double().eval()


def _diag(s: float, unit: int) -> dict[str, torch.Tensor]:
    """The node-death diagonal of ``unit``: its input and output weight, each ``s/√2``."""
    a, b = torch.zeros(2, 1, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64)
    a[unit, 0] = b[0, unit] = s * H
    return {"0.weight": a, "2.weight": b}


def _read(cand, params, x, kwargs) -> tuple[object, dict[str, torch.Tensor]]:
    heard: list[dict[str, torch.Tensor]] = []
    rec, _ = read_candidate(
        cand, _two_units(), params, x, Gaussian(), **kwargs, on_vector=heard.append
    )
    assert len(heard) == 1
    return rec, heard[0]


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_a_flipped_read_is_rebuilt_negated(candidate_kwargs: dict) -> None:
    """Unit 0 dead, the checkpoint 0.01 off its node death, inputs > 0: −u is read."""
    x = torch.randn(256, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64).abs()
    live = {"0.weight": torch.tensor([[0.0], [1.0]]), "2.weight": torch.tensor([[0.0, 1.0]])}
    params = {k: v.double() - 0.01 * _diag(1.0, 0)[k] for k, v in live.items()}
    cand = Candidate(("0", "2"), "duality", _diag(-1.0, 0))
    kwargs = {**candidate_kwargs, "snap": "auto", "project_gauges": True}
    rec, heard = _read(cand, params, x, kwargs)
    assert "flipped" in rec.info
    rebuilt = swept_direction(cand, rec, [], params)
    _assert_same(rebuilt, heard)
    torch.testing.assert_close(rebuilt["0.weight"], -cand.u["0.weight"], rtol=1e-15, atol=0)


def test_a_projected_read_is_rebuilt_off_the_gauge_span(candidate_kwargs: dict) -> None:
    """Unit 1 dead, unit 0 live with its rescale tangent as the curved gauge: a candidate mixing
    the dead diagonal with 0.2 of the tangent reads genuine and is read again off the span."""
    x = torch.randn(128, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    params = {
        "0.weight": torch.tensor([[1.0], [0.0]], dtype=torch.float64),
        "2.weight": torch.tensor([[1.0, 0.0]], dtype=torch.float64),
    }
    tangent = {
        "0.weight": torch.tensor([[H], [0.0]], dtype=torch.float64),
        "2.weight": torch.tensor([[-H, 0.0]], dtype=torch.float64),
    }
    dead = _diag(1.0, 1)
    mixed = {k: math.sqrt(1 - 0.04) * dead[k] + 0.2 * tangent[k] for k in dead}
    cand = Candidate(("0", "2"), "kfac-joint", mixed)
    kwargs = {**candidate_kwargs, "gauges": [tangent], "project_gauges": True}
    rec, heard = _read(cand, params, x, kwargs)
    assert rec.info.get("projected") and rec.klass == "genuine_singularity"
    # the reason says the projection, not "no gauge generators" (s34 trial CONV D1)
    assert "no gauge generators" not in rec.reason
    assert (
        f"read after projecting u off the curved-gauge span it overlapped by "
        f"{rec.gauge_overlap:.3g} (≥ 0.001; unprojected: order {rec.info['unprojected']['k']})"
    ) in rec.reason
    _assert_same(swept_direction(cand, rec, [tangent], params), heard)
    off = sum(float((heard[k] * tangent[k]).sum()) for k in heard)
    assert abs(off) < 1e-12  # the swept direction is off the gauge span


def test_a_plain_read_is_the_candidate_normalised(candidate_kwargs: dict) -> None:
    x = torch.randn(64, 1, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    params = {
        "0.weight": torch.tensor([[1.0], [0.0]], dtype=torch.float64),
        "2.weight": torch.tensor([[1.0, 0.0]], dtype=torch.float64),
    }
    cand = Candidate(("0", "2"), "duality", {k: 3.0 * v for k, v in _diag(1.0, 1).items()})
    rec, heard = _read(cand, params, x, candidate_kwargs)
    assert not ({"flipped", "projected"} & set(rec.info))
    _assert_same(swept_direction(cand, rec, [], params), heard)
    torch.testing.assert_close(heard["2.weight"], _diag(1.0, 1)["2.weight"], rtol=1e-15, atol=0)
