"""Orthogonalizers for Muon: Newton–Schulz, Polar Express, and the exact polar factor.

Every orthogonalizer maps a matrix ``G`` of shape ``(m, n)`` with thin SVD ``G = U Σ Vᵀ`` to an
approximation of its polar factor ``U Vᵀ`` (shape ``(m, n)``). The polynomial methods act on the
singular values only: after normalising ``X₀ = G / max(s·‖G‖_F, ε)`` each step applies an odd
quintic

    X ← a X + b (X Xᵀ) X + c (X Xᵀ)² X,

so the output is ``U p(Σ / max(s‖G‖_F, ε)) Vᵀ`` with ``p`` the composition of the scalar quintics
``x ↦ a x + b x³ + c x⁵``. :func:`scalar_composition` evaluates that scalar map; the tests check
the matrix iterations against it and against :func:`polar_svd`, the exact reference.

* :func:`newton_schulz` — the fixed quintic of Keller Jordan's Muon, ``(3.4445, −4.7750, 2.0315)``
  for 5 steps (the same constants ``torch.optim.Muon`` uses). It does not converge to ``UVᵀ``;
  its singular values settle in a band around 1 (see :data:`NEWTON_SCHULZ_BAND`).
* :func:`polar_express` — per-step minimax-optimal quintics (Polar Express). The coefficients in
  :data:`POLAR_EXPRESS_COEFFICIENTS` are the five-step table published with the method and used in
  modded-nanogpt's Muon; :func:`polar_express_coefficients` re-derives them (greedy Remez
  equioscillation on ``[ℓ, u]``, cushioned and recentred, with a safety factor), and
  ``polar_express_coefficients(lower=1e-3, steps=5, safety=0.02, cushion=0.02)`` reproduces the
  table to round-off.
* :func:`polar_svd` — ``U Vᵀ`` from ``torch.linalg.svd``: exact, slow, the reference.

References: N. Amsel, D. Persson, C. Musco, R. M. Gower, "The Polar Express: Optimal Matrix Sign
Methods and Their Application to the Muon Algorithm", arXiv:2505.16932 (2025); K. Jordan et al.,
"Muon: An optimizer for hidden layers in neural networks" (2024).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "NEWTON_SCHULZ_BAND",
    "NEWTON_SCHULZ_COEFFICIENTS",
    "ORTHOGONALIZERS",
    "POLAR_EXPRESS_BAND",
    "POLAR_EXPRESS_COEFFICIENTS",
    "POLAR_EXPRESS_NORM_SAFETY",
    "OrthogonalizerName",
    "newton_schulz",
    "polar_express",
    "polar_express_coefficients",
    "polar_svd",
    "scalar_composition",
]

OrthogonalizerName = Literal["newton-schulz", "polar-express", "svd"]

NEWTON_SCHULZ_COEFFICIENTS: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)
"""Keller Jordan's quintic (also ``torch.optim.Muon``'s default), applied 5 times."""

NEWTON_SCHULZ_BAND: tuple[float, float] = (0.68, 1.2)
"""Interval holding the singular values of a 5-step Newton–Schulz output for inputs whose
normalised singular values lie in ``[0.05, 1]``: :func:`scalar_composition` measures
``[0.682, 1.134]`` there (the Muon write-up quotes roughly ``(0.7, 1.2)``)."""

POLAR_EXPRESS_COEFFICIENTS: tuple[tuple[float, float, float], ...] = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
"""Five Polar Express steps as published (modded-nanogpt's Muon, from the authors' offline
construction with ``ℓ = 1e-3``, cushion 0.02 and a 2% safety factor); pair with
:data:`POLAR_EXPRESS_NORM_SAFETY`."""

POLAR_EXPRESS_BAND: tuple[float, float] = (0.8588, 1.1412)
"""Interval holding the output singular values of the published five-step table for
normalised input singular values in ``[1e-3, 1/1.02]`` (``p(ℓ₅)`` and ``2 − p(ℓ₅)`` of the
construction, evaluated by :func:`scalar_composition`)."""

POLAR_EXPRESS_NORM_SAFETY = 1.02
"""The input is divided by ``1.02·‖G‖_F`` so every singular value starts in ``(0, 1/1.02]``."""

_EPS = 1e-7


def _check_matrix(g: Tensor, name: str = "g") -> None:
    if not isinstance(g, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(g).__name__}")
    if g.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix (m, n), got shape {tuple(g.shape)}")


def _quintic_iteration(
    g: Tensor,
    coefficients: Sequence[tuple[float, float, float]],
    *,
    norm_safety: float,
    eps: float,
    dtype: torch.dtype | None,
) -> Tensor:
    """Run ``X ← aX + (bA + cA²)X`` with ``A = XXᵀ`` on the short side; returns g's dtype."""
    _check_matrix(g)
    x = g.to(dtype if dtype is not None else g.dtype)
    wide = x.shape[0] <= x.shape[1]
    if not wide:
        x = x.T
    x = x / (x.norm() * norm_safety).clamp(min=eps)
    for a, b, c in coefficients:
        gram = x @ x.T
        poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)  # bA + cA²
        x = torch.addmm(x, poly, x, beta=a)  # aX + (bA + cA²)X
    if not wide:
        x = x.T
    return x.to(g.dtype)


