"""Two flat gauges of biased transformers (s32 trial ATTN #2) and attention the read cannot lay out
(ATTN #1).

Closed forms: the softmax weights of a query sum to 1, so ``b_V → b_V + c`` adds ``c`` to every
position of the attention output and ``b_O → b_O − Σ_h W_O[:, cols_h] c_{g(h)}`` takes it back
(``value-bias``, ``n_kv·d_h`` lines); ``LN(x) = γ ⊙ n(x) + β`` reaches its consumers only as
``W_c LN(x) + b_c``, so ``(β, b_c) → (β + δ, b_c − W_c δ)`` changes nothing where every consumer
is such a Linear (``norm-shift``, ``d`` lines). Each is checked here by moving the model along a
random member of the family built in the test; the read's own direction is swept, and its flat
class says F ≡ 0 along it.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn
from torch.func import functional_call

from neuromanifold.singular.detectors.attention_layout import (
    attention_layout,
    unrecognised_attention,
)
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read
from neuromanifold.singular.reading import Reading

N, SEQ, D = 16, 5, 8
HEADS, KV, DH = 4, 2, 4  # query heads 0, 1 read KV head 0; 2, 3 read KV head 1
RTOL_SAME = 1e-12
"""Outputs after an O(1) move along an exact linear symmetry: rounding only."""
BROKEN_MIN = 1e-3
"""A move that is no symmetry changes these outputs by O(1e-1)."""


class _Attn(nn.Module):
    """Grouped-query self-attention (4 query heads, 2 KV heads of width 4), causal, biases."""

    def __init__(self, *, o_bias: bool = True, heads_attr: str = "num_heads") -> None:
        super().__init__()
        setattr(self, heads_attr, HEADS)
        self.num_key_value_heads = KV
        self.q_proj = nn.Linear(D, HEADS * DH)
        self.k_proj = nn.Linear(D, KV * DH)
        self.v_proj = nn.Linear(D, KV * DH)
        self.o_proj = nn.Linear(HEADS * DH, D, bias=o_bias)

    def forward(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, HEADS, DH).transpose(1, 2)
        k = self.k_proj(x).view(b, n, KV, DH).transpose(1, 2).repeat_interleave(HEADS // KV, 1)
        v = self.v_proj(x).view(b, n, KV, DH).transpose(1, 2).repeat_interleave(HEADS // KV, 1)
        causal = torch.full((n, n), float("-inf"), dtype=x.dtype).triu(1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(DH) + causal, dim=-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(b, n, -1))


class _Block(nn.Module):
    """Pre-LN block (or post-LN with ``post``) and a final LN into a head."""

    def __init__(self, *, post: bool = False, head_bias: bool = False, **attn: object) -> None:
        super().__init__()
        self.post = post
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = _Attn(**attn)
        self.fc1, self.fc2 = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.head = nn.Linear(D, D, bias=head_bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.post:  # the norm's output is the residual stream: its shift is no symmetry
            x = self.ln1(x + self.attn(x))
        else:
            x = x + self.attn(self.ln1(x))
        x = x + self.fc2(torch.tanh(self.fc1(self.ln2(x))))
        return self.head(self.lnf(x))


def _model(**kw: object) -> tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    model = _Block(**kw).double().eval()
    with torch.no_grad():  # biases and norm affines away from their initial values
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model, torch.randn(N, SEQ, D, dtype=torch.float64)


def _change(model: nn.Module, x: Tensor, move: dict[str, Tensor]) -> float:
    params = {k: v.detach() for k, v in model.named_parameters()}
    moved = {k: v + move[k] if k in move else v for k, v in params.items()}
    with torch.no_grad():
        base = model(x)
        return float((functional_call(model, moved, (x,)) - base).abs().max() / base.abs().max())


@pytest.fixture(scope="module")
def pre_ln() -> tuple[nn.Module, Tensor, Reading, dict[int, dict[str, Tensor]]]:
    model, x = _model(head_bias=False)
    vectors: dict[int, dict[str, Tensor]] = {}
    reading = read(model, x, Gaussian(), progress=False, on_vector=vectors.__setitem__)
    return model, x, reading, vectors


def test_value_bias_is_one_flat_record_whose_family_leaves_the_model_unchanged(pre_ln) -> None:
    model, x, reading, vectors = pre_ln
    (i,) = [i for i, d in enumerate(reading.directions) if d.detector == "value-bias"]
    rec = reading.directions[i]
    assert rec.klass == "flat_gauge" and rec.info["orbit_dim"] == KV * DH
    assert set(rec.layers) == {"attn.v_proj", "attn.o_proj"}
    # an independent member of the family: a random c, and the compensation from W_O by hand,
    # query head h reading KV head h // (HEADS / KV)
    c = torch.randn(KV * DH, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    w_o = model.attn.o_proj.weight.detach()
    rep = HEADS // KV
    comp = -sum(
        w_o[:, h * DH : (h + 1) * DH] @ c[(h // rep) * DH : (h // rep + 1) * DH]
        for h in range(HEADS)
    )
    assert _change(model, x, {"attn.v_proj.bias": c, "attn.o_proj.bias": comp}) <= RTOL_SAME
    # and the record's own direction, moved by an O(1) step
    assert _change(model, x, {k: 3.0 * v for k, v in vectors[i].items()}) <= RTOL_SAME
    assert _change(model, x, {"attn.v_proj.bias": c}) >= BROKEN_MIN  # the shift alone is not


def test_norm_shift_is_proposed_where_every_reader_is_a_biased_linear(pre_ln) -> None:
    model, x, reading, vectors = pre_ln
    recs = {d.info["consumers"][0]: d for d in reading.directions if d.detector == "norm-shift"}
    for i, d in enumerate(reading.directions):  # each record's own direction, an O(1) step
        if d.detector == "norm-shift":
            assert _change(model, x, {k: 3.0 * v for k, v in vectors[i].items()}) <= RTOL_SAME
    # ln1 → q, k, v; ln2 → fc1; lnf → a bias-free head: none
    assert set(recs) == {"attn.q_proj", "fc1"}
    assert recs["attn.q_proj"].info["consumers"] == ["attn.q_proj", "attn.k_proj", "attn.v_proj"]
    assert all(d.klass == "flat_gauge" and d.info["orbit_dim"] == D for d in recs.values())
    delta = torch.randn(D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    move = {"ln1.bias": delta}
    for c in ("q_proj", "k_proj", "v_proj"):
        move[f"attn.{c}.bias"] = -(getattr(model.attn, c).weight.detach() @ delta)
    assert _change(model, x, move) <= RTOL_SAME
    head_move = {"lnf.bias": delta}  # the bias-free head cannot take the shift back
    assert _change(model, x, head_move) >= BROKEN_MIN


def test_neither_gauge_is_proposed_where_it_is_no_symmetry() -> None:
    # an output projection without a bias; a post-LN block, whose ln1 output is the residual
    model, x = _model(o_bias=False, post=True, head_bias=True)
    reading = read(model, x, Gaussian(), progress=False)
    assert not [d for d in reading.directions if d.detector == "value-bias"]
    shifts = {d.info["consumers"][0] for d in reading.directions if d.detector == "norm-shift"}
    assert shifts == {"fc1", "head"}  # ln2 and lnf (the head now has a bias), not ln1


@pytest.mark.parametrize("attr", ["n_head", "nhead", "num_heads", "n_heads", "heads"])
def test_the_head_count_is_read_under_its_common_names(attr: str) -> None:
    lay = attention_layout(_Attn(heads_attr=attr))
    assert lay is not None and (lay.heads, lay.n_kv, lay.d_head) == (HEADS, KV, DH)


def test_an_attention_without_a_known_head_count_is_named_in_the_note() -> None:
    """s32 trial ATTN #1: a head count kept as ``self.H`` lost every attention gauge silently."""
    assert unrecognised_attention(_Attn(heads_attr="H")) == "no head count"
    assert unrecognised_attention(_Attn()) is None
    assert unrecognised_attention(nn.Linear(2, 2)) is None
    model, x = _model(heads_attr="H")
    reading = read(model, x, Gaussian(), progress=False)
    assert reading.meta["unrecognised_attention"] == {"attn": "no head count"}
    assert "'attn' (no head count: if they are attention, give each an int num_heads" in (
        reading.note
    )
    assert not [d for d in reading.directions if d.detector in ("value-bias", "key-bias")]


