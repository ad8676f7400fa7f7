"""A record says which units its direction moves (s17 user trial AD #4)."""

from __future__ import annotations

import json

import torch
from torch import nn

from neuromanifold import Gaussian, read
from neuromanifold.singular.reading import Reading
from neuromanifold.singular.support import (
    DOMINANT_SHARE,
    SHARE_MIN,
    UNIT_SHARE_MIN,
    direction_support,
    layer_units,
    record_units,
)

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


def test_support_records_the_sizes_of_both_sides() -> None:
    u = {"conv.weight": torch.ones(4, 3, 2, 2, dtype=torch.float64), "b": torch.ones(5).double()}
    got = {s["tensor"]: s for s in direction_support(u)}
    assert (got["conv.weight"]["n_units"], got["conv.weight"]["n_inputs"]) == (4, 3)
    assert (got["conv.weight"]["size"], got["b"]["size"]) == (48, 5)
    assert got["b"]["n_units"] == 5 and "n_inputs" not in got["b"]


def test_layer_units_names_a_node_death_on_both_layers() -> None:
    """Hidden unit 2 of fc1 → fc2 dead: g e₂ᵀ-type direction, e₂ aᵀ on fc1 and the column 2
    spread over fc2's outputs: "out 2" and "in 2"."""
    gen = torch.Generator().manual_seed(0)
    w1 = torch.zeros(5, 4, dtype=torch.float64)
    w1[2] = torch.randn(4, generator=gen, dtype=torch.float64)
    w2 = torch.zeros(3, 5, dtype=torch.float64)
    w2[:, 2] = torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)
    sup = direction_support(
        {"fc1.weight": w1, "fc1.bias": torch.zeros(5).double(), "fc2.weight": w2}
    )
    assert (layer_units(sup, "fc1"), layer_units(sup, "fc2")) == ("out 2", "in 2")
    assert layer_units(sup, "fc3") == ""


def test_layer_units_threshold_and_size_one_sides() -> None:
    below = DOMINANT_SHARE - 0.01
    spread = [{"tensor": "l.weight", "share": 1.0, "units": [[0, below], [1, 1 - below]]}]
    assert layer_units(spread, "l") == "spread"
    single_input = [
        {
            "tensor": "c.weight",
            "share": 1.0,
            "units": [[3, 1.0]],
            "n_units": 8,
            "inputs": [[0, 1.0]],
            "n_inputs": 1,  # one input channel: "in 0" would say nothing
        }
    ]
    assert layer_units(single_input, "c") == "out 3"
    older = [{"tensor": "c.weight", "share": 1.0, "units": [[3, 1.0]], "inputs": [[0, 1.0]]}]
    assert layer_units(older, "c") == "out 3, in 0"  # a reading written before the sizes
    scalar = [{"tensor": "s.weight", "share": 1.0, "units": [[0, 1.0]], "size": 1, "n_units": 1}]
    scalar[0] |= {"inputs": [[0, 1.0]], "n_inputs": 1}
    assert layer_units(scalar, "s") == ""  # one unit: nothing to name, not "spread"
    nested = [{"tensor": "blocks.0.attn.qkv.weight", "share": 1.0, "units": [[7, 0.95]]}]
    assert layer_units(nested, "blocks.0.attn.qkv") == "out 7"
    assert layer_units(nested, "blocks.0.attn") == ""


def test_a_direction_on_duplicated_units_names_both() -> None:
    """s34 trial MLPREC D4: hidden unit 7 a copy of unit 2 (same row and bias, the outgoing
    column halved and shared): the node death of their difference sits half on each unit and was
    labelled "spread"; it names both, on the producer's rows and the consumer's inputs."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(5, 16), nn.GELU(), nn.Linear(16, 3)).double()
    with torch.no_grad():
        m[0].weight[7] = m[0].weight[2]
        m[0].bias[7] = m[0].bias[2]
        m[2].weight[:, 2] *= 0.5
        m[2].weight[:, 7] = m[2].weight[:, 2]
    x = torch.randn(128, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    r = read(m, x, Gaussian(), progress=False)
    (dup,) = [d for d in r.directions if d.klass == "genuine_singularity"]
    assert (dup.layers, dup.k) == (("0", "2"), 2)
    assert record_units(dup.info, "0") == "out 2+7"
    assert record_units(dup.info, "2").endswith("in 2+7")


def test_several_units_are_named_only_on_a_wide_side() -> None:
    half = {"tensor": "l.weight", "share": 1.0, "units": [[7, 0.5], [2, 0.5]]}
    assert layer_units([{**half, "n_units": 8}], "l") == "out 2+7"
    assert layer_units([{**half, "n_units": 7}], "l") == "spread"  # 2 of 7: a narrow side
    assert layer_units([half], "l") == "spread"  # a reading written before the sizes
    three = {"tensor": "l.weight", "share": 1.0, "units": [[4, 0.4], [1, 0.3], [9, 0.25]]}
    assert layer_units([{**three, "n_units": 12}], "l") == "out 1+4+9"
    assert layer_units([{**three, "n_units": 11}], "l") == "spread"
    short = {"tensor": "l.weight", "share": 1.0, "units": [[4, 0.5], [1, 0.3], [9, 0.05]]}
    assert layer_units([{**short, "n_units": 64}], "l") == "spread"  # the three carry 0.85
