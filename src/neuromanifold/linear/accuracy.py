"""Accuracy floor of a fiber point rebuilt from ``v`` (spec §4.6).

A fiber point computed from ``v`` solves ``μ(θ) = v`` only to some ``τ`` (its residual plus the
round-off of μ). Near a critical point μ is flat to first order along the extra null direction
``n``, so such a point may sit ``t ≈ √(τ / ‖Q(n)‖)`` off the critical one (``Q`` the second-order
term of μ, :func:`second_order_term`) and show ``σ_dimM ≈ 2√(τ ‖Q(n)‖)``: about ``√ε`` relative.
A singular value below :func:`sigma_floor` therefore cannot tell a critical point from a regular
one; `neuromanifold.linear.locus.classify_locus` and `neuromanifold.linear.fiber.lcn_fiber` count
it as zero in the Jacobian ranks of the points they rebuild.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from neuromanifold.linear.architecture import LCN, validate_params
from neuromanifold.linear.metric import RTOL_RANK, balanced_representative
from neuromanifold.linear.ntk import jacobian
from neuromanifold.linear.polynomial import mu

__all__ = [
    "FLOOR_FACTOR",
    "floored_rank",
    "rebuilt_point_rtol",
    "second_order_term",
    "sigma_floor",
]

#: :func:`sigma_floor` is this factor times the ``σ_dimM`` that a point ``τ`` away (in ``v``) from
#: an exactly critical point can show, ``2√(τ ‖Q(n)‖)``. That estimate is first order and is
#: reached when the whole residual lies along the null direction: Gauss–Newton points of the
#: spec §4.6 example, solved to ``1e-13``, show ``σ_dimM`` at 0.94–0.98 times it (measured over
#: δ ∈ [−5, 10] and five scales of v); the factor 2 keeps them on the critical side.
FLOOR_FACTOR = 2.0


def second_order_term(arch: LCN, theta: Sequence[Any], n: Any) -> np.ndarray:
    """The ``t²`` coefficient of ``μ(θ + t n)``: ``Q(n) = Σ_{l<l'} μ(θ; w_l → n_l, w_l' → n_l')``.

    μ is multilinear, so ``μ(θ + t n) = μ(θ) + t Jμ(θ) n + t² Q(n) + O(t³)``; ``n`` is a flat
    direction in parameter order (shape ``(n_params,)``). Zero for ``L = 1`` (μ is linear).

    >>> a = LCN((2, 2), (1,))
    >>> second_order_term(a, [[1.0, 2.0], [1.0, -1.0]], [1.0, 0.0, 0.0, 1.0]).tolist()  # 1 · z
    [0.0, 1.0, 0.0]
    """
    th = validate_params(arch, theta)
    flat = np.asarray(n, dtype=np.float64).ravel()
    if flat.size != arch.n_params:
        raise ValueError(f"n has {flat.size} entries: expected n_params = {arch.n_params}")
    parts, off = [], 0
    for w in th:
        parts.append(flat[off : off + w.size].reshape(w.shape))
        off += w.size
    out = np.zeros(arch.out_shape)
    for a, b in itertools.combinations(range(arch.L), 2):
        swapped = list(th)
        swapped[a], swapped[b] = parts[a], parts[b]
        out += mu(arch, swapped)
    return out


def sigma_floor(arch: LCN, theta: Sequence[Any], v: Any) -> float:
    """Accuracy floor of ``σ_dimM(Jμ(θ))`` at a fiber point ``θ`` rebuilt from ``v``.

    ``θ`` solves ``μ(θ) = v`` to ``τ = ‖μ(θ) − v‖ + γ ‖μ(|θ|)‖``: its residual plus the standard
    round-off bound of evaluating μ (each entry of ``v`` is a sum of at most ``Π_{l≥2} k_l``
    products of ``L`` factors, ``γ = (L − 1 + Π_{l≥2} k_l) · ε``; ``|θ|`` entrywise). If ``θ`` is
    ``t n`` away from an exactly critical ``θ*`` along its extra null direction ``n``
    (``Jμ(θ*) n = 0``, ``‖n‖ = 1``), then ``μ(θ) − μ(θ*) ≈ t² Q(n)`` (:func:`second_order_term`)
    and ``Jμ(θ) n ≈ 2 t Q(n)``: a point within ``τ`` of a critical one can show
    ``σ_dimM ≈ 2√(τ ‖Q(n)‖)``. Returned: ``FLOOR_FACTOR · 2√(τ ‖Q(n)‖)``, with ``n`` the right
    singular vector of ``σ_dimM`` at ``θ``. The floor is homogeneous like ``σ_dimM`` (scaling
    ``v`` by ``c`` scales both by ``c^{(L−1)/L}``), and zero for ``L = 1``. Like the ranks it
    qualifies, it is evaluated at the balanced point of ``θ``'s rescaling orbit
    (:func:`~.metric.balanced_representative`).
    """
    given = validate_params(arch, theta)
    th = balanced_representative(arch, given)
    v = np.asarray(v, dtype=np.float64).reshape(arch.out_shape)
    _, _, Vt = np.linalg.svd(jacobian(arch, th))
    q = float(np.linalg.norm(second_order_term(arch, th, Vt[arch.dim_M - 1])))
    gamma = (arch.L - 1 + int(np.prod([w.size for w in th[1:]]))) * np.finfo(np.float64).eps
    # τ of θ as given (μ(θ) and μ(|θ|) are the same along the orbit, up to rounding)
    tau = float(np.linalg.norm(mu(arch, given) - v)) + gamma * float(
        np.linalg.norm(mu(arch, [np.abs(w) for w in given]))
    )
    return FLOOR_FACTOR * 2.0 * float(np.sqrt(tau * q))


def rebuilt_point_rtol(arch: LCN, theta: Sequence[Any], v: Any) -> float:
    """Relative rank threshold of a fiber point rebuilt from ``v``: ``max(RTOL_RANK, floor/σ_max)``.

    ``floor`` is :func:`sigma_floor`; capped just below 1 (only ``σ_max`` then counts), which a
    converged fiber point does not reach (its floor is of the order ``√ε · σ_max``). Pass it as
    ``rtol`` to :func:`~.metric.is_smooth_point`.
    """
    th = balanced_representative(arch, validate_params(arch, theta))
    smax = float(np.linalg.norm(jacobian(arch, th), 2))
    if smax == 0.0:
        return RTOL_RANK
    return min(max(RTOL_RANK, sigma_floor(arch, theta, v) / smax), float(np.nextafter(1.0, 0.0)))


def floored_rank(s: np.ndarray, floor: float = 0.0) -> int:
    """Singular values ``s`` (descending) above ``max(RTOL_RANK · σ_max, floor)``.

    >>> floored_rank(np.array([2.0, 1.0, 1e-8])), floored_rank(np.array([2.0, 1.0, 1e-8]), 1e-7)
    (3, 2)
    """
    return int(np.sum(s > max(RTOL_RANK * s[0], floor))) if s.size and s[0] > 0 else 0
