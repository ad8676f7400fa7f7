"""A refused ``max_memory`` names the smallest budget at which the refused part fits (s19 trial AK
suggestion), and ``max_memory`` accepts a float holding a whole number of bytes."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.memory import parse_memory, plan_memory

LEAST = re.compile(
    r"(one sample of the \w+ pass|the detection).*raise --max-memory to at least "
    r"([0-9.]+ [kMGT]?B) \(this part alone\)"
)
BELOW = 0.97
"""A budget this fraction of the suggested one: the same part must still be refused."""


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)).double()


def _refusal(budget: int) -> tuple[str, int] | None:
    """``(refused part, suggested budget)``, or ``None`` when the plan accepts ``budget``."""
    x = torch.randn(16, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    try:
        plan_memory(_mlp(), x, Gaussian(), max_memory=budget)
    except ValueError as err:
        m = LEAST.search(str(err))
        assert m is not None, str(err)
        return m.group(1), parse_memory(m.group(2).replace(" ", ""))
    return None


def test_the_suggested_budget_is_where_the_refused_part_fits() -> None:
    budget, parts = 10_000, []
    for _ in range(4):  # each suggestion fits its part; another part may need more
        refused = _refusal(budget)
        if refused is None:
            break
        part, least = refused
        assert least > budget
        below = _refusal(int(BELOW * least))
        assert below is not None and below[0] == part  # just below: the same part is refused
        parts.append(part)
        budget = least
    else:
        pytest.fail(f"still refused after following four suggestions: {parts}")
    assert parts, "the first budget was not refused"


def test_a_whole_float_is_taken_as_bytes() -> None:
    assert parse_memory(1.5e9) == 1_500_000_000
    assert parse_memory(4096.0) == 4096
    for bad in (2.5, float("inf"), float("nan")):
        with pytest.raises(TypeError, match=r"max_memory must be an int \(bytes\) or a string"):
            parse_memory(bad)  # type: ignore[arg-type]
