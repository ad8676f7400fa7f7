"""Closed-form flat gauge: the bias of a layer that feeds an evaluation-mode BatchNorm.

In evaluation mode a BatchNorm channel is a fixed affine map,
``y_c = γ_c (x_c − μ_c)/σ_c + β_c`` (``μ``: running mean, ``σ_c = √(running_var_c + eps)``). When
``x_c`` is output channel ``c`` of a Linear or convolution with a bias ``b`` and that output
reaches nothing but the BatchNorm (through Identity/Dropout), the line

    (b_c, β_c) → (b_c + s, β_c − s·γ_c/σ_c),    s ∈ R,

leaves the model unchanged: one flat gauge per channel, ``C`` in all, each a straight line in
parameter space (F ≡ 0 along it). They are proposed as one candidate on their span (s26 trial
CNN #8: conv + bias → BatchNorm, the commonest CNN layout, had none proposed),

    u ∝ Σ_c (e_{b_c} − (γ_c/σ_c) e_{β_c}),

``"bn-shift"``, with ``info["orbit_dim"] = C``, certified by evaluation
(`neuromanifold.singular.detectors.rescale.relative_change` with distinct shifts ``s_c`` from 1
to 2 over the channels, at most ``CERTIFY_RTOL``): a producer output that also enters a
residual sum, or a bias added along another axis than the BatchNorm's channels, is no symmetry.

The curved orbit of the same pair (the producer's channel scaled against the BatchNorm's scale)
is `neuromanifold.singular.detectors.batchnorm_scale`.
"""

from __future__ import annotations

import torch
from torch import nn

from neuromanifold.singular.detectors.base import (
    Candidate,
    DetectionContext,
    normalise,
    qualified,
)
from neuromanifold.singular.detectors.graph import (
    PASS_THROUGH,
    graph_passes_through,
    graph_scales_through,
)
from neuromanifold.singular.detectors.rescale import CERTIFY_RTOL, relative_change
from neuromanifold.singular.detectors.rescale_detectors import chain_degree

__all__ = ["BatchNormShiftDetector", "channel_producer", "eval_affine_channels"]


def eval_affine_channels(module: nn.Module) -> int | None:
    """Channels ``C`` of an affine BatchNorm that normalises with running statistics, else None."""
    if not isinstance(module, nn.modules.batchnorm._BatchNorm) or not module.affine:
        return None
    if not module.track_running_stats or module.running_var is None:
        return None
    return int(module.weight.shape[0])


def channel_producer(
    ctx: DetectionContext,
    name: str,
    channels: int,
    *,
    with_bias: bool,
    homogeneous: bool = False,
) -> tuple[str, int] | None:
    """The one producer of the BatchNorm ``name`` and the degree ``p`` of the steps between: a
    Linear or (not transposed) convolution with ``channels`` outputs (and a bias when
    ``with_bias``) whose output reaches ``name`` alone, unchanged (``p = 1``) or, when
    ``homogeneous``, also through positively homogeneous steps of total degree ``p``
    (`rescale_detectors.chain_degree`: a ReLU, a squared ReLU, channelwise pooling) or constant
    factors alone (``"Scale"``, p = 1), which carry a channel scaled by ``a > 0`` to the
    BatchNorm scaled by ``a^p``; else None."""
    producer = ctx.graph.single_producer(name)
    if producer is None or ctx.graph.consumers.get(producer, ()) != (name,):
        return None
    if graph_passes_through(ctx.graph, producer, name):
        degree: int | None = 1
    elif homogeneous and graph_scales_through(ctx.graph, producer, name):
        degree = 1  # constant factors only: a channel scaled by a reaches the norm scaled by a
    elif homogeneous:
        via = ctx.graph.via.get((producer, name), ())
        degree = chain_degree([v for v in via if v not in PASS_THROUGH])
    else:
        degree = None
    if degree is None:
        return None
    module = ctx.model.get_submodule(producer)
    if not isinstance(module, nn.Linear | nn.modules.conv._ConvNd):
        return None
    if getattr(module, "transposed", False):  # its weight holds the output channels in dim 1
        return None
    if int(module.weight.shape[0]) != channels:
        return None
    if with_bias and getattr(module, "bias", None) is None:
        return None
    return producer, degree


class BatchNormShiftDetector:
    """The producer-bias ↔ BatchNorm-shift line of every channel (flat gauge; module docstring)."""

    name = "bn-shift"

    def applies_to(self, module: nn.Module) -> bool:
        """Affine BatchNorms with running statistics (proposes only behind a biased producer)."""
        return eval_affine_channels(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified flat-gauge candidate on the span of the ``C`` lines, or nothing."""
        channels = eval_affine_channels(module)
        found = None if channels is None else channel_producer(ctx, name, channels, with_bias=True)
        if found is None:
            return []
        producer = found[0]
        bias, beta = qualified(producer, "bias"), qualified(name, "bias")
        gamma = ctx.params[qualified(name, "weight")].to(torch.float64)
        var = module.running_var.to(device=gamma.device, dtype=torch.float64)
        slope = gamma / torch.sqrt(var + module.eps)  # γ_c/σ_c
        ones = torch.ones_like(slope)
        # distinct shifts per channel: a uniform one is also flat where the bias is added along
        # another axis than the BatchNorm's channels (a Linear on the last dimension of (N, C, L)
        # with L = C), where the C lines are not (s26b audit RERUN N2)
        shift = torch.linspace(1.0, 2.0, channels, dtype=slope.dtype, device=slope.device)
        moved = {
            bias: ctx.params[bias] + shift.to(ctx.params[bias].dtype),
            beta: ctx.params[beta] - (shift * slope).to(ctx.params[beta].dtype),
        }
        if not relative_change(ctx, moved) <= CERTIFY_RTOL:
            return []
        cand = Candidate(
            layers=(producer, name),
            detector="bn-shift",
            u=normalise({bias: ones, beta: -slope}),
            gauge="flat",
            info={"orbit_dim": channels},
        )
        return ctx.canonical([cand])
