"""Linear and convolution detector: K-FAC near-kernels, joint modes and the A–G duality join.

Per block (spec §6.1–6.3) with factors ``F ≈ A ⊗ G`` (`neuromanifold.singular.factors`):

1. Eigendecompose ``A`` and ``G`` (float64, symmetrised). **Near-kernel rule** (`near_kernel`):
   eigenvalues with ``α_i/α_max < TAU_A`` (``γ_j/γ_max < TAU_G``), kept only if a spectral gap of at
   least ``GAP`` (one decade) separates the largest kept ratio from the smallest rejected one; if
   not, the kept set is shrunk from the top until a gap appears (possibly to nothing).
2. **Duality join.** A dead unit of block ``p`` shows as a G-side kernel vector ``g`` of ``p`` and,
   in its single consumer ``c`` (through elementwise modules only), as an A-side kernel of ``c``
   containing the lift of ``g`` (Linear consumer: ``(g, 0)``; conv consumer: ``g ⊗ w`` with the
   uniform spatial pattern ``w``, bias coordinate 0). **Link rule** (`link_energy_max`): with
   ``v = lift(g)`` (unit), the consumer's A-kernel of dimension ``k`` in ``d`` coordinates and
   its complement (live part) of rank ``r = d − k``, the out-of-kernel energy
   ``e = ‖P_{live A_c} v‖² = 1 − ‖P_{ker A_c} v‖²`` must satisfy

   ``e ≤ max(EXACT_DEAD_ENERGY, min(1 − MATCH_MIN², NULL_FRACTION · r/d))``.

   A uniformly random unit vector has ``E[e] = r/d``; when the probe set is smaller than the
   layer (``r ≤ N + 1 ≪ d``) the kernel is most of the space and a vector the probe set barely
   excites already shows ``‖P_{ker} v‖ ≈ √(1 − r/d)`` (0.984 at ``d = 2048``, ``N = 64``), so a
   fixed ``MATCH_MIN`` alone links it. The rule therefore asks for the out-of-kernel energy to be
   at most ``NULL_FRACTION`` of its null expectation as well. When the kernel is small relative
   to ``d`` (``r/d ≥ (1 − MATCH_MIN²)/NULL_FRACTION ≈ 1/2``, i.e. ``k ≤ d/2``) the second bound
   is the looser one and the rule is the old ``‖P_{ker A_c} v‖ ≥ MATCH_MIN``; an exactly dead
   unit (``e`` at rounding level, ``≤ EXACT_DEAD_ENERGY``) links whatever the kernel's size.
   The units a small probe set barely excites are not random vectors: on the zoo MLPs at
   ``N = 64`` their G-kernel lifts sit at ``e ≈ 0.3–0.6 · r/d`` (``d = 1025``–``2049``), on a
   width-96 layer read on 8 samples at ``0.07 · r/d``; an exactly dead unit at ``10⁻³⁰``.
   ``NULL_FRACTION`` sits below the former and keeps the small-kernel case unchanged.
   Links are followed both ways into a chain; the chain's first block takes the top input
   eigenvector of its ``A`` and the last the top eigenvector of its ``G``; each block gets the
   rank-one increment ``ΔW̄ = out inᵀ`` with equal norm ``1/√(#blocks)``. Provenance ``"duality"``;
   a chain is proposed once, from its first block; each linked G-kernel vector of the first block
   starts its own chain (parallel dead units or paths give distinct directions). Kernel
   directions explained by a chain (the linked G vectors; on the consumer side every tap
   ``g ⊗ e_s`` of a linked unit) are not proposed again one-sided. At most ``MAX_CHAINS`` chains
   start at one block. A factor that vanishes identically (``G`` under all-zero downstream
   weights, ``A`` above all-zero upstream weights) has every direction in its kernel.
   **Skip links** (`LinearDetector.skip_linked`): the same join into the blocks that receive
   ``p``'s output as one summand of a residual sum (``ModelGraph.skips``), so a dead path
   continues past residual blocks (spec §6.6: skips are free on the shortest weighted path).
   A chain that starts through a skip link is kept only if its last block has a live ``G``
   (otherwise moving it changes nothing); same provenance ``"duality"``, ``info["skip"]``.
3. **One-sided modes** (``"kfac-A"``: ``g_top a_kᵀ``; ``"kfac-G"``: ``g_k a_topᵀ``), at most
   ``MAX_ONE_SIDED`` per side (on the logits layer of a categorical model, G-kernel vectors with
   ``|cos(g, 𝟙)| ≥ LOGIT_SHIFT_COS`` are left to the CE-shift detector: spec §6.1 failure mode
   (iii)), and the **joint mode** ``g_min a_minᵀ`` (``"kfac-joint"``) when
   ``α_min γ_min/(α_max γ_max) < TAU_JOINT`` with a decade gap to the next product.

Vectors live in the column-major vec convention of the factors: ``in`` is indexed like ``ā``
(im2col order ``(C_in, k_h, k_w)`` for convolutions, trailing bias coordinate), ``out`` like the
output channels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.factor_spectrum import factor_spectrum, factor_spectrum_reference
from neuromanifold.singular.factors import is_supported_block

__all__ = [
    "CLUSTER_TOL",
    "EXACT_DEAD_ENERGY",
    "GAP",
    "MATCH_MIN",
    "MAX_CHAINS",
    "MAX_ONE_SIDED",
    "NULL_FRACTION",
    "TAU_A",
    "TAU_G",
    "TAU_JOINT",
    "BlockSpectrum",
    "LinearDetector",
    "block_spectrum",
    "lift",
    "link_energy_max",
    "near_kernel",
    "near_kernel_reference",
    "null_energy_max",
    "one_sided_a",
    "one_sided_a_reference",
]

TAU_A = 1e-3
TAU_G = 1e-3
TAU_JOINT = 1e-4
GAP = 10.0
MATCH_MIN = 0.99
"""Smallest kernel projection ``‖P_{ker A_c} lift(g)‖`` of a duality link (link rule)."""
NULL_FRACTION = 0.04
"""A link's out-of-kernel energy must be at most this fraction of a random vector's ``r/d``
(with ``(1 − MATCH_MIN²)/NULL_FRACTION ≈ 0.5``: the old rule holds unchanged while ``k ≤ d/2``)."""
EXACT_DEAD_ENERGY = 1e-10
"""Out-of-kernel energy at rounding level: an exactly dead unit, linked whatever ``r/d``."""
MAX_ONE_SIDED = 2
MAX_CHAINS = 4
LOGIT_SHIFT_COS = 0.9999
CLUSTER_TOL = 1e-8
"""Singular values within this of the largest form one (degenerate) cluster in `one_sided_a`."""
PROBE_SEED = 0
REFERENCE = False
"""Route the detector through its brute-force oracles (dense ``eigh``, one ``_live_energy`` per
vector, QR + SVD one-sided modes); tests set it to compare a whole read with the fast paths."""


def near_kernel(evals: Tensor, tau: float, *, gap: float = GAP) -> list[int]:
    """Indices (ascending eigenvalues) of the near-kernel: ratio ``< tau`` with a ``gap`` margin.

    Same selection as `near_kernel_reference`, in ``O(n log n)``: with the ratios sorted stably
    (``s_0 ≤ s_1 ≤ …``), the kept set is always a prefix of the sort order, so the smallest
    rejected ratio is ``s_m`` for a prefix of length ``m``; the prefix shrinks from the count
    below ``tau`` until ``s_{m-1} = 0`` or ``s_m ≥ gap · s_{m-1}``. Non-finite input falls back
    to the reference (its order of NaNs is Python's).

    >>> near_kernel(torch.tensor([0.0, 1e-9, 0.5, 1.0]), 1e-3)
    [0, 1]
    >>> near_kernel(torch.tensor([1e-5, 5e-5, 1.0]), 1e-3)  # both below τ, a decade before 1.0
    [0, 1]
    >>> near_kernel(torch.tensor([1e-5, 5e-4, 1e-3, 1.0]), 1e-3)  # 5e-4 → 1e-3 is no gap
    [0]
    >>> near_kernel(torch.zeros(2), 1e-3)  # a vanishing factor (e.g. G above a dead layer)
    [0, 1]
    """
    ev = evals.detach().double().clamp_min(0.0).reshape(-1).cpu().numpy()
    if not np.isfinite(ev).all():
        return near_kernel_reference(evals, tau, gap=gap)
    top = float(ev.max())
    if top <= 0.0:  # a factor that vanishes identically: every direction is in its kernel
        return list(range(ev.size))
    ratios = ev / top
    order = np.argsort(ratios, kind="stable")
    s = ratios[order]
    m = int(np.searchsorted(s, tau, side="left"))  # count of ratios < tau
    if m == 0:
        return []
    largest = s[:m]
    nxt = np.append(s[1:m], s[m] if m < s.size else np.inf)
    ok = (largest == 0.0) | (nxt >= gap * largest)
    hits = np.flatnonzero(ok)
    if hits.size == 0:
        return []
    return order[: int(hits[-1]) + 1].tolist()


def near_kernel_reference(evals: Tensor, tau: float, *, gap: float = GAP) -> list[int]:
    """Brute-force oracle of `near_kernel`: shrink the kept list one index at a time.

    >>> near_kernel_reference(torch.tensor([1e-5, 5e-4, 1e-3, 1.0]), 1e-3)
    [0]
    """
    ev = evals.double().clamp_min(0.0)
    top = float(ev.max())
    if top <= 0.0:
        return list(range(ev.numel()))
    ratios = (ev / top).tolist()
    order = sorted(range(len(ratios)), key=lambda i: ratios[i])
    kept = [i for i in order if ratios[i] < tau]
    while kept:
        largest = ratios[kept[-1]]
        rest = [ratios[i] for i in order if i not in kept]
        nxt = min(rest) if rest else float("inf")
        if largest == 0.0 or nxt >= gap * largest:
            return kept
        kept = kept[:-1]
    return []


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
            basis = _columns(self.a_vecs, self.ker_a)
            object.__setattr__(self, "_ker_a_basis", basis)
        return basis

    def live_a_basis(self) -> Tensor:
        """The other eigenvectors of ``A`` (its complement), shape ``(d_in(+1), d − k)``."""
        basis = self.__dict__.get("_live_a_basis")
        if basis is None:
            kept = set(self.ker_a)
            basis = _columns(self.a_vecs, [i for i in range(self.a_vecs.shape[1]) if i not in kept])
            object.__setattr__(self, "_live_a_basis", basis)
        return basis


def _columns(vecs: Tensor, idx: list[int]) -> Tensor:
    if idx and idx == list(range(idx[0], idx[0] + len(idx))):
        return vecs[:, idx[0] : idx[0] + len(idx)]
    return vecs[:, idx]


def block_spectrum(ctx: DetectionContext, name: str) -> BlockSpectrum | None:
    """Cached eigendecomposition of the factors of block ``name`` (``None`` without factors).

    `factor_spectrum` with the factors' rank bounds (low-rank path when a layer is wider than the
    probe set; `factor_spectrum_reference` when `REFERENCE` is set).
    """
    cache = ctx.cache.setdefault("spectrum", {})
    if name in cache:
        return cache[name]
    bf = ctx.factors.blocks.get(name)
    if bf is None:
        cache[name] = None
        return None
    if REFERENCE:
        sa, sg = factor_spectrum_reference(bf.A), factor_spectrum_reference(bf.G)
    else:
        sa = factor_spectrum(bf.A, rank_bound=getattr(bf, "a_rank_bound", None))
        sg = factor_spectrum(bf.G, rank_bound=getattr(bf, "g_rank_bound", None))
    spec = BlockSpectrum(
        alpha=sa.evals,
        a_vecs=sa.vecs,
        gamma=sg.evals,
        g_vecs=sg.vecs,
        ker_a=near_kernel(sa.evals, TAU_A),
        ker_g=near_kernel(sg.evals, TAU_G),
        methods=(sa.method, sg.method),
    )
    cache[name] = spec
    return spec


def lift(name: str, module: nn.Module, out_vec: Tensor, in_vec: Tensor) -> dict[str, Tensor]:
    """The rank-one increment ``ΔW̄ = out in̄ᵀ`` as parameter tensors of module ``name``."""
    prefix = f"{name}." if name else ""
    wbar = torch.outer(out_vec.double(), in_vec.double())
    d_w = module.weight[0].numel()
    u = {f"{prefix}weight": wbar[:, :d_w].reshape(module.weight.shape)}
    if module.bias is not None:
        u[f"{prefix}bias"] = wbar[:, d_w]
    return u


def _input_lift(consumer: nn.Module, g: Tensor) -> Tensor | None:
    """Lift a channel vector ``g`` of the producer into the consumer's ``ā`` coordinates."""
    if isinstance(consumer, nn.Linear):
        if consumer.in_features != g.numel():
            return None
        core = g
    else:
        if consumer.in_channels != g.numel():
            return None
        taps = consumer.weight[0, 0].numel()
        core = torch.kron(g, torch.ones(taps, dtype=g.dtype, device=g.device) / taps**0.5)
    if consumer.bias is not None:
        core = torch.cat([core, core.new_zeros(1)])
    return core / core.norm()


