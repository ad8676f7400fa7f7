"""How different are the metrics ``g = K_δ(v)⁺`` of several invariant values ``δ`` at one ``v``?

The NTK of an LCN at a point of the ``(v, δ)``-fiber depends on the initialisation through ``δ``
(spec §2.5: ``K_δ(v) = N(v) Σ_l G_l(û) / x_l(v, δ)``), so one end-to-end filter carries one
metric ``g_v = K_δ(v)⁺|_{T_vM}`` per ``δ`` (spec §2.4, §6: same ``v``, different metric).
:func:`compare_metrics` builds ``K_{δ⁽ⁱ⁾}(v)`` for ``m ≥ 2`` invariant vectors and reports, per
pair ``(i, j)``, with ``Q`` an orthonormal basis of ``T_vM`` (``(n_v, dim M)``; the leading left
singular vectors of ``Jμ`` at the first fiber point) and ``A = Qᵀ K_i Q``, ``B = Qᵀ K_j Q``
(``(dim M, dim M)``, positive definite at a regular point):

* ``k_rel_frobenius = ‖K_i − K_j‖_F / max(‖K_i‖_F, ‖K_j‖_F)``; ``metric_rel_frobenius`` the same
  for ``g_i = K_i⁺``, ``g_j = K_j⁺`` (pseudo-inverses truncated at rank ``dim M``);
* the generalized eigenvalues ``λ_1 ≤ … ≤ λ_{dim M}`` of the pencil ``A ξ = λ B ξ``. They are also
  those of ``(g_j, g_i)`` on ``T_vM``, so ``λ_1 ≤ g_j(ξ, ξ) / g_i(ξ, ξ) ≤ λ_{dim M}`` for every
  ``ξ ∈ T_vM``: all ``λ = 1`` iff the two metrics agree. ``pencil_condition = λ_max / λ_min``;
* the affine-invariant (Riemannian SPD) distance ``d(A, B) = ‖log(B^{-1/2} A B^{-1/2})‖_F =
  √(Σ_k log² λ_k)``. It does not depend on the basis ``Q`` of ``T_vM`` and ``d(A, B) =
  d(A⁻¹, B⁻¹)``, so it is the distance of the metrics themselves; it is symmetric and satisfies
  the triangle inequality. ``max_abs_log = max_k |log λ_k|`` (the Thompson distance) decides
  ``agree`` against ``agree_tol``.

**Route.** Each ``K_{δ⁽ⁱ⁾}(v)`` is the NTK ``Jμ Jμᵀ`` at a fiber point found by the Gauss–Newton
route of spec §5(b) (:func:`~.solve.solve_fiber_point`): the first point from ``theta`` (rescaled by
the Lemma to ``δ⁽¹⁾``) or random starts, every later one from the Lemma's rescaling of that first
point to ``δ⁽ⁱ⁾`` alone (:func:`~.rescale.rescale_to_delta`; it is on the fiber up to round-off),
i.e. on the same sheet. The route works for any strides and any ``D`` whenever ``v ∈ M``; ``K_δ(v)``
is *the* NTK of every initialisation with invariants ``δ`` only where the fiber is one sign orbit:
1-D with all ``s_1..s_{L−1} > 1`` on the smooth locus (spec §4.1). With a stride one (spec §4.3), in
``D ≥ 2`` with equal-shape swaps (§4.4) or at a crossing (§4.2) other sheets carry other NTKs; the
numbers then compare the metrics on the one sheet reached (``notes`` says so;
:func:`~.fiber.lcn_fiber` lists all sheets). The metric needs ``rank K = dim M``: each point's
regularity report is included (its rank threshold allows for the point's accuracy,
:func:`~.accuracy.rebuilt_point_rtol`) and pairs with a singular ``K|_{T_vM}`` (eigenvalues at or
below ``RTOL_RANK · λ_max``) have ``defined = False``; when both points are regular, ``K`` is only
ill-conditioned there and ``notes`` says so.

References: E. M. Achour, K. Kohn, H. Rauhut, arXiv:2507.06367 (the metric depends on the
initialisation through δ); the affine-invariant metric on SPD matrices (e.g. Bhatia, *Positive
Definite Matrices*, 2007, ch. 6).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuromanifold.linear._json import as_lists, as_tuples, finite_or_none
from neuromanifold.linear.accuracy import rebuilt_point_rtol
from neuromanifold.linear.architecture import LCN, _is_int, _is_real, validate_params
from neuromanifold.linear.fiber import check_lcn_target
from neuromanifold.linear.invariants import sq_norms
from neuromanifold.linear.locus import LocusReport, classify_locus
from neuromanifold.linear.metric import (
    RTOL_RANK,
    SmoothPointReport,
    is_smooth_point,
    tangent_basis,
    tangent_condition_number,
)
from neuromanifold.linear.metric_pair import (
    METRIC_AGREE_TOL,
    TANGENT_SIN_TOL,
    MetricPair,
    metric_pair,
)
from neuromanifold.linear.normalize import normal_form_note, reduce_lcn
from neuromanifold.linear.ntk import ntk_at_fiber_point
from neuromanifold.linear.rescale import rescale_to_delta
from neuromanifold.linear.solve import solve_fiber_point

__all__ = ["DeltaMetric", "MetricComparison", "compare_metrics"]


def _locus_from_dict(d: dict[str, Any]) -> LocusReport:
    """Inverse of :meth:`~.locus.LocusReport.to_dict` (drops the derived ``max_pair_rank``).

    Lists become tuples of their own type: ranks ``int``, notes ``str``, numbers ``float``.
    """
    typed: dict[str, Any] = {
        "ranks": lambda x: tuple(int(r) for r in x),
        "pair_ranks": lambda x: tuple(int(r) for r in x),
        "notes": lambda x: tuple(str(n) for n in x),
        "singular_values": as_tuples,
        "sigma_floors": as_tuples,
    }
    return LocusReport(
        **{k: typed.get(k, lambda y: y)(x) for k, x in d.items() if k != "max_pair_rank"}
    )


@dataclass(frozen=True)
class DeltaMetric:
    """The fiber point and NTK ``K_δ(v)`` for one ``δ``, with the regularity numbers behind it.

    Attributes:
        delta: the invariants ``δ_l = ‖w_{l+1}‖² − ‖w_l‖²`` (``L − 1`` values).
        theta: the fiber point (per-layer filters as nested tuples).
        ntk: ``K_δ(v) = Jμ Jμᵀ`` there, ``(n_v, n_v)`` (v flattened in C order).
        sq_norms: ``‖w_l‖²`` at the point (the Lemma's ``x_l``).
        residual, tolerance: the unit-scale Gauss–Newton residual of `solve.fiber_newton`
            (``‖(μ(θ) − v)/ρ^L, (δ(θ) − δ)/ρ²‖_∞``, relative to the scale ``ρ`` of ``(v, δ)``) and
            its threshold.
        smooth: :func:`~.metric.is_smooth_point` at ``theta`` (rank of ``Jμ``, ``σ_dimM``,
            ``σ_{dimM+1}``, ``rtol``; a self-crossing passes it, spec §4.2), with
            ``rtol = max(RTOL_RANK, σ_floor / σ_max)`` (:func:`~.accuracy.rebuilt_point_rtol`): the
            point is rebuilt from ``v`` to the Gauss–Newton tolerance, so a critical point can
            show ``σ_dimM`` up to about ``√(residual)`` (spec §4.6 example: ``σ_dimM / σ_max`` of
            ``1e-7`` to ``3e-7``, far above ``RTOL_RANK``); singular values below that floor
            count as zero.
        rank_K: eigenvalues of ``K`` above ``RTOL_RANK · λ_max`` (the metric uses rank ``dim M``).
        tangent_condition: ``λ_1 / λ_{dim M}`` of ``K`` (None if ``K`` is singular there).
        locus: with ``locus=True``, :func:`~.locus.classify_locus` of ``v`` at this ``δ`` (both
            fiber routes: smooth / crossing / critical, the number of fiber points and the NTK
            gap between them, i.e. whether ``K_δ(v)`` is single-valued at this ``δ``); else None.
    """

    delta: tuple[float, ...]
    theta: tuple[Any, ...]
    ntk: tuple[tuple[float, ...], ...]
    sq_norms: tuple[float, ...]
    residual: float
    tolerance: float
    smooth: SmoothPointReport
    rank_K: int
    tangent_condition: float | None
    locus: LocusReport | None = None

    def ntk_array(self) -> np.ndarray:
        """``K`` as a float64 array."""
        return np.array(self.ntk, dtype=np.float64)

    def theta_arrays(self) -> tuple[np.ndarray, ...]:
        """The fiber point as float64 arrays."""
        return tuple(np.array(w, dtype=np.float64) for w in self.theta)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (round-trips through :meth:`from_dict`)."""
        return as_lists(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeltaMetric:
        """Inverse of :meth:`to_dict`."""
        nested, sub = ("delta", "theta", "ntk", "sq_norms"), ("smooth", "locus")
        return cls(
            **{k: (as_tuples(x) if k in nested else x) for k, x in d.items() if k not in sub},
            smooth=SmoothPointReport(**d["smooth"]),
            locus=None if d.get("locus") is None else _locus_from_dict(d["locus"]),
        )


@dataclass(frozen=True)
class MetricComparison:
    """Result of :func:`compare_metrics`: a :class:`DeltaMetric` per ``δ``, a pair per ``i < j``.

    Attributes:
        architecture: ``arch.to_dict()``.
        v: the end-to-end filter (flattened in C order).
        dim_M: the rank at which ``K⁺`` is truncated (``Σ k_l − (L − 1)``).
        route: how the ``K``'s were built (module docstring).
        per_delta: one entry per ``δ⁽ⁱ⁾``, in the given order.
        pairs: one :class:`MetricPair` per ``i < j`` (lexicographic).
        rtol_rank, agree_tol, tangent_tol: the thresholds used.
        notes: which spec statement applies (determinacy of ``K_δ(v)``), normal-form remarks.
    """

    architecture: dict[str, Any]
    v: tuple[float, ...]
    dim_M: int
    route: str
    per_delta: tuple[DeltaMetric, ...]
    pairs: tuple[MetricPair, ...]
    rtol_rank: float
    agree_tol: float
    tangent_tol: float
    notes: tuple[str, ...]

    def pair(self, i: int, j: int) -> MetricPair:
        """The pair ``{i, j}`` (either order; numbers are those of ``(min, max)``)."""
        a, b = min(i, j), max(i, j)
        for p in self.pairs:
            if (p.i, p.j) == (a, b):
                return p
        raise ValueError(
            f"(i, j) = ({i}, {j}): expected two distinct indices in 0..{len(self.per_delta) - 1}"
        )

    def distance_matrix(self) -> np.ndarray:
        """Symmetric ``(m, m)`` matrix of affine-invariant distances (NaN where undefined)."""
        m = len(self.per_delta)
        D = np.zeros((m, m))
        for p in self.pairs:
            d = p.affine_invariant_distance
            D[p.i, p.j] = D[p.j, p.i] = np.nan if d is None else d
        return D

    @property
    def same_tangent_space(self) -> bool:
        """All pairs have ``tangent_sin ≤ tangent_tol``."""
        return all(p.tangent_sin <= self.tangent_tol for p in self.pairs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (round-trips through :meth:`from_dict`)."""
        return {
            **as_lists(dataclasses.asdict(self)),
            "same_tangent_space": self.same_tangent_space,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MetricComparison:
        """Inverse of :meth:`to_dict`."""
        plain = {
            k: x for k, x in d.items() if k not in ("same_tangent_space", "per_delta", "pairs")
        }
        return cls(
            **{k: (tuple(x) if isinstance(x, list) else x) for k, x in plain.items()},
            per_delta=tuple(DeltaMetric.from_dict(x) for x in d["per_delta"]),
            pairs=tuple(MetricPair.from_dict(x) for x in d["pairs"]),
        )


def _check_deltas(arch: LCN, deltas: Any) -> list[np.ndarray]:
    if isinstance(deltas, np.ndarray) and deltas.ndim >= 1:
        deltas = list(deltas)  # rows (or scalars when L = 2)
    if isinstance(deltas, str) or not isinstance(deltas, Sequence):
        raise ValueError(
            f"deltas = {deltas!r}: expected a sequence of at least 2 invariant vectors, each of "
            f"L − 1 = {arch.L - 1} values"
        )
    if len(deltas) < 2:
        raise ValueError(
            f"deltas has {len(deltas)} entr{'y' if len(deltas) == 1 else 'ies'}: expected at "
            f"least 2 invariant vectors to compare"
        )
    out = []
    for i, d in enumerate(deltas):
        try:
            a = np.atleast_1d(np.asarray(d, dtype=np.float64))
        except (TypeError, ValueError):
            raise ValueError(
                f"deltas[{i}] = {d!r}: expected L − 1 = {arch.L - 1} numbers"
            ) from None
        if a.ndim != 1 or a.size != arch.L - 1:
            raise ValueError(
                f"deltas[{i}] has shape {a.shape}: expected L − 1 = {arch.L - 1} invariants "
                "δ_l = ‖w_(l+1)‖² − ‖w_l‖²"
            )
        if not np.all(np.isfinite(a)):
            raise ValueError(f"deltas[{i}] = {a.tolist()}: entries must be finite")
        out.append(a)
    return out


def _check_tol(name: str, value: Any) -> float:
    if not (_is_real(value) and 0 < value < 1):
        raise ValueError(f"{name} = {value!r}: expected a float in (0, 1)")
    return float(value)


def _check_int(name: str, value: Any, *, minimum: int) -> None:
    if not (_is_int(value) and value >= minimum):
        raise ValueError(f"{name} = {value!r}: expected an int >= {minimum}")


def _regime_note(arch: LCN) -> str:
    """Which spec statement covers ``K_δ(v)`` here (on the reduced network of spec §1.2)."""
    if arch.L == 1:
        return "L = 1: there are no invariants, so K does not depend on δ."
    red = reduce_lcn(arch).reduced
    inner = red.strides[:-1]
    which = " of the reduced network (scalar layers removed, spec §1.2)" if red.L < arch.L else ""
    if red.D == 1 and all(s[0] > 1 for s in inner):
        return (
            f"D = 1, all strides{which} > 1: on the smooth locus the (v, δ)-fiber is one sign "
            "orbit (spec §4.1), so each K_δ(v) is the NTK of every initialisation with that δ; a "
            "self-crossing v (spec §4.2) has other sheets this comparison does not see "
            "(locus=True / lcn_fiber find them; on the command line lcn compare --locus and "
            "lcn fiber)."
        )
    if red.D == 1:
        ones = [i + 1 for i, s in enumerate(inner) if s[0] == 1]
        return (
            f"D = 1 with stride one{which} (s_l = 1 for l = {', '.join(map(str, ones))}): K need "
            "not be a function of (v, δ) (spec §4.3): regrouping real roots between layers gives "
            "other sheets with, in general, other NTKs (for two layers they coincide at δ = 0). "
            "The metrics compared here are those of one sheet: the first fiber point and its "
            "Lemma rescalings (locus=True / lcn_fiber search all sheets; on the command line lcn "
            "compare --locus and lcn fiber)."
        )
    return (
        f"D = {arch.D}: determinacy of K_δ(v) is not asserted from the architecture (spec §4.4: "
        "layers of equal shape and dilation can swap factors, giving other NTKs). The metrics "
        "compared here are those of one sheet: the first fiber point and its Lemma rescalings."
    )


def _ill_conditioned_note(per: Sequence[DeltaMetric], pairs: Sequence[MetricPair]) -> list[str]:
    """A note for pairs that are undefined although both points are regular (rank ``dim M``).

    ``defined`` needs ``λ_min > RTOL_RANK · λ_max`` of ``K`` on ``T_vM``; the eigenvalues of
    ``K = J Jᵀ`` are ``σ²``, so that is ``σ_dimM / σ_max > √RTOL_RANK``, a stricter test than the
    rank of ``Jμ`` (``σ_dimM / σ_max > RTOL_RANK``). Between the two, ``K`` is ill-conditioned,
    not singular.
    """
    ill = [q for q in pairs if not q.defined and per[q.i].smooth.smooth and per[q.j].smooth.smooth]
    if not ill:
        return []
    idx = sorted({k for q in ill for k in (q.i, q.j)})
    conds = ", ".join(
        f"{'inf' if per[k].tangent_condition is None else f'{per[k].tangent_condition:.3g}'} at "
        f"deltas[{k}]"
        for k in idx
    )
    which = ", ".join(f"({q.i}, {q.j})" for q in ill)
    return [
        f"pairs {which}: undefined although rank Jμ = dim M at both points: K on T_vM is "
        f"ill-conditioned, not singular (cond K|T = {conds}); the pencil needs cond K|T below "
        f"1/RTOL_RANK = {1 / RTOL_RANK:.3g}"
    ]


def compare_metrics(
    arch: LCN,
    v: Any,
    deltas: Sequence[Any],
    *,
    theta: Sequence[Any] | None = None,
    n_starts: int = 20,
    seed: int = 0,
    tol: float = 1e-13,
    agree_tol: float = METRIC_AGREE_TOL,
    tangent_tol: float = TANGENT_SIN_TOL,
    locus: bool = False,
) -> MetricComparison:
    """Compare the metrics ``g = K_{δ⁽ⁱ⁾}(v)⁺`` on ``T_vM`` for ``m ≥ 2`` invariant vectors.

    Args:
        arch: the LCN (any D; used as given, ``notes`` says when it is not in normal form).
        v: the end-to-end filter, shape ``arch.out_shape`` (or flat in C order); non-zero
            unless the normal form of ``arch`` has depth 1 (``M = R^k`` is smooth at 0).
        deltas: ``m ≥ 2`` invariant vectors, each of ``L − 1`` values (a number when ``L = 2``).
        theta: optional factorisation of ``v`` (any invariants): the fiber points start from its
            Lemma rescalings (this picks the sheet where there are several). Otherwise the first
            point comes from ``n_starts`` random starts (``seed``).
        tol: Gauss–Newton tolerance on the unit-scale residual (`solve.fiber_newton`).
        agree_tol: threshold on ``max |log λ|`` for a pair's ``agree``.
        tangent_tol: threshold on ``tangent_sin`` for :attr:`MetricComparison.same_tangent_space`.
        locus: also classify ``v`` at every ``δ`` (:func:`~.locus.classify_locus`: a full fiber
            search by both routes, ``n_starts`` and ``seed``): finds crossings and the other
            sheets (their NTK gap) that the comparison itself does not see.

    Raises ``RuntimeError`` if no fiber point is found (``v`` off the neuromanifold).

    Spec §6: ``k = (2, 2)``, ``s = 2``, ``v = (3, 6, 1, 2)``: ``δ = 5`` gives ``x = (5, 10)``,
    ``δ = 0`` gives ``x_1 = x_2 = √50``, and the two metrics differ.

    >>> r = compare_metrics(LCN((2, 2), (2,)), [3, 6, 1, 2], [[5.0], [0.0]])
    >>> [round(x, 9) for x in r.per_delta[0].sq_norms], r.pair(0, 1).agree
    ([5.0, 10.0], False)
    """
    if not isinstance(arch, LCN):
        raise TypeError(f"arch = {arch!r}: expected an LCN")
    ds = _check_deltas(arch, deltas)
    v_arr, _ = check_lcn_target(arch, v, ds[0])
    if not np.any(v_arr) and reduce_lcn(arch).reduced.L >= 2:
        # in normal form of depth 1 (L = 1, or scalar layers besides one) M = R^k is smooth at 0
        raise ValueError("v = 0: the zero filter is a singular point of M; the metric is undefined")
    agree_tol = _check_tol("agree_tol", agree_tol)
    tangent_tol = _check_tol("tangent_tol", tangent_tol)
    _check_int("n_starts", n_starts, minimum=1)
    _check_int("seed", seed, minimum=0)
    ref = None if theta is None else validate_params(arch, theta)
    first = "the given theta rescaled by the Lemma to δ⁽¹⁾ (random starts if that fails)"
    route = (
        f"Gauss–Newton fiber points (solve_fiber_point, tol = {tol:g}): δ⁽¹⁾ from "
        f"{first if ref is not None else 'random starts'} (n_starts = {n_starts}, seed = {seed}), "
        "every later δ from that point rescaled by the Lemma (one sheet); K = Jμ Jμᵀ at each "
        "point; T_vM = range Jμ at the first point"
    )
    m = arch.dim_M
    per: list[DeltaMetric] = []
    bases: list[np.ndarray] = []
    for idx, d in enumerate(ds):
        guess = None if ref is None else rescale_to_delta(ref, d)
        # later δ: only the rescaled first point (on the fiber up to round-off), so one sheet
        starts = n_starts if idx == 0 else 0
        res = solve_fiber_point(
            arch, v_arr, d, theta_guess=guess, n_starts=starts, seed=seed, tol=tol
        )
        if not res.converged:
            raise RuntimeError(
                f"no fiber point for deltas[{idx}] = {d.tolist()}: best residual "
                f"{res.residual:.3e} > tolerance {res.tolerance:.3e} (v off the neuromanifold?)"
            )
        if idx == 0:
            ref = res.theta
        K = ntk_at_fiber_point(arch, res.theta)
        lam = np.linalg.eigvalsh(K)
        per.append(
            DeltaMetric(
                delta=as_tuples(d),
                theta=tuple(as_tuples(w) for w in res.theta),
                ntk=as_tuples(K),
                sq_norms=as_tuples(sq_norms(res.theta)),
                residual=res.residual,
                tolerance=res.tolerance,
                smooth=is_smooth_point(
                    arch, res.theta, rtol=rebuilt_point_rtol(arch, res.theta, v_arr)
                ),
                rank_K=int(np.sum(lam > RTOL_RANK * lam[-1])) if lam[-1] > 0 else 0,
                tangent_condition=finite_or_none(tangent_condition_number(K, m)),
                locus=(
                    classify_locus(arch, v=v_arr, delta=d, n_starts=n_starts, seed=seed)
                    if locus
                    else None
                ),
            )
        )
        bases.append(tangent_basis(arch, res.theta))
    pairs = tuple(
        metric_pair(
            per[i].ntk_array(),
            per[j].ntk_array(),
            bases[0],
            i=i,
            j=j,
            tangent_i=bases[i],
            tangent_j=bases[j],
            agree_tol=agree_tol,
        )
        for i, j in itertools.combinations(range(len(per)), 2)
    )
    notes = [_regime_note(arch), *_ill_conditioned_note(per, pairs)]
    if locus:
        notes.append(
            "classify_locus per δ (all fiber points, not only this sheet): "
            + "; ".join(
                f"deltas[{i}] {p.locus.classification}, {p.locus.n_fiber_points} point(s), "
                f"NTK gap {p.locus.ntk_gap:.3g}"
                for i, p in enumerate(per)
                if p.locus is not None
            )
        )
    note = normal_form_note(arch)
    return MetricComparison(
        architecture=arch.to_dict(),
        v=tuple(float(x) for x in v_arr.ravel()),
        dim_M=m,
        route=route,
        per_delta=tuple(per),
        pairs=pairs,
        rtol_rank=RTOL_RANK,
        agree_tol=agree_tol,
        tangent_tol=tangent_tol,
        notes=(*notes, *([note] if note else [])),
    )
