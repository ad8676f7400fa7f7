"""Attention detector: per-head QK rotations and value–output rescalings (curved gauges).

Recognised layouts (`attention_layout`; heads from an int ``n_heads``/``num_heads``/
``num_attention_heads`` attribute or, for Hugging Face modules such as ``LlamaAttention``, from
``module.config.num_attention_heads``):

* separate ``nn.Linear`` projections ``q_proj``/``k_proj``/``v_proj`` (or the BERT names
  ``query``/``key``/``value``) and an output ``out_proj``/``o_proj``/``proj``; BERT's self-attention
  has no output projection of its own, so only the QK rotation is proposed there. Grouped-query
  attention (GQA) is read from ``num_key_value_heads`` (module or config) or
  ``num_key_value_groups``; the head width from an int ``head_dim`` (module or config), else
  ``q_proj.out_features / heads``. The projection widths must agree (``q``: heads·d_h,
  ``k``/``v``: kv_heads·d_h, output columns heads·d_h), else the module is not recognised;
* the Hugging Face BERT wrapper (``BertAttention``): children ``self`` (a self-attention as above
  without output projection) and ``output`` with an ``nn.Linear`` ``dense`` reading the
  concatenated heads. It proposes the VO rescale across ``self.value`` and ``output.dense`` (the
  QK rotation is left to ``self``, so it is not proposed twice);
* a fused ``qkv`` Linear with rows ``[Q; K; V]`` and an output ``proj`` (timm layout);
* ``nn.MultiheadAttention`` with packed ``in_proj_weight``/``in_proj_bias`` and ``out_proj``.
  Its ``out_proj`` (a Linear subclass used through the functional kernel, never called) is covered
  by this detector.

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
and the relative output change ``max|f(g·θ) − f(θ)| / max|f(θ)|`` on the first
``CERTIFY_SAMPLES`` probe samples is measured (as `rescale.certify`). The first basis of
``so(d_h)``, ``rope-half``, ``rope-interleaved`` whose change is at most ``QK_CERTIFY_RTOL`` is
proposed, none if none certifies. ``info`` records ``basis``, ``certified`` (its change) and
``rejected`` (the changes of the bases tried before). ``u`` is the tangent of one seeded
generic ``S`` in the basis span, ``gauge_generators`` the tangents of the basis. Modules with a
per-head query/key norm (``q_norm``/``k_norm`` other than Identity) break the symmetry and get
no QK candidate.

VO rescale (``"vo-rescale"``, one candidate per KV head ``g``): ``V_g → cV_g`` and
``O[:, r_h] → O[:, r_h]/c`` for every ``h`` with ``g(h) = g`` has tangent
``(W_V[r_g], b_V[r_g], −W_O[:, r_h] ∀h ∈ g)`` (`VORescale`); it is certified like the rescales
(`rescale.certify`: factors ``2, ½, 2, …`` over the KV heads, powers of two, so a true symmetry
leaves the outputs bitwise unchanged; at most ``CERTIFY_RTOL``), ``info["certified"]`` records
the change, and nothing is proposed when it fails.

Both orbits are curved: a straight probe shows an apparent order 2, classed curved gauge through
the generators.

Not covered: partial rotary embeddings (RoPE on a leading part of each head, e.g. GPT-NeoX's
``rotary_pct``: the plane bases pair the wrong dimensions and fail certification, so nothing is
proposed), the larger commutant when two rotary planes share a frequency, the per-head
``GL(d_h)`` extensions (``W_Q → A W_Q``, ``W_K → A^{−T} W_K``; ``V → A V``,
``O → O A^{−1}``) beyond the rotation and the scalar rescale, and fused layouts with GQA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.utils._pytree import tree_leaves

from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.detectors.rescale import CERTIFY_RTOL, CERTIFY_SAMPLES

__all__ = [
    "CERTIFY_ANGLE",
    "QK_BASES",
    "QK_CERTIFY_RTOL",
    "AttentionDetector",
    "AttentionLayout",
    "QKRotation",
    "VORescale",
    "attention_layout",
    "qk_basis",
    "relative_change",
]

_HEADS = ("n_heads", "num_heads", "num_attention_heads")

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
QK_BASES = ("so(d_head)", "rope-half", "rope-interleaved")
"""QK rotation bases tried in order by certification (module docstring)."""


@dataclass(frozen=True)
class AttentionLayout:
    """Parameter keys (relative to the module) and row offsets of Q, K, V; output weight key.

    ``kv_heads`` (``None``: ``heads``) KV heads of width ``head_dim`` (``None``:
    ``embed // heads``).
    """

    heads: int
    embed: int
    q: tuple[str, str | None, int]
    k: tuple[str, str | None, int]
    v: tuple[str, str | None, int]
    o: str | None
    layers: dict[str, str]
    qk_symmetric: bool = True
    propose_qk: bool = True
    kv_heads: int | None = None
    head_dim: int | None = None

    @property
    def n_kv(self) -> int:
        """KV heads (``heads`` without GQA)."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def d_head(self) -> int:
        """Head width ``d_h``."""
        return self.embed // self.heads if self.head_dim is None else self.head_dim

    def group(self, g: int) -> tuple[int, ...]:
        """Query heads reading KV head ``g``: ``g·n_rep … (g+1)·n_rep − 1``."""
        rep = self.heads // self.n_kv
        return tuple(range(g * rep, (g + 1) * rep))


def _linear_keys(sub: str, module: nn.Module, offset: int) -> tuple[str, str | None, int]:
    lin = module.get_submodule(sub)
    return (f"{sub}.weight", f"{sub}.bias" if lin.bias is not None else None, offset)


def _int(obj: Any, name: str) -> int | None:
    v = getattr(obj, name, None)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _head_counts(module: nn.Module) -> tuple[int, int | None, int | None, bool] | None:
    """``(heads, kv_heads, head_dim, from_config)``, or None when no head count is found."""
    cfg = getattr(module, "config", None)
    heads = next((_int(module, a) for a in _HEADS if _int(module, a) is not None), None)
    from_config = heads is None
    if heads is None:
        heads = _int(cfg, "num_attention_heads")
        if heads is None:
            return None
    kv = _int(module, "num_key_value_heads") or _int(cfg, "num_key_value_heads")
    groups = _int(module, "num_key_value_groups")
    if kv is None and groups is not None:
        kv = heads // groups if heads % groups == 0 else -1
    dh = _int(module, "head_dim")
    if dh is None and from_config:
        dh = _int(cfg, "head_dim")
    return heads, kv, dh, from_config


def attention_layout(module: nn.Module) -> AttentionLayout | None:
    """The `AttentionLayout` of ``module`` or ``None`` if it is not a recognised attention."""
    if isinstance(module, nn.MultiheadAttention):
        if not module._qkv_same_embed_dim:
            return None
        e = module.embed_dim
        b = "in_proj_bias" if module.in_proj_bias is not None else None
        return AttentionLayout(
            heads=module.num_heads,
            embed=e,
            q=("in_proj_weight", b, 0),
            k=("in_proj_weight", b, e),
            v=("in_proj_weight", b, 2 * e),
            o="out_proj.weight",
            layers={"q": "", "k": "", "v": "", "o": "out_proj"},
        )
    counts = _head_counts(module)
    if counts is None:
        return _wrapped_layout(module)
    heads, kv_heads, head_dim, from_config = counts
    kids = dict(module.named_children())

    def pick(*names: str) -> str | None:
        return next((n for n in names if isinstance(kids.get(n), nn.Linear)), None)

    sym = all(isinstance(kids.get(n), nn.Identity) or n not in kids for n in ("q_norm", "k_norm"))
    o = pick("out_proj", "o_proj", "proj")
    q, k, v = pick("q_proj", "query", "q"), pick("k_proj", "key", "k"), pick("v_proj", "value", "v")
    if q and k and v:
        e = kids[q].out_features
        dh = head_dim or e // heads
        kv = kv_heads or heads
        widths = (kids[k].out_features, kids[v].out_features)
        if kv < 1 or heads % kv or e != heads * dh or widths != (kv * dh, kv * dh):
            return None
        if o and kids[o].in_features != e:
            return None
        return AttentionLayout(
            heads=heads,
            embed=e,
            q=_linear_keys(q, module, 0),
            k=_linear_keys(k, module, 0),
            v=_linear_keys(v, module, 0),
            o=f"{o}.weight" if o else None,
            layers={"q": q, "k": k, "v": v, "o": o or ""},
            qk_symmetric=sym,
            kv_heads=None if kv == heads else kv,
            head_dim=None if head_dim is None else dh,
        )
    if from_config:
        return _wrapped_layout(module)
    qkv = pick("qkv")
    if qkv and kv_heads in (None, heads):
        e = kids[qkv].out_features // 3
        return AttentionLayout(
            heads=heads,
            embed=e,
            q=_linear_keys(qkv, module, 0),
            k=_linear_keys(qkv, module, e),
            v=_linear_keys(qkv, module, 2 * e),
            o=f"{o}.weight" if o else None,
            layers={"q": qkv, "k": qkv, "v": qkv, "o": o or ""},
            qk_symmetric=sym,
        )
    return None


def _wrapped_layout(module: nn.Module) -> AttentionLayout | None:
    """BERT-style wrapper: ``self`` (Q, K, V, no output) and ``output.dense`` (the output)."""
    inner = getattr(module, "self", None)
    outer = getattr(module, "output", None)
    if not isinstance(inner, nn.Module) or not isinstance(outer, nn.Module):
        return None
    dense = getattr(outer, "dense", None)
    lay = attention_layout(inner)
    if lay is None or lay.o is not None or type(dense) is not nn.Linear:
        return None
    if dense.in_features != lay.embed:
        return None

    def sub(keys: tuple[str, str | None, int]) -> tuple[str, str | None, int]:
        return (f"self.{keys[0]}", None if keys[1] is None else f"self.{keys[1]}", keys[2])

    return AttentionLayout(
        heads=lay.heads,
        embed=lay.embed,
        q=sub(lay.q),
        k=sub(lay.k),
        v=sub(lay.v),
        o="output.dense.weight",
        layers={**{r: f"self.{n}" for r, n in lay.layers.items() if n}, "o": "output.dense"},
        qk_symmetric=lay.qk_symmetric,
        propose_qk=False,
        kv_heads=lay.kv_heads,
        head_dim=lay.head_dim,
    )


def qk_basis(name: str, d: int) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)`` of the generators ``E_ij − E_ji`` of QK basis ``name`` in
    ``so(d)``: all ``i < j`` for ``"so(d_head)"``, ``(i, i + d/2)`` for ``"rope-half"``,
    ``(2i, 2i + 1)`` for ``"rope-interleaved"`` (the plane bases need an even ``d``).

    >>> qk_basis("rope-half", 4), qk_basis("rope-interleaved", 4), len(qk_basis("so(d_head)", 4))
    ([(0, 2), (1, 3)], [(0, 1), (2, 3)], 6)
    """
    if name == "so(d_head)":
        return [(i, j) for i in range(d) for j in range(i + 1, d)]
    if name not in QK_BASES:
        raise ValueError(f"qk_basis: name={name!r}; expected one of {QK_BASES}")
    if d % 2:
        return []
    if name == "rope-half":
        return [(i, i + d // 2) for i in range(d // 2)]
    return [(2 * i, 2 * i + 1) for i in range(d // 2)]


def _generator(d: int, pair: tuple[int, int], device: torch.device) -> Tensor:
    s = torch.zeros(d, d, dtype=torch.float64, device=device)
    s[pair[0], pair[1]], s[pair[1], pair[0]] = 1.0, -1.0
    return s


def _generic(pairs: list[tuple[int, int]], d: int, seed: int, device: torch.device) -> Tensor:
    """A seeded generic element of the span of ``pairs``' generators, spectral norm 1."""
    gen = torch.Generator().manual_seed(seed)
    coef = torch.randn(len(pairs), generator=gen, dtype=torch.float64)
    s = sum(c * _generator(d, p, device) for c, p in zip(coef.tolist(), pairs, strict=True))
    return s / torch.linalg.matrix_norm(s, ord=2)


