"""The function-space metric ``g_v = K⁺`` on ``T_vM``, Riemannian gradients, regularity tests.

At a regular ``θ`` (``rank Jμ(θ) = dim M``) the tangent space is ``T_vM = range Jμ = range K``
(``K = Jμ Jμᵀ``). When the NTK is a function ``K(v)`` of the end-to-end filter along the flow
(spec §2.4), ``g_v(ξ, η) = ξᵀ K⁺ η`` with ``K⁺`` the pseudo-inverse truncated at rank ``dim M`` is a
Riemannian metric on the smooth locus, and ``v̇ = −K ∇ℓ(v) = −grad_g ℓ(v)``; in particular
``g_v(K∇ℓ, η) = ⟨∇ℓ, η⟩`` for every ``η ∈ T_vM``. Vectors in function space are ``v``-shaped arrays
flattened in C order (or flat ``(n_v,)`` vectors).

Regularity here is regularity of the *parameter* ``θ``; a regular ``θ`` can still map to a singular
point of ``M`` (a self-crossing, spec §4.2), which only a second fiber point reveals.

References: Achour, Kohn, Rauhut, arXiv:2507.06367; Kohn, Montúfar, Shahverdi, Trager, SIAGA 2024.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuromanifold.linear.architecture import FC, LCN, Architecture, _is_real, validate_params
from neuromanifold.linear.ntk import fc_jacobian, jacobian
from neuromanifold.linear.rescale import _norm

__all__ = [
    "RTOL_RANK",
    "SmoothPointReport",
    "balanced_representative",
    "is_smooth_point",
    "jacobian_rank",
    "metric_inner",
    "metric_tensor",
    "riemannian_gradient",
    "tangent_basis",
    "tangent_condition_number",
]

RTOL_RANK = 1e-9
"""The one rank threshold: a singular value ``σ_i`` counts iff ``σ_i > RTOL_RANK · σ_max``.

