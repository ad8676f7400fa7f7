"""Closed-form flat gauge: a LayerNorm's shift ``β`` against the biases of the Linears reading it.

``LN(x) = γ ⊙ n(x) + β`` reaches each consumer Linear ``c`` as ``W_c LN(x) + b_c``. Where every
consumer of the norm's output is a Linear with a bias reading it unchanged (through Identity or
Dropout only), the line

    (β, b_c ∀c) → (β + δ, b_c − W_c δ ∀c),    δ ∈ R^d,

leaves the model unchanged: ``d`` straight lines (F ≡ 0 along each), proposed as one candidate
on their span, ``u ∝ (𝟙 on β, −W_c 𝟙 on every b_c)``, ``"norm-shift"`` with
``info["orbit_dim"] = d`` (s32 trial ATTN #2: a pre-LN block's two norms, exact to 1.8e-15 on
GPT-2, never proposed). The producer-side counterpart for BatchNorm is
`neuromanifold.singular.detectors.batchnorm_shift`. A norm whose output also enters a residual sum
(post-LN blocks) or a consumer without a bias (a language model's head) has no such line; the
candidate is certified by evaluation with a distinct shift per feature (1 to 2 times β's RMS, or 1
to 2 where β is zero), at most ``CERTIFY_RTOL`` (`rescale.relative_change`), which also catches
an output read otherwise than the graph shows. An ``nn.MultiheadAttention`` consumer is read as
the separate projections the read unpacks it into (`neuromanifold.singular.adapt_attention`); one
left packed gets no candidate.
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
from neuromanifold.singular.detectors.graph import graph_passes_through
from neuromanifold.singular.detectors.rescale import CERTIFY_RTOL, certify_shift, relative_change

__all__ = ["NormShiftDetector"]


class NormShiftDetector:
    """The LayerNorm-shift ↔ consumer-bias lines (flat gauge; module docstring)."""

    name = "norm-shift"

    def applies_to(self, module: nn.Module) -> bool:
        """``nn.LayerNorm`` over one trailing dimension with a shift ``β``."""
        return (
            isinstance(module, nn.LayerNorm)
            and len(module.normalized_shape) == 1
            and module.bias is not None
        )

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified flat-gauge candidate on the ``d`` lines, or nothing."""
        d = module.normalized_shape[0]
        consumers = ctx.graph.consumers.get(name, ())
        if not consumers:
            return []
        mods = dict(ctx.model.named_modules())
        for c in consumers:
            cons = mods.get(c)
            ok = isinstance(cons, nn.Linear) and cons.in_features == d and cons.bias is not None
            if not (ok and graph_passes_through(ctx.graph, name, c)):
                return []
        beta_key = qualified(name, "bias")
        beta = ctx.params[beta_key]
        weights = {c: ctx.params[qualified(c, "weight")].to(torch.float64) for c in consumers}

        def moves(delta: torch.Tensor) -> dict[str, torch.Tensor]:
            out = {beta_key: delta}
            for c, w in weights.items():
                out[qualified(c, "bias")] = -(w @ delta)
            return out

        step = moves(certify_shift(torch.ones(d, dtype=torch.bool, device=beta.device), beta))
        moved = {k: ctx.params[k] + v.to(ctx.params[k].dtype) for k, v in step.items()}
        if not relative_change(ctx, moved) <= CERTIFY_RTOL:
            return []
        cand = Candidate(
            layers=(name, *consumers),
            detector="norm-shift",
            u=normalise(moves(torch.ones(d, dtype=torch.float64, device=beta.device))),
            gauge="flat",
            info={"orbit_dim": d, "consumers": list(consumers)},
        )
        return ctx.canonical([cand])
