"""Query/key-norm rescale: the scales of ``q_norm`` against ``k_norm`` (Qwen3, OLMo2, timm).

Laws checked (float64): scaling the query norm's features by ``c`` and the key norm's by ``1/c``
leaves the outputs unchanged when ``c`` is constant on each rotary plane of the model's RoPE
(any ``c`` without RoPE) and changes them otherwise; the closed-form tangents are the derivatives
of the action (forward-mode oracle); the detector certifies the basis the model carries —
per-feature without RoPE, the half planes with Hugging Face's RoPE, the interleaved planes with
interleaved RoPE — and proposes nothing where no basis is a symmetry (a ``1 + w`` key scale, as
Gemma's norms); full-width norms (OLMo2: one norm over all heads) get units per head; the read
classes the candidate a curved gauge of apparent order 2 on a tiny Qwen3.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.func import functional_call

from neuromanifold.io import TensorOutput, import_transformers
from neuromanifold.singular.detectors import DetectionContext, default_registry
from neuromanifold.singular.detectors.qk_norm import (
    QK_NORM_BASES,
    QKNormDetector,
    QKNormRescale,
    _factor_patterns,
    certify_basis,
    qk_norm_units,
)
from neuromanifold.singular.detectors.rescale import CERTIFY_RTOL
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.read import read

try:
    transformers = import_transformers()
except ImportError:  # pragma: no cover - depends on the environment
    transformers = None

# the action with factors in {2, ½} on a true orbit scales every product exactly: measured 0
RTOL_INVARIANT = 1e-12
# a broken orbit (per-feature scales under RoPE, a 1 + w key scale) moves the outputs by
# O(1e-2 … 1) relative here; far above CERTIFY_RTOL
BROKEN_MIN = 1e-3
# closed-form tangent vs the forward-mode derivative of the action: the same products
ATOL_TANGENT = 1e-14
# a step of STEP along an orbit tangent moves the outputs at second order only: ~STEP² relative
# (measured ≤ 2e-15 here), against ~STEP off the orbit
STEP = 1e-7
RTOL_SECOND_ORDER = 1e-12

N, SEQ, EMBED, HEADS, D_HEAD = 16, 5, 8, 2, 4


class OnePlusRMSNorm(nn.Module):
    """RMSNorm scaled by ``1 + w`` (Gemma's convention): a rescale of ``w`` is no symmetry."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + self.weight)


class NormedAttention(nn.Module):
    """Self-attention with query/key norms, mean-pooled into a linear head.

    ``norm``: ``"rms"`` (``nn.RMSNorm``), ``"ln"`` (``nn.LayerNorm`` with a shift) or
    ``"one-plus"`` (`OnePlusRMSNorm` on the keys). ``width``: ``"head"`` (one norm of width
    ``d_h`` shared by the heads) or ``"full"`` (one norm over all heads, OLMo2). ``pos``:
    ``"none"``, ``"half"`` (RoPE planes ``(i, i + d/2)``) or ``"interleaved"`` (``(2i, 2i+1)``).
    """

    def __init__(self, norm: str = "rms", width: str = "head", pos: str = "none") -> None:
        super().__init__()
        self.num_heads, self.head_dim, self.pos, self.width = HEADS, D_HEAD, pos, width
        inner = HEADS * D_HEAD
        self.q_proj, self.k_proj = nn.Linear(EMBED, inner), nn.Linear(EMBED, inner)
        self.v_proj, self.o_proj = nn.Linear(EMBED, inner), nn.Linear(inner, EMBED)
        w = D_HEAD if width == "head" else inner
        make = {"rms": nn.RMSNorm, "ln": nn.LayerNorm, "one-plus": nn.RMSNorm}[norm]
        self.q_norm = make(w)
        self.k_norm = OnePlusRMSNorm(w) if norm == "one-plus" else make(w)

    def _rope(self, z: Tensor) -> Tensor:
        n, half = z.shape[-2], self.head_dim // 2
        ang = torch.arange(n, dtype=z.dtype)[:, None] / 10.0 ** torch.arange(half, dtype=z.dtype)
        cos, sin = ang.cos(), ang.sin()
        if self.pos == "half":
            a, b = z[..., :half], z[..., half:]
            return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)
        a, b = z[..., 0::2], z[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)

    def _heads(self, z: Tensor, norm: nn.Module) -> Tensor:
        bsz, n, _ = z.shape
        if self.width == "full":
            z = norm(z)
        z = z.view(bsz, n, HEADS, D_HEAD).transpose(1, 2)
        if self.width == "head":
            z = norm(z)
        return z if self.pos == "none" else self._rope(z)

    def forward(self, x: Tensor) -> Tensor:
        q, k = self._heads(self.q_proj(x), self.q_norm), self._heads(self.k_proj(x), self.k_norm)
        v = self.v_proj(x).view(*x.shape[:2], HEADS, D_HEAD).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) / D_HEAD**0.5, dim=-1)
        return self.o_proj((att @ v).transpose(1, 2).flatten(2))


