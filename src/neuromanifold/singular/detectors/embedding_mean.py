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

The same holds for token and position tables kept as plain parameters rather than in an
``nn.Embedding``: a vision transformer's ``cls_token`` and ``pos_embed`` (timm, this package's
zoo ViT), Hugging Face ViT's ``position_embeddings``, DINOv2's register tokens, added to the
residual stream (s27 trial HF: never proposed). A module's own parameter whose name holds
``pos``, ``cls``, ``token``, ``register`` or ``embed`` (`stream_parameters`), of at least two
features in its last dimension, gets one candidate, ``u ∝ 𝟙`` on all its entries, each row
(every index but the last) its own line (``info["orbit_dim"]`` rows, ``info["parameter"]`` its
name), certified the same way; a parameter used otherwise fails the certification.
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
from neuromanifold.singular.detectors.rescale import CERTIFY_RTOL, certify_shift, relative_change

__all__ = ["EmbeddingMeanDetector", "stream_parameters"]

_STREAM_NAMES = ("pos", "cls", "token", "register", "embed")
"""Parameter-name fragments of token and position tables kept as plain parameters."""


def stream_parameters(module: nn.Module) -> list[str]:
    """``module``'s own parameters (not its children's) named like a token or position table
    (a fragment of ``_STREAM_NAMES`` in the lower-cased name) with at least two features in the
    last dimension; none for an ``nn.Embedding`` (its table is read as one).

    >>> class Vit(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.cls_token = nn.Parameter(torch.zeros(1, 1, 4))
    ...         self.pos_embed = nn.Parameter(torch.zeros(1, 5, 4))
    ...         self.scale = nn.Parameter(torch.ones(4))
    ...         self.head = nn.Linear(4, 2)
    >>> stream_parameters(Vit())
    ['cls_token', 'pos_embed']
    """
    if isinstance(module, nn.Embedding):
        return []
    return [
        n
        for n, p in module.named_parameters(recurse=False)
        if p.dim() >= 1 and p.shape[-1] > 1 and any(f in n.lower() for f in _STREAM_NAMES)
    ]


class EmbeddingMeanDetector:
    """An embedding's rows shifted along 𝟙 where only LayerNorms read them (flat; module
    docstring)."""

    name = "embedding-mean"

    def applies_to(self, module: nn.Module) -> bool:
        """``nn.Embedding`` with more than one feature (one feature has no mean direction), and
        modules holding token or position tables as parameters (`stream_parameters`)."""
        if isinstance(module, nn.Embedding):
            return module.embedding_dim > 1
        return bool(stream_parameters(module))

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified flat-gauge candidate per table, or nothing."""
        if not isinstance(module, nn.Embedding):
            found = [self._table(name, p, ctx) for p in stream_parameters(module)]
            return ctx.canonical([c for c in found if c is not None])
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
        moved = weight + certify_shift(rows, weight).to(weight.dtype)[:, None]
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

    def _table(self, name: str, param: str, ctx: DetectionContext) -> Candidate | None:
        """The certified candidate of one token or position table kept as a parameter."""
        key = qualified(name, param)
        table = ctx.params[key]
        rows = torch.ones(table.shape[:-1], dtype=torch.bool, device=table.device)
        moved = table + certify_shift(rows, table).to(table.dtype)[..., None]
        if not relative_change(ctx, {key: moved}) <= CERTIFY_RTOL:
            return None
        return Candidate(
            layers=(name,),
            detector="embedding-mean",
            u=normalise({key: torch.ones_like(table, dtype=torch.float64)}),
            gauge="flat",
            info={"orbit_dim": int(rows.numel()), "parameter": key},
        )
