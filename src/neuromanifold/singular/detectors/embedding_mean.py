"""Closed-form flat gauge: embedding rows shifted along the all-ones vector before LayerNorms.

When every reader of an embedding's output subtracts the mean over features first — the residual
stream of a pre-LN transformer (each block reads it through a LayerNorm, the blocks' outputs add
to it, the final LayerNorm reads it) or the LayerNorm right after BERT's embeddings — a row
``E[p] → E[p] + c_p·𝟙`` only adds ``c_p·𝟙`` to the stream, which every LayerNorm removes: one
flat line per row, straight (s27 trial HF D2: GPT-2's position embeddings, BERT's word and
position embeddings, exact to 9e-15, never proposed). A tied input embedding that is also the
language-model head is no such gauge (the head's logits move by ``c_v·⟨h, 𝟙⟩``), nor is an
embedding read by anything that keeps the mean; both are left out by the certification by
evaluation: a distinct shift per row (1 to 2 times the weight's RMS) must leave the outputs on
every probe sample unchanged to ``CERTIFY_RTOL``.

``"embedding-mean"`` proposes one candidate, ``u ∝ 𝟙`` on the rows the probe set looks up
(``ctx.cache["embedding_seen"]``; every row where it is not known: a row no sample looks up is
flat in every direction and `neuromanifold.singular.detectors.embedding`'s), with
``info["orbit_dim"]`` the number of those rows.
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
from neuromanifold.singular.detectors.rescale import CERTIFY_RTOL, relative_change

__all__ = ["EmbeddingMeanDetector"]


class EmbeddingMeanDetector:
    """An embedding's rows shifted along 𝟙 where only LayerNorms read them (flat; module
    docstring)."""

    name = "embedding-mean"

    def applies_to(self, module: nn.Module) -> bool:
        """``nn.Embedding`` with more than one feature (one feature has no mean direction)."""
        return isinstance(module, nn.Embedding) and module.embedding_dim > 1

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified flat-gauge candidate, or nothing."""
        key = qualified(name, "weight")
        weight = ctx.params[key]
        rows = torch.ones(module.num_embeddings, dtype=torch.bool, device=weight.device)
        seen = ctx.cache.get("embedding_seen", {}).get(name)
        if seen is not None:
            rows = torch.zeros_like(rows)
            rows[seen.to(weight.device)] = True
        n = int(rows.sum())
        if n == 0:
            return []
        rms = float(weight.double().pow(2).mean().sqrt())
        shift = torch.zeros(module.num_embeddings, dtype=torch.float64, device=weight.device)
        shift[rows] = torch.linspace(1.0, 2.0, n, dtype=torch.float64, device=weight.device)
        shift = shift * (rms if rms > 0.0 else 1.0)
        moved = weight + shift.to(weight.dtype)[:, None]
        if not relative_change(ctx, {key: moved}) <= CERTIFY_RTOL:
            return []
        u = rows.to(torch.float64)[:, None].expand(-1, module.embedding_dim).clone()
        cand = Candidate(
            layers=(name,),
            detector="embedding-mean",
            u=normalise({key: u}),
            gauge="flat",
            info={"orbit_dim": n},
        )
        return ctx.canonical([cand])
