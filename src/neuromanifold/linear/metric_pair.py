"""Two metrics on one tangent space: the numbers that say how far ``g_i = K_i⁺`` and ``g_j = K_j⁺``
are apart on ``T_vM`` (used by :func:`~.metric_compare.compare_metrics`).

With ``Q`` an orthonormal basis of ``T_vM`` (``(n_v, dim M)``) and ``A = Qᵀ K_i Q``,
``B = Qᵀ K_j Q`` (``(dim M, dim M)``, positive definite at a regular point), `metric_pair` reports

* ``k_rel_frobenius = ‖K_i − K_j‖_F / max(‖K_i‖_F, ‖K_j‖_F)``; ``metric_rel_frobenius`` the same
  for ``g_i = K_i⁺``, ``g_j = K_j⁺`` (pseudo-inverses truncated at rank ``dim M``);
* the generalized eigenvalues ``λ_1 ≤ … ≤ λ_{dim M}`` of the pencil ``A ξ = λ B ξ``. They are also
  those of ``(g_j, g_i)`` on ``T_vM``, so ``λ_1 ≤ g_j(ξ, ξ) / g_i(ξ, ξ) ≤ λ_{dim M}`` for every
  ``ξ ∈ T_vM``: all ``λ = 1`` iff the two metrics agree. ``pencil_condition = λ_max / λ_min``;
* the affine-invariant (Riemannian SPD) distance ``d(A, B) = ‖log(B^{-1/2} A B^{-1/2})‖_F =
  √(Σ_k log² λ_k)``, basis-free, symmetric, with the triangle inequality and
  ``d(A, B) = d(A⁻¹, B⁻¹)``; ``max_abs_log = max_k |log λ_k|`` (the Thompson distance) decides
  ``agree``.

`metric_pair_reference` is the dense scipy oracle (``eigh`` of the pencil, ``logm``/``sqrtm``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuromanifold.linear._json import as_lists
from neuromanifold.linear.metric import RTOL_RANK, _check_K, metric_tensor

__all__ = [
    "METRIC_AGREE_TOL",
    "TANGENT_SIN_TOL",
    "MetricPair",
    "metric_pair",
    "metric_pair_reference",
]

METRIC_AGREE_TOL = 1e-8
"""Two metrics agree when ``max_k |log λ_k| ≤ METRIC_AGREE_TOL`` (``λ`` the pencil eigenvalues).

