"""Query/key pair detector (``"qk-pair"``): the bilinear dead entry of an attention head.

Spec §6.5: "A QK bilinear dead entry carries two t-factors (forward block rate 2)". Query head
``h`` scores key position ``s`` from query position ``t`` by ``q_{h,t}·k_{g,s}`` (KV head
``g = g(h)``; layouts, heads and grouped-query attention: `attention_layout`). Let ``v`` be a
unit vector of the head coordinates (``R^{d_h}``) along which the pair is dead: ``q_h·v ≡ 0``
for every query head ``h`` of the group and ``k_g·v`` constant over the keys (zero, or the key
bias alone, which adds the same amount to every score of a query and which the softmax ignores).
Moving the query rows alone or the key rows alone along ``v`` then changes no score: each
one-sided move is exactly flat, and the linear detector reports it as a ``kfac-G`` record of
its projection. The joint move

    ``ΔW̄_Q[r_h] = v a_Qᵀ`` (every ``h`` of the group),   ``ΔW̄_K[r_g] = v a_Kᵀ``

changes the scores by ``t² (a_Q·ā_t)(a_K·ā_s)``: an order-2 direction (spec §6.5). No duality
chain finds it (the join follows producer → consumer edges; ``q`` and ``k`` are siblings of one
bilinear product), so this detector proposes it.

**Selection**, per KV head ``g`` with query heads ``h ∈ group(g)`` (``n_rep`` of them):

1. *G side* (the projections' factors, `linear.block_spectrum`): ``B_Q``, ``B_K`` the
   near-kernel bases of the ``G`` factors of the query and key blocks (one basis for a fused
   ``qkv`` block). ``v`` placed in the rows ``r_h`` of head ``h`` has the out-of-kernel energy
   ``e = 1 − ‖B_Q[r_h]ᵀ v‖²`` (key: ``B_K[r_g]``). The joint G-kernel of the head is spanned by
   the eigenvectors of ``N = (Σ_h B_Q[r_h] B_Q[r_h]ᵀ + B_K[r_g] B_K[r_g]ᵀ)/(n_rep + 1)`` with
   ``(n_rep + 1)(1 − λ) ≤ e_max``, so every unit vector of that span has every energy at most
   ``e_max``, the smaller of the two blocks' `head_energy_max` (the duality link rule's bound for
   the best directions of a subspace, `link.rotated_energy_max`, with the ``d_h`` head
   coordinates as the subspace: a probe set narrower than the layer leaves a large kernel that a
   head meets by chance).
2. *Weight side*: the rows along ``v`` must vanish, ``Σ_h ‖vᵀ W̄_Q[r_h]‖² ≤ TAU_DEAD · μ_Q``
   with ``W̄_Q = [W_Q | b_Q]`` and ``μ_Q`` the mean squared norm of the query rows, and
   ``‖vᵀ W_K[r_g]‖² ≤ TAU_DEAD · μ_K`` for the key weights without the bias (``μ_K`` their mean
   squared row norm). A G-kernel alone also holds where the scores do not reach the output at
   all (a head whose values or output columns are dead, a single key position), where every move
   of the head is flat and the ``kfac-G`` records say so; and a probe set narrower than the layer
   leaves G-kernels that meet every head for dimensional reasons. The weights decide both cases
   without the probe set. A pair that is dead only on the probe set
   (rows orthogonal to every probe input) is therefore not proposed.
3. The kept span (``v`` satisfying both) gets a canonical basis (`canonical_span`: coordinate
   axes where the span contains them, as for exactly dead entries), one candidate per basis
   vector, the heads in order.

Each candidate is ``normalise(ΔW̄_Q ⊕ ΔW̄_K)`` with both parts of equal norm (as a duality chain's
blocks), ``a_Q``, ``a_K`` the top input eigenvectors of the two blocks' ``A``; ``layers`` the
query and key projections (one name for a fused block); ``ratio`` the larger G Rayleigh ratio
of its two parts; ``info``: ``module``, ``head`` (the KV head), ``query_heads`` (with GQA),
``d_head``, ``coordinate`` (the head coordinate of ``v``'s largest entry), ``coordinate_cos``
(that entry's modulus: 1 for a dead entry on one coordinate) and ``pair_dim`` (the dimension of
the head's dead span). At most ``max_pairs`` (default `MAX_QK_PAIRS`) candidates per attention
module; a cut sets ``info["truncated"]`` on those kept (`Candidate`). The brute-force oracle of
the selection is `dead_pair_span_reference` (dense projectors, the whole weight's row Gram).

Modules whose QK scores are read by another layout (the BERT wrapper: ``propose_qk=False``) and
attentions without factors (an ``nn.MultiheadAttention`` the read could not rewrite) get none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.attention_layout import AttentionLayout, attention_layout
from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.detectors.linear import block_spectrum, lift
from neuromanifold.singular.detectors.link import (
    EXACT_DEAD_ENERGY,
    MATCH_MIN,
    NULL_FRACTION,
    BlockSpectrum,
    columns,
)
from neuromanifold.singular.detectors.one_sided import check_cap
from neuromanifold.singular.factor_spectrum import sign_fix, tie_broken_pivots

__all__ = [
    "MAX_QK_PAIRS",
    "TAU_DEAD",
    "PairSide",
    "QKPairDetector",
    "canonical_span",
    "dead_pair_span",
    "dead_pair_span_reference",
    "head_energy_max",
]

MAX_QK_PAIRS = 4
"""Default cap on the ``qk-pair`` candidates of one attention module (as `linear.MAX_CHAINS`)."""
TAU_DEAD = 1e-6
"""A head direction's rows count as dead when their squared norm is at most this fraction of the
mean squared row norm of their projection (relative weight 1e-3, as `linear.TAU_A` for second
moments; planted and pruned rows are 0, a live row of a random or trained head is of order 1)."""


def head_energy_max(n: int, m: int, d_head: int) -> float:
    """Largest out-of-kernel energy of a head direction in a G-kernel of dimension ``m`` among
    ``n`` output features: ``max(EXACT_DEAD_ENERGY, min(1 − MATCH_MIN², NULL_FRACTION ·
    max(√r − √d_head, 0)²/n))``, ``r = n − m`` (`link.rotated_energy_max` with the head's
    ``d_head`` coordinates as the searched subspace; at ``d_head ≥ r`` only a vector at rounding
    level of the kernel passes, and the kernel meets the head for dimensional reasons alone, so
    the weight test decides).

    >>> head_energy_max(6, 1, 3) == 0.04 * (5**0.5 - 3**0.5) ** 2 / 6
    True
    >>> head_energy_max(6, 3, 3)
    1e-10
    """
    r = n - m
    null = max(r**0.5 - d_head**0.5, 0.0) ** 2 / n
    return max(EXACT_DEAD_ENERGY, min(1.0 - MATCH_MIN**2, NULL_FRACTION * null))


def canonical_span(w: Tensor) -> Tensor:
    """Canonical orthonormal basis of ``span(w)`` (``w``: ``d × s``, orthonormal columns),
    depending only on the span: pivot coordinates by column-pivoted QR of ``wᵀ``
    (`tie_broken_pivots`), the echelon basis ``w (w_P)⁻¹`` orthonormalised symmetrically (its
    polar factor), columns ordered by pivot coordinate and signed by `sign_fix`. A span of
    coordinate axes is returned as those axes.

    >>> w = torch.tensor([[1.0, 1.0], [0.6, -0.6], [0.8, -0.8]], dtype=torch.float64) / 2**0.5
    >>> canonical_span(w).T.round(decimals=12).tolist()  # span{e_0, (0, 0.6, 0.8)}
    [[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]]
    """
    s = w.shape[1]
    if s == 0:
        return w
    pivots = tie_broken_pivots(w.T)[:s].sort().values
    echelon = torch.linalg.solve(w[pivots].T, w.T).T  # rows P = I
    u, _, vh = torch.linalg.svd(echelon, full_matrices=False)
    return sign_fix(u @ vh)


@dataclass(frozen=True)
class PairSide:
    """One side (query or key) of a head pair.

    ``kernel``: the G near-kernel basis of the block (``n × m``); ``rows``: the head rows (one
    slice per query head of the group; one for the key); ``weight``: the rows tested for
    deadness (``[W | b]`` for queries, ``W`` for keys); ``mean_sq``: the mean squared norm of
    this role's rows of ``weight``; ``bound``: `head_energy_max` of the block."""

    kernel: Tensor
    rows: tuple[slice, ...]
    weight: Tensor
    mean_sq: float
    bound: float


