"""Smooth, crossing and critical points of an LCN neuromanifold (spec §4.2, §4.6).

Given ``v`` (or a parameter ``θ``, then ``v = μ(θ)``), :func:`classify_locus` finds the fiber
points over ``v`` (both fiber routes; the invariants only pick the scale, so ``δ = 0`` is used
when none is given) and reads three numbers off their Jacobians ``J_i = Jμ(θ_i)``:

* ``rank J_i`` — below ``dim M = Σ k_l − (L − 1)`` the point is a **critical** point of μ;
* ``rank [J_i | J_j]`` for every pair — above ``dim M`` two sheets of M pass through ``v`` with
  different tangent spaces: a **crossing** (a singular point although every ``J_i`` has full rank);
* otherwise ``v`` is a **smooth** point (one tangent space of dimension ``dim M``).

``v = 0`` is reported as ``"zero"`` (singular when the normal form has depth ``L ≥ 2``; where it
has depth 1, ``M = R^k`` and ``v = 0`` is classified from its fiber points like any other ``v``)
and a ``v`` with no fiber point as
``"off_manifold"``. Ranks count singular values above ``RANK_RTOL · σ_max``; the singular values
themselves are reported so the margin can be judged. For 1-D ``v`` the smallest relative distance
between two roots is reported too (near-collisions of root orbits signal nearby singularities).

**Accuracy of a fiber point rebuilt from v.** A given ``θ`` is exact, but a fiber point computed
from ``v`` solves ``μ(θ) = v`` only to some ``τ`` (its residual plus the round-off of ``μ``). Near
a critical point μ is flat to first order along the extra null direction ``n``, so such a point may
sit ``t ≈ √(τ / ‖Q(n)‖)`` off the critical one (``Q`` the second-order term of μ) and show
``σ_dimM ≈ 2√(τ ‖Q(n)‖)`` — about ``√ε`` relative, e.g. ``1e-8`` for the spec §4.6 example rebuilt
from its ``v``, whose root orbits are double. A rank threshold of ``RANK_RTOL = 1e-9`` cannot see
that the point is critical, and whether it does then depends on ``δ`` (the scale of the point).
So, with ``v=``, each fiber point's rank also discounts singular values up to its floor
(:func:`~.accuracy.sigma_floor`, twice that estimate): ``v`` within round-off of a critical value of
μ is reported as critical, for every ``δ``. The floor is of the order ``√ε · σ_max``: a smooth point
whose ``σ_dimM`` is well above it (for the §4.6 family, root orbits more than about ``1e-6`` apart)
keeps rank ``dim M``. With ``theta=`` the given point decides and no floor is used (the same verdict
as :func:`~.metric.is_smooth_point`). The root gap is reported but is not itself in
the verdict: a repeated root of ``v`` is not enough for a critical point (spec §4.6: one common
root of ``w_1`` and ``w_2(z^s)`` is regular).

References: K. Kohn, G. Montúfar, V. Shahverdi, M. Trager, SIAGA 2024 (critical points of LCNs);
E. M. Achour, K. Kohn, H. Rauhut, arXiv:2507.06367 (Theorem 4 needs the smooth locus).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from neuromanifold.linear.accuracy import floored_rank, sigma_floor
from neuromanifold.linear.architecture import LCN, validate_params
from neuromanifold.linear.fiber import check_lcn_target, lcn_fiber
from neuromanifold.linear.fiber_algebraic import roots_with_infinity
from neuromanifold.linear.invariants import delta as lcn_delta
from neuromanifold.linear.metric import RTOL_RANK, balanced_representative
from neuromanifold.linear.normalize import normal_form_note, reduce_lcn
from neuromanifold.linear.ntk import jacobian
from neuromanifold.linear.polynomial import mu

#: Singular values above ``RANK_RTOL · σ_max`` count towards a rank (the package's shared
#: threshold :data:`~neuromanifold.linear.metric.RTOL_RANK`, so is_smooth_point agrees).
RANK_RTOL = RTOL_RANK


Classification = Literal["smooth", "crossing", "critical", "zero", "off_manifold"]


@dataclass(frozen=True)
class LocusReport:
    """Where ``v`` sits on the neuromanifold, with the numbers behind the verdict.

    Attributes:
        classification: ``smooth`` / ``crossing`` / ``critical`` / ``zero`` / ``off_manifold``.
        dim_M: expected dimension of M.
        ranks: ``rank Jμ`` at each point examined (the given θ first, then fiber points).
        singular_values: the leading ``dim_M + 1`` singular values of each ``Jμ``.
        pair_ranks: ``rank [J_i | J_j]`` for each pair ``i < j`` of fiber points.
        rank_rtol: the relative threshold used for all ranks.
        sigma_floors: per point of ``ranks``, the absolute accuracy floor
            (:func:`~.accuracy.sigma_floor`) below which a singular value also counts as zero: ``0``
            for a given ``θ`` (exact) and for every point when ``θ`` is given, the floor of each
            fiber point rebuilt from ``v`` otherwise. The rank counts ``σ > max(rank_rtol·σ_max,
            floor)``.
        n_fiber_points: number of fiber points (modulo signs) found over ``v``.
        ntk_gap: largest entrywise NTK difference between the fiber points (at the δ used).
        min_root_gap: 1-D only — ``min |z_i − z_j| / max(1, |z_i|, |z_j|)`` over roots of v.
        fiber_residual: residual of the fiber search (best one when off the manifold).
        notes: remarks.
    """

    classification: Classification
    dim_M: int
    ranks: tuple[int, ...]
    singular_values: tuple[tuple[float, ...], ...]
    pair_ranks: tuple[int, ...]
    rank_rtol: float
    n_fiber_points: int
    ntk_gap: float
    min_root_gap: float | None
    fiber_residual: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    sigma_floors: tuple[float, ...] = ()

    @property
    def max_pair_rank(self) -> int:
        """Largest ``rank [J_i | J_j]`` (0 when there is at most one fiber point)."""
        return max(self.pair_ranks, default=0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict of every field plus ``max_pair_rank``."""
        return {
            "classification": self.classification,
            "dim_M": self.dim_M,
            "ranks": list(self.ranks),
            "singular_values": [list(s) for s in self.singular_values],
            "pair_ranks": list(self.pair_ranks),
            "max_pair_rank": self.max_pair_rank,
            "rank_rtol": self.rank_rtol,
            "n_fiber_points": self.n_fiber_points,
            "ntk_gap": self.ntk_gap,
            "min_root_gap": self.min_root_gap,
            "fiber_residual": self.fiber_residual,
            "notes": list(self.notes),
            "sigma_floors": list(self.sigma_floors),
        }