@dataclass(frozen=True)
class QKRotation:
    """The QK rotation orbit of one attention module (full parameter keys; module docstring)."""

    layout: AttentionLayout
    prefix: str

    def _blocks(self, g: int) -> list[tuple[str, slice]]:
        """``(parameter key, rows)`` moved by KV head ``g``'s rotation (Q of its query heads,
        K of ``g``; weights and biases)."""
        lay, dh = self.layout, self.layout.d_head
        out = []
        for (w_key, b_key, off), heads in ((lay.q, lay.group(g)), (lay.k, (g,))):
            for h in heads:
                rows = slice(off + h * dh, off + (h + 1) * dh)
                out += [(self.prefix + key, rows) for key in (w_key, b_key) if key is not None]
        return out

    def tangent(self, params: dict[str, Tensor], g: int, s_mat: Tensor) -> dict[str, Tensor]:
        """``S W[rows]`` on every block of KV head ``g`` (zeros elsewhere in those tensors)."""
        t: dict[str, Tensor] = {}
        for key, rows in self._blocks(g):
            d = t.get(key, torch.zeros_like(params[key]))
            d[rows] = s_mat @ params[key][rows]
            t[key] = d
        return t

    def act(self, params: dict[str, Tensor], rotations: dict[int, Tensor]) -> dict[str, Tensor]:
        """The group element: KV head ``g``'s blocks' rows times ``rotations[g]`` (d_h × d_h)."""
        out: dict[str, Tensor] = {}
        for g, r in rotations.items():
            for key, rows in self._blocks(g):
                w = out.get(key, params[key].clone())
                w[rows] = r @ params[key][rows]
                out[key] = w
        return out

    def tangent_reference(
        self, params: dict[str, Tensor], g: int, s_mat: Tensor
    ) -> dict[str, Tensor]:
        """Oracle of `tangent`: ``d/dt act(params, {g: exp(tS)})`` at ``t = 0`` (forward AD)."""
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
        dh = self.layout.d_head
        keys = [self.prefix + k for k in (w_key, b_key) if k is not None]
        return keys, slice(off + g * dh, off + (g + 1) * dh)

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

    def tangent_reference(self, params: dict[str, Tensor], g: int) -> dict[str, Tensor]:
        """Oracle of `tangent`: ``d/dc_g act(params, c)`` at ``c = 𝟙`` by forward-mode AD."""
        ref = params[self.prefix + self.layout.o]
        ones = torch.ones(self.layout.n_kv, dtype=ref.dtype, device=ref.device)
        e_g = torch.zeros_like(ones)
        e_g[g] = 1.0
        _, out = torch.func.jvp(lambda c: self.act(params, c), (ones,), (e_g,))
        return out


