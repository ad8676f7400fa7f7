"""Whether two readings of one model on one probe set agree up to rounding.

Two reads of the same checkpoint differ only in the order their kernels sum (another device,
another thread count, a data-parallel process layout, the probes in another order). Such
readings must make the same **decisions**: the same candidates in the same order, each with the
same layers, detector, order k, class and λ_dir; and the same modules not covered.

Their **t-grids** and the **rate windows** of the directions whose order was read agree to
`T_RTOL` relative: a default grid is ``ρ_W·logspace(…)`` with ``ρ_W`` an RMS of weights
(`neuromanifold.singular.sweep.default_grid`), which another summation order changes in the last
bits, and a window is two of its points. (A direction that reads flat or has no order has its
window set by rounding noise, which is not compared.)

Their **directional Fishers** agree to within what rounding can change. A sweep point computes
``F = ‖v‖²/N`` over the per-sample output tangents ``v = S J u`` (`neuromanifold.singular.sweep`).
Along a dead direction ``v`` is a small difference of O(1) terms, so its absolute rounding error
``e`` does not shrink with ``v``. Two computations ``F₁ = ‖v + e₁‖²``, ``F₂ = ‖v + e₂‖²`` differ
by about ``2‖v‖(‖e₁‖ + ‖e₂‖)``, which near the bottom of a dead direction's grid is far above
any relative tolerance. For ``‖e‖²`` the tolerance takes the level the read itself calls noise,
``NOISE_FLOOR_MARGIN · F_floor`` (`neuromanifold.singular.classify`; the floor is
``(10³·ε₆₄)²·F_scale``, `neuromanifold.singular.sweep`), so the noise term is
``4·√(NOISE_FLOOR_MARGIN · F · F_floor)``. That margin is a calibration, not a derived bound: the
first version took ``‖e‖² ≤ F_floor`` (a noise term ``4·√(F·F_floor)``), and a zoo MLP's flat
direction read on an H200 and on the CPU (F ≈ 2e-29 over a floor of 4.9e-31) differed by 1.3×
that; with the read's own noise level it is 0.13 of the bound. A planted order-3 chain's
F = 6.38e-18 over a floor of 2.08e-25 differed by 2.0e-24 (3.1e-7 relative, 4e-5 of the
bound). Reading the planted cells with the probes permuted, on one CPU, moves F by up to 1e-4 of
the bound (`tests/singular/test_agreement.py`). The tolerance is

    |F₁ − F₂| ≤ F_RTOL · max(F₁, F₂) + 4 · √(NOISE_FLOOR_MARGIN · max(F₁, F₂) · F_floor)

with ``F_floor`` the larger of the two sweeps' floors; a value that is not finite never agrees.

What this does not absorb: a candidate that is an eigenvector of a near-degenerate cluster of its
factor moves by about ε₆₄·‖A‖ / its eigengap when the factor is summed in another order, so the
two reads sweep slightly different vectors (1e-8 relative in F on a small BERT read in 1 and 2
processes, README "Large models"). `reading_differences` reports such a record's F; where that
is expected, compare `decisions` alone.
"""

from __future__ import annotations

import math
from collections import Counter
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
    "grid_gap",
    "reading_differences",
]


def decisions(reading: Mapping[str, Any] | Any) -> list[tuple]:
    """Per direction of a reading (a `Reading` or its dict, `Reading.to_dict`): ``(layers,
    detector, k, class, λ_dir)``. The rate windows, t-values, are compared apart, to `T_RTOL`
    (`reading_differences`)."""
    return [
        (tuple(d["layers"]), d["detector"], d["k"], d["class"], d.get("lambda_dir"))
        for d in _directions(reading)
    ]  # λ_dir: absent from readings written before it was recorded (`Reading.from_dict`)


def grid_gap(t_a: Sequence[float] | None, t_b: Sequence[float] | None) -> float:
    """Largest relative difference ``|t_a − t_b| / max(|t_a|, |t_b|)`` of two t-lists of one
    length (a grid or a rate window); 0.0 for two empty lists or two ``None``; ``inf`` for
    lists of different lengths, one ``None``, or a value that is not finite."""
    if t_a is None or t_b is None:
        return 0.0 if t_a is None and t_b is None else math.inf
    if len(t_a) != len(t_b):
        return math.inf
    gap = 0.0
    for p, q in zip(t_a, t_b, strict=True):
        if not (math.isfinite(p) and math.isfinite(q)):
            return math.inf
        top = max(abs(p), abs(q))
        if top > 0:
            gap = max(gap, abs(p - q) / top)
    return gap


def fisher_excess(f_a: Sequence[float], f_b: Sequence[float], floor: float) -> float:
    """``max_i |F_a,i − F_b,i| / tol_i`` over two sweeps of one grid (module docstring's ``tol``);
    ≤ 1 when they agree up to rounding, 0.0 for empty sweeps, ``inf`` where either value is not
    finite (a NaN or an overflow is no rounding)."""
    if len(f_a) != len(f_b):
        raise ValueError(f"the sweeps have {len(f_a)} and {len(f_b)} points; expected one grid")
    if not (math.isfinite(floor) and floor >= 0):
        raise ValueError(f"floor must be a finite number ≥ 0; got {floor!r}")
    worst = 0.0
    for a, b in zip(f_a, f_b, strict=True):
        if not (math.isfinite(a) and math.isfinite(b)):
            return math.inf
        diff = abs(a - b)
        if diff == 0:
            continue
        top = max(abs(a), abs(b))
        tol = F_RTOL * top + NOISE_FACTOR * math.sqrt(top * floor)
        worst = max(worst, math.inf if tol == 0 else diff / tol)
    return worst


