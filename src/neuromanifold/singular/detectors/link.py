"""The duality link rule: does a producer's dead output direction land in a consumer's A-kernel?

A dead unit ``g`` of block ``p`` (a G-side kernel vector) is lifted into the input coordinates
``ā`` of a consumer ``c`` (`input_lift`: Linear ``(g, 0)``, or ``g ⊗ 𝟙/√P`` when ``c`` reads the
producer's feature map of ``P`` positions flattened; convolution ``g ⊗ w`` with the uniform
spatial pattern ``w``; bias coordinate 0, shifted for a consumer with a bias by
`neuromanifold.singular.detectors.bias_link`) and linked when its out-of-kernel energy
``e = ‖P_{live A_c} v‖²`` is at most `link_energy_max` (the rule and its calibration are in the
docstring of `neuromanifold.singular.detectors.linear`). `BlockSpectrum` holds the canonical
eigenpairs of a block's factors with their near-kernel index lists; the energies and kernel
projections are computed through the smaller of the kernel basis and its complement
(`live_energy_batch`, `match_batch`), with one-vector oracles (`live_energy`, `match`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from neuromanifold.singular.factor_spectrum import sign_fix, tie_broken_pivots

__all__ = [
    "DEGENERATE_ENERGY_TOL",
    "EXACT_DEAD_ENERGY",
    "MATCH_MIN",
    "NULL_FRACTION",
    "BlockSpectrum",
    "columns",
    "input_lift",
    "input_lift_batch",
    "link_energy_max",
    "live_energy",
    "live_energy_batch",
    "match",
    "match_batch",
    "null_energy_max",
    "principal_links",
    "principal_links_reference",
    "rotated_energy_max",
    "rotates",
    "tap_span",
]

MATCH_MIN = 0.99
"""Smallest kernel projection ``‖P_{ker A_c} lift(g)‖`` of a duality link (link rule)."""
NULL_FRACTION = 0.04
"""A link's out-of-kernel energy must be at most this fraction of a random vector's ``r/d``
(with ``(1 − MATCH_MIN²)/NULL_FRACTION ≈ 0.5``: the old rule holds unchanged while ``k ≤ d/2``)."""
EXACT_DEAD_ENERGY = 1e-10
"""Out-of-kernel energy at rounding level: an exactly dead unit, linked whatever ``r/d``."""
DEGENERATE_ENERGY_TOL = 1e-8
"""Principal energies (`principal_links`) within this of a cluster's lowest energy are one
degenerate cluster, whose directions are replaced by a canonical basis of the cluster's span
(`_canonical_span`), each with its own energy. The
energies of unit lifts lie in ``[0, 1]``, so this is relative to their unit scale. Inside a gap
``δ`` a principal direction is determined only to an angle of about ``ε/δ`` by the matrix's
rounding ``ε`` (Davis–Kahan): at ``δ ≤ 1e-8 ≈ √ε_float64`` that is no better than ``√ε``, and
the inputs themselves (canonical factor spectra) agree across CPU kernels to about 1e-12, which
moves such a direction by up to 1e-4 (user trial K #1: exactly dead units give one cluster of
energies 0, rotated at will by the SVD's rounding). A gap above the tolerance keeps the
directions determined to about ``ε/1e-8 ≈ 1e-8`` or better."""


@dataclass(frozen=True)
class BlockSpectrum:
    """Ascending eigenpairs of ``A`` and ``G`` with their near-kernel index lists.

    The eigenpairs are canonical (`neuromanifold.singular.factor_spectrum.FactorSpectrum`): null
    eigenvalues are exactly 0 and come first, with a deterministic basis of the null space.
    ``methods`` records how each factor was decomposed (``"dense"`` or ``"lowrank"``).
    """

    alpha: Tensor
    a_vecs: Tensor
    gamma: Tensor
    g_vecs: Tensor
    ker_a: list[int]
    ker_g: list[int]
    methods: tuple[str, str] = ("dense", "dense")

    @property
    def a_top(self) -> Tensor:
        """Top eigenvector of ``A``."""
        return self.a_vecs[:, -1]

    @property
    def g_top(self) -> Tensor:
        """Top eigenvector of ``G``."""
        return self.g_vecs[:, -1]

    def ker_a_basis(self) -> Tensor:
        """Columns spanning the A-side near-kernel, shape ``(d_in(+1), k)`` (computed once)."""
        basis = self.__dict__.get("_ker_a_basis")
        if basis is None:
            basis = columns(self.a_vecs, self.ker_a)
            object.__setattr__(self, "_ker_a_basis", basis)
        return basis

    def live_a_basis(self) -> Tensor:
        """The other eigenvectors of ``A`` (its complement), shape ``(d_in(+1), d − k)``."""
        basis = self.__dict__.get("_live_a_basis")
        if basis is None:
            kept = set(self.ker_a)
            basis = columns(self.a_vecs, [i for i in range(self.a_vecs.shape[1]) if i not in kept])
            object.__setattr__(self, "_live_a_basis", basis)
        return basis


def columns(vecs: Tensor, idx: list[int]) -> Tensor:
    if idx and idx == list(range(idx[0], idx[0] + len(idx))):
        return vecs[:, idx[0] : idx[0] + len(idx)]
    return vecs[:, idx]


def input_lift(consumer: nn.Module, g: Tensor, block: int = 1) -> Tensor | None:
    """Lift a channel vector ``g`` of the producer into the consumer's ``ā`` coordinates.

    ``block``: positions per channel when the producer's feature map reaches a Linear consumer
    flattened (channel ``c`` owns columns ``c·block … (c+1)·block − 1``): the lift is then
    ``g ⊗ 𝟙_block/√block``, the uniform pattern over a channel's positions, as a convolution
    consumer's over its kernel taps. ``None`` when the widths do not fit."""
    if isinstance(consumer, nn.Linear):
        if consumer.in_features != g.numel() * block:
            return None
        core = g
        if block > 1:
            core = torch.kron(g, torch.ones(block, dtype=g.dtype, device=g.device) / block**0.5)
    else:
        if consumer.in_channels != g.numel():
            return None
        taps = consumer.weight[0, 0].numel()
        core = torch.kron(g, torch.ones(taps, dtype=g.dtype, device=g.device) / taps**0.5)
    if consumer.bias is not None:
        core = torch.cat([core, core.new_zeros(1)])
    return core / core.norm()


def input_lift_batch(consumer: nn.Module, gs: Tensor, block: int = 1) -> Tensor | None:
    """`input_lift` of every column of ``gs`` at once, shape ``(d_in(+1), k)``."""
    if isinstance(consumer, nn.Linear):
        if consumer.in_features != gs.shape[0] * block:
            return None
        core = gs.repeat_interleave(block, dim=0) / block**0.5 if block > 1 else gs
    else:
        if consumer.in_channels != gs.shape[0]:
            return None
        taps = consumer.weight[0, 0].numel()
        core = gs.repeat_interleave(taps, dim=0) / taps**0.5
    if consumer.bias is not None:
        core = torch.cat([core, core.new_zeros(1, core.shape[1])])
    return core / core.norm(dim=0, keepdim=True)


def link_energy_max(spec: BlockSpectrum) -> float:
    """Largest out-of-kernel energy ``e`` of a duality link into the block of ``spec``.

    ``max(EXACT_DEAD_ENERGY, min(1 − MATCH_MIN², NULL_FRACTION · r/d))`` with ``d`` the size of
    ``A`` and ``r = d − k`` the size of its complement (``k`` = near-kernel dimension); a random
    unit vector has ``E[e] = r/d`` (the link rule in `neuromanifold.singular.detectors.linear`).

    >>> ev = torch.cat([torch.zeros(3), torch.ones(97)])  # small kernel: the old rule
    >>> spec = BlockSpectrum(ev, torch.eye(100), ev, torch.eye(100), [0, 1, 2], [0, 1, 2])
    >>> round(link_energy_max(spec), 12) == round(1 - MATCH_MIN**2, 12)
    True
    >>> ev = torch.cat([torch.zeros(95), torch.ones(5)])  # kernel 95 of 100: 0.04 · 5/100
    >>> spec = BlockSpectrum(ev, torch.eye(100), ev, torch.eye(100), list(range(95)), [])
    >>> round(link_energy_max(spec), 12)
    0.002
    """
    return null_energy_max(spec.a_vecs.shape[0], len(spec.ker_a))


def null_energy_max(d: int, k: int) -> float:
    """The link rule's bound for a kernel of dimension ``k`` in ``d`` coordinates:
    ``max(EXACT_DEAD_ENERGY, min(1 − MATCH_MIN², NULL_FRACTION · (d − k)/d))``.

    >>> null_energy_max(100, 95)
    0.002
    """
    return max(EXACT_DEAD_ENERGY, min(1.0 - MATCH_MIN**2, NULL_FRACTION * (d - k) / d))


def rotates(spec: BlockSpectrum, m: int) -> bool:
    """Whether a producer's G-kernel of dimension ``m`` is matched as a subspace
    (`principal_links`) against the consumer of ``spec``: ``2 ≤ m ≤ r``, ``r = d − k`` the rank of
    the consumer's live A part. At ``m > r`` the two kernels meet for dimensional reasons alone
    (``m + k > d``: a generic ``(m − r)``-dimensional intersection of exactly zero energy), so
    no combination is evidence of a dead path and each kernel vector is tested alone; at
    ``m = r`` the random baseline of `rotated_energy_max` is 0 and only an exactly dead path
    (``EXACT_DEAD_ENERGY``) links."""
    r = spec.a_vecs.shape[0] - len(spec.ker_a)
    return 2 <= m <= r


def rotated_energy_max(spec: BlockSpectrum, m: int) -> float:
    """The link bound for the best directions of an ``m``-dimensional G-kernel (`principal_links`):
    ``max(EXACT_DEAD_ENERGY, min(1 − MATCH_MIN², NULL_FRACTION · (√r − √m)²/d))``.

    The smallest out-of-kernel energy over a random ``m``-dimensional subspace is about
    ``(√r − √m)²/d`` (the smallest squared singular value of the ``r × m`` block of a random
    rotation), not the ``r/d`` of one random vector (`link_energy_max`), so the null expectation
    shrinks with ``m``; the same ``NULL_FRACTION`` of it is asked.

    >>> ev = torch.cat([torch.zeros(1), torch.ones(3)])  # d = 4, k = 1, r = 3
    >>> spec = BlockSpectrum(ev, torch.eye(4), ev, torch.eye(4), [0], [0])
    >>> round(rotated_energy_max(spec, 2), 6)  # 0.04 · (√3 − √2)²/4
    0.00101
    """
    d = spec.a_vecs.shape[0]
    r = d - len(spec.ker_a)
    null = (r**0.5 - m**0.5) ** 2 / d
    return max(EXACT_DEAD_ENERGY, min(1.0 - MATCH_MIN**2, NULL_FRACTION * null))


def _sign_fix(c: Tensor, basis: Tensor) -> Tensor:
    """Columns of ``c`` signed so that each ``basis @ c`` column is oriented by `sign_fix`
    (``Σ v_i³ > 0``): a deterministic orientation of each principal direction that does not
    depend on the order of the units."""
    rot = basis @ c
    signs = (sign_fix(rot) * rot).sum(0).sign()  # +1 where sign_fix kept the column, −1 else
    return c * torch.where(signs == 0, torch.ones_like(signs), signs)


def _canonical_span(w: Tensor) -> Tensor:
    """Canonical orthonormal basis of ``span(w)`` (``w``: ``d × s``, orthonormal columns) that
    depends only on the projector ``w wᵀ``, not on the basis ``w``.

    As `neuromanifold.singular.factor_spectrum._null_basis`: pivot coordinates ``P`` (``s`` of
    them) are chosen by column-pivoted QR of ``wᵀ`` (its Gram matrix is the projector, so the
    pivots are too; near-ties go to the lower coordinate, `tie_broken_pivots`); ``E = w (w_P)⁻¹``
    is the echelon basis of the span with ``E_P = I``; it is orthonormalised symmetrically
    (Löwdin: the polar factor ``E (EᵀE)^{-1/2}``, unique and independent of column order),
    columns ordered by pivot coordinate. A span of coordinate axes
    (exactly dead units) is returned as those axes. Signs are left to `_sign_fix`."""
    s = w.shape[1]
    pivots = tie_broken_pivots(w.T)[:s].sort().values
    echelon = torch.linalg.solve(w[pivots].T, w.T).T  # w (w_P)⁻¹, rows P = I
    u, _, vh = torch.linalg.svd(echelon, full_matrices=False)
    return u @ vh


def _clusters(energy: Tensor) -> list[tuple[int, int]]:
    """``[lo, hi)`` index ranges of the ascending ``energy`` whose values lie within
    `DEGENERATE_ENERGY_TOL` of the range's first value (a new range starts past that width, so
    a run of small gaps does not chain into one wide cluster)."""
    values = energy.tolist()
    ranges, lo = [], 0
    for i, e in enumerate(values[1:], start=1):
        if e - values[lo] > DEGENERATE_ENERGY_TOL:
            ranges.append((lo, i))
            lo = i
    return [*ranges, (lo, len(values))] if values else []


def _canonical_clusters(
    c: Tensor, energy: Tensor, basis: Tensor, energy_of: Callable[[Tensor], Tensor]
) -> tuple[Tensor, Tensor]:
    """``(c, energy)`` (energies ascending) with each cluster of energies within
    `DEGENERATE_ENERGY_TOL` (`_clusters`) given the canonical basis of its span in the G-kernel
    coordinates ``basis @ c`` (`_canonical_span`, mapped back by ``basisᵀ``), and each of those
    directions its own energy ``energy_of(c_cluster)`` (not the cluster's mean: the link test
    compares a direction's energy with a bound that can be as small as `EXACT_DEAD_ENERGY`). The
    rotation an eigensolver picks inside a degenerate cluster then does not reach the result; the
    order by energy between clusters is kept."""
    c, energy = c.clone(), energy.clone()
    for lo, hi in _clusters(energy):
        if hi - lo < 2:
            continue
        c[:, lo:hi] = basis.T @ _canonical_span(basis @ c[:, lo:hi])
        energy[lo:hi] = energy_of(c[:, lo:hi])
    return c, energy


def principal_links(spec: BlockSpectrum, vecs: Tensor, basis: Tensor) -> tuple[Tensor, Tensor]:
    """The principal directions of the lifted G-kernel ``span(vecs)`` against the A-kernel.

    ``vecs`` (``d × m``, orthonormal columns: the lifts of the orthonormal G-kernel ``basis``,
    ``d_out × m``) is rotated by an ``m × m`` orthogonal ``C`` so that the out-of-kernel energies
    ``e_i = ‖P_{live A} vecs c_i‖²`` are the stationary values of the energy over the span,
    ascending (inside a degenerate cluster, to `DEGENERATE_ENERGY_TOL`); returns ``(C, e)``.
    ``basis @ C`` is then a G-kernel basis whose first vectors are the combinations closest to
    the A-kernel. Computed by an SVD of ``Lᵀ vecs`` (``L`` the
    live basis; energies = squared singular values) or of ``Kᵀ vecs`` (``K`` the kernel basis;
    energies = ``1 − σ²``), whichever basis is smaller, like `live_energy_batch`; oracle
    `principal_links_reference`. Energies within `DEGENERATE_ENERGY_TOL` of a cluster's lowest form
    a cluster whose directions are the canonical basis of its span, each with its own energy
    (`_canonical_clusters`): the result does not depend on the rotation the SVD picks inside a
    degenerate singular space (e.g. exactly dead units, all of energy 0).
    """
    k, d, m = len(spec.ker_a), spec.a_vecs.shape[0], vecs.shape[1]
    if k <= d - k:
        _, sv, vh = torch.linalg.svd(spec.ker_a_basis().T @ vecs, full_matrices=True)
        cos2 = torch.zeros(m, dtype=vecs.dtype, device=vecs.device)
        cos2[: sv.numel()] = sv.pow(2)
        energy, c = (1.0 - cos2).clamp_min(0.0), vh.T  # cos² descending: energy ascending
    else:
        _, sv, vh = torch.linalg.svd(spec.live_a_basis().T @ vecs, full_matrices=True)
        e = torch.zeros(m, dtype=vecs.dtype, device=vecs.device)
        e[: sv.numel()] = sv.pow(2)
        energy, c = e.flip(0), vh.T.flip(1)  # σ² descending: flipped to ascending
    c, energy = _canonical_clusters(
        c, energy, basis, lambda cols: live_energy_batch(spec, vecs @ cols)
    )
    return _sign_fix(c, basis), energy


def principal_links_reference(
    spec: BlockSpectrum, vecs: Tensor, basis: Tensor
) -> tuple[Tensor, Tensor]:
    """Oracle of `principal_links`: ``eigh`` of ``vecsᵀ (I − K Kᵀ) vecs`` with the dense
    projector onto the live part, degenerate clusters made canonical the same way."""
    ker = spec.ker_a_basis()
    live = torch.eye(vecs.shape[0], dtype=vecs.dtype, device=vecs.device) - ker @ ker.T
    gram = vecs.T @ live @ vecs
    energy, c = torch.linalg.eigh(gram)
    c, energy = _canonical_clusters(  # Rayleigh quotients cᵀ (vecsᵀ P_live vecs) c
        c, energy.clamp_min(0.0), basis, lambda cols: (cols * (gram @ cols)).sum(0).clamp_min(0.0)
    )
    return _sign_fix(c, basis), energy


def live_energy(spec: BlockSpectrum, vec: Tensor) -> float:
    """``‖P_{live A} vec‖²`` with the explicit complement basis (oracle of `live_energy_batch`)."""
    basis = spec.live_a_basis()
    if basis.shape[1] == 0:
        return 0.0
    return float((basis.T @ vec).pow(2).sum())


def live_energy_batch(spec: BlockSpectrum, vecs: Tensor) -> Tensor:
    """``‖P_{live A} v‖² = ‖v‖² − ‖P_{ker A} v‖²`` for every column ``v`` of ``vecs``.

    The smaller of the kernel basis and its complement is used (as in `match_batch`); through
    the complement the energy is computed directly, so a small energy keeps its relative
    precision instead of being the rounding residue of ``1 − ‖P_{ker} v‖²``.
    """
    k = len(spec.ker_a)
    d = spec.a_vecs.shape[0]
    if k == 0:
        return vecs.pow(2).sum(0)
    if k <= d - k:
        kept = (spec.ker_a_basis().T @ vecs).pow(2).sum(0)
        return (vecs.pow(2).sum(0) - kept).clamp_min(0.0)
    return (spec.live_a_basis().T @ vecs).pow(2).sum(0)


def match(spec: BlockSpectrum, vec: Tensor) -> float:
    """``‖P_{ker A} vec‖`` with the explicit kernel basis (oracle of `match_batch`)."""
    basis = spec.ker_a_basis()
    if basis.shape[1] == 0:
        return 0.0
    return float((basis.T @ vec).norm())


def match_batch(spec: BlockSpectrum, vecs: Tensor) -> Tensor:
    """``‖P_{ker A} v‖`` for every unit column ``v`` of ``vecs``.

    With the kernel basis ``K`` and its complement ``L`` (together orthonormal),
    ``‖Kᵀv‖² = ‖v‖² − ‖Lᵀv‖²``: the smaller of the two bases is used, so the cost is
    ``O(d · min(k, d − k))`` per vector (the kernel of a layer wider than the probe set is large,
    its complement small).
    """
    k = len(spec.ker_a)
    d = spec.a_vecs.shape[0]
    if k == 0:
        return vecs.new_zeros(vecs.shape[1])
    if k <= d - k:
        return (spec.ker_a_basis().T @ vecs).norm(dim=0)
    rest = (spec.live_a_basis().T @ vecs).pow(2).sum(0)
    return (vecs.pow(2).sum(0) - rest).clamp_min(0.0).sqrt()


def tap_span(consumer: nn.Module, g: Tensor, block: int = 1) -> Tensor:
    """Columns ``g ⊗ e_s`` (every kernel tap ``s``; bias coordinate 0) in the consumer's ``ā``.

    ``g`` of shape ``(C,)`` gives ``(C·taps(+1), taps)``; ``(C, k)`` gives the ``k`` units'
    columns side by side, unit-major (``kron(G, I_taps)``). A Linear consumer has one tap per
    input, or ``block`` per channel of a flattened feature map (`input_lift`).
    """
    taps = block if isinstance(consumer, nn.Linear) else consumer.weight[0, 0].numel()
    eye = torch.eye(taps, dtype=g.dtype, device=g.device)
    cols = torch.kron(g.reshape(g.shape[0], -1), eye)  # (C·taps, k·taps)
    if consumer.bias is not None:
        cols = torch.cat([cols, cols.new_zeros(1, cols.shape[1])])
    return cols
