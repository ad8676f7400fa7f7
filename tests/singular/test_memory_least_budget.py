"""A refused ``max_memory`` names the smallest budget at which the refused part fits (s19 trial AK
suggestion), and ``max_memory`` accepts a float holding a whole number of bytes."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.memory import format_bytes, parse_memory, plan_memory

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
        # the named budget, as printed, is enough for that part (s22 trial LM #1: rounded to
        # the nearest 10 kB, "2.64 MB" was refused again for the same part)
        assert not parts or part != parts[-1], f"{part} refused again at its own suggestion"
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


def test_a_named_budget_read_back_is_never_below_the_need() -> None:
    """`format_bytes` with ``up`` (the refusals' "at least …"), parsed back by `parse_memory`, is
    at least the need, over six decades and at the units' edges (s22 trial LM #1: 2 643 500 B
    was named "2.64 MB", and 2.64 MB was refused again)."""
    gen = torch.Generator().manual_seed(0)
    needs = (10 ** (3 + 6 * torch.rand(2000, generator=gen, dtype=torch.float64))).tolist()
    needs += [999.5, 1000.0, 1000.4, 2_643_500.0, 999_999.9, 1e9 - 1, 1e9 + 1]
    for need in needs:
        named = format_bytes(need, up=True)
        assert parse_memory(named.replace(" ", "")) >= need, (need, named)
        assert parse_memory(named.replace(" ", "")) <= need * 1.011 + 1, (need, named)
