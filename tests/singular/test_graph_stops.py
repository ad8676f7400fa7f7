"""Where the data-flow graph stops a norm's output: ``ModelGraph.stops`` and the read's note.

A norm whose output reaches the next layer only through a function the graph does not follow has
no graph consumer, so its norm-scale and LayerNorm-kernel gauges are not proposed; the read says
so (``note`` and ``meta["graph_stops"]``) instead of leaving the gap silent.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch.overrides import resolve_name

from neuromanifold.singular.adapt_attention import multihead_as_projections
from neuromanifold.singular.detectors import trace_graph
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read

D_IN, D, D_OUT, N = 3, 4, 2, 64


def _transposes(h: Tensor) -> Tensor:
    return h.transpose(0, 1).transpose(0, 1)


def _clamp(h: Tensor) -> Tensor:
    return torch.clamp(h, -1e9, 1e9)


def _plain(h: Tensor) -> Tensor:
    return h


class _NormHead(nn.Module):
    """``head(op(ln(fc(x))))``; ``op`` is the identity on values in every case."""

    def __init__(self, op: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.fc = nn.Linear(D_IN, D)
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, D_OUT, bias=False)
        self.op = op

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.op(self.ln(self.fc(x))))


class _NormAttention(nn.Module):
    """``head(attn(h, h, h))`` with ``h = ln(fc(x))``: the norm feeds a followed attention."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(D_IN, D)
        self.ln = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, 2, batch_first=True)
        self.head = nn.Linear(D, D_OUT)

    def forward(self, x: Tensor) -> Tensor:
        h = self.ln(self.fc(x))
        return self.head(self.attn(h, h, h, need_weights=False)[0])


def _model(op: Callable[[Tensor], Tensor]) -> nn.Module:
    torch.manual_seed(0)
    return _NormHead(op).double().eval()


def _x() -> Tensor:
    torch.manual_seed(1)
    return torch.randn(N, D_IN, dtype=torch.float64)


@pytest.mark.parametrize(
    ("op", "func"), [(_transposes, torch.Tensor.transpose), (_clamp, torch.clamp)]
)
def test_graph_records_the_function_that_stopped_the_norm(op, func) -> None:
    graph = trace_graph(_model(op), _x())
    assert "ln" not in graph.consumers
    assert graph.stops["ln"] == (resolve_name(func),)  # the second transpose sees no provenance


def test_a_sinks_own_calls_are_no_stops() -> None:
    graph = trace_graph(_model(_plain), _x())  # head's forward calls F.linear on ln's output
    assert graph.consumers["ln"] == ("head",)
    assert "ln" not in graph.stops


@pytest.mark.parametrize(
    ("op", "func"), [(_transposes, torch.Tensor.transpose), (_clamp, torch.clamp)]
)
def test_read_notes_a_stopped_norm(op, func) -> None:
    reading = read(_model(op), _x(), Gaussian(), progress=False)
    name = resolve_name(func)
    assert reading.meta["graph_stops"] == {"ln": [name]}
    assert json.loads(json.dumps(reading.meta["graph_stops"])) == {"ln": [name]}
    assert f"the output of 'ln' reaches the next layer through {name}" in reading.note
    assert "norm-scale and LayerNorm-kernel gauges were not proposed" in reading.note
    assert not any(r.detector == "norm-scale" for r in reading.directions)
    assert "fc" not in reading.meta["graph_stops"]  # only norms are reported


def test_read_of_the_plain_norm_has_no_note_and_a_norm_gauge() -> None:
    reading = read(_model(_plain), _x(), Gaussian(), progress=False)
    assert reading.meta["graph_stops"] == {}
    assert "graph does not follow" not in reading.note
    assert any(r.detector in ("norm-scale", "ln-kernel") for r in reading.directions)


def test_read_of_a_norm_feeding_attention_has_no_note() -> None:
    torch.manual_seed(0)
    model = _NormAttention().double().eval()
    torch.manual_seed(1)
    x = torch.randn(8, 3, D_IN, dtype=torch.float64)
    reading = read(model, x, Gaussian(), progress=False, max_directions=0)
    assert reading.meta["graph_stops"] == {}
    adapted = copy.deepcopy(model)
    multihead_as_projections(adapted, x)  # as the read does
    graph = trace_graph(adapted, x)
    assert graph.consumers["ln"] == ("attn.q_proj", "attn.k_proj", "attn.v_proj")
    assert "attn.q_proj" in graph.stops  # a projection's reshape is a stop, but no norm's
    assert "graph does not follow" not in reading.note


class _ReLUHead(nn.Module):
    """``head(op(act(fc(x))))``: ``op`` cuts the chain after the activation."""

    def __init__(self, act: Callable[[Tensor], Tensor], op: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.fc = nn.Linear(D_IN, D)
        self.head = nn.Linear(D, D_OUT)
        self.act, self.op = act, op

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.op(self.act(self.fc(x))))


