"""The detector protocol, candidate directions and the context detectors read from.

A detector names candidate dead directions for one module type. It is one class with

* ``name``: a short label (``"linear"``, ``"layernorm"``, …);
* ``applies_to(module) -> bool``: whether it handles this module (a module handled by no detector
  is reported by the read as *not covered*, never skipped silently);
* ``propose(name, module, ctx) -> list[Candidate]``: the candidates, read from the module's
  parameters, its K-FAC factors ``ctx.factors`` and the module graph ``ctx.graph``.

To support a new layer type, write such a class and add it to a `DetectorRegistry`
(``registry.register(MyDetector())``, or pass ``detectors=[...]`` to `read`). Candidates are unit
vectors in the parameters they touch (``u: dict[str, Tensor]`` keyed like
``model.named_parameters()``, missing names = zero), with a provenance label and, for gauges, the
closed-form generators of the orbit at θ0 (used by the classifier's curved-gauge test).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.graph import ModelGraph
from neuromanifold.singular.factors import Factors

__all__ = ["Candidate", "DetectionContext", "Detector", "GaugeKind", "normalise"]

GaugeKind = Literal["flat", "curved"]


def normalise(u: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``u/‖u‖`` over all entries (float64); raises ValueError for a zero direction."""
    norm = torch.sqrt(sum((v.double() ** 2).sum() for v in u.values()))
    if not float(norm) > 0.0:
        raise ValueError("candidate direction is zero")
    return {k: (v.double() / norm) for k, v in u.items()}


@dataclass(frozen=True, eq=False)
class Candidate:
    """One proposed direction.

    Attributes:
        layers: module names the direction touches (a duality chain spans several).
        detector: provenance label (``"kfac-joint"``, ``"kfac-A"``, ``"kfac-G"``, ``"duality"``,
            ``"ln-kernel"``, ``"qk-rotation"``, ``"vo-rescale"``, ``"ce-shift"``,
            ``"relu-rescale"``, ``"embedding-unseen"``).
        u: unit direction, ``dict[str, Tensor]`` (float64).
        ratio: the eigenvalue ratio that selected it (``α/α_max``, ``γ/γ_max`` or their product),
            ``None`` for closed-form candidates.
        gauge: ``"flat"``/``"curved"`` when the candidate is a known gauge by construction.
        gauge_generators: closed-form orbit tangents at θ0 (curved gauges), else ``None``.
        info: JSON-safe extras (e.g. ``closed_form_cos`` of the LN kernel).
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
        """``|⟨u, v⟩|`` over the union of keys (both are unit vectors)."""
        common = set(self.u) & set(other.u)
        return abs(float(sum((self.u[k] * other.u[k]).sum() for k in common)))


@dataclass(frozen=True, eq=False)
class DetectionContext:
    """What detectors read: float64 model copy and parameters, factors, graph, family, data."""

    model: nn.Module
    params: dict[str, Tensor]
    factors: Factors
    graph: ModelGraph
    family: Any
    data: Tensor
    cache: dict[str, Any] = field(default_factory=dict)

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
