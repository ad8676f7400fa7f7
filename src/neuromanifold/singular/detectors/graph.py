"""Which module feeds which: the data-flow edges the detectors need, from one hooked forward.

An edge ``p → c`` is recorded when module ``c`` receives as its first input a tensor produced by
module ``p`` either directly or through a chain of elementwise modules (activations, dropout,
identity; classes named in ``ELEMENTWISE_NAMES``; any module with a truthy ``elementwise``
attribute). Sources are Linear and convolution modules, normalisation layers (torch's LayerNorm,
RMSNorm, BatchNorm and GroupNorm, and RMSNorms defined elsewhere: `is_named_rmsnorm`) and
embeddings; consumers are those, ``nn.MultiheadAttention`` (its query input) and layer-scale
modules (`layer_scale_param`). Elementwise functions called inside a ``forward`` (``F.relu``,
``torch.tanh``, …: `FUNCTIONAL_ELEMENTWISE`) continue the chain like the equal modules, and so do
pooling, a spatial mean and a flatten of ``(N, C, 1, 1)`` after a source whose units are channels
(convolution, BatchNorm, GroupNorm: `CHANNELWISE`, every channel kept apart, so unit ``c`` of the
producer is still channel ``c`` of the consumer's input; a flatten of a whole feature map makes
channel ``c`` a block of features); any other function (a product, a transpose, another reshape, a
residual addition, an in-place operation on the tensor) breaks it, so no edge is drawn across it
(the duality join and the LayerNorm lift are then not attempted, which is conservative).

**Skip edges** are recorded separately: ``skips[p]`` lists the sinks whose first input is a sum in
which the output of source ``p`` itself is one summand — ``c(z + f(z))`` with ``z = p(·)``, through
any number of such additions (a residual stream), the direct producer excepted. A torch-function
mode sees the additions (``+``, ``+=``, ``torch.add`` with ``alpha = 1``); anything else applied to
the sum (a scale, an activation, a normalisation) ends the provenance. Skip edges let the linear
detector follow a dead path through residual blocks (spec §6.6: skips cost nothing on the
shortest weighted path).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from neuromanifold.singular.detectors.graph_steps import (
    CHANNELWISE,
    CHANNELWISE_LABELS,
    FUNCTIONAL_ELEMENTWISE,
    channel_label,
    channels_first_ndim,
    in_place,
)

__all__ = [
    "CHANNELWISE",
    "CHANNELWISE_LABELS",
    "ELEMENTWISE",
    "ELEMENTWISE_NAMES",
    "FUNCTIONAL_ELEMENTWISE",
    "PASS_THROUGH",
    "ModelGraph",
    "graph_passes_through",
    "is_named_rmsnorm",
    "layer_scale_param",
    "trace_graph",
]

ELEMENTWISE: tuple[type[nn.Module], ...] = (
    nn.ReLU,
    nn.GELU,
    nn.Tanh,
    nn.SiLU,
    nn.Sigmoid,
    nn.LeakyReLU,
    nn.ELU,
    nn.Softplus,
    nn.Identity,
    nn.Dropout,
    nn.Mish,
    nn.Hardtanh,
    nn.ReLU6,
    nn.Hardswish,
    nn.Hardsigmoid,
)
_SOURCES: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.LayerNorm,
    nn.RMSNorm,
    nn.modules.batchnorm._BatchNorm,
    nn.GroupNorm,
    nn.Embedding,
)
_SINKS: tuple[type[nn.Module], ...] = (*_SOURCES, nn.MultiheadAttention)


ELEMENTWISE_NAMES: tuple[str, ...] = (
    "SquaredReLU",
    # Hugging Face transformers' activation modules (transformers.activations)
    "GELUActivation",
    "NewGELUActivation",
    "FastGELUActivation",
    "QuickGELUActivation",
    "AccurateGELUActivation",
    "ClippedGELUActivation",
    "SiLUActivation",
    "MishActivation",
    "LinearActivation",
    "ReLUSquaredActivation",
    "LaplaceActivation",
    "PytorchGELUTanh",
    "GELUTanh",
)
"""Class names of elementwise modules defined outside torch (the cells' squared ReLU, Hugging
Face's activation modules), matched by name so that no import is needed."""


def is_named_rmsnorm(mod: nn.Module) -> bool:
    """An RMSNorm defined outside torch (Hugging Face's ``LlamaRMSNorm``, ``Qwen2RMSNorm``, …):
    a class whose name ends in ``RMSNorm`` with a one-dimensional ``weight`` parameter. Matched by
    name so that no import is needed; what it computes is not assumed (detectors that rely on a
    symmetry certify it by evaluation)."""
    w = getattr(mod, "weight", None)
    return (
        type(mod).__name__.endswith("RMSNorm")
        and not isinstance(mod, nn.RMSNorm)
        and isinstance(w, nn.Parameter)
        and w.dim() == 1
    )


def layer_scale_param(mod: nn.Module) -> str | None:
    """The scale's name in a layer-scale module defined outside torch (timm's ``LayerScale`` and
    ``LayerScale2d``: ``gamma``; Hugging Face's ``Dinov2LayerScale``: ``lambda1``): a class whose
    name ends in ``LayerScale`` or ``LayerScale2d`` holding exactly one parameter, one-dimensional;
    None otherwise. Matched by name; what it computes is certified by the detector that uses it.

    >>> class LayerScale(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.gamma = nn.Parameter(torch.ones(4))
    >>> layer_scale_param(LayerScale()), layer_scale_param(nn.Linear(2, 2))
    ('gamma', None)
    """
    if not type(mod).__name__.endswith(("LayerScale", "LayerScale2d")):
        return None
    params = list(mod.named_parameters())
    if len(params) != 1 or params[0][1].dim() != 1:
        return None
    return params[0][0]


def _is_source(mod: nn.Module) -> bool:
    return isinstance(mod, _SOURCES) or is_named_rmsnorm(mod)


def _is_sink(mod: nn.Module) -> bool:
    return isinstance(mod, _SINKS) or is_named_rmsnorm(mod) or layer_scale_param(mod) is not None


def _is_elementwise(mod: nn.Module) -> bool:
    return (
        isinstance(mod, ELEMENTWISE)
        or type(mod).__name__ in ELEMENTWISE_NAMES
        or bool(getattr(mod, "elementwise", False))
    )


@dataclass(frozen=True)
class ModelGraph:
    """Data-flow edges between source modules.

    ``consumers[p]`` / ``producers[c]``: tuples of module names; ``via[(p, c)]``: the elementwise
    modules in between (their class names); ``output``: the source module whose output is the
    model output, directly or through Identity/Dropout only (``None`` otherwise, e.g. after an
    activation, a reshape or a mean);
    ``called``: names of modules called during the traced forward; ``skips[p]``: the sinks that
    receive ``p``'s output as one summand of a residual sum (module docstring).
    """

    consumers: dict[str, tuple[str, ...]]
    producers: dict[str, tuple[str, ...]]
    via: dict[tuple[str, str], tuple[str, ...]]
    output: str | None
    called: frozenset[str]
    skips: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def single_consumer(self, name: str) -> str | None:
        """The only consumer of ``name``, or ``None`` (none or several)."""
        c = self.consumers.get(name, ())
        return c[0] if len(c) == 1 else None

    def single_producer(self, name: str) -> str | None:
        """The only producer of ``name``, or ``None``."""
        p = self.producers.get(name, ())
        return p[0] if len(p) == 1 else None


PASS_THROUGH = frozenset({"Identity", "Dropout"})
"""``via`` labels that leave a tensor as it is (evaluation mode)."""


def graph_passes_through(graph: ModelGraph, producer: str, consumer: str) -> bool:
    """Whether the edge ``producer → consumer`` carries the producer's output unchanged (through
    Identity/Dropout only): what detectors need whose identity would not survive an activation
    or a pooling in between (the LayerNorm kernel)."""
    return set(graph.via.get((producer, consumer), ("missing",))) <= PASS_THROUGH


_ADDS = (torch.add, Tensor.add, Tensor.__add__, Tensor.__radd__, Tensor.__iadd__, Tensor.add_)


class _Summands(TorchFunctionMode):
    """Records, per sum tensor (by id), the sources whose raw output is one of its summands, and
    carries a source's provenance through the functions of `FUNCTIONAL_ELEMENTWISE`."""

    def __init__(
        self,
        origin: dict[int, tuple[str, tuple[str, ...]]],
        keep: list[Tensor],
        channels: dict[str, int | None],
    ):
        super().__init__()
        self.origin = origin
        self.keep = keep
        self.channels = channels
        self.summands: dict[int, frozenset[str]] = {}

    def _sources(self, t: object) -> frozenset[str]:
        if not isinstance(t, Tensor):
            return frozenset()
        direct = self.origin.get(id(t))
        own = frozenset([direct[0]]) if direct is not None and not direct[1] else frozenset()
        return own | self.summands.get(id(t), frozenset())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        label = FUNCTIONAL_ELEMENTWISE.get(func)
        if label is not None:
            return self._elementwise(func, label, args, kwargs)
        if func in CHANNELWISE:
            return self._channelwise(func, args, kwargs)
        if func not in _ADDS or len(args) != 2 or kwargs.get("alpha", 1) != 1:
            out = func(*args, **kwargs)
            if args and out is args[0] and in_place(func):  # ``h.tanh_()``, ``z *= 2``: no
                self.origin.pop(id(out), None)  # longer the source's output, nor a plain sum
                self.summands.pop(id(out), None)
            return out
        srcs = self._sources(args[0]) | self._sources(args[1])
        out = func(*args, **kwargs)
        if isinstance(out, Tensor):
            self.origin.pop(id(out), None)  # ``z += f(z)``: z is no longer a raw output
            if srcs:
                self.summands[id(out)] = srcs
                self.keep.append(out)
        return out

    def _channelwise(self, func, args: tuple, kwargs: dict) -> object:
        src = self.origin.get(id(args[0])) if args and isinstance(args[0], Tensor) else None
        out = func(*args, **kwargs)
        if src is None:
            return out
        label = channel_label(func, args, kwargs, out, self.channels.get(src[0]))
        if label is not None:
            self.origin[id(out)] = (src[0], (*src[1], label))
            self.keep.append(out)
        return out

    def _elementwise(self, func, label: str, args: tuple, kwargs: dict) -> object:
        src = self.origin.get(id(args[0])) if args and isinstance(args[0], Tensor) else None
        out = func(*args, **kwargs)
        if src is not None and isinstance(out, Tensor) and out.shape == args[0].shape:
            self.origin[id(out)] = (src[0], (*src[1], label))
            self.keep.append(out)
        return out


def trace_graph(model: nn.Module, x: Tensor) -> ModelGraph:
    """Run ``model(x)`` once with hooks and return the `ModelGraph` (see the module docstring)."""
    origin: dict[int, tuple[str, tuple[str, ...]]] = {}
    keep: list[Tensor] = []  # keeps tensors alive so that ids are not reused
    edges: dict[tuple[str, str], tuple[str, ...]] = {}
    skip_edges: dict[str, list[str]] = {}
    called: set[str] = set()
    handles = []
    channels = {n: channels_first_ndim(m) for n, m in model.named_modules() if _is_source(m)}
    sums = _Summands(origin, keep, channels)

    entry: dict[str, list] = {}  # per elementwise module: its input's origin at each call

    def pre(name: str, mod: nn.Module):
        def fn(_m: nn.Module, inputs: tuple) -> None:
            called.add(name)
            if not inputs or not isinstance(inputs[0], Tensor):
                return
            src = origin.get(id(inputs[0]))
            if _is_elementwise(mod):  # read before an in-place call relabels its input
                entry.setdefault(name, []).append(src)
            if src is not None and _is_sink(mod):
                edges[(src[0], name)] = src[1]
            if _is_sink(mod):
                for p in sorted(sums.summands.get(id(inputs[0]), ())):
                    if p != name and name not in skip_edges.setdefault(p, []):
                        skip_edges[p].append(name)

        return fn

    def post(name: str, mod: nn.Module):
        def fn(_m: nn.Module, inputs: tuple, out: object) -> None:
            if not isinstance(out, Tensor):
                return
            if _is_source(mod):
                origin[id(out)] = (name, ())
                keep.append(out)
            elif _is_elementwise(mod) and inputs and isinstance(inputs[0], Tensor):
                src = entry[name].pop()
                if src is not None:
                    origin[id(out)] = (src[0], (*src[1], type(mod).__name__))
                    keep.append(out)

        return fn

    for name, mod in model.named_modules():
        if not name:
            continue
        handles.append(mod.register_forward_pre_hook(pre(name, mod)))
        handles.append(mod.register_forward_hook(post(name, mod)))
    try:
        with torch.no_grad(), sums:
            out = model(x)
    finally:
        for h in handles:
            h.remove()
    output = None
    if isinstance(out, Tensor) and id(out) in origin:
        src, via = origin[id(out)]
        if set(via) <= {"Identity", "Dropout"}:  # the source's output itself, not φ of it
            output = src
    consumers: dict[str, list[str]] = {}
    producers: dict[str, list[str]] = {}
    for p, c in edges:
        consumers.setdefault(p, []).append(c)
        producers.setdefault(c, []).append(p)
    return ModelGraph(
        consumers={k: tuple(v) for k, v in consumers.items()},
        producers={k: tuple(v) for k, v in producers.items()},
        via=dict(edges),
        output=output,
        called=frozenset(called),
        skips={k: tuple(v) for k, v in skip_edges.items()},
    )
