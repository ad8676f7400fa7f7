"""Relabelling hidden units leaves the read unchanged (spec §9.1: k̂ unchanged under hidden-unit
permutations; user trial I #2).

The eigenvectors of the factors were oriented by their first large entry, which moves when the
units are relabelled: one half of a duality chain flipped sign against the other, and the read
swept the mirror direction (as dead, but curving differently beyond leading order: F at the
largest t changed 4×). `factor_spectrum.sign_fix` orients by the sign of Σ v_i³ instead.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from neuromanifold import read
from neuromanifold.singular import Categorical
from neuromanifold.singular.factor_spectrum import sign_fix

# the relabelled network sums its matrix products in another order: values agree to rounding
# amplified by the read (measured ≤ 1e-13 relative on these sweeps)
RTOL_RELABELLED = 1e-9


def _net() -> tuple[nn.Module, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Linear(6, 12), nn.ReLU(), nn.LayerNorm(12), nn.Linear(12, 10), nn.GELU(),
        nn.Linear(10, 4),
    )  # fmt: skip
    with torch.no_grad():  # GELU unit 0 dead: a node death between Linear 3 and Linear 5
        m[3].weight[0].zero_()
        m[3].bias[0] = 0.0
        m[5].weight[:, 0].zero_()
    return m.double().eval(), torch.randn(200, 6, generator=gen, dtype=torch.float64)


def _relabelled(m: nn.Module, q: torch.Tensor) -> nn.Module:
    """The same network with the 12 units between Linear 0 and Linear 3 relabelled by q."""
    r = copy.deepcopy(m)
    with torch.no_grad():
        for i in (0, 2):
            r[i].weight.copy_(m[i].weight[q])
            r[i].bias.copy_(m[i].bias[q])
        r[3].weight.copy_(m[3].weight[:, q])
    return r


@pytest.mark.parametrize("seed", [1, 3])
def test_relabelled_hidden_units_give_the_same_reading(seed: int) -> None:
    m, x = _net()
    gen = torch.Generator().manual_seed(seed)
    q = torch.randperm(12, generator=gen)
    r = _relabelled(m, q)
    assert torch.allclose(m(x), r(x), rtol=0, atol=1e-13)  # the same function
    a = read(m, x, Categorical(), progress=False).directions
    b = read(r, x, Categorical(), progress=False).directions
    assert [(d.layers, d.detector, d.klass, d.k) for d in a] == [
        (d.layers, d.detector, d.klass, d.k) for d in b
    ]
    for da, db in zip(a, b, strict=True):
        # the floor's scale F_r comes from a seeded random direction on the touched tensors,
        # whose coordinates are not relabelled with the units: floors may differ (a guard
        # against rounding, not a reading); the values above them must not
        floor = max(da.sweep["floor"], db.sweep["floor"])
        for fa, fb in zip(da.sweep["F"], db.sweep["F"], strict=True):
            if max(fa, fb) <= 10 * floor:  # rounding noise the read drops (a flat gauge's F)
                continue
            assert abs(fa - fb) <= RTOL_RELABELLED * max(fa, fb), (da.layers, fa, fb)


def test_sign_fix_is_permutation_equivariant_and_falls_back_on_ties() -> None:
    v = torch.tensor([[0.1, -0.7], [-0.6, 0.2], [0.3, 0.5]], dtype=torch.float64)
    fixed = sign_fix(v)
    assert bool(((fixed**3).sum(0) > 0).all())
    perm = torch.tensor([2, 0, 1])
    assert torch.equal(sign_fix(v[perm]), fixed[perm])
    tie = torch.tensor([[-0.6], [0.6]], dtype=torch.float64)  # Σ v³ = 0: first large entry > 0
    assert torch.equal(sign_fix(tie), -tie)


def _relabelled_heads(m: nn.Module, heads: torch.Tensor, seed: int) -> nn.Module:
    """The same ViT with block 0's attention heads relabelled (head i of the copy is head
    ``heads[i]`` of ``m``) and, inside every head, the q/k coordinates and the v coordinates each
    permuted (q and k alike, v with the matching columns of out_proj)."""
    r = copy.deepcopy(m)
    a, b = m.blocks[0].attn, r.blocks[0].attn
    d_head = a.q_proj.out_features // a.num_heads
    gen = torch.Generator().manual_seed(seed)
    qk, vv = torch.randperm(d_head, generator=gen), torch.randperm(d_head, generator=gen)
    rows_qk = torch.cat([h * d_head + qk for h in heads])
    rows_v = torch.cat([h * d_head + vv for h in heads])
    with torch.no_grad():
        for name, rows in (("q_proj", rows_qk), ("k_proj", rows_qk), ("v_proj", rows_v)):
            getattr(b, name).weight.copy_(getattr(a, name).weight[rows])
            getattr(b, name).bias.copy_(getattr(a, name).bias[rows])
        b.out_proj.weight.copy_(a.out_proj.weight[:, rows_v])
    return r


def test_relabelled_attention_heads_permute_the_head_records() -> None:
    """Spec §9.1 for attention: relabelling heads (and coordinates inside a head) is a symmetry,
    so the read finds the same records, each per-head gauge now under its head's new index."""
    from neuromanifold.zoo.models import ViTConfig, build_model

    cfg = ViTConfig(dim=16, heads=4, depth=1, mlp_ratio=2, patch_size=4)
    m = build_model(cfg, seed=0).double().eval()
    x = torch.randn(40, 1, 8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    heads = torch.tensor([2, 0, 3, 1])
    r = _relabelled_heads(m, heads, seed=5)
    assert torch.allclose(m(x), r(x), rtol=0, atol=1e-13)  # the same function
    a = read(m, x, Categorical(), progress=False).directions
    b = read(r, x, Categorical(), progress=False).directions

    def key(d, rename: torch.Tensor | None = None) -> tuple:
        head = d.info.get("head")
        if head is not None and rename is not None:
            head = int(rename[head])
        return (d.layers, d.detector, d.klass, d.k, head)

    assert {d.info["generator"] for d in a if d.detector == "qk-rotation"} == {"weights"}
    per_head = [d for d in a if "head" in d.info]
    assert len({d.info["head"] for d in per_head}) == 4  # every head has its gauge records
    # the copy's head i is m's head heads[i]: rename the copy's records to m's head indices
    assert sorted(map(key, a), key=repr) == sorted((key(d, heads) for d in b), key=repr)
    # records without a head keep their order; per-head records are matched by their head
    same = [(da, db) for da, db in zip(a, b, strict=True) if "head" not in da.info]
    by_head = {key(d): d for d in per_head}
    assert len(by_head) == len(per_head)
    same += [(by_head[key(db, heads)], db) for db in b if "head" in db.info]
    assert len(same) == len(a)
    for da, db in same:
        assert key(da) == key(db, heads)
        floor = max(da.sweep["floor"], db.sweep["floor"])  # see the MLP test above
        for fa, fb in zip(da.sweep["F"], db.sweep["F"], strict=True):
            if max(fa, fb) <= 10 * floor:
                continue
            assert abs(fa - fb) <= RTOL_RELABELLED * max(fa, fb), (db.layers, fa, fb)
