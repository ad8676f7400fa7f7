"""Fibers of ``(μ, δ)`` and NTK determinacy: the front door of the fiber search.

:func:`lcn_fiber` finds all parameters ``θ`` with ``μ(θ) = v`` and ``δ(θ) = δ`` modulo the sign
group by two independent routes — algebraic (root orbits in 1-D, rational factoring in D ≥ 2,
:mod:`~neuromanifold.linear.fiber_algebraic`) and numeric (multi-start Levenberg–Marquardt,
:mod:`~neuromanifold.linear.fiber_numeric`) — and reports whether they agree (same number of
points, NTKs equal to ``ROUTE_AGREE_RTOL`` relative to the largest entry, or to
``ROUTE_AGREE_SINGULAR_RTOL`` where a point is a singular point of μ). :func:`fc_fiber` does
the numeric search for fully connected networks, whose fibers are often continuous families: it
samples them (random starts and perturbations of a known point projected back onto the fiber),
modulo the same sign group, and says "continuum" only where a curve passes through a point found.

The NTK of each point is the structured ``K = Jμ Jμᵀ`` (LCN, on C-order ``v``) or the FC operator
matrix on C-order ``vec Z``. A ``v`` that no route reaches gives a report with
``on_manifold=False`` and the best residual, never an empty silent answer.

Scale: ``μ`` is homogeneous of degree ``L`` and the invariants of degree 2, so the fiber over
``(c^L v, c² δ)`` is ``c`` times the fiber over ``(v, δ)``. Residuals, the acceptance tolerance
``FIBER_RTOL`` and point de-duplication are all taken at unit scale, ``θ/ρ`` with
``ρ = (‖v‖^{2/L} + ‖δ‖)^{1/2}`` (:mod:`~neuromanifold.linear.fiber_numeric`), so ``on_manifold``,
the number of points and the NTK clusters do not depend on the scale of ``v``; the points scale
by ``c`` and the NTKs (degree ``2L − 2``) by ``c^{2L−2}``.

References: E. M. Achour, K. Kohn, H. Rauhut, arXiv:2507.06367 (Theorem 4 and the summary table).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from neuromanifold.linear.accuracy import floored_rank, sigma_floor
from neuromanifold.linear.architecture import (
    FC,
    LCN,
    flatten_params,
    real_array,
    unflatten_params,
    validate_params,
)
from neuromanifold.linear.fiber_algebraic import algebraic_fiber
from neuromanifold.linear.fiber_numeric import (
    FIBER_RTOL,
    RANK_RTOL,
    curve_through,
    fiber_dimension,
    numeric_fiber,
    phi,
    point_distance,
    problem_scale,
    same_fiber_point,
    target_vector,
    unit_problem,
)
from neuromanifold.linear.fiber_report import (
    LOWER_BOUND_NOTE,
    FiberReport,
    RouteSummary,
    build_report,
    cluster_ntks,
    continuum_note,
    dedupe_points,
)
from neuromanifold.linear.invariants import delta as lcn_delta
from neuromanifold.linear.invariants import fc_delta
from neuromanifold.linear.metric import balanced_representative
from neuromanifold.linear.normalize import normal_form_note
from neuromanifold.linear.ntk import fc_jacobian, fc_ntk, jacobian, ntk_at_fiber_point
from neuromanifold.linear.polynomial import fc_mu, mu
from neuromanifold.linear.rescale import rescale_to_delta

#: Two routes agree when every NTK of one is within this fraction of the largest entry of an NTK
#: of the other (and both found the same number of points).
ROUTE_AGREE_RTOL = 1e-9
#: The same where a route's point is a singular point of μ (rank Jμ < dim M, e.g. a double root
#: shared by two layers): there a residual ``r`` fixes the point only to about ``√r``, so two
#: routes that both converged to ``FIBER_RTOL = 1e-10`` may differ by up to ``√1e-10 = 1e-5``
#: (s14 trial O #3: 1e-8 at ``v = (1 + z)²``, and the routes were said to disagree).
ROUTE_AGREE_SINGULAR_RTOL = 1e-5

Route = Literal["algebraic", "numeric"]


def _rank(M: np.ndarray) -> int:
    s = np.linalg.svd(M, compute_uv=False)
    return int(np.sum(s > RANK_RTOL * s[0])) if s.size and s[0] > 0 else 0


def _rebuilt_rank(
    arch: LCN, theta: Sequence[np.ndarray], v: np.ndarray
) -> tuple[int, int, float, float]:
    """``(rank, bare rank, σ_dimM, floor)`` of ``Jμ`` at the balanced image of a fiber point
    ``θ`` rebuilt from ``v``: the rank counts singular values below its accuracy floor
    (:func:`~.accuracy.sigma_floor`) as zero, as :func:`~.locus.classify_locus` does; the bare
    rank uses ``RTOL_RANK`` alone (s25 trial LIN #1: the spec §4.6 critical point rebuilt from
    its v showed σ_4/σ_1 = 1.27e-9, just above 1e-9, and was reported with rank J = dim M)."""
    s = np.linalg.svd(jacobian(arch, balanced_representative(arch, theta)), compute_uv=False)
    floor = sigma_floor(arch, theta, v)
    m = arch.dim_M
    sigma_m = float(s[m - 1]) if s.size >= m else 0.0
    return floored_rank(s, floor), floored_rank(s), sigma_m, floor


def snap_zero_layers(
    arch: LCN, x: np.ndarray, v: np.ndarray, delta: np.ndarray, rho: float, tol: float
) -> np.ndarray:
    """The flat fiber point ``x`` over ``v = 0`` with the layers that vanish set to exactly zero.

    ``μ`` is the product of the layers' (dilated) polynomials and the polynomials have no zero
    divisors, so every exact point over ``v = 0`` has a zero layer. ``δ`` then fixes every
    squared norm, ``‖w_j‖² = S_j − min S`` with ``S_j = δ_1 + … + δ_{j−1}`` (``S_1 = 0``): the
    layers that vanish are those with ``S_j = min S``. A point solved for numerically carries them
    at rounding size (``1e-20 … 1e-51`` measured), and the rank verdicts, taken at the balanced
    point of the rescaling orbit, scale them up to the size of the others, where every singular
    value of ``Jμ`` sits at rounding level (s33 trial LCND D1: over ``v = 0``, ``δ = 2`` rank J =
    0 was reported where it is ``k_1 = 4``). Each such layer with ``‖w_j / ρ‖² ≤ tol`` (the
    unit-scale residual tolerance) is set to zero; a layer whose ``S_j`` is above the minimum,
    however little, keeps its norm (s33 review #6: at ``δ = (1e-11, 1)`` the second layer, of
    squared norm 1e-11, was zeroed too). ``x`` itself is returned when nothing changes, and for
    ``v ≠ 0``, where no layer can vanish.

    >>> a = LCN((2, 2, 2), (1, 1))
    >>> x = np.array([1e-30, 0.0, 3e-6, 0.0, 1.0, 0.0])
    >>> snap_zero_layers(a, x, np.zeros(4), np.array([9e-12, 1.0]), 1.0, 1e-10).tolist()
    [0.0, 0.0, 3e-06, 0.0, 1.0, 0.0]
    """
    if np.any(v):
        return x
    s = np.concatenate([[0.0], np.cumsum(np.asarray(delta, dtype=np.float64))])
    out, off, changed = np.array(x, dtype=np.float64, copy=True), 0, False
    for j, k in enumerate(arch.layer_sizes):
        layer = out[off : off + k]
        if s[j] == s.min() and np.any(layer) and float(np.sum((layer / rho) ** 2)) <= tol:
            out[off : off + k] = 0.0
            changed = True
        off += k
    return out if changed else x


def check_lcn_target(arch: LCN, v: Any, delta: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``v`` (shape ``arch.out_shape`` or flat of that size) and ``δ`` (length L − 1)."""
    if not isinstance(arch, LCN):
        raise TypeError(f"arch = {arch!r}: expected an LCN")
    v = real_array(v, "v")
    if v.size != arch.n_v or (v.ndim > 1 and v.shape != arch.out_shape):
        raise ValueError(
            f"v has shape {v.shape}: expected {arch.n_v} coefficients (shape {arch.out_shape})"
        )
    d = np.atleast_1d(real_array(delta, "delta")).ravel()
    if d.size != arch.L - 1:
        raise ValueError(
            f"delta has length {d.size}: expected L − 1 = {arch.L - 1} invariants "
            f"δ_l = ‖w_(l+1)‖² − ‖w_l‖²"
        )
    if not (np.all(np.isfinite(v)) and np.all(np.isfinite(d))):
        raise ValueError("v and delta must be finite")
    return v.reshape(arch.out_shape), d


