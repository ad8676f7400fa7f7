"""The global first-order fiber dimension of a bias-free shallow ReLU network, in closed form.

``f_θ(x) = Σ_h a_h σ(g_h · x)`` over the hidden pre-activations ``h`` (neurons, or channel ×
position of a `ReluCNN`; ``a_h``: the read-out column, ``g_h``: the row of ``z = G x``). Along a
tangent ``θ̇``, wherever σ is differentiable,

    ḟ(x) = Σ_h 1[g_h · x > 0] M_h x,    M_h = ȧ_h g_hᵀ + a_h ġ_hᵀ    (d_out × d),

and a zero unit (``g_h = 0``) contributes nothing (σ'(0) = 0, the convention of
:func:`~neuromanifold.linear.relu.relu_jacobian`). Group the other units by kink hyperplane ``L``
(``g_h = ±|g_h| n_L``; ``|ĝ_h · ĝ_k| ≥ PARALLEL_COS`` counts as one hyperplane) and let ``S⁺_L``,
``S⁻_L`` be the sums of ``M_h`` over the units of ``L`` active on either side. Each hyperplane has
a facet that its group alone crosses, so ``ḟ ≡ 0`` on ``R^d`` iff ``S⁺_L = S⁻_L`` for every ``L``
and ``Σ_L S⁻_L = 0`` (then ``ḟ(x) = (Σ_L S⁻_L) x``; with ``d = 1`` every kink is at 0, one
hyperplane, and the same conditions hold). The dimension is ``n_params − rank`` of
``θ̇ ↦ ({S⁺_L − S⁻_L}_L, Σ_L S⁻_L, the invariants' derivative)``: no input point enters.

A probe set reaches the same rank only where its points separate every pair of kinks; between
kinks closer than about ``RANK_RTOL^{1/3}`` rad the separating singular value of the probe
Jacobian falls below the rank threshold (it shrinks with the cube of the angle; s26b audit RERUN
N3), while the conditions above stay one per hyperplane and well scaled.
"""

from __future__ import annotations

import numpy as np

from neuromanifold.linear.metric import RTOL_RANK
from neuromanifold.linear.relu import (
    ReluMLP,
    ReluNet,
    preactivations,
    relu_invariants,
    validate_relu_params,
)

__all__ = ["PARALLEL_COS", "global_first_order_dimension", "kink_lines", "zero_unit_curve"]

#: Kinks with ``|ĝ_h · ĝ_k|`` at or above this share a hyperplane (parallel or antiparallel units):
#: two kinks less than ``√(2(1 − PARALLEL_COS))`` ≈ 1.4e-7 rad apart count as one (at 1e-12,
#: 1.4e-6 rad, units 1e-6 rad apart were merged and read a dimension 2 where the global fiber
#: is finite, s26c audit RERUN2 N1); exactly parallel units meet it with rounding of ~1e-16.
PARALLEL_COS = 1.0 - 1e-14


