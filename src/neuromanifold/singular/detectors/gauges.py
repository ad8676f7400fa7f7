"""Closed-form gauge detectors: cross-entropy logit shift and ReLU-family rescaling.

* **CE logit shift** (``"ce-shift"``, flat): with a categorical output, adding the same number to
  every logit changes nothing, so on the Linear producing the logits ``ΔW̄ = 𝟙 āᵀ`` is an exact
  kernel direction for every ``ā``; proposed as ``Δb = 𝟙/√C`` (or ``ΔW = 𝟙 a_topᵀ`` without a
  bias). Only when that Linear's output *is* the model output.
* **ReLU rescale** (``"relu-rescale"``, curved): a Linear/conv block followed (through one
  positively homogeneous activation of degree p: ReLU and LeakyReLU p = 1, ``SquaredReLU`` and
  Hugging Face's ``ReLUSquaredActivation`` p = 2) by a single consumer block. Unit ``j``'s orbit
  ``(w_in, b_in, w_out) → (c w_in, c b_in, w_out/c^p)`` has tangent ``(W1[j], b1[j], −p·W2[:, j])``.
  One candidate per block pair: its direction ``u`` is the tangent of the unit with the largest
  ``‖W1[j]‖·‖W2[:, j]‖`` (a clearly live unit), read to certify the curved-gauge class; its
  ``gauge_generators`` are the tangents of all units with a non-zero tangent (spec §6.5(a)(b):
  the gauge span is the span of every unit's orbit tangent; `read` projects other candidates off
  it), strongest first, at most ``max_units`` (default `MAX_RESCALE_UNITS`). When the cap cuts
  units, the candidate's ``info["truncated"] = {"cap", "found", "kept"}`` says so and the span
  misses the weakest units' tangents. Each generator is dense over the tensors it touches
  (``W1``, ``b1``, ``W2``), so the generators of one pair hold ``n_units · (|W1| + |b1| + |W2|)``
  float64 numbers: the cap bounds that memory on wide layers.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.blocks import is_supported_block
from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.detectors.linear import block_spectrum, lift
from neuromanifold.singular.detectors.one_sided import check_cap

__all__ = ["MAX_RESCALE_UNITS", "LogitShiftDetector", "ReLURescaleDetector"]

MAX_RESCALE_UNITS = 16
"""Default cap on the unit tangents in a ReLU-rescale candidate's ``gauge_generators``.

`read` classes every candidate sharing a tensor with these generators against their span (a
dense SVD over the shared tensors per sweep), so the read's cost grows with the generator count:
a 256→256→256→10 ReLU MLP on 128 probes read in 1.7 s with 8 units per pair, 3.5 s with 16,
6.2 s with 32 and 32 s with 64 (one thread)."""

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

    def __init__(self, *, max_units: int = MAX_RESCALE_UNITS) -> None:
        """``max_units``: cap on the unit tangents kept as generators (an int ``≥ 1``)."""
        self.max_units = check_cap("max_units", max_units)

    def applies_to(self, module: nn.Module) -> bool:
        """Supported blocks (proposes only when followed by ReLU/LeakyReLU and one consumer)."""
        return is_supported_block(module)

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One curved-gauge candidate: the strongest unit's tangent, every unit's tangent as
        generators (module docstring); or nothing."""
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
        w_in = w1.reshape(w1.shape[0], -1).norm(dim=1)
        w_out = w2.transpose(0, 1).reshape(w2.shape[1], -1).norm(dim=1)
        strength = w_in * w_out
        j = int(torch.argmax(strength))
        if float(strength[j]) == 0.0:
            return []
        tangent_sq = w_in**2 + degree**2 * w_out**2
        if b1 is not None:
            tangent_sq = tangent_sq + b1**2
        order = sorted(
            (i for i in range(w1.shape[0]) if float(tangent_sq[i]) > 0.0),
            key=lambda i: (-float(strength[i]), i),
        )  # strongest first: ``j`` leads
        units = order[: self.max_units]
        gens = tuple(_rescale_tangent(w1, b1, w2, i, degree, pre_in, pre_out) for i in units)
        info = {"unit": j, "degree": degree, "generator_units": units}
        if len(order) > self.max_units:
            info["truncated"] = {"cap": self.max_units, "found": len(order), "kept": len(units)}
        return ctx.canonical(
            [
                Candidate(
                    layers=(name, c),
                    detector="relu-rescale",
                    u=normalise(gens[0]),
                    gauge="curved",
                    gauge_generators=gens,
                    info=info,
                )
            ]
        )


def _rescale_tangent(
    w1: Tensor, b1: Tensor | None, w2: Tensor, j: int, degree: int, pre_in: str, pre_out: str
) -> dict[str, Tensor]:
    """Tangent ``(W1[j], b1[j], −p·W2[:, j])`` of unit ``j``'s rescaling orbit (zeros elsewhere)."""
    d1 = torch.zeros_like(w1)
    d1[j] = w1[j]
    t = {f"{pre_in}weight": d1}
    if b1 is not None:
        db = torch.zeros_like(b1)
        db[j] = b1[j]
        t[f"{pre_in}bias"] = db
    d2 = torch.zeros_like(w2)
    d2[:, j] = -degree * w2[:, j]
    t[f"{pre_out}weight"] = d2
    return t