@pytest.mark.parametrize(
    "names",
    [
        ("q", "k", "v", "o"),  # T5
        ("wq", "wk", "wv", "wo"),  # Meta's Llama
        ("query_proj", "key_proj", "value_proj", None),  # DeBERTa (output in another module)
        ("to_q", "to_k", "to_v", None),  # diffusers (output in a list)
    ],
)
def test_projections_are_found_under_their_common_names(names: tuple) -> None:
    """s32 trial NEWCODE #3, #5: a T5-style output ``o`` was not found (no value-bias, no note);
    Meta's ``wq``/``wo``, DeBERTa's and diffusers' names were neither read nor named."""
    m = nn.Module()
    m.n_heads, m.n_kv_heads = HEADS, KV
    shapes = [(D, HEADS * DH), (D, KV * DH), (D, KV * DH), (HEADS * DH, D)]
    for name, (i, o) in zip(names, shapes, strict=True):
        if name:
            setattr(m, name, nn.Linear(i, o))
    lay = attention_layout(m)
    assert lay is not None and (lay.heads, lay.n_kv) == (HEADS, KV)
    assert lay.layers["q"] == names[0] and lay.layers["o"] == (names[3] or "")


def test_a_fused_in_proj_alone_is_not_taken_for_attention() -> None:
    """s32 trial NEWCODE #4: a Mamba mixer's ``in_proj`` Linear was named as attention."""
    m = nn.Module()
    m.in_proj, m.out_proj = nn.Linear(4, 16), nn.Linear(8, 4)
    assert unrecognised_attention(m) is None


