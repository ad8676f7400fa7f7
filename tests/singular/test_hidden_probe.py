"""`hidden_probes`: the probe direction against a hand computation of the factors' eigenvectors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import neuromanifold.singular.hidden_probe as hp
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Categorical, Gaussian

D = torch.float64
# eigenvectors of two float64 evaluations of the same small second-moment matrix (relative gaps
# ≥ 3 %): rounding of order ε·λ_max/gap; measured ≤ 2.8e-15
ATOL_VEC = 1e-12
# ratio of the smallest to the largest hidden eigenvalue (≈ 4e-3), the same two ways: relative
# rounding of order ε·λ_max/λ_min (measured 0)
RTOL_RATIO = 1e-10
# the dead unit: smallest eigenvalue and offset of the probe sit at rounding level
ATOL_DEAD = 1e-12
HIDDEN, DEAD = 5, 2


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(3, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = _Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


def _net(*, dead: bool) -> tuple[_Net, torch.Tensor]:
    torch.manual_seed(0)
    net = _Net().double()
    if dead:
        with torch.no_grad():
            net.mlp.fc1.weight[DEAD] = 0.0
            net.mlp.fc1.bias[DEAD] = 0.0
            net.mlp.fc2.weight[:, DEAD] = 0.0
    x = torch.randn(48, 3, dtype=D, generator=torch.Generator().manual_seed(1))
    return net, x


def _spy(monkeypatch) -> list[tuple[dict, object]]:
    seen: list[tuple[dict, object]] = []
    original = hp.read_direction

    def spy(model, params, u, x, family, **kw):
        seen.append((u, family))
        return original(model, params, u, x, family, **kw)

    monkeypatch.setattr(hp, "read_direction", spy)
    return seen


def _close_up_to_sign(a: torch.Tensor, b: torch.Tensor) -> bool:
    return min(float((a - b).abs().max()), float((a + b).abs().max())) <= ATOL_VEC


def _top(m: torch.Tensor) -> torch.Tensor:
    return torch.linalg.eigh(m)[1][:, -1]


def test_probe_direction_is_built_from_the_hand_computed_eigenvectors(monkeypatch) -> None:
    """By hand: A₁ = mean x̄x̄ᵀ (x̄ = [x, 1]); hidden block of A₂ = mean hhᵀ with h = GELU(fc1 x);
    G₂ = mean (diag p − ppᵀ) for softmax p of the logits (the Categorical score moment).
    The probe is ΔW₁ = v aᵀ/√2 (bias v a_b/√2), ΔW₂ = g vᵀ/√2."""
    net, x = _net(dead=False)
    seen = _spy(monkeypatch)
    factors = kfac_factors(net, x, Categorical())
    (entry,) = hp.hidden_probes(net, x, factors)
    with torch.no_grad():
        xbar = torch.cat([x, torch.ones(x.shape[0], 1, dtype=D)], 1)
        h = nn.functional.gelu(net.mlp.fc1(x))
        p = torch.softmax(net(x), -1)
    a1 = xbar.T @ xbar / x.shape[0]
    hid = h.T @ h / x.shape[0]
    g2 = (torch.diag_embed(p) - p[:, :, None] * p[:, None, :]).mean(0)
    ev, vecs = torch.linalg.eigh(hid)
    v, a, g = vecs[:, 0], _top(a1), _top(g2)
    s = 2.0**-0.5
    assert [f for _, f in seen] == [seen[0][1]] * 2 and isinstance(seen[0][1], Categorical)
    for u, _ in seen:  # unsnapped and snapped reads share the direction
        w1 = torch.cat([u["mlp.fc1.weight"], u["mlp.fc1.bias"][:, None]], 1)
        assert _close_up_to_sign(w1, s * torch.outer(v, a))
        assert _close_up_to_sign(u["mlp.fc2.weight"], s * torch.outer(g, v))
    assert entry["block"] == "mlp" and entry["eig_index"] == 0
    assert entry["ratio"] == pytest.approx(float(ev[0] / ev[-1]), rel=RTOL_RATIO, abs=0)
    assert set(entry["scan"]) == {"mlp.fc1", "mlp.fc2"}


def test_a_dead_hidden_unit_is_probed_and_reads_node_death(monkeypatch) -> None:
    """With unit j dead (fc1 row and bias, fc2 column zero) its axis is the null hidden direction:
    v = ±e_j, the probe sits at offset 0 and reads the GELU node death, k = 2."""
    net, x = _net(dead=True)
    seen = _spy(monkeypatch)
    (entry,) = hp.hidden_probes(net, x, kfac_factors(net, x, Categorical()))
    e_j = torch.zeros(HIDDEN, dtype=D)
    e_j[DEAD] = 1.0
    u, _ = seen[0]
    w2 = u["mlp.fc2.weight"]  # g vᵀ/√2: its largest row is ∝ v
    v = w2[int(w2.norm(dim=1).argmax())]
    assert _close_up_to_sign(v / v.norm(), e_j)
    assert abs(entry["ratio"]) <= ATOL_DEAD
    for key in ("unsnapped", "snapped"):
        assert entry[key]["offset"] <= ATOL_DEAD
        assert entry[key]["k"] == 2 and entry[key]["class"] == "genuine_singularity"


def test_family_is_passed_to_the_reads_and_checked(monkeypatch) -> None:
    net, x = _net(dead=False)
    seen = _spy(monkeypatch)
    family = Gaussian(0.5)
    hp.hidden_probes(net, x, kfac_factors(net, x, family), family=family)
    assert [f for _, f in seen] == [family, family]
    with pytest.raises(TypeError, match=r"family must be an output family .* got str"):
        hp.hidden_probes(net, x, kfac_factors(net, x, family), family="categorical")
