"""A record says which units its direction moves (s17 user trial AD #4)."""

from __future__ import annotations

import json

import torch
from torch import nn

from neuromanifold import Gaussian, read
from neuromanifold.singular.reading import Reading
from neuromanifold.singular.support import SHARE_MIN, UNIT_SHARE_MIN, direction_support

DEAD = 3


def test_support_of_a_random_direction_against_a_direct_computation() -> None:
    gen = torch.Generator().manual_seed(0)
    u = {
        "conv.weight": torch.randn(4, 3, 2, 2, generator=gen, dtype=torch.float64),
        "conv.bias": torch.randn(4, generator=gen, dtype=torch.float64),
        "tiny": 1e-3 * torch.randn(5, generator=gen, dtype=torch.float64),  # share ~1e-7
    }
    total = sum(float(v.pow(2).sum()) for v in u.values())
    got = {s["tensor"]: s for s in direction_support(u)}
    assert set(got) == {"conv.weight", "conv.bias"}  # "tiny" is below SHARE_MIN
    w = u["conv.weight"].pow(2)
    out_ch = [float(w[i].sum()) / float(w.sum()) for i in range(4)]
    in_ch = [float(w[:, j].sum()) / float(w.sum()) for j in range(3)]
    assert abs(got["conv.weight"]["share"] - float(w.sum()) / total) <= 1e-6
    want_units = sorted(range(4), key=lambda i: -out_ch[i])[:3]
    assert [i for i, _ in got["conv.weight"]["units"]] == [
        i for i in want_units if out_ch[i] >= UNIT_SHARE_MIN
    ]
    assert [i for i, _ in got["conv.weight"]["inputs"]] == sorted(range(3), key=lambda j: -in_ch[j])
    assert "inputs" not in got["conv.bias"]
    assert direction_support({"a": torch.zeros(3)}) == []
    assert SHARE_MIN < 1e-2


def test_a_node_death_record_names_its_unit() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3)).double().eval()
    with torch.no_grad():
        m[0].weight[DEAD] = 0.0
        m[0].bias[DEAD] = 0.0
        m[2].weight[:, DEAD] = 0.0
    x = torch.randn(128, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    r = read(m, x, Gaussian(), progress=False)
    (chain,) = [d for d in r.directions if d.detector == "duality"]
    support = {s["tensor"]: s for s in chain.info["support"]}
    assert support["0.weight"]["units"] == [[DEAD, 1.0]]
    assert support["2.weight"]["inputs"] == [[DEAD, 1.0]]
    assert all("support" in d.info for d in r.directions)
    again = Reading.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again == r
