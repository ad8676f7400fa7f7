"""Closed-form flat gauge: the value bias of a softmax attention against its output bias.

Query head ``h`` (KV head ``g``) outputs ``o_t = Σ_s a_ts v_s`` with ``v_s = W_V[r_g] x_s +
b_V[r_g]`` and softmax weights ``Σ_s a_ts = 1``, which do not depend on ``V``. Shifting the value
bias, ``b_V[r_g] → b_V[r_g] + c_g``, adds ``c_g`` to ``o_t`` at every position, and the output
projection (``W_O`` with bias ``b_O``, head ``h`` reading columns ``h·d_h … (h+1)·d_h``) turns it
into the constant ``Σ_h W_O[:, cols_h] c_{g(h)}``, which

    b_O → b_O − Σ_h W_O[:, cols_h] c_{g(h)}

takes back. Every ``c ∈ R^{n_kv·d_h}`` so leaves the model unchanged: ``n_kv·d_h`` straight
lines (F ≡ 0 along each), proposed as one candidate on their span, ``u ∝ (𝟙 on the value-bias
rows, −W_O·lift(𝟙) on b_O)``, ``"value-bias"`` with ``info["orbit_dim"] = n_kv·d_h`` (s32 trial
ATTN #2: exact to 1.8e-15 on GPT-2 and a grouped-query model, never proposed). Rotary position
embeddings leave it (they turn Q and K only); weights that do not sum to 1 (an attention sink, a
zero-attention slot) break it. The candidate is certified by evaluation with a distinct shift per
entry (1 to 2 times the value bias's RMS, or 1 to 2 where it is zero), at most ``CERTIFY_RTOL``
(`rescale.relative_change`), as `key_bias` is; an attention that takes its softmax in float32
sums its weights to 1 only to ~1e-7, so, as for the key bias, it is certified on the forward the
read promotes to float64, and read with ``promote=False`` it is not proposed. Needs a recognised
layout (`attention_layout`) with a value bias and an output projection with a bias.
"""

from __future__ import annotations

import torch
from torch import nn

from neuromanifold.singular.detectors.attention_layout import AttentionLayout, attention_layout
from neuromanifold.singular.detectors.base import (
    Candidate,
    DetectionContext,
    normalise,
    qualified,
)
from neuromanifold.singular.detectors.rescale import CERTIFY_RTOL, certify_shift, relative_change

__all__ = ["ValueBiasDetector", "output_bias_key"]


def output_bias_key(lay: AttentionLayout) -> str | None:
    """The output projection's bias key (relative to the module), or None without an output
    projection."""
    if lay.o is None or not lay.o.endswith("weight"):
        return None
    return lay.o[: -len("weight")] + "bias"


class ValueBiasDetector:
    """The value-bias ↔ output-bias lines of a recognised attention (flat gauge; module
    docstring)."""

    name = "value-bias"

    def applies_to(self, module: nn.Module) -> bool:
        """Recognised attention layouts with a value bias and an output projection."""
        lay = attention_layout(module)
        return lay is not None and lay.v[1] is not None and lay.o is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified flat-gauge candidate on the value-bias lines, or nothing."""
        lay = attention_layout(module)
        if lay is None or lay.v[1] is None or output_bias_key(lay) is None:
            return []
        v_key = qualified(name, lay.v[1])
        o_key = qualified(name, output_bias_key(lay))
        if o_key not in ctx.params:
            return []  # an output projection without a bias: the shift has no counterpart
        v_bias, o_bias = ctx.params[v_key], ctx.params[o_key]
        w_o = ctx.params[qualified(name, lay.o)].to(torch.float64)
        d_h = lay.d_head
        if w_o.ndim != 2 or w_o.shape[1] != lay.heads * d_h or w_o.shape[0] != o_bias.shape[0]:
            return []
        mask = torch.zeros_like(v_bias, dtype=torch.bool)
        for g in range(lay.n_kv):
            mask[lay.rows(lay.v[2], g)] = True
        n = int(mask.sum())

        def moves(shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """``(Δb_V, Δb_O)`` for per-entry shifts ``shift`` (length ``n_kv·d_h``)."""
            dv = torch.zeros_like(v_bias, dtype=torch.float64)
            dv[mask] = shift
            # query head h reads KV head ⌊h/n_rep⌋ (as `value_link.value_lift`, unscaled)
            rep = lay.heads // lay.n_kv
            lifted = shift.reshape(lay.n_kv, d_h).repeat_interleave(rep, dim=0).reshape(-1)
            return dv, -(w_o @ lifted)

        every = torch.ones(n, dtype=torch.bool, device=v_bias.device)
        dv, do = moves(certify_shift(every, v_bias[mask]))
        moved = {v_key: v_bias + dv.to(v_bias.dtype), o_key: o_bias + do.to(o_bias.dtype)}
        if not relative_change(ctx, moved) <= CERTIFY_RTOL:
            return []
        dv, do = moves(torch.ones(n, dtype=torch.float64, device=v_bias.device))
        v_layer = qualified(name, lay.layers["v"]) if lay.layers["v"] else name
        o_layer = qualified(name, lay.layers["o"]) if lay.layers["o"] else name
        cand = Candidate(
            layers=tuple(dict.fromkeys((v_layer, o_layer))),
            detector="value-bias",
            u=normalise({v_key: dv, o_key: do}),
            gauge="flat",
            info={"orbit_dim": n, "module": name},
        )
        return ctx.canonical([cand])
