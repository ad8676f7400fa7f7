"""Linear and convolution detector: K-FAC near-kernels, joint modes and the A–G duality join.

Per block (spec §6.1–6.3) with factors ``F ≈ A ⊗ G`` (`neuromanifold.singular.factors`):

1. Eigendecompose ``A`` and ``G`` (float64, symmetrised). **Near-kernel rule** (`near_kernel`):
   eigenvalues with ``α_i/α_max < TAU_A`` (``γ_j/γ_max < TAU_G``), kept only if a spectral gap of at
   least ``GAP`` (one decade) separates the largest kept ratio from the smallest rejected one; if
   not, the kept set is shrunk from the top until a gap appears (possibly to nothing).
2. **Duality join.** A dead unit of block ``p`` shows as a G-side kernel vector ``g`` of ``p`` and,
   in its single consumer ``c`` (through elementwise modules only), as an A-side kernel of ``c``
   containing the lift of ``g`` (Linear consumer: ``(g, 0)``, or ``(g ⊗ 𝟙_P/√P, 0)`` when it
   reads the producer's feature map of ``P`` positions flattened; conv consumer: ``g ⊗ w`` with
   the uniform spatial pattern ``w``, bias coordinate 0; for a consumer with a bias, tested with
   the best shift of that bias, `bias_link`: a unit of constant output ``c`` has the kernel
   vector ``(g, −c)``, and its chain moves the consumer's bias by ``−c·g``). An attention's
   value projection has its output projection as consumer although the graph stops at the
   attention's product
   (`value_link`: each query head's input block is its KV head's block of ``g``).
   **Link rule** (`link_energy_max`): with ``v = lift(g)`` (unit), the consumer's A-kernel of
   dimension ``k`` in ``d`` coordinates and its complement (live part) of rank ``r = d − k``, the
   out-of-kernel energy ``e = ‖P_{live A_c} v‖² = 1 − ‖P_{ker A_c} v‖²`` must satisfy

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
   **Subspace match.** A G-kernel of dimension ``m ≥ 2`` (a layer followed by a narrower one)
   has no preferred basis, and a dead path through a rotated hidden basis is a mixture of its
   eigenvectors, none of which links alone. Where ``2 ≤ m ≤ r`` the kernel is rotated to the
   principal directions of its lift against the consumer's A-kernel (`link.principal_links`,
   energies ascending) and a direction links when its energy is at most
   `link.rotated_energy_max` (``NULL_FRACTION`` of ``(√r − √m)²/d``, the smallest energy a
   random ``m``-dimensional subspace reaches); the one-sided ``kfac-G`` modes then use the same
   rotated basis. At ``m > r`` the two kernels meet in ``m − r`` dimensions for dimensional
   reasons alone, so each eigenvector is tested alone as above (a dead path in a rotated basis
   of such a layer is not found: a probe set or input narrower than the layer).
   **Silent units** (`neuromanifold.singular.detectors.silent`): a linked unit held on a flat
   part of its activation on every probe is not linked: its pre-activation is not negligible
   and its output does not follow it (``E a² ≤ GAIN_MAX · E z²``: a ReLU unit that never fires;
   or the same in the variances: a saturated ReLU6 or tanh). No direction through it moves the
   model for small ``t``, so a chain through it would read flat and hide the node death of a
   dead unit joined to it; its directions are left to the one-sided modes.
   Links are followed both ways into a chain; the chain's first block takes the top input
   eigenvector of its ``A`` and the last the top eigenvector of its ``G``; each block gets the
   rank-one increment ``ΔW̄ = out inᵀ`` with equal norm ``1/√(#blocks)``. Provenance ``"duality"``;
   a chain is proposed once, from its first block; each linked G-kernel vector of the first block
   starts its own chain (parallel dead units or paths give distinct directions), and so does each
   linked vector of a later block past those the arriving chains walk (chain ``i`` leaves a block
   through its linked vector ``min(i, n − 1)``; `LinearDetector._walked_into`), so a second dead
   unit behind one dead unit of the layer before reads its own node death. Kernel
   directions explained by a chain (the linked G vectors, of skip chains too; on the consumer
   side, for a linked unit the consumer does not read (`_reads_unit`: a node death), every tap
   ``g ⊗ e_s`` of a linked unit, each of its ``P`` flattened columns, or each query head's copy of
   a value dimension) are not proposed again one-sided. At most ``max_chains`` (default
   `MAX_CHAINS`) chains start at one block, and as many skip chains. A factor that
   vanishes identically (``G`` under all-zero downstream weights, ``A`` above all-zero upstream
   weights) has every direction in its kernel.
   **Skip links** (`LinearDetector.skip_linked`): the same join into the blocks that receive
   ``p``'s output as one summand of a residual sum (``ModelGraph.skips``), so a dead path
   continues past residual blocks (spec §6.6: skips are free on the shortest weighted path).
   A chain that starts through a skip link is kept only if its last block has a live ``G``
   (otherwise moving it changes nothing); same provenance ``"duality"``, ``info["skip"]``.
3. **One-sided modes** (``"kfac-A"``: ``g_top a_kᵀ``; ``"kfac-G"``: ``g_k a_topᵀ``), at most
   ``max_one_sided`` (default `MAX_ONE_SIDED`) per side (on the logits layer of a categorical
   model, G-kernel vectors with ``|cos(g, 𝟙)| ≥ LOGIT_SHIFT_COS`` are left to the CE-shift
   detector: spec §6.1 failure mode (iii)).
4. **Joint modes** ``g_i a_jᵀ`` (``"kfac-joint"``), only for a block where neither factor has a
   near-kernel (``ker_A`` and ``ker_G`` both empty; otherwise the one-sided modes already cover
   the small products): the products ``γ_i α_j/(γ_max α_max)`` (all ``n_G · n_A`` of them) go
   through the near-kernel rule with ``τ = TAU_JOINT`` (`near_kernel`: below ``τ``, with a
   decade gap between the largest kept and the smallest rejected product), and every kept
   product gives one candidate, in ascending order, at most ``max_joint`` (default
   `MAX_JOINT`) of them.

**Caps.** Each cap is a keyword of `LinearDetector`. When a cap cuts candidates of one kind
(duality chains, skip chains, ``kfac-A``, ``kfac-G``, ``kfac-joint``) at a block, every candidate
of that kind the block does return carries ``info["truncated"] = {"cap": c, "found": n, "kept":
c}`` (``n`` directions qualified); `read` copies ``Candidate.info`` into the
`DirectionRecord`'s ``info``, so the record appears in the reading and its JSON. The dead-space
dimension at the dominant order (spec §0, §11) is the count of directions read at that order,
so a reading with such a record undercounts it: raise the cap (``read(...,
detectors=[..., LinearDetector(max_chains=…)])``) to read them all.

Vectors live in the column-major vec convention of the factors: ``in`` is indexed like ``ā``
(im2col order ``(C_in, k_h, k_w)`` for convolutions, trailing bias coordinate), ``out`` like the
output channels.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.blocks import is_supported_block
from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.detectors.bias_link import (
    compensate,
    compensated,
    compensated_reference,
)
from neuromanifold.singular.detectors.graph import PASS_THROUGH
from neuromanifold.singular.detectors.graph_steps import layout_step
from neuromanifold.singular.detectors.link import (
    MATCH_MIN,
    BlockSpectrum,
    columns,
    input_lift,
    input_lift_batch,
    link_energy_max,
    live_energy,
    live_energy_batch,
    principal_links,
    principal_links_reference,
    rotated_energy_max,
    rotates,
    tap_span,
)
from neuromanifold.singular.detectors.near_kernel import near_kernel
from neuromanifold.singular.detectors.one_sided import (
    MAX_ONE_SIDED,
    check_cap,
    one_sided_a_modes,
    one_sided_a_modes_reference,
)
from neuromanifold.singular.detectors.silent import (
    output_moments,
    preactivation_moments,
    preactivation_moments_reference,
    silent_columns,
    weight_rows,
)
from neuromanifold.singular.detectors.value_link import (
    ValueEdge,
    value_edges,
    value_lift,
    value_taps,
)
from neuromanifold.singular.factor_spectrum import factor_spectrum, factor_spectrum_reference

__all__ = [
    "MAX_CHAINS",
    "MAX_JOINT",
    "TAU_A",
    "TAU_G",
    "TAU_JOINT",
    "LinearDetector",
    "block_spectrum",
    "lift",
]

TAU_A = 1e-3
TAU_G = 1e-3
TAU_JOINT = 1e-4
MAX_CHAINS = 4
"""Default cap on the duality chains (and, separately, skip chains) starting at one block."""
MAX_JOINT = 2
"""Default cap on the joint modes (``kfac-joint``) of one block."""
LOGIT_SHIFT_COS = 0.9999
UNIT_READ_TOL = 1e-8
"""Relative weight below which a consumer counts as not reading a linked upstream unit
(`_reads_unit`): planted and pruned units read exactly 0; a unit whose columns are 1e-8 of the
weight's norm contributes below float64 resolution of the sums it enters at unit activations."""
REFERENCE = False
"""Route the detector through its brute-force oracles (dense ``eigh``, one ``live_energy`` per
vector, QR + SVD one-sided modes); tests set it to compare a whole read with the fast paths."""


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


