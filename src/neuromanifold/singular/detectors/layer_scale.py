"""Layer-scale rescaling: a block's output projection against the learned scale after it.

A layer scale multiplies the output of a residual branch by a learned per-feature vector,
``y = γ ⊙ (W h + b)`` (timm's ``LayerScale`` module, as in DeiT-III and ViTs built with
``init_values``, ``LayerScale2d`` per conv channel, Hugging Face's ``Dinov2LayerScale``). A scale
kept as a parameter of the block itself (timm's CaiT ``gamma_1``, its ConvNeXt blocks'
``gamma``, torchvision's ConvNeXt ``layer_scale``) is not matched. Feature ``j`` is
``γ_j (W_j h + b_j)``, so

    ``(W_j, b_j, γ_j) → (c W_j, c b_j, γ_j / c)``,  ``c > 0``,

leaves the model unchanged: a curved gauge (spec §6.5, per-unit rescalings) with tangent
``(W_j, b_j, −γ_j)`` — the `UnitRescale` orbit with the projection as producer and the scale, a
one-dimensional tensor indexed by the unit, as consumer. The layer scale is matched by name
(`graph.layer_scale_param`), its producer from the data-flow graph (one Linear or supported
convolution, through Identity/Dropout only), and the symmetry is certified by evaluation
(`rescale.certify`: a projection output used anywhere else, or a scale entering other than as a
factor, is no symmetry). A scale of one entry, ``y = γ·(W h + b)`` (``γ`` of shape ``(1,)``),
rescales the whole projection instead: ``(W, b, γ) → (c W, c b, γ / c)``, one tangent
``(W, b, −γ)`` (`ScalarRescale`; s28 trial EXOTIC #2, never proposed). Candidate
``"layer-scale"``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from neuromanifold.singular.blocks import is_supported_block
from neuromanifold.singular.detectors.base import Candidate, DetectionContext
from neuromanifold.singular.detectors.graph import graph_passes_through, layer_scale_param
from neuromanifold.singular.detectors.one_sided import check_cap
from neuromanifold.singular.detectors.rescale import (
    UnitRescale,
    action_derivative,
    rescale_candidate,
)

__all__ = ["LayerScaleDetector", "ScalarRescale"]


@dataclass(frozen=True)
class ScalarRescale:
    """The orbit ``(producers, γ) → (c·producers, γ / c)``, ``c > 0``, of a one-entry scale
    ``γ`` (``consumers = (γ,)``) and every entry of the producers (the projection's weight and
    bias): one unit. The interface is that of `rescale.UnitRescale` (``n_units``,
    ``strength``, ``tangent_norms``, ``tangent``, ``act``; degree 1)."""

    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    degree: int = 1

    def n_units(self, params: dict[str, Tensor]) -> int:
        """One: the whole projection."""
        return 1

    def _norm(self, params: dict[str, Tensor], keys: tuple[str, ...]) -> Tensor:
        return torch.sqrt(sum(params[k].double().pow(2).sum() for k in keys)).reshape(1)

    def strength(self, params: dict[str, Tensor]) -> Tensor:
        """``‖W‖·|γ|``, shape ``(1,)``."""
        return self._norm(params, self.producers[:1]) * self._norm(params, self.consumers)

    def tangent_norms(self, params: dict[str, Tensor]) -> Tensor:
        """``‖(W, b, −γ)‖``, shape ``(1,)``."""
        return self._norm(params, (*self.producers, *self.consumers))

    def tangent(self, params: dict[str, Tensor], j: int) -> dict[str, Tensor]:
        """``(W, b, −γ)`` (``j`` is 0: the one unit)."""
        out = {k: params[k].clone() for k in self.producers}
        out.update({k: -params[k] for k in self.consumers})
        return out

    def tangent_reference(self, params: dict[str, Tensor], j: int) -> dict[str, Tensor]:
        """Oracle of `tangent` (`rescale.action_derivative`)."""
        return action_derivative(self, params, j)

    def act(self, params: dict[str, Tensor], factors: Tensor) -> dict[str, Tensor]:
        """``(c·W, c·b, γ / c)`` for ``factors = (c,)``."""
        c = factors.reshape(())
        out = {k: params[k] * c for k in self.producers}
        out.update({k: params[k] / c for k in self.consumers})
        return out


class LayerScaleDetector:
    """Per-feature rescaling of a layer scale against the projection it scales (curved gauge)."""

    name = "layer-scale"

    def __init__(self, *, max_units: int | None = None) -> None:
        """``max_units``: cap on the feature tangents kept as generators (an int ``≥ 1``;
        ``None``: the ``MAX_GENERATOR_ENTRIES`` budget)."""
        self.max_units = None if max_units is None else check_cap("max_units", max_units)

    def applies_to(self, module: nn.Module) -> bool:
        """Layer-scale modules (`graph.layer_scale_param`)."""
        return layer_scale_param(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified curved-gauge candidate for the scale and its producer, or nothing."""
        scale = layer_scale_param(module)
        p = ctx.graph.single_producer(name)
        if scale is None or p is None or not graph_passes_through(ctx.graph, p, name):
            return []
        prod = ctx.model.get_submodule(p)
        gamma = f"{name}.{scale}" if name else scale
        width = ctx.params[gamma].numel()
        if not is_supported_block(prod) or width not in (1, prod.weight.shape[0]):
            return []
        producers = (f"{p}.weight", *([f"{p}.bias"] if prod.bias is not None else []))
        orbit: UnitRescale | ScalarRescale = (
            ScalarRescale(producers, (gamma,)) if width == 1 else UnitRescale(producers, (gamma,))
        )
        return rescale_candidate(
            ctx, orbit, layers=(p, name), detector="layer-scale", max_units=self.max_units
        )