def _ntks_agree(
    a: Sequence[np.ndarray], b: Sequence[np.ndarray], rtol: float = ROUTE_AGREE_RTOL
) -> bool:
    if len(a) != len(b):
        return False
    if not a:
        return True
    scale = max(float(np.max(np.abs(k))) for k in [*a, *b]) or 1.0

    def covered(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray]) -> bool:
        return all(min(float(np.max(np.abs(x - y))) for y in ys) <= rtol * scale for x in xs)

    return covered(a, b) and covered(b, a)


def disagreement_note(alg: RouteSummary, num: RouteSummary, rtol: float, dim: int = 1) -> str:
    """Why the algebraic and numeric routes disagree, and what to do, from their summaries.

    The numeric route samples ``n_starts`` random starts, so it can miss points of a finite
    fiber. In 1-D (``dim`` = 1) the algebraic route enumerates every grouping of the roots, so it
    missing a point the numeric route found means a root was not recovered to the residual
    tolerance; in D ≥ 2 it factors over ℚ only, so the numeric route's extra points are real
    factorisations with irrational coefficients (s31 trial LCN #4: the note blamed roots there).
    The report's points are the union of both routes either way."""
    if num.n_points < alg.n_points:
        return (
            f"the routes disagree: the numeric route found {num.n_points} of the "
            f"{alg.n_points} points of the algebraic route from {num.n_starts} random starts; "
            "more starts (n_starts, CLI --starts) usually find the rest. The points listed are "
            "the union of both routes"
        )
    if num.n_points > alg.n_points and dim >= 2:
        return (
            f"the routes disagree: the rational route found {alg.n_points} point(s), the "
            f"numeric route {num.n_points}; in D ≥ 2 the rational route factors v over ℚ only "
            "and does not see real factorisations with irrational coefficients, which the "
            "numeric route can reach. The points listed are the union of both routes"
        )
    if num.n_points > alg.n_points:
        return (
            f"the routes disagree: the algebraic route found {alg.n_points} point(s), the "
            f"numeric route {num.n_points}; a root of v was not recovered to the tolerance "
            "(nearly repeated or ill-conditioned roots). The points listed are the union of "
            "both routes"
        )
    return (
        f"the routes disagree: both found {alg.n_points} point(s) but their NTKs do not match "
        f"one to one within {rtol:.0e} of the largest entry"
    )


