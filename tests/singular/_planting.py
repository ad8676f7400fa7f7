"""Shared test helper: plant a dead hidden unit between a model's ``a`` and ``b`` linear maps."""

from __future__ import annotations

import torch
from torch import nn


def dead_unit_between_a_and_b(m: nn.Module, unit: int = 3) -> nn.Module:
    """``m`` in float64 and eval mode with hidden unit ``unit`` dead: its incoming row and bias
    in ``m.a`` and its outgoing column in ``m.b`` set to 0 (a node death, spec §6.1)."""
    m = m.to(torch.float64).eval()
    with torch.no_grad():
        m.a.weight[unit] = 0
        m.a.bias[unit] = 0
        m.b.weight[:, unit] = 0
    return m
