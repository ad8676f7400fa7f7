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
