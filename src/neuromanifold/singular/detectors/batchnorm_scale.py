"""Closed-form curved gauge: a layer's output channel scaled against the BatchNorm it feeds.

In evaluation mode a BatchNorm channel is ``y_c = γ_c (x_c − μ_c)/σ_c + β_c`` with fixed running
statistics (``σ_c = √(running_var_c + eps)``). When ``x_c`` is output channel ``c`` of a Linear
or convolution (weight row ``w_c``, bias ``b_c`` if any) whose output reaches nothing but the
BatchNorm, the orbit

    (w_c, b_c, γ_c, β_c) → (a·w_c, a·b_c, γ_c/a, β_c − (γ_c μ_c/σ_c)(1 − 1/a)),    a > 0,

leaves the model unchanged: ``(γ_c/a)(a x_c − μ_c)/σ_c = γ_c x_c/σ_c − γ_c μ_c/(a σ_c)``, and
the shift of ``β`` restores the last term. Unlike the factor orbits of
`neuromanifold.singular.detectors.rescale` it moves ``β`` by an amount affine in ``1/a``; its
tangent at ``a = 1`` is

    τ_c = (w_c, b_c, −γ_c, −γ_c μ_c/σ_c)    (zeros elsewhere),

and the orbit is curved (a straight probe reads an apparent order 2, spec §6.5). ``"bn-rescale"``
proposes one certified curved-gauge candidate per (producer, BatchNorm) pair through
`rescale_candidate` (the leading channel's tangent, every channel's as generators; s26 trial CNN
#8 found the orbit unproposed). With the producer's bias the same pair also has the flat lines of
`neuromanifold.singular.detectors.batchnorm_shift`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.base import Candidate, DetectionContext
from neuromanifold.singular.detectors.batchnorm_shift import (
    channel_producer,
    eval_affine_channels,
)
from neuromanifold.singular.detectors.one_sided import check_cap
from neuromanifold.singular.detectors.rescale import action_derivative, rescale_candidate

__all__ = ["BatchNormRescale", "BatchNormScaleDetector"]


@dataclass(frozen=True)
class BatchNormRescale:
    """The orbit of the module docstring for every channel, in the interface `rescale_candidate`
    reads (``n_units``, ``strength``, ``tangent_norms``, ``tangent``, ``act``, ``producers``,
    ``consumers``, ``degree``).

    Attributes:
        producers: the producer's ``weight`` and, if present, ``bias`` (channel along dim 0).
        consumers: the BatchNorm's ``weight`` (γ) and ``bias`` (β).
        mean_over_std: ``μ_c/σ_c`` per channel (float64, fixed: the running statistics).
    """

    producers: tuple[str, ...]
    consumers: tuple[str, str]
    mean_over_std: Tensor
    degree: int = 1

    def n_units(self, params: dict[str, Tensor]) -> int:
        """Channels: the producer weight's length along dimension 0."""
        return int(params[self.producers[0]].shape[0])

    def strength(self, params: dict[str, Tensor]) -> Tensor:
        """``‖w_c‖ · |γ_c|`` per channel (shape ``(C,)``)."""
        w = params[self.producers[0]].double()
        return w.reshape(w.shape[0], -1).norm(dim=1) * params[self.consumers[0]].double().abs()

    def tangent(self, params: dict[str, Tensor], j: int) -> dict[str, Tensor]:
        """``τ_j = (w_j, b_j, −γ_j, −γ_j μ_j/σ_j)``, zero at every other channel."""
        gamma_key, beta_key = self.consumers
        out: dict[str, Tensor] = {}
        for key in self.producers:
            d = torch.zeros_like(params[key])
            d[j] = params[key][j]
            out[key] = d
        gamma = params[gamma_key]
        out[gamma_key] = torch.zeros_like(gamma)
        out[gamma_key][j] = -gamma[j]
        out[beta_key] = torch.zeros_like(params[beta_key])
        out[beta_key][j] = -gamma[j] * self.mean_over_std[j].to(gamma.dtype)
        return out

    def tangent_norms(self, params: dict[str, Tensor]) -> Tensor:
        """``‖τ_j‖`` per channel (shape ``(C,)``)."""
        total = torch.zeros(self.n_units(params), dtype=torch.float64)
        for key in self.producers:
            p = params[key].double()
            total = total + p.reshape(p.shape[0], -1).pow(2).sum(1).to(total.device)
        gamma = params[self.consumers[0]].double().to(total.device)
        m = self.mean_over_std.double().to(total.device)
        return torch.sqrt(total + gamma**2 * (1.0 + m**2))

    def act(self, params: dict[str, Tensor], factors: Tensor) -> dict[str, Tensor]:
        """The group element with ``a = factors`` (shape ``(C,)``, positive): producers' channel
        ``c`` times ``a_c``, ``γ_c`` over ``a_c``, ``β_c − γ_c (μ_c/σ_c)(1 − 1/a_c)``."""
        gamma_key, beta_key = self.consumers
        out: dict[str, Tensor] = {}
        for key in self.producers:
            p = params[key]
            out[key] = p * factors.to(p.dtype).reshape(-1, *([1] * (p.dim() - 1)))
        gamma = params[gamma_key]
        a = factors.to(gamma.dtype)
        out[gamma_key] = gamma / a
        m = self.mean_over_std.to(gamma.dtype)
        out[beta_key] = params[beta_key] - gamma * m * (1.0 - 1.0 / a)
        return out

    def tangent_reference(self, params: dict[str, Tensor], j: int) -> dict[str, Tensor]:
        """Oracle of `tangent`: ``d/da_j act(params, a)`` at ``a = 𝟙`` (`action_derivative`)."""
        return action_derivative(self, params, j)


def _prefix(name: str) -> str:
    return f"{name}." if name else ""


class BatchNormScaleDetector:
    """The producer-channel ↔ BatchNorm-scale orbit (curved gauge; module docstring)."""

    name = "bn-rescale"

    def __init__(self, *, max_units: int | None = None) -> None:
        """``max_units``: cap on the channel tangents kept as generators (``None``: the
        ``MAX_GENERATOR_ENTRIES`` budget of `rescale_candidate`)."""
        self.max_units = None if max_units is None else check_cap("max_units", max_units)

    def applies_to(self, module: nn.Module) -> bool:
        """Affine BatchNorms with running statistics (proposes only behind a producer whose
        output reaches the BatchNorm alone)."""
        return eval_affine_channels(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified curved-gauge candidate for the pair, or nothing."""
        channels = eval_affine_channels(module)
        if channels is None:
            return []
        producer = channel_producer(ctx, name, channels, with_bias=False)
        if producer is None:
            return []
        prod = ctx.model.get_submodule(producer)
        keys = [f"{_prefix(producer)}weight"]
        if getattr(prod, "bias", None) is not None:
            keys.append(f"{_prefix(producer)}bias")
        var = module.running_var.to(torch.float64)
        mean = module.running_mean.to(torch.float64)
        orbit = BatchNormRescale(
            producers=tuple(keys),
            consumers=(f"{_prefix(name)}weight", f"{_prefix(name)}bias"),
            mean_over_std=mean / torch.sqrt(var + module.eps),
        )
        return rescale_candidate(
            ctx,
            orbit,
            layers=(producer, name),
            detector="bn-rescale",
            max_units=self.max_units,
        )
