"""A/G factor spectra of a read, stored compactly, and how diffuse their near-kernel is.

`block_spectra` keeps, per block, the eigenvalue ratios ``α_i/α_max`` of ``A`` and ``γ_j/γ_max``
of ``G`` (descending) and the size of the detector's near-kernel (`near_kernel`: ratios below
``TAU_A``/``TAU_G`` with a one-decade gap to the rest). `read` does not return its factors; they
are recomputed with `kfac_factors` on the same model and probe set (deterministic: same sums).

**Diffuseness** of one spectrum, used to compare optimizers: `spread` returns

* ``n_small`` — ratios below ``tau`` (1e-3): how many directions are nearly dead;
* ``n_zero`` — of those, the ratios zero within round-off (``≤ ROUNDOFF_RATIO``): directions no
  sample reaches — dead units, or a factor whose probe set has fewer rows than its width;
* ``n_probe_zero`` — the zeros the probe size explains (``width − rows`` when the factor's row
  count is known, `block_spectra`'s ``*_rows``; all zeros when it is not);
* ``max_gap`` — the largest drop ``log10(r_i/r_{i+1})`` (decades) between consecutive ratios
  where ``r_{i+1} < tau``, both above ``ROUNDOFF_RATIO``; a drop to zeros the probe size does not
  explain counts as ``log10(r_i / ROUNDOFF_RATIO)`` (a lower bound), a drop to probe-size zeros
  not at all (clamping zeros to a tiny number once gave "280 decades", and any rank-deficient
  factor read as clean; s15 trial S #5); 0 when there is no such pair;

The third number, ``kernel``, does not come from `spread`: it is the detector's near-kernel size
(the directions it will name as candidates), `block_spectra`'s ``A_kernel``/``G_kernel``.

A clean dead structure is a block of tiny ratios separated from the live ones by a gap of one
decade or more (``kernel = n_small``, ``max_gap ≥ 1``). A diffuse one decays smoothly through
``tau``: many small ratios, no gap, so the detector names few or none of them (``kernel <
n_small``, ``max_gap < 1``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ROUNDOFF_RATIO", "SPREAD_TAU", "block_spectra", "spread"]

SPREAD_TAU = 1e-3
ROUNDOFF_RATIO = 1e-12
"""Ratios ``α_i/α_max`` at or below this are zero within round-off: ``eigvalsh`` of a symmetric
``n × n`` factor is accurate to about ``n ε α_max`` (``≤ 1.2e-13 α_max`` for ``n ≤ 512``)."""


def _ratios(mat: Any) -> tuple[list[float], int, float]:
    import torch

    from neuromanifold.singular.detectors.near_kernel import GAP, near_kernel

    ev = torch.linalg.eigvalsh(0.5 * (mat + mat.T).double()).clamp_min(0.0)
    top = float(ev.max())
    desc = sorted((float(e) for e in ev), reverse=True)
    ratios = [e / top if top > 0 else 0.0 for e in desc]
    return ratios, len(near_kernel(ev, SPREAD_TAU, gap=GAP)), top


def block_spectra(factors: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{block: {"A": ratios, "G": ratios, "A_kernel", "G_kernel", "A_max", "G_max", "A_rows",
    "G_rows"}}``.

    ``ratios`` descending (``α_i/α_max``); ``*_kernel`` the near-kernel size at ``TAU = 1e-3``
    (the detector's default ``TAU_A = TAU_G``); ``*_max`` the largest eigenvalue; ``A_rows`` the
    input rows the probe set summed into ``A`` (its rank is at most that), which `spread` uses to
    tell probe-size zeros from dead directions; ``G_rows`` None (see the comment below).
    """
    out = {}
    for name, bf in factors.items():
        a, ka, ma = _ratios(bf.A)
        g, kg, mg = _ratios(bf.G)
        out[name] = {
            "A": a,
            "G": g,
            "A_kernel": ka,
            "G_kernel": kg,
            "A_max": ma,
            "G_max": mg,
            "A_rows": _rows(getattr(bf, "a_rank_bound", None)),
            # G's row count (positions × output rows) only bounds its rank from above: C score
            # columns give C − 1 independent ones and masked positions none, so it cannot tell
            # probe-size zeros apart (s15 audit V #1); every zero of G counts as probe-size
            "G_rows": None,
        }
    return out


def _rows(bound: Any) -> int | None:
    return None if bound is None else int(bound)


def spread(
    ratios: Sequence[float], *, tau: float = SPREAD_TAU, rows: int | None = None
) -> dict[str, float | int]:
    """``{"n_small", "n_zero", "n_probe_zero", "max_gap"}`` of a descending ratio list (module
    docstring).

    ``rows``: the rows the probe set contributed to the factor (`block_spectra`'s ``*_rows``). Its
    rank is at most ``rows``, so ``n_probe_zero = max(0, len(ratios) − rows)`` zeros come from
    the probe size and carry no gap; a zero beyond those is a direction no sample reaches (a dead
    unit), and the drop to it counts as ``log10(r / ROUNDOFF_RATIO)``, a lower bound (two dead
    GELU units on 512 samples for 17 inputs had read "largest gap 0"; s15 audit U #6). With
    ``rows=None`` every zero is taken as a possible probe-size zero.

    >>> spread([1.0, 0.5, 1e-6, 1e-7])  # clean: 2 tiny ratios after a 5.7-decade gap
    {'n_small': 2, 'n_zero': 0, 'n_probe_zero': 0, 'max_gap': 5.698970004336019}
    >>> spread([1.0, 1e-1, 1e-2, 1e-3, 1e-4])["max_gap"]  # smooth decay: one decade per step
    1.0
    >>> spread([1.0, 0.5, 1e-20, 0.0])  # zeros the probe size may explain: no gap in decades
    {'n_small': 2, 'n_zero': 2, 'n_probe_zero': 2, 'max_gap': 0.0}
    >>> spread([1.0, 0.5, 0.0, 0.0], rows=100)["max_gap"]  # dead directions: ≥ 11.7 decades
    11.698970004336019
    """
    n_small = sum(1 for r in ratios if r < tau)
    n_zero = sum(1 for r in ratios if r <= ROUNDOFF_RATIO)
    n_probe = n_zero if rows is None else min(n_zero, max(0, len(ratios) - int(rows)))
    dead = n_zero - n_probe  # zeros the probe size does not explain: the first ones
    gap = 0.0
    for i, (hi, lo) in enumerate(itertools.pairwise(ratios)):
        if ROUNDOFF_RATIO < lo < tau:
            gap = max(gap, math.log10(hi / lo))
        elif lo <= ROUNDOFF_RATIO < hi and dead > 0 and i + 1 == len(ratios) - n_zero:
            gap = max(gap, math.log10(hi / ROUNDOFF_RATIO))  # a lower bound
    return {"n_small": n_small, "n_zero": n_zero, "n_probe_zero": n_probe, "max_gap": gap}
