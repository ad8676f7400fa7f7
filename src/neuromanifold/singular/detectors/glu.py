"""Gated feed-forward detector: a dead hidden dimension of a GLU/SwiGLU block (three blocks).

Layout (`glu_layout`): a module with ``nn.Linear`` children gate ``w1``/``gate_proj``, up
``w3``/``up_proj`` and down ``w2``/``down_proj`` computing ``down(φ(gate(x)) ⊙ up(x))``. A dead
hidden dimension ``v`` (gate and up rows and the down column along ``v`` zero) shows as a G-kernel
vector of the gate that is also in the G-kernel of the up projection, and whose lift lies in the
down projection's A-kernel, both judged by the duality join's link rule
(`neuromanifold.singular.detectors.linear.link_energy_max`: the energy outside the kernel must be
far below a random vector's when the kernel is most of the space, as it is for a hidden layer
wider than the probe set; ``‖P_ker v‖ ≥ MATCH_MIN`` otherwise). The candidate moves all three
blocks with equal norm: gate ``v a_gateᵀ``, up ``v a_upᵀ`` (top input eigenvectors), down
``c vᵀ`` (top output eigenvector ``c``); along it the output changes by
``t·c·φ(t·)·(t·) = O(t³)`` for ``φ(0) = 0``, ``φ'(0) ≠ 0``: order 3 (spec §6.6, SwiGLU dead
dimension). Provenance ``"glu-dead-dimension"``. The elementwise gate and the product are
functional calls, so the data-flow graph cannot see this structure; the module names carry it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.detectors.linear import block_spectrum, lift
from neuromanifold.singular.detectors.link import link_energy_max, live_energy, null_energy_max

__all__ = ["GLUDetector", "fused_glu_layout", "glu_layout"]

_GATE = ("w1", "gate_proj", "gate")
_UP = ("w3", "up_proj", "up")
_DOWN = ("w2", "down_proj", "down")


def glu_layout(module: nn.Module) -> tuple[str, str, str] | None:
    """Child names ``(gate, up, down)`` of a gated feed-forward module, or ``None``."""
    kids = dict(module.named_children())

    def pick(names: tuple[str, ...]) -> str | None:
        return next((n for n in names if type(kids.get(n)) is nn.Linear), None)

    gate, up, down = pick(_GATE), pick(_UP), pick(_DOWN)
    if not (gate and up and down):
        return None
    h = kids[gate].out_features
    if kids[up].out_features != h or kids[down].in_features != h:
        return None
    return gate, up, down


_FUSED = ("gate_up_proj",)


def fused_glu_layout(module: nn.Module) -> tuple[str, str] | None:
    """Child names ``(gate_up, down)`` of a gated feed-forward module with one fused gate-and-up
    ``nn.Linear`` of ``2h`` rows (Phi-3's ``gate_up_proj``: gate rows ``0 … h−1``, up rows
    ``h … 2h−1``, its forward ``down(φ(gate) ⊙ up)``) and a down projection reading ``h``
    features, or ``None``. The row order is the convention of the name; a model that splits the
    rows otherwise fails the certification of every orbit built on it."""
    kids = dict(module.named_children())
    fused = next((n for n in _FUSED if type(kids.get(n)) is nn.Linear), None)
    down = next((n for n in _DOWN if type(kids.get(n)) is nn.Linear), None)
    if not (fused and down) or kids[fused].out_features != 2 * kids[down].in_features:
        return None
    return fused, down


def _out_of_span_energy(basis: Tensor, vec: Tensor) -> float:
    """``‖vec‖² − ‖basisᵀ vec‖²`` for an orthonormal ``basis`` (``‖vec‖²`` when it is empty)."""
    kept = float((basis.T @ vec).pow(2).sum()) if basis.shape[1] else 0.0
    return max(float(vec.pow(2).sum()) - kept, 0.0)


class GLUDetector:
    """Dead hidden dimensions of gated feed-forward blocks (module docstring)."""

    name = "glu"

    def applies_to(self, module: nn.Module) -> bool:
        """Modules with a recognised gate/up/down layout."""
        return glu_layout(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One order-3 candidate per dead hidden dimension found on all three blocks."""
        gate, up, down = glu_layout(module)
        prefix = f"{name}." if name else ""
        names = [prefix + gate, prefix + up, prefix + down]
        specs = [block_spectrum(ctx, n) for n in names]
        if any(s is None for s in specs):
            return []
        s_gate, s_up, s_down = specs
        ker_up = s_up.g_vecs[:, s_up.ker_g]
        up_max = null_energy_max(ker_up.shape[0], ker_up.shape[1])
        down_mod = module.get_submodule(down)
        out = []
        for j in s_gate.ker_g:
            v = s_gate.g_vecs[:, j]
            lifted = v if down_mod.bias is None else torch.cat([v, v.new_zeros(1)])
            if _out_of_span_energy(ker_up, v) > up_max:
                continue
            if live_energy(s_down, lifted) > link_energy_max(s_down):
                continue
            parts = [
                lift(names[0], module.get_submodule(gate), v, s_gate.a_top),
                lift(names[1], module.get_submodule(up), v, s_up.a_top),
                lift(names[2], down_mod, s_down.g_top, lifted),
            ]
            u: dict[str, Tensor] = {}
            for part in parts:
                norm = torch.sqrt(sum((t**2).sum() for t in part.values()))
                u.update({k: t / norm for k, t in part.items()})
            out.append(
                Candidate(
                    layers=tuple(names),
                    detector="glu-dead-dimension",
                    u=normalise(u),
                    info={"module": name},
                )
            )
        return ctx.canonical(out)
