"""Which modules are attention, and where their heads live: `attention_layout`.

Heads come from an int ``n_heads``/``num_heads``/``num_attention_heads``/``n_head``/``nhead``/
``heads``/``n_local_heads`` attribute or, for Hugging Face modules such as ``LlamaAttention``, from
``module.config.num_attention_heads``; grouped-query attention from the module's
``num_key_value_heads`` (or ``n_kv_heads``/``n_kv_head``/``num_kv_heads``/``n_local_kv_heads``),
the config's ``num_key_value_heads``, or ``num_key_value_groups``; the
head width from an int ``head_dim``, else ``q.out_features / heads``. Recognised layouts:

* separate ``nn.Linear`` projections — ``q_proj``/``k_proj``/``v_proj`` (Llama, timm),
  ``query``/``key``/``value`` (BERT), ``q_lin``/``k_lin``/``v_lin`` (DistilBERT),
  ``q``/``k``/``v`` (T5), ``wq``/``wk``/``wv`` (Meta's Llama, llama2.c),
  ``query_proj``/``key_proj``/``value_proj`` (DeBERTa) or ``to_q``/``to_k``/``to_v`` (diffusers)
  — and an output
  ``out_proj``/``o_proj``/``proj``/``out_lin``/``dense`` (Phi)/``c_proj``/``o``/``wo``; without an
  output projection (BERT's self-attention, diffusers' ``to_out`` list) only Q, K, V are known.
  The projection widths must agree (``q``: heads·d_h, ``k``/``v``: kv_heads·d_h, output columns
  heads·d_h), else the module is not recognised;
* the Hugging Face BERT wrapper (``BertAttention``): children ``self`` (a self-attention as above
  without output projection) and ``output`` with an ``nn.Linear`` ``dense`` reading the
  concatenated heads (QK left to ``self``: ``propose_qk=False``);
* a fused ``qkv`` (timm) or ``c_attn`` (GPT-2, read as ``nn.Linear``:
  `neuromanifold.singular.adapt`) Linear with rows ``[Q; K; V]`` (no GQA);
* ``nn.MultiheadAttention`` with packed ``in_proj_weight``/``in_proj_bias`` and ``out_proj``;
* GPT-NeoX (Pythia): a fused ``query_key_value`` Linear whose rows are grouped per head,
  ``[Q_h; K_h; V_h]`` for each head in turn (head stride ``3·d_h``), and the output ``dense``;
  heads from ``config``;
* Phi-3: a fused ``qkv_proj`` Linear with rows ``[Q; K; V]`` of widths heads·d_h, kv·d_h,
  kv·d_h (grouped-query attention allowed) and the output ``o_proj`` (s27 audit LLAMA D2).

Query head ``h`` owns rows ``offset + h·stride … + d_h`` of Q (``stride = d_h`` except in the
per-head grouped layout) and columns ``h·d_h … (h+1)·d_h`` of the output; KV head ``g`` owns the
rows ``offset + g·stride …`` of K and V; query head ``h`` reads KV head ``⌊h / n_rep⌋``,
``n_rep = heads / kv_heads`` (Hugging Face's ``repeat_kv``). A module's int ``rotary_ndims``
(GPT-NeoX, Phi) or ``rotary_dim`` (GPT-J) — rotary embedding on the leading dimensions of each
head only — is kept as ``rotary_dims`` for the QK bases when it is below ``d_h``; where the
module states none, a Hugging Face config's ``partial_rotary_factor`` gives it (Phi-3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

__all__ = ["AttentionLayout", "attention_layout", "unrecognised_attention"]

_HEADS = (
    "n_heads",
    "num_heads",
    "num_attention_heads",
    "n_head",
    "nhead",
    "heads",
    "n_local_heads",
)
_KV_HEADS = ("num_key_value_heads", "n_kv_heads", "n_kv_head", "num_kv_heads", "n_local_kv_heads")
_Q = ("q_proj", "query", "q_lin", "q", "wq", "query_proj", "to_q")
_K = ("k_proj", "key", "k_lin", "k", "wk", "key_proj", "to_k")
_V = ("v_proj", "value", "v_lin", "v", "wv", "value_proj", "to_v")
_O = ("out_proj", "o_proj", "proj", "out_lin", "dense", "c_proj", "o", "wo")
_FUSED = ("qkv", "c_attn", "query_key_value", "qkv_proj", "Wqkv")


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
    head_stride: int | None = None
    rotary_dims: int | None = None

    @property
    def n_kv(self) -> int:
        """KV heads (``heads`` without GQA)."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def d_head(self) -> int:
        """Head width ``d_h``."""
        return self.embed // self.heads if self.head_dim is None else self.head_dim

    def rows(self, offset: int, head: int) -> slice:
        """Rows of ``head`` in a projection whose heads start at ``offset``: ``d_h`` rows from
        ``offset + head·stride`` (``stride``: ``head_stride``, else ``d_h``).

        >>> lay = AttentionLayout(2, 8, ("w", None, 0), ("w", None, 4), ("w", None, 8), None, {},
        ...                       head_stride=12)
        >>> lay.rows(4, 1)
        slice(16, 20, None)
        """
        stride = self.d_head if self.head_stride is None else self.head_stride
        return slice(offset + head * stride, offset + head * stride + self.d_head)

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
    kv = next((_int(module, a) for a in _KV_HEADS if _int(module, a) is not None), None)
    kv = kv or _int(cfg, "num_key_value_heads")
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
    rot = _int(module, "rotary_ndims") or _int(module, "rotary_dim")
    o = pick(*_O)
    q, k, v = pick(*_Q), pick(*_K), pick(*_V)
    if q and k and v:
        e = kids[q].out_features
        dh = head_dim or e // heads
        kv = kv_heads or heads
        widths = (kids[k].out_features, kids[v].out_features)
        if kv < 1 or heads % kv or e != heads * dh or widths != (kv * dh, kv * dh):
            return None
        if o and kids[o].in_features != e:
            return None
        rot = rot or _config_rotary(module, dh)
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
            rotary_dims=rot if rot is not None and rot < dh else None,
        )
    if isinstance(kids.get("query_key_value"), nn.Linear) and o and kv_heads in (None, heads):
        return _neox_layout(module, heads, o, rot)
    if isinstance(kids.get("qkv_proj"), nn.Linear) and o:
        return _fused_gqa_layout(module, (heads, kv_heads, head_dim), o, sym, rot)
    if from_config:
        return _wrapped_layout(module)
    qkv = pick("qkv", "c_attn")
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


