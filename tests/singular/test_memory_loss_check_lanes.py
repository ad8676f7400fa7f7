"""The labelled-loss checks' lanes under ``max_memory``: a budget that fits the sweeps but not one
sample on ``LOSS_CHECK_LANES`` lanes is refused up front, naming the least budget.

s33 trial DIST D2: `MemoryPlan.chunk_for` fell back to one sample per pass there, over its own
estimate all the same: a 32→256→256→10 MLP on 512 labelled samples took 4756 forward passes and
91 s under 30 MB, against 214 passes and 4.8 s under 60 MB.
"""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.memory import JVP_FRACTION, format_bytes, parse_memory, plan_memory
from neuromanifold.singular.read import _critical_bytes, read
from neuromanifold.singular.read_candidate import LOSS_CHECK_LANES

N, W = 128, 256


def _model() -> nn.Module:
    """The trial's MLP: its JVP pass has a large fixed cost (about 3 MB per lane) beside a
    per-sample one of about 14 kB, so under 30 MB the sweeps fit and three lanes do not."""
    torch.manual_seed(0)
    return (
        nn.Sequential(nn.Linear(32, W), nn.Tanh(), nn.Linear(W, W), nn.Tanh(), nn.Linear(W, 10))
        .double()
        .eval()
    )


def _xy() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(N, 32, dtype=torch.float64, generator=gen)
    return x, torch.randint(0, 10, (N,), generator=gen)


def test_require_lanes_refuses_exactly_when_one_sample_on_the_lanes_does_not_fit() -> None:
    x, _ = _xy()
    plan = plan_memory(_model(), x, Gaussian(), max_memory="60MB")
    lanes = plan.pass_room() // plan.jvp_cost(1)  # the most lanes one sample fits on
    assert lanes >= 1
    plan.require_lanes(int(lanes), "the checks")  # fits: no error
    with pytest.raises(ValueError, match=rf"the checks run {lanes + 1} JVP lanes") as err:
        plan.require_lanes(int(lanes + 1), "the checks")
    need = plan.held + (lanes + 1) * plan.jvp_cost(1) / JVP_FRACTION
    assert f"raise --max-memory to at least {format_bytes(need, up=True)}" in str(err.value)


def test_a_labelled_read_under_a_budget_too_small_for_the_check_lanes_is_refused() -> None:
    x, y = _xy()
    model = _model()
    plan = plan_memory(model, x, Categorical(), max_memory="30MB")
    assert plan.chunk_for(LOSS_CHECK_LANES) == 1  # the fallback the refusal replaces
    assert plan.pass_room() < plan.jvp_cost(1, LOSS_CHECK_LANES)
    with pytest.raises(
        ValueError, match=r"the labelled checks \(labels were given: the whole"
    ) as err:
        read(model, (x, y), Categorical(), max_memory="30MB", progress=False)
    least = re.search(r"at least ([0-9.]+ [kMGT]?B) \(this part alone\)", str(err.value))
    assert least is not None
    # the suggested budget fits the lanes beside the whole-gradient check's tensors at plan time
    # (the candidates the detection finds may ask more); 3 % below it does not
    at_least = parse_memory(least.group(1).replace(" ", ""))
    held = _critical_bytes(model.double())
    plan_memory(model, x, Categorical(), max_memory=at_least).holding(held).require_lanes(
        LOSS_CHECK_LANES, "the checks"
    )
    with pytest.raises(ValueError, match="the checks run 3 JVP lanes"):
        below = plan_memory(model, x, Categorical(), max_memory=int(0.97 * at_least))
        below.holding(held).require_lanes(LOSS_CHECK_LANES, "the checks")
    # without labels no check runs: the same budget reads
    unlabelled = read(model, x, Categorical(), max_memory="30MB", progress=False, max_directions=1)
    assert unlabelled.directions