class LinearDetector:
    """K-FAC / KFC detector for ``nn.Linear``, ``nn.Conv1d``, ``nn.Conv2d`` (module docstring)."""

    name = "linear"

    def __init__(
        self,
        *,
        max_chains: int = MAX_CHAINS,
        max_one_sided: int = MAX_ONE_SIDED,
        max_joint: int = MAX_JOINT,
    ) -> None:
        """Caps on the candidates proposed per block (module docstring, **Caps**): ints ``≥ 1``."""
        self.max_chains = check_cap("max_chains", max_chains)
        self.max_one_sided = check_cap("max_one_sided", max_one_sided)
        self.max_joint = check_cap("max_joint", max_joint)

    def applies_to(self, module: nn.Module) -> bool:
        """Supported blocks of `neuromanifold.singular.blocks.is_supported_block`."""
        return is_supported_block(module)

    def _modules(self, ctx: DetectionContext) -> dict[str, nn.Module]:
        mods = ctx.cache.get("modules")
        if mods is None:
            mods = dict(ctx.model.named_modules())
            ctx.cache["modules"] = mods
        return mods

    def linked(self, ctx: DetectionContext, name: str) -> list[tuple[Tensor, str, Tensor]]:
        """G-kernel vectors of ``name`` whose lift lies in its consumer's A-kernel.

        Returns ``[(g, consumer, lifted in-vector), …]`` in the order of the G-kernel basis
        (cached). The G-kernel is matched against the consumer in one batch (`_kernel_links`);
        with `REFERENCE` through the oracles, one vector at a time. The G-kernel basis the links
        refer to (the kernel eigenvectors, rotated to the consumer's principal directions where
        `link.rotates`) is cached under ``"g_kernel"``, the indices of its linked columns (into
        that basis, not into ``g_vecs``) under ``"linked_idx"``.
        """
        cache = ctx.cache.setdefault("linked", {})
        if name in cache:
            return cache[name]
        spec = block_spectrum(ctx, name)
        out, idx = [], []
        if spec is not None and spec.ker_g:
            c = ctx.graph.single_consumer(name)
            edge = _value_edge(ctx, name)
            if c is None and edge is not None and edge.value == name:
                c = edge.output  # the attention's value → output edge (`value_link`)
            find = self._kernel_links_reference if REFERENCE else self._kernel_links
            basis, links = find(ctx, name, spec, c)
            ctx.cache.setdefault("g_kernel", {})[name] = basis
            for col, link in links:
                out.append(link)
                idx.append(col)
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
        skips = ctx.graph.skips.get(name, ())
        if spec is not None and spec.ker_g:
            for c in skips:
                out.extend(link for _, link in self._kernel_links(ctx, name, spec, c)[1])
        cache[name] = out
        return out

    def _kernel_links(
        self, ctx: DetectionContext, name: str, spec: BlockSpectrum, consumer: str | None
    ) -> tuple[Tensor, list[tuple[int, tuple[Tensor, str, Tensor]]]]:
        """The G-kernel basis of ``spec`` as matched against ``consumer`` and its columns whose
        lift passes the link rule: ``(basis, [(column, (g, consumer, lifted in-vector)), …])``.

        Where `link.rotates` (``2 ≤ m ≤ r``) the basis is rotated to the principal directions of
        its lift against the consumer's A-kernel (`principal_links`) and a column links when its
        energy is at most `rotated_energy_max`: a dead path whose output direction is a mixture
        of the G-kernel's eigenvectors (a hidden basis rotated, a layer followed by a narrower
        one) is found whatever basis ``eigh`` returned for that kernel. Otherwise each
        eigenvector is tested alone against `link_energy_max` (module docstring)."""
        gs = columns(spec.g_vecs, spec.ker_g)
        if consumer is None or consumer not in ctx.factors.blocks:
            return gs, []
        cspec = block_spectrum(ctx, consumer)
        vecs = self._lift(ctx, name, consumer, gs)
        if cspec is None or vecs is None:
            return gs, []
        cspec, shift = self._link_spectrum(ctx, consumer, cspec)
        m = gs.shape[1]
        if rotates(cspec, m):
            rot, energy = principal_links(cspec, vecs, gs)
            gs, vecs, bound = gs @ rot, vecs @ rot, rotated_energy_max(cspec, m)
        else:
            energy, bound = live_energy_batch(cspec, vecs), link_energy_max(cspec)
        hits = (energy <= bound).tolist()
        hits = self._not_silent(ctx, name, consumer, gs, vecs, shift, hits)
        vecs = _compensated_lifts(vecs, shift)
        return gs, [(j, (gs[:, j], consumer, vecs[:, j])) for j, hit in enumerate(hits) if hit]

    def _kernel_links_reference(
        self, ctx: DetectionContext, name: str, spec: BlockSpectrum, consumer: str | None
    ) -> tuple[Tensor, list[tuple[int, tuple[Tensor, str, Tensor]]]]:
        """Oracle of `_kernel_links`: every vector lifted alone (`input_lift`), the rotation
        from the dense projector (`principal_links_reference`), energies one at a time
        (`live_energy`)."""
        gs = columns(spec.g_vecs, spec.ker_g)
        if consumer is None or consumer not in ctx.factors.blocks:
            return gs, []
        cspec = block_spectrum(ctx, consumer)
        lifted = [self._lift_one(ctx, name, consumer, gs[:, j]) for j in range(gs.shape[1])]
        if cspec is None or any(v is None for v in lifted):
            return gs, []
        cspec, shift = self._link_spectrum(ctx, consumer, cspec)
        m, bound = gs.shape[1], link_energy_max(cspec)
        if rotates(cspec, m):
            rot, _ = principal_links_reference(cspec, torch.stack(lifted, 1), gs)
            gs, bound = gs @ rot, rotated_energy_max(cspec, m)
            lifted = [self._lift_one(ctx, name, consumer, gs[:, j]) for j in range(m)]
        hits = [live_energy(cspec, v) <= bound for v in lifted]
        lifts = torch.stack(lifted, 1)
        hits = self._not_silent(ctx, name, consumer, gs, lifts, shift, hits, dense=True)
        return gs, [
            (j, (gs[:, j], consumer, _compensated_lifts(v[:, None], shift)[:, 0]))
            for j, v in enumerate(lifted)
            if hits[j]
        ]

    def _not_silent(
        self,
        ctx: DetectionContext,
        name: str,
        consumer: str,
        gs: Tensor,
        lifts: Tensor,
        shift: Tensor | None,
        hits: list[bool],
        *,
        dense: bool = False,
    ) -> list[bool]:
        """``hits`` with the silent units of producer ``name`` dropped (`silent.silent_columns`):
        a linked column whose pre-activation over the probes is not negligible and whose output
        in ``consumer`` (``lifts``, the plain lifts; ``shift``, the consumer's bias shift) does not
        follow it. ``dense``: the producer's moments through the oracle
        `preactivation_moments_reference` (the dense factor ``A``)."""
        idx = [j for j, hit in enumerate(hits) if hit]
        bf, spec = ctx.factors.blocks.get(name), block_spectrum(ctx, name)
        cf = ctx.factors.blocks.get(consumer)
        if not idx or bf is None or spec is None or cf is None:
            return hits
        rows = weight_rows(self._modules(ctx)[name], bf.has_bias)  # ā's layout (`blocks`)
        cols = gs[:, idx].to(rows.dtype)
        if dense:
            moments = preactivation_moments_reference(rows, bf.A, cols, bf.has_bias)
        else:
            moments = preactivation_moments(rows, spec, cols, bf.has_bias)
        out_second, out_var = output_moments(cf.A, lifts[:, idx].to(cf.A.dtype), shift)
        out = list(hits)
        for j, silent in zip(idx, silent_columns(moments, out_second, out_var), strict=True):
            if silent:
                out[j] = False
        return out

    def _link_spectrum(
        self, ctx: DetectionContext, consumer: str, cspec: BlockSpectrum
    ) -> tuple[BlockSpectrum, Tensor | None]:
        """The spectrum that lifts into ``consumer`` are tested against, and its bias shift:
        for a consumer with a bias, the kernel enlarged by the bias compensation
        (`bias_link.compensated`; a dead unit with a constant output), else ``(cspec, None)``.
        Cached per consumer."""
        cache = ctx.cache.setdefault("link_spectrum", {})
        if consumer not in cache:
            comp = None
            if getattr(self._modules(ctx)[consumer], "bias", None) is not None:
                comp = (compensated_reference if REFERENCE else compensated)(cspec)
            cache[consumer] = (cspec, None) if comp is None else (comp.spec, comp.shift)
        return cache[consumer]

    def _lift(
        self, ctx: DetectionContext, producer: str, consumer: str, gs: Tensor
    ) -> Tensor | None:
        """Producer-side columns ``gs`` lifted into ``consumer``'s ``ā`` (unit columns): through an
        attention's value → output edge by `value_lift`, else `input_lift_batch` (with the
        columns per channel of a flattened feature map, `_flatten_block`)."""
        mod = self._modules(ctx)[consumer]
        edge = _value_edge(ctx, producer)
        if edge is not None and edge.value == producer and edge.output == consumer:
            core = value_lift(edge, gs)
            if mod.bias is not None:
                core = torch.cat([core, core.new_zeros(1, core.shape[1])])
            return core / core.norm(dim=0, keepdim=True)
        return input_lift_batch(mod, gs, _flatten_block(ctx, producer, consumer))

    def _lift_one(
        self, ctx: DetectionContext, producer: str, consumer: str, g: Tensor
    ) -> Tensor | None:
        """`_lift` of one vector (the reference path): `input_lift` unless the edge is an
        attention's value → output edge."""
        edge = _value_edge(ctx, producer)
        if edge is not None and edge.value == producer and edge.output == consumer:
            lifted = self._lift(ctx, producer, consumer, g[:, None])
            return None if lifted is None else lifted[:, 0]
        block = _flatten_block(ctx, producer, consumer)
        return input_lift(self._modules(ctx)[consumer], g, block)

    def _upstream(self, ctx: DetectionContext, name: str) -> list[Tensor]:
        """Linked vectors that land in ``name``: from its single producer, and through skips.
        Through an attention's value → output edge they are given in ``name``'s input
        coordinates, one per query head (`value_taps`), so that the one-sided modes leave out
        every query head's copy of a dead value dimension, as a convolution's taps."""
        up: list[Tensor] = []
        p = _chain_producer(ctx, name)
        edge = _value_edge(ctx, name)
        if p is not None and p in ctx.factors.blocks:
            up = [g for g, c, _ in self.linked(ctx, p) if c == name]
            if edge is not None and edge.value == p and edge.output == name and up:
                taps = value_taps(edge, torch.stack(up, 1))  # every query head's columns
                up = [taps[:, i] for i in range(taps.shape[1])]
        for q, consumers in ctx.graph.skips.items():
            if name in consumers and q in ctx.factors.blocks:
                up.extend(g for g, c, _ in self.skip_linked(ctx, q) if c == name)
        return up

    def chain_from(
        self, ctx: DetectionContext, name: str, index: int = 0, *, strict: bool = False
    ) -> list[tuple[str, Tensor, Tensor]]:
        """Duality chain ``index`` starting at ``name`` as ``[(block, out_vec, in_vec), …]``.

        Chain ``i`` leaves each block through its ``i``-th linked G-kernel vector when there is one
        (so parallel dead paths give distinct chains), else through the last; ``strict``: else it
        ends there (a chain started past the arriving ones, `_walked_into`, so that it does not
        share a later block's linked vector with them). ``[]`` when ``name`` has no linked vector
        of that index.
        """
        spec = block_spectrum(ctx, name)
        links_here = self.linked(ctx, name)
        if spec is None or index >= len(links_here):
            return []
        return self._walk(ctx, name, spec.a_top, links_here[index], index, strict=strict)

    def _walked_into(self, ctx: DetectionContext, name: str, n_links: int) -> int:
        """How many of ``name``'s linked vectors the chains arriving from its producer walk
        (`_walk`: chain ``i`` leaves through linked vector ``min(i, n − 1)``): the chains of the
        producer's links into ``name``, at most `max_chains` of them. The linked vectors past
        that count start chains of their own here (s35 trial SILENT D2: a second dead unit of
        a layer behind one dead unit of the layer before was on no chain and in no record)."""
        p = _chain_producer(ctx, name)
        if p is None or p not in ctx.factors.blocks:
            return n_links  # chains arrive through skips only: none start here
        arriving = sum(c == name for _, c, _ in self.linked(ctx, p))
        return min(arriving, self.max_chains, n_links)

    def _walk(
        self,
        ctx: DetectionContext,
        name: str,
        in_vec: Tensor,
        step: tuple[Tensor, str, Tensor] | None,
        index: int,
        *,
        strict: bool = False,
    ) -> list[tuple[str, Tensor, Tensor]]:
        """Follow ``step`` out of ``name``, then each block's linked vector ``index`` (or its
        last; ``strict``: or none) until a block has none; ``[]`` if the walk returns to a
        block."""
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
            if strict and index >= len(nxt_links):
                step = None
            else:
                step = nxt_links[min(index, len(nxt_links) - 1)] if nxt_links else None
        chain.append((cur, block_spectrum(ctx, cur).g_top, in_vec))
        return chain

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """Duality chains starting here, one-sided modes and the joint mode (module docstring)."""
        spec = block_spectrum(ctx, name)
        if spec is None:
            return []
        out: list[Candidate] = []
        upstream = self._upstream(ctx, name)
        links = self.linked(ctx, name)
        skip_g = None  # the first-block G vectors of the skip chains proposed here
        first = 0 if not upstream else self._walked_into(ctx, name, len(links))
        chains = [
            (i, c)
            for i in range(first, len(links))
            if (c := self.chain_from(ctx, name, i, strict=first > 0))
        ]
        trunc = _truncation(self.max_chains, len(chains))
        for i, chain in chains[: self.max_chains]:
            info = {"chain_index": i, **trunc}
            out.append(self._chain_candidate(ctx, chain, spec, info))
        if not upstream:
            skip = self._skip_chains(ctx, name, spec)
            out.extend(cand for cand, _ in skip)
            skip_g = torch.stack([g for _, g in skip], 1) if skip else None
        a_max, g_max = float(spec.alpha[-1]), float(spec.gamma[-1])
        one_sided = one_sided_a_modes_reference if REFERENCE else one_sided_a_modes
        block = _flatten_block(ctx, ctx.graph.single_producer(name), name)
        # taps of linked units this block still reads are not explained by their chain (the
        # chain reads live there): they stay one-sided candidates, exact flat directions
        explained = [g for g in upstream if not _reads_unit(module, g, block)]
        shift = self._link_spectrum(ctx, name, spec)[1] if explained else None
        modes, n_a = one_sided(
            spec, module, explained, max_modes=self.max_one_sided, block=block, shift=shift
        )
        trunc = _truncation(self.max_one_sided, n_a)
        for vec, ratio in modes:
            u = normalise(lift(name, module, spec.g_top, vec))
            out.append(
                Candidate(layers=(name,), detector="kfac-A", u=u, ratio=ratio, info=dict(trunc))
            )
        linked_g = torch.stack([g for g, _, _ in links], 1) if links and REFERENCE else None
        linked_idx = ctx.cache["linked_idx"][name]
        basis, gamma = _g_kernel(ctx, name, spec)
        g_side = []
        for j in range(basis.shape[1]):
            g = basis[:, j]
            if _is_logit_shift(ctx, name, g):
                continue
            if linked_g is not None and float((linked_g.T @ g).norm()) >= MATCH_MIN:
                continue
            if linked_g is None and j in linked_idx:  # orthonormal columns: norm 1 or 0
                continue
            if skip_g is not None and float((skip_g.T @ g).norm()) >= MATCH_MIN:
                continue  # explained by a skip chain, as linked vectors are by a chain
            g_side.append(j)
        trunc = _truncation(self.max_one_sided, len(g_side))
        for j in g_side[: self.max_one_sided]:
            u = normalise(lift(name, module, basis[:, j], spec.a_top))
            r = _ratio(float(gamma[j]), g_max)
            out.append(Candidate(layers=(name,), detector="kfac-G", u=u, ratio=r, info=dict(trunc)))
        if not spec.ker_a and not spec.ker_g and a_max > 0 and g_max > 0:
            out.extend(self._joint_modes(name, module, spec))
        return ctx.canonical(out)

    def _joint_modes(self, name: str, module: nn.Module, spec: BlockSpectrum) -> list[Candidate]:
        """``g_i a_jᵀ`` for every product ``γ_i α_j`` the near-kernel rule keeps (τ = `TAU_JOINT`),
        ascending, at most ``max_joint`` (module docstring, step 4)."""
        a_max, g_max = float(spec.alpha[-1]), float(spec.gamma[-1])
        prods = torch.outer(spec.gamma.clamp_min(0), spec.alpha.clamp_min(0)).reshape(-1)
        kept = near_kernel(prods, TAU_JOINT)
        trunc = _truncation(self.max_joint, len(kept))
        n_a = spec.alpha.numel()
        out = []
        for p in kept[: self.max_joint]:
            i, j = divmod(p, n_a)
            u = normalise(lift(name, module, spec.g_vecs[:, i], spec.a_vecs[:, j]))
            r = float(prods[p]) / (a_max * g_max)
            info = {"gamma_index": i, "alpha_index": j, **trunc}
            out.append(Candidate(layers=(name,), detector="kfac-joint", u=u, ratio=r, info=info))
        return out

    def _skip_chains(
        self, ctx: DetectionContext, name: str, spec: BlockSpectrum
    ) -> list[tuple[Candidate, Tensor]]:
        """Duality chains that leave ``name`` through a skip link (`skip_linked`), each with its
        first block's G-kernel vector (not proposed again one-sided).

        The chain takes one skip hop, from its first block: skips are free on the weighted path,
        so the direct hop is the shortest way to any later block; past it the chain follows
        direct links (`linked`) as usual.

        A chain is kept only when its last block's ``G`` is not all near-kernel: a path whose
        end has no output gradient changes nothing when moved (``F ≡ 0``), and a residual
        stream offers many such partial paths (into every later block of a dead stack).
        """
        chains = []
        for step in self.skip_linked(ctx, name):
            chain = self._walk(ctx, name, spec.a_top, step, 0)
            end = block_spectrum(ctx, chain[-1][0]) if chain else None
            if end is None or len(end.ker_g) >= end.gamma.numel():
                continue
            chains.append(chain)
        trunc = _truncation(self.max_chains, len(chains))
        return [
            (
                self._chain_candidate(ctx, chain, spec, {"chain_index": i, "skip": True, **trunc}),
                chain[0][1],
            )
            for i, chain in enumerate(chains[: self.max_chains])
        ]

    def _chain_candidate(
        self,
        ctx: DetectionContext,
        chain: list[tuple[str, Tensor, Tensor]],
        spec: BlockSpectrum,
        info: dict,
    ) -> Candidate:
        """``"duality"`` candidate of a chain: each block's rank-one lift ``out inᵀ``, every
        block at equal norm; ratio = the first block's smallest G-kernel eigenvalue ratio."""
        mods = self._modules(ctx)
        u: dict[str, Tensor] = {}
        for blk, o, a in chain:
            u.update(lift(blk, mods[blk], o, a))
        u = normalise(_equalise(u, [(blk, mods[blk]) for blk, _, _ in chain]))
        live = [blk for blk, _, _ in chain[1:-1] if _live_block(block_spectrum(ctx, blk))]
        if live:  # the chain crosses dead units that may be lower-order directions on their own
            info = {**info, "through_live": live}
        return Candidate(
            layers=tuple(b for b, _, _ in chain),
            detector="duality",
            u=u,
            ratio=_ratio(float(spec.gamma[spec.ker_g[0]]), float(spec.gamma[-1])),
            info={"chain_length": len(chain), **info},
        )