def lcn_fiber(
    arch: LCN,
    v: Any,
    delta: Any,
    *,
    routes: Sequence[Route] = ("algebraic", "numeric"),
    n_starts: int = 40,
    seed: int = 0,
    theta_guess: Sequence[Any] | None = None,
) -> FiberReport:
    """All ``θ`` with ``μ(θ) = v``, ``δ(θ) = δ`` modulo signs, by the requested routes.

    A point counts when its unit-scale residual ``‖Φ(θ/ρ) − (v/ρ^L, δ/ρ²)‖₂`` is at most
    ``FIBER_RTOL`` (module docstring), whichever route found it. The network is used as given;
    when it is not in the paper's normal form (a scalar layer, ``s_L ≠ 1``) the report's first
    note says so (:func:`~.normalize.normal_form_note`). When the fiber has positive dimension
    (a continuum, e.g. the circle over ``v = 0``) the points are samples and a note says so
    (:func:`continuum_note`).

    Args:
        arch: the LCN (any D; the last stride is irrelevant and is ignored by μ).
        v: end-to-end filter, shape ``arch.out_shape`` (or flat in C order).
        delta: invariants ``δ_l = ‖w_{l+1}‖² − ‖w_l‖²``, length ``L − 1``.
        routes: which routes to run; both by default (their agreement is reported).
        n_starts: random starts of the numeric route.
        seed: seed of the numeric route's starts.
        theta_guess: an optional known fiber point, added to the numeric route's starts.

    When both routes ran and disagree (``routes_agree`` False), a note says how
    (`disagreement_note`); the points reported are the union of both routes.

    >>> rep = lcn_fiber(LCN((2, 2), (1,)), [1, 1, -2], [-3], n_starts=8)
    >>> rep.n_points, rep.n_distinct_ntks, rep.routes_agree
    (2, 2, True)
    """
    v, d = check_lcn_target(arch, v, delta)
    for r in routes:
        if r not in ("algebraic", "numeric"):
            raise ValueError(f"routes contains {r!r}: expected 'algebraic' and/or 'numeric'")
    summaries: list[RouteSummary] = []
    all_pts: list[np.ndarray] = []
    all_res: list[float] = []
    n_exact = 0  # the algebraic route's points lead all_pts
    per_route_ntks: dict[str, list[np.ndarray]] = {}
    best = float("inf")
    tol = FIBER_RTOL
    rho = problem_scale(arch, v, d)

    target = target_vector(arch, *unit_problem(arch, v, d, rho))

    def distinct(xs: Sequence[np.ndarray], exact: int = 0) -> list[int]:  # at unit scale
        """The first of each class of ``xs``; the first ``exact`` are the algebraic route's,
        which the segment rule never joins to each other (exact roots 10⁻⁴ apart are two
        points: s29b audit #1)."""
        return dedupe_points(
            [x / rho for x in xs],
            lambda a, b: point_distance(arch, a, b),
            same=lambda a, b: same_fiber_point(arch, target, a, b),
            exact=exact,
        )

    note = normal_form_note(arch)
    notes: list[str] = [note] if note else []
    if "algebraic" in routes:
        alg = algebraic_fiber(arch, v, d)
        pts = [p for p, r in zip(alg.points, alg.residuals, strict=True) if np.isfinite(r)]
        res = [r for r in alg.residuals if np.isfinite(r)]  # unit-scale (fiber_numeric.polish)
        ok = [i for i, r in enumerate(res) if r <= tol]
        pts, res = [pts[i] for i in ok], [res[i] for i in ok]
        keep = distinct(pts, exact=len(pts))
        pts, res = [pts[i] for i in keep], [res[i] for i in keep]
        ks = [ntk_at_fiber_point(arch, unflatten_params(arch, p)) for p in pts]
        per_route_ntks["algebraic"] = ks if alg.applicable else []
        labels = cluster_ntks(ks)
        summaries.append(
            RouteSummary(
                name="algebraic",
                applicable=alg.applicable,
                n_points=len(pts),
                n_distinct_ntks=(max(labels) + 1) if labels else 0,
                residual=max(res) if res else float("nan"),
                n_starts=alg.n_groupings,
                n_converged=len(pts),
                note=alg.note,
            )
        )
        if alg.applicable:
            all_pts += pts
            all_res += res
            n_exact = len(pts)
            if alg.merge_note:
                notes.append(alg.merge_note)
    if "numeric" in routes:
        num = numeric_fiber(arch, v, d, n_starts=n_starts, seed=seed, theta_guess=theta_guess)
        ks = [ntk_at_fiber_point(arch, unflatten_params(arch, p)) for p in num.points]
        per_route_ntks["numeric"] = ks
        labels = cluster_ntks(ks)
        summaries.append(
            RouteSummary(
                name="numeric",
                applicable=True,
                n_points=len(num.points),
                n_distinct_ntks=(max(labels) + 1) if labels else 0,
                residual=max(num.residuals) if num.residuals else num.best_residual,
                n_starts=num.n_starts,
                n_converged=num.n_converged,
            )
        )
        all_pts += list(num.points)
        all_res += list(num.residuals)
        best = num.best_residual
        tol = num.tolerance
    for i, x in enumerate(all_pts):
        snapped = snap_zero_layers(arch, x, v, d, rho, tol)
        if snapped is not x:  # kept when its residual (unit scale, as the routes') is in tolerance
            res_snapped = float(np.linalg.norm(phi(arch, snapped / rho) - target))
            if res_snapped <= tol:
                all_pts[i], all_res[i] = snapped, res_snapped
    keep = distinct(all_pts, exact=n_exact)
    pts = [all_pts[i] for i in keep]
    res = [all_res[i] for i in keep]
    thetas = [unflatten_params(arch, p) for p in pts]
    all_ranked = [_rebuilt_rank(arch, unflatten_params(arch, p), v) for p in all_pts]
    ranked = [all_ranked[i] for i in keep]
    applicable = [s for s in summaries if s.applicable]
    agree: bool | None = None
    if len(applicable) == 2:
        singular = any(r < arch.dim_M for r, _, _, _ in all_ranked)
        rtol = ROUTE_AGREE_SINGULAR_RTOL if singular else ROUTE_AGREE_RTOL
        agree = applicable[0].n_points == applicable[1].n_points and _ntks_agree(
            per_route_ntks["algebraic"], per_route_ntks["numeric"], rtol
        )
        if not agree and applicable[1].n_starts > 0:  # n_starts = 0: the numeric route is off
            notes.append(disagreement_note(applicable[0], applicable[1], rtol, _dim(arch)))
    m = arch.dim_M
    floored = [(sm, f) for r, bare, sm, f in ranked if r < m <= bare]
    if floored:
        sm, f = floored[0]
        which = "a point" if len(ranked) == 1 else f"{len(floored)} of {len(ranked)} points"
        notes.append(
            f"{which}: σ_dimM = {sm:.3g} is below the accuracy floor {f:.3g} of a fiber point "
            "rebuilt from v, so rank J counts it as zero: v is a critical value of μ as far as "
            "a point rebuilt from it can tell (spec §4.6; see sigma_floor)"
        )
    if not pts and not applicable:
        notes.append(
            "no route that applies to this v ran (see the routes' notes): nothing was searched, "
            "and nothing is said about whether v lies on the neuromanifold"
        )
    elif not pts:
        notes.append(
            f"no parameters found over (v, δ): v is off the neuromanifold or unreachable "
            f"(best residual {best:.3g}, tolerance {tol:.3g})"
        )
    # the fiber's dimension and curves are read at the lemma image of the first point over
    # (v, 0), a diffeomorphic copy of the fiber for v ≠ 0: at large |δ| one layer is tiny at unit
    # scale, a singular value of dΦ fell below the rank threshold and a finite fiber was called
    # a continuum (s14 audit Q #1)
    x_dim, d_dim = (pts[0], d) if pts else (None, d)
    if pts and np.any(v):
        d_dim = np.zeros_like(d)
        x_dim = flatten_params(arch, rescale_to_delta(unflatten_params(arch, pts[0]), d_dim))
    fiber_dim = fiber_dimension(arch, x_dim) if pts else None
    is_curve = bool(fiber_dim) and curve_through(arch, v, d_dim, x_dim)
    continuum = continuum_note(fiber_dim if is_curve else 0, len(pts))
    if continuum:
        notes.append(continuum)
    else:
        crossing = crossing_note(arch, thetas, [r for r, _, _, _ in ranked])
        if crossing:
            notes.append(crossing)
    if not continuum and pts and "numeric" in routes and n_starts > 0:
        exact = bool(applicable) and applicable[0].name == "algebraic"
        incomplete = _sampled_count_note(arch, exact, "algebraic" in routes, n_starts)
        if incomplete:
            notes.append(incomplete)
    return build_report(
        architecture=_describe(arch),
        architecture_spec=arch.to_dict(),
        v=v,
        delta=d,
        points=thetas,
        ntks=[ntk_at_fiber_point(arch, th) for th in thetas],
        residuals=res,
        best_residual=best,
        tolerance=tol,
        routes=summaries,
        routes_agree=agree,
        jacobian_ranks=[r for r, _, _, _ in ranked],
        dim_M=arch.dim_M,
        fiber_dimension=fiber_dim,
        continuum=is_curve if pts else None,
        notes=notes,
    )


