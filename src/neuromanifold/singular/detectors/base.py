"""The detector protocol, candidate directions and the context detectors read from.

A detector names candidate dead directions for one module type. It is one class with

* ``name``: a short label (``"linear"``, ``"layernorm"``, …);
* ``applies_to(module) -> bool``: whether it handles this module (a module handled by no detector
  is reported by the read as *not covered*, never skipped silently);
* ``propose(name, module, ctx) -> list[Candidate]``: the candidates, read from the module's
  parameters, its K-FAC factors ``ctx.factors`` and the module graph ``ctx.graph``.

To support a new layer type, write such a class and add it to a `DetectorRegistry`
(``registry.register(MyDetector())``, or pass ``detectors=[...]`` to `read`); to try it on a model
first, ``MyDetector().propose(name, module, DetectionContext.from_model(model, x, family))``.
Candidates are unit vectors in the parameters they touch (``u: dict[str, Tensor]`` keyed like
``model.named_parameters()``, missing names = zero), with a provenance label and, for gauges, the
closed-form generators of the orbit at θ0 (used by the classifier's curved-gauge test).

Tied parameters (one ``nn.Parameter`` registered under several names, e.g. a language-model
decoder sharing the word-embedding matrix) are keyed by their first name in
``model.named_parameters()``, the only one the read knows. A detector builds keys from its own
module's name and returns ``ctx.canonical(candidates)``, which rewrites alias keys to that name
(summing, then renormalising, when one candidate touches both); ``ctx.params`` also answers alias
keys. The read then measures the tied direction as it is: a move that is a gauge for the module
alone need not be one when the same matrix is also used elsewhere.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.graph import ModelGraph, trace_graph
from neuromanifold.singular.factors import Factors, kfac_factors

__all__ = [
    "Candidate",
    "DetectionContext",
    "Detector",
    "GaugeKind",
    "normalise",
    "parameter_aliases",
    "qualified",
]

GaugeKind = Literal["flat", "curved"]


def normalise(u: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``u/‖u‖`` over all entries (float64); raises ValueError for a zero direction."""
    norm = torch.sqrt(sum((v.double() ** 2).sum() for v in u.values()))
    if not float(norm) > 0.0:
        raise ValueError("candidate direction is zero")
    return {k: (v.double() / norm) for k, v in u.items()}


def qualified(module: str, leaf: str) -> str:
    """The parameter key of ``leaf`` in the module named ``module`` (the root module: ``""``).

    >>> qualified("blocks.0.fc1", "weight"), qualified("", "bias")
    ('blocks.0.fc1.weight', 'bias')
    """
    return f"{module}.{leaf}" if module else leaf


@dataclass(frozen=True, eq=False)
class Candidate:
    """One proposed direction.

    Attributes:
        layers: module names the direction touches (a duality chain spans several).
        detector: provenance label (``"kfac-joint"``, ``"kfac-A"``, ``"kfac-G"``, ``"duality"``,
            ``"ln-kernel"``, ``"qk-rotation"``, ``"vo-rescale"``, ``"key-bias"``, ``"value-bias"``,
            ``"norm-shift"``, ``"layer-scale"``, ``"ce-shift"``,
            ``"bn-shift"``, ``"gn-shift"``, ``"bn-rescale"``, ``"relu-rescale"``, ``"norm-scale"``,
            ``"glu-rescale"``, ``"glu-dead-dimension"``, ``"qk-norm-rescale"``,
            ``"embedding-unseen"``, ``"embedding-mean"``, ``"qk-pair"``).
        u: unit direction, ``dict[str, Tensor]`` (float64).
        ratio: the eigenvalue ratio that selected it (``α/α_max``, ``γ/γ_max`` or their product),
            ``None`` for closed-form candidates.
        gauge: ``"flat"``/``"curved"`` when the candidate is a known gauge by construction.
        gauge_generators: closed-form orbit tangents at θ0 (curved gauges), else ``None``.
        info: JSON-safe extras, copied by `read` into the `DirectionRecord`'s ``info`` (e.g.
            ``closed_form_cos`` and ``kernel_dim`` of the LN kernel). A detector whose cap cut
            candidates of this kind at this block sets ``"truncated": {"cap": c, "found": n,
            "kept": c}`` (``n`` qualified, ``c`` proposed): the reading then lists fewer
            directions of that kind than the detector found.
    """

    layers: tuple[str, ...]
    detector: str
    u: dict[str, Tensor]
    ratio: float | None = None
    gauge: GaugeKind | None = None
    gauge_generators: tuple[dict[str, Tensor], ...] | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def flat(self) -> Tensor:
        """The direction flattened over its sorted keys (for overlaps between candidates)."""
        return torch.cat([self.u[k].reshape(-1) for k in sorted(self.u)])

    def overlap(self, other: Candidate) -> float:
        """``|⟨u, v⟩| = |Σ_k ⟨u_k, v_k⟩|`` over the keys both touch (both are unit vectors).

        One dot product per shared tensor (``torch.dot`` of flattened views), summed in float64:
        no temporary of the parameters' size is formed, so deduplicating ``n`` candidates costs
        ``O(n² P)`` arithmetic and no allocation. Oracle: `overlap_reference`.
        """
        total = 0.0
        for k in sorted(self.u.keys() & other.u.keys()):  # a fixed order: `_validate.dot`
            a, b = self.u[k], other.u[k]
            if a.shape != b.shape:
                raise ValueError(
                    f"overlap: tensor {k!r} has shape {tuple(a.shape)} in one candidate and "
                    f"{tuple(b.shape)} in the other; expected the same parameter shape"
                )
            total += float(torch.dot(a.reshape(-1).double(), b.reshape(-1).double()))
        return abs(total)

    def overlap_reference(self, other: Candidate) -> float:
        """Brute-force oracle of `overlap`: both directions written out over the union of keys
        (zeros where a candidate does not touch a tensor), then one dot product."""
        keys = sorted(self.u.keys() | other.u.keys())
        like = {k: (self.u[k] if k in self.u else other.u[k]).double() for k in keys}
        x = [self.u.get(k, torch.zeros_like(like[k])).double().reshape(-1) for k in keys]
        y = [other.u.get(k, torch.zeros_like(like[k])).double().reshape(-1) for k in keys]
        return abs(float(torch.cat(x) @ torch.cat(y)))