def _joint_kernel(sides: tuple[PairSide, PairSide], d: int) -> Tensor:
    """Orthonormal basis (``d × s``) of the head directions in both G near-kernels (step 1)."""
    blocks = [side.kernel[r] for side in sides for r in side.rows]
    n_mat = sum(b @ b.T for b in blocks) / len(blocks)
    lam, vecs = torch.linalg.eigh((n_mat + n_mat.T) / 2)
    bound = min(side.bound for side in sides)
    keep = (len(blocks) * (1.0 - lam)) <= bound
    return vecs[:, keep]


def _row_gram(sides: tuple[PairSide, PairSide], d: int) -> Tensor:
    """``Σ_sides Σ_rows W̄[r] W̄[r]ᵀ / μ`` (``d × d``; a role whose rows all vanish adds 0)."""
    gram = torch.zeros(d, d, dtype=torch.float64, device=sides[0].weight.device)
    for side in sides:
        if not side.mean_sq > 0.0:
            continue
        for r in side.rows:
            w = side.weight[r]
            gram = gram + (w @ w.T) / side.mean_sq
    return (gram + gram.T) / 2


def dead_pair_span(sides: tuple[PairSide, PairSide], d: int) -> Tensor:
    """Canonical basis (``d × s``) of the dead pair directions of one head (selection steps
    1–3): the joint G near-kernel, restricted to the directions whose rows vanish (eigenvalues of
    the projected row Gram matrix ``≤ TAU_DEAD``), `canonical_span`. Oracle:
    `dead_pair_span_reference`.
    """
    span = _joint_kernel(sides, d)
    if span.shape[1] == 0:
        return span
    gram = span.T @ _row_gram(sides, d) @ span
    lam, vecs = torch.linalg.eigh((gram + gram.T) / 2)
    return canonical_span(span @ vecs[:, lam <= TAU_DEAD])


