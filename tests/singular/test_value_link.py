"""The attention's value → output edge joins a dead value dimension into one duality chain.

A value dimension ``(g, j)`` whose row of ``W_V`` (and bias) is zero and whose output columns
``(h, j)``, ``h ∈ group(g)``, are zero is a node death of order 2 across the attention's weighted
sum over positions, which the data-flow graph does not follow. Laws checked: the lift repeats a KV
head's block for each query head reading it (unit columns stay unit); the planted death reads as
one ``duality`` chain (v_proj, o_proj) of order 2, with and without grouped-query attention, and in
``nn.MultiheadAttention`` (read unpacked); no such chain without a planted death; the fast
detection equals the `REFERENCE` one; fused projections get no value edge.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import neuromanifold.singular.detectors.linear as lin
from neuromanifold import read
from neuromanifold.singular.detectors import DetectionContext, default_registry
from neuromanifold.singular.detectors.value_link import (
    ValueEdge,
    value_edges,
    value_lift,
    value_taps,
)
from neuromanifold.singular.family import Categorical

# candidate directions, fast vs REFERENCE detection: the same vectors up to rounding
ATOL_U = 1e-10
EMBED, SEQ, N = 8, 4, 32
DEAD = 1  # dimension j of KV head 0


class GQAttention(nn.Module):
    """Self-attention with ``num_heads`` query heads reading ``num_key_value_heads`` KV heads
    (each KV head serves ``n_rep`` consecutive query heads), mean-pooled into a linear head."""

    def __init__(self, heads: int = 4, kv: int = 2, d_head: int = 3) -> None:
        super().__init__()
        self.num_heads, self.num_key_value_heads, self.head_dim = heads, kv, d_head
        self.q_proj = nn.Linear(EMBED, heads * d_head)
        self.k_proj = nn.Linear(EMBED, kv * d_head)
        self.v_proj = nn.Linear(EMBED, kv * d_head)
        self.o_proj = nn.Linear(heads * d_head, EMBED)

    def forward(self, x: Tensor) -> Tensor:
        n, t, _ = x.shape
        rep = self.num_heads // self.num_key_value_heads

        def split(z: Tensor, h: int) -> Tensor:
            return z.view(n, t, h, self.head_dim).transpose(1, 2)

        q = split(self.q_proj(x), self.num_heads)
        k = split(self.k_proj(x), self.num_key_value_heads).repeat_interleave(rep, dim=1)
        v = split(self.v_proj(x), self.num_key_value_heads).repeat_interleave(rep, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / self.head_dim**0.5, dim=-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(n, t, -1))


class Classifier(nn.Module):
    """``head(mean(z + attn(z)))``, ``z = embed(x)``; ``packed``: ``attn`` is called as
    ``nn.MultiheadAttention`` (query, key, value; output first)."""

    def __init__(self, attn: nn.Module, packed: bool = False) -> None:
        super().__init__()
        self.embed = nn.Linear(5, EMBED)
        self.attn, self.packed = attn, packed
        self.head = nn.Linear(EMBED, 3)

    def forward(self, x: Tensor) -> Tensor:
        z = self.embed(x)
        out = self.attn(z, z, z)[0] if self.packed else self.attn(z)
        return self.head((z + out).mean(1))


def _x() -> Tensor:
    return torch.randn(N, SEQ, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def _planted_gqa(heads: int, kv: int, dead: bool = True) -> nn.Module:
    torch.manual_seed(3)
    model = Classifier(GQAttention(heads, kv)).double().eval()
    attn, d = model.attn, model.attn.head_dim
    if dead:
        with torch.no_grad():
            attn.v_proj.weight[DEAD] = 0.0  # KV head 0, dimension DEAD
            attn.v_proj.bias[DEAD] = 0.0
            for h in range(heads // kv):  # every query head reading KV head 0
                attn.o_proj.weight[:, h * d + DEAD] = 0.0
    return model


def test_taps_are_every_query_heads_copy() -> None:
    edge = ValueEdge("v", "o", heads=4, kv_heads=2, d_head=3)
    gs = torch.linalg.qr(torch.randn(6, 2, dtype=torch.float64))[0]
    taps = value_taps(edge, gs)
    assert taps.shape == (12, 8)  # 2 columns × 4 query heads, independent
    torch.testing.assert_close(taps.T @ taps, torch.eye(8, dtype=torch.float64))
    proj = taps @ taps.T
    lifted = value_lift(edge, gs)
    torch.testing.assert_close(proj @ lifted, lifted)  # the summed lift lies in their span


def test_lift_repeats_each_kv_block_for_its_query_heads() -> None:
    edge = ValueEdge("v", "o", heads=4, kv_heads=2, d_head=3)
    gs = torch.linalg.qr(torch.randn(6, 2, dtype=torch.float64))[0]
    lifted = value_lift(edge, gs)
    assert lifted.shape == (12, 2)
    torch.testing.assert_close(lifted.T @ lifted, torch.eye(2, dtype=torch.float64))
    for h in range(4):
        g = h // 2
        torch.testing.assert_close(lifted[3 * h : 3 * h + 3], gs[3 * g : 3 * g + 3] / 2**0.5)


@pytest.mark.parametrize(("heads", "kv"), [(2, 2), (4, 2), (4, 1)])
def test_dead_value_dimension_reads_as_one_order_two_chain(heads: int, kv: int) -> None:
    model = _planted_gqa(heads, kv)
    reading = read(model, _x(), Categorical(), progress=False)
    chains = [(d.layers, d.klass, d.k) for d in reading.directions if d.detector == "duality"]
    assert chains == [(("attn.v_proj", "attn.o_proj"), "genuine_singularity", 2)]
    # every query head's copy of the dead dimension is explained by the chain: the output
    # projection's one-sided modes are those of the same model without the death
    live = read(_planted_gqa(heads, kv, dead=False), _x(), Categorical(), progress=False)

    def one_sided(r) -> list:
        return sorted((d.detector, d.klass) for d in r.directions if d.layers == ("attn.o_proj",))

    assert one_sided(reading) == one_sided(live)


def test_no_chain_without_a_dead_value_dimension() -> None:
    reading = read(_planted_gqa(4, 2, dead=False), _x(), Categorical(), progress=False)
    assert not [d for d in reading.directions if d.detector == "duality"]


def test_packed_multihead_attention_reads_the_chain_unpacked() -> None:
    torch.manual_seed(4)
    mha = nn.MultiheadAttention(EMBED, 2, batch_first=True)
    model = Classifier(mha, packed=True).double().eval()
    e = EMBED
    with torch.no_grad():
        model.attn.in_proj_weight[2 * e + DEAD] = 0.0
        model.attn.in_proj_bias[2 * e + DEAD] = 0.0
        model.attn.out_proj.weight[:, DEAD] = 0.0
    reading = read(model, _x(), Categorical(), progress=False)
    assert reading.meta["multihead_as_projections"] == ["attn"]
    chains = [(d.layers, d.klass, d.k) for d in reading.directions if d.detector == "duality"]
    assert chains == [(("attn.v_proj", "attn.out_proj"), "genuine_singularity", 2)]


def _detect(model, reference: bool, monkeypatch) -> list:
    monkeypatch.setattr(lin, "REFERENCE", reference)
    ctx = DetectionContext.from_model(model, _x(), Categorical())
    return [
        c
        for name, mod in ctx.model.named_modules()
        for det in default_registry().for_module(mod)
        for c in det.propose(name, mod, ctx)
    ]


def test_fast_detection_equals_reference_through_the_value_edge(monkeypatch) -> None:
    model = _planted_gqa(4, 2)
    fast, ref = _detect(model, False, monkeypatch), _detect(model, True, monkeypatch)
    assert any(c.detector == "duality" for c in fast)
    assert [(c.detector, c.layers) for c in fast] == [(c.detector, c.layers) for c in ref]
    for a, b in zip(fast, ref, strict=True):
        for key in a.u:
            torch.testing.assert_close(a.u[key], b.u[key], atol=ATOL_U, rtol=0)


def test_fused_projections_get_no_value_edge() -> None:
    class Fused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.num_heads = 2
            self.qkv, self.proj = nn.Linear(EMBED, 3 * EMBED), nn.Linear(EMBED, EMBED)

    assert value_edges(Fused()) == {}
    edges = value_edges(_planted_gqa(4, 2))
    assert set(edges) == {"attn.v_proj", "attn.o_proj"}
    assert edges["attn.v_proj"] == ValueEdge("attn.v_proj", "attn.o_proj", 4, 2, 3)
