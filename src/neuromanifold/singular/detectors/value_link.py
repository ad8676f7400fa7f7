"""The value → output edge of an attention: a duality link the data-flow graph does not see.

In attention with separate projections the value projection's output feature ``(g, j)`` (KV head
``g``, dimension ``j``) reaches the output projection only as input column ``(h, j)`` of every
query head ``h`` reading KV head ``g``, through ``Σ_s a_{ts} v_s``: a weighted sum over positions
with weights that do not depend on ``V``. So the map from the value features to the output
projection's inputs is linear and channelwise (feature ``(g, j)`` only reaches the columns
``(h, j)``, ``h ∈ group(g)``): a value dimension no probe sample excites is a zero column of
the output projection's input, and one whose output column is zero receives no gradient — the
same node death as between two Linears, of order 2. The graph stops at the product of two
tensors (`neuromanifold.singular.detectors.graph`), so `value_edges` supplies this edge from the
layout (`attention_layout`) and `value_lift` lifts a value-side vector ``g`` (length
``kv_heads·d_h``) to the output projection's inputs (length ``heads·d_h``): each query head's
block is its KV head's block of ``g``, divided by ``√n_rep`` so that unit vectors stay unit.

Only layouts with a separate value ``nn.Linear`` (``offset 0``) and an ``nn.Linear`` output
projection are linked; fused ``qkv``/``c_attn``/``query_key_value`` projections are not.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.attention_layout import attention_layout

__all__ = ["ValueEdge", "value_edges", "value_lift", "value_taps"]


@dataclass(frozen=True)
class ValueEdge:
    """``value`` → ``output`` of one attention module (full module names)."""

    value: str
    output: str
    heads: int
    kv_heads: int
    d_head: int


def value_edges(model: nn.Module) -> dict[str, ValueEdge]:
    """Every value projection of ``model`` linked to its output projection, keyed by both names
    (module docstring)."""
    out: dict[str, ValueEdge] = {}
    for name, mod in model.named_modules():
        lay = attention_layout(mod)
        if lay is None or lay.o is None or lay.v[2] != 0:
            continue
        v_name, o_name = lay.layers["v"], lay.layers["o"]
        if not v_name or not o_name or v_name in (lay.layers["q"], lay.layers["k"]):
            continue  # fused projections
        v_mod, o_mod = mod.get_submodule(v_name), mod.get_submodule(o_name)
        if not (isinstance(v_mod, nn.Linear) and isinstance(o_mod, nn.Linear)):
            continue
        dh = lay.d_head
        if v_mod.out_features != lay.n_kv * dh or o_mod.in_features != lay.heads * dh:
            continue
        pre = f"{name}." if name else ""
        edge = ValueEdge(f"{pre}{v_name}", f"{pre}{o_name}", lay.heads, lay.n_kv, dh)
        out[edge.value] = out[edge.output] = edge
    return out


def value_lift(edge: ValueEdge, gs: Tensor) -> Tensor:
    """Value-side columns ``gs`` (``kv_heads·d_h × m``) on the output projection's inputs
    (``heads·d_h × m``): query head ``h`` takes KV head ``⌊h/n_rep⌋``'s block, all over
    ``√n_rep`` (unit columns stay unit).

    >>> e = ValueEdge("v", "o", heads=4, kv_heads=2, d_head=1)
    >>> value_lift(e, torch.tensor([[1.0], [0.0]], dtype=torch.float64)).flatten().tolist()
    [0.7071067811865475, 0.7071067811865475, 0.0, 0.0]
    """
    rep = edge.heads // edge.kv_heads
    blocks = gs.reshape(edge.kv_heads, edge.d_head, gs.shape[1])
    return blocks.repeat_interleave(rep, dim=0).reshape(-1, gs.shape[1]) / rep**0.5


def value_taps(edge: ValueEdge, gs: Tensor) -> Tensor:
    """An orthonormal basis of the output-projection inputs that the value-side columns ``gs``
    reach, one query head at a time: for each column ``g`` and each query head ``h``, head
    ``h``'s block holds KV head ``⌊h/n_rep⌋``'s block of ``g`` and the others are zero (the
    per-head "taps" of a dead value dimension, all in the output projection's A-kernel, which
    `value_lift` sums into one direction). Shape ``(heads·d_h, rank)``.

    >>> e = ValueEdge("v", "o", heads=4, kv_heads=2, d_head=1)
    >>> value_taps(e, torch.tensor([[1.0], [0.0]], dtype=torch.float64)).abs().T.tolist()
    [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
    """
    rep, d = edge.heads // edge.kv_heads, edge.d_head
    blocks = gs.reshape(edge.kv_heads, d, gs.shape[1])
    cols = []
    for h in range(edge.heads):
        tap = gs.new_zeros(edge.heads, d, gs.shape[1])
        tap[h] = blocks[h // rep]
        cols.append(tap.reshape(edge.heads * d, gs.shape[1]))
    u, s, _ = torch.linalg.svd(torch.cat(cols, 1), full_matrices=False)
    keep = s > s.max() * 1e-12 if s.numel() and float(s.max()) > 0 else s > 0
    return u[:, keep]