def _rows(net: ReluNet, W: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``G`` (``H × d``, ``z_h(x) = G[h] · x``) and the read-out columns ``a`` (``H × d_out``)."""
    d = net.input_dim
    G = preactivations(net, (W, A), np.eye(d)).reshape(d, -1).T
    a = A.T if isinstance(net, ReluMLP) else A.reshape(-1, 1)
    return G, a


def kink_lines(G: np.ndarray) -> list[list[tuple[int, int]]]:
    """The non-zero rows of ``G`` grouped by hyperplane: ``[[(h, ±1), …], …]``, the sign that of
    ``g_h`` against the group's first row (``|ĝ_h · ĝ_first| ≥ PARALLEL_COS`` joins a group)."""
    norms = np.linalg.norm(G, axis=1)
    lines: list[tuple[np.ndarray, list[tuple[int, int]]]] = []
    for h in np.flatnonzero(norms > 0):
        g = G[h] / norms[h]
        for n, members in lines:
            cos = float(g @ n)
            if abs(cos) >= PARALLEL_COS:
                members.append((int(h), 1 if cos > 0 else -1))
                break
        else:
            lines.append((g, [(int(h), 1)]))
    return [members for _, members in lines]


def global_first_order_dimension(net: ReluNet, theta: object, *, rtol: float = RTOL_RANK) -> int:
    """``n_params − rank`` of the module docstring's map at ``θ`` (singular values above
    ``rtol · σ_max`` count). The map is of degree 2 in θ (bilinear ``M_h``, quadratic
    invariants), so its derivative is the central difference with step 1, exactly up to
    rounding."""
    W0, A0 = validate_relu_params(net, theta)
    lines = kink_lines(_rows(net, W0, A0)[0])
    nW = W0.size
    x0 = np.concatenate([W0.ravel(), A0.ravel()])

    def conditions(x: np.ndarray) -> np.ndarray:
        W, A = x[:nW].reshape(W0.shape), x[nW:].reshape(A0.shape)
        G, a = _rows(net, W, A)
        M = np.einsum("ho,hd->hod", a, G)
        plus = [
            sum((M[h] for h, s in members if s > 0), np.zeros(M.shape[1:])) for members in lines
        ]
        minus = [
            sum((M[h] for h, s in members if s < 0), np.zeros(M.shape[1:])) for members in lines
        ]
        parts = [(p - m).ravel() for p, m in zip(plus, minus, strict=True)]
        parts.append(sum(minus, np.zeros(M.shape[1:])).ravel())
        parts.append(relu_invariants(net, (W, A)))
        return np.concatenate(parts)

    eye = np.eye(x0.size)
    D = np.stack([(conditions(x0 + e) - conditions(x0 - e)) / 2 for e in eye], axis=1)
    s = np.linalg.svd(D, compute_uv=False)
    rank = int(np.sum(s > rtol * s[0])) if s.size and s[0] > 0 else 0
    return int(x0.size - rank)


def _unit_vectors(
    net: ReluNet, W: np.ndarray, A: np.ndarray, j: int
) -> tuple[np.ndarray, np.ndarray]:
    """Unit ``j``'s input weights ``w_j`` (a row of ``W``) and read-out ``a_j`` (a column of an
    MLP's ``A``, a row of a CNN's: the channel's weights over positions)."""
    return W[j], (A[:, j] if isinstance(net, ReluMLP) else A[j])


def zero_unit_curve(
    net: ReluNet, theta: object, zero: int, partner: int, t: float
) -> tuple[np.ndarray, np.ndarray]:
    """The point at ``t ≥ 0`` of a one-sided curve of the global fiber through ``θ`` that leaves it
    where unit ``zero`` has no input weights (``w_z = 0``; its read-out ``a_z`` may be anything),
    growing it parallel to the live unit ``partner`` (``w_h ≠ 0``); shapes those of ``θ``.

    With ``w_z(t) = t·w_h`` unit z adds ``t·a_z(t) σ(w_h · x)`` for ``t ≥ 0`` (positive
    homogeneity), which unit h gives up: ``(w_h, a_h) → (s w_h, r/s)`` with ``r = a_h − t a_z(t)``
    keeps ``f``. The invariants ``‖a_j‖² − ‖w_j‖²`` fix the rest: ``‖a_z(t)‖² = ‖a_z‖² + t²‖w_h‖²``
    (``a_z(t)`` along ``a_z``, or along ``a_h`` when ``a_z = 0``, else along the first axis) and
    ``q = s²`` is the positive root of ``‖w_h‖² q² + (‖a_h‖² − ‖w_h‖²) q − ‖r‖² = 0`` (``q = 1`` at
    ``t = 0``). ``‖θ(t) − θ‖ = Θ(t)`` (``w_z`` moves by ``t w_h``), so ``θ`` is not isolated in its
    global fiber even where the null vectors of ``dΦ`` (in which the zero unit's input weights
    enter only through its kink-free invariant) show no curve (s26c audit RERUN2 N2). For
    ``t < 0`` unit z would be antiparallel to h: the curve is one-sided. Refuses (ValueError)
    ``w_z ≠ 0``, ``w_h = 0``, ``zero == partner``, ``t < 0`` and a ``t`` large enough to empty unit
    h (``q = 0``).

    >>> from neuromanifold.linear.relu import relu_forward
    >>> net = ReluMLP(d_in=2, width=2)
    >>> theta = (np.array([[0.0, 0.0], [1.0, 2.0]]), np.array([[0.5, 3.0]]))
    >>> W, A = zero_unit_curve(net, theta, 0, 1, 0.1)
    >>> x = np.array([[1.0, 1.0], [-2.0, 0.5], [0.3, -1.0]])
    >>> bool(np.allclose(relu_forward(net, (W, A), x), relu_forward(net, theta, x), atol=1e-14))
    True
    >>> bool(np.allclose(relu_invariants(net, (W, A)), relu_invariants(net, theta), atol=1e-14))
    True
    """
    W0, A0 = validate_relu_params(net, theta)
    if zero == partner:
        raise ValueError(f"zero and partner must be different units, both are {zero}")
    w_z, a_z = _unit_vectors(net, W0, A0, zero)
    w_h, a_h = _unit_vectors(net, W0, A0, partner)
    if np.any(w_z != 0):
        raise ValueError(f"unit {zero} has input weights; the curve starts at a unit with w = 0")
    if not np.any(w_h != 0):
        raise ValueError(f"unit {partner} has no input weights to grow unit {zero} along")
    if not t >= 0:
        raise ValueError(f"t must be >= 0 (the curve is one-sided), got {t!r}")
    ww = float(w_h @ w_h)
    if np.any(a_z != 0):
        e = a_z / np.linalg.norm(a_z)
    elif np.any(a_h != 0):
        e = a_h / np.linalg.norm(a_h)
    else:
        e = np.eye(a_z.size)[0]
    a_z_t = np.sqrt(float(a_z @ a_z) + t * t * ww) * e
    r = a_h - t * a_z_t
    rr, b = float(r @ r), float(a_h @ a_h) - ww
    root = np.sqrt(b * b + 4.0 * ww * rr)
    q = 2.0 * rr / (b + root) if b > 0 else (root - b) / (2.0 * ww)  # no cancellation
    if not q > 0:
        raise ValueError(f"t = {t!r} empties unit {partner} (s² = {q!r}); take a smaller t")
    s = np.sqrt(q)
    W, A = W0.copy(), A0.copy()
    W[zero], W[partner] = t * w_h, s * w_h
    if isinstance(net, ReluMLP):
        A[:, zero], A[:, partner] = a_z_t, r / s
    else:
        A[zero], A[partner] = a_z_t, r / s
    return W, A