class FusedNormedAttention(NormedAttention):
    """timm's layout (``qk_norm=True``): one fused ``qkv`` Linear with rows ``[Q; K; V]`` and
    an output ``proj``; LayerNorms of width ``d_h`` on the queries and keys, no RoPE."""

    def __init__(self) -> None:
        super().__init__(norm="ln")
        del self.q_proj, self.k_proj, self.v_proj, self.o_proj
        inner = HEADS * D_HEAD
        self.qkv, self.proj = nn.Linear(EMBED, 3 * inner), nn.Linear(inner, EMBED)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k = self._heads(q, self.q_norm), self._heads(k, self.k_norm)
        v = v.reshape(*x.shape[:2], HEADS, D_HEAD).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) / D_HEAD**0.5, dim=-1)
        return self.proj((att @ v).transpose(1, 2).flatten(2))


def _model(fused: bool = False, **kw) -> nn.Module:
    torch.manual_seed(0)
    attn = FusedNormedAttention() if fused else NormedAttention(**kw)
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(0.0, 0.6) if p.dim() == 2 else p.uniform_(0.5, 1.5)
    return nn.Sequential(attn, nn.Flatten(), nn.Linear(SEQ * EMBED, 3)).double().eval()


def _ctx(model: nn.Module, x: Tensor | None = None, family=None) -> DetectionContext:
    if x is None:
        x = torch.randn(N, SEQ, EMBED, generator=torch.Generator().manual_seed(1)).double()
    return DetectionContext.from_model(model, x, family or Gaussian())


def _orbit(model: nn.Module, basis: str, prefix: str = "0.") -> QKNormRescale:
    attn = model.get_submodule(prefix.rstrip("."))
    heads = attn.q_norm.weight.shape[0] // D_HEAD
    units = tuple(
        tuple(h * D_HEAD + i for i in u) for h in range(heads) for u in qk_norm_units(basis, D_HEAD)
    )
    keys = [n for n, _ in attn.named_parameters() if n.startswith(("q_norm", "k_norm"))]
    q = tuple(f"{prefix}{n}" for n in sorted(keys) if n.startswith("q_norm"))[::-1]
    k = tuple(f"{prefix}{n}" for n in sorted(keys) if n.startswith("k_norm"))[::-1]
    return QKNormRescale(q, k, units)  # reversed sort: weight before bias


def _change(ctx: DetectionContext, moved: dict[str, Tensor]) -> float:
    with torch.no_grad():
        base = functional_call(ctx.model, dict(ctx.params), (ctx.data,))
        out = functional_call(ctx.model, {**dict(ctx.params), **moved}, (ctx.data,))
    return float((out - base).abs().max() / base.abs().max())


def _random_factors(n: int, seed: int) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.exp(torch.randn(n, generator=gen, dtype=torch.float64))


def test_units_of_each_basis_partition_the_head() -> None:
    for basis in QK_NORM_BASES:
        units = qk_norm_units(basis, 8, rotary=4)
        assert sorted(i for u in units for i in u) == list(range(8))
    assert qk_norm_units("rope-half", 5) == [] and qk_norm_units("rope-partial-half", 4) == []