def relative_change(ctx: DetectionContext, moved: dict[str, Tensor]) -> float:
    """``max|f(θ') − f(θ)| / max|f(θ)|`` over the floating-point output tensors on the first
    ``CERTIFY_SAMPLES`` probe samples, ``θ'`` = the parameters with ``moved`` substituted (as
    `rescale.certify`); ``inf`` when the output holds no float tensor or a forward fails."""
    x = ctx.data[:CERTIFY_SAMPLES]

    def outputs(params: dict[str, Tensor]) -> list[Tensor]:
        out = functional_call(ctx.model, params, (x,))
        return [t for t in tree_leaves(out) if isinstance(t, Tensor) and t.is_floating_point()]

    try:
        with torch.no_grad():
            base = outputs(dict(ctx.params))
            acted = outputs({**dict(ctx.params), **moved})
    except (RuntimeError, ValueError, TypeError):  # a layout the model cannot run
        return float("inf")
    if not base or len(base) != len(acted):
        return float("inf")
    scale = max(float(t.abs().max()) for t in base if t.numel())
    diff = max(float((a - b).abs().max()) for a, b in zip(acted, base, strict=True) if a.numel())
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / scale


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
        rejected: dict[str, float] = {}
        for basis in QK_BASES:
            pairs = qk_basis(basis, dh)
            if not pairs:
                continue
            rot = {
                g: torch.linalg.matrix_exp(CERTIFY_ANGLE * _generic(pairs, dh, 2000 + g, dev))
                for g in range(lay.n_kv)
            }
            change = relative_change(ctx, orbit.act(ctx.params, rot))
            if change <= QK_CERTIFY_RTOL:
                return basis, pairs, {"certified": change, "rejected": rejected}
            rejected[basis] = change
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
        layers = tuple(
            dict.fromkeys((_full(prefix, lay.layers["q"]), _full(prefix, lay.layers["k"])))
        )
        out = []
        for g in range(lay.n_kv):
            gens = tuple(orbit.tangent(ctx.params, g, _generator(dh, p, dev)) for p in pairs)
            u = orbit.tangent(ctx.params, g, _generic(pairs, dh, 1000 + g, dev))
            if not _nonzero(u):
                continue
            info = {"module": name, "head": g, "d_head": dh, "basis": basis}
            info.update(certified=record["certified"], rejected=dict(record["rejected"]))
            if lay.n_kv != lay.heads:
                info["query_heads"] = list(lay.group(g))
            out.append(
                Candidate(
                    layers=layers,
                    detector="qk-rotation",
                    u=normalise(u),
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
        factors = torch.ones(lay.n_kv, dtype=torch.float64, device=ref.device)
        factors[0::2], factors[1::2] = 2.0, 0.5
        change = relative_change(ctx, orbit.act(ctx.params, factors))
        if not change <= CERTIFY_RTOL:
            return []
        layers = tuple(
            dict.fromkeys((_full(prefix, lay.layers["v"]), _full(prefix, lay.layers["o"])))
        )
        out = []
        for g in range(lay.n_kv):
            t = orbit.tangent(ctx.params, g)
            if not _nonzero(t):
                continue
            info: dict[str, Any] = {"module": name, "head": g, "certified": change}
            if lay.n_kv != lay.heads:
                info["query_heads"] = list(lay.group(g))
            out.append(
                Candidate(
                    layers=layers,
                    detector="vo-rescale",
                    u=normalise(t),
                    gauge="curved",
                    gauge_generators=(t,),
                    info=info,
                )
            )
        return out