def dead_pair_span_reference(sides: tuple[PairSide, PairSide], d: int) -> Tensor:
    """Brute-force oracle of `dead_pair_span`: the energies through the dense projector
    ``I − B Bᵀ`` onto each block's live G part applied to the embedded head vectors, the row
    Gram matrix of each block's whole weight ``W̄ W̄ᵀ`` (the head rows read out of it), then the
    same two eigen-selections and `canonical_span`."""
    gram = torch.zeros(d, d, dtype=torch.float64, device=sides[0].weight.device)
    for side in sides:
        n = side.kernel.shape[0]
        live = torch.eye(n, dtype=torch.float64, device=gram.device) - side.kernel @ side.kernel.T
        for r in side.rows:
            embed = torch.zeros(n, d, dtype=torch.float64, device=gram.device)
            embed[r] = torch.eye(d, dtype=torch.float64, device=gram.device)
            gram = gram + embed.T @ live @ embed  # vᵀ(gram)v = Σ out-of-kernel energies
    lam, vecs = torch.linalg.eigh((gram + gram.T) / 2)  # gram = (n_rep + 1)(I − N)
    span = vecs[:, lam <= min(side.bound for side in sides)]
    if span.shape[1] == 0:
        return span
    rows = torch.zeros(d, d, dtype=torch.float64, device=gram.device)
    for side in sides:
        if not side.mean_sq > 0.0:
            continue
        full = side.weight @ side.weight.T  # every row of the block
        for r in side.rows:
            rows = rows + full[r, r] / side.mean_sq
    proj = span.T @ rows @ span
    lam, vecs = torch.linalg.eigh((proj + proj.T) / 2)
    return canonical_span(span @ vecs[:, lam <= TAU_DEAD])


def _full(prefix: str, layer: str) -> str:
    return f"{prefix}{layer}" if layer else prefix.rstrip(".")


