"""Whether two readings of one model on one probe set agree up to rounding.

Two reads of the same checkpoint differ only in the order their kernels sum (another device,
another thread count, a data-parallel process layout). Such readings must make the same
**decisions**: the same candidates in the same order, each with the same layers, detector,
order k, class and λ_dir, and the same rate window wherever an order was read. (A direction that
reads flat or has no order has its window set by rounding noise, which is not compared.)

Their **t-grids** agree to `T_RTOL` relative: a default grid is ``ρ_W·logspace(…)`` with ``ρ_W``
an RMS of weights (`neuromanifold.singular.sweep.default_grid`), which another summation order
changes in the last bits.

Their **directional Fishers** agree to within what rounding can change. A sweep point computes
``F = ‖v‖²/N`` over the per-sample output tangents ``v = S J u`` (`neuromanifold.singular.sweep`).
Along a dead direction ``v`` is a small difference of O(1) terms, so its absolute rounding error
``e`` does not shrink with ``v``. The read calls F at noise level up to
``NOISE_FLOOR_MARGIN · F_floor`` (`neuromanifold.singular.classify`; the floor is
``(10³·ε₆₄)²·F_scale``, `neuromanifold.singular.sweep`), which is its bound on ``‖e‖²``. Two
computations ``F₁ = ‖v + e₁‖²``, ``F₂ = ‖v + e₂‖²`` then differ by about
``2‖v‖(‖e₁‖ + ‖e₂‖) ≤ 4·√(NOISE_FLOOR_MARGIN · F · F_floor)`` at most, which near the bottom of a
dead direction's grid is far above any relative tolerance. Measured on an H200 against the CPU:
a planted order-3 chain's F = 6.38e-18 over a floor of 2.08e-25 differed by 2.0e-24 (3.1e-7
relative, 4e-5 of the bound); a zoo MLP's flat direction, F ≈ 2e-29 over a floor of 4.9e-31,
differed by 0.13 of the bound (1.3× a bound four times √(F·F_floor) without the margin). The
tolerance is

    |F₁ − F₂| ≤ F_RTOL · max(F₁, F₂) + 4 · √(NOISE_FLOOR_MARGIN · max(F₁, F₂) · F_floor)

with ``F_floor`` the larger of the two sweeps' floors.

What this does not absorb: a candidate that is an eigenvector of a near-degenerate cluster of its
factor moves by about ε₆₄·‖A‖ / its eigengap when the factor is summed in another order, so the
two reads sweep slightly different vectors (1e-8 relative in F on a small BERT read in 1 and 2
processes, README "Large models"). `reading_differences` reports such a record's F; where that
is expected, compare `decisions` alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from neuromanifold.singular.classify import NOISE_FLOOR_MARGIN

F_RTOL = 1e-9
"""Relative part of the tolerance: the products and sums of a sweep point, reordered, change it by
≈ 1e-16 relative each; 1e-9 leaves room for a deep network's few thousand of them."""
NOISE_FACTOR = 4.0 * math.sqrt(NOISE_FLOOR_MARGIN)
"""``2(‖e₁‖ + ‖e₂‖)`` with ``‖e‖² ≤ NOISE_FLOOR_MARGIN · F_floor`` on either side (module
docstring): ``NOISE_FACTOR · √(F · F_floor)`` is the noise term of the tolerance."""
T_RTOL = 1e-12
"""Relative agreement of two t-grids (their ``ρ_W`` differs in the last bits)."""

__all__ = [
    "F_RTOL",
    "NOISE_FACTOR",
    "T_RTOL",
    "decisions",
    "fisher_excess",
    "reading_differences",
]


def decisions(reading: Mapping[str, Any]) -> list[tuple]:
    """Per direction of a reading's dict (`Reading.to_dict`): ``(layers, detector, k, class,
    λ_dir, window)``, the window only where an order ``k`` was read (else ``None``)."""
    return [
        (
            tuple(d["layers"]),
            d["detector"],
            d["k"],
            d["class"],
            d["lambda_dir"],
            None if d["k"] is None else d["window"],
        )
        for d in _directions(reading)
    ]


def fisher_excess(f_a: Sequence[float], f_b: Sequence[float], floor: float) -> float:
    """``max_i |F_a,i − F_b,i| / tol_i`` over two sweeps of one grid (module docstring's ``tol``);
    ≤ 1 when they agree up to rounding, 0.0 for empty sweeps."""
    if len(f_a) != len(f_b):
        raise ValueError(f"the sweeps have {len(f_a)} and {len(f_b)} points; expected one grid")
    if not (math.isfinite(floor) and floor >= 0):
        raise ValueError(f"floor must be a finite number ≥ 0; got {floor!r}")
    worst = 0.0
    for a, b in zip(f_a, f_b, strict=True):
        diff = abs(a - b)
        if diff == 0:
            continue
        top = max(abs(a), abs(b))
        tol = F_RTOL * top + NOISE_FACTOR * math.sqrt(top * floor)
        worst = max(worst, math.inf if tol == 0 else diff / tol)
    return worst


def reading_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """What differs between two readings' dicts beyond rounding; an empty list when they agree.

    Compares `decisions`, each direction's t-grid (to `T_RTOL` relative), and its F values by
    `fisher_excess` with the larger of the two floors.
    """
    out: list[str] = []
    da, db = decisions(a), decisions(b)
    if len(da) != len(db):
        out.append(f"{len(da)} directions against {len(db)}")
    for i, (x, y) in enumerate(zip(da, db, strict=False)):
        if x != y:
            out.append(f"direction {i}: {_show(x)} against {_show(y)}")
    for i, (x, y) in enumerate(zip(_directions(a), _directions(b), strict=False)):
        sa, sb = x["sweep"], y["sweep"]
        ta, tb = sa["t"], sb["t"]
        if len(ta) != len(tb):
            out.append(f"direction {i}: the t-grids have {len(ta)} and {len(tb)} points")
            continue
        gap = max((abs(p - q) / max(p, q) for p, q in zip(ta, tb, strict=True)), default=0.0)
        if gap > T_RTOL:
            out.append(f"direction {i}: the t-grids differ by {gap:.3g} relative")
            continue
        excess = fisher_excess(sa["F"], sb["F"], max(sa["floor"], sb["floor"]))
        if excess > 1:
            out.append(f"direction {i}: F differs by {excess:.3g}× the rounding tolerance")
    return out


def _directions(reading: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if not isinstance(reading, Mapping) or not isinstance(reading.get("directions"), list):
        raise TypeError(
            "expected a reading as a dict with a 'directions' list (Reading.to_dict()); got "
            f"{type(reading).__name__}"
        )
    return reading["directions"]


def _show(decision: tuple) -> str:
    layers, detector, k, klass, _, window = decision
    return f"{'+'.join(layers)} {detector} k={k} {klass} window={window}"