def newton_schulz(
    g: Tensor,
    *,
    steps: int = 5,
    coefficients: tuple[float, float, float] = NEWTON_SCHULZ_COEFFICIENTS,
    dtype: torch.dtype | None = None,
    eps: float = _EPS,
) -> Tensor:
    """Fixed-quintic Newton–Schulz orthogonalization of ``g`` (shape ``(m, n)``).

    Computes ``U p(Σ/max(‖G‖_F, eps)) Vᵀ`` with ``p`` the ``steps``-fold composition of
    ``x ↦ a x + b x³ + c x⁵``. With ``dtype=torch.bfloat16`` it performs the same operations, in
    the same order, as ``torch.optim.Muon``'s internal orthogonalizer.

    >>> q = newton_schulz(torch.eye(3, dtype=torch.float64) * 5.0)
    >>> lo, hi = NEWTON_SCHULZ_BAND
    >>> bool(((torch.diagonal(q) > lo) & (torch.diagonal(q) < hi)).all())
    True
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    return _quintic_iteration(g, [coefficients] * steps, norm_safety=1.0, eps=eps, dtype=dtype)


def polar_express(
    g: Tensor,
    *,
    coefficients: Sequence[tuple[float, float, float]] = POLAR_EXPRESS_COEFFICIENTS,
    norm_safety: float = POLAR_EXPRESS_NORM_SAFETY,
    dtype: torch.dtype | None = None,
    eps: float = _EPS,
) -> Tensor:
    """Polar Express orthogonalization of ``g`` (shape ``(m, n)``): one quintic per step.

    Output ``U p(Σ/max(norm_safety·‖G‖_F, eps)) Vᵀ`` where ``p = p_T ∘ … ∘ p_1`` uses the per-step
    ``coefficients``. With the published five-step table, normalised singular values in
    ``[1e-3, 1]`` land in :data:`POLAR_EXPRESS_BAND` (≈ 1 ± 0.141, the price of five steps from
    ``ℓ = 1e-3``); the derived seven- and eight-step tables reach ``1 ± 6.1e-8`` and round-off.

    References: Amsel, Persson, Musco, Gower, arXiv:2505.16932.

    >>> d = torch.diag(torch.tensor([4.0, 2.0, 1.0], dtype=torch.float64))
    >>> q = polar_express(d, coefficients=polar_express_coefficients(steps=8))
    >>> bool(torch.allclose(q, torch.eye(3, dtype=torch.float64), atol=1e-12))
    True
    """
    return _quintic_iteration(g, coefficients, norm_safety=norm_safety, eps=eps, dtype=dtype)


def polar_svd(g: Tensor) -> Tensor:
    """Exact polar factor ``U Vᵀ`` of ``g`` (shape ``(m, n)``) via the thin SVD; the reference.

    Singular directions with zero singular value are kept (``U Vᵀ`` of the thin SVD), so the
    output of a rank-deficient input has all singular values equal to 1.

    >>> q = polar_svd(torch.tensor([[3.0, 0.0], [0.0, -2.0]], dtype=torch.float64))
    >>> q.tolist()
    [[1.0, 0.0], [0.0, -1.0]]
    """
    _check_matrix(g)
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    return u @ vh


ORTHOGONALIZERS: dict[str, Callable[[Tensor], Tensor]] = {
    "newton-schulz": newton_schulz,
    "polar-express": polar_express,
    "svd": polar_svd,
}
"""Name → orthogonalizer ``(m, n) -> (m, n)``, as used by :class:`neuromanifold.zoo.optim.Muon`."""


def scalar_composition(
    x: np.ndarray | float, coefficients: Sequence[tuple[float, float, float]]
) -> np.ndarray:
    """The scalar map ``p_T ∘ … ∘ p_1`` with ``p_t(x) = a_t x + b_t x³ + c_t x⁵`` (float64).

    >>> float(scalar_composition(1.0, [(15 / 8, -10 / 8, 3 / 8)]))
    1.0
    """
    y = np.asarray(x, dtype=np.float64)
    for a, b, c in coefficients:
        y = a * y + b * y**3 + c * y**5
    return y


def _minimax_quintic(lower: float, upper: float) -> tuple[float, float, float]:
    """Odd quintic ``a x + b x³ + c x⁵`` minimising ``max |1 − p(x)|`` on ``[lower, upper]``.

    Remez exchange: solve the 4×4 equioscillation system ``p(x_i) + (−1)^i E = 1`` at nodes
    ``lower < q < r < upper``, move ``q, r`` to the critical points of ``p`` (roots of
    ``5c y² + 3b y + a`` in ``y = x²``), repeat until ``E`` stops changing.
    """
    if lower / upper >= 1.0 - 5e-6:  # interval of zero width: the order-3 Taylor quintic
        return 15 / 8 / upper, -10 / 8 / upper**3, 3 / 8 / upper**5
    q, r = (3 * lower + upper) / 4, (lower + 3 * upper) / 4
    err, previous = math.inf, None
    for _ in range(200):
        if previous is not None and abs(previous - err) <= 1e-15:
            break
        previous = err
        nodes = np.array([lower, q, r, upper])
        signs = np.array([1.0, -1.0, 1.0, -1.0])
        lhs = np.column_stack([nodes, nodes**3, nodes**5, signs])
        a, b, c, err = np.linalg.solve(lhs, np.ones(4))
        disc = math.sqrt(9 * b * b - 20 * a * c)
        q, r = np.sqrt((-3 * b + np.array([-disc, disc])) / (10 * c))
    return float(a), float(b), float(c)


def polar_express_coefficients(
    *, lower: float = 1e-3, steps: int = 5, safety: float = 0.02, cushion: float = 0.02
) -> tuple[tuple[float, float, float], ...]:
    """Derive Polar Express coefficients by the greedy minimax construction.

    Start from singular values in ``[ℓ, u] = [lower, 1]``. Each step takes the minimax quintic on
    ``[max(ℓ, cushion·u), u]``; when cushioned it is rescaled so that ``p(ℓ)`` and ``p(u)`` are
    symmetric about 1; every step but the last is then evaluated at ``x / (1 + safety)``
    (``a /= s, b /= s³, c /= s⁵``); the interval updates to ``[p(ℓ), 2 − p(ℓ)]``.

    >>> pub = polar_express_coefficients()
    >>> bool(np.allclose(pub, POLAR_EXPRESS_COEFFICIENTS, rtol=1e-10, atol=0))
    True
    """
    if not 0 < lower <= 1:
        raise ValueError(f"lower must lie in (0, 1], got {lower!r}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    lo, hi = lower, 1.0
    s = 1.0 + safety
    out: list[tuple[float, float, float]] = []
    for step in range(steps):
        a, b, c = _minimax_quintic(max(lo, cushion * hi), hi)
        if cushion * hi > lo:
            p_lo = a * lo + b * lo**3 + c * lo**5
            p_hi = a * hi + b * hi**3 + c * hi**5
            k = 2.0 / (p_lo + p_hi)
            a, b, c = a * k, b * k, c * k
        if step < steps - 1:
            a, b, c = a / s, b / s**3, c / s**5
        out.append((a, b, c))
        lo = a * lo + b * lo**3 + c * lo**5
        hi = 2.0 - lo
    return tuple(out)