def _svals(M: np.ndarray) -> np.ndarray:
    return np.linalg.svd(M, compute_uv=False)


def min_root_gap(v: np.ndarray) -> float:
    """``min_{i≠j} |z_i − z_j| / max(1, |z_i|, |z_j|)`` over the finite roots of a 1-D ``v``.

    >>> round(min_root_gap(np.array([2.0, -3.0, 1.0])), 12)  # roots 1, 2
    0.5
    """
    r = roots_with_infinity(v)
    finite = r[np.isfinite(r.real)]
    if finite.size < 2:
        return float("inf")
    best = float("inf")
    for a, b in itertools.combinations(finite, 2):
        best = min(best, float(abs(a - b) / max(1.0, abs(a), abs(b))))
    return best


def classify_locus(
    arch: LCN,
    *,
    v: Any = None,
    theta: Sequence[Any] | None = None,
    delta: Any = None,
    n_starts: int = 40,
    seed: int = 0,
) -> LocusReport:
    """Classify ``v`` (or ``μ(θ)``) as smooth / crossing / critical / zero / off-manifold.

    Exactly one of ``v`` and ``theta`` must be given. ``delta`` defaults to ``δ(θ)`` or to 0.
    With ``v=`` the fiber points' ranks discount singular values below their floor
    (:func:`~.accuracy.sigma_floor`, module docstring), so the verdict does not depend on ``δ``. The
    network is used as given; when it is not in the paper's normal form the notes say so
    (:func:`~.normalize.normal_form_note`).
    """
    if (v is None) == (theta is None):
        raise ValueError("give exactly one of v= and theta= (got both or neither)")
    if not isinstance(arch, LCN):
        raise TypeError(f"arch = {arch!r}: expected an LCN")
    th = validate_params(arch, theta) if theta is not None else None
    if th is not None:
        v = mu(arch, th)
        if delta is None:
            delta = lcn_delta(th)
    if delta is None:
        delta = np.zeros(arch.L - 1)
    v, d = check_lcn_target(arch, v, delta)
    m = arch.dim_M
    gap = min_root_gap(v) if arch.D == 1 and np.any(v) else None
    form = normal_form_note(arch)
    notes: list[str] = [form] if form else []
    if not np.any(v) and reduce_lcn(arch).reduced.L >= 2:
        notes.append("v = 0")
        return LocusReport("zero", m, (), (), (), RANK_RTOL, 0, 0.0, gap, 0.0, tuple(notes))
    rep = lcn_fiber(arch, v, d, n_starts=n_starts, seed=seed, theta_guess=th)
    pts = rep.point_arrays()
    # at each point's balanced image on its rescaling orbit, as is_smooth_point reads it
    Js = [
        jacobian(arch, balanced_representative(arch, p))
        for p in ([th] if th is not None else []) + pts
    ]
    svals = [_svals(J) for J in Js]
    # θ given: it is exact and decides (as is_smooth_point does); else each point's accuracy floor
    floors = [0.0] * len(Js) if th is not None else [sigma_floor(arch, p, v) for p in pts]
    ranks = [floored_rank(s, f) for s, f in zip(svals, floors, strict=True)]
    fiber_J = Js[1:] if th is not None else Js
    pair_ranks = [
        floored_rank(_svals(np.hstack([a, b]))) for a, b in itertools.combinations(fiber_J, 2)
    ]
    if not pts and th is None:
        cls: Classification = "off_manifold"
        notes.append(f"no fiber point over v (best residual {rep.residual:.3g})")
    elif min(ranks) < m:
        cls = "critical"
        notes.append(f"rank Jμ = {min(ranks)} < dim M = {m}")
        floored = [
            (s[m - 1], f)
            for s, f in zip(svals, floors, strict=True)
            if floored_rank(s) >= m and floored_rank(s, f) < m
        ]
        if floored:
            notes.append(
                f"σ_dimM = {floored[0][0]:.3g} is below the accuracy floor {floored[0][1]:.3g} of "
                "a fiber point rebuilt from v: v is within round-off of a critical value of μ "
                "(spec §4.6; see sigma_floor)"
            )
    elif any(r > m for r in pair_ranks):
        cls = "crossing"
        notes.append(f"two tangent spaces: rank [J|J'] = {max(pair_ranks)} > dim M = {m}")
    else:
        cls = "smooth"
    return LocusReport(
        classification=cls,
        dim_M=m,
        ranks=tuple(ranks),
        singular_values=tuple(tuple(float(x) for x in s[: m + 1]) for s in svals),
        pair_ranks=tuple(pair_ranks),
        rank_rtol=RANK_RTOL,
        n_fiber_points=len(pts),
        ntk_gap=rep.max_ntk_diff_abs,
        min_root_gap=gap,
        fiber_residual=rep.residual,
        notes=tuple(notes),
        sigma_floors=tuple(floors),
    )
