"""Closed-form flat gauge: the key bias of a softmax attention.

The score of query position ``t`` against key position ``s`` in head ``h`` (KV head ``g``) is
``q_tᵀ k_s / √d_h`` with ``k_s = W_K[r_g] x_s + b_K[r_g]``. Shifting the key bias,
``b_K[r_g] → b_K[r_g] + c_g``, adds ``q_tᵀ c_g / √d_h`` to every score of row ``t``: the same
for every key, which the softmax over the keys ignores (a causal or padding mask adds −∞ to
some entries and does not change that). So every ``c ∈ R^{n_kv·d_h}`` leaves the model
unchanged: the whole key bias is a flat gauge, ``n_kv·d_h`` straight lines (s27 trial HF D2:
exact to 1.3e-14 on GPT-2, never proposed).

It is broken where something between the projection and the scores treats key positions
differently (rotary position embeddings turn ``c`` by the key's position; a key norm) or where
the keys are read otherwise. Under a partial rotary embedding (`AttentionLayout.rotary_dims`
``r < d_h``: GPT-NeoX, Phi, Phi-3 at a partial factor) the rotation touches the leading ``r``
dimensions of each head only, and the shift of the other ``d_h − r`` is still a gauge: the
candidate then holds those, ``n_kv·(d_h − r)`` lines. The candidate is certified by
evaluation, with a distinct shift per entry (from 1 to 2 times the bias's RMS, or 1 to 2 where
the bias is zero) at most ``CERTIFY_RTOL`` (`rescale.relative_change`). An attention that takes
its softmax in float32 (Hugging Face's eager attention in ViT, GPT-NeoX, Phi) rounds the shifted
scores at ~1e-7 relative: the read certifies it on the forward it promotes to float64
(`neuromanifold.singular.precision.promote_forward`); read with ``promote=False`` it is not
certified, and the detector stays silent rather than propose a gauge it cannot check.
``"key-bias"`` proposes one candidate, ``u ∝ 𝟙`` on the key-bias entries it shifts, with
``info["orbit_dim"]`` their number and ``info["rotary_dims"]`` (``r``, or None).
"""

from __future__ import annotations

import torch
from torch import nn

from neuromanifold.singular.detectors.attention_layout import attention_layout
from neuromanifold.singular.detectors.base import (
    Candidate,
    DetectionContext,
    normalise,
    qualified,
)
from neuromanifold.singular.detectors.rescale import CERTIFY_RTOL, certify_shift, relative_change

__all__ = ["KeyBiasDetector"]


class KeyBiasDetector:
    """The key bias of a recognised attention layout (flat gauge; module docstring)."""

    name = "key-bias"

    def applies_to(self, module: nn.Module) -> bool:
        """Recognised attention layouts whose keys have a bias."""
        lay = attention_layout(module)
        return lay is not None and lay.k[1] is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified flat-gauge candidate on the key-bias rows, or nothing."""
        lay = attention_layout(module)
        if lay is None or lay.k[1] is None:
            return []
        key = qualified(name, lay.k[1])
        bias = ctx.params[key]
        mask = torch.zeros_like(bias, dtype=torch.bool)
        skip = lay.rotary_dims or 0  # a partial rotary embedding turns the leading r dims
        for g in range(lay.n_kv):
            rows = lay.rows(lay.k[2], g)
            mask[rows.start + skip : rows.stop] = True
        n = int(mask.sum())
        if n == 0:
            return []
        shift = certify_shift(mask, bias[mask])
        if not relative_change(ctx, {key: bias + shift.to(bias.dtype)}) <= CERTIFY_RTOL:
            return []
        u = normalise({key: mask.to(torch.float64)})
        layer = qualified(name, lay.layers["k"]) if lay.layers["k"] else name
        cand = Candidate(
            layers=(layer,),
            detector="key-bias",
            u=u,
            gauge="flat",
            info={"orbit_dim": n, "module": name, "rotary_dims": lay.rotary_dims},
        )
        return ctx.canonical([cand])
