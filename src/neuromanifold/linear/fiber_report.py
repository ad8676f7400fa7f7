"""The fiber report and the comparisons it is built from (distinct points, distinct NTKs).

A *fiber* here is the set of parameters θ with the same end-to-end function and the same
conserved quantities, ``Φ(θ) = (μ(θ), δ(θ)) = (v, δ)``. Every fiber search in the package
(algebraic 1-D roots, rational D-D factoring, multi-start least squares for LCN / FC / shallow
ReLU networks) returns a :class:`FiberReport`: the distinct points it found, one NTK per point,
how far those NTKs are apart, and the residuals that justify calling the points "on the fiber".

Distinct NTKs are counted by greedy clustering: ``K_i`` joins the cluster of ``K_j`` when
``‖K_i − K_j‖_max ≤ NTK_DISTINCT_RTOL · max_i ‖K_i‖_max``. The relative spread reported is
``max_{i,j} ‖K_i − K_j‖_max / max_i ‖K_i‖_max`` (entrywise max norm).

References: E. M. Achour, K. Kohn, H. Rauhut, arXiv:2507.06367 (NTK determinacy on fibers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Two NTKs are "the same" when their entrywise gap is at most this fraction of the largest entry.
NTK_DISTINCT_RTOL = 1e-6
#: Two parameter points are "the same" (after symmetry) when their distance is at most this
#: fraction of the parameter scale.
POINT_DISTINCT_RTOL = 1e-6
#: How a fiber note starts when the count rests on random starts (`lcn_fiber`, `relu_fiber`); the
#: survey counts such samples by it.
LOWER_BOUND_NOTE = "the count is a lower bound"


def ntk_spread(ntks: Sequence[np.ndarray]) -> tuple[float, float]:
    """Largest pairwise entrywise gap ``max_{i,j} ‖K_i − K_j‖_max``: (absolute, relative).

    The relative value divides by ``max_i ‖K_i‖_max``; an empty or single list gives (0, 0).

    >>> ntk_spread([np.eye(2), 3 * np.eye(2)])
    (2.0, 0.6666666666666666)
    """
    if len(ntks) < 2:
        return 0.0, 0.0
    stack = np.stack([np.asarray(k, dtype=np.float64) for k in ntks])
    gap = float(np.max(stack.max(axis=0) - stack.min(axis=0)))
    scale = float(np.max(np.abs(stack)))
    return gap, (gap / scale if scale > 0 else 0.0)


def cluster_ntks(ntks: Sequence[np.ndarray], *, rtol: float = NTK_DISTINCT_RTOL) -> list[int]:
    """Greedy cluster label of each NTK (labels 0, 1, … in order of first appearance).

    >>> cluster_ntks([np.eye(2), np.eye(2) + 1e-12, 2 * np.eye(2)])
    [0, 0, 1]
    """
    if not ntks:
        return []
    scale = max(float(np.max(np.abs(k))) for k in ntks) or 1.0
    reps: list[np.ndarray] = []
    labels: list[int] = []
    for k in ntks:
        for i, r in enumerate(reps):
            if float(np.max(np.abs(k - r))) <= rtol * scale:
                labels.append(i)
                break
        else:
            reps.append(k)
            labels.append(len(reps) - 1)
    return labels


def dedupe_points(
    points: Sequence[np.ndarray],
    distance: Callable[[np.ndarray, np.ndarray], float],
    *,
    rtol: float = POINT_DISTINCT_RTOL,
    same: Callable[[np.ndarray, np.ndarray], bool] | None = None,
    exact: int = 0,
) -> list[int]:
    """Indices of the first point of each class under ``distance(a, b) ≤ rtol · scale`` or, when
    given, ``same(a, b)`` (e.g. `neuromanifold.linear.fiber_numeric.same_fiber_point`).

    ``scale = max(1, max_i ‖p_i‖)``. ``distance`` should already be taken modulo the symmetry
    group (e.g. the minimum over sign flips). The first ``exact`` points are exact (an algebraic
    route's): ``same`` joins a later point to them, never two of them to each other.
    """
    if not points:
        return []
    scale = max(1.0, max(float(np.linalg.norm(p)) for p in points))
    keep: list[int] = []
    for i, p in enumerate(points):
        joins = same if same is not None and i >= exact else None
        if all(
            distance(p, points[j]) > rtol * scale and not (joins and joins(points[j], p))
            for j in keep
        ):
            keep.append(i)
    return keep


def _tolist(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_tolist(y) for y in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


@dataclass(frozen=True)
class RouteSummary:
    """What one fiber-search route found.

    ``applicable`` is False when the route cannot run on this input (e.g. the rational
    factoring route on irrational coefficients); ``note`` says why.
    """

    name: str
    applicable: bool
    n_points: int = 0
    n_distinct_ntks: int = 0
    residual: float = float("nan")
    n_starts: int = 0
    n_converged: int = 0
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (NaN residual becomes None)."""
        d = dict(self.__dict__)
        if not np.isfinite(d["residual"]):
            d["residual"] = None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RouteSummary:
        """Inverse of `to_dict` (a ``None`` residual is NaN again)."""
        d = dict(d)
        d["residual"] = float("nan") if d.get("residual") is None else float(d["residual"])
        return cls(**d)


@dataclass(frozen=True)
class FiberReport:
    """Distinct points of a fiber ``{θ : μ(θ) = v, δ(θ) = δ}`` modulo isometric symmetries.

    Attributes:
        architecture: human-readable description of the architecture.
        v: the end-to-end function asked for (flattened).
        delta: the invariants asked for (flattened).
        on_manifold: False when no route found a point with ``‖Φ(θ) − (v, δ)‖ ≤ tolerance``.
        residual: largest residual over the reported points (the best residual found when
            ``on_manifold`` is False); LCN and FC fibers report the unit-scale residual
            ``‖Φ(θ/ρ) − (v/ρ^L, δ/ρ²)‖₂`` (`neuromanifold.linear.fiber_numeric`; the plain
            ``‖Φ(θ) − (v, δ)‖₂`` at ``ρ = 1``), so it is relative to the scale of ``(v, δ)``.
        tolerance: the residual threshold used for ``on_manifold`` (same units).
        points: distinct fiber points (each a tuple of per-layer arrays as nested lists).
        ntks: one NTK per point (matrices as nested lists).
        ntk_labels: cluster label of each point's NTK.
        n_distinct_ntks: number of NTK clusters.
        max_ntk_diff_abs / max_ntk_diff_rel: see :func:`ntk_spread`.
        routes: per-route summaries.
        routes_agree: both routes found the same number of points and matching NTKs (None when
            only one route ran).
        jacobian_ranks: rank of the parametrisation's Jacobian at each point (LCN: at the balanced
            point of its rescaling orbit, `neuromanifold.linear.metric.balanced_representative`).
        dim_M: expected dimension of the image (neuromanifold); None where not defined.
        fiber_dimension: ``n_params − rank dΦ`` at the first point (0 ⇒ isolated points; a
            positive value is an upper bound on the fiber's dimension at a singular point of Φ).
        continuum: whether a curve of fiber points passes through the first point
            (`neuromanifold.linear.fiber_numeric.curve_through`); None where not checked.
        notes: free-text remarks (normalisations, caveats).
        point_residuals: the residual of each point (same units as ``residual``).
        architecture_spec: the architecture's ``to_dict()`` (``LCN``: ``LCN.from_dict`` reads it
            back; ``FC``: ``{"kind": "FC", "widths": [...]}``), or None (shallow ReLU networks).
            `to_dict` writes it under ``"architecture"``, as ``lcn ntk`` and ``lcn compare`` do,
            and the description under ``"architecture_label"``.
    """

    architecture: str
    v: tuple[float, ...]
    delta: tuple[float, ...]
    on_manifold: bool
    residual: float
    tolerance: float
    points: tuple[Any, ...]
    ntks: tuple[Any, ...]
    ntk_labels: tuple[int, ...]
    n_distinct_ntks: int
    max_ntk_diff_abs: float
    max_ntk_diff_rel: float
    routes: tuple[RouteSummary, ...]
    routes_agree: bool | None
    jacobian_ranks: tuple[int, ...] = ()
    dim_M: int | None = None
    fiber_dimension: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    continuum: bool | None = None
    point_residuals: tuple[float, ...] = ()
    architecture_spec: dict[str, Any] | None = None

    @property
    def n_points(self) -> int:
        """Number of distinct fiber points found."""
        return len(self.points)

    @property
    def ntk_dependent(self) -> bool:
        """True when more than one distinct NTK was found on the fiber."""
        return self.n_distinct_ntks > 1

    def ntk_arrays(self) -> list[np.ndarray]:
        """The NTKs as float64 arrays."""
        return [np.asarray(k, dtype=np.float64) for k in self.ntks]

    def point_arrays(self) -> list[tuple[np.ndarray, ...]]:
        """The points as tuples of float64 arrays (one per layer)."""
        return [tuple(np.asarray(w, dtype=np.float64) for w in p) for p in self.points]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict of every field plus ``n_points``."""
        spec = self.architecture_spec
        return {
            # one type per key across the lcn commands: the spec when there is one (s15 trial T #4)
            "architecture": dict(spec) if spec is not None else self.architecture,
            "architecture_label": self.architecture,
            "v": list(self.v),
            "delta": list(self.delta),
            "on_manifold": self.on_manifold,
            "residual": self.residual,
            "tolerance": self.tolerance,
            "n_points": self.n_points,
            "points": _tolist(list(self.points)),
            "ntks": _tolist(list(self.ntks)),
            "ntk_labels": list(self.ntk_labels),
            "n_distinct_ntks": self.n_distinct_ntks,
            "max_ntk_diff_abs": self.max_ntk_diff_abs,
            "max_ntk_diff_rel": self.max_ntk_diff_rel,
            "routes": [r.to_dict() for r in self.routes],
            "routes_agree": self.routes_agree,
            "jacobian_ranks": list(self.jacobian_ranks),
            "dim_M": self.dim_M,
            "fiber_dimension": self.fiber_dimension,
            "continuum": self.continuum,
            "notes": list(self.notes),
            "point_residuals": list(self.point_residuals),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FiberReport:
        """Inverse of `to_dict` (s29 trial LIN2 F3: ``lcn fiber --json`` could not be read back):
        ``FiberReport.from_dict(json.load(f))`` gives a report whose `to_dict` is the file's.

        >>> rep = build_report(architecture="toy", v=np.ones(2), delta=np.zeros(1),
        ...     points=[[np.ones(1), np.ones(2)]], ntks=[np.eye(2)], residuals=[0.0],
        ...     best_residual=0.0, tolerance=1e-10, routes=(), routes_agree=None)
        >>> FiberReport.from_dict(rep.to_dict()) == rep
        True
        """
        arch = d["architecture"]
        spec = dict(arch) if isinstance(arch, Mapping) else None
        return cls(
            architecture=str(d.get("architecture_label", arch if spec is None else "")),
            architecture_spec=spec,
            v=tuple(float(x) for x in d["v"]),
            delta=tuple(float(x) for x in d["delta"]),
            on_manifold=bool(d["on_manifold"]),
            residual=float(d["residual"]),
            tolerance=float(d["tolerance"]),
            points=tuple(tuple(w for w in p) for p in d["points"]),
            ntks=tuple(d["ntks"]),
            ntk_labels=tuple(int(x) for x in d["ntk_labels"]),
            n_distinct_ntks=int(d["n_distinct_ntks"]),
            max_ntk_diff_abs=float(d["max_ntk_diff_abs"]),
            max_ntk_diff_rel=float(d["max_ntk_diff_rel"]),
            routes=tuple(RouteSummary.from_dict(r) for r in d["routes"]),
            routes_agree=d["routes_agree"],
            jacobian_ranks=tuple(int(x) for x in d.get("jacobian_ranks", ())),
            dim_M=d.get("dim_M"),
            fiber_dimension=d.get("fiber_dimension"),
            continuum=d.get("continuum"),
            notes=tuple(d.get("notes", ())),
            point_residuals=tuple(float(x) for x in d.get("point_residuals", ())),
        )


def build_report(
    *,
    architecture: str,
    architecture_spec: dict[str, Any] | None = None,
    v: np.ndarray,
    delta: np.ndarray,
    points: Sequence[Sequence[np.ndarray]],
    ntks: Sequence[np.ndarray],
    residuals: Sequence[float],
    best_residual: float,
    tolerance: float,
    routes: Sequence[RouteSummary],
    routes_agree: bool | None,
    jacobian_ranks: Sequence[int] = (),
    dim_M: int | None = None,
    fiber_dimension: int | None = None,
    continuum: bool | None = None,
    notes: Sequence[str] = (),
) -> FiberReport:
    """Assemble a :class:`FiberReport` from already de-duplicated points and their NTKs."""
    ntk_list = [np.asarray(k, dtype=np.float64) for k in ntks]
    labels = cluster_ntks(ntk_list)
    gap, rel = ntk_spread(ntk_list)
    on = len(points) > 0
    return FiberReport(
        architecture=architecture,
        architecture_spec=architecture_spec,
        v=tuple(float(x) for x in np.ravel(v)),
        delta=tuple(float(x) for x in np.ravel(delta)),
        on_manifold=on,
        residual=float(max(residuals)) if on else float(best_residual),
        tolerance=float(tolerance),
        points=tuple(tuple(_tolist(np.asarray(w)) for w in p) for p in points),
        ntks=tuple(_tolist(k) for k in ntk_list),
        ntk_labels=tuple(labels),
        n_distinct_ntks=(max(labels) + 1) if labels else 0,
        max_ntk_diff_abs=gap,
        max_ntk_diff_rel=rel,
        routes=tuple(routes),
        routes_agree=routes_agree,
        jacobian_ranks=tuple(int(r) for r in jacobian_ranks),
        dim_M=dim_M,
        fiber_dimension=fiber_dimension,
        continuum=continuum,
        notes=tuple(notes),
        point_residuals=tuple(float(r) for r in residuals),
    )


def continuum_note(fiber_dimension: int | None, n_points: int) -> str | None:
    """The note of a fiber through whose points a curve of fiber points passes: the points found
    are samples of it, not all of it.

    ``None`` when ``fiber_dimension`` is ``None`` (no point) or 0. The caller passes the
    dimension only where a curve was found through the point (:func:`~._lsq.curve_through`; a
    positive ``n_params − rank dΦ`` alone can be an isolated singular point of Φ).
    """
    if not fiber_dimension:
        return None
    return (
        f"the fiber is a continuum (dimension {fiber_dimension} at the first point, "
        f"n_params − rank dΦ: its first-order dimension, an upper bound where dΦ drops rank): "
        f"the {n_points} point(s) found are samples of it, not all of it"
    )


def continuum_elsewhere_note(n_on_curves: int, n_points: int) -> str | None:
    """The note of a fiber whose first point is isolated but through ``n_on_curves`` of whose
    other points found a curve of fiber points passes (``None`` when there is none): those
    points are samples of a continuum elsewhere in the fiber."""
    if not n_on_curves:
        return None
    return (
        f"the fiber holds a continuum away from the first point: a curve of fiber points passes "
        f"through {n_on_curves} of the {n_points} point(s) found, which are samples of it, not "
        "all of it"
    )
