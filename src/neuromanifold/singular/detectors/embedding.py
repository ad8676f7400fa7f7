"""Embedding detector: rows never indexed by the probe set (flat directions).

A row of ``nn.Embedding`` that no probe token selects does not enter any output, so every change
to it leaves the function on the probe set unchanged: the read along it is flat (F ≡ 0). One
candidate per embedding spans all unseen rows with a seeded random pattern (``"embedding-unseen"``);
``info["unseen_rows"]`` counts them. Seen indices come from ``ctx.cache["embedding_seen"]``, filled
by the read's pass over the probe set.
"""

from __future__ import annotations

import torch
from torch import nn

from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise

__all__ = ["EmbeddingDetector"]


class EmbeddingDetector:
    """Unseen embedding rows (flat)."""

    name = "embedding"

    def applies_to(self, module: nn.Module) -> bool:
        """``nn.Embedding``."""
        return isinstance(module, nn.Embedding)

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One flat candidate over all unseen rows (none if every row is used)."""
        seen = ctx.cache.get("embedding_seen", {}).get(name)
        if seen is None:
            return []
        unseen = torch.ones(module.num_embeddings, dtype=torch.bool)
        unseen[seen.cpu()] = False
        if not unseen.any():
            return []
        gen = torch.Generator().manual_seed(7)
        key = f"{name}.weight" if name else "weight"
        u = torch.randn(module.weight.shape, generator=gen, dtype=torch.float64)
        u[~unseen] = 0.0
        u = u.to(module.weight.device)
        return ctx.canonical(
            [
                Candidate(
                    layers=(name,),
                    detector="embedding-unseen",
                    u=normalise({key: u}),
                    gauge="flat",
                    info={"unseen_rows": int(unseen.sum())},
                )
            ]
        )