def crossing_note(
    arch: LCN, thetas: Sequence[Sequence[np.ndarray]], ranks: Sequence[int]
) -> str | None:
    """The note for fiber points at which μ is regular (rank Jμ = dim M) but whose tangent
    spaces differ: ``rank [J_0 | J_i] > dim M`` for the first point's Jacobian ``J_0`` and some
    other point's ``J_i`` (each at its balanced image, as `~.locus.classify_locus` reads them).
    Equal tangent spaces are an equivalence, so comparing every point with the first finds any
    pair that differs. Then ``v`` is a self-crossing of the neuromanifold (spec §4.2) and each
    sheet has its own NTK (s31 trial LCN #3: `lcn fiber` listed the two sheets of the §4.2
    crossing with no word, while `lcn ntk` sends crossings here). None otherwise, and when a
    point is not regular (the critical-point note speaks there)."""
    m = arch.dim_M
    if len(thetas) < 2 or any(r != m for r in ranks):
        return None
    js = [jacobian(arch, balanced_representative(arch, th)) for th in thetas]
    pair = max(floored_rank(np.linalg.svd(np.hstack([js[0], j]), compute_uv=False)) for j in js[1:])
    if pair <= m:
        return None
    return (
        f"v is a self-crossing of the neuromanifold: the fiber points are regular (rank Jμ = "
        f"dim M = {m}) but their tangent spaces differ (rank [J|J'] = {pair} > {m}; spec §4.2), "
        f"so each sheet through v has its own NTK"
    )