def _compensated_lifts(vecs: Tensor, shift: Tensor | None) -> Tensor:
    """Unit in-vectors of the chain's consumer block: the lifts with their bias shift
    (`bias_link.compensate`, so the block moves the consumer's bias by ``−c·g`` for a unit of
    constant output ``c``), or the lifts unchanged without a shift."""
    if shift is None:
        return vecs
    out = compensate(vecs, shift)
    return out / out.norm(dim=0, keepdim=True)


def _reads_unit(module: nn.Module, g: Tensor, block: int) -> bool:
    """Whether ``module`` reads the upstream unit ``g`` (input channels, shape ``(C,)``):
    ``‖W̄ S‖ > UNIT_READ_TOL · ‖W̄‖`` with ``S`` the unit's taps in ``ā`` (`tap_span`) and ``W̄``
    the weight flattened like ``ā`` (output rows; the bias column meets no tap).

    A linked unit the consumer does not read is a node death (its taps are explained by the
    chain, which reads its order); one the consumer still reads is dead on the input side only,
    the chain reads live, and the unit's taps are exact flat directions of their own.
    """
    W = module.weight.detach().reshape(module.weight.shape[0], -1)
    S = tap_span(module, g.to(W.dtype), block)[: W.shape[1]]
    return float((W @ S).norm()) > UNIT_READ_TOL * float(W.norm())


