"""Attention detector: per-head QK rotations and value–output rescalings (curved gauges).

Recognised layouts, head counts, grouped-query attention (GQA) and head widths:
`neuromanifold.singular.detectors.attention_layout`. Its ``nn.MultiheadAttention``'s
``out_proj`` (a Linear subclass used through the functional kernel, never called) is covered by
this detector.

Query head ``h`` owns rows ``r_h = h·d_h … (h+1)·d_h`` of Q and columns ``r_h`` of the output;
KV head ``g`` owns rows ``r_g`` of K and V. With ``n_rep = heads / kv_heads`` query head ``h``
reads KV head ``g(h) = ⌊h / n_rep⌋`` (Hugging Face's ``repeat_kv``; ``n_rep = 1`` without GQA).

QK rotation (``"qk-rotation"``, one candidate per KV head ``g``). The scores ``q_hᵀk_g`` are
invariant under ``q_h → R q_h`` for every ``h`` with ``g(h) = g`` and ``k_g → R k_g``,
``R = exp(S)``, ``S ∈ so(d_h)``; the orbit tangent at θ0 is ``δW_Q[r_h] = S W_Q[r_h]``,
``δb_Q[r_h] = S b_Q[r_h]`` (every query head of the group) and ``δW_K[r_g] = S W_K[r_g]``,
``δb_K[r_g] = S b_K[r_g]`` (`QKRotation`). With rotary position embeddings (RoPE) the keys and
queries are rotated by position-dependent angles after the projection, and a generic ``S`` does
not commute with that rotation, so it is no symmetry. The rotations that commute with RoPE are
the ``so(2)`` rotations inside each rotary frequency plane: planes ``(i, i + d_h/2)`` in Hugging
Face's ``rotate_half`` convention (``"rope-half"``), ``(2i, 2i+1)`` in the interleaved one
(``"rope-interleaved"``); ``d_h/2`` generators ``E_ij − E_ji``. The layout cannot tell whether
or how a module applies RoPE, so the basis is chosen by *certification by evaluation* for every
layout: one group element per KV head, ``exp(S_g)`` with a seeded generic ``S_g`` in the basis
span scaled to spectral norm ``CERTIFY_ANGLE`` (radians), is applied to all KV heads at once,
and the relative output change ``max|f(g·θ) − f(θ)| / max|f(θ)|`` over the probe set is
measured (`rescale.relative_change`, all-reduced over the ranks of a distributed read). A broken
rotation moves the outputs by an amount that shrinks with the square of the QK weight scale
(8.6e-4 at Hugging Face's initialisation scale 0.02 on a tiny Qwen2, 5.9e-7 at 0.002), so a fixed
threshold alone would certify ``so(d_h)`` under RoPE for small weights. The change is therefore
also compared with a *reference* move of the same size known to break the symmetry: the generic
``so(d_h)`` rotation of the queries alone (keys fixed), which changes every score at first order.
A basis certifies when its change is at most ``QK_CERTIFY_RTOL`` (rounding, below) and at most
``QK_CERTIFY_RATIO`` times the reference; the first basis of `QK_BASES` that certifies is
proposed, none if none does or if the reference is 0 (the
outputs do not see the scores). ``info`` records ``basis``, ``certified`` (its change),
``reference`` and ``rejected`` (the changes of the bases tried before; ``None`` for a failed
forward). ``u`` is the tangent of ``S_g = P(M − Mᵀ)``, ``M = Σ_{h: g(h) = g} Q̃_h K̃_gᵀ``,
where ``Q̃_h = [W_Q[r_h] | b_Q[r_h]]`` and ``K̃_g`` alike (the weights with the bias as one more
column) and ``P`` keeps the basis's entries: an element of the basis span built from the weights,
so relabelling heads or the coordinates inside a head (``Q̃, K̃ → R Q̃, R K̃`` gives
``S → R S Rᵀ``) moves ``u`` with them and the read is unchanged (spec §9.1). Where that element
vanishes to ``QK_WEIGHT_GENERATOR_RTOL`` (e.g. ``W_Q = W_K``) ``u`` comes from a seeded generic
``S`` in the span instead; ``info["generator"]`` says which (``"weights"``, ``"seeded"``).
``gauge_generators`` the tangents of the basis. Each is dense
over the Q and K tensors it touches, and ``so(d_h)`` has ``d_h(d_h − 1)/2`` of them (2 016 per
head at ``d_h = 64``: 230 GB of float64 for BERT-base's 144 heads), so they are kept within the
rescale budget `rescale.MAX_GENERATOR_ENTRIES` per candidate; beyond it the generators are ``u``
itself (so the candidate still lies in its span) and the first basis tangents the budget allows,
and ``info["truncated"]`` says how many of the ``d_h(d_h − 1)/2 + 1`` generators (basis and
``u``) were kept. Modules with a
per-head query/key norm (``q_norm``/``k_norm`` other than Identity) break the symmetry and get
no QK candidate; the rescaling of those norms' scales that remains is
`neuromanifold.singular.detectors.qk_norm`'s.

QK scales. The rotations are half of the symmetry: ``k_g → A k_g`` and ``q_h → A^{−T} q_h``
keep every score for any invertible ``A``, tangent ``(−Mᵀ Q̃_h, M K̃_g)`` at ``A = exp(tM)``
(`QKRotation.tangent`, `QKRotation.act`). Without position encoding the group is ``GL(d_h)``;
under RoPE it is the commutant of the rotary blocks, a rotation and a scale per plane. The
candidate's ``gauge_generators`` also hold the symmetric generators that complete its basis
(`qk_scale_generators`: ``sym(d_h)`` for ``so(d_h)``, the scale ``E_ii + E_jj`` of each rotary
plane, for the partial bases both), certified like the rotations: ``exp(CERTIFY_ANGLE·M_g)``,
``M_g`` a seeded generic symmetric element of spectral norm 1, on every KV head, at most
``QK_CERTIFY_RTOL`` and ``QK_CERTIFY_RATIO`` times the reference. ``info["scales"]`` is that
change (``None``: not certified, rotations only) and ``info["n_scales"]`` their number. Without
them the per-head scalar ``(K·c, Q/c)`` and a plane's scale read as genuine singularities of
order 2 (s27 audit LLAMA D1).

VO rescale (``"vo-rescale"``, one candidate per KV head ``g``): ``V_g → cV_g`` and
``O[:, r_h] → O[:, r_h]/c`` for every ``h`` with ``g(h) = g`` has tangent
``(W_V[r_g], b_V[r_g], −W_O[:, r_h] ∀h ∈ g)`` (`VORescale`); it is certified like the rescales
(`rescale.certify`: factors ``2, ½, 2, …`` over the KV heads, powers of two, so a true symmetry
leaves the outputs bitwise unchanged; at most ``CERTIFY_RTOL``), ``info["certified"]`` records
the change, and nothing is proposed when it fails. The scalar is one direction of the group
``V_g → A V_g``, ``O[:, r_h] → O[:, r_h] A^{−1}`` (every ``h ∈ g``, any invertible ``A``;
tangent ``(M V_g, −O[:, r_h] M)``, `VORescale.matrix_tangent`): when ``exp(CERTIFY_ANGLE·M_g)``
with a seeded generic ``M_g`` of spectral norm 1 on every KV head changes the outputs by at
most ``QK_CERTIFY_RTOL`` and ``QK_CERTIFY_RATIO`` times the reference (V moved alone),
``gauge_generators`` are ``u`` and the ``d_h²`` tangents of the ``E_ij`` (within the generator
budget), ``info["gl"] = {"certified", "reference"}``; otherwise (an elementwise gate between the
attention and ``O``) ``u`` alone and ``info["gl"] = None``.

Both orbits are curved: a straight probe shows an apparent order 2, classed curved gauge through
the generators.

Partial rotary embeddings (RoPE on the first ``r`` dimensions of each head only: GPT-NeoX,
Phi, GPT-J, whose modules state ``r`` as ``rotary_ndims``/``rotary_dim``) commute with the
rotary planes of those ``r`` dimensions and with all of ``so(d_h − r)`` on the others
(``"rope-partial-half"``, ``"rope-partial-interleaved"``: ``r/2 + (d_h − r)(d_h − r − 1)/2``
generators); they are tried right after ``so(d_h)``, before the full-head plane bases, which
there certify at most a subgroup (the interleaved planes do when ``r = 2``; usually they fail).

Not covered: partial rotary embeddings whose width neither the module nor its Hugging Face
config states (`attention_layout`), the larger
commutant when two rotary planes share a frequency, the diagonal QK scalings left where a
per-dimension query or key scale breaks every rotation basis, and fused layouts with GQA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.attention_layout import AttentionLayout, attention_layout
from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.detectors.rescale import (
    CERTIFY_RTOL,
    alternating_factors,
    generator_cap,
    relative_change,
    truncation_record,
)

__all__ = [
    "CERTIFY_ANGLE",
    "QK_BASES",
    "QK_CERTIFY_RATIO",
    "QK_CERTIFY_RTOL",
    "QK_WEIGHT_GENERATOR_RTOL",
    "AttentionDetector",
    "AttentionLayout",
    "QKRotation",
    "VORescale",
    "attention_layout",
    "qk_basis",
    "qk_scale_generators",
]

CERTIFY_ANGLE = 1.0
"""Spectral norm (radians) of the generic ``S_g`` whose rotation ``exp(S_g)`` certifies a QK
basis: large enough that a non-commuting rotation moves the output by O(1) relative."""
QK_CERTIFY_RTOL = 1e-6
"""Largest relative output change for which a QK rotation counts as a symmetry. Unlike the
power-of-two rescales (`rescale.CERTIFY_RTOL`, exact), a rotation ``exp(S)`` rounds: the rotated
weights sit ~1e-16 (relative) off the exact orbit point. In float64 that reaches the outputs as
~1e-16 (3e-16 measured on a float64 attention), but a model computing part of its forward in
float32 turns it into an occasional float32 rounding flip (Hugging Face's eager attention takes
its softmax in float32 even in a float64 model; one flip moves one attention weight by 2^-24
relative). Broken rotations move the outputs by O(1e-3 … 1): 5e-4 for the generic rotation of a
tiny RoPE Llama at Hugging Face's initialisation scale 0.02, 0.5–1.4 at weight scale 0.4."""
QK_CERTIFY_RATIO = 1e-3
"""Largest ratio of a QK basis's output change to the reference (queries-only) rotation's for
which the basis certifies: true symmetries give 0 or rounding, broken bases a ratio of order 1
(module docstring)."""
QK_BASES = (
    "so(d_head)",
    "rope-partial-half",
    "rope-partial-interleaved",
    "rope-half",
    "rope-interleaved",
)
"""QK rotation bases tried in order by certification (module docstring): the larger spans first
(under partial RoPE a full-head plane basis certifies at most a subgroup of the partial one)."""


