"""Factor eigenvalues below the near-kernel threshold that the gap rule left unproposed.

The near-kernel rule (`neuromanifold.singular.detectors.near_kernel`, spec §6.2) keeps the ratios
``λ_i/λ_max < τ`` only behind a one-decade spectral gap. A trained factor whose spectrum decays
smoothly to 1e-10 therefore proposes nothing, and a reading without candidates there looks like
"no dead structure" (s17 user trial AF #4: the recipe ViT's MLP factors reach 1e-10 and no
candidate was proposed, while the zoo's compression count saw compressed units). The read lists
such blocks in ``meta["gapless_small_ratios"]`` and names them in its ``note``, so the absence is
visible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from neuromanifold.singular.detectors.linear import TAU_A, TAU_G
from neuromanifold.singular.detectors.link import BlockSpectrum
from neuromanifold.singular.detectors.near_kernel import below_tau_not_kept

__all__ = ["NOTE_BLOCKS", "gapless_note", "gapless_small_ratios"]

NOTE_BLOCKS = 3
"""Blocks named in the note (the rest are counted; ``meta`` lists every one)."""


def gapless_small_ratios(spectra: Mapping[str, BlockSpectrum | None]) -> list[dict[str, Any]]:
    """Per block and factor (``"A"``, ``"G"``), the ratios below ``τ`` (`TAU_A`, `TAU_G`) that the
    near-kernel rule did not keep: ``[{"block", "factor", "n", "min_ratio"}, …]`` in module order,
    smallest ratio first within a block (blocks without such ratios are left out)."""
    rows = []
    for name, spec in spectra.items():
        if spec is None:
            continue
        sides = (("A", spec.alpha, spec.ker_a, TAU_A), ("G", spec.gamma, spec.ker_g, TAU_G))
        for side, evals, kept, tau in sides:
            n, smallest = below_tau_not_kept(evals, tau, kept)
            if n:
                rows.append({"block": name, "factor": side, "n": n, "min_ratio": smallest})
    return rows


def gapless_note(rows: list[dict[str, Any]]) -> str:
    """The reading's note for `gapless_small_ratios` (``""`` when there are none)."""
    if not rows:
        return ""
    worst = sorted(rows, key=lambda r: r["min_ratio"])
    named = ", ".join(
        f"{r['block'] or '<root>'} {r['factor']}: {r['n']} down to {r['min_ratio']:.1e}"
        for r in worst[:NOTE_BLOCKS]
    )
    more = len(rows) - NOTE_BLOCKS
    named += f", and {more} more" if more > 0 else ""
    total = sum(r["n"] for r in rows)
    tau = TAU_A if TAU_A == TAU_G else math.nan
    return (
        f"{total} factor eigenvalue ratio(s) below τ = {tau:g} were not proposed because no "
        f"one-decade spectral gap separates them from the rest (the near-kernel rule, spec §6.2; "
        f"{named}; meta['gapless_small_ratios'])"
    )