class QKPairDetector:
    """Joint query/key dead directions of attention heads (``"qk-pair"``; module docstring)."""

    name = "qk-pair"

    def __init__(self, *, max_pairs: int = MAX_QK_PAIRS) -> None:
        """``max_pairs``: cap on the candidates per attention module (an int ``≥ 1``)."""
        self.max_pairs = check_cap("max_pairs", max_pairs)

    def applies_to(self, module: nn.Module) -> bool:
        """Recognised attention modules (`attention_layout`)."""
        return attention_layout(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One candidate per dead pair direction of each KV head, at most ``max_pairs``."""
        lay = attention_layout(module)
        if lay is None or not lay.propose_qk:
            return []
        prefix = f"{name}." if name else ""
        q_name, k_name = _full(prefix, lay.layers["q"]), _full(prefix, lay.layers["k"])
        spec_q, spec_k = block_spectrum(ctx, q_name), block_spectrum(ctx, k_name)
        if spec_q is None or spec_k is None or not spec_q.ker_g or not spec_k.ker_g:
            return []
        mods = ctx.cache.get("modules")
        if mods is None:  # shared with the linear detector (`LinearDetector._modules`)
            mods = ctx.cache["modules"] = dict(ctx.model.named_modules())
        q_mod, k_mod = mods.get(q_name), mods.get(k_name)
        if not isinstance(q_mod, nn.Linear) or not isinstance(k_mod, nn.Linear):
            return []
        found: list[tuple[int, Tensor, int]] = []
        q, k = (q_name, spec_q, q_mod), (k_name, spec_k, k_mod)
        roles = (self._role(lay, q, "q"), self._role(lay, k, "k"))  # once per module
        for g in range(lay.n_kv):
            sides = tuple(
                replace(side, rows=tuple(lay.rows(off, h) for h in heads))
                for (side, off), heads in zip(roles, (lay.group(g), (g,)), strict=True)
            )
            basis = dead_pair_span(sides, lay.d_head)
            found += [(g, basis[:, i], basis.shape[1]) for i in range(basis.shape[1])]
        trunc = (
            {"truncated": {"cap": self.max_pairs, "found": len(found), "kept": self.max_pairs}}
            if len(found) > self.max_pairs
            else {}
        )
        layers = tuple(dict.fromkeys((q_name, k_name)))
        out = []
        for g, v, dim in found[: self.max_pairs]:
            u, ratio = self._direction(ctx, lay, q, k, g, v)
            j = int(v.abs().argmax())
            info: dict[str, Any] = {
                "module": name,
                "head": g,
                "d_head": lay.d_head,
                "coordinate": j,
                "coordinate_cos": float(v[j].abs()),
                "pair_dim": dim,
                # two factors (query and key rows) whatever the layout: a fused qkv block has one
                # name, and the assembly counts len(layers) otherwise (s17 audit AG #3)
                "chain_length": 2,
                **trunc,
            }
            if lay.n_kv != lay.heads:
                info["query_heads"] = list(lay.group(g))
            out.append(Candidate(layers=layers, detector="qk-pair", u=u, ratio=ratio, info=info))
        return ctx.canonical(out)

    @staticmethod
    def _role(
        lay: AttentionLayout, block: tuple[str, BlockSpectrum, nn.Linear], role: str
    ) -> tuple[PairSide, int]:
        """The `PairSide` of one role (``"q"`` or ``"k"``) without its head rows, and the row
        offset of that role in its block."""
        _, spec, mod = block
        offset = (lay.q if role == "q" else lay.k)[2]
        w = mod.weight.detach().to(torch.float64)
        if role == "q" and mod.bias is not None:  # the key bias is left out (module docstring)
            w = torch.cat([w, mod.bias.detach().to(torch.float64)[:, None]], dim=1)
        every = range(lay.heads if role == "q" else lay.n_kv)  # all rows of this role
        mean_sq = sum(float(w[lay.rows(offset, h)].pow(2).sum()) for h in every)
        side = PairSide(
            kernel=columns(spec.g_vecs, spec.ker_g),
            rows=(),
            weight=w,
            mean_sq=mean_sq / (len(every) * lay.d_head),
            bound=head_energy_max(spec.g_vecs.shape[0], len(spec.ker_g), lay.d_head),
        )
        return side, offset

    @staticmethod
    def _direction(
        ctx: DetectionContext,
        lay: AttentionLayout,
        q: tuple[str, BlockSpectrum, nn.Linear],
        k: tuple[str, BlockSpectrum, nn.Linear],
        g: int,
        v: Tensor,
    ) -> tuple[dict[str, Tensor], float]:
        """The joint direction of head vector ``v`` and its ratio (module docstring)."""
        u: dict[str, Tensor] = {}
        ratios = []
        for role, (blk, spec, mod), heads in (("q", q, lay.group(g)), ("k", k, (g,))):
            offset = (lay.q if role == "q" else lay.k)[2]
            out_vec = torch.zeros(spec.g_vecs.shape[0], dtype=torch.float64, device=v.device)
            for h in heads:
                out_vec[lay.rows(offset, h)] = v
            out_vec = out_vec / out_vec.norm()
            part = normalise(lift(blk, mod, out_vec, spec.a_top))
            for key, val in part.items():
                u[key] = u[key] + val if key in u else val
            g_fac = ctx.factors.blocks[blk].G
            top = float(spec.gamma[-1])
            ratios.append(max(float(out_vec @ g_fac @ out_vec), 0.0) / top if top > 0 else 0.0)
        return normalise(u), max(ratios)
