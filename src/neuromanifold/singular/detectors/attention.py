"""Attention detector: per-head QK rotations and value–output rescalings (curved gauges).

Recognised layouts (`attention_layout`; heads from ``n_heads``/``num_heads``/
``num_attention_heads``):

* separate ``nn.Linear`` projections ``q_proj``/``k_proj``/``v_proj`` (or the BERT names
  ``query``/``key``/``value``) and an output ``out_proj``/``o_proj``/``proj``; BERT's self-attention
  has no output projection of its own, so only the QK rotation is proposed there;
* the Hugging Face BERT wrapper (``BertAttention``): children ``self`` (a self-attention as above
  without output projection) and ``output`` with an ``nn.Linear`` ``dense`` reading the
  concatenated heads. It proposes the VO rescale across ``self.value`` and ``output.dense`` (the
  QK rotation is left to ``self``, so it is not proposed twice);
* a fused ``qkv`` Linear with rows ``[Q; K; V]`` and an output ``proj`` (timm layout);
* ``nn.MultiheadAttention`` with packed ``in_proj_weight``/``in_proj_bias`` and ``out_proj``.
  Its ``out_proj`` (a Linear subclass used through the functional kernel, never called) is covered
  by this detector.

Head ``h`` owns rows ``r_h = h·d_h … (h+1)·d_h`` of Q, K, V and columns ``r_h`` of the output.
Scores ``q_hᵀk_h`` are invariant under ``(q_h, k_h) → (R q_h, R k_h)``, ``R ∈ O(d_h)``: the orbit
tangent at θ0 is ``δW_Q[r_h] = S W_Q[r_h]``, ``δb_Q[r_h] = S b_Q[r_h]`` (same for K) for
``S ∈ so(d_h)``; one seeded generic ``S`` per head is proposed (``"qk-rotation"``), with the basis
generators ``E_ij − E_ji`` of that head as the gauge span. Modules with a per-head query/key norm
(``q_norm``/``k_norm`` other than Identity) break this symmetry and get no QK candidate. The
value–output rescale ``V_h → cV_h``, ``O[:, r_h] → O[:, r_h]/c`` has tangent
``(W_V[r_h], b_V[r_h], −W_O[:, r_h])`` (``"vo-rescale"``). Both orbits are curved: a straight probe
shows an apparent order 2, classed curved gauge through the generators.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise

__all__ = ["AttentionDetector", "AttentionLayout", "attention_layout"]

_HEADS = ("n_heads", "num_heads", "num_attention_heads")


@dataclass(frozen=True)
class AttentionLayout:
    """Parameter keys (relative to the module) and row offsets of Q, K, V; output weight key."""

    heads: int
    embed: int
    q: tuple[str, str | None, int]
    k: tuple[str, str | None, int]
    v: tuple[str, str | None, int]
    o: str | None
    layers: dict[str, str]
    qk_symmetric: bool = True
    propose_qk: bool = True


def _linear_keys(sub: str, module: nn.Module, offset: int) -> tuple[str, str | None, int]:
    lin = module.get_submodule(sub)
    return (f"{sub}.weight", f"{sub}.bias" if lin.bias is not None else None, offset)


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
    heads = next(
        (getattr(module, a) for a in _HEADS if isinstance(getattr(module, a, None), int)), None
    )
    if heads is None:
        return _wrapped_layout(module)
    kids = dict(module.named_children())

    def pick(*names: str) -> str | None:
        return next((n for n in names if isinstance(kids.get(n), nn.Linear)), None)

    sym = all(isinstance(kids.get(n), nn.Identity) or n not in kids for n in ("q_norm", "k_norm"))
    o = pick("out_proj", "o_proj", "proj")
    q, k, v = pick("q_proj", "query", "q"), pick("k_proj", "key", "k"), pick("v_proj", "value", "v")
    if q and k and v:
        e = kids[q].out_features
        return AttentionLayout(
            heads=heads,
            embed=e,
            q=_linear_keys(q, module, 0),
            k=_linear_keys(k, module, 0),
            v=_linear_keys(v, module, 0),
            o=f"{o}.weight" if o else None,
            layers={"q": q, "k": k, "v": v, "o": o or ""},
            qk_symmetric=sym,
        )
    qkv = pick("qkv")
    if qkv:
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
    )


def _skew(d: int, seed: int) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    m = torch.randn(d, d, generator=gen, dtype=torch.float64)
    return m - m.T


def _full(prefix: str, layer: str) -> str:
    return f"{prefix}{layer}" if layer else prefix.rstrip(".")


class AttentionDetector:
    """QK-rotation and VO-rescale gauge candidates per head (module docstring)."""

    name = "attention"

    def applies_to(self, module: nn.Module) -> bool:
        """Recognised attention modules (and MultiheadAttention's uncalled ``out_proj``)."""
        if type(module).__name__ == "NonDynamicallyQuantizableLinear":
            return True
        return attention_layout(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """A QK-rotation and a VO-rescale candidate per head (as the layout allows)."""
        lay = attention_layout(module)
        if lay is None:
            return []
        prefix = f"{name}." if name else ""
        dh = lay.embed // lay.heads
        out = []
        for h in range(lay.heads):
            if lay.propose_qk and lay.qk_symmetric and dh >= 2:
                out.append(self._qk(ctx, prefix, name, lay, h, dh))
            if lay.o is not None:
                out.append(self._vo(ctx, prefix, name, lay, h, dh))
        return ctx.canonical(out)

    @staticmethod
    def _qk(
        ctx: DetectionContext, prefix: str, name: str, lay: AttentionLayout, h: int, dh: int
    ) -> Candidate:
        dev = ctx.params[prefix + lay.q[0]].device

        def tangent(s_mat: Tensor) -> dict[str, Tensor]:
            t: dict[str, Tensor] = {}
            for w_key, b_key, off in (lay.q, lay.k):
                rows = slice(off + h * dh, off + (h + 1) * dh)
                for key in (w_key, b_key):
                    if key is None:
                        continue
                    full = prefix + key
                    base = ctx.params[full]
                    d = t.get(full, torch.zeros_like(base))
                    d[rows] = s_mat @ base[rows]
                    t[full] = d
            return t

        basis = []
        for i in range(dh):
            for j in range(i + 1, dh):
                s_ij = torch.zeros(dh, dh, dtype=torch.float64, device=dev)
                s_ij[i, j], s_ij[j, i] = 1.0, -1.0
                basis.append(tangent(s_ij))
        layers = tuple(
            dict.fromkeys((_full(prefix, lay.layers["q"]), _full(prefix, lay.layers["k"])))
        )
        return Candidate(
            layers=layers,
            detector="qk-rotation",
            u=normalise(tangent(_skew(dh, 1000 + h).to(dev))),
            gauge="curved",
            gauge_generators=tuple(basis),
            info={"module": name, "head": h, "d_head": dh},
        )

    @staticmethod
    def _vo(
        ctx: DetectionContext, prefix: str, name: str, lay: AttentionLayout, h: int, dh: int
    ) -> Candidate:
        w_key, b_key, off = lay.v
        rows = slice(off + h * dh, off + (h + 1) * dh)
        t: dict[str, Tensor] = {}
        for key in (w_key, b_key):
            if key is None:
                continue
            base = ctx.params[prefix + key]
            d = torch.zeros_like(base)
            d[rows] = base[rows]
            t[prefix + key] = d
        wo = ctx.params[prefix + lay.o]
        do = torch.zeros_like(wo)
        do[:, h * dh : (h + 1) * dh] = -wo[:, h * dh : (h + 1) * dh]
        t[prefix + lay.o] = do
        layers = tuple(
            dict.fromkeys((_full(prefix, lay.layers["v"]), _full(prefix, lay.layers["o"])))
        )
        return Candidate(
            layers=layers,
            detector="vo-rescale",
            u=normalise(t),
            gauge="curved",
            gauge_generators=(t,),
            info={"module": name, "head": h},
        )
