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


# a unit that never fires at θ0 (negative weights and bias on inputs ≥ 0), and a chain direction
# whose consumer part runs against the column: the snap θ0 − (uᵀθ0)u turns the weights positive
NEVER_WEIGHT, NEVER_BIAS = -0.05, -0.01


def _never_firing_cell() -> tuple[nn.Sequential, dict[str, torch.Tensor]]:
    model = _cell()
    with torch.no_grad():
        model[0].weight[0] = NEVER_WEIGHT
        model[0].bias[0] = NEVER_BIAS
    u = _chain()
    u["2.weight"] = -u["2.weight"]
    return model, u


def test_a_flat_checkpoint_is_not_replaced_by_a_snapped_read_of_another_model(
    candidate_kwargs: dict,
) -> None:
    """s26 trial CNN #6: along the chain of a never-firing unit F is 0 up to the switch-on
    distance (about 0.1 here), so the first read finds no window; the snapped point revives the
    unit (weights 0.03 > 0) and reads live, k = 1, a rate of another model. An offset off the
    locus would show F ≈ c·δ_off² > 0 below it, not 0: the first read stands."""
    model, u = _never_firing_cell()
    x = torch.rand(128, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    params = {k: v.detach() for k, v in model.named_parameters()}
    assert (x @ params["0.weight"][0] + params["0.bias"][0]).max() < 0  # never fires at θ0
    kwargs = {k: v for k, v in candidate_kwargs.items() if k != "snap"}
    cand = Candidate(("0", "2"), "duality", u)
    first, _ = read_candidate(cand, model, params, x, Gaussian(), snap=False, **kwargs)
    snapped, _ = read_candidate(cand, model, params, x, Gaussian(), snap=True, **kwargs)
    assert (snapped.klass, snapped.k) == ("live", 1)  # what the snap alone gives on this cell
    ts, F = first.sweep["t"], first.sweep["F"]
    assert all(f == 0.0 for t, f in zip(ts, F, strict=True) if t * 10 <= first.offset)
    assert first.offset < ts[-1]  # the snap is tried
    auto, _ = read_candidate(cand, model, params, x, Gaussian(), snap="auto", **kwargs)
    assert auto.klass == first.klass != "live"
    assert auto.info["snapped_read"] == {"k": 1, "k_hat": snapped.k_hat, "class": "live"}
    assert auto.sweep["F"] == F
    # the reason says where F leaves the floor
    assert "F ≤ 10×floor for t ≤" in auto.reason and "then rises to" in auto.reason


SWITCH_ON_BIAS = -0.025  # the unit fires once its bias has moved past 0.025


def test_a_unit_the_move_switches_on_reads_no_order() -> None:
    """s29 trial SHARED #5: along a never-firing unit's bias F is 0 up to the switch-on distance,
    then constant (the unit's output grows like t − 0.025, its consumer column reads it); the
    rise fits a law (slope 0) that is no law of the germ, flat on both sides of θ0. It was read
    live, k = 1 (genuine, k = 2, on a trained MLP whose rise curved); now no order is read and the
    reason says F switches on."""
    from neuromanifold.singular.direction import read_direction

    model = _cell()
    with torch.no_grad():
        model[0].weight[0] = 0.0
        model[0].bias[0] = SWITCH_ON_BIAS
    x = torch.rand(64, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    params = {k: v.detach() for k, v in model.named_parameters()}
    u = {"0.bias": torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)}
    grid = torch.logspace(-4, 0, 32, dtype=torch.float64)  # 1.4 decades past the switch-on
    r = read_direction(model, params, u, x, Gaussian(), grid=grid)
    ts, F = r.sweep.ts, r.sweep.F
    assert all(f == 0.0 for t, f in zip(ts, F, strict=True) if t <= -SWITCH_ON_BIAS)
    assert r.klass.value == "unresolved" and r.k is None
    assert "F switches on" in r.reason and "then rises to" in r.reason
