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

The factors tell the two apart by comparing the unit's pre-activation with its output over the
probes. With ``r̄ = W̄ᵀ g`` (``W̄`` the producer's weight flattened like ``ā`` with its bias
column), ``A = E ā āᵀ`` its input factor and ``m̄ = A e_b = E ā`` (the bias coordinate's column):

    E z² = r̄ᵀ A r̄,      Var z = r̄ᵀ A r̄ − (r̄ᵀ m̄)²,

and from the consumer's factor ``A_c`` the output's ``E a² = vᵀ A_c v`` along the unit's lift
``v`` and ``Var a = wᵀ A_c w`` along the lift with its best constant taken out (`output_moments`).
A unit is silent when its pre-activation is not negligible (above `SILENT_REL` of the
producer's mean over its units) and its output does not follow it (at most `GAIN_MAX` of it),
in the second moment (a ReLU off at every probe: ``E a² = 0 < E z²``) or in the variance (a
saturated unit: ``Var a = 0 < Var z``). A dead unit has ``z ≡ 0`` (nothing to follow), or
``z ≡ b`` with output ``σ(b)`` (``Var z = 0``; ``E a² = σ(b)² `` follows ``E z² = b²`` unless
``σ`` is flat at ``b``); a unit near 0 of a smooth activation follows at ``σ'(0)²``, whatever its
scale (a near-dead unit is not silent). Without a producer bias ``E ā`` is not in ``A``, and
without a consumer bias there is no best constant: the variance test is then not made.

A silent unit is not linked: it is left to the one-sided modes (``kfac-G`` on the producer,
``kfac-A`` on the consumer), which read it flat, or unresolved where it wakes up inside the grid;
their reasons say that no gradient reaches the unit's output and that the consumer's input unit
never fires. Not told apart: a unit with a zero row and a bias on a flat part of a bounded
activation (a ReLU6 with bias 7: ``E a² = 36`` follows ``E z² = 49``), whose chain still reads
flat.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.link import BlockSpectrum

__all__ = [
    "GAIN_MAX",
    "SILENT_REL",
    "PreactivationMoments",
    "output_moments",
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


GAIN_MAX = 1e-6
"""A silent unit's output moment is at most this fraction of its pre-activation's: the output
moves by less than 1e-3 of the pre-activation's RMS (a flat part of the activation). A never
firing ReLU gives 0 up to rounding; a unit near zero of a smooth activation σ(z) ≈ σ'(0)·z
gives about σ'(0)² (0.25 for GELU and SiLU, 1 for tanh), whatever its scale."""


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


def output_moments(
    a_c: Tensor, lifts: Tensor, shift: Tensor | None
) -> tuple[Tensor, Tensor | None]:
    """``(E a_g², Var a_g)`` of each linked unit's output in its consumer, shape ``(m,)`` each:
    the quadratic forms ``vᵀ A_c v`` of the lifts ``v`` (``lifts``, ``(d_c, m)``, the unit's
    output in the consumer's ``ā``) and ``wᵀ A_c w`` of the lifts with the best constant taken
    out, ``w = v − (qᵀv) e_b`` (``shift`` = ``q``, `bias_link`; ``None`` without a consumer bias:
    no variance)."""
    a_c = (a_c + a_c.T) / 2
    second = torch.einsum("im,ij,jm->m", lifts, a_c, lifts)
    if shift is None:
        return second, None
    w = lifts.clone()
    w[-1] = w[-1] - shift @ lifts
    return second, torch.einsum("im,ij,jm->m", w, a_c, w)


def silent_columns(
    moments: PreactivationMoments, out_second: Tensor, out_var: Tensor | None
) -> list[bool]:
    """Per column: silent (module docstring) — a pre-activation above `SILENT_REL` of the
    producer's mean that the output does not follow (at most `GAIN_MAX` of it), in the second
    moment (an output 0: ``E z²`` against ``E a²``) or in the variance (a constant output:
    ``Var z`` against ``Var a``; made only when both variances are known)."""
    out = []
    for j in range(moments.second.shape[0]):
        pre, post = float(moments.second[j]), float(out_second[j])
        silent = _unfollowed(pre, post, moments.second_mean)
        if not silent and moments.var is not None and out_var is not None:
            pre, post = float(moments.var[j]), float(out_var[j])
            silent = _unfollowed(pre, post, moments.var_mean or 0.0)
        out.append(silent)
    return out


def _unfollowed(pre: float, post: float, mean: float) -> bool:
    return mean > 0 and pre > SILENT_REL * mean and post <= GAIN_MAX * pre


def _moments(
    rows: Tensor, gs: Tensor, per_g: Tensor, per_unit: Tensor, mean_a: Tensor | None
) -> PreactivationMoments:
    if mean_a is None:
        return PreactivationMoments(per_g, None, float(per_unit.mean()), None)
    mz = rows @ mean_a  # E z_j for every unit
    var_g = per_g - (gs.T @ mz).pow(2)
    var_unit = per_unit - mz.pow(2)
    return PreactivationMoments(per_g, var_g, float(per_unit.mean()), float(var_unit.mean()))
