"""Attention detector: per-head QK rotations and value–output rescalings (curved gauges).

Recognised layouts (``n_heads`` from ``n_heads``/``num_heads``/``num_attention_heads``):

* separate projections ``q_proj``/``k_proj``/``v_proj`` and ``out_proj``/``o_proj`` (also the BERT
  names ``query``/``key``/``value``), each an ``nn.Linear``;
* a fused ``qkv`` Linear (rows ``[Q; K; V]``) with an output ``proj`` Linear (timm layout).

Head ``h`` owns rows ``r_h = h·d_h … (h+1)·d_h`` of Q, K, V and columns ``r_h`` of the output.
Scores ``q_hᵀk_h`` are invariant under ``(q_h, k_h) → (R q_h, R k_h)``, ``R ∈ O(d_h)``: the orbit
tangent at θ0 is ``δW_Q[r_h] = S W_Q[r_h]``, ``δb_Q[r_h] = S b_Q[r_h]`` (same for K) for
``S ∈ so(d_h)``; one seeded generic ``S`` per head is proposed (``"qk-rotation"``), with the basis
generators ``E_ij − E_ji`` of that head as the gauge span. The value–output rescale
``V_h → cV_h``, ``O[:, r_h] → O[:, r_h]/c`` has tangent ``(W_V[r_h], b_V[r_h], −W_O[:, r_h])``
(``"vo-rescale"``). Both orbits are curved: a straight probe shows an apparent order 2.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise

__all__ = ["AttentionDetector", "attention_layout"]

_HEADS = ("n_heads", "num_heads", "num_attention_heads")


def attention_layout(module: nn.Module) -> dict[str, object] | None:
    """``{"heads", "q", "k", "v", "o", "fused"}`` (submodule names) or ``None``."""
    heads = next(
        (getattr(module, a) for a in _HEADS if isinstance(getattr(module, a, None), int)), None
    )
    if heads is None:
        return None
    kids = dict(module.named_children())

    def pick(*names: str) -> str | None:
        return next((n for n in names if isinstance(kids.get(n), nn.Linear)), None)

    q, k, v = pick("q_proj", "query", "q"), pick("k_proj", "key", "k"), pick("v_proj", "value", "v")
    o = pick("out_proj", "o_proj", "proj", "dense")
    if q and k and v and o:
        return {"heads": heads, "q": q, "k": k, "v": v, "o": o, "fused": False}
    qkv = pick("qkv")
    if qkv and o:
        return {"heads": heads, "q": qkv, "k": qkv, "v": qkv, "o": o, "fused": True}
    return None


def _skew(d: int, seed: int) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    m = torch.randn(d, d, generator=gen, dtype=torch.float64)
    return m - m.T


class AttentionDetector:
    """QK-rotation and VO-rescale gauge candidates per head (module docstring)."""

    name = "attention"

    def applies_to(self, module: nn.Module) -> bool:
        """Modules with a recognised attention layout."""
        return attention_layout(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """Two curved-gauge candidates per head."""
        lay = attention_layout(module)
        prefix = f"{name}." if name else ""
        heads = int(lay["heads"])

        def par(sub: str, leaf: str) -> Tensor | None:
            return ctx.params.get(f"{prefix}{sub}.{leaf}")

        wq = par(lay["q"], "weight")
        d_model = wq.shape[1]
        e = module.get_submodule(lay["o"]).in_features
        dh = e // heads
        off = {"q": 0, "k": e, "v": 2 * e} if lay["fused"] else {"q": 0, "k": 0, "v": 0}
        out = []
        for h in range(heads):
            rows = {s: slice(off[s] + h * dh, off[s] + (h + 1) * dh) for s in ("q", "k", "v")}

            def qk_tangent(s_mat: Tensor, rows=rows) -> dict[str, Tensor]:
                t: dict[str, Tensor] = {}
                for side in ("q", "k"):
                    sub = lay[side]
                    w, b = par(sub, "weight"), par(sub, "bias")
                    key_w = f"{prefix}{sub}.weight"
                    dw = t.get(key_w, torch.zeros_like(w))
                    dw[rows[side]] = s_mat @ w[rows[side]]
                    t[key_w] = dw
                    if b is not None:
                        key_b = f"{prefix}{sub}.bias"
                        db = t.get(key_b, torch.zeros_like(b))
                        db[rows[side]] = s_mat @ b[rows[side]]
                        t[key_b] = db
                return t

            basis = []
            for i in range(dh):
                for j in range(i + 1, dh):
                    s_ij = torch.zeros(dh, dh, dtype=torch.float64)
                    s_ij[i, j], s_ij[j, i] = 1.0, -1.0
                    basis.append(qk_tangent(s_ij))
            if basis:
                u = normalise(qk_tangent(_skew(dh, 1000 + h)))
                out.append(
                    Candidate(
                        layers=(f"{prefix}{lay['q']}", f"{prefix}{lay['k']}"),
                        detector="qk-rotation",
                        u=u,
                        gauge="curved",
                        gauge_generators=tuple(basis),
                        info={"module": name, "head": h, "d_head": dh, "d_model": d_model},
                    )
                )
            vo = self._vo(prefix, lay, par, rows["v"], slice(h * dh, (h + 1) * dh))
            out.append(
                Candidate(
                    layers=(f"{prefix}{lay['v']}", f"{prefix}{lay['o']}"),
                    detector="vo-rescale",
                    u=normalise(vo),
                    gauge="curved",
                    gauge_generators=(vo,),
                    info={"module": name, "head": h},
                )
            )
        return out

    @staticmethod
    def _vo(prefix: str, lay: dict, par, rows_v: slice, cols_o: slice) -> dict[str, Tensor]:
        t: dict[str, Tensor] = {}
        wv, bv = par(lay["v"], "weight"), par(lay["v"], "bias")
        dw = torch.zeros_like(wv)
        dw[rows_v] = wv[rows_v]
        t[f"{prefix}{lay['v']}.weight"] = dw
        if bv is not None:
            db = torch.zeros_like(bv)
            db[rows_v] = bv[rows_v]
            t[f"{prefix}{lay['v']}.bias"] = db
        wo = par(lay["o"], "weight")
        do = torch.zeros_like(wo)
        do[:, cols_o] = -wo[:, cols_o]
        t[f"{prefix}{lay['o']}.weight"] = do
        return t
