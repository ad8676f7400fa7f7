"""Closed-form curved gauge: a layer's output channel scaled against the BatchNorm it feeds.

In evaluation mode a BatchNorm channel is ``y_c = γ_c (x_c − μ_c)/σ_c + β_c`` with fixed running
statistics (``σ_c = √(running_var_c + eps)``). When ``x_c`` is output channel ``c`` of a Linear
or convolution (weight row ``w_c``, bias ``b_c`` if any) whose output reaches nothing but the
BatchNorm, unchanged (``p = 1``) or through positively homogeneous steps of total degree ``p``
(a ReLU or LeakyReLU ``p = 1``, a squared ReLU ``p = 2``, channelwise pooling; Linear → ReLU →
BatchNorm, s26c audit RERUN2 N5), scaling the channel by ``a > 0`` scales ``x_c`` by ``a^p``,
and the orbit

    (w_c, b_c, γ_c, β_c) → (a·w_c, a·b_c, γ_c/a^p, β_c − (γ_c μ_c/σ_c)(1 − a^{−p})),    a > 0,

leaves the model unchanged: ``(γ_c/a^p)(a^p x_c − μ_c)/σ_c = γ_c x_c/σ_c − γ_c μ_c/(a^p σ_c)``,
and the shift of ``β`` restores the last term. Unlike the factor orbits of
`neuromanifold.singular.detectors.rescale` it moves ``β`` by an amount affine in ``a^{−p}``; its
tangent at ``a = 1`` is

    τ_c = (w_c, b_c, −p·γ_c, −p·γ_c μ_c/σ_c)    (zeros elsewhere),

and the orbit is curved (a straight probe reads an apparent order 2, spec §6.5). A channel whose
input ``x_c`` is zero on every probe sample (a ReLU that never fires) reads flat along its
straight line instead, so the channel read first is the one of largest strength times its RMS
input ``√(running_var_c + running_mean_c²)`` (`BatchNormRescale.activity`: the running
statistics, the same on every rank of a sharded read). ``"bn-rescale"`` proposes one certified
curved-gauge candidate per (producer, BatchNorm) pair through `rescale_candidate` (the leading
channel's tangent, every channel's as generators; s26 trial CNN #8 found the orbit unproposed).
With the producer's bias and nothing between, the same pair also has the flat lines of
`neuromanifold.singular.detectors.batchnorm_shift`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.base import Candidate, DetectionContext, qualified
from neuromanifold.singular.detectors.batchnorm_shift import (
    channel_producer,
    eval_affine_channels,
)
from neuromanifold.singular.detectors.one_sided import check_cap
from neuromanifold.singular.detectors.rescale import action_derivative, rescale_candidate
from neuromanifold.singular.detectors.rescale_detectors import producer_keys

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
        rms_input: ``√(running_var_c + running_mean_c²)`` per channel (float64; ``None``: every
            channel counts as excited).
        degree: ``p``, the degree of the steps between producer and BatchNorm.
    """

    producers: tuple[str, ...]
    consumers: tuple[str, str]
    mean_over_std: Tensor
    rms_input: Tensor | None = None
    degree: int = 1

    def n_units(self, params: dict[str, Tensor]) -> int:
        """Channels: the producer weight's length along dimension 0."""
        return int(params[self.producers[0]].shape[0])

    def strength(self, params: dict[str, Tensor]) -> Tensor:
        """``‖w_c‖ · |γ_c|`` per channel (shape ``(C,)``)."""
        w = params[self.producers[0]].double()
        return w.reshape(w.shape[0], -1).norm(dim=1) * params[self.consumers[0]].double().abs()

    def activity(self) -> Tensor | None:
        """How strongly each channel is excited where the BatchNorm reads it, shape ``(C,)``:
        ``rms_input`` (`neuromanifold.singular.detectors.rescale.unit_activity`)."""
        return self.rms_input

    def tangent(self, params: dict[str, Tensor], j: int) -> dict[str, Tensor]:
        """``τ_j = (w_j, b_j, −p·γ_j, −p·γ_j μ_j/σ_j)``, zero at every other channel."""
        gamma_key, beta_key = self.consumers
        out: dict[str, Tensor] = {}
        for key in self.producers:
            d = torch.zeros_like(params[key])
            d[j] = params[key][j]
            out[key] = d
        gamma = params[gamma_key]
        out[gamma_key] = torch.zeros_like(gamma)
        out[gamma_key][j] = -self.degree * gamma[j]
        out[beta_key] = torch.zeros_like(params[beta_key])
        out[beta_key][j] = -self.degree * gamma[j] * self.mean_over_std[j].to(gamma.dtype)
        return out

    def tangent_norms(self, params: dict[str, Tensor]) -> Tensor:
        """``‖τ_j‖`` per channel (shape ``(C,)``)."""
        total = torch.zeros(self.n_units(params), dtype=torch.float64)
        for key in self.producers:
            p = params[key].double()
            total = total + p.reshape(p.shape[0], -1).pow(2).sum(1).to(total.device)
        gamma = params[self.consumers[0]].double().to(total.device)
        m = self.mean_over_std.double().to(total.device)
        return torch.sqrt(total + self.degree**2 * gamma**2 * (1.0 + m**2))

    def act(self, params: dict[str, Tensor], factors: Tensor) -> dict[str, Tensor]:
        """The group element with ``a = factors`` (shape ``(C,)``, positive): producers' channel
        ``c`` times ``a_c``, ``γ_c`` over ``a_c^p``, ``β_c − γ_c (μ_c/σ_c)(1 − a_c^{−p})``."""
        gamma_key, beta_key = self.consumers
        out: dict[str, Tensor] = {}
        for key in self.producers:
            p = params[key]
            out[key] = p * factors.to(p.dtype).reshape(-1, *([1] * (p.dim() - 1)))
        gamma = params[gamma_key]
        inverse = factors.to(gamma.dtype).pow(-self.degree)
        out[gamma_key] = gamma * inverse
        m = self.mean_over_std.to(gamma.dtype)
        out[beta_key] = params[beta_key] - gamma * m * (1.0 - inverse)
        return out

    def tangent_reference(self, params: dict[str, Tensor], j: int) -> dict[str, Tensor]:
        """Oracle of `tangent`: ``d/da_j act(params, a)`` at ``a = 𝟙`` (`action_derivative`)."""
        return action_derivative(self, params, j)


