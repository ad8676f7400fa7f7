"""``snap="auto"`` keeps a classified first read when the snapped re-read finds no rate window
(s20 trial AN #1: the chain of a CNN channel dead on its input side read ``live`` unsnapped, as
docs/order_read.md says it should, and ``unresolved`` after the snap, which moved the channel's
zero weights below zero so that F ≈ 0 up to the offset and jumped there)."""

from __future__ import annotations

import torch
from torch import nn

from neuromanifold.singular.detectors.base import Candidate
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read_candidate import read_candidate

# the chain's offset |uᵀθ0| = 0.1·‖column‖/‖u‖-ish: well inside the default grid (t ≤ 1)
CONSUMER_COLUMN = (0.3, -0.2)


def _cell() -> nn.Sequential:
    """4 → 3 (ReLU) → 2; hidden unit 0 has zero weights and bias (dead on its input side, its
    output is 0), its consumer column is live."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).double()
    with torch.no_grad():
        model[0].weight[0] = 0.0
        model[0].bias[0] = 0.0
        model[2].weight[:, 0] = torch.tensor(CONSUMER_COLUMN, dtype=torch.float64)
    return model.eval()


def _chain() -> dict[str, torch.Tensor]:
    """Unit 0's incoming weights (all positive) and its consumer column: with inputs ≥ 0 the
    snap θ0 − (uᵀθ0)u turns the incoming weights negative, and the unit stays off until t
    passes the offset."""
    w0 = torch.zeros(3, 4, dtype=torch.float64)
    w0[0] = 1.0
    w2 = torch.zeros(2, 3, dtype=torch.float64)
    w2[:, 0] = torch.tensor(CONSUMER_COLUMN, dtype=torch.float64)
    return {"0.weight": w0, "2.weight": w2}


def test_a_snapped_read_without_a_rate_window_does_not_replace_a_live_read(
    candidate_kwargs: dict,
) -> None:
    model = _cell()
    x = torch.rand(128, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    params = {k: v.detach() for k, v in model.named_parameters()}
    kwargs = {k: v for k, v in candidate_kwargs.items() if k != "snap"}
    cand = Candidate(("0", "2"), "duality", _chain())
    unsnapped, _ = read_candidate(cand, model, params, x, Gaussian(), snap=False, **kwargs)
    snapped, _ = read_candidate(cand, model, params, x, Gaussian(), snap=True, **kwargs)
    assert (unsnapped.klass, unsnapped.k) == ("live", 1)
    assert snapped.klass == "unresolved"  # what the snap alone gives on this cell
    auto, _ = read_candidate(cand, model, params, x, Gaussian(), snap="auto", **kwargs)
    assert (auto.klass, auto.k) == ("live", 1)
    assert auto.info["snapped_read"] == {"k": None, "k_hat": None, "class": "unresolved"}
    assert auto.sweep["F"] == unsnapped.sweep["F"]