def _config_rotary(module: nn.Module, d_head: int) -> int | None:
    """The rotary width ``int(d_h · partial_rotary_factor)`` that a Hugging Face config states
    where the module does not (Phi-3 reads it from ``config.rope_parameters`` or
    ``config.partial_rotary_factor``); None for a factor of 1 or none, or a width that is not
    an even number below ``d_h`` (s27b audit RERUN #3: a Phi-3 at factor 0.5 got the full-head
    planes, and a diagonal move of the two dimensions no position touches, an exact gauge,
    read genuine k = 2).

    >>> from types import SimpleNamespace as NS
    >>> _config_rotary(NS(config=NS(partial_rotary_factor=0.5)), 8)
    4
    >>> _config_rotary(NS(config=NS(rope_parameters={"partial_rotary_factor": 1.0})), 8) is None
    True
    """
    cfg = getattr(module, "config", None)
    factor = getattr(cfg, "partial_rotary_factor", None)
    params = getattr(cfg, "rope_parameters", None)
    if factor is None and isinstance(params, dict):
        factor = params.get("partial_rotary_factor")
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor < 1:
        return None
    width = int(d_head * factor)
    return width if 0 < width < d_head and width % 2 == 0 else None


def _neox_layout(module: nn.Module, heads: int, o: str, rot: int | None) -> AttentionLayout | None:
    """GPT-NeoX: ``query_key_value`` rows ``[Q_h; K_h; V_h]`` per head (stride ``3·d_h``)."""
    qkv = module.get_submodule("query_key_value")
    e = qkv.out_features // 3
    if qkv.out_features != 3 * e or e % heads or module.get_submodule(o).in_features != e:
        return None
    dh = e // heads
    return AttentionLayout(
        heads=heads,
        embed=e,
        q=_linear_keys("query_key_value", module, 0),
        k=_linear_keys("query_key_value", module, dh),
        v=_linear_keys("query_key_value", module, 2 * dh),
        o=f"{o}.weight",
        layers={"q": "query_key_value", "k": "query_key_value", "v": "query_key_value", "o": o},
        head_stride=3 * dh,
        rotary_dims=rot if rot is not None and rot < dh else None,
    )


def _fused_gqa_layout(
    module: nn.Module,
    counts: tuple[int, int | None, int | None],
    o: str,
    sym: bool,
    rot: int | None,
) -> AttentionLayout | None:
    """Phi-3: one ``qkv_proj`` Linear with rows ``[Q (heads·d_h); K (kv·d_h); V (kv·d_h)]``
    (grouped-query attention allowed) and the output ``o``; None when the widths disagree."""
    heads, kv_heads, head_dim = counts
    qkv = module.get_submodule("qkv_proj")
    kv = kv_heads or heads
    out = module.get_submodule(o)
    dh = head_dim or out.in_features // heads
    if kv < 1 or heads % kv or qkv.out_features != (heads + 2 * kv) * dh:
        return None
    if out.in_features != heads * dh:
        return None
    e = heads * dh
    rot = rot or _config_rotary(module, dh)
    return AttentionLayout(
        heads=heads,
        embed=e,
        q=_linear_keys("qkv_proj", module, 0),
        k=_linear_keys("qkv_proj", module, e),
        v=_linear_keys("qkv_proj", module, e + kv * dh),
        o=f"{o}.weight",
        layers={"q": "qkv_proj", "k": "qkv_proj", "v": "qkv_proj", "o": o},
        qk_symmetric=sym,
        kv_heads=None if kv == heads else kv,
        head_dim=None if head_dim is None else dh,
        rotary_dims=rot if rot is not None and rot < dh else None,
    )


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


def unrecognised_attention(module: nn.Module) -> str | None:
    """Why ``module``, which looks like an attention, has no `AttentionLayout`; None when it has
    one or does not look like one (``nn.Linear`` children named as query, key and value
    projections, or a fused one: ``qkv``, ``c_attn``, ``query_key_value``, ``qkv_proj``,
    ``Wqkv``). The reason is ``"no head count"`` (none under a name above; s32 trial ATTN #1, a
    hand-written attention keeping it as ``self.H``) or ``"layout not supported"`` (a head count
    but projections of other widths, or a fused projection with grouped-query attention). Its
    attention gauges are then not proposed, which the read says."""
    if isinstance(module, nn.MultiheadAttention) or attention_layout(module) is not None:
        return None
    kids = {n: m for n, m in module.named_children() if isinstance(m, nn.Linear)}
    separate = all(any(n in kids for n in names) for names in (_Q, _K, _V))
    if not (separate or any(n in kids for n in _FUSED)):
        return None
    return "no head count" if _head_counts(module) is None else "layout not supported"
