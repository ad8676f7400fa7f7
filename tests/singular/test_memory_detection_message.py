"""The detection refusal of `plan_memory` lists parts that add up to its total.

User trial s19 AK #5: "the detection is estimated at 30.29 MB (the K-FAC factors, 8.44 MB, their
cached spectra as much again, and 8.59 MB for the eigendecomposition ...)" left out the two
float64 copies of the parameters (4.82 MB), so the parts summed to 25.47 MB.
"""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.memory import (
    BUDGET_FRACTION,
    JVP_FRACTION,
    format_bytes,
    plan_memory,
)

UNITS = {"GB": 1e9, "MB": 1e6, "kB": 1e3, "B": 1.0}
AMOUNT = re.compile(r"(\d+(?:\.\d+)?) (GB|MB|kB|B)\b")
HALF_UNIT = 0.5e-2  # format_bytes rounds to 2 decimals of its unit: at most half of 0.01 off
HELD = 250_000  # bytes held beside the detection in the second case


def _model_and_data() -> tuple[nn.Module, torch.Tensor]:
    """One 256-wide input layer: the detection (a 257 × 257 factor) is the largest cost."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 64), nn.Tanh(), nn.Linear(64, 4)).double()
    return model, torch.randn(16, 256, dtype=torch.float64)


def _amounts(text: str) -> list[tuple[float, float]]:
    """``(bytes, rounding bound in bytes)`` of every amount in ``text``, in order."""
    return [
        (float(v) * UNITS[u], (HALF_UNIT if u != "B" else 0.5) * UNITS[u])
        for v, u in AMOUNT.findall(text)
    ]


def _budget_refused_by_the_detection(model: nn.Module, x: torch.Tensor, held: int) -> int:
    """A budget the factor and JVP passes fit in but the detection (beside ``held``) does not."""
    big = plan_memory(model, x, Gaussian(), max_memory="1GB", held=held)
    passes = max(
        (big.factor_fixed + big.factor_per_sample + held) / BUDGET_FRACTION,
        (big.jvp_fixed + big.jvp_per_sample + held) / JVP_FRACTION,
    )
    detection = (big.detection + held) / BUDGET_FRACTION
    assert passes < detection
    return int((passes + detection) / 2)


@pytest.mark.parametrize("held", [0, HELD])
def test_detection_refusal_parts_add_up_to_the_total(held: int) -> None:
    model, x = _model_and_data()
    budget = _budget_refused_by_the_detection(model, x, held)
    with pytest.raises(ValueError, match=r"too small: the detection is estimated at") as info:
        plan_memory(model, x, Gaussian(), max_memory=budget, held=held)
    msg = str(info.value)
    body = msg.split("the detection is estimated at ", 1)[1]
    body = re.split(r"; together with |, more than ", body, maxsplit=1)[0]
    (total, total_err), *parts = _amounts(body)
    gap = abs(total - sum(v for v, _ in parts))
    assert gap <= total_err + sum(e for _, e in parts), (msg, gap)
    assert len(parts) == 4, body  # factors, their spectra, the eigendecomposition, the params
    n_params = sum(p.numel() for p in model.parameters())
    assert f"and {format_bytes(2 * 8 * n_params)} for two float64 copies of the parameters" in msg
    if held:
        assert f"; together with {format_bytes(held)} held, more than 35% of the budget" in msg
    else:
        assert "held" not in msg