Fiber points are solved to ``1e-13`` (relative), so equal metrics give ``|log λ|`` of order
``1e-13 · cond(K|_{T_vM})``; ``1e-8`` leaves room for conditions up to about ``1e5``.
"""

TANGENT_SIN_TOL = 1e-8
"""Two fiber points share ``T_vM`` when the largest principal-angle sine of their tangent spaces
(ranges of ``Jμ``) is at most this; points on one rescaling orbit give round-off (``~1e-15``)."""


@dataclass(frozen=True)
class MetricPair:
    """How far apart the metrics of ``δ⁽ⁱ⁾`` and ``δ⁽ʲ⁾`` are (formulas: module docstring).

    Attributes:
        i, j: indices into the ``deltas`` (0-based).
        k_rel_frobenius: ``‖K_i − K_j‖_F / max(‖K_i‖_F, ‖K_j‖_F)``.
        metric_rel_frobenius: the same for ``g = K⁺`` (rank ``dim M``); None if undefined.
        pencil_eigenvalues: ascending ``λ`` with ``Qᵀ K_i Q ξ = λ Qᵀ K_j Q ξ`` (``dim M`` values;
            empty when undefined).
        lambda_min, lambda_max, pencil_condition: ``λ_1``, ``λ_{dim M}``, their ratio.
        affine_invariant_distance: ``√(Σ_k log² λ_k)``.
        max_abs_log: ``max_k |log λ_k|``.
        tangent_sin: largest principal-angle sine between the ranges of ``Jμ`` at the two points.
        defined: both ``K``'s are positive definite on ``T_vM`` (rank test at ``RTOL_RANK``).
        agree: ``defined`` and ``max_abs_log ≤ agree_tol``.
        agree_tol: the threshold used for ``agree``.
    """

    i: int
    j: int
    k_rel_frobenius: float
    metric_rel_frobenius: float | None
    pencil_eigenvalues: tuple[float, ...]
    lambda_min: float | None
    lambda_max: float | None
    pencil_condition: float | None
    affine_invariant_distance: float | None
    max_abs_log: float | None
    tangent_sin: float
    defined: bool
    agree: bool
    agree_tol: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (round-trips through :meth:`from_dict`)."""
        return as_lists(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MetricPair:
        """Inverse of :meth:`to_dict`."""
        return cls(**{**d, "pencil_eigenvalues": tuple(d["pencil_eigenvalues"])})


def _pd(M: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Eigenpairs of a symmetric ``M`` if it is positive definite at ``RTOL_RANK``, else None."""
    w, V = np.linalg.eigh(0.5 * (M + M.T))
    if w[-1] <= 0 or w[0] <= RTOL_RANK * w[-1]:
        return None
    return w, V


def _rel_fro(a: np.ndarray, b: np.ndarray) -> float:
    scale = max(float(np.linalg.norm(a)), float(np.linalg.norm(b)))
    return float(np.linalg.norm(a - b)) / scale if scale > 0 else 0.0


def _sin_max(U: np.ndarray, W: np.ndarray) -> float:
    """``‖(I − U Uᵀ) W‖_2`` for orthonormal ``U``, ``W`` of equal width."""
    return float(np.linalg.norm(W - U @ (U.T @ W), 2)) if U.size else 0.0


def _pair_from_eigenvalues(
    i: int,
    j: int,
    lam: np.ndarray | None,
    *,
    k_rel: float,
    g_rel: float | None,
    tangent_sin: float,
    agree_tol: float,
) -> MetricPair:
    """Assemble a :class:`MetricPair` from ascending pencil eigenvalues (None: undefined)."""
    num: dict[str, Any] = dict.fromkeys(
        ("lambda_min", "lambda_max", "pencil_condition", "affine_invariant_distance", "max_abs_log")
    )
    if lam is not None:
        logs = np.log(lam)
        num = {
            "lambda_min": float(lam[0]),
            "lambda_max": float(lam[-1]),
            "pencil_condition": float(lam[-1] / lam[0]),
            "affine_invariant_distance": float(np.sqrt(np.sum(logs**2))),
            "max_abs_log": float(np.max(np.abs(logs))),
        }
    return MetricPair(
        i=i,
        j=j,
        k_rel_frobenius=k_rel,
        metric_rel_frobenius=g_rel,
        pencil_eigenvalues=() if lam is None else tuple(float(x) for x in lam),
        tangent_sin=tangent_sin,
        defined=lam is not None,
        agree=lam is not None and num["max_abs_log"] <= agree_tol,
        agree_tol=float(agree_tol),
        **num,
    )


#: ``basis`` counts as orthonormal when ``‖QᵀQ − I‖_max`` is at most this.
_ORTHONORMAL_ATOL = 1e-8


def _check_pair(K_i: Any, K_j: Any, dim_M: int) -> tuple[np.ndarray, np.ndarray]:
    """Both ``K``'s square, finite, symmetric, of one shape ``(n_v, n_v)``, ``1 ≤ dim_M ≤ n_v``."""
    out = []
    for name, K in (("K_i", K_i), ("K_j", K_j)):
        try:
            out.append(_check_K(K, dim_M))
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    if out[0].shape != out[1].shape:
        raise ValueError(
            f"K_i has shape {out[0].shape}, K_j {out[1].shape}: expected one (n_v, n_v) shape"
        )
    return out[0], out[1]


def _check_basis(name: str, basis: Any, n_v: int) -> np.ndarray:
    Q = np.asarray(basis, dtype=np.float64)
    if Q.ndim != 2 or Q.shape[0] != n_v or not 1 <= Q.shape[1] <= n_v:
        raise ValueError(f"{name} has shape {Q.shape}: expected (n_v, dim M) with n_v = {n_v}")
    err = float(np.max(np.abs(Q.T @ Q - np.eye(Q.shape[1]))))
    if not err <= _ORTHONORMAL_ATOL:
        raise ValueError(
            f"{name}: expected orthonormal columns (‖QᵀQ − I‖_max = {err:.3g} > "
            f"{_ORTHONORMAL_ATOL:g})"
        )
    return Q


def metric_pair(
    K_i: Any,
    K_j: Any,
    basis: Any,
    *,
    i: int = 0,
    j: int = 1,
    tangent_i: Any = None,
    tangent_j: Any = None,
    agree_tol: float = METRIC_AGREE_TOL,
) -> MetricPair:
    """Pair numbers of ``K_i``, ``K_j`` (``(n_v, n_v)``) on ``T_vM = range(basis)``.

    ``basis`` is an orthonormal ``(n_v, dim M)`` matrix. With ``A = Qᵀ K_i Q`` and the
    eigendecomposition ``B = Qᵀ K_j Q = V diag(μ) Vᵀ``, ``λ = eig(W ᵀ A W)`` with
    ``W = V diag(μ^{-1/2})``. ``tangent_i`` / ``tangent_j`` (orthonormal bases of the two points'
    tangent spaces) give ``tangent_sin``; both default to ``basis``. The brute-force oracle is
    :func:`metric_pair_reference`.

    >>> p = metric_pair(np.diag([4.0, 1.0, 0.0]), np.diag([1.0, 1.0, 0.0]), np.eye(3, 2))
    >>> p.pencil_eigenvalues, abs(p.affine_invariant_distance - float(np.log(4))) < 1e-15
    ((1.0, 4.0), True)
    """
    n_v = np.shape(K_i)[0] if np.ndim(K_i) == 2 else -1
    Q = _check_basis("basis", basis, n_v) if n_v > 0 else np.zeros((0, 0))
    Ki, Kj = _check_pair(K_i, K_j, Q.shape[1])
    m = Q.shape[1]
    Ui = Q if tangent_i is None else _check_basis("tangent_i", tangent_i, n_v)
    Uj = Q if tangent_j is None else _check_basis("tangent_j", tangent_j, n_v)
    if Ui.shape != Q.shape or Uj.shape != Q.shape:
        raise ValueError(
            f"tangent_i {Ui.shape}, tangent_j {Uj.shape}: expected the shape of basis {Q.shape}"
        )
    k_rel = _rel_fro(Ki, Kj)
    A, B = Q.T @ Ki @ Q, Q.T @ Kj @ Q
    eb, ea = _pd(B), _pd(A)
    lam, g_rel = None, None
    if ea is not None and eb is not None:
        W = eb[1] / np.sqrt(eb[0])
        lam = np.linalg.eigvalsh(W.T @ A @ W)
        g_rel = _rel_fro(metric_tensor(Ki, m), metric_tensor(Kj, m))
    return _pair_from_eigenvalues(
        i, j, lam, k_rel=k_rel, g_rel=g_rel, tangent_sin=_sin_max(Ui, Uj), agree_tol=agree_tol
    )


def metric_pair_reference(
    K_i: Any,
    K_j: Any,
    dim_M: int,
    *,
    i: int = 0,
    j: int = 1,
    agree_tol: float = METRIC_AGREE_TOL,
) -> MetricPair:
    """Brute-force oracle of :func:`metric_pair`, by dense scipy routines from the ``K``'s alone.

    ``T_vM``: the top-``dim_M`` eigenvectors of ``K_i + K_j`` (``scipy.linalg.eigh``; equal to
    ``range K_i = range K_j`` when both points share the tangent space); ``λ`` by
    ``scipy.linalg.eigh(A, B)``; the distance as ``‖logm(S⁻¹ A S⁻¹)‖_F`` with ``S = sqrtm(B)``;
    ``g = Σ_{k ≤ dim M} u_k u_kᵀ / λ_k`` from ``scipy.linalg.eigh`` of each ``K``.
    """
    import scipy.linalg as sla

    Ki, Kj = _check_pair(K_i, K_j, dim_M)
    n = Ki.shape[0]
    top = [n - dim_M, n - 1]
    _, Q = sla.eigh(Ki + Kj, subset_by_index=top)
    wi, Ui = sla.eigh(Ki, subset_by_index=top)
    wj, Uj = sla.eigh(Kj, subset_by_index=top)
    tangent_sin = float(sla.svdvals(Uj - Ui @ (Ui.T @ Uj))[0])
    k_rel = float(sla.norm(Ki - Kj)) / max(float(sla.norm(Ki)), float(sla.norm(Kj)))
    A, B = Q.T @ Ki @ Q, Q.T @ Kj @ Q
    if min(wi[0] / wi[-1], wj[0] / wj[-1]) <= RTOL_RANK:
        return _pair_from_eigenvalues(
            i, j, None, k_rel=k_rel, g_rel=None, tangent_sin=tangent_sin, agree_tol=agree_tol
        )
    lam = sla.eigh(A, B, eigvals_only=True)
    S_inv = np.linalg.inv(np.real(sla.sqrtm(B)))
    dist = float(sla.norm(np.real(sla.logm(S_inv @ A @ S_inv)), "fro"))
    gi, gj = (Ui / wi) @ Ui.T, (Uj / wj) @ Uj.T
    g_rel = float(sla.norm(gi - gj)) / max(float(sla.norm(gi)), float(sla.norm(gj)))
    pair = _pair_from_eigenvalues(
        i, j, lam, k_rel=k_rel, g_rel=g_rel, tangent_sin=tangent_sin, agree_tol=agree_tol
    )
    return MetricPair(**{**pair.__dict__, "affine_invariant_distance": dist})
