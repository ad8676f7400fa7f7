"""``nn.MultiheadAttention`` is listed in ``reading.not_covered``: its packed projections get no
K-FAC factors, so only the closed-form attention gauges (QK rotation, VO rescale) read them and a
dead direction inside them is never looked for. Before, the module counted as covered (the
attention-gauge detector handles it) and ``not_covered`` was empty.

A hand-written attention with separate ``nn.Linear`` projections is factored like any Linear and
stays covered.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read

D, HEADS, SEQ = 8, 2, 3


class _Packed(nn.Module):
    """``head(mean(z + attn(z, z, z)))`` with ``z = embed(x)``: packed MultiheadAttention."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, D)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.head = nn.Linear(D, 2)

    def forward(self, x: Tensor) -> Tensor:
        z = self.embed(x)
        return self.head((z + self.attn(z, z, z, need_weights=False)[0]).mean(1))


class _Separate(nn.Module):
    """The same attention written with separate ``nn.Linear`` q/k/v/o projections."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, D)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.head = nn.Linear(D, 2)

    def forward(self, x: Tensor) -> Tensor:
        z = self.embed(x)
        n, t, _ = z.shape

        def split(h: Tensor) -> Tensor:
            return h.view(n, t, HEADS, D // HEADS).transpose(1, 2)

        a = nn.functional.scaled_dot_product_attention(
            split(self.q(z)), split(self.k(z)), split(self.v(z))
        )
        return self.head((z + self.o(a.transpose(1, 2).reshape(n, t, D))).mean(1))


def _encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=16, batch_first=True)
    return nn.Sequential(layer, nn.Flatten(), nn.Linear(SEQ * D, 2))


def _x(d_in: int) -> Tensor:
    return torch.randn(
        16, SEQ, d_in, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )


@pytest.mark.parametrize(
    ("factory", "d_in", "attn"), [(_Packed, 4, "attn"), (_encoder, D, "0.self_attn")]
)
def test_multihead_attention_is_listed_as_read_for_gauges_only(factory, d_in: int, attn: str):
    torch.manual_seed(0)
    model = factory().double().eval()
    x = _x(d_in)
    mha = model.get_submodule(attn)
    # the premise: none of its projections is a factored block
    blocks = kfac_factors(model, x, Gaussian()).blocks
    assert not [b for b in blocks if b == attn or b.startswith(f"{attn}.")]
    reading = read(model, x, Gaussian(), progress=False)
    (entry,) = reading.not_covered
    assert (entry.name, entry.type) == (attn, "MultiheadAttention")
    assert entry.n_params == sum(p.numel() for p in mha.parameters())  # in_proj and out_proj
    assert "read for gauges only" in entry.reason and "no K-FAC factors" in entry.reason
    # and its gauges are what is read of it: one QK rotation and one VO rescale per head
    gauges = [(r.detector, r.layers[0], r.klass) for r in reading.directions if attn in r.layers]
    assert sorted(gauges) == sorted(
        [("qk-rotation", attn, "curved_gauge")] * HEADS
        + [("vo-rescale", attn, "curved_gauge")] * HEADS
    )


def test_separate_projections_are_factored_and_covered() -> None:
    torch.manual_seed(0)
    model = _Separate().double().eval()
    x = _x(4)
    assert {"q", "k", "v", "o"} <= set(kfac_factors(model, x, Gaussian()).blocks)
    assert read(model, x, Gaussian(), progress=False).not_covered == ()
