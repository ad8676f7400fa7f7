"""Silent units: a unit held on a flat part of its activation on every probe.

A duality link (`neuromanifold.singular.detectors.link`) pairs a G-kernel vector ``g`` of a
producer (no output gradient through the unit) with its consumer's A-kernel (the unit's output
is 0, or a constant ``c``, on every probe). Two kinds of unit pass that test:

* a **dead unit**: its pre-activation ``z = gᵀ W̄ ā`` is 0 on the probes (zero incoming weights
  and bias, or weights the probe data do not excite), or a constant ``b`` at which the
  activation is not flat (a zero row with a bias: output ``c = σ(b)``). Moving its incoming row
  moves ``z``, the activation follows at ``σ'(z)`` (at the kink, by homogeneity, for ReLU) and
  the outgoing column carries it on: the node death of order 2 (spec §8); a chain through
  several such units has order ``#blocks`` (a crossing of their loci);
* a **silent unit**: ``z`` lies where the activation is flat on every probe — a ReLU unit whose
  pre-activation is negative on every probe (output 0), a ReLU6 above 6 or a saturated tanh
  (output constant). A small move of its incoming row leaves it there, so nothing passes through
  it: every direction through it is exactly flat for small ``t``. A chain through it reads flat
  and hides the node death of a dead unit it is joined to (s34 trial MLPREC: in trained ReLU
  digit MLPs, whose never-firing units chained planted dead units, 4 of 56 of those were found).

The factors tell the two apart by the pre-activation's moments over the probes, with
``r̄ = W̄ᵀ g`` (``W̄`` the producer's weight flattened like ``ā`` with its bias column), ``A = E ā āᵀ``
its input factor and ``m̄ = A e_b = E ā`` (the bias coordinate's column of ``A``):

    E z² = r̄ᵀ A r̄,      Var z = r̄ᵀ A r̄ − (r̄ᵀ m̄)².

* Output 0 (a link without bias shift): a dead unit has ``z ≡ 0``, so ``E z² = 0``; a unit with
  ``E z²`` above `SILENT_REL` of the producer's mean ``E z_j²`` over its units is silent (its
  activation is 0 at a nonzero ``z``: flat there).
* Output a nonzero constant (a compensated link): a dead unit has ``z ≡ b``, so ``Var z = 0``; a
  unit with ``Var z`` above `SILENT_REL` of the producer's mean ``Var z_j`` is silent (``z``
  moves, the output does not). Without a producer bias ``E ā`` is not in ``A`` and the test is
  not made.

A silent unit is not linked: it is left to the one-sided modes (``kfac-G`` on the producer,
``kfac-A`` on the consumer, whose reason says that the input unit does not fire), which read it
flat, or unresolved where it wakes up inside the grid. Not told apart: a unit with a zero row and
a bias on a flat part of ``σ`` (a ReLU6 with bias 7), whose ``z`` is constant like a dead
unit's, and whose chain still reads flat.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.link import BlockSpectrum

__all__ = [
    "SILENT_REL",
    "PreactivationMoments",
    "preactivation_moments",
    "preactivation_moments_reference",
    "silent_columns",
    "weight_rows",
]

SILENT_REL = 1e-6
"""Pre-activation moment of a linked unit, relative to the producer's mean over its units, above
which the unit is silent (module docstring). Planted and pruned units have 0; units scaled to
1e-4 of a trained layer (the near-dead cases of the s34 recall trial) have about 1e-8; a trained
ReLU unit that never fires on the probes has the order of the layer's own units (0.01–1)."""


@dataclass(frozen=True)
class PreactivationMoments:
    """``E z_g²`` and ``Var z_g`` (``None`` without a producer bias) for each column ``g``, shape
    ``(m,)``, and the same moments' means over the producer's units (floats)."""

    second: Tensor
    var: Tensor | None
    second_mean: float
    var_mean: float | None


def weight_rows(module: nn.Module, has_bias: bool) -> Tensor:
    """``W̄``: the block's weight as ``(d_out, d_in)`` rows in ``ā`` order (a convolution's
    im2col order ``(C_in, k_h, k_w)``), with the bias as a last column when ``has_bias``."""
    w = module.weight.detach().to(torch.float64)
    rows = w.reshape(w.shape[0], -1)
    if not has_bias:
        return rows
    bias = module.bias.detach().to(torch.float64)
    return torch.cat([rows, bias[:, None]], 1)


def preactivation_moments(
    rows: Tensor, spec: BlockSpectrum, gs: Tensor, has_bias: bool
) -> PreactivationMoments:
    """`PreactivationMoments` of the columns of ``gs`` ``(d_out, m)`` from the eigenpairs of
    ``A`` (``A = Σ α_i a_i a_iᵀ``; module docstring). ``rows``: `weight_rows` ``(d_out, d)``;
    ``spec``: the producer's `BlockSpectrum`. Cost ``O(d_out · d · r)`` with ``r`` the positive
    eigenvalues (the range only, on a layer wider than the probe set)."""
    live = spec.alpha > 0  # null eigenpairs add nothing (and are most of a wide layer's basis)
    alpha, vecs = spec.alpha[live], spec.a_vecs[:, live]
    proj = rows @ vecs  # (d_out, r): each unit's row in A's eigenbasis
    per_unit = (proj.pow(2) * alpha).sum(1)  # E z_j² = r̄_jᵀ A r̄_j for every unit j
    per_g = ((gs.T @ proj).pow(2) * alpha).sum(1)
    mean_a = vecs @ (alpha * vecs[-1]) if has_bias else None  # A e_b = E ā
    return _moments(rows, gs, per_g, per_unit, mean_a)


def preactivation_moments_reference(
    rows: Tensor, a: Tensor, gs: Tensor, has_bias: bool
) -> PreactivationMoments:
    """Oracle of `preactivation_moments` from the dense factor ``A``: ``E z_g² = gᵀ W̄ A W̄ᵀ g``
    and the diagonal of ``W̄ A W̄ᵀ``, less ``(gᵀ W̄ m̄)²`` and ``(W̄ m̄)²`` for the variances."""
    a = (a + a.T) / 2
    cov = rows @ a @ rows.T
    per_g = torch.einsum("im,ij,jm->m", gs, cov, gs)
    mean_a = a[:, -1] if has_bias else None
    return _moments(rows, gs, per_g, torch.diagonal(cov), mean_a)


def silent_columns(moments: PreactivationMoments, constant_output: list[bool]) -> list[bool]:
    """Per column: silent (module docstring) — output 0 and ``E z² > SILENT_REL`` of the mean,
    or a nonzero constant output (``constant_output``) and ``Var z > SILENT_REL`` of the mean."""
    out = []
    for j, const in enumerate(constant_output):
        if const:
            if moments.var is None or moments.var_mean is None:
                out.append(False)  # no E ā without a bias: not tested
                continue
            value, mean = float(moments.var[j]), moments.var_mean
        else:
            value, mean = float(moments.second[j]), moments.second_mean
        out.append(mean > 0 and value > SILENT_REL * mean)
    return out


def _moments(
    rows: Tensor, gs: Tensor, per_g: Tensor, per_unit: Tensor, mean_a: Tensor | None
) -> PreactivationMoments:
    if mean_a is None:
        return PreactivationMoments(per_g, None, float(per_unit.mean()), None)
    mz = rows @ mean_a  # E z_j for every unit
    var_g = per_g - (gs.T @ mz).pow(2)
    var_unit = per_unit - mz.pow(2)
    return PreactivationMoments(per_g, var_g, float(per_unit.mean()), float(var_unit.mean()))
