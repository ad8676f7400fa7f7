"""K-FAC detector for grouped and depthwise convolutions, one group at a time.

A grouped convolution's factors are per group (`neuromanifold.singular.groups`: block
``"name[g]"``, a plain convolution on the group's channels, Fisher ``⊕_g A_g ⊗ G_g``). Each group
is read by the linear detector's one-sided and joint rules (`LinearDetector`: near-kernel of
``A_g`` → ``"kfac-A"``, of ``G_g`` → ``"kfac-G"``, small products → ``"kfac-joint"``), and every
direction is written back into the full weight (zero outside the group's rows). A depthwise
filter whose input channel is dead on the probe set (``A_g`` vanishes) is its ``kfac-A`` kernel;
one whose output nothing downstream reads (``G_g`` vanishes) is its ``kfac-G`` kernel (a factor
that vanishes identically has every direction in its kernel).

What is not read ([design]): duality chains into or out of a grouped convolution (no link rule
joins a producer's G-kernel to one group's input), the rescale gauges through it, and a
depthwise output channel that is weak but not dead (``G_g`` is ``1 × 1``, so a near-kernel
relative to the group's own top eigenvalue never exists; a cross-group rule is not
implemented).

**Caps.** The linear detector's caps apply per *module*, not per group (a depthwise layer has
hundreds of groups): over all groups, at most ``max_one_sided`` candidates of each one-sided kind
and ``max_joint`` joint ones are kept, smallest ratio first; a cut is recorded in every kept
candidate's ``info["truncated"]`` as in `neuromanifold.singular.detectors.linear`.
"""

from __future__ import annotations

from dataclasses import replace

from torch import nn

from neuromanifold.singular.detectors.base import Candidate, DetectionContext
from neuromanifold.singular.detectors.linear import MAX_JOINT, LinearDetector
from neuromanifold.singular.detectors.one_sided import MAX_ONE_SIDED, check_cap
from neuromanifold.singular.groups import (
    embed_group_direction,
    group_key,
    group_views,
    is_grouped_conv,
)

__all__ = ["GroupedConvDetector"]


class GroupedConvDetector:
    """K-FAC per group of a grouped ``nn.Conv1d``/``nn.Conv2d`` (module docstring)."""

    name = "grouped-conv"

    def __init__(self, *, max_one_sided: int = MAX_ONE_SIDED, max_joint: int = MAX_JOINT) -> None:
        """Per-module caps (module docstring, **Caps**): ints ``≥ 1``."""
        self.max_one_sided = check_cap("max_one_sided", max_one_sided)
        self.max_joint = check_cap("max_joint", max_joint)
        self._per_group = LinearDetector(max_one_sided=self.max_one_sided, max_joint=self.max_joint)

    def applies_to(self, module: nn.Module) -> bool:
        """Grouped convolutions (`neuromanifold.singular.groups.is_grouped_conv`)."""
        return is_grouped_conv(module)

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """Every group's one-sided and joint modes, in full-weight coordinates, capped per kind."""
        by_kind: dict[str, list[Candidate]] = {}
        found: dict[str, int] = {}  # qualified directions per kind, over all groups
        for g, view in enumerate(group_views(module)):
            if group_key(name, g) not in ctx.factors.blocks:
                continue
            group_found: dict[str, int] = {}
            for c in self._per_group.propose(group_key(name, g), view, ctx):
                cut = c.info.get("truncated")
                n = cut["found"] if cut else group_found.get(c.detector, 0) + 1
                group_found[c.detector] = max(group_found.get(c.detector, 0), n)
                info = {k: v for k, v in c.info.items() if k != "truncated"}
                u = embed_group_direction(name, module, g, c.u)
                cand = replace(c, layers=(name,), u=u, info={**info, "group": g})
                by_kind.setdefault(c.detector, []).append(cand)
            for kind, n in group_found.items():
                found[kind] = found.get(kind, 0) + n
        out: list[Candidate] = []
        for kind, cands in by_kind.items():
            cap = self.max_joint if kind == "kfac-joint" else self.max_one_sided
            cands.sort(key=lambda c: (c.ratio is None, c.ratio or 0.0, c.info["group"]))
            kept = cands[:cap]
            trunc = {}
            if found[kind] > len(kept):
                trunc = {"truncated": {"cap": cap, "found": found[kind], "kept": len(kept)}}
            out.extend(replace(c, info={**c.info, **trunc}) for c in kept)
        return ctx.canonical(out)
