"""Embedding detector: rows never indexed by the probe set (flat directions).

A row of ``nn.Embedding`` that no probe token selects does not enter any output, so every change
to it leaves the function on the probe set unchanged: the read along it is flat (F ≡ 0). One
candidate per embedding spans all unseen rows with a seeded random pattern (``"embedding-unseen"``);
``info["unseen_rows"]`` counts them. Seen indices come from ``ctx.cache["embedding_seen"]``, filled
by the read's pass over the probe set (`embedding_rows_seen`): the indices every
``F.embedding`` call looks up in an embedding's weight, whatever module makes the call (a
subclass such as OPT's learned positional embedding computes its own positions from other
inputs, so the module's first input is not its rows).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.distributed import all_gather_union

__all__ = ["EmbeddingDetector", "embedding_rows_seen"]


class _Lookups(TorchFunctionMode):
    """Collects the indices of every ``F.embedding`` call into a watched weight (by identity)."""

    def __init__(self, names: dict[int, str], seen: dict[str, list[Tensor]]) -> None:
        super().__init__()
        self.names = names
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is nn.functional.embedding:
            idx = args[0] if args else kwargs.get("input")
            weight = args[1] if len(args) > 1 else kwargs.get("weight")
            name = self.names.get(id(weight))
            if name is not None and isinstance(idx, Tensor) and not idx.is_floating_point():
                self.seen[name].append(idx.detach().reshape(-1))
        return func(*args, **kwargs)


def embedding_rows_seen(model: nn.Module, x: Tensor, batch: int) -> tuple[dict[str, Tensor], int]:
    """Rows of each ``nn.Embedding`` (by module name) that the probe set ``x`` looks up.

    Runs ``model`` over ``x`` in chunks of ``batch`` samples and records the indices of every
    ``F.embedding`` call into an embedding's weight. Returns ``({name: sorted unique rows}, number
    of forward passes)``; an embedding whose weight is never looked up is absent. Under
    ``torch.distributed`` the rows are the union over the ranks (a collective: every rank calls
    this with the same modules).
    """
    embs = {n: m for n, m in model.named_modules() if isinstance(m, nn.Embedding)}
    if not embs:
        return {}, 0
    seen: dict[str, list[Tensor]] = {n: [] for n in embs}
    names = {id(m.weight): n for n, m in reversed(list(embs.items()))}  # first name of a tied one
    passes = 0
    with torch.no_grad(), _Lookups(names, seen):
        for s in range(0, x.shape[0], batch):
            model(x[s : s + batch])
            passes += 1
    out = {}
    for n, v in seen.items():  # same order on every rank: the union is a collective
        local = torch.cat(v) if v else torch.zeros(0, dtype=torch.long, device=x.device)
        union = all_gather_union(local)
        if union.numel():
            out[n] = union
    return out, passes


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