def _dim(arch: LCN | FC) -> int:
    """The signal dimension D of an LCN; 1 for a fully connected network."""
    return arch.D if isinstance(arch, LCN) else 1


def _sampled_count_note(
    arch: LCN | FC, exact_route: bool, exact_ran: bool, n_starts: int
) -> str | None:
    """The note for a finite fiber whose count rests on random starts alone: no exact route
    applied, or one ran in D ≥ 2, where it factors over ℚ only (s31 trial LCN #1: three 2×2
    layers with irrational separable filters have 36 points; 40 starts found 27 and nothing said
    so). None when the 1-D root route applied: it enumerates every grouping of the roots."""
    if exact_route and _dim(arch) == 1:
        return None
    if exact_route:
        why = "the rational route factors v over ℚ only (D ≥ 2)"
    elif exact_ran:
        why = "no exact route applies to this v"
    else:
        why = "the exact route was not run (routes)"
    return (
        f"{LOWER_BOUND_NOTE}: {why}, and the numeric route's {n_starts} random starts "
        f"can miss points of a finite fiber; rerun with more starts (n_starts, CLI --starts) "
        f"and compare the counts"
    )


def _describe(arch: LCN | FC) -> str:
    if isinstance(arch, FC):
        return f"FC widths={list(arch.widths)}"
    f = [list(x) if arch.D > 1 else x[0] for x in arch.filters]
    s = [list(x) if arch.D > 1 else x[0] for x in arch.strides[:-1]]
    return f"LCN D={arch.D} filters={f} strides={s}"