Shared by :func:`jacobian_rank`, :func:`is_smooth_point`, the locus classification, the fiber
dimension and the convergence experiment (they import it), so their rank verdicts agree.
:func:`metric_tensor` and :mod:`~.metric_pair` apply the same constant to the eigenvalues
``λ = σ²`` of ``K``, not to ``σ``: they refuse a point with ``σ_dimM / σ_max ≤ √RTOL_RANK ≈ 3e-5``
(a condition number of ``K|T_vM`` of at least ``1 / RTOL_RANK``), which the rank tests above may
call regular; :func:`metric_tensor`'s message says which of the two it is. Gradient flow
limits on the stride-one critical locus keep ``σ_dimM / σ_max`` near ``1e-10`` (measured up to
``1.4e-10`` at ``‖∇L‖ = 1e-10``), so a threshold of ``1e-10`` would call them regular.
"""


def balanced_representative(arch: Architecture, theta: Sequence[Any]) -> Sequence[Any]:
    """The balanced point of ``θ``'s rescaling orbit (every layer non-zero), else ``θ``.

    ``w_l → c_l w_l`` with ``Π c_l = 1`` keeps ``μ`` and gives ``Jμ(cθ) = Jμ(θ) diag(1/c_l)``:
    the rank of ``Jμ`` is the same along the orbit, but its singular values are not, and a
    threshold relative to ``σ_max`` reads a strongly unbalanced point as singular (the spec's
    stride-one example rescaled by ``c = 3e4, 1/c`` had ``σ_3/σ_1 = 6e-10``: rank 2 < dim M;
    s15 trial R #2). Rank verdicts are therefore taken at the orbit's balanced point: the
    rescaling lemma with ``δ = 0`` (spec §3) has the closed form ``λ_l = (Π_j ‖w_j‖)^{1/L} / ‖w_l‖``
    (every ``‖λ_l w_l‖`` equal), evaluated in logs from norms that do not square, so filters of
    scale ``1e-200`` are balanced too; a balanced ``θ`` is kept up to rounding. For FC
    architectures the same scalar rescaling ``W_l → λ_l W_l`` (Frobenius norms) is applied: it is
    the part of their ``GL`` symmetry that changes the scale of the Jacobian blocks (widths
    (3, 2, 3) rescaled by ``c = 1e5, 1/c`` had rank 6 < 8; s15 audit U #1); the rest of ``GL`` is
    not normalised. ``θ`` is returned unchanged for ``L = 1``, when a layer is zero, and when a
    scaling is not representable in float64.
    """
    if not isinstance(arch, LCN | FC) or arch.L == 1:
        return theta
    th = validate_params(arch, theta)
    norms = np.array([_norm(w) for w in th])
    if not np.all(norms > 0):
        return th
    log_n = np.log(norms)
    scale = np.exp(np.mean(log_n) - log_n)  # λ_l = (Π_j ‖w_j‖)^{1/L} / ‖w_l‖, Π λ_l = 1
    if not np.all(np.isfinite(scale) & (scale > 0)):
        return th
    return tuple(float(c) * w for c, w in zip(scale, th, strict=True))


def _jac(arch: Architecture, theta: Sequence[Any]) -> np.ndarray:
    if isinstance(arch, LCN):
        return jacobian(arch, theta)
    if isinstance(arch, FC):
        return fc_jacobian(arch, theta)
    raise TypeError(f"arch = {arch!r}: expected an LCN or FC instance")


def _check_rtol(rtol: float) -> None:
    if not (_is_real(rtol) and 0 < rtol < 1):
        raise ValueError(f"rtol = {rtol!r}: expected a float in (0, 1)")


def jacobian_rank(arch: Architecture, theta: Sequence[Any], *, rtol: float = RTOL_RANK) -> int:
    """Numerical rank of ``Jμ(θ)``: the number of singular values ``> rtol · σ_max``, taken at
    the balanced point of ``θ``'s layer-wise rescaling orbit (:func:`balanced_representative`;
    the rank is the same along the orbit).

    >>> jacobian_rank(LCN((3, 2), (2,)), [[-0.49, 0.0, 1.0], [-0.49, 1.0]])  # spec §4.6
    3
    """
    _check_rtol(rtol)
    s = np.linalg.svd(_jac(arch, balanced_representative(arch, theta)), compute_uv=False)
    if s.size == 0 or s[0] == 0:
        return 0
    return int(np.sum(s > rtol * s[0]))


@dataclass(frozen=True)
class SmoothPointReport:
    """Regularity of ``θ``: ``smooth`` iff ``rank Jμ(θ) = dim M`` (spec §4.6).

    A zero filter needs no separate test: in normal form (every ``k_l ≥ 2``, ``L ≥ 2``) it makes
    every other block ``J_m`` vanish, so ``rank Jμ ≤ k_l < dim M``; where the rank is full
    anyway (depth 1, scalar layers, an FC product that spans all matrices) ``θ`` is regular.

    The singular values are those of ``Jμ`` at the balanced point of ``θ``'s rescaling orbit
    (:func:`balanced_representative`; for a balanced ``θ``, of ``Jμ(θ)`` itself), so the verdict
    does not depend on where ``θ`` sits on that orbit (layer-wise scalings ``w_l → c_l w_l``; for
    FC the rest of the ``GL`` symmetry, e.g. ``W_1 → D W_1``, ``W_2 → W_2 D⁻¹``, is not
    normalised and can still move ``σ_dimM/σ_max``).

    Attributes:
        rank: numerical rank of ``Jμ`` at relative threshold ``rtol``.
        dim_M: ``dim M`` of the architecture.
        sigma_max: largest singular value of ``Jμ``.
        sigma_dim: the ``dim_M``-th singular value (0 if there are fewer).
        sigma_next: the ``(dim_M + 1)``-th singular value (0 if there is none; ideally 0).
        rtol: the threshold used.
        min_filter_norm: smallest ``‖w_l‖`` (of ``θ`` as given, computed without underflow).
        smooth: the verdict.
    """

    rank: int
    dim_M: int
    sigma_max: float
    sigma_dim: float
    sigma_next: float
    rtol: float
    min_filter_norm: float
    smooth: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "rank": self.rank,
            "dim_M": self.dim_M,
            "sigma_max": self.sigma_max,
            "sigma_dim": self.sigma_dim,
            "sigma_next": self.sigma_next,
            "rtol": self.rtol,
            "min_filter_norm": self.min_filter_norm,
            "smooth": self.smooth,
        }


def is_smooth_point(
    arch: Architecture, theta: Sequence[Any], *, rtol: float = RTOL_RANK
) -> SmoothPointReport:
    """Report whether ``θ`` is a regular point of ``μ`` (``rank Jμ = dim M``; a zero filter
    is regular only where the rank is full, e.g. at depth 1, see `SmoothPointReport`).

    >>> is_smooth_point(LCN((2, 2), (2,)), [[1, 2], [3, 1]]).smooth
    True
    """
    _check_rtol(rtol)
    th = validate_params(arch, theta)
    s = np.linalg.svd(_jac(arch, balanced_representative(arch, th)), compute_uv=False)
    smax = float(s[0]) if s.size else 0.0
    rank = int(np.sum(s > rtol * smax)) if smax > 0 else 0
    m = arch.dim_M
    min_norm = min(_norm(np.asarray(w, dtype=np.float64)) for w in th)
    return SmoothPointReport(
        rank=rank,
        dim_M=m,
        sigma_max=smax,
        sigma_dim=float(s[m - 1]) if m - 1 < s.size else 0.0,
        sigma_next=float(s[m]) if m < s.size else 0.0,
        rtol=float(rtol),
        min_filter_norm=min_norm,
        smooth=bool(rank == m),
    )


def tangent_basis(arch: Architecture, theta: Sequence[Any]) -> np.ndarray:
    """Orthonormal basis of ``range Jμ(θ)`` (``= T_vM`` at a regular θ): ``(n_v, dim M)``.

    The leading ``dim M`` left singular vectors of ``Jμ``.
    """
    U, _, _ = np.linalg.svd(_jac(arch, theta), full_matrices=False)
    return U[:, : arch.dim_M]


def _check_K(K: Any, dim_M: int) -> np.ndarray:
    K = np.asarray(K, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"K has shape {K.shape}: expected a square (n_v, n_v) matrix")
    if not np.all(np.isfinite(K)):
        raise ValueError("K: entries must be finite")
    scale = max(float(np.max(np.abs(K))), 1e-300)
    if np.max(np.abs(K - K.T)) > 1e-10 * scale:
        raise ValueError("K: expected a symmetric matrix (an NTK J Jᵀ)")
    if not (isinstance(dim_M, (int, np.integer)) and 1 <= dim_M <= K.shape[0]):
        raise ValueError(f"dim_M = {dim_M!r}: expected an int in [1, {K.shape[0]}]")
    return K


def _top_eig(K: np.ndarray, dim_M: int) -> tuple[np.ndarray, np.ndarray]:
    lam, U = np.linalg.eigh(0.5 * (K + K.T))
    return lam[::-1][:dim_M], U[:, ::-1][:, :dim_M]


def metric_tensor(K: Any, dim_M: int) -> np.ndarray:
    """``g_v = K⁺`` truncated at rank ``dim M``: ``Σ_{i ≤ dim M} u_i u_iᵀ / λ_i``, ``(n_v, n_v)``.

    ``λ_i, u_i`` are the ``dim M`` largest eigenpairs of ``K``; the remaining ones (the normal
    space, zero up to round-off at a regular point) are discarded.

    Raises ``ValueError`` unless ``λ_{dim M} > RTOL_RANK · λ_1``, the package's test of ``K|T_vM``
    (as in :mod:`~.metric_pair`): the eigenvalues of ``K = Jμ Jμᵀ`` are ``σ_i²``, but ``K``'s
    eigenvalues are resolved only to about ``n_v ε λ_1``, so the Jacobian's ``σ_{dim M} ≤
    RTOL_RANK · σ_1`` (``λ`` ratio ``1e-18``) cannot be read off ``K``; at singular points (spec
    §4.6) ``λ_{dim M}`` is round-off of either sign, ``~1e-16 λ_1``. A regular point with
    ``cond K|T_vM ≥ 1 / RTOL_RANK`` is refused as well (ill-conditioned, not singular): the
    message says "singular" only where ``λ_{dim M} ≤ n_v ε λ_1`` (``K`` has rank ``< dim M`` to
    its round-off, the floor of :func:`tangent_condition_number`), and otherwise gives the
    condition number of the regular but ill-conditioned point.

    >>> metric_tensor(np.diag([4.0, 2.0, 0.0]), 2).tolist()
    [[0.25, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.0]]
    """
    K = _check_K(K, dim_M)
    lam, U = _top_eig(K, dim_M)
    floor = RTOL_RANK * max(float(lam[0]), 0.0)
    if not lam[-1] > floor:
        head = (
            f"K has only {int(np.sum(lam > floor))} eigenvalues above RTOL_RANK · λ_max = "
            f"{floor:.3g} < dim_M = {dim_M} (λ_dimM = {lam[-1]:.3g}): "
        )
        roundoff = _roundoff_floor(K, lam)
        if not lam[-1] > roundoff:
            raise ValueError(
                head + f"λ_dimM is within K's round-off n_v·ε·λ_max = {roundoff:.3g}, so K has "
                "rank < dim_M; the metric is undefined at this (singular) point"
            )
        raise ValueError(
            head + f"λ_dimM is above K's round-off {roundoff:.3g} (rank dim_M: the point is not "
            "singular), but K|T_vM is too ill-conditioned for a reliable inverse (condition "
            f"number λ_max / λ_dimM = {lam[0] / lam[-1]:.3g} ≥ 1 / RTOL_RANK = {1 / RTOL_RANK:.3g};"
            f" the Jacobian's σ_dimM / σ_max = {np.sqrt(lam[-1] / lam[0]):.3g}, which "
            "jacobian_rank counts when it exceeds RTOL_RANK)"
        )
    return (U / lam) @ U.T


def _roundoff_floor(K: np.ndarray, lam: np.ndarray) -> float:
    """``n_v ε λ_1``: the round-off of ``K``'s eigenvalues (``eigh``'s backward error)."""
    return K.shape[0] * float(np.finfo(np.float64).eps) * max(float(lam[0]), 0.0)


def metric_inner(K: Any, dim_M: int, xi: Any, eta: Any) -> float:
    """``g_v(ξ, η) = ξᵀ K⁺ η`` (``K⁺`` as in :func:`metric_tensor`; ξ, η flattened in C order)."""
    G = metric_tensor(K, dim_M)
    x, y = np.ravel(np.asarray(xi, dtype=np.float64)), np.ravel(np.asarray(eta, dtype=np.float64))
    if x.size != G.shape[0] or y.size != G.shape[0]:
        raise ValueError(f"xi, eta have {x.size}, {y.size} entries: expected {G.shape[0]} each")
    return float(x @ G @ y)


def riemannian_gradient(K: Any, grad: Any) -> np.ndarray:
    """``grad_g ℓ(v) = K ∇ℓ(v)`` (shape of ``grad``); the flow is ``v̇ = −K ∇ℓ(v)``."""
    K = np.asarray(K, dtype=np.float64)
    g = np.asarray(grad, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or g.size != K.shape[0]:
        raise ValueError(
            f"K {K.shape} and grad {g.shape}: expected a square K and grad with K.shape[0] entries"
        )
    return (K @ g.ravel()).reshape(g.shape)


def tangent_condition_number(K: Any, dim_M: int) -> float:
    """``λ_1 / λ_{dim M}`` of ``K`` (its condition number on ``T_vM``; ``inf`` if singular).

    ``inf`` where ``λ_{dim M} ≤ n_v ε λ_1``, the round-off of ``K``'s eigenvalues (``eigh``'s
    backward error), below which the ratio is noise of either sign: at the singular points of
    spec §4.6 ``λ_{dim M} ~ 1e-16 λ_1`` gave ratios near ``1e17``. Larger, resolved ratios are
    returned even beyond ``1 / RTOL_RANK``, where :func:`metric_tensor` refuses.
    """
    K = _check_K(K, dim_M)
    lam, _ = _top_eig(K, dim_M)
    return float(lam[0] / lam[-1]) if lam[-1] > _roundoff_floor(K, lam) else float("inf")
