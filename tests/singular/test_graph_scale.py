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
from neuromanifold.singular.read import read

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


class _ConvHead(nn.Module):
    """``fc(relu(conv x).flatten(1))`` with the factor 0.5 before the flatten, after it, or
    none; channel 1 of ``conv`` can be planted dead (filter 0, bias −1: the ReLU never fires)."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.fc = nn.Linear(3 * 4 * 4, 2)
        self.where = where

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(self.conv(x))
        h = h * 0.5 if self.where == "before" else h
        h = h.flatten(1)
        return self.fc(h * 0.5 if self.where == "after" else h)


def _conv_head(where: str, dead: bool = False) -> tuple[nn.Module, Tensor]:
    torch.manual_seed(1)
    model = _ConvHead(where).double().eval()
    if dead:
        with torch.no_grad():
            model.conv.weight[1] = 0.0
            model.conv.bias[1] = -1.0
    torch.manual_seed(0)
    return model, torch.randn(128, 2, 4, 4, dtype=torch.float64)


@pytest.mark.parametrize("where", ["none", "before", "after"])
def test_a_factor_after_a_flatten_keeps_each_channels_block(where: str) -> None:
    """s30 trial SCALE F1: with the factor after the flatten the edge's last step was "Scale",
    and the two readers that look for the flatten's block layout at the last step dropped the
    edge: no relu-rescale, and the planted dead channel read as two one-sided records, not as
    the duality chain conv → fc it is in the other two models."""
    model, x = _conv_head(where)
    ctx = DetectionContext.from_model(model, x, Gaussian())
    (cand,) = ReLURescaleDetector().propose("conv", ctx.model.conv, ctx)
    assert cand.layers == ("conv", "fc") and cand.info["certified"] <= EXACT


def test_a_dead_channel_reads_the_same_with_the_factor_before_or_after_the_flatten() -> None:
    """The silent channel (zero filter, bias −1: its ReLU off on every sample) reads flat: the
    function does not depend on the channel's parameters near θ0, so F = 0 on the grid. Since s35
    it is silent, not linked (`detectors/silent.py`): a one-sided record on each side (before, one
    duality chain conv → fc, also flat); the three models read the same records."""
    records = {}
    for where in ("none", "before", "after"):
        model, x = _conv_head(where, dead=True)
        reading = read(model, x, Gaussian(), progress=False)
        records[where] = [(r.detector, str(r.klass), r.k, r.layers) for r in reading.directions]
    assert ("kfac-G", "flat_gauge", None, ("conv",)) in records["none"]
    assert ("kfac-A", "flat_gauge", None, ("fc",)) in records["none"]
    assert not any(r[0] == "duality" for r in records["none"])
    assert records["before"] == records["after"] == records["none"]


def test_a_buffer_the_forward_writes_is_no_constant_factor() -> None:
    """s30 trial SCALE F3: a running maximum filled from the units in the same forward scales with
    them (its relu-rescale is no symmetry); it must not be taken for a constant factor."""

    def running_max(h: Tensor, m: nn.Module, _x: Tensor) -> Tensor:
        torch.maximum(m.mask, h.detach().amax(0), out=m.mask)
        return h * m.mask

    model, x = _model(running_max)
    graph = trace_graph(model, x)
    assert "fc1" not in graph.consumers and graph.stops["fc1"]


class _MaskSpelled(nn.Module):
    """``fc2(relu(fc1 x) * f)`` with the buffer ``m`` spelled as ``f``: plainly, ``m.type_as(h)``
    or ``m.expand_as(h)``; unit 1 is dead on both sides (ReLU off, fc2's column 1 zero)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 6)
        self.fc2 = nn.Linear(6, 3)
        self.register_buffer("m", torch.tensor([0.5, 2.0, 1.5, 1.0, 0.3, 2.0]))
        self.how = how

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(self.fc1(x))
        f = {"plain": self.m, "type_as": self.m.type_as(h), "expand_as": self.m.expand_as(h)}
        return self.fc2(h * f[self.how])


def test_a_factor_spelled_through_the_units_metadata_reads_the_same() -> None:
    """s30 trial SCALE F4: ``m.type_as(h)`` reads only h's dtype, yet it was recorded as a stop
    of fc1, which the linear detector takes for a second reader of h: one flat kfac-A record
    more than for ``h * m``, the same function."""
    records = {}
    for how in ("plain", "type_as", "expand_as"):
        torch.manual_seed(1)
        model = _MaskSpelled(how).double().eval()
        with torch.no_grad():
            model.fc1.weight[1] = 0.0
            model.fc1.bias[1] = -1.0
            model.fc2.weight[:, 1] = 0.0
        torch.manual_seed(0)
        x = torch.randn(128, 4, dtype=torch.float64)
        graph = trace_graph(model, x)
        assert graph.via[("fc1", "fc2")] == ("ReLU", "Scale") and "fc1" not in graph.stops
        reading = read(model, x, Gaussian(), progress=False)
        records[how] = [(r.detector, str(r.klass), r.k, r.layers) for r in reading.directions]
    assert records["type_as"] == records["expand_as"] == records["plain"]


class _ConvScaleNorm(nn.Module):
    """``fc(bn(conv(x) * m).flatten(1))`` with a per-channel buffer ``m``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.fc = nn.Linear(48, 2)
        self.register_buffer("m", torch.tensor([0.5, 2.0, 1.5])[:, None, None])

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.bn(self.conv(x) * self.m).flatten(1))


def test_the_batchnorm_rescale_crosses_a_lone_constant_factor() -> None:
    """s30 trial SCALE F5: channel c of conv scaled by a reaches the BatchNorm scaled by a through
    ``* m`` as it does with no factor, so the bn-rescale orbit is exact; it was proposed through
    ReLU → Scale but not through Scale alone."""
    torch.manual_seed(1)
    model = _ConvScaleNorm().double()
    torch.manual_seed(0)
    x = torch.randn(64, 2, 4, 4, dtype=torch.float64)
    with torch.no_grad():  # running statistics of the data
        model.train()
        model(x)
        model(x)
    model.eval()
    reading = read(model, x, Gaussian(), progress=False)
    (rescale,) = [r for r in reading.directions if r.detector == "bn-rescale"]
    assert str(rescale.klass) == "curved_gauge" and rescale.layers[:2] == ("conv", "bn")


def test_an_in_place_product_on_a_relus_output_is_refused_with_the_fix() -> None:
    """s30 trial SCALE F6: the graph follows ``h.mul_(mask)`` after a ReLU, but torch cannot
    differentiate the model (the ReLU's backward keeps its output); the read ended in torch's raw
    RuntimeError. It now says what to write instead, and the out-of-place model reads."""
    model, x = _model(_in_place)
    with pytest.raises(ValueError, match=r"write that step out of place \(h = h \* m\)"):
        read(model, x, Gaussian(), progress=False)
    model, x = _model(CONSTANT["buffer"])
    reading = read(model, x, Gaussian(), progress=False)
    assert any(r.detector == "relu-rescale" for r in reading.directions)
