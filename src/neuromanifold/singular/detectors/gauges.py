"""Closed-form flat gauge: the cross-entropy logit shift.

* **CE logit shift** (``"ce-shift"``, flat): with a categorical output, adding the same number to
  every logit changes nothing, so on the Linear producing the logits ``ΔW̄ = 𝟙 āᵀ`` is an exact
  kernel direction for every ``ā``; proposed as ``Δb = 𝟙/√C`` (or ``ΔW = 𝟙 𝟙ᵀ/√(C·d)`` without a
  bias). Only when that Linear's output *is* the model output. Without a bias ``ā = 𝟙`` is the
  choice that stays a gauge when the head's matrix is tied to an input embedding read through
  normalisations (GPT-2: every token embedding moves by the same multiple of 𝟙, which each
  LayerNorm removes); for an untied head every ``ā`` is exact, and the choice no longer depends
  on whether the head's factors were formed. An RMSNorm removes no mean, so behind a tied head
  of an RMSNorm model (Llama, Qwen, Gemma with tied embeddings) the move changes the outputs:
  the candidate is proposed all the same and reads ``live``, correctly.

Rescaling gauges (ReLU, norm scale, gated up projection) live in
`neuromanifold.singular.detectors.rescale`.
"""

from __future__ import annotations

import torch
from torch import nn

from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.detectors.linear import lift

__all__ = ["LogitShiftDetector"]


class LogitShiftDetector:
    """The CE logit shift on the output Linear (flat gauge)."""

    name = "ce-shift"

    def applies_to(self, module: nn.Module) -> bool:
        """``nn.Linear`` (proposes only for the output layer under a categorical family)."""
        return type(module) is nn.Linear

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One candidate when ``name`` produces the logits."""
        if ctx.graph.output != name or getattr(ctx.family, "name", "") != "categorical":
            return []
        prefix = f"{name}." if name else ""
        c = module.out_features
        dev = module.weight.device
        if module.bias is not None:
            u = {f"{prefix}bias": torch.ones(c, dtype=torch.float64, device=dev)}
        else:
            ones_in = torch.ones(module.in_features, dtype=torch.float64, device=dev)
            u = lift(name, module, torch.ones(c, dtype=torch.float64, device=dev), ones_in)
        cand = Candidate(layers=(name,), detector="ce-shift", u=normalise(u), gauge="flat")
        return ctx.canonical([cand])