def parameter_aliases(model: nn.Module) -> dict[str, str]:
    """``{alias: name}`` for every parameter registered under more than one name (``name`` is the
    first, the one ``model.named_parameters()`` reports).

    >>> emb = nn.Embedding(4, 3)
    >>> head = nn.Linear(3, 4, bias=False)
    >>> head.weight = emb.weight
    >>> parameter_aliases(nn.ModuleDict({"emb": emb, "head": head}))
    {'head.weight': 'emb.weight'}
    """
    first: dict[int, str] = {}
    out = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        canon = first.setdefault(id(p), name)
        if canon != name:
            out[name] = canon
    return out


class _AliasedParams(dict):
    """A parameter dict that also answers the alias names of tied parameters."""

    def __init__(self, params: Mapping[str, Tensor], aliases: Mapping[str, str]) -> None:
        super().__init__(params)
        self.aliases = dict(aliases)

    def __missing__(self, key: str) -> Tensor:
        if key in self.aliases:
            return self[self.aliases[key]]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        if key in self.aliases:
            return dict.get(self, self.aliases[key], default)
        return default


@dataclass(frozen=True, eq=False)
class DetectionContext:
    """What detectors read: float64 model copy and parameters, factors, graph, family, data.

    ``aliases`` (filled from ``model``) maps alias names of tied parameters to their first name;
    ``params`` then answers both (module docstring). ``forward_chunk``: samples per forward pass
    of the detectors' own passes over ``data`` (the certifications of
    `neuromanifold.singular.detectors.rescale.relative_change`), ``None`` for their default;
    ``cache_bytes``: the most bytes of model outputs those passes may keep between them,
    ``None`` for their default. `read` sets both under a memory budget (`plan_memory`).
    """

    model: nn.Module
    params: dict[str, Tensor]
    factors: Factors
    graph: ModelGraph
    family: Any
    data: Tensor
    cache: dict[str, Any] = field(default_factory=dict)
    forward_chunk: int | None = None
    cache_bytes: int | None = None
    aliases: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        aliases = parameter_aliases(self.model)
        object.__setattr__(self, "aliases", aliases)
        if aliases:
            object.__setattr__(self, "params", _AliasedParams(self.params, aliases))

    @classmethod
    def from_model(
        cls, model: nn.Module, data: Tensor, family: Any, *, graph_samples: int = 8
    ) -> DetectionContext:
        """A context for trying detectors outside `read` (e.g. a new one): a float64, eval-mode
        deep copy of ``model`` (the caller's module is not touched), its K-FAC/KFC factors over
        ``data`` (`kfac_factors`, ``family`` the output family) and the data-flow graph traced on
        the first ``graph_samples`` samples (`trace_graph`). `read` builds its own context from
        its working copy (which also rewrites Hugging Face ``Conv1D`` and routes fused attention
        through differentiable kernels)."""
        work = copy.deepcopy(model).to(torch.float64).eval()
        return cls(
            model=work,
            params={k: v.detach() for k, v in work.named_parameters()},
            factors=kfac_factors(work, data, family),
            graph=trace_graph(work, data[:graph_samples]),
            family=family,
            data=data,
        )

    def canonical(self, candidates: list[Candidate]) -> list[Candidate]:
        """``candidates`` with alias keys rewritten to the first parameter names (directions
        summed where two names of one tensor meet, ``u`` renormalised)."""
        if not self.aliases:
            return candidates
        out = []
        for c in candidates:
            if not any(k in self.aliases for k in c.u) and not any(
                k in self.aliases for g in (c.gauge_generators or ()) for k in g
            ):
                out.append(c)
                continue
            gens = None
            if c.gauge_generators is not None:
                gens = tuple(self._rekey(g) for g in c.gauge_generators)
            aliased = sorted({k for k in c.u if k in self.aliases})
            info = {**c.info, "tied": {k: self.aliases[k] for k in aliased}}
            out.append(replace(c, u=normalise(self._rekey(c.u)), gauge_generators=gens, info=info))
        return out

    def _rekey(self, u: Mapping[str, Tensor]) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for k, v in u.items():
            name = self.aliases.get(k, k)
            out[name] = out[name] + v if name in out else v
        return out

    def param(self, module_name: str, leaf: str) -> Tensor | None:
        """The float64 parameter ``<module_name>.<leaf>`` or ``None``."""
        key = f"{module_name}.{leaf}" if module_name else leaf
        return self.params.get(key)


@runtime_checkable
class Detector(Protocol):
    """One detector per layer type (see the module docstring for the protocol)."""

    name: str

    def applies_to(self, module: nn.Module) -> bool:
        """Whether this detector handles ``module``."""
        ...

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """Candidate directions for module ``name``."""
        ...