def _live_block(spec: BlockSpectrum | None) -> bool:
    """Whether a block has live inputs and live outputs (``α_max > 0`` and ``γ_max > 0``).

    A duality chain through such a middle block joins the dead unit entering it to the one
    leaving it. Each of them, paired with the block's live outputs or inputs instead, is a dead
    direction of its own (a node death: order 2 for linear or ReLU layers), of lower order than
    the chain: the chain's direction is a crossing of those loci. `read` names such chains in
    its note (``info["through_live"]``).
    """
    return spec is not None and float(spec.alpha[-1]) > 0 and float(spec.gamma[-1]) > 0


def _chain_producer(ctx: DetectionContext, name: str) -> str | None:
    """The block whose chains continue into ``name``: its single producer, or the value
    projection of the attention whose output projection ``name`` is (`value_link`); None when
    there is none, or when the producer's output also reaches a function the graph does not
    follow (a gate's product ``x * s`` beside the squeeze ``fc1(mean(x))``): a chain through it
    reads that second reader too, so ``name``'s own chains are read as well, and its taps stay
    one-sided candidates (s28 trial EXOTIC #1: a node death after the squeeze was read only
    inside a chain the gate made live)."""
    p = ctx.graph.single_producer(name)
    if p is not None and ctx.graph.stops.get(p):
        p = None
    edge = _value_edge(ctx, name)
    if p is None and edge is not None and edge.output == name:
        p = edge.value
    return p


