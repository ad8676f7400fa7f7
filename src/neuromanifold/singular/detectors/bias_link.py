"""Bias compensation of a duality link: a dead unit whose output is a nonzero constant.

A unit with zero incoming weights and bias ``b`` outputs the constant ``c = σ(b)`` on every
sample. Its consumer's input second moment ``A = E[ā āᵀ]`` (``ā = (a, 1)``, bias coordinate last)
then has the exact kernel vector ``(e_j, −c)``, not the plain lift ``(e_j, 0)``, whose
out-of-kernel energy is ``c²/(1 + c²)``: without compensation the unit links only while
``c`` is tiny, and then the chain's consumer block ``g (e_j, 0)ᵀ`` moves the consumer's output
by ``t·c·g`` at first order, so a dead unit reads live (s17 user trial AD #1). Moving the
consumer's column together with its bias, ``Δb = −c·g``, cancels that term and leaves the order
2 of the dead unit (spec §6.1, §8: one hidden node).

For a lift ``v`` the best bias shift is ``β = qᵀv`` with ``q = P e_b / (e_bᵀ P e_b)`` (``P`` the
projector onto the live part of ``A``, ``e_b`` the bias coordinate): it minimises
``‖P (v − β e_b)‖²``, and the minimum is ``‖P' v‖²`` with ``P' = P − p̂ p̂ᵀ``, ``p̂ = P e_b/‖P e_b‖``.
So a compensated link is an ordinary link (`neuromanifold.singular.detectors.link`) against the
kernel enlarged by one direction, ``K ⊕ p̂`` (`compensated`), and the chain's consumer in-vector is
``v − (qᵀv) e_b``, normalised (`compensate`). The energy stays relative to ``‖v‖ = 1`` (the lift's
data part), so a large constant does not shrink it, and the link bounds count the kernel as
``k + 1`` of ``d``. A unit whose output is exactly 0 has ``qᵀv = 0``: nothing changes for it.
`compensated_reference` is the oracle (dense projector, ``eigh``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from neuromanifold.singular.detectors.link import BlockSpectrum

__all__ = [
    "BIAS_LIVE_MIN",
    "SHIFT_ROUNDOFF",
    "Compensation",
    "compensate",
    "compensated",
    "compensated_reference",
]

BIAS_LIVE_MIN = 1e-12
"""Smallest ``e_bᵀ P e_b`` (the bias coordinate's live share) for which a link is compensated;
below it the bias coordinate lies in ``A``'s near-kernel and offers no shift to solve for."""

SHIFT_ROUNDOFF = 1e-12
"""Bias shifts ``|qᵀv|`` at most this (relative to ``‖v‖``) are rounding and set to 0
(`compensate`): an exactly dead unit gives ``qᵀv`` of order 1e-17 (measured on the planted
MLPs), a unit of constant output ``c`` gives ``c``, whose uncompensated first-order term
``c²‖g‖²`` in ``F`` is below the float64 floor of ``F`` from ``c ≈ 1e-13`` on."""


@dataclass(frozen=True)
class Compensation:
    """A consumer's spectrum for link tests with the kernel ``K ⊕ p̂`` and the shift ``q``.

    ``spec.a_vecs`` is ``[K | p̂ | L']`` (``L'`` an orthonormal basis of the live part without
    ``p̂``), ``spec.ker_a`` its first ``k + 1`` columns and ``spec.alpha`` the Rayleigh quotients
    ``wᵀ A w`` of those columns (not eigenvalues: use it for link tests only). ``shift`` is
    ``q`` of shape ``(d,)``.
    """

    spec: BlockSpectrum
    shift: Tensor


def compensate(vecs: Tensor, shift: Tensor) -> Tensor:
    """``v − (qᵀv) e_b`` for every column ``v`` of ``vecs`` (``d × m``; ``e_b`` the last
    coordinate): the lift with the bias shift that brings it closest to ``A``'s kernel.

    A shift ``|qᵀv| ≤ SHIFT_ROUNDOFF·‖v‖`` is set to 0: it is the rounding of a unit whose
    output is exactly 0 (its kernel vector is ``(e_j, 0)``), and a bias entry of that size would
    add a spurious first-order term to the chain's tangent (and a touched tensor to its grid)."""
    beta = shift @ vecs
    beta = torch.where(beta.abs() <= SHIFT_ROUNDOFF * vecs.norm(dim=0), 0.0, beta)
    out = vecs.clone()
    out[-1] = out[-1] - beta
    return out


def _with_kernel(spec: BlockSpectrum, vecs: Tensor, alpha: Tensor) -> BlockSpectrum:
    return BlockSpectrum(
        alpha=alpha,
        a_vecs=vecs,
        gamma=spec.gamma,
        g_vecs=spec.g_vecs,
        ker_a=list(range(len(spec.ker_a) + 1)),
        ker_g=spec.ker_g,
        methods=spec.methods,
    )


def compensated(spec: BlockSpectrum) -> Compensation | None:
    """The link spectrum with the kernel ``K ⊕ p̂`` and the shift ``q`` (module docstring);
    ``None`` when ``e_bᵀ P e_b ≤ BIAS_LIVE_MIN``.

    With ``L`` the live basis and ``c = Lᵀ e_b`` (its bias row): ``e_bᵀ P e_b = ‖c‖²``,
    ``p̂ = L ĉ``, ``q = L c/‖c‖²``, and ``L' = L H[:, 1:]`` with the Householder reflector ``H``
    that maps ``ĉ`` to ``±e_1`` (so ``H[:, 1:]`` spans ``ĉ^⊥``): ``O(d r)`` for ``d`` coordinates
    and a live rank ``r``.

    >>> ev = torch.tensor([0.0, 1.0, 2.0])  # kernel e_0, live e_1, e_2; bias coordinate e_2
    >>> spec = BlockSpectrum(ev, torch.eye(3), ev, torch.eye(3), [0], [0])
    >>> comp = compensated(spec)
    >>> comp.spec.ker_a, comp.shift.tolist()
    ([0, 1], [0.0, 0.0, 1.0])
    """
    live = spec.live_a_basis()
    c = live[-1]
    pi = float(c @ c)
    if pi <= BIAS_LIVE_MIN:
        return None
    c_hat = c / math.sqrt(pi)
    sign = 1.0 if float(c_hat[0]) >= 0 else -1.0
    v = c_hat.clone()
    v[0] += sign
    tau = 2.0 / float(v @ v)  # H = I − τ v vᵀ maps ĉ to −sign·e_1
    rest = (live - tau * torch.outer(live @ v, v))[:, 1:]
    kernel = set(spec.ker_a)  # built once: a set per element made this quadratic (audit AG #5)
    lam = spec.alpha[[i for i in range(spec.alpha.numel()) if i not in kernel]]
    # diag(Hᵀ Λ H) = Λ_jj (1 − 2τ v_j²) + τ² v_j² (vᵀ Λ v): quotients of the columns of L'
    quad = float((lam * v * v).sum())
    rest_alpha = (lam * (1 - 2 * tau * v * v) + tau**2 * v * v * quad)[1:]
    vecs = torch.cat([spec.ker_a_basis(), (live @ c_hat)[:, None], rest], 1)
    alpha = torch.cat([spec.alpha[spec.ker_a], (lam * c_hat * c_hat).sum()[None], rest_alpha])
    return Compensation(_with_kernel(spec, vecs, alpha), live @ c / pi)


def compensated_reference(spec: BlockSpectrum) -> Compensation | None:
    """Oracle of `compensated`: the dense projector ``P = I − K Kᵀ``, ``p = P e_b``,
    ``P' = P − p pᵀ/(e_bᵀ p)`` and its ``eigh`` (kernel: its ``k + 1`` zero eigenvalues); the
    quotients from ``A = V diag(α) Vᵀ``."""
    ker = spec.ker_a_basis()
    d = spec.a_vecs.shape[0]
    proj = torch.eye(d, dtype=ker.dtype, device=ker.device) - ker @ ker.T
    p = proj[:, -1]
    pi = float(p[-1])
    if pi <= BIAS_LIVE_MIN:
        return None
    _, vecs = torch.linalg.eigh(proj - torch.outer(p, p) / pi)  # eigenvalues: k + 1 zeros, ones
    a = spec.a_vecs @ torch.diag(spec.alpha) @ spec.a_vecs.T
    alpha = (vecs * (a @ vecs)).sum(0)
    return Compensation(_with_kernel(spec, vecs, alpha), p / pi)
