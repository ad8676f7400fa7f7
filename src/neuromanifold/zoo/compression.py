"""How much of a transformer's MLP capacity is in use: per-unit contributions to the residual.

For an MLP block ``fc2(GELU(fc1(x)))`` with hidden activations ``h ∈ R^H`` (collected over every
sample and token of the given inputs), unit ``j`` contributes ``h_j · W₂[:, j]`` to the residual
stream. Its size is measured by

    c_j = sqrt(mean over samples·tokens of h_j²) · ‖W₂[:, j]‖₂      (RMS contribution).

Reported per block (:class:`MLPUsage`): the relative contributions ``c_j / max_k c_k``, the number
of *compressed* units with ``c_j / max c < threshold`` (default ``1e-2``: a unit whose output is
100× smaller than the largest one), and the participation ratio ``(Σ c_j²)² / Σ c_j⁴`` — the
effective number of units in use (``H`` when all contribute equally, 1 when one dominates).

A trained network "compresses spare MLP capacity" when these counts rise (and the participation
ratio falls) relative to its initialisation; this per-coordinate count misses compression that is
rotated across units, which is what the dead-direction read is for.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = ["DEFAULT_COMPRESSION_THRESHOLD", "MLPUsage", "mlp_usage"]

DEFAULT_COMPRESSION_THRESHOLD = 1e-2
"""A unit counts as compressed when its RMS contribution is below 1% of the block's largest."""


@dataclass(frozen=True)
class MLPUsage:
    """Per-unit usage of one MLP block (module docstring: definitions)."""

    layer: str
    hidden: int
    threshold: float
    compressed: int
    participation_ratio: float
    relative_contribution: tuple[float, ...]

    def to_dict(self) -> dict[str, object]:
        """JSON-serialisable fields."""
        return {
            "layer": self.layer,
            "hidden": self.hidden,
            "threshold": self.threshold,
            "compressed": self.compressed,
            "participation_ratio": self.participation_ratio,
            "relative_contribution": list(self.relative_contribution),
        }


def _mlp_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [
        (name, mod)
        for name, mod in model.named_modules()
        if isinstance(getattr(mod, "fc1", None), nn.Linear)
        and isinstance(getattr(mod, "fc2", None), nn.Linear)
        and isinstance(getattr(mod, "act", None), nn.Module)
    ]


@torch.no_grad()
def mlp_usage(
    model: nn.Module, x: Tensor, *, threshold: float = DEFAULT_COMPRESSION_THRESHOLD
) -> list[MLPUsage]:
    """:class:`MLPUsage` for every submodule with ``fc1``, ``act``, ``fc2`` (zoo ViT MLP blocks).

    ``x``: model inputs (e.g. the training images). Runs one forward pass with hooks on ``act``.

    >>> from neuromanifold.zoo.models import ViTConfig, build_model
    >>> m = build_model(ViTConfig(dim=8, heads=2, depth=1), seed=0)
    >>> with torch.no_grad():
    ...     m.blocks[0].mlp.fc2.weight[:, :5] = 0.0
    >>> mlp_usage(m, torch.rand(4, 1, 8, 8))[0].compressed >= 5
    True
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie in (0, 1), got {threshold!r}")
    blocks = _mlp_blocks(model)
    if not blocks:
        raise ValueError(
            f"{type(model).__name__} has no MLP blocks (submodules with fc1, act, fc2)"
        )
    acts: dict[str, Tensor] = {}
    hooks = [
        mod.act.register_forward_hook(lambda _m, _i, out, name=name: acts.__setitem__(name, out))
        for name, mod in blocks
    ]
    was_training = model.training
    model.eval()
    try:
        model(x)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    out = []
    for name, mod in blocks:
        h = acts[name].reshape(-1, acts[name].shape[-1]).to(torch.float64)
        rms = h.pow(2).mean(dim=0).sqrt()
        c = rms * mod.fc2.weight.detach().to(torch.float64).norm(dim=0)
        peak = float(c.max())
        rel = c / peak if peak > 0 else c
        pr = float(c.pow(2).sum() ** 2 / c.pow(4).sum()) if peak > 0 else 0.0
        out.append(
            MLPUsage(
                layer=name,
                hidden=int(c.numel()),
                threshold=threshold,
                compressed=int((rel < threshold).sum()),
                participation_ratio=pr,
                relative_contribution=tuple(float(v) for v in rel),
            )
        )
    return out
