"""Silent units: a unit that never fires on the probes although its pre-activation moves.

A duality link (`neuromanifold.singular.detectors.link`) pairs a G-kernel vector ``g`` of a
producer (no output gradient through the unit) with its consumer's A-kernel (the unit's output
is 0, or a constant, on every probe). Two kinds of unit pass that test:

* a **dead unit**: its pre-activation ``z = gᵀ W̄ ā`` is constant on the probes (zero incoming
  weights, or weights the probe data do not excite). Moving its incoming row moves ``z``, the
  activation follows at ``σ'(z)`` (or at the kink, by homogeneity, for ReLU) and the outgoing
  column carries it on: the node death of order 2 (spec §8), and a chain through several such
  units has order ``#blocks`` (a crossing of their loci);
* a **silent unit**: ``z`` varies over the probes but lies where the activation is flat (a ReLU
  unit whose pre-activation is negative on every probe, a GELU one far below 0). A small move of
  its incoming row leaves it off, so nothing passes through it: every direction through it is
  exactly flat for small ``t``. A chain through it reads flat and hides the node death of a dead
  unit it is joined to (s34 trial MLPREC: in trained ReLU digit MLPs, whose never-firing units
  chained planted dead units, 4 of 56 of those were found).

The two are told apart by the variance of the pre-activation over the probes,

    Var z = r̄ᵀ A r̄ − (r̄ᵀ m̄)²,   r̄ = W̄ᵀ g,   m̄ = E ā = A e_b,

(``W̄`` the producer's weight flattened like ``ā`` with its bias column, ``A = E ā āᵀ`` its input
factor, ``e_b`` the bias coordinate, whose column of ``A`` is the mean of ``ā``; without a bias the
second moment ``r̄ᵀ A r̄`` is used), relative to the mean of the same variance over the producer's
units, ``trace(W̄ A W̄ᵀ)/d_out − ‖W̄ m̄‖²/d_out``. A linked unit of zero output (no bias shift)
whose relative variance exceeds `SILENT_VAR_REL` is silent and is not linked: it is left to the
one-sided modes (``kfac-G`` on the producer, ``kfac-A`` on the consumer), which read it flat and
say that the unit never fires. A unit of nonzero constant output (a compensated link) is never
silent: its activation is not at a flat part of ``σ``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.link import BlockSpectrum

__all__ = [
    "SILENT_VAR_REL",
    "preactivation_variance",
    "preactivation_variance_reference",
    "weight_rows",
]

SILENT_VAR_REL = 1e-6
"""Pre-activation variance of a linked unit, relative to the producer's mean over units, above
which the unit is silent (module docstring). Planted and pruned units have 0; units scaled to
1e-4 of a trained layer (the near-dead cases of the s34 recall trial) have about 1e-8; a trained
ReLU unit that never fires on the probes has the order of the layer's own units (0.01–1)."""


def weight_rows(module: nn.Module, has_bias: bool) -> Tensor:
    """``W̄``: the block's weight as ``(d_out, d_in)`` rows in ``ā`` order (a convolution's
    im2col order ``(C_in, k_h, k_w)``), with the bias as a last column when ``has_bias``."""
    w = module.weight.detach().to(torch.float64)
    rows = w.reshape(w.shape[0], -1)
    if not has_bias:
        return rows
    bias = module.bias.detach().to(torch.float64)
    return torch.cat([rows, bias[:, None]], 1)


def preactivation_variance(
    rows: Tensor, spec: BlockSpectrum, gs: Tensor, has_bias: bool
) -> tuple[Tensor, float]:
    """``(Var z_g for each column g of gs, mean Var z over the producer's units)`` from the
    eigenpairs of ``A`` (``A = Σ α_i a_i a_iᵀ``; module docstring), shapes ``(m,)`` and a float.

    ``rows``: `weight_rows` ``(d_out, d)``; ``spec``: the producer's `BlockSpectrum`;
    ``gs``: ``(d_out, m)``. Cost ``O(d_out · d · r)`` with ``r`` the computed eigenpairs (the
    range only on the low-rank path)."""
    live = spec.alpha > 0  # null eigenpairs add nothing (and are most of a wide layer's basis)
    alpha, vecs = spec.alpha[live], spec.a_vecs[:, live]
    proj = rows @ vecs  # (d_out, r): each unit's row in A's eigenbasis
    second = (proj.pow(2) * alpha).sum(1)  # r̄_jᵀ A r̄_j for every unit j
    mean_a = vecs @ (alpha * vecs[-1]) if has_bias else None  # A e_b = E ā
    return _variances(rows, gs, proj, alpha, second, mean_a)


def preactivation_variance_reference(
    rows: Tensor, a: Tensor, gs: Tensor, has_bias: bool
) -> tuple[Tensor, float]:
    """Oracle of `preactivation_variance` from the dense factor ``A``: ``Var z_g =
    gᵀ W̄ A W̄ᵀ g − (gᵀ W̄ m̄)²`` and the mean of the diagonal of ``W̄ A W̄ᵀ − (W̄ m̄)(W̄ m̄)ᵀ``."""
    a = (a + a.T) / 2
    cov = rows @ a @ rows.T
    if has_bias:
        mz = rows @ a[:, -1]
        cov = cov - torch.outer(mz, mz)
    per_g = torch.einsum("im,ij,jm->m", gs, cov, gs)
    return per_g, float(torch.diagonal(cov).mean())


def _variances(
    rows: Tensor,
    gs: Tensor,
    proj: Tensor,
    alpha: Tensor,
    second: Tensor,
    mean_a: Tensor | None,
) -> tuple[Tensor, float]:
    g_proj = gs.T @ proj  # (m, r): each g's row r̄ = W̄ᵀ g in A's eigenbasis
    per_g = (g_proj.pow(2) * alpha).sum(1)
    per_unit = second
    if mean_a is not None:
        mz = rows @ mean_a  # E z_j for every unit
        per_g = per_g - (gs.T @ mz).pow(2)
        per_unit = per_unit - mz.pow(2)
    return per_g, float(per_unit.mean())