@pytest.mark.parametrize(("heads", "d"), [(1, 4), (1, 8), (2, 4), (4, 8)])
def test_per_feature_elements_split_every_rotary_plane_of_every_head(heads: int, d: int) -> None:
    """Over single features the alternating element splits every interleaved plane and the
    halves element every half plane, in each head of a full-width norm: so neither plane basis
    can pass for a per-feature orbit by a coincidence of factors (audit: global halves are
    constant within a head when the norm spans an even number of heads)."""
    alternating, halves, _ = _factor_patterns(heads * d, torch.zeros(1), period=d)
    for h in range(heads):
        for i in range(d // 2):
            a, b = h * d + 2 * i, h * d + 2 * i + 1
            assert alternating[a] != alternating[b]
            a, b = h * d + i, h * d + i + d // 2
            assert halves[a] != halves[b]


def test_unknown_basis_is_refused() -> None:
    with pytest.raises(ValueError, match="basis='so3'; expected one of"):
        qk_norm_units("so3", 4)


@pytest.mark.parametrize(
    ("pos", "carried"),
    [("none", "per-feature"), ("half", "rope-half"), ("interleaved", "rope-interleaved")],
)
def test_only_the_carried_basis_leaves_the_outputs_unchanged(pos: str, carried: str) -> None:
    model = _model(pos=pos)
    ctx = _ctx(model)
    for basis in ("per-feature", "rope-half", "rope-interleaved"):
        orbit = _orbit(model, basis)
        change = _change(ctx, orbit.act(ctx.params, _random_factors(len(orbit.units), 5)))
        holds = carried == "per-feature" or basis == carried
        assert change <= RTOL_INVARIANT if holds else change > BROKEN_MIN, (basis, change)


@pytest.mark.parametrize(("norm", "width"), [("rms", "head"), ("ln", "head"), ("ln", "full")])
def test_tangents_are_the_derivatives_of_the_action(norm: str, width: str) -> None:
    model = _model(norm=norm, width=width, pos="half")
    params = {k: v.detach() for k, v in model.named_parameters()}
    orbit = _orbit(model, "rope-half")
    assert len(orbit.producers) == (2 if norm == "ln" else 1)
    for j in range(len(orbit.units)):
        got, ref = orbit.tangent(params, j), orbit.tangent_reference(params, j)
        assert set(got) == set(ref) == {*orbit.producers, *orbit.consumers}
        for key in got:
            torch.testing.assert_close(got[key], ref[key], atol=ATOL_TANGENT, rtol=0)


@pytest.mark.parametrize(
    ("norm", "width", "pos", "basis"),
    [
        ("rms", "head", "none", "per-feature"),
        ("ln", "head", "half", "rope-half"),
        ("rms", "head", "interleaved", "rope-interleaved"),
        ("ln", "full", "half", "rope-half"),
    ],
)
def test_detector_proposes_the_certified_basis(norm: str, width: str, pos: str, basis: str) -> None:
    model = _model(norm=norm, width=width, pos=pos)
    ctx = _ctx(model)
    (cand,) = QKNormDetector().propose("0", model[0], ctx)
    assert cand.detector == "qk-norm-rescale" and cand.gauge == "curved"
    assert cand.layers == ("0.q_norm", "0.k_norm")
    assert cand.info["basis"] == basis and cand.info["certified_basis"] <= CERTIFY_RTOL
    assert all(v is not None and v > BROKEN_MIN for v in cand.info["rejected"].values())
    earlier = QK_NORM_BASES[: QK_NORM_BASES.index(basis)]
    assert list(cand.info["rejected"]) == [b for b in earlier if qk_norm_units(b, D_HEAD)]
    heads = HEADS if width == "full" else 1
    assert len(cand.gauge_generators) == heads * len(qk_norm_units(basis, D_HEAD))
    # every generator and u itself leave the outputs unchanged to first order
    for t in (cand.u, *cand.gauge_generators):
        assert _change(ctx, {k: ctx.params[k] + STEP * v for k, v in t.items()}) < RTOL_SECOND_ORDER


def test_fused_qkv_layout_with_layernorms_is_certified_per_feature() -> None:
    model = _model(fused=True)
    ctx = _ctx(model)
    (cand,) = QKNormDetector().propose("0", model[0], ctx)
    assert cand.info["basis"] == "per-feature" and cand.info["rejected"] == {}
    assert set(cand.u) == {"0.q_norm.weight", "0.q_norm.bias", "0.k_norm.weight", "0.k_norm.bias"}
    assert len(cand.gauge_generators) == D_HEAD


def test_one_plus_w_key_scale_breaks_every_basis() -> None:
    model = _model(norm="one-plus", pos="half")
    ctx = _ctx(model)
    assert QKNormDetector().applies_to(model[0])
    assert QKNormDetector().propose("0", model[0], ctx) == []
    for basis in QK_NORM_BASES:
        if qk_norm_units(basis, D_HEAD):
            assert certify_basis(ctx, _orbit(model, basis)) > BROKEN_MIN


def test_identity_norms_and_foreign_widths_are_not_handled() -> None:
    plain = NormedAttention()
    plain.q_norm, plain.k_norm = nn.Identity(), nn.Identity()
    assert not QKNormDetector().applies_to(plain)
    odd = NormedAttention()
    odd.k_norm = nn.RMSNorm(3)  # widths differ
    assert not QKNormDetector().applies_to(odd)
    assert not QKNormDetector().applies_to(nn.Linear(2, 2))
    assert any(isinstance(d, QKNormDetector) for d in default_registry())


def _tiny_hf(config: str, model: str, **kw) -> nn.Module:
    """A one-layer Hugging Face model (float64, eval, eager attention) with weights large enough
    for peaked attention and norm scales spread around 1 (a rescale of equal scales is trivial)."""
    if transformers is None:
        pytest.skip("transformers is not installed")
    common = dict(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=16,
        pad_token_id=0,
    )
    cfg = getattr(transformers, config)(**{**common, **kw})
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    net = TensorOutput(getattr(transformers, model)(cfg)).double().eval()
    with torch.no_grad():
        for name, p in net.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.4)
            elif "norm" in name:
                p.uniform_(0.7, 1.3)
    return net


