"""Multi-start nonlinear least squares: the engine behind every numeric fiber search.

Solves ``F(x) = 0`` for a residual map ``F: R^n → R^m`` by Levenberg–Marquardt (MINPACK via
``scipy.optimize.least_squares(method="lm")`` when ``m ≥ n``, trust-region reflective otherwise)
from several starting points, and keeps the starts whose final residual ``‖F(x)‖₂`` is below a
tolerance. Pure numpy/scipy; the callers supply ``F`` and its Jacobian.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

#: A residual map ``F: R^n → R^m`` or its Jacobian ``R^n → R^{m×n}``, on flat float64 arrays.
Residual = Callable[[np.ndarray], np.ndarray]

#: Termination tolerances handed to scipy (all three at round-off level).
SOLVER_TOL = 1e-15


@dataclass(frozen=True)
class LsqResult:
    """One least-squares solve: the end point, its residual norm and evaluations used."""

    x: np.ndarray
    residual: float
    nfev: int


def solve(
    fun: Callable[[np.ndarray], np.ndarray],
    jac: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    *,
    max_nfev: int = 400,
) -> LsqResult:
    """Minimise ``½‖F(x)‖²`` from ``x0``; returns the end point and ``‖F(x)‖₂``."""
    x0 = np.asarray(x0, dtype=np.float64)
    m = int(np.size(fun(x0)))
    method = "lm" if m >= x0.size else "trf"
    try:
        res = least_squares(
            fun,
            x0,
            jac=jac,
            method=method,
            xtol=SOLVER_TOL,
            ftol=SOLVER_TOL,
            gtol=SOLVER_TOL,
            max_nfev=max_nfev,
        )
    except (ValueError, np.linalg.LinAlgError):
        return LsqResult(x0, float("inf"), 0)
    x = np.asarray(res.x, dtype=np.float64)
    r = float(np.linalg.norm(fun(x)))
    return LsqResult(x, r if np.isfinite(r) else float("inf"), int(res.nfev))


def multistart(
    fun: Callable[[np.ndarray], np.ndarray],
    jac: Callable[[np.ndarray], np.ndarray],
    starts: Iterable[np.ndarray],
    *,
    tol: float,
    max_nfev: int = 400,
) -> tuple[list[LsqResult], float, int]:
    """Solve from every start; return (converged results, best residual seen, number of starts).

    A start counts as converged when its final residual is at most ``tol``.
    """
    good: list[LsqResult] = []
    best = float("inf")
    n = 0
    for x0 in starts:
        n += 1
        res = solve(fun, jac, x0, max_nfev=max_nfev)
        best = min(best, res.residual)
        if res.residual <= tol:
            good.append(res)
    return good, best, n


def null_dimension(jac: np.ndarray, *, rtol: float = 1e-9) -> int:
    """``n − rank(jac)`` with rank counted as singular values above ``rtol · σ_max``."""
    jac = np.asarray(jac, dtype=np.float64)
    if jac.size == 0:
        return int(jac.shape[1]) if jac.ndim == 2 else 0
    s = np.linalg.svd(jac, compute_uv=False)
    rank = int(np.sum(s > rtol * s[0])) if s.size and s[0] > 0 else 0
    return int(jac.shape[1] - rank)


def curve_through(
    fun: Callable[[np.ndarray], np.ndarray],
    jac: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    *,
    step: float,
    tol: float,
    rtol: float,
    accept: Callable[[np.ndarray], bool] | None = None,
) -> bool:
    """Whether a curve of zeros of ``F`` (``fun``, Jacobian ``jac``) passes through its zero ``x``.

    For each null vector ``n`` of ``dF(x)`` (singular values up to ``rtol · σ_max``), solve
    ``F = 0`` on the affine space ``{x + step·n + z : z ∈ row space of dF(x)}`` from ``z = 0``.
    Where the zero set is smooth at ``x`` it is a graph over the null space, so a zero with
    ``‖z‖ = O(step²)`` exists; a solution with ``‖z‖ ≤ step`` and ``‖F‖ ≤ tol`` means a curve.
    Near an isolated singular zero none lies there and ``‖F‖`` stays of order ``step^j``.
    ``accept`` (optional) must also hold at the solution: a zero of ``F`` that is not in the set
    the caller means (a ReLU fiber point of another activation pattern) counts for nothing.
    """
    x = np.asarray(x, dtype=np.float64)
    rank, vt = _row_split(jac(x), rtol)
    Z = vt[:rank].T  # orthonormal basis of dF's row space
    for i in range(rank, vt.shape[0]):
        start = x + step * vt[i]
        y, residual = _zero_on_slice(fun, jac, start, Z)
        if residual <= tol and float(np.linalg.norm(y - start)) <= step:
            if accept is None or accept(y):
                return True
    return False


def curve_through_hyperplanes(
    fun: Callable[[np.ndarray], np.ndarray],
    jac: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    *,
    step: float,
    tol: float,
    rtol: float,
    accept: Callable[[np.ndarray], bool] | None = None,
) -> bool:
    """Whether a curve of zeros of ``F`` passes through its zero ``x`` where the null space of
    ``dF(x)`` (dimension ``k``) may be larger than the zero set's: a first-order direction that a
    second-order term blocks, beside a curve (two parallel ReLU units: a one-dimensional fiber,
    first-order dimension 2), or a curve leaving ``x`` along no null vector at all (a ReLU unit
    with no input weights, whose ``dF`` columns vanish).

    `curve_through` steps exactly along each null vector and corrects in the row space only, so
    it finds a curve only where the null space is the curve's tangent space. Here, for each null
    vector ``n`` and sign ``σ = ±1`` (a curve may leave ``x`` on one side only), ``F = 0`` is
    solved on the hyperplane ``{y : ⟨y − x, n⟩ = σ·step}`` from ``x + σ·step·n``. A curve whose
    tangent ``τ`` has ``|⟨τ̂, n⟩| ≥ 1/√k`` for some basis vector ``n`` (one always does, when
    ``τ`` lies in the null space) crosses that hyperplane within ``√k·step`` of ``x``; a solution
    with ``‖y − x‖ ≤ 2√k·step`` and ``‖F‖ ≤ tol`` counts as a curve. At an isolated zero no
    other zero lies that close for a small enough step. ``False`` where ``dF(x)`` has no null
    vector. ``accept`` as in `curve_through` (s27b audit RERUN #1: a dataset-notion ReLU fiber
    took a zero of another activation pattern for a curve).
    """
    x = np.asarray(x, dtype=np.float64)
    rank, vt = _row_split(jac(x), rtol)
    reach = 2.0 * np.sqrt(max(vt.shape[0] - rank, 1)) * step
    for i in range(rank, vt.shape[0]):
        plane = np.delete(vt, i, axis=0).T  # orthonormal basis of the hyperplane's directions
        for sign in (1.0, -1.0):
            y, residual = _zero_on_slice(fun, jac, x + sign * step * vt[i], plane)
            moved = float(np.linalg.norm(y - x))
            if residual <= tol and moved <= reach and (accept is None or accept(y)):
                return True
    return False


def _row_split(jac_x: np.ndarray, rtol: float) -> tuple[int, np.ndarray]:
    """``(rank, Vᵀ)`` of ``dF(x)``'s SVD: rows ``:rank`` of ``Vᵀ`` span its row space (singular
    values above ``rtol · σ_max``), the rest its null space."""
    _, s, vt = np.linalg.svd(jac_x)
    rank = int(np.sum(s > rtol * s[0])) if s.size and s[0] > 0 else 0
    return rank, vt


def _zero_on_slice(
    fun: Callable[[np.ndarray], np.ndarray],
    jac: Callable[[np.ndarray], np.ndarray],
    start: np.ndarray,
    basis: np.ndarray,
) -> tuple[np.ndarray, float]:
    """Solve ``F = 0`` on the affine slice ``{start + B w}`` (``B = basis``, orthonormal
    columns) from ``w = 0``; returns the end point ``start + B w`` and ``‖F‖`` there."""
    res = solve(
        lambda w: fun(start + basis @ w),
        lambda w: jac(start + basis @ w) @ basis,
        np.zeros(basis.shape[1]),
    )
    return start + basis @ res.x, res.residual
