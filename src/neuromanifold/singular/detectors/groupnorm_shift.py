"""Closed-form flat gauge: the bias of a layer that feeds a GroupNorm, shifted per group.

A GroupNorm normalises each sample over the channels of a group and all their positions,
``n_c = (x_c − m_g)/s_g`` with ``m_g``, ``s_g²`` the mean and variance over group ``g``'s channels
and positions. When ``x`` is the output of a Linear or convolution with a bias ``b`` that reaches
nothing but the GroupNorm (through Identity/Dropout), shifting the biases of one group's channels
by the same amount, ``b_c → b_c + s`` for every ``c ∈ g``, adds ``s`` to every entry the group
averages: ``m_g`` moves by ``s``, ``s_g`` not at all (``eps`` included), and the output is
unchanged. One flat line per group, ``G`` in all, each straight (F ≡ 0 along it). A shift that
differs within a group is no symmetry, nor is a change of the producer's weights (it varies
over positions, which the group mean does not absorb), so the K-FAC factors do not see these
lines (s28 trial EXOTIC #3: F = 0 along one, 1.13 along a random bias direction).

They are proposed as one candidate on their span, ``u ∝ 𝟙`` on the producer's bias,
``"gn-shift"`` with ``info["orbit_dim"] = G``, certified by evaluation
(`neuromanifold.singular.detectors.rescale.relative_change` with a distinct shift per group,
from 1 to 2 times the bias's RMS, at most ``CERTIFY_RTOL``): a producer output that also enters
a residual sum, or a bias added along another axis than the GroupNorm's channels, is no
symmetry. The GroupNorm's own affine map plays no part. An InstanceNorm that normalises with
each sample's own statistics is the GroupNorm of one channel per group: one line per channel.
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
from neuromanifold.singular.detectors.batchnorm_shift import channel_producer
from neuromanifold.singular.detectors.rescale import CERTIFY_RTOL, relative_change

__all__ = ["GroupNormShiftDetector", "groups"]


def groups(module: nn.Module) -> tuple[int, int] | None:
    """``(channels, groups)`` of a norm that normalises each sample over groups of channels and
    their positions: a GroupNorm, or an InstanceNorm (one group per channel) that does not use
    running statistics (with them, in evaluation mode, it is a fixed affine map per channel, as
    a BatchNorm); else None.

    >>> groups(nn.GroupNorm(2, 6)), groups(nn.InstanceNorm2d(3)), groups(nn.LayerNorm(4))
    ((6, 2), (3, 3), None)
    >>> groups(nn.InstanceNorm1d(3, track_running_stats=True)) is None
    True
    """
    if isinstance(module, nn.GroupNorm):
        return int(module.num_channels), int(module.num_groups)
    if isinstance(module, nn.modules.instancenorm._InstanceNorm):
        if not module.track_running_stats:
            return int(module.num_features), int(module.num_features)
    return None


class GroupNormShiftDetector:
    """The per-group shift of the bias feeding a GroupNorm (flat gauge; module docstring)."""

    name = "gn-shift"

    def applies_to(self, module: nn.Module) -> bool:
        """``nn.GroupNorm``, and InstanceNorms that normalise with each sample's statistics
        (`groups`; proposes only behind a biased producer)."""
        return groups(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified flat-gauge candidate on the span of the ``G`` lines, or nothing."""
        channels, n_groups = groups(module) or (0, 0)
        found = channel_producer(ctx, name, channels, with_bias=True)
        if found is None:
            return []
        bias = qualified(found[0], "bias")
        b = ctx.params[bias]
        rms = float(b.double().pow(2).mean().sqrt())
        per_group = torch.linspace(1.0, 2.0, n_groups, dtype=torch.float64, device=b.device)
        shift = per_group.repeat_interleave(channels // n_groups) * (rms if rms > 0.0 else 1.0)
        if not relative_change(ctx, {bias: b + shift.to(b.dtype)}) <= CERTIFY_RTOL:
            return []
        cand = Candidate(
            layers=(found[0],),
            detector="gn-shift",
            u=normalise({bias: torch.ones_like(b, dtype=torch.float64)}),
            gauge="flat",
            info={"orbit_dim": n_groups, "norm": name},
        )
        return ctx.canonical([cand])
