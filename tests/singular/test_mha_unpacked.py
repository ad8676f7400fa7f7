"""``nn.MultiheadAttention`` is read with separate projections (`adapt_attention`).

Its packed projections get no K-FAC factors, so the read rewrites the module in its working copy
as the equal attention with ``nn.Linear`` projections ``q_proj``/``k_proj``/``v_proj``/
``out_proj``. Laws checked: the unpacked module computes the packed one's outputs (masks,
``batch_first`` or not, unbatched input, ``kdim``/``vdim``, weights returned); the read of a
packed model equals the read of the same attention written by hand with separate projections
(the same records, layers renamed); a module the rewrite cannot stand for (``add_bias_kv``) stays
packed and is listed in ``not_covered`` as read for gauges only.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from neuromanifold.singular.adapt_attention import (
    UnpackedAttention,
    multihead_as_projections,
    unpackable,
)
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read

# the unpacked module against the packed kernel: the same products, summed in another order
RTOL_SAME = 1e-12

D, HEADS, SEQ = 8, 2, 3


class _Packed(nn.Module):
    """``head(mean(z + attn(z, z, z)))`` with ``z = embed(x)``: packed MultiheadAttention."""

    def __init__(self, **kw) -> None:
        super().__init__()
        self.embed = nn.Linear(4, D)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True, **kw)
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


def _rel(a: Tensor, b: Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().detach())


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("masks", ["none", "bool", "float", "padding", "causal"])
def test_unpacked_attention_computes_the_packed_function(batch_first: bool, masks: str) -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(D, HEADS, batch_first=batch_first).double().eval()
    un = UnpackedAttention(mha)
    x = torch.randn(5, SEQ + 1, D, dtype=torch.float64)
    if not batch_first:
        x = x.transpose(0, 1)
    kw: dict = {}
    causal = torch.ones(SEQ + 1, SEQ + 1, dtype=torch.bool).triu(1)
    if masks == "bool":
        kw["attn_mask"] = causal
    elif masks == "float":
        kw["attn_mask"] = torch.randn(SEQ + 1, SEQ + 1, dtype=torch.float64)
    elif masks == "padding":
        pad = torch.zeros(5, SEQ + 1, dtype=torch.bool)
        pad[:, -1] = True
        kw["key_padding_mask"] = pad
    elif masks == "causal":
        kw.update(attn_mask=causal, is_causal=True)
    with torch.no_grad():
        ref_out, ref_w = mha(x, x, x, **kw)
        out, w = un(x, x, x, **kw)
        per_head = un(x, x, x, average_attn_weights=False, **kw)[1]
    assert _rel(out, ref_out) <= RTOL_SAME and _rel(w, ref_w) <= RTOL_SAME
    torch.testing.assert_close(per_head.mean(1), w, atol=1e-15, rtol=0)


def test_unpacked_attention_with_kdim_vdim_and_unbatched_input() -> None:
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(D, HEADS, kdim=5, vdim=6).double().eval()
    un = UnpackedAttention(mha)
    q, k, v = (torch.randn(SEQ, d, dtype=torch.float64) for d in (D, 5, 6))  # unbatched
    with torch.no_grad():
        ref, got = mha(q, k, v)[0], un(q, k, v)[0]
    assert got.shape == ref.shape and _rel(got, ref) <= RTOL_SAME


def test_rewrite_keeps_the_outputs_and_skips_what_it_cannot_stand_for() -> None:
    torch.manual_seed(0)
    model = _encoder().double().eval()
    x = _x(D)
    before = model(x)
    names, passes = multihead_as_projections(model, x)
    assert names == ["0.self_attn"] and passes == 2  # one pass before, one after
    assert _rel(model(x), before) <= RTOL_SAME
    biased = _Packed(add_bias_kv=True).double().eval()
    assert not unpackable(biased.attn)
    assert multihead_as_projections(biased, _x(4)) == ([], 0)


def test_packed_read_equals_the_read_of_separate_projections() -> None:
    torch.manual_seed(0)
    packed = _Packed().double().eval()
    sep = _Separate().double().eval()
    e = D
    with torch.no_grad():  # the same weights, unpacked by hand
        w, b = packed.attn.in_proj_weight, packed.attn.in_proj_bias
        for i, lin in enumerate((sep.q, sep.k, sep.v)):
            lin.weight.copy_(w[i * e : (i + 1) * e])
            lin.bias.copy_(b[i * e : (i + 1) * e])
        sep.o.weight.copy_(packed.attn.out_proj.weight)
        sep.o.bias.copy_(packed.attn.out_proj.bias)
        sep.embed.load_state_dict(packed.embed.state_dict())
        sep.head.load_state_dict(packed.head.state_dict())
    x = _x(4)
    assert _rel(sep(x), packed(x)) <= RTOL_SAME
    r_packed = read(packed, x, Gaussian(), progress=False)
    r_sep = read(sep, x, Gaussian(), progress=False)
    assert r_packed.meta["multihead_as_projections"] == ["attn"]
    assert r_packed.not_covered == () == r_sep.not_covered
    rename = {"attn.q_proj": "q", "attn.k_proj": "k", "attn.v_proj": "v", "attn.out_proj": "o"}

    def signature(reading, names=None):
        names = names or {}
        return sorted(
            (d.detector, tuple(names.get(n, n) for n in d.layers), d.klass, d.k)
            for d in reading.directions
        )

    # the hand-written module states no head count, so only the packed one gets the closed-form
    # attention gauges (one QK rotation and one VO rescale per head, the key and value biases);
    # all else is the same
    closed = ("qk-rotation", "vo-rescale", "key-bias", "value-bias")
    gauges = [d for d in r_packed.directions if d.detector in closed]
    assert sorted((d.detector, d.klass, d.k) for d in gauges) == sorted(
        [("qk-rotation", "curved_gauge", 2)] * HEADS
        + [("vo-rescale", "curved_gauge", 2)] * HEADS
        + [("key-bias", "flat_gauge", None), ("value-bias", "flat_gauge", None)]
    )
    rest = [s for s in signature(r_packed, rename) if s[0] not in closed]
    assert rest == signature(r_sep)
    assert any(
        d.detector.startswith("kfac") and "attn.v_proj" in d.layers for d in r_packed.directions
    )


def test_attention_left_packed_is_listed_as_read_for_gauges_only() -> None:
    torch.manual_seed(0)
    model = _Packed(add_bias_kv=True).double().eval()
    x, attn = _x(4), "attn"
    mha = model.get_submodule(attn)
    # the premise: none of its projections is a factored block
    blocks = kfac_factors(model, x, Gaussian()).blocks
    assert not [b for b in blocks if b == attn or b.startswith(f"{attn}.")]
    reading = read(model, x, Gaussian(), progress=False)
    (entry,) = reading.not_covered
    assert (entry.name, entry.type) == (attn, "MultiheadAttention")
    assert entry.n_params == sum(p.numel() for p in mha.parameters())  # in_proj and out_proj
    assert "read for gauges only" in entry.reason and "no K-FAC factors" in entry.reason
    # (its key bias breaks the QK rotation and its value bias the VO rescale: no gauge either)
    assert not [r for r in reading.directions if attn in r.layers]


def test_separate_projections_are_factored_and_covered() -> None:
    torch.manual_seed(0)
    model = _Separate().double().eval()
    x = _x(4)
    assert {"q", "k", "v", "o"} <= set(kfac_factors(model, x, Gaussian()).blocks)
    assert read(model, x, Gaussian(), progress=False).not_covered == ()


class _TwiceUsed(nn.Module):
    """One attention registered under two names (``self.b = self.a``), or its ``out_proj`` also
    registered as the head's input projection: unpacking one name would untie the copies."""

    def __init__(self, share: str) -> None:
        super().__init__()
        self.embed = nn.Linear(4, D)
        self.a = nn.MultiheadAttention(D, HEADS, batch_first=True)
        if share == "module":
            self.b = self.a
        else:
            self.b = nn.MultiheadAttention(D, HEADS, batch_first=True)
            self.proj = self.a.out_proj
        self.head = nn.Linear(D, 2)

    def forward(self, x: Tensor) -> Tensor:
        z = self.embed(x)
        z = z + self.a(z, z, z)[0]
        z = z + self.b(z, z, z)[0]
        if hasattr(self, "proj"):
            z = self.proj(z)
        return self.head(z.mean(1))


@pytest.mark.parametrize("share", ["module", "out_proj"])
def test_tied_attention_is_left_packed(share: str) -> None:
    torch.manual_seed(0)
    model = _TwiceUsed(share).double().eval()
    x = _x(4)
    n_params = sum(p.numel() for p in model.parameters())
    names, _ = multihead_as_projections(model, x)
    # the tied module stays packed (an untied copy would read directions the model does not
    # have); an untied one next to it is unpacked
    assert names == ([] if share == "module" else ["b"])
    assert sum(p.numel() for p in model.parameters()) == n_params
    assert isinstance(model.a, nn.MultiheadAttention)