def test_a_head_count_with_an_unknown_layout_is_told_apart() -> None:
    """s32 review #3: a fused ``qkv`` with grouped-query attention has a head count; the note's
    advice to add one was wrong there."""
    m = nn.Module()
    m.num_heads, m.num_key_value_heads = 4, 2
    m.qkv, m.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
    assert unrecognised_attention(m) == "layout not supported"


def test_llama2c_head_counts_are_read() -> None:
    """s32 review #4: Meta's and llama2.c's attention keep n_local_heads and n_local_kv_heads."""
    m = nn.Module()
    m.n_local_heads, m.n_local_kv_heads = HEADS, KV
    m.wq, m.wk = nn.Linear(D, HEADS * DH), nn.Linear(D, KV * DH)
    m.wv, m.wo = nn.Linear(D, KV * DH), nn.Linear(HEADS * DH, D)
    lay = attention_layout(m)
    assert lay is not None and (lay.heads, lay.n_kv, lay.layers["o"]) == (HEADS, KV, "wo")


def test_the_demo_counts_the_new_gauges_as_gauges(pre_ln) -> None:
    """s32 review #1: the demo's optimizer table counted value-bias and norm-shift records among
    the possible dead directions. Every closed-form record of this read is a gauge detector's."""
    from neuromanifold.demo_result import GAUGE_DETECTORS

    factor_labels = {"kfac-A", "kfac-G", "kfac-joint", "duality", "qk-pair"}
    closed = {d.detector for d in pre_ln[2].directions} - factor_labels
    assert {"value-bias", "norm-shift"} <= closed <= set(GAUGE_DETECTORS)