def _value_edge(ctx: DetectionContext, name: str | None) -> ValueEdge | None:
    """The attention value → output edge (`value_link.value_edges`, cached) ``name`` belongs
    to, or None."""
    edges = ctx.cache.get("value_edges")
    if edges is None:
        edges = value_edges(ctx.model)
        ctx.cache["value_edges"] = edges
    return edges.get(name) if name is not None else None


def _flatten_block(ctx: DetectionContext, producer: str | None, consumer: str) -> int:
    """Columns per producer channel where a Linear ``consumer`` reads ``producer``'s feature map
    flattened (the graph's last channelwise step is ``"FlattenChannels"``): ``in_features / C``;
    1 for any other edge (`link.input_lift`)."""
    via = ctx.graph.via.get((producer, consumer)) if producer is not None else None
    steps = [v for v in via or () if v not in PASS_THROUGH]
    mods = ctx.cache.get("modules") or dict(ctx.model.named_modules())
    cons, prod = mods.get(consumer), mods.get(producer) if producer is not None else None
    if layout_step(steps) != "FlattenChannels" or not isinstance(cons, nn.Linear):
        return 1
    channels = ctx.factors.blocks[producer].G.shape[0] if producer in ctx.factors.blocks else 0
    if prod is None or channels == 0 or cons.in_features % channels:
        return 1
    return cons.in_features // channels


def _g_kernel(ctx: DetectionContext, name: str, spec: BlockSpectrum) -> tuple[Tensor, Tensor]:
    """The G-kernel basis the links of ``name`` refer to (`LinearDetector.linked`; the kernel
    eigenvectors unless rotated against the consumer) and each column's Rayleigh quotient
    ``gᵀ G g`` (the eigenvalues when not rotated)."""
    eig = columns(spec.g_vecs, spec.ker_g)
    gamma = spec.gamma[spec.ker_g]
    basis = ctx.cache.get("g_kernel", {}).get(name, eig)
    if basis is eig:
        return eig, gamma
    return basis, (eig.T @ basis).pow(2).T @ gamma


def _truncation(cap: int, found: int) -> dict:
    """``{"truncated": {"cap", "found", "kept"}}`` when ``found > cap`` directions qualified, else
    ``{}`` (merged into the ``info`` of the candidates that are kept)."""
    if found <= cap:
        return {}
    return {"truncated": {"cap": cap, "found": found, "kept": cap}}


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