def qk_basis(name: str, d: int, rotary: int | None = None) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)`` of the generators ``E_ij − E_ji`` of QK basis ``name`` in
    ``so(d)``: all ``i < j`` for ``"so(d_head)"``, ``(i, i + d/2)`` for ``"rope-half"``,
    ``(2i, 2i + 1)`` for ``"rope-interleaved"`` (the plane bases need an even ``d``). The partial
    bases rotate only the first ``rotary`` dimensions by position (even ``rotary < d``; ``[]``
    without it): their planes ``(i, i + rotary/2)`` (``"rope-partial-half"``) or ``(2i, 2i + 1)``
    (``"rope-partial-interleaved"``) for ``i < rotary/2``, and all of ``so`` of the other
    ``d − rotary`` dimensions, which no position touches.

    >>> qk_basis("rope-half", 4), qk_basis("rope-interleaved", 4), len(qk_basis("so(d_head)", 4))
    ([(0, 2), (1, 3)], [(0, 1), (2, 3)], 6)
    >>> qk_basis("rope-partial-half", 6, rotary=4)
    [(0, 2), (1, 3), (4, 5)]
    """
    if name not in QK_BASES:
        raise ValueError(f"qk_basis: name={name!r}; expected one of {QK_BASES}")
    if name == "so(d_head)":
        return [(i, j) for i in range(d) for j in range(i + 1, d)]
    if name.startswith("rope-partial"):
        if rotary is None or rotary % 2 or not 0 < rotary < d:
            return []
        free = [(i, j) for i in range(rotary, d) for j in range(i + 1, d)]
        half = "half" if name.endswith("half") else "interleaved"
        return qk_basis(f"rope-{half}", rotary) + free
    if d % 2:
        return []
    if name == "rope-half":
        return [(i, i + d // 2) for i in range(d // 2)]
    return [(2 * i, 2 * i + 1) for i in range(d // 2)]


def qk_scale_generators(
    name: str, d: int, device: torch.device, rotary: int | None = None
) -> list[Tensor]:
    """The symmetric generators that complete QK basis ``name``'s rotations to the commutant of
    what the module does to queries and keys after the projections (module docstring, "QK
    scales"): all of ``sym(d)`` (``E_ii``, ``E_ij + E_ji``; ``d(d + 1)/2``) for ``"so(d_head)"``,
    whose commutant is ``GL(d)``; the scale ``E_ii + E_jj`` of each rotary plane ``(i, j)`` for
    the plane bases (rotation and scale of a plane: multiplication by a complex number, which
    commutes with the plane's rotation by position); for the partial bases the rotary planes'
    scales and ``sym`` of the ``d − rotary`` dimensions no position touches.

    >>> len(qk_scale_generators("so(d_head)", 4, torch.device("cpu")))
    10
    >>> [g.diagonal().tolist() for g in qk_scale_generators("rope-half", 4, torch.device("cpu"))]
    [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]]
    """

    def unit(i: int, j: int) -> Tensor:
        m = torch.zeros(d, d, dtype=torch.float64, device=device)
        m[i, j] += 1.0
        m[j, i] += 1.0 if i != j else 0.0
        return m

    def sym(dims: range) -> list[Tensor]:
        return [unit(i, j) for i in dims for j in dims if j >= i]

    def planes(pairs: list[tuple[int, int]]) -> list[Tensor]:
        return [unit(i, i) + unit(j, j) for i, j in pairs]

    if name == "so(d_head)":
        return sym(range(d))
    if name.startswith("rope-partial"):
        if rotary is None or rotary % 2 or not 0 < rotary < d:
            return []
        half = "half" if name.endswith("half") else "interleaved"
        return planes(qk_basis(f"rope-{half}", rotary)) + sym(range(rotary, d))
    return planes(qk_basis(name, d))


def _generic_of(gens: list[Tensor], seed: int) -> Tensor:
    """A seeded generic element ``Σ_k c_k G_k`` of the span of ``gens``, spectral norm 1."""
    gen = torch.Generator().manual_seed(seed)
    coef = torch.randn(len(gens), generator=gen, dtype=torch.float64)
    m = sum(float(c) * g for c, g in zip(coef, gens, strict=True))
    return m / torch.linalg.matrix_norm(m, ord=2)


def _generator(d: int, pair: tuple[int, int], device: torch.device) -> Tensor:
    s = torch.zeros(d, d, dtype=torch.float64, device=device)
    s[pair[0], pair[1]], s[pair[1], pair[0]] = 1.0, -1.0
    return s


def _generic(pairs: list[tuple[int, int]], d: int, seed: int, device: torch.device) -> Tensor:
    """A seeded generic element of the span of ``pairs``' generators, spectral norm 1."""
    gen = torch.Generator().manual_seed(seed)
    coef = torch.randn(len(pairs), generator=gen, dtype=torch.float64).to(device)
    s = torch.zeros(d, d, dtype=torch.float64, device=device)
    if pairs:  # Σ_p c_p (E_ij − E_ji), written entry by entry (the pairs are distinct)
        i, j = (torch.tensor(idx, device=device) for idx in zip(*pairs, strict=True))
        s[i, j], s[j, i] = coef, -coef
    return s / torch.linalg.matrix_norm(s, ord=2)


QK_WEIGHT_GENERATOR_RTOL = 1e-10
"""Below this Frobenius norm, relative to ``Σ_h ‖Q̃_h‖·‖K̃_g‖``, the weight-built QK generator
``P(M − Mᵀ)`` counts as vanishing and a seeded generic one is used (module docstring); rounding
leaves ~1e-16 relative where ``Q̃_h = K̃_g`` exactly."""


def _weights_generator(
    orbit: QKRotation, params: dict[str, Tensor], g: int, pairs: list[tuple[int, int]]
) -> Tensor | None:
    """``S_g = P(M − Mᵀ) / ‖P(M − Mᵀ)‖₂`` with ``M = Σ_{h ∈ group(g)} Q̃_h K̃_gᵀ`` (d_h × d_h;
    module docstring), ``P`` keeping the entries of ``pairs``; None where it vanishes."""
    lay, d = orbit.layout, orbit.layout.d_head

    def block(keys: tuple[str, str | None, int], head: int) -> Tensor:
        w_key, b_key, off = keys
        rows = lay.rows(off, head)
        parts = [params[orbit.prefix + w_key][rows].reshape(d, -1)]
        if b_key is not None:
            parts.append(params[orbit.prefix + b_key][rows].reshape(d, 1))
        return torch.cat(parts, dim=1).to(torch.float64)

    k = block(lay.k, g)
    qs = [block(lay.q, h) for h in lay.group(g)]
    m = sum(q @ k.T for q in qs)
    scale = sum(float(torch.linalg.norm(q)) for q in qs) * float(torch.linalg.norm(k))
    keep = torch.zeros(d, d, dtype=torch.bool, device=k.device)
    if pairs:
        i, j = (torch.tensor(idx, device=k.device) for idx in zip(*pairs, strict=True))
        keep[i, j] = keep[j, i] = True
    s_mat = torch.where(keep, m - m.T, torch.zeros_like(m))
    if not float(torch.linalg.norm(s_mat)) > QK_WEIGHT_GENERATOR_RTOL * scale:
        return None
    return s_mat / torch.linalg.matrix_norm(s_mat, ord=2)


@dataclass(frozen=True)
class QKRotation:
    """The QK rotation orbit of one attention module (full parameter keys; module docstring)."""

    layout: AttentionLayout
    prefix: str

    def _blocks(self, g: int, roles: tuple[str, ...] = ("q", "k")) -> list[tuple[str, str, slice]]:
        """``(role, parameter key, rows)`` moved by KV head ``g``'s group element (Q of its query
        heads, K of ``g``; weights and biases), restricted to ``roles``."""
        lay = self.layout
        out = []
        for role, (w_key, b_key, off), heads in (("q", lay.q, lay.group(g)), ("k", lay.k, (g,))):
            if role not in roles:
                continue
            for h in heads:
                rows = lay.rows(off, h)
                out += [(role, self.prefix + k, rows) for k in (w_key, b_key) if k is not None]
        return out

    def tangent(self, params: dict[str, Tensor], g: int, s_mat: Tensor) -> dict[str, Tensor]:
        """The tangent of ``A = exp(tM)`` (``M = s_mat``, d_h × d_h): ``M W[rows]`` on K's
        blocks of KV head ``g`` and ``−Mᵀ W[rows]`` on its query heads' (``q → A^{−T} q``); for
        a rotation generator (``Mᵀ = −M``) both are ``M W[rows]``. Zeros elsewhere in those
        tensors."""
        t: dict[str, Tensor] = {}
        for role, key, rows in self._blocks(g):
            d = t.get(key, torch.zeros_like(params[key]))
            d[rows] = (s_mat if role == "k" else -s_mat.T) @ params[key][rows]
            t[key] = d
        return t

    def act(
        self,
        params: dict[str, Tensor],
        rotations: dict[int, Tensor],
        roles: tuple[str, ...] = ("q", "k"),
    ) -> dict[str, Tensor]:
        """The group element ``A = rotations[g]`` (d_h × d_h, invertible) of every KV head
        ``g`` given: its K rows times ``A``, its query heads' Q rows times ``A^{−T}`` (``= A``
        for a rotation), so every score ``q_hᵀ k_g`` is unchanged. With ``roles=("q",)`` only
        the queries move: no symmetry, the reference move of the QK certification (module
        docstring)."""
        out: dict[str, Tensor] = {}
        for g, a in rotations.items():
            inv_t = torch.linalg.inv(a).T
            for role, key, rows in self._blocks(g, roles):
                w = out.get(key, params[key].clone())
                w[rows] = (a if role == "k" else inv_t) @ params[key][rows]
                out[key] = w
        return out

    def tangent_reference(
        self, params: dict[str, Tensor], g: int, s_mat: Tensor
    ) -> dict[str, Tensor]:
        """Oracle of `tangent`: ``d/dt act(params, {g: exp(tM)})`` at ``t = 0`` (forward AD)."""
        zero = torch.zeros((), dtype=torch.float64, device=s_mat.device)
        one = torch.ones_like(zero)
        _, out = torch.func.jvp(
            lambda t: self.act(params, {g: torch.linalg.matrix_exp(t * s_mat)}), (zero,), (one,)
        )
        return out


@dataclass(frozen=True)
class VORescale:
    """The VO rescale orbit of one attention module (full parameter keys; module docstring)."""

    layout: AttentionLayout
    prefix: str

    def _v_rows(self, g: int) -> tuple[list[str], slice]:
        w_key, b_key, off = self.layout.v
        keys = [self.prefix + k for k in (w_key, b_key) if k is not None]
        return keys, self.layout.rows(off, g)

    def _o_cols(self, g: int) -> list[slice]:
        dh = self.layout.d_head
        return [slice(h * dh, (h + 1) * dh) for h in self.layout.group(g)]

    def tangent(self, params: dict[str, Tensor], g: int) -> dict[str, Tensor]:
        """``(W_V[r_g], b_V[r_g], −W_O[:, r_h] ∀h ∈ g)``, zeros elsewhere in those tensors."""
        keys, rows = self._v_rows(g)
        t: dict[str, Tensor] = {}
        for key in keys:
            d = t.get(key, torch.zeros_like(params[key]))
            d[rows] = params[key][rows]
            t[key] = d
        o_key = self.prefix + self.layout.o
        do = torch.zeros_like(params[o_key])
        for cols in self._o_cols(g):
            do[:, cols] = -params[o_key][:, cols]
        t[o_key] = do
        return t

    def act(self, params: dict[str, Tensor], factors: Tensor) -> dict[str, Tensor]:
        """The group element: KV head ``g``'s V rows times ``factors[g]``, the output columns of
        its query heads over ``factors[g]`` (``factors`` shape ``(kv_heads,)``, positive)."""
        out: dict[str, Tensor] = {}
        o_key = self.prefix + self.layout.o
        for g in range(self.layout.n_kv):
            keys, rows = self._v_rows(g)
            for key in keys:
                w = out.get(key, params[key].clone())
                w[rows] = factors[g] * params[key][rows]
                out[key] = w
            w = out.get(o_key, params[o_key].clone())
            for cols in self._o_cols(g):
                w[:, cols] = params[o_key][:, cols] / factors[g]
            out[o_key] = w
        return out

    def matrix_tangent(self, params: dict[str, Tensor], g: int, m: Tensor) -> dict[str, Tensor]:
        """The tangent of ``V_g → A V_g``, ``O[:, r_h] → O[:, r_h] A^{−1}`` (every ``h ∈ g``)
        at ``A = exp(tM)``, ``t = 0``: ``(M W_V[r_g], M b_V[r_g], −W_O[:, r_h] M ∀h ∈ g)``;
        ``M = I`` is `tangent`'s scalar rescale."""
        keys, rows = self._v_rows(g)
        t: dict[str, Tensor] = {}
        for key in keys:
            d = t.get(key, torch.zeros_like(params[key]))
            d[rows] = m @ params[key][rows]
            t[key] = d
        o_key = self.prefix + self.layout.o
        do = torch.zeros_like(params[o_key])
        for cols in self._o_cols(g):
            do[:, cols] = -params[o_key][:, cols] @ m
        t[o_key] = do
        return t

    def act_matrices(
        self,
        params: dict[str, Tensor],
        mats: dict[int, Tensor],
        roles: tuple[str, ...] = ("v", "o"),
    ) -> dict[str, Tensor]:
        """The group element ``A = mats[g]`` (d_h × d_h, invertible) of every KV head ``g``
        given: its V rows times ``A``, its query heads' output columns times ``A^{−1}``. With
        ``roles=("v",)`` only V moves: no symmetry, the reference move of the GL certification."""
        out: dict[str, Tensor] = {}
        o_key = self.prefix + self.layout.o
        for g, a in mats.items():
            keys, rows = self._v_rows(g)
            for key in keys:
                w = out.get(key, params[key].clone())
                w[rows] = a @ params[key][rows]
                out[key] = w
            if "o" in roles:
                w = out.get(o_key, params[o_key].clone())
                inv = torch.linalg.inv(a)
                for cols in self._o_cols(g):
                    w[:, cols] = params[o_key][:, cols] @ inv
                out[o_key] = w
        return out

    def matrix_tangent_reference(
        self, params: dict[str, Tensor], g: int, m: Tensor
    ) -> dict[str, Tensor]:
        """Oracle of `matrix_tangent`: ``d/dt act_matrices(params, {g: exp(tM)})`` at ``t = 0``
        (forward AD)."""
        zero = torch.zeros((), dtype=torch.float64, device=m.device)
        one = torch.ones_like(zero)
        _, out = torch.func.jvp(
            lambda t: self.act_matrices(params, {g: torch.linalg.matrix_exp(t * m)}),
            (zero,),
            (one,),
        )
        return out

    def tangent_reference(self, params: dict[str, Tensor], g: int) -> dict[str, Tensor]:
        """Oracle of `tangent`: ``d/dc_g act(params, c)`` at ``c = 𝟙`` by forward-mode AD."""
        ref = params[self.prefix + self.layout.o]
        ones = torch.ones(self.layout.n_kv, dtype=ref.dtype, device=ref.device)
        e_g = torch.zeros_like(ones)
        e_g[g] = 1.0
        _, out = torch.func.jvp(lambda c: self.act(params, c), (ones,), (e_g,))
        return out


def _nonzero(t: dict[str, Tensor]) -> bool:
    return any(bool(v.ne(0).any()) for v in t.values())


def _full(prefix: str, layer: str) -> str:
    return f"{prefix}{layer}" if layer else prefix.rstrip(".")


class AttentionDetector:
    """QK-rotation and VO-rescale gauge candidates per KV head (module docstring)."""

    name = "attention"

    def applies_to(self, module: nn.Module) -> bool:
        """Recognised attention modules (and MultiheadAttention's uncalled ``out_proj``)."""
        if type(module).__name__ == "NonDynamicallyQuantizableLinear":
            return True
        return attention_layout(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """A QK-rotation and a VO-rescale candidate per KV head, as the layout and certification
        allow; a KV head whose tangent is zero (its weights are zero) gets none."""
        lay = attention_layout(module)
        if lay is None:
            return []
        prefix = f"{name}." if name else ""
        out: list[Candidate] = []
        if lay.propose_qk and lay.qk_symmetric and lay.d_head >= 2:
            out += self._qk(ctx, prefix, name, lay)
        if lay.o is not None:
            out += self._vo(ctx, prefix, name, lay)
        return ctx.canonical(out)

    @staticmethod
    def _qk_basis(
        ctx: DetectionContext, orbit: QKRotation
    ) -> tuple[str, list[tuple[int, int]], dict[str, Any]] | None:
        """The QK basis to propose and its certification record, or None (module docstring)."""
        lay, dh = orbit.layout, orbit.layout.d_head
        dev = ctx.params[orbit.prefix + lay.q[0]].device

        def rotations(pairs: list[tuple[int, int]]) -> dict[int, Tensor]:
            return {
                g: torch.linalg.matrix_exp(CERTIFY_ANGLE * _generic(pairs, dh, 2000 + g, dev))
                for g in range(lay.n_kv)
            }

        full = qk_basis(QK_BASES[0], dh)
        reference = relative_change(ctx, orbit.act(ctx.params, rotations(full), roles=("q",)))
        if not 0.0 < reference < float("inf"):
            return None  # the outputs do not see the scores: nothing can be certified
        rejected: dict[str, float | None] = {}
        for basis in QK_BASES:
            pairs = qk_basis(basis, dh, lay.rotary_dims)
            if not pairs:
                continue
            change = relative_change(ctx, orbit.act(ctx.params, rotations(pairs)))
            if change <= QK_CERTIFY_RTOL and change <= QK_CERTIFY_RATIO * reference:
                record = {"certified": change, "reference": reference, "rejected": rejected}
                return basis, pairs, record
            rejected[basis] = change if change < float("inf") else None
        return None

    @staticmethod
    def _qk_scales(
        ctx: DetectionContext, orbit: QKRotation, basis: str, reference: float
    ) -> tuple[list[Tensor], float] | None:
        """The scale generators completing ``basis`` (`qk_scale_generators`) and the relative
        change of their certification, or None when they do not certify (module docstring:
        ``exp(M_g)`` with a seeded generic symmetric ``M_g`` of spectral norm ``CERTIFY_ANGLE``
        on every KV head, keys times it, queries times its inverse)."""
        lay = orbit.layout
        dev = ctx.params[orbit.prefix + lay.q[0]].device
        gens = qk_scale_generators(basis, lay.d_head, dev, lay.rotary_dims)
        if not gens:
            return None
        moves = {
            g: torch.linalg.matrix_exp(CERTIFY_ANGLE * _generic_of(gens, 3000 + g).to(dev))
            for g in range(lay.n_kv)
        }
        change = relative_change(ctx, orbit.act(ctx.params, moves))
        if change <= QK_CERTIFY_RTOL and change <= QK_CERTIFY_RATIO * reference:
            return gens, change
        return None

    def _qk(
        self, ctx: DetectionContext, prefix: str, name: str, lay: AttentionLayout
    ) -> list[Candidate]:
        orbit = QKRotation(lay, prefix)
        chosen = self._qk_basis(ctx, orbit)
        if chosen is None:
            return []
        basis, pairs, record = chosen
        dh = lay.d_head
        dev = ctx.params[prefix + lay.q[0]].device
        scales = self._qk_scales(ctx, orbit, basis, record["reference"])
        mats = [_generator(dh, p, dev) for p in pairs] + (scales[0] if scales else [])
        layers = tuple(
            dict.fromkeys((_full(prefix, lay.layers["q"]), _full(prefix, lay.layers["k"])))
        )
        out = []
        for g in range(lay.n_kv):
            s_mat = _weights_generator(orbit, ctx.params, g, pairs)
            kind = "weights" if s_mat is not None else "seeded"
            if s_mat is None:
                s_mat = _generic(pairs, dh, 1000 + g, dev)
            tangent = orbit.tangent(ctx.params, g, s_mat)
            if not _nonzero(tangent):
                continue
            u = normalise(tangent)
            del tangent
            cap = generator_cap(sum(ctx.params[key].numel() for key in u))
            info = {"module": name, "head": g, "d_head": dh, "basis": basis, "generator": kind}
            info.update(
                certified=record["certified"],
                reference=record["reference"],
                rejected=dict(record["rejected"]),
                scales=None if scales is None else scales[1],
                n_scales=len(mats) - len(pairs),
            )
            if len(mats) <= cap:
                gens = tuple(orbit.tangent(ctx.params, g, m) for m in mats)
            else:  # u (in the span) first, then as many basis tangents as the budget allows
                kept = mats[: cap - 1]
                gens = (u, *(orbit.tangent(ctx.params, g, m) for m in kept))
                # u counts among the generators found and kept (it is not a basis element)
                info["truncated"] = truncation_record(cap, len(mats) + 1, len(gens))
            if lay.n_kv != lay.heads:
                info["query_heads"] = list(lay.group(g))
            out.append(
                Candidate(
                    layers=layers,
                    detector="qk-rotation",
                    u=u,
                    gauge="curved",
                    gauge_generators=gens,
                    info=info,
                )
            )
        return out

    @staticmethod
    def _vo(ctx: DetectionContext, prefix: str, name: str, lay: AttentionLayout) -> list[Candidate]:
        orbit = VORescale(lay, prefix)
        ref = ctx.params[prefix + lay.o]
        change = relative_change(ctx, orbit.act(ctx.params, alternating_factors(lay.n_kv, ref)))
        if not change <= CERTIFY_RTOL:
            return []
        layers = tuple(
            dict.fromkeys((_full(prefix, lay.layers["v"]), _full(prefix, lay.layers["o"])))
        )
        dh, dev = lay.d_head, ref.device
        gl = _vo_gl_certified(ctx, orbit)
        mats = [_unit_matrix(dh, i, j, dev) for i in range(dh) for j in range(dh)] if gl else []
        out = []
        for g in range(lay.n_kv):
            t = orbit.tangent(ctx.params, g)
            if not _nonzero(t):
                continue
            info: dict[str, Any] = {"module": name, "head": g, "certified": change}
            info["gl"] = None if gl is None else {"certified": gl[0], "reference": gl[1]}
            if lay.n_kv != lay.heads:
                info["query_heads"] = list(lay.group(g))
            u = normalise(t)  # u spans the scalar rescale's tangent line: u first
            cap = generator_cap(sum(ctx.params[key].numel() for key in u))
            kept = mats[: cap - 1]
            gens = (u, *(orbit.matrix_tangent(ctx.params, g, m) for m in kept))
            if len(kept) < len(mats):
                info["truncated"] = truncation_record(cap, len(mats) + 1, len(gens))
            out.append(
                Candidate(
                    layers=layers,
                    detector="vo-rescale",
                    u=u,
                    gauge="curved",
                    gauge_generators=gens,
                    info=info,
                )
            )
        return out


def _unit_matrix(d: int, i: int, j: int, device: torch.device) -> Tensor:
    m = torch.zeros(d, d, dtype=torch.float64, device=device)
    m[i, j] = 1.0
    return m


def _vo_gl_certified(ctx: DetectionContext, orbit: VORescale) -> tuple[float, float] | None:
    """``(change, reference)`` when the per-KV-head ``GL(d_h)`` of V against the output columns
    certifies (module docstring, "VO"), else None: ``A_g = exp(M_g)``, ``M_g`` a seeded generic
    matrix of spectral norm ``CERTIFY_ANGLE``, on every KV head, against V alone moved by the
    same ``A_g`` (the reference, no symmetry)."""
    lay = orbit.layout
    dev = ctx.params[orbit.prefix + lay.o].device
    full = [
        _unit_matrix(lay.d_head, i, j, dev) for i in range(lay.d_head) for j in range(lay.d_head)
    ]
    moves = {
        g: torch.linalg.matrix_exp(CERTIFY_ANGLE * _generic_of(full, 4000 + g).to(dev))
        for g in range(lay.n_kv)
    }
    reference = relative_change(ctx, orbit.act_matrices(ctx.params, moves, roles=("v",)))
    if not 0.0 < reference < float("inf"):
        return None
    change = relative_change(ctx, orbit.act_matrices(ctx.params, moves))
    if change <= QK_CERTIFY_RTOL and change <= QK_CERTIFY_RATIO * reference:
        return change, reference
    return None
