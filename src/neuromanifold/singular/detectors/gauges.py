"""Closed-form gauge detectors: cross-entropy logit shift and ReLU-family rescaling.

* **CE logit shift** (``"ce-shift"``, flat): with a categorical output, adding the same number to
  every logit changes nothing, so on the Linear producing the logits ``ΔW̄ = 𝟙 āᵀ`` is an exact
  kernel direction for every ``ā``; proposed as ``Δb = 𝟙/√C`` (or ``ΔW = 𝟙 a_topᵀ`` without a
  bias). Only when that Linear's output *is* the model output.
* **ReLU rescale** (``"relu-rescale"``, curved): a Linear/conv block followed (through one
  positively homogeneous activation of degree p: ReLU and LeakyReLU p = 1, ``SquaredReLU`` and
  Hugging Face's ``ReLUSquaredActivation`` p = 2) by a single consumer block. Unit ``j``'s orbit
  ``(w_in, b_in, w_out) → (c w_in, c b_in, w_out/c^p)`` has tangent ``(W1[j], b1[j], −p·W2[:, j])``;
  one candidate, for the unit with the largest ``‖W1[j]‖·‖W2[:, j]‖`` (a clearly live unit), to
  certify the curved-gauge class.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.blocks import is_supported_block
from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.detectors.linear import block_spectrum, lift

__all__ = ["LogitShiftDetector", "ReLURescaleDetector"]

_HOMOGENEOUS = {"ReLU": 1, "LeakyReLU": 1, "SquaredReLU": 2, "ReLUSquaredActivation": 2}
"""Positively homogeneous activations by class name and their degree p: ``φ(cz) = c^p φ(z)``."""


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
            spec = block_spectrum(ctx, name)
            ones_in = torch.ones(module.in_features, dtype=torch.float64, device=dev)
            a = spec.a_top if spec is not None else ones_in
            u = lift(name, module, torch.ones(c, dtype=torch.float64, device=dev), a)
        cand = Candidate(layers=(name,), detector="ce-shift", u=normalise(u), gauge="flat")
        return ctx.canonical([cand])


class ReLURescaleDetector:
    """Per-unit rescaling through a positively homogeneous activation (curved gauge)."""

    name = "relu-rescale"

    def applies_to(self, module: nn.Module) -> bool:
        """Supported blocks (proposes only when followed by ReLU/LeakyReLU and one consumer)."""
        return is_supported_block(module)

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One curved-gauge candidate for the strongest unit, or nothing."""
        c = ctx.graph.single_consumer(name)
        via = ctx.graph.via.get((name, c)) if c is not None else None
        if via is None or len(via) != 1 or via[0] not in _HOMOGENEOUS:
            return []
        degree = _HOMOGENEOUS[via[0]]
        cons = ctx.model.get_submodule(c)
        if not is_supported_block(cons):
            return []
        pre_in = f"{name}." if name else ""
        pre_out = f"{c}."
        w1 = ctx.params[f"{pre_in}weight"]
        b1 = ctx.params.get(f"{pre_in}bias")
        w2 = ctx.params[f"{pre_out}weight"]
        if w2.shape[1] != w1.shape[0]:
            return []
        strength = w1.reshape(w1.shape[0], -1).norm(dim=1) * w2.transpose(0, 1).reshape(
            w2.shape[1], -1
        ).norm(dim=1)
        j = int(torch.argmax(strength))
        if float(strength[j]) == 0.0:
            return []
        t: dict[str, Tensor] = {}
        d1 = torch.zeros_like(w1)
        d1[j] = w1[j]
        t[f"{pre_in}weight"] = d1
        if b1 is not None:
            db = torch.zeros_like(b1)
            db[j] = b1[j]
            t[f"{pre_in}bias"] = db
        d2 = torch.zeros_like(w2)
        d2[:, j] = -degree * w2[:, j]
        t[f"{pre_out}weight"] = d2
        return ctx.canonical(
            [
                Candidate(
                    layers=(name, c),
                    detector="relu-rescale",
                    u=normalise(t),
                    gauge="curved",
                    gauge_generators=(t,),
                    info={"unit": j, "degree": degree},
                )
            ]
        )
