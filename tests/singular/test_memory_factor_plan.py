"""The planned factor batch keeps the factor pass within its share of the budget.

s19: the plan extrapolated the factor pass's peak from 2 and 4 samples, where costs that do not
grow with the batch set it; the slope came out 3.6× too small for a 16→32→10 Tanh MLP with 10
classes (the G rows buffered per batch grow as batch × classes × d_out), and the planned batch
peaked at 1.09 MB under a 1 MB budget (a 350 kB share).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.memory import (
    BUDGET_FRACTION,
    FACTOR_CHECK_ROUNDS,
    _checked_factor_batch,
    format_bytes,
    parse_memory,
    peak_allocated,
    plan_memory,
)
from neuromanifold.zoo.models import CNNConfig, build_model

N_PROBE = 256
MIN_SHARE_OF_BEST = 0.9  # the secant's batch against the largest batch that fits


def _tanh_mlp() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 10)).double()
    return model, torch.randn(N_PROBE, 16, dtype=torch.float64)


def _zoo_cnn() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = build_model(CNNConfig(in_channels=1, channels=(4, 8), num_classes=10), seed=0)
    return model.double(), torch.randn(N_PROBE, 1, 6, 6, dtype=torch.float64)


@pytest.mark.parametrize("make", [_tanh_mlp, _zoo_cnn], ids=["tanh-mlp", "zoo-cnn"])
@pytest.mark.parametrize("budget", ["300kB", "1MB"])
def test_the_planned_factor_batch_keeps_the_factor_share(make, budget: str) -> None:
    """The tracked peak of `kfac_factors` at ``plan.factor_batch`` over all probe samples, with
    the read's two float64 parameter copies and what it holds, is within ``BUDGET_FRACTION`` of
    the budget (``plan.max_memory``)."""
    model, x = make()
    family = Categorical()
    plan = plan_memory(model, x, family, max_memory=budget)
    assert plan.max_memory == int(BUDGET_FRACTION * parse_memory(budget))
    assert 1 <= plan.factor_batch <= N_PROBE
    param_bytes = 8 * sum(p.numel() for p in model.parameters())
    peak = peak_allocated(lambda: kfac_factors(model, x, family, batch_size=plan.factor_batch))
    used = peak + 2 * param_bytes + plan.held
    assert used <= plan.max_memory, (
        f"factor_batch={plan.factor_batch}: the factor pass uses {format_bytes(used)}, "
        f"over the factor share {format_bytes(plan.max_memory)}"
    )


def test_the_check_does_not_shrink_a_batch_that_fits() -> None:
    """Under a large budget the checked batch is the requested one (all it measures fits)."""
    model, x = _tanh_mlp()
    plan = plan_memory(model, x, Categorical(), max_memory="1GB", factor_batch=64)
    assert plan.factor_batch == 64


def test_the_check_follows_the_secant_of_a_convex_peak() -> None:
    """On a peak ``max(C, F + s·k)`` whose probes at 2 and 4 sit on the flat part ``C``, the
    check lowers the batch along the secant from the largest smaller measured batch and returns
    a batch within ``room``, near the largest, after at most `FACTOR_CHECK_ROUNDS` passes."""
    flat, fixed, per, room = 50_000, 20_000, 7_000, 300_000

    def peak(k: int) -> int:
        calls.append(k)
        return max(flat, fixed + per * k)

    calls: list[int] = []
    points = {2: peak(2), 4: peak(4)}
    batch = _checked_factor_batch(150, room, points, peak, torch.device("cpu"), 10**6)
    best = (room - fixed) // per  # 40: the largest batch that fits
    assert MIN_SHARE_OF_BEST * best <= batch <= best
    assert len(calls) - 2 - 2 <= FACTOR_CHECK_ROUNDS  # the probes, this check's passes, ours


def test_a_factor_pass_over_budget_at_one_sample_is_refused() -> None:
    """When the pass at one sample per batch measures over the room left, the plan's check
    raises, naming the budget and the measured peak."""
    with pytest.raises(
        ValueError,
        match=r"max_memory=300000 bytes \(300.00 kB\) is too small: the factor pass with one "
        r"sample per batch measures 1.00 MB, more than the 100.00 kB left of 35% of the budget",
    ):
        _checked_factor_batch(4, 100_000, {}, lambda k: 10**6, torch.device("cpu"), 300_000)