def _input_lift_batch(consumer: nn.Module, gs: Tensor) -> Tensor | None:
    """`_input_lift` of every column of ``gs`` at once, shape ``(d_in(+1), k)``."""
    if isinstance(consumer, nn.Linear):
        if consumer.in_features != gs.shape[0]:
            return None
        core = gs
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
    unit vector has ``E[e] = r/d`` (module docstring, link rule).

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


def _live_energy(spec: BlockSpectrum, vec: Tensor) -> float:
    """``‖P_{live A} vec‖²`` with the explicit complement basis (oracle of `_live_energy_batch`)."""
    basis = spec.live_a_basis()
    if basis.shape[1] == 0:
        return 0.0
    return float((basis.T @ vec).pow(2).sum())


def _live_energy_batch(spec: BlockSpectrum, vecs: Tensor) -> Tensor:
    """``‖P_{live A} v‖² = ‖v‖² − ‖P_{ker A} v‖²`` for every column ``v`` of ``vecs``.

    The smaller of the kernel basis and its complement is used (as in `_match_batch`); through
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


def _match(spec: BlockSpectrum, vec: Tensor) -> float:
    """``‖P_{ker A} vec‖`` with the explicit kernel basis (oracle of `_match_batch`)."""
    basis = spec.ker_a_basis()
    if basis.shape[1] == 0:
        return 0.0
    return float((basis.T @ vec).norm())


def _match_batch(spec: BlockSpectrum, vecs: Tensor) -> Tensor:
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


def _tap_span(consumer: nn.Module, g: Tensor) -> Tensor:
    """Columns ``g ⊗ e_s`` (every kernel tap ``s``; bias coordinate 0) in the consumer's ``ā``.

    ``g`` of shape ``(C,)`` gives ``(C·taps(+1), taps)``; ``(C, k)`` gives the ``k`` units'
    columns side by side, unit-major (``kron(G, I_taps)``).
    """
    taps = 1 if isinstance(consumer, nn.Linear) else consumer.weight[0, 0].numel()
    eye = torch.eye(taps, dtype=g.dtype, device=g.device)
    cols = torch.kron(g.reshape(g.shape[0], -1), eye)  # (C·taps, k·taps)
    if consumer.bias is not None:
        cols = torch.cat([cols, cols.new_zeros(1, cols.shape[1])])
    return cols


class LinearDetector:
    """K-FAC / KFC detector for ``nn.Linear``, ``nn.Conv1d``, ``nn.Conv2d`` (module docstring)."""

    name = "linear"

    def applies_to(self, module: nn.Module) -> bool:
        """Supported blocks of `neuromanifold.singular.factors.is_supported_block`."""
        return is_supported_block(module)

    def _modules(self, ctx: DetectionContext) -> dict[str, nn.Module]:
        mods = ctx.cache.get("modules")
        if mods is None:
            mods = dict(ctx.model.named_modules())
            ctx.cache["modules"] = mods
        return mods

    def _downstream(self, ctx: DetectionContext, name: str, g: Tensor) -> tuple[str, Tensor] | None:
        c = ctx.graph.single_consumer(name)
        if c is None or c not in ctx.factors.blocks:
            return None
        mod = self._modules(ctx)[c]
        vec = _input_lift(mod, g)
        spec = block_spectrum(ctx, c)
        if vec is None or spec is None or _live_energy(spec, vec) > link_energy_max(spec):
            return None
        return c, vec

    def linked(self, ctx: DetectionContext, name: str) -> list[tuple[Tensor, str, Tensor]]:
        """G-kernel vectors of ``name`` whose lift lies in its consumer's A-kernel.

        Returns ``[(g, consumer, lifted in-vector), …]`` in ascending-eigenvalue order (cached;
        the indices of the linked columns of ``g_vecs`` are cached under ``"linked_idx"``). All
        G-kernel vectors are lifted and matched in one batch against `link_energy_max`
        (`_live_energy_batch`); with `REFERENCE` one at a time (`_live_energy`).
        """
        cache = ctx.cache.setdefault("linked", {})
        if name in cache:
            return cache[name]
        spec = block_spectrum(ctx, name)
        out, idx = [], []
        if spec is not None and REFERENCE:
            for j in spec.ker_g:
                g = spec.g_vecs[:, j]
                link = self._downstream(ctx, name, g)
                if link is not None:
                    out.append((g, link[0], link[1]))
                    idx.append(j)
        elif spec is not None and spec.ker_g:
            c = ctx.graph.single_consumer(name)
            cspec = block_spectrum(ctx, c) if c is not None and c in ctx.factors.blocks else None
            if cspec is not None:
                gs = _columns(spec.g_vecs, spec.ker_g)
                vecs = _input_lift_batch(self._modules(ctx)[c], gs)
                if vecs is not None:
                    e_max = link_energy_max(cspec)
                    hits = (_live_energy_batch(cspec, vecs) <= e_max).tolist()
                    for col, j in enumerate(spec.ker_g):
                        if hits[col]:
                            out.append((gs[:, col], c, vecs[:, col]))
                            idx.append(j)
        cache[name] = out
        ctx.cache.setdefault("linked_idx", {})[name] = set(idx)
        return out

    def skip_linked(self, ctx: DetectionContext, name: str) -> list[tuple[Tensor, str, Tensor]]:
        """G-kernel vectors of ``name`` whose lift lies in the A-kernel of a skip consumer.

        Like `linked`, but into the blocks that receive ``name``'s output as one summand of a
        residual sum (``ctx.graph.skips``), so a dead path can continue past residual blocks;
        same link rule (`link_energy_max`). ``[(g, consumer, lifted in-vector), …]``, cached.
        """
        cache = ctx.cache.setdefault("skip_linked", {})
        if name in cache:
            return cache[name]
        spec = block_spectrum(ctx, name)
        out: list[tuple[Tensor, str, Tensor]] = []
        skips = getattr(ctx.graph, "skips", {}).get(name, ())
        if spec is not None and spec.ker_g and skips:
            gs = _columns(spec.g_vecs, spec.ker_g)
            for c in skips:
                cspec = block_spectrum(ctx, c) if c in ctx.factors.blocks else None
                vecs = _input_lift_batch(self._modules(ctx)[c], gs) if cspec else None
                if vecs is None:
                    continue
                hits = (_live_energy_batch(cspec, vecs) <= link_energy_max(cspec)).tolist()
                out.extend((gs[:, j], c, vecs[:, j]) for j, hit in enumerate(hits) if hit)
        cache[name] = out
        return out

    def _upstream(self, ctx: DetectionContext, name: str) -> list[Tensor]:
        """Linked vectors that land in ``name``: from its single producer, and through skips."""
        up: list[Tensor] = []
        p = ctx.graph.single_producer(name)
        if p is not None and p in ctx.factors.blocks:
            up = [g for g, c, _ in self.linked(ctx, p) if c == name]
        for q, consumers in getattr(ctx.graph, "skips", {}).items():
            if name in consumers and q in ctx.factors.blocks:
                up.extend(g for g, c, _ in self.skip_linked(ctx, q) if c == name)
        return up

    def chain_from(
        self, ctx: DetectionContext, name: str, index: int = 0
    ) -> list[tuple[str, Tensor, Tensor]]:
        """Duality chain ``index`` starting at ``name`` as ``[(block, out_vec, in_vec), …]``.

        Chain ``i`` leaves each block through its ``i``-th linked G-kernel vector when there is one
        (so parallel dead paths give distinct chains), else through the first; ``[]`` when
        ``name`` has no linked vector of that index.
        """
        spec = block_spectrum(ctx, name)
        links_here = self.linked(ctx, name)
        if spec is None or index >= len(links_here):
            return []
        return self._walk(ctx, name, spec.a_top, links_here[index], index)

    def _walk(
        self,
        ctx: DetectionContext,
        name: str,
        in_vec: Tensor,
        step: tuple[Tensor, str, Tensor] | None,
        index: int,
    ) -> list[tuple[str, Tensor, Tensor]]:
        """Follow ``step`` out of ``name``, then each block's linked vector ``index`` (or its
        first) until a block has none; ``[]`` if the walk returns to a block."""
        chain = []
        cur, seen = name, {name}
        while step is not None:
            g, nxt, nxt_in = step
            chain.append((cur, g, in_vec))
            cur, in_vec = nxt, nxt_in
            if cur in seen:
                return []
            seen.add(cur)
            nxt_links = self.linked(ctx, cur)
            step = nxt_links[min(index, len(nxt_links) - 1)] if nxt_links else None
        chain.append((cur, block_spectrum(ctx, cur).g_top, in_vec))
        return chain

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """Duality chains starting here, one-sided modes and the joint mode (module docstring)."""
        spec = block_spectrum(ctx, name)
        if spec is None:
            return []
        out: list[Candidate] = []
        mods = self._modules(ctx)
        upstream = self._upstream(ctx, name)
        links = self.linked(ctx, name)
        if not upstream:
            for i in range(min(len(links), MAX_CHAINS)):
                chain = self.chain_from(ctx, name, i)
                if not chain:
                    continue
                u: dict[str, Tensor] = {}
                for blk, o, a in chain:
                    u.update(lift(blk, mods[blk], o, a))
                u = normalise(_equalise(u, [(blk, mods[blk]) for blk, _, _ in chain]))
                g_ratio = _ratio(float(spec.gamma[spec.ker_g[0]]), float(spec.gamma[-1]))
                out.append(
                    Candidate(
                        layers=tuple(b for b, _, _ in chain),
                        detector="duality",
                        u=u,
                        ratio=g_ratio,
                        info={"chain_length": len(chain), "chain_index": i},
                    )
                )
            out.extend(self._skip_chains(ctx, name, spec))
        a_max, g_max = float(spec.alpha[-1]), float(spec.gamma[-1])
        one_sided = one_sided_a_reference if REFERENCE else one_sided_a
        for vec, ratio in one_sided(spec, module, upstream):
            u = normalise(lift(name, module, spec.g_top, vec))
            out.append(Candidate(layers=(name,), detector="kfac-A", u=u, ratio=ratio))
        linked_g = torch.stack([g for g, _, _ in links], 1) if links and REFERENCE else None
        linked_idx = ctx.cache["linked_idx"][name]
        n_g = 0
        for j in spec.ker_g:
            if n_g >= MAX_ONE_SIDED:
                break
            g = spec.g_vecs[:, j]
            if _is_logit_shift(ctx, name, g):
                continue
            if linked_g is not None and float((linked_g.T @ g).norm()) >= MATCH_MIN:
                continue
            if linked_g is None and j in linked_idx:  # orthonormal columns: norm 1 or 0
                continue
            n_g += 1
            u = normalise(lift(name, module, g, spec.a_top))
            r = _ratio(float(spec.gamma[j]), g_max)
            out.append(Candidate(layers=(name,), detector="kfac-G", u=u, ratio=r))
        if not spec.ker_a and not spec.ker_g and a_max > 0 and g_max > 0:
            prods = torch.outer(spec.gamma.clamp_min(0), spec.alpha.clamp_min(0)).reshape(-1)
            if near_kernel(prods, TAU_JOINT)[:1] == [0]:
                u = normalise(lift(name, module, spec.g_vecs[:, 0], spec.a_vecs[:, 0]))
                r = float(prods[0]) / (a_max * g_max)
                out.append(Candidate(layers=(name,), detector="kfac-joint", u=u, ratio=r))
        return ctx.canonical(out)

    def _skip_chains(self, ctx: DetectionContext, name: str, spec: BlockSpectrum) -> list:
        """Duality chains that leave ``name`` through a skip link (`skip_linked`).

        A chain is kept only when its last block's ``G`` is not all near-kernel: a path whose
        end has no output gradient changes nothing when moved (``F ≡ 0``), and a residual
        stream offers many such partial paths (into every later block of a dead stack).
        """
        mods = self._modules(ctx)
        out: list[Candidate] = []
        for step in self.skip_linked(ctx, name):
            if len(out) >= MAX_CHAINS:
                break
            chain = self._walk(ctx, name, spec.a_top, step, 0)
            end = block_spectrum(ctx, chain[-1][0]) if chain else None
            if end is None or len(end.ker_g) >= end.gamma.numel():
                continue
            u: dict[str, Tensor] = {}
            for blk, o, a in chain:
                u.update(lift(blk, mods[blk], o, a))
            u = normalise(_equalise(u, [(blk, mods[blk]) for blk, _, _ in chain]))
            out.append(
                Candidate(
                    layers=tuple(b for b, _, _ in chain),
                    detector="duality",
                    u=u,
                    ratio=_ratio(float(spec.gamma[spec.ker_g[0]]), float(spec.gamma[-1])),
                    info={"chain_length": len(chain), "chain_index": len(out), "skip": True},
                )
            )
        return out


def _ker_ratios(spec: BlockSpectrum) -> list[float]:
    a_max = float(spec.alpha[-1])
    vals = spec.alpha[spec.ker_a].clamp_min(0.0)
    return (vals / a_max).tolist() if a_max > 0 else [0.0] * len(spec.ker_a)


def _probes(d: int, like: Tensor) -> Tensor:
    gen = torch.Generator(device=like.device).manual_seed(PROBE_SEED)
    return torch.randn(d, MAX_ONE_SIDED, generator=gen, dtype=like.dtype, device=like.device)


def _cluster_vectors(project, probes: Tensor, dim: int) -> list[Tensor]:
    """Canonical orthonormal vectors of a degenerate cluster: projected probes, Gram–Schmidt."""
    out: list[Tensor] = []
    for i in range(min(dim, probes.shape[1])):
        v = project(probes[:, i])
        for w in out:
            v = v - (w @ v) * w
        out.append(v / v.norm())
    return [_sign_fixed(v) for v in out]


def _sign_fixed(v: Tensor) -> Tensor:
    from neuromanifold.singular.factor_spectrum import _sign_fix

    return _sign_fix(v.unsqueeze(1))[:, 0]


def one_sided_a(
    spec: BlockSpectrum, module: nn.Module, upstream: list[Tensor]
) -> list[tuple[Tensor, float]]:
    """A-kernel directions outside the span of the upstream dead units' taps (``kfac-A``).

    Without upstream units: the first ``MAX_ONE_SIDED`` kernel eigenvectors with their ratios.
    With them: the leading left singular vectors (singular value ``> 0.5``) of
    ``rest = (I − SSᵀ) K``, ``K`` the kernel basis and ``S`` the (orthonormal) tap span, each with
    the largest kernel ratio. Computed without ``K``: ``rest restᵀ = P − WWᵀ`` with
    ``P = I − SSᵀ``, ``W = P L`` (``L`` the complement of ``K``), so the singular values are
    ``√(1 − σ_i(W)²)`` on ``W``'s left singular vectors and 1 on ``(S + L)^⊥``; cost
    ``O(d · |S| · |L|)``. The top cluster (singular values within `CLUSTER_TOL` of 1) is
    degenerate whenever the kernel is wide; its vectors are the seeded probes projected onto it
    and orthonormalised (`_cluster_vectors`), exactly as in `one_sided_a_reference`.
    """
    if not spec.ker_a:
        return []
    ratios = _ker_ratios(spec)
    if not upstream:
        return [(spec.a_vecs[:, i], ratios[n]) for n, i in enumerate(spec.ker_a[:MAX_ONE_SIDED])]
    top = max(ratios)
    span = _tap_span(module, torch.stack(upstream, 1))  # all units at once: kron(G, I_taps)
    live = spec.live_a_basis()
    d = span.shape[0]
    w = live - span @ (span.T @ live)
    uw, sw, _ = torch.linalg.svd(w, full_matrices=False)
    nz = sw > sw.max() * 1e-12 if sw.numel() else sw > 0
    n_one = d - span.shape[1] - int(nz.sum())  # dimension of (S + L)^⊥
    sv = (1.0 - sw.pow(2)).clamp_min(0.0).sqrt()  # descending σ → ascending sv
    in_cluster = nz & (sv >= 1.0 - CLUSTER_TOL)
    u_nz, u_c = uw[:, nz], uw[:, in_cluster]

    def project(x: Tensor) -> Tensor:
        x = x - span @ (span.T @ x) - u_nz @ (u_nz.T @ x)
        return x + u_c @ (u_c.T @ x)

    dim = n_one + int(in_cluster.sum())
    vecs = _cluster_vectors(project, _probes(d, live), dim)
    order = [i for i in reversed(range(sw.numel())) if nz[i] and not in_cluster[i]]
    for i in order:  # ascending σ(W) = descending singular value of rest
        if len(vecs) >= MAX_ONE_SIDED or float(sv[i]) <= 0.5:
            break
        vecs.append(_sign_fixed(uw[:, i]))
    return [(v, top) for v in vecs[:MAX_ONE_SIDED]]


def one_sided_a_reference(
    spec: BlockSpectrum, module: nn.Module, upstream: list[Tensor]
) -> list[tuple[Tensor, float]]:
    """Brute-force oracle of `one_sided_a`: QR of the tap span and the SVD of ``rest``.

    The top cluster (singular values within `CLUSTER_TOL` of 1: directions of the kernel
    orthogonal to every upstream tap, degenerate whenever the kernel is wide) gets the same
    canonical vectors as the fast path; below it the singular vectors are distinct and returned
    sign-fixed.
    """
    if not spec.ker_a:
        return []
    ratios = _ker_ratios(spec)
    basis = spec.ker_a_basis()
    if not upstream:
        return [(basis[:, i], ratios[i]) for i in range(min(MAX_ONE_SIDED, basis.shape[1]))]
    span = torch.cat([_tap_span(module, g) for g in upstream], 1)
    q, _ = torch.linalg.qr(span)
    rest = basis - q @ (q.T @ basis)
    left, sv, _ = torch.linalg.svd(rest, full_matrices=False)
    keep = sv > 0.5  # mostly outside the explained span
    n_keep = int(keep.sum())
    in_cluster = keep & (sv >= 1.0 - CLUSTER_TOL)
    n_c = int(in_cluster.sum())
    l_c = left[:, :n_c]
    vecs = _cluster_vectors(lambda x: l_c @ (l_c.T @ x), _probes(rest.shape[0], rest), n_c)
    vecs += [_sign_fixed(left[:, i]) for i in range(n_c, n_keep)]
    return [(v, max(ratios)) for v in vecs[:MAX_ONE_SIDED]]


def _ratio(value: float, top: float) -> float:
    """``max(value, 0)/top``; 0 for a vanishing factor (``top ≤ 0``)."""
    return max(value, 0.0) / top if top > 0 else 0.0


def _is_logit_shift(ctx: DetectionContext, name: str, g: Tensor) -> bool:
    """``g ∥ 𝟙`` on the logits layer of a categorical model (the CE-shift detector's direction)."""
    if ctx.graph.output != name or getattr(ctx.family, "name", "") != "categorical":
        return False
    ones = torch.ones_like(g) / g.numel() ** 0.5
    return abs(float(g @ ones)) >= LOGIT_SHIFT_COS


def _equalise(u: dict[str, Tensor], blocks: list[tuple[str, nn.Module]]) -> dict[str, Tensor]:
    """Scale each block's part of ``u`` to unit norm (so every block carries equal weight)."""
    out = dict(u)
    for blk, _ in blocks:
        prefix = f"{blk}." if blk else ""
        keys = [k for k in u if k.startswith(prefix) and k[len(prefix) :] in ("weight", "bias")]
        norm = torch.sqrt(sum((u[k] ** 2).sum() for k in keys))
        for k in keys:
            out[k] = u[k] / norm
    return out