DELTA_SYMMETRY_RTOL = 1e-5
"""`check_fc_target` refuses a ``Δ_l`` with ``max|Δ − Δᵀ|`` above this times ``max(max|Δ|, 1)``
and reads the others as their symmetric part ``(Δ + Δᵀ)/2``: rounding in a ``Δ`` computed in
float64 stays near 1e-16 of it, in float32 near 1e-7 (s34 review #10: a float32 ``Δ`` was
refused), while a matrix that is no ``Δ`` at all is off by O(1)."""


def check_fc_target(arch: FC, W: Any, Delta: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    """Validate ``W`` (shape ``(n_L, n_0)``) and ``Δ`` (``L − 1`` matrices ``n_l × n_l``)."""
    if not isinstance(arch, FC):
        raise TypeError(f"arch = {arch!r}: expected an FC architecture")
    W = np.asarray(W, dtype=np.float64)
    if W.shape != arch.out_shape:
        raise ValueError(f"W has shape {W.shape}: expected (n_L, n_0) = {arch.out_shape}")
    if not isinstance(Delta, Sequence) or len(Delta) != arch.L - 1:
        n = len(Delta) if isinstance(Delta, Sequence) else type(Delta).__name__
        raise ValueError(f"Delta has {n} entries: expected L − 1 = {arch.L - 1} matrices")
    out = []
    for l, D in enumerate(Delta):
        D = np.asarray(D, dtype=np.float64)
        n = arch.widths[l + 1]
        if D.shape != (n, n):
            raise ValueError(f"Delta[{l}] has shape {D.shape}: expected ({n}, {n})")
        out.append(D)
    if not (np.all(np.isfinite(W)) and all(np.all(np.isfinite(D)) for D in out)):
        raise ValueError("W and Delta must be finite")
    for l, D in enumerate(out):
        # Δ_l = W_{l+1}ᵀW_{l+1} − W_l W_lᵀ is symmetric: another matrix has no fiber, which the
        # search reported as "no parameters found" (s34 trial RELU O3)
        gap = float(np.max(np.abs(D - D.T), initial=0.0))
        if gap > DELTA_SYMMETRY_RTOL * max(float(np.max(np.abs(D), initial=0.0)), 1.0):
            raise ValueError(
                f"Delta[{l}] is not symmetric (largest |Δ − Δᵀ| = {gap:.3g}): Δ_l = "
                "W_{l+1}ᵀW_{l+1} − W_l W_lᵀ is a symmetric matrix"
            )
        out[l] = (D + D.T) / 2  # rounding of a computed Δ (float32: ~1e-7) is not searched for
    return W, out


def fc_fiber(
    arch: FC,
    W: Any,
    Delta: Any,
    *,
    n_starts: int = 24,
    n_perturb: int = 16,
    seed: int = 0,
    theta_guess: Sequence[Any] | None = None,
) -> FiberReport:
    """Sample the FC fiber ``{(W_l) : W_L⋯W_1 = W, Δ_l = Delta_l}`` and compare NTKs there.

    Random starts plus ``n_perturb`` perturbations of ``theta_guess`` (if given), each projected
    onto the fiber by LM. Points are distinct modulo the hidden sign flips
    ``W_l ↦ s_l s_{l−1} W_l`` (`~.fiber_numeric.point_distance`; other isometries that fix
    ``Δ``, reflections in ``Δ_l``'s eigenbasis, are not divided out, so points of one such orbit
    are listed apart, with equal NTKs); where a curve of fiber
    points passes through the first point (:func:`~.fiber_numeric.curve_through`) they are
    samples of a continuum and a note says so. The NTK is the ``(n_L n_0)²`` operator matrix of
    each point.
    """
    W, Ds = check_fc_target(arch, W, Delta)
    if theta_guess is not None:
        theta_guess = validate_params(arch, theta_guess)
    num = numeric_fiber(
        arch, W, Ds, n_starts=n_starts, seed=seed, theta_guess=theta_guess, n_perturb=n_perturb
    )
    thetas = [unflatten_params(arch, p) for p in num.points]
    ks = [fc_ntk(arch, th) for th in thetas]
    labels = cluster_ntks(ks)
    summary = RouteSummary(
        name="numeric",
        applicable=True,
        n_points=len(thetas),
        n_distinct_ntks=(max(labels) + 1) if labels else 0,
        residual=max(num.residuals) if num.residuals else num.best_residual,
        n_starts=num.n_starts,
        n_converged=num.n_converged,
    )
    notes: list[str] = []
    fiber_dim = fiber_dimension(arch, num.points[0]) if thetas else None
    # as for LCNs: a positive n_params − rank dΦ is a continuum only where a curve passes
    is_curve = bool(fiber_dim) and curve_through(arch, W, Ds, num.points[0])
    continuum = continuum_note(fiber_dim if is_curve else 0, len(thetas))
    if continuum:
        notes.append(continuum)
    if not thetas:
        notes.append(
            f"no parameters found over (W, Δ): best residual {num.best_residual:.3g}, "
            f"tolerance {num.tolerance:.3g}"
        )
    return build_report(
        architecture=_describe(arch),
        architecture_spec=arch.to_dict(),
        v=W,
        delta=np.concatenate([D.ravel() for D in Ds]) if Ds else np.zeros(0),
        points=thetas,
        ntks=ks,
        residuals=list(num.residuals),
        best_residual=num.best_residual,
        tolerance=num.tolerance,
        routes=[summary],
        routes_agree=None,
        jacobian_ranks=[
            _rank(fc_jacobian(arch, balanced_representative(arch, th))) for th in thetas
        ],
        dim_M=arch.dim_M,
        fiber_dimension=fiber_dim,
        continuum=is_curve if thetas else None,
        notes=notes,
    )


def fiber_of_params(arch: LCN | FC, theta: Sequence[Any], **kwargs: Any) -> FiberReport:
    """The fiber through a given ``θ``: ``(μ(θ), δ(θ))`` with ``θ`` as the numeric route's guess."""
    th = validate_params(arch, theta)
    if isinstance(arch, FC):
        return fc_fiber(arch, fc_mu(arch, th), fc_delta(th), theta_guess=th, **kwargs)
    return lcn_fiber(arch, mu(arch, th), lcn_delta(th), theta_guess=th, **kwargs)