def reading_differences(a: Mapping[str, Any] | Any, b: Mapping[str, Any] | Any) -> list[str]:
    """What differs between two readings (`Reading` objects or their dicts) beyond rounding; an
    empty list when they agree.

    Compares the modules not covered, then, when both read as many directions, per direction
    its `decisions`, its rate window where an order was read and its t-grid (each to `T_RTOL`
    relative, `grid_gap`) and its F values (`fisher_excess` with the larger of the two floors).
    With different counts, the decisions found in one reading only are listed instead. The
    ``meta`` (times, pass counts, the process layout) is not compared.
    """
    out: list[str] = []
    a, b = _as_dict(a), _as_dict(b)  # a Reading converted once
    ra, rb = a["directions"], b["directions"]
    da, db = decisions(a), decisions(b)
    nca, ncb = a.get("not_covered") or [], b.get("not_covered") or []
    if nca != ncb:
        out.append(f"the modules not covered differ: {_names(nca)} against {_names(ncb)}")
    if len(ra) != len(rb):
        out.append(f"{_count(len(ra))} against {len(rb)}")
        only_a, only_b = Counter(da) - Counter(db), Counter(db) - Counter(da)
        out.extend(f"only in the first: {_show(x)}" for x in only_a.elements())
        out.extend(f"only in the second: {_show(x)}" for x in only_b.elements())
        return out
    for i, (x, y) in enumerate(zip(ra, rb, strict=True)):
        if da[i] != db[i]:
            fields = [f for f, p, q in zip(FIELDS, da[i], db[i], strict=True) if p != q]
            verb = "differs" if len(fields) == 1 else "differ"
            lam = f" (λ_dir {da[i][4]} against {db[i][4]})" if "lambda_dir" in fields else ""
            out.append(
                f"direction {i}: {', '.join(fields)} {verb}: {_show(da[i])} against "
                f"{_show(db[i])}{lam}"
            )
            continue
        if x["k"] is not None and grid_gap(x["window"], y["window"]) > T_RTOL:
            out.append(
                f"direction {i}: the rate windows differ: {x['window']} against {y['window']}"
            )
        sa, sb = x.get("sweep") or {}, y.get("sweep") or {}
        if not sa or not sb:  # a record without its sweep (hand-made or cut JSON)
            if bool(sa) != bool(sb):
                out.append(f"direction {i}: one record has no sweep")
            continue
        gap = grid_gap(sa["t"], sb["t"])
        if gap > T_RTOL:
            out.append(f"direction {i}: the t-grids differ by {_gap(gap, sa['t'], sb['t'])}")
            continue
        floors = (sa["floor"], sb["floor"])
        if not all(math.isfinite(f) and f >= 0 for f in floors):
            out.append(f"direction {i}: a sweep floor is not a finite number ≥ 0: {floors}")
            continue
        if len(sa["F"]) != len(sb["F"]) or len(sa["F"]) != len(sa["t"]):
            out.append(f"direction {i}: the sweeps hold {len(sa['F'])} and {len(sb['F'])} F values")
            continue
        excess = fisher_excess(sa["F"], sb["F"], max(floors))
        if excess > 1:
            out.append(f"direction {i}: F differs by {excess:.3g}× the rounding tolerance")
    return out


def _as_dict(reading: Mapping[str, Any] | Any) -> Mapping[str, Any]:
    if not isinstance(reading, Mapping) and callable(getattr(reading, "to_dict", None)):
        reading = reading.to_dict()
    if not isinstance(reading, Mapping) or not isinstance(reading.get("directions"), list):
        raise TypeError(
            "expected a Reading, or a reading as a dict with a 'directions' list "
            f"(Reading.to_dict(), the JSON of `neuromanifold read --json`); got "
            f"{type(reading).__name__}"
        )
    return reading


def _directions(reading: Mapping[str, Any] | Any) -> list[Mapping[str, Any]]:
    return _as_dict(reading)["directions"]


def _names(not_covered: Sequence[Any]) -> str:
    names = [str(e.get("name", e)) if isinstance(e, Mapping) else str(e) for e in not_covered]
    return "[" + ", ".join(names) + "]"


def _gap(gap: float, t_a: Sequence[float], t_b: Sequence[float]) -> str:
    if len(t_a) != len(t_b):
        return f"length: {len(t_a)} and {len(t_b)} points"
    return f"{gap:.3g} relative" if math.isfinite(gap) else "a value that is not finite"


FIELDS = ("layers", "detector", "k", "class", "lambda_dir")
"""The fields of a `decisions` tuple, named in a difference's message."""


def _count(n: int) -> str:
    return f"{n} direction" if n == 1 else f"{n} directions"


def _show(decision: tuple) -> str:
    layers, detector, k, klass, _ = decision
    return f"{'+'.join(layers)} {detector} k={k} {klass}"
