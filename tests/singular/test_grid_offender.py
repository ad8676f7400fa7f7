"""A bad grid's error names the first offending t value, not the grid's minimum (s20 AO #6)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from neuromanifold.singular import Gaussian, read_direction, sweep
from neuromanifold.singular.rate import fit_rate

D = torch.float64


@pytest.mark.parametrize(
    ("grid", "named"),
    [
        ([1e-3, math.inf], r"t\[1\] = inf"),
        ([1e-3, math.nan, 1.0], r"t\[1\] = nan"),
        ([1e-3, 1e-2, -math.inf], r"t\[2\] = -inf"),
        ([0.5, 0.0, 1.0], r"t\[1\] = 0\b"),
        ([-2.0, 1e-3], r"t\[0\] = -2\b"),
    ],
)
def test_bad_grid_names_the_offender(grid: list[float], named: str) -> None:
    model = nn.Linear(1, 1, bias=False).to(D)  # any model: the grid is checked first
    params = dict(model.named_parameters())
    u = {"weight": torch.ones(1, 1, dtype=D)}
    x = torch.ones(2, 1, dtype=D)
    match = r"grid must be positive and finite; got " + named
    with pytest.raises(ValueError, match=match) as caught:
        read_direction(model, params, u, x, Gaussian(), grid=grid)
    assert "min" not in str(caught.value)  # the minimum was the misleading part
    with pytest.raises(ValueError, match=match):
        sweep(model, params, u, x, Gaussian(), grid=grid)


def test_fit_rate_bad_grid_names_the_offender() -> None:
    with pytest.raises(ValueError, match=r"got t\[2\] = inf"):
        fit_rate([1e-3, 1e-2, math.inf], [1.0, 1.0, 1.0])