def _relu_model(act: Callable[[Tensor], Tensor], op: Callable[[Tensor], Tensor]) -> nn.Module:
    torch.manual_seed(0)
    return _ReLUHead(act, op).double().eval()


@pytest.mark.parametrize(
    ("op", "func"), [(_transposes, torch.Tensor.transpose), (_clamp, torch.clamp)]
)
def test_read_notes_a_relu_chain_cut_before_its_consumer(op, func) -> None:
    """The per-unit rescaling of ``fc`` through the ReLU is an exact gauge, but with the chain
    cut no consumer is known, so it is not proposed: the read says so (s29 trial SHARED #7)."""
    name = resolve_name(func)
    graph = trace_graph(_relu_model(torch.relu, op), _x())
    assert "fc" not in graph.consumers and graph.cuts["fc"] == ((name, ("ReLU",)),)
    reading = read(_relu_model(torch.relu, op), _x(), Gaussian(), progress=False)
    assert reading.meta["graph_stops"] == {"fc": [name]}
    assert (
        f"the output of 'fc' passes ReLU and then {name}, which the graph does not follow: "
        "its relu-rescale gauges were not proposed"
    ) in reading.note
    assert not any(r.detector == "relu-rescale" for r in reading.directions)


@pytest.mark.parametrize("act", [torch.tanh, _plain], ids=["tanh", "no activation"])
def test_a_cut_after_no_homogeneous_activation_is_not_noted(act) -> None:
    reading = read(_relu_model(act, _transposes), _x(), Gaussian(), progress=False)
    assert reading.meta["graph_stops"] == {}
    assert "graph does not follow" not in reading.note


def test_the_uncut_relu_chain_is_not_noted_and_gets_its_gauge() -> None:
    reading = read(_relu_model(torch.relu, _plain), _x(), Gaussian(), progress=False)
    assert reading.meta["graph_stops"] == {}
    assert any(r.detector == "relu-rescale" for r in reading.directions)


def _halve(h: Tensor) -> Tensor:
    return h * 0.5


def test_a_norm_read_through_a_constant_factor_keeps_its_scale_gauge_and_notes_its_kernel() -> None:
    """``head(ln(fc x) * 0.5)``: the per-feature rescale of γ against the head's columns crosses
    the factor (proposed, exact); the LayerNorm-kernel identity is not carried across a factor
    and is said to be missing (before the ``"Scale"`` step, the product stopped the chain and
    neither gauge was proposed)."""
    graph = trace_graph(_model(_halve), _x())
    assert graph.via[("ln", "head")] == ("Scale",)
    reading = read(_model(_halve), _x(), Gaussian(), progress=False)
    assert reading.meta["graph_stops"] == {"ln": ["Scale"]}
    assert (
        "through a constant factor (Scale), which the LayerNorm-kernel gauge is not carried "
        "across: that gauge was not proposed from the graph"
    ) in reading.note
    (scale,) = [r for r in reading.directions if r.detector == "norm-scale"]
    assert scale.layers == ("ln", "head") and str(scale.klass) == "curved_gauge"
    assert not any(r.detector == "ln-kernel" for r in reading.directions)


def _halve_then_gelu(h: Tensor) -> Tensor:
    return torch.nn.functional.gelu(h * 0.5)


def test_a_factor_before_an_activation_gives_no_layernorm_note() -> None:
    """s30 trial SCALE F2: the note fired for any Scale on the edge; behind a GELU neither norm
    gauge reaches the consumer, with or without the factor, so the factor is not why."""
    reading = read(_model(_halve_then_gelu), _x(), Gaussian(), progress=False)
    assert reading.meta["graph_stops"] == {}
    assert "constant factor" not in reading.note


class _MeanPoolHead(nn.Module):
    """``head(mean_s ln(fc(x)))``: the mean over positions stops the graph, and keeps the
    LayerNorm kernel's identity ``a*ᵀ ln(h) = const`` (a mean of constants)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(D_IN, D)
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, D_OUT)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.ln(self.fc(x)).mean(dim=1))


def test_a_stopped_norm_whose_kernel_the_factor_test_found_is_not_said_to_lack_it() -> None:
    """s33 trial USER D2: the note said the LayerNorm-kernel gauge was not proposed beside the
    ln-kernel record the factor test had read."""
    torch.manual_seed(0)
    model = _MeanPoolHead().double()
    reading = read(model, torch.randn(N, 5, D_IN, dtype=torch.float64), Gaussian(), progress=False)
    assert "ln" in reading.meta["graph_stops"]
    kernel = [r for r in reading.directions if r.detector == "ln-kernel"]
    assert [r.info.get("norm") for r in kernel] == ["ln"]
    assert kernel[0].info.get("via") == "factor-test"
    assert "its norm-scale gauge was not proposed (the factor test found its LayerNorm-kernel" in (
        reading.note
    )
    assert "LayerNorm-kernel gauges were not proposed" not in reading.note