def _qwen3() -> tuple[nn.Module, Tensor]:
    model = _tiny_hf(
        "Qwen3Config",
        "Qwen3ForSequenceClassification",
        num_key_value_heads=2,
        head_dim=4,
        num_labels=3,
    )
    x = torch.randint(1, 32, (24, 6), generator=torch.Generator().manual_seed(0))
    return model, x


def test_qwen3_reads_a_curved_rope_half_gauge() -> None:
    model, x = _qwen3()
    attn = "model.model.layers.0.self_attn"
    ctx = _ctx(model, x, Categorical())
    (cand,) = QKNormDetector().propose(attn, model.get_submodule(attn), ctx)
    assert cand.info["basis"] == "rope-half"
    assert cand.info["rejected"]["per-feature"] > BROKEN_MIN
    reading = read(model, x, Categorical(), progress=False)
    (rec,) = [r for r in reading.directions if r.detector == "qk-norm-rescale"]
    assert (rec.klass, rec.k) == ("curved_gauge", 2)
    assert rec.layers == (f"{attn}.q_norm", f"{attn}.k_norm")


def test_olmo2_full_width_norms_get_plane_units_per_head() -> None:
    model = _tiny_hf("Olmo2Config", "Olmo2ForCausalLM", eos_token_id=1)
    attn = "model.model.layers.0.self_attn"
    assert model.get_submodule(f"{attn}.q_norm").weight.shape == (16,)  # all heads, d_h = 4
    x = torch.randint(1, 32, (8, 6), generator=torch.Generator().manual_seed(0))
    ctx = _ctx(model, x, Categorical())
    (cand,) = QKNormDetector().propose(attn, model.get_submodule(attn), ctx)
    assert cand.info["basis"] == "rope-half" and cand.info["rejected"]["per-feature"] > BROKEN_MIN
    assert len(cand.gauge_generators) == 4 * 2  # two rotary planes in each of four heads
    for t in (cand.u, *cand.gauge_generators):
        assert _change(ctx, {k: ctx.params[k] + STEP * v for k, v in t.items()}) < RTOL_SECOND_ORDER


@pytest.mark.parametrize("kw", [{"width": "full"}, {"width": "head"}, {"fused": True}])
def test_query_key_norms_are_not_reported_as_graph_stops(kw: dict) -> None:
    """s16 trial X #1: every read of a Qwen3/OLMo2 attention noted that q_norm's and k_norm's
    "norm-scale gauge was not proposed" (their output goes through view/transpose/matmul into
    the scores). They feed no Linear, so that gauge does not exist; their gauge, the query/key-
    norm rescale, is proposed. Another norm whose output the graph loses is still reported."""
    from neuromanifold import read

    model = _model(**kw)
    x = torch.randn(N, SEQ, EMBED, generator=torch.Generator().manual_seed(1)).double()
    reading = read(model, x, Gaussian(), progress=False)
    assert not any(name.endswith(("q_norm", "k_norm")) for name in reading.meta["graph_stops"])
    assert "q_norm" not in (reading.note or "") and "k_norm" not in (reading.note or "")
    assert any(d.detector == "qk-norm-rescale" for d in reading.directions)