class BatchNormScaleDetector:
    """The producer-channel ↔ BatchNorm-scale orbit (curved gauge; module docstring)."""

    name = "bn-rescale"

    def __init__(self, *, max_units: int | None = None) -> None:
        """``max_units``: cap on the channel tangents kept as generators (``None``: the
        ``MAX_GENERATOR_ENTRIES`` budget of `rescale_candidate`)."""
        self.max_units = None if max_units is None else check_cap("max_units", max_units)

    def applies_to(self, module: nn.Module) -> bool:
        """Affine BatchNorms with running statistics (proposes only behind a producer whose
        output reaches the BatchNorm alone, unchanged or through homogeneous steps)."""
        return eval_affine_channels(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified curved-gauge candidate for the pair, or nothing."""
        channels = eval_affine_channels(module)
        if channels is None:
            return []
        found = channel_producer(ctx, name, channels, with_bias=False, homogeneous=True)
        if found is None:
            return []
        producer, degree = found
        var = module.running_var.to(torch.float64)
        mean = module.running_mean.to(torch.float64)
        orbit = BatchNormRescale(
            producers=tuple(producer_keys(producer, ctx.model.get_submodule(producer))),
            consumers=(qualified(name, "weight"), qualified(name, "bias")),
            mean_over_std=mean / torch.sqrt(var + module.eps),
            rms_input=torch.sqrt(var + mean**2),
            degree=degree,
        )
        return rescale_candidate(
            ctx,
            orbit,
            layers=(producer, name),
            detector="bn-rescale",
            max_units=self.max_units,
        )
