"""Which module feeds which: the data-flow edges the detectors need, from one hooked forward.

An edge ``p → c`` is recorded when module ``c`` receives as its first input a tensor produced by
module ``p`` either directly or through a chain of elementwise modules (activations, dropout,
identity; classes named in ``ELEMENTWISE_NAMES``; any module with a truthy ``elementwise``
attribute). Sources are supported blocks,
normalisation layers and embeddings; consumers are those and ``nn.MultiheadAttention`` (its query
input); functional calls (``F.relu`` inside a ``forward``), reshapes
and residual additions break the chain, so no edge is drawn across them (the duality join and the
LayerNorm lift are then not attempted, which is conservative).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = ["ELEMENTWISE", "ELEMENTWISE_NAMES", "ModelGraph", "trace_graph"]

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
)
_SOURCES: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.LayerNorm,
    nn.RMSNorm,
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
    model output (``None`` if the output is not one, e.g. after a reshape or a mean);
    ``called``: names of modules called during the traced forward.
    """

    consumers: dict[str, tuple[str, ...]]
    producers: dict[str, tuple[str, ...]]
    via: dict[tuple[str, str], tuple[str, ...]]
    output: str | None
    called: frozenset[str]

    def single_consumer(self, name: str) -> str | None:
        """The only consumer of ``name``, or ``None`` (none or several)."""
        c = self.consumers.get(name, ())
        return c[0] if len(c) == 1 else None

    def single_producer(self, name: str) -> str | None:
        """The only producer of ``name``, or ``None``."""
        p = self.producers.get(name, ())
        return p[0] if len(p) == 1 else None


def trace_graph(model: nn.Module, x: Tensor) -> ModelGraph:
    """Run ``model(x)`` once with hooks and return the `ModelGraph` (see the module docstring)."""
    origin: dict[int, tuple[str, tuple[str, ...]]] = {}
    keep: list[Tensor] = []  # keeps tensors alive so that ids are not reused
    edges: dict[tuple[str, str], tuple[str, ...]] = {}
    called: set[str] = set()
    handles = []

    def pre(name: str, mod: nn.Module):
        def fn(_m: nn.Module, inputs: tuple) -> None:
            called.add(name)
            if not inputs or not isinstance(inputs[0], Tensor):
                return
            src = origin.get(id(inputs[0]))
            if src is not None and isinstance(mod, _SINKS):
                edges[(src[0], name)] = src[1]

        return fn

    def post(name: str, mod: nn.Module):
        def fn(_m: nn.Module, inputs: tuple, out: object) -> None:
            if not isinstance(out, Tensor):
                return
            if isinstance(mod, _SOURCES):
                origin[id(out)] = (name, ())
                keep.append(out)
            elif _is_elementwise(mod) and inputs and isinstance(inputs[0], Tensor):
                src = origin.get(id(inputs[0]))
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
        with torch.no_grad():
            out = model(x)
    finally:
        for h in handles:
            h.remove()
    output = None
    if isinstance(out, Tensor) and id(out) in origin:
        output = origin[id(out)][0]
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
    )
