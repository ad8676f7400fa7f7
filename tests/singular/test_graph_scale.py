"""A constant factor between an activation and the next layer keeps the chain (``"Scale"``).

``fc2(relu(fc1 x) * m)`` with ``m`` a number, a buffer or a free parameter is still
``fc2 ∘ diag(m) ∘ relu ∘ fc1``: scaling unit j of ``fc1`` by ``c > 0`` and column j of ``fc2`` by
``1/c`` leaves the function unchanged, so the ReLU-rescale gauge exists and must be proposed
(s29 trial SHARED #7: a buffer mask there stopped the chain and nothing was proposed or said). A
factor computed from a source (a gate) or from the units themselves is not constant: the chain
stops there as before, and the stop is recorded.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neuromanifold.singular.detectors import DetectionContext, ReLURescaleDetector, trace_graph
from neuromanifold.singular.detectors.graph_steps import SCALES, scale_pairs
from neuromanifold.singular.family import Gaussian

EXACT = 1e-12
"""Relative output change of a certified exact gauge (rescaling by powers of two is exact)."""


class _Masked(nn.Module):
    """``fc2(scale(relu(fc1 x)))`` with a buffer ``mask``, a free parameter ``alpha`` and a gate
    ``gate`` available to ``scale(h, module, x)``."""

    def __init__(self, scale: Callable[[Tensor, nn.Module, Tensor], Tensor]) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.fc2 = nn.Linear(4, 2)
        self.gate = nn.Linear(3, 4)
        self.register_buffer("mask", torch.tensor([1.0, 0.3, 1.0, 2.5]))
        self.alpha = nn.Parameter(torch.tensor(0.7))
        self.scale = scale

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.scale(F.relu(self.fc1(x)), self, x))


def _in_place(h: Tensor, m: nn.Module, _x: Tensor) -> Tensor:
    h.mul_(m.mask)
    return h


CONSTANT = {
    "number": lambda h, m, x: h * 0.5,
    "number on the left": lambda h, m, x: 0.5 * h,
    "quotient": lambda h, m, x: h / 3.0,
    "buffer": lambda h, m, x: h * m.mask,
    "buffer on the left": lambda h, m, x: m.mask * h,
    "buffer view": lambda h, m, x: h * m.mask[None, :],
    "torch.mul": lambda h, m, x: torch.mul(h, m.mask),
    "torch.div keyword": lambda h, m, x: torch.div(h, other=m.mask),
    "free parameter": lambda h, m, x: m.alpha * h,
    "in place": _in_place,
    "twice, then a ReLU": lambda h, m, x: F.relu(h * m.mask) / 2.0,
}

NOT_CONSTANT = {
    "gate from a source": lambda h, m, x: h * torch.sigmoid(m.gate(x)),
    "the units' own size": lambda h, m, x: h * h.abs(),
    "a tensor made from the input": lambda h, m, x: h * x.abs().sum(1, keepdim=True),
    "a sink's parameter": lambda h, m, x: h * m.fc2.weight[0],
    "rounded quotient": lambda h, m, x: torch.div(h, 2.0, rounding_mode="floor"),
    "a factor that widens h": lambda h, m, x: (h * m.mask[:, None, None]).sum(0),
}


def _model(scale: Callable) -> tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    return _Masked(scale).double(), torch.randn(32, 3, dtype=torch.float64)


@pytest.mark.parametrize("name", sorted(CONSTANT))
def test_a_constant_factor_continues_the_chain(name: str) -> None:
    model, x = _model(CONSTANT[name])
    graph = trace_graph(model, x)
    assert graph.consumers["fc1"] == ("fc2",)
    steps = graph.via[("fc1", "fc2")]
    assert steps[0] == "ReLU" and "Scale" in steps and "fc1" not in graph.stops


@pytest.mark.parametrize("name", sorted(NOT_CONSTANT))
def test_a_factor_that_is_not_constant_stops_the_chain(name: str) -> None:
    model, x = _model(NOT_CONSTANT[name])
    graph = trace_graph(model, x)
    assert "fc1" not in graph.consumers
    assert graph.stops["fc1"]  # where the chain was cut is recorded


@pytest.mark.parametrize("name", ["buffer", "free parameter", "quotient"])
def test_the_rescale_gauge_behind_a_constant_factor_is_proposed_and_exact(name: str) -> None:
    model, x = _model(CONSTANT[name])
    ctx = DetectionContext.from_model(model, x, Gaussian())
    (cand,) = ReLURescaleDetector().propose("fc1", ctx.model.fc1, ctx)
    assert cand.gauge == "curved" and cand.layers == ("fc1", "fc2")
    assert cand.info["certified"] <= EXACT
    # the law itself, by hand: unit j of fc1 scaled by c, column j of fc2 by 1/c
    j, c = 1, 3.0
    moved = _Masked(CONSTANT[name]).double()
    moved.load_state_dict(model.state_dict())
    with torch.no_grad():
        moved.fc1.weight[j] *= c
        moved.fc1.bias[j] *= c
        moved.fc2.weight[:, j] /= c
    with torch.no_grad():
        torch.testing.assert_close(moved(x), model(x), rtol=EXACT, atol=EXACT)


def test_scale_pairs_offers_only_the_operands_that_can_be_scaled() -> None:
    h, m = torch.ones(3), torch.full((3,), 2.0)
    assert scale_pairs(Tensor.__mul__, (h, m), {}) == ((h, m), (m, h))
    assert scale_pairs(Tensor.__truediv__, (h, m), {}) == ((h, m),)
    assert scale_pairs(Tensor.mul_, (h, m), {}) == ((h, m),)  # the tensor written in place
    assert scale_pairs(torch.div, (h, m), {"rounding_mode": "trunc"}) == ()
    assert scale_pairs(torch.mul, (h,), {}) == ()
    assert all(f in SCALES for f in (Tensor.__rmul__, torch.true_divide, Tensor.__itruediv__))
