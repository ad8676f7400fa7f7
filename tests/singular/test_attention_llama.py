"""QK rotation and VO rescale on Hugging Face Llama attention: RoPE and grouped-query attention.

Laws checked (float64, a tiny ``LlamaForSequenceClassification``, eager attention, with and
without GQA): rotating Q and K of a KV-head group inside each rotary plane ``(i, i + d_h/2)`` and
rescaling a KV head's V rows against the output columns of every query head reading it leave the
outputs unchanged; a generic ``so(d_h)`` rotation does not (RoPE), nor does a VO rescale
compensated on one query head of a group only; the closed-form tangents are the derivatives of
the actions (forward-mode oracle); the detector picks its QK basis by certification (generic
basis without RoPE, the half-planes with Hugging Face RoPE, the interleaved planes with
interleaved RoPE, nothing when no basis is a symmetry); the read classes every proposed
direction as a curved gauge of apparent order 2, which needs the generators.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor, nn
from torch.func import functional_call, jvp

from neuromanifold.io import TensorOutput, import_transformers
from neuromanifold.singular.classify import gauge_overlap
from neuromanifold.singular.detectors import DetectionContext
from neuromanifold.singular.detectors.attention import (
    CERTIFY_ANGLE,
    QK_BASES,
    QK_CERTIFY_RATIO,
    QK_CERTIFY_RTOL,
    AttentionDetector,
    QKRotation,
    VORescale,
    _generator,
    _generic,
    attention_layout,
    qk_basis,
    qk_scale_generators,
)
from neuromanifold.singular.detectors.glu import fused_glu_layout
from neuromanifold.singular.detectors.rescale import (
    MAX_GENERATOR_ENTRIES,
    UnitRescale,
    relative_change,
)
from neuromanifold.singular.detectors.rescale_detectors import GLURescaleDetector
from neuromanifold.singular.direction import read_direction
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.read import read

try:
    transformers = import_transformers()
except ImportError:  # pragma: no cover - depends on the environment
    transformers = None

# outputs at two points of one orbit (float64, rotation matrices orthogonal to rounding):
# measured 0 on the Llama (its eager softmax runs in float32 and absorbs float64 rounding),
# ≤ 3.4e-16 on the float64 attentions below
RTOL_INVARIANT = 1e-12
# closed-form tangent vs the forward-mode derivative of the action: the same products
ATOL_TANGENT = 1e-14
# first-order output change along a gauge tangent, relative to that along the generic
# (non-commuting) rotation's tangent: rounding only (measured ≤ 1e-16)
RTOL_FIRST_ORDER = 1e-12
# a broken orbit (generic rotation under RoPE, a half-compensated VO rescale) moves the outputs
# by O(1) relative (measured 0.12–1.4 here); far above QK_CERTIFY_RTOL
BROKEN_MIN = 1e-3

HIDDEN, HEADS, VOCAB, SEQ, N = 16, 4, 32, 6, 24
D_HEAD = HIDDEN // HEADS
ATTN = "model.model.layers.0.self_attn"
CONFIGS = {"mha": 4, "gqa": 2}  # KV heads


def _need_transformers() -> None:
    if transformers is None:
        pytest.skip("transformers is not installed")


def _llama(kv_heads: int) -> tuple[nn.Module, Tensor]:
    """One-layer Llama classifier (float64, eval), weights large enough for peaked attention."""
    _need_transformers()
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        num_key_value_heads=kv_heads,
        max_position_embeddings=16,
        num_labels=3,
        pad_token_id=0,
    )
    return _peaked(transformers.LlamaForSequenceClassification, cfg)


def _peaked(cls: type, cfg: object) -> tuple[nn.Module, Tensor]:
    """``cls(cfg)`` in float64, eval, eager attention, its matrices drawn at scale 0.4 (peaked
    attention), and seeded token ids."""
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = TensorOutput(cls(cfg)).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.4)
    x = torch.randint(1, VOCAB, (N, SEQ), generator=torch.Generator().manual_seed(0))
    return model, x


# overlap of a unit vector with a span holding it: rounding of one SVD
ATOL_OVERLAP = 1e-12
# a broken basis's change over the reference change stays this far above QK_CERTIFY_RATIO
QK_CERTIFY_RATIO_MARGIN = 100.0


def _ctx(model: nn.Module, x: Tensor, family=None) -> DetectionContext:
    return DetectionContext.from_model(model, x, family or Categorical())


def _change(model: nn.Module, moved: nn.Module, x: Tensor) -> float:
    with torch.no_grad():
        base, out = model(x), moved(x)
    return float((out - base).abs().max() / base.abs().max())


def _plane_rotation(angles: Tensor) -> Tensor:
    """Rotation by ``angles[i]`` in each plane ``(i, i + d/2)`` (``d = 2·len(angles)``)."""
    half = angles.numel()
    r = torch.eye(2 * half, dtype=torch.float64)
    for i, a in enumerate(angles.tolist()):
        c, s = math.cos(a), math.sin(a)
        j = i + half
        r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
    return r


def _rotate_group(model: nn.Module, rots: dict[int, Tensor]) -> nn.Module:
    """Copy of ``model`` with Q rows of every query head of group g and K rows of KV head g
    multiplied by ``rots[g]`` (written directly on the modules: independent of the package)."""
    out = copy.deepcopy(model)
    attn = out.model.model.layers[0].self_attn
    rep = HEADS // (attn.k_proj.out_features // D_HEAD)
    with torch.no_grad():
        for g, r in rots.items():
            ks = slice(g * D_HEAD, (g + 1) * D_HEAD)
            attn.k_proj.weight[ks] = r @ attn.k_proj.weight[ks]
            for h in range(g * rep, (g + 1) * rep):
                qs = slice(h * D_HEAD, (h + 1) * D_HEAD)
                attn.q_proj.weight[qs] = r @ attn.q_proj.weight[qs]
    return out


def _rescale_group(model: nn.Module, factors: Tensor, *, compensate_all: bool = True) -> nn.Module:
    out = copy.deepcopy(model)
    attn = out.model.model.layers[0].self_attn
    rep = HEADS // factors.numel()
    with torch.no_grad():
        for g, c in enumerate(factors.tolist()):
            attn.v_proj.weight[g * D_HEAD : (g + 1) * D_HEAD] *= c
            heads = range(g * rep, (g + 1) * rep) if compensate_all else (g * rep,)
            for h in heads:
                attn.o_proj.weight[:, h * D_HEAD : (h + 1) * D_HEAD] /= c
    return out


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_layout_reads_heads_groups_and_head_width_from_the_config(case: str) -> None:
    model, _ = _llama(CONFIGS[case])
    lay = attention_layout(model.get_submodule(ATTN))
    assert (lay.heads, lay.n_kv, lay.d_head) == (HEADS, CONFIGS[case], D_HEAD)
    rep = HEADS // CONFIGS[case]
    assert [lay.group(g) for g in range(lay.n_kv)] == [
        tuple(range(g * rep, (g + 1) * rep)) for g in range(lay.n_kv)
    ]
    assert lay.o == "o_proj.weight" and lay.layers["v"] == "v_proj"


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_rope_plane_rotation_and_grouped_vo_rescale_leave_outputs_unchanged(case: str) -> None:
    model, x = _llama(CONFIGS[case])
    gen = torch.Generator().manual_seed(3)
    rots = {
        g: _plane_rotation(torch.rand(D_HEAD // 2, generator=gen, dtype=torch.float64) * 6.0)
        for g in range(CONFIGS[case])
    }
    assert _change(model, _rotate_group(model, rots), x) <= RTOL_INVARIANT
    c = 0.5 + 1.5 * torch.rand(CONFIGS[case], generator=gen, dtype=torch.float64)
    assert _change(model, _rescale_group(model, c), x) <= RTOL_INVARIANT
    # the package's actions are the same group elements
    ctx = _ctx(model, x)
    lay = attention_layout(model.get_submodule(ATTN))
    for moved, acted in (
        (_rotate_group(model, rots), QKRotation(lay, f"{ATTN}.").act(ctx.params, rots)),
        (_rescale_group(model, c), VORescale(lay, f"{ATTN}.").act(ctx.params, c)),
    ):
        ref = dict(moved.named_parameters())
        for key, value in acted.items():
            torch.testing.assert_close(value, ref[key].detach(), rtol=0, atol=ATOL_TANGENT)


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_generic_rotation_and_half_compensated_rescale_break_the_outputs(case: str) -> None:
    model, x = _llama(CONFIGS[case])
    gen = torch.Generator().manual_seed(4)
    rots = {}
    for g in range(CONFIGS[case]):
        m = torch.randn(D_HEAD, D_HEAD, generator=gen, dtype=torch.float64)
        s = m - m.T
        rots[g] = torch.linalg.matrix_exp(CERTIFY_ANGLE * s / torch.linalg.matrix_norm(s, ord=2))
    assert _change(model, _rotate_group(model, rots), x) > BROKEN_MIN  # RoPE breaks so(d_h)
    if CONFIGS[case] < HEADS:  # GQA: every query head of the group must be compensated
        c = torch.full((CONFIGS[case],), 2.0, dtype=torch.float64)
        assert _change(model, _rescale_group(model, c, compensate_all=False), x) > BROKEN_MIN


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_tangents_are_the_derivatives_of_the_actions(case: str) -> None:
    """Against forward-mode AD of ``exp(tM)``'s action: a rotation ``M − Mᵀ`` and a general
    ``M`` (keys ``M K``, queries ``−Mᵀ Q``; V ``M V``, output columns ``−O M``: the GL(d_h)
    completions, s27 audit LLAMA D1) and the scalar VO rescale, which is ``M = I``."""
    model, x = _llama(CONFIGS[case])
    ctx = _ctx(model, x)
    lay = attention_layout(model.get_submodule(ATTN))
    qk, vo = QKRotation(lay, f"{ATTN}."), VORescale(lay, f"{ATTN}.")
    m = torch.randn(D_HEAD, D_HEAD, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    eye = torch.eye(D_HEAD, dtype=torch.float64)
    for g in range(lay.n_kv):
        for fast, ref in (
            (qk.tangent(ctx.params, g, m - m.T), qk.tangent_reference(ctx.params, g, m - m.T)),
            (qk.tangent(ctx.params, g, m), qk.tangent_reference(ctx.params, g, m)),
            (vo.tangent(ctx.params, g), vo.tangent_reference(ctx.params, g)),
            (vo.matrix_tangent(ctx.params, g, m), vo.matrix_tangent_reference(ctx.params, g, m)),
        ):
            assert fast.keys() == ref.keys()
            for k in fast:
                torch.testing.assert_close(fast[k], ref[k], rtol=0, atol=ATOL_TANGENT)
        scalar = vo.tangent(ctx.params, g)  # M = I is the scalar rescale, bit for bit
        for k, v in vo.matrix_tangent(ctx.params, g, eye).items():
            torch.testing.assert_close(v, scalar[k], rtol=0, atol=0.0)


def _first_order(ctx: DetectionContext, t: dict[str, Tensor]) -> float:
    x = ctx.data[:8]
    keys = sorted(t)

    def f(*vals: Tensor) -> Tensor:
        moved = dict(zip(keys, vals, strict=True))
        return functional_call(ctx.model, {**ctx.params, **moved}, (x,))

    _, d = jvp(f, tuple(ctx.params[k] for k in keys), tuple(t[k] for k in keys))
    return float(d.abs().max())


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_detector_proposes_certified_rope_planes_and_grouped_rescales(case: str) -> None:
    model, x = _llama(CONFIGS[case])
    ctx = _ctx(model, x)
    cands = AttentionDetector().propose(ATTN, model.get_submodule(ATTN), ctx)
    kinds = Counter(c.detector for c in cands)
    assert kinds == {"qk-rotation": CONFIGS[case], "vo-rescale": CONFIGS[case]}
    lay = attention_layout(model.get_submodule(ATTN))
    m = torch.randn(D_HEAD, D_HEAD, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    generic = QKRotation(lay, f"{ATTN}.").tangent(ctx.params, 0, m - m.T)
    scale = _first_order(ctx, generic)
    assert scale > 0.0
    for c in cands:
        assert c.gauge == "curved"
        assert c.info["certified"] <= (QK_CERTIFY_RTOL if c.detector == "qk-rotation" else 0.0)
        assert _first_order(ctx, c.u) <= RTOL_FIRST_ORDER * scale
        if c.detector == "qk-rotation":
            assert c.info["basis"] == "rope-half"
            assert c.info["rejected"]["so(d_head)"] > BROKEN_MIN
            # the rotation and the scale of each rotary plane (module docstring, "QK scales")
            assert len(qk_basis("rope-half", D_HEAD)) == c.info["n_scales"] == D_HEAD // 2
            assert len(c.gauge_generators) == D_HEAD
            assert c.layers == (f"{ATTN}.q_proj", f"{ATTN}.k_proj")
        else:
            assert c.layers == (f"{ATTN}.v_proj", f"{ATTN}.o_proj")
        if CONFIGS[case] < HEADS:
            rep = HEADS // CONFIGS[case]
            g = c.info["head"]
            assert c.info["query_heads"] == list(range(g * rep, (g + 1) * rep))
        for t in c.gauge_generators:
            assert _first_order(ctx, t) <= RTOL_FIRST_ORDER * scale


def test_read_gives_curved_gauge_records_of_order_two() -> None:
    model, x = _llama(CONFIGS["gqa"])
    reading = read(model, x, Categorical(), progress=False)
    recs = [r for r in reading.directions if r.detector in ("qk-rotation", "vo-rescale")]
    assert Counter((r.detector, r.klass, r.k) for r in recs) == {
        ("qk-rotation", "curved_gauge", 2): CONFIGS["gqa"],
        ("vo-rescale", "curved_gauge", 2): CONFIGS["gqa"],
    }
    assert {r.layers for r in recs} == {
        (f"{ATTN}.q_proj", f"{ATTN}.k_proj"),
        (f"{ATTN}.v_proj", f"{ATTN}.o_proj"),
    }
    assert reading.not_covered == ()


def test_straight_probe_reads_order_two_and_the_generators_make_it_a_gauge() -> None:
    model, x = _llama(CONFIGS["gqa"])
    ctx = _ctx(model, x)
    cands = AttentionDetector().propose(ATTN, model.get_submodule(ATTN), ctx)
    for kind in ("qk-rotation", "vo-rescale"):
        cand = next(c for c in cands if c.detector == kind)
        with_gens = read_direction(
            model, ctx.params, cand.u, x, Categorical(), gauge_generators=cand.gauge_generators
        )
        assert with_gens.k == 2 and with_gens.klass.value == "curved_gauge"
        without = read_direction(model, ctx.params, cand.u, x, Categorical())
        assert without.k == 2 and without.klass.value == "genuine_singularity"  # the mimic


# ---------------------------------------------------------------- layouts outside Llama


class _ConfigAttention(nn.Module):
    """GQA self-attention with a Hugging Face style ``config`` (no int head attribute).

    ``pos``: ``"none"`` (no position encoding), ``"interleaved"`` (RoPE on planes
    ``(2i, 2i+1)``) or ``"scaled"`` (queries scaled per dimension: no rotation commutes).
    ``int_heads``: int ``num_heads``/``num_key_value_heads`` attributes instead of a config.
    """

    def __init__(
        self,
        *,
        heads: int = 2,
        kv: int = 1,
        d_head: int = 4,
        pos: str = "none",
        int_heads: bool = False,
    ):
        super().__init__()
        if int_heads:
            self.num_heads, self.num_key_value_heads = heads, kv
        else:
            self.config = SimpleNamespace(num_attention_heads=heads, num_key_value_heads=kv)
        self.n_q, self.n_kv = heads, kv
        self.head_dim, self.pos, d = d_head, pos, 8
        self.q_proj = nn.Linear(d, heads * d_head)
        self.k_proj = nn.Linear(d, kv * d_head)
        self.v_proj = nn.Linear(d, kv * d_head)
        self.o_proj = nn.Linear(heads * d_head, d)
        self.register_buffer("diag", torch.linspace(0.5, 2.0, d_head))

    def _rope(self, z: Tensor) -> Tensor:
        n = z.shape[-2]
        freq = 1.0 / (10.0 ** torch.arange(self.head_dim // 2, dtype=z.dtype))
        ang = torch.arange(n, dtype=z.dtype)[:, None] * freq  # (n, d/2)
        a, b = z[..., 0::2], z[..., 1::2]
        out = torch.stack((a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()), -1)
        return out.flatten(-2)

    def forward(self, x: Tensor) -> Tensor:
        bsz, n, _ = x.shape
        heads, kv = self.n_q, self.n_kv
        q = self.q_proj(x).view(bsz, n, heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, n, kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, n, kv, self.head_dim).transpose(1, 2)
        if self.pos == "interleaved":
            q, k = self._rope(q), self._rope(k)
        elif self.pos == "scaled":
            q = q * self.diag
        k = k.repeat_interleave(heads // kv, dim=1)
        v = v.repeat_interleave(heads // kv, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / self.head_dim**0.5, dim=-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(bsz, n, -1))


def _config_attention(pos: str, **kw) -> tuple[DetectionContext, nn.Module]:
    torch.manual_seed(1)
    model = _ConfigAttention(pos=pos, **kw).double().eval()
    x = torch.randn(N, 5, 8, dtype=torch.float64)
    return _ctx(model, x, Gaussian()), model


@pytest.mark.parametrize(
    ("pos", "basis", "int_heads"),
    [
        ("none", "so(d_head)", False),
        ("interleaved", "rope-interleaved", False),
        ("interleaved", "rope-interleaved", True),
        ("scaled", None, False),
    ],
)
def test_certification_picks_the_basis_the_model_carries(
    pos: str, basis: str | None, int_heads: bool
) -> None:
    ctx, model = _config_attention(pos, int_heads=int_heads)
    cands = AttentionDetector().propose("", model, ctx)
    qk = [c for c in cands if c.detector == "qk-rotation"]
    vo = [c for c in cands if c.detector == "vo-rescale"]
    assert len(vo) == 1 and vo[0].info["certified"] == 0.0  # powers of two: exact
    if basis is None:
        assert qk == []
        return
    (c,) = qk
    assert c.info["basis"] == basis and c.info["certified"] <= QK_CERTIFY_RTOL
    assert all(v > BROKEN_MIN for v in c.info["rejected"].values())
    n_scales = len(qk_scale_generators(basis, 4, torch.device("cpu")))
    assert c.info["n_scales"] == n_scales and c.info["scales"] <= QK_CERTIFY_RTOL
    assert len(c.gauge_generators) == len(qk_basis(basis, 4)) + n_scales
    assert c.info["query_heads"] == [0, 1]


def test_scaled_queries_break_every_basis() -> None:
    """The negative control of certification: with per-dimension query scales no basis holds."""
    ctx, model = _config_attention("scaled")
    lay = attention_layout(model)
    orbit = QKRotation(lay, "")
    for name in QK_BASES:
        (i, j) = qk_basis(name, 4, rotary=2)[0]
        s = torch.zeros(4, 4, dtype=torch.float64)
        s[i, j], s[j, i] = 1.0, -1.0
        moved = orbit.act(ctx.params, {0: torch.linalg.matrix_exp(CERTIFY_ANGLE * s)})
        assert relative_change(ctx, moved) > BROKEN_MIN


def test_packed_multihead_attention_is_certified_with_the_generic_basis() -> None:
    """``nn.MultiheadAttention`` (no position encoding): every head's QK rotation certifies the
    full ``so(d_h)``, its VO rescale bitwise."""
    torch.manual_seed(2)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True, norm_first=True)
    model = nn.Sequential(layer, nn.Flatten(), nn.Linear(24, 2)).double().eval()
    ctx = _ctx(model, torch.randn(N, 3, 8, dtype=torch.float64), Gaussian())
    cands = AttentionDetector().propose("0.self_attn", model[0].self_attn, ctx)
    assert Counter(c.detector for c in cands) == {"qk-rotation": 2, "vo-rescale": 2}
    for c in cands:
        if c.detector == "qk-rotation":
            assert c.info["basis"] == "so(d_head)" and c.info["rejected"] == {}
            assert c.info["certified"] <= QK_CERTIFY_RTOL
            assert len(c.gauge_generators) == 6 + 10  # so(4) and sym(4): gl(4)
        else:
            assert c.info["certified"] == 0.0
            assert len(c.gauge_generators) == 1 + 16  # u, then gl(4)


def test_a_zeroed_kv_head_gets_no_candidate() -> None:
    """A KV head whose Q, K, V rows and output columns are zero has zero tangents: it is left
    out (no zero direction is normalised), the other head keeps its candidates."""
    torch.manual_seed(1)
    model = _ConfigAttention(heads=2, kv=2).double().eval()
    with torch.no_grad():
        for lin in (model.q_proj, model.k_proj, model.v_proj):
            lin.weight[:4] = 0.0
            lin.bias[:4] = 0.0
        model.o_proj.weight[:, :4] = 0.0
    ctx = _ctx(model, torch.randn(N, 5, 8, dtype=torch.float64), Gaussian())
    cands = AttentionDetector().propose("", model, ctx)
    assert sorted((c.detector, c.info["head"]) for c in cands) == [
        ("qk-rotation", 1),
        ("vo-rescale", 1),
    ]


@pytest.mark.parametrize("bad", ["o_width", "k_width", "groups"])
def test_mismatched_widths_are_not_recognised(bad: str) -> None:
    model = _ConfigAttention()
    if bad == "o_width":
        model.o_proj = nn.Linear(6, 8)
    elif bad == "k_width":
        model.k_proj = nn.Linear(8, 8)  # two KV heads' rows for one KV head
    else:
        model.config.num_key_value_heads = 3  # 2 query heads cannot share 3 KV heads
    assert attention_layout(model) is None
    assert not AttentionDetector().applies_to(model)
    assert AttentionDetector().propose("", model, None) == []


@pytest.mark.parametrize("d", [4, 6, 8])
@pytest.mark.parametrize("name", QK_BASES)
def test_generic_rotation_is_the_sum_of_its_basis_generators(name: str, d: int) -> None:
    """Oracle of `_generic` (written entry by entry): ``Σ_p c_p (E_ij − E_ji)`` summed densely
    with the same seeded coefficients, normalised to spectral norm 1 — the same floats."""
    pairs = qk_basis(name, d, rotary=2)
    cpu = torch.device("cpu")
    coef = torch.randn(len(pairs), generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    dense = sum(c * _generator(d, p, cpu) for c, p in zip(coef.tolist(), pairs, strict=True))
    dense = dense / torch.linalg.matrix_norm(dense, ord=2)
    assert torch.equal(_generic(pairs, d, 11, cpu), dense)


def test_qk_basis_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match=r"qk_basis: name='so\(3\)'; expected one of"):
        qk_basis("so(3)", 4)
    assert qk_basis("rope-half", 5) == []  # odd widths have no rotary planes


def test_wide_head_keeps_its_generators_within_the_budget() -> None:
    """One 128-wide head: ``so(128)`` has 8 128 generators of 49 536 entries each (the packed
    in-projection), far over `MAX_GENERATOR_ENTRIES`; the candidate keeps ``u`` first (so it lies
    in its own span) and as many basis tangents as the budget allows, and says so."""
    torch.manual_seed(3)
    attn = nn.MultiheadAttention(128, 1, batch_first=True)

    class Wrap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = attn

        def forward(self, x: Tensor) -> Tensor:
            return self.attn(x, x, x, need_weights=False)[0].mean(1)

    model = Wrap().double().eval()
    ctx = _ctx(model, torch.randn(4, 3, 128, dtype=torch.float64), Gaussian())
    (qk,) = [
        c for c in AttentionDetector().propose("attn", attn, ctx) if c.detector == "qk-rotation"
    ]
    entries = attn.in_proj_weight.numel() + attn.in_proj_bias.numel()
    cap = MAX_GENERATOR_ENTRIES // entries
    assert len(qk.gauge_generators) == cap
    assert qk.info["truncated"] == {
        "cap": cap,
        "found": 128 * 127 // 2 + 128 * 129 // 2 + 1,  # so(128), sym(128) and u
        "kept": cap,
        "of": "generators",
    }
    assert gauge_overlap(qk.u, qk.gauge_generators) == pytest.approx(1.0, abs=ATOL_OVERLAP)


@pytest.mark.parametrize("scale", [1.0, 1e-2, 1e-3])
def test_small_query_key_weights_do_not_certify_a_broken_basis(scale: float) -> None:
    """A broken rotation moves the outputs by an amount quadratic in the QK weight scale; the
    reference (queries-only) rotation shrinks alike, so the ratio test keeps rejecting
    ``so(d_head)`` under RoPE at every scale while the rotary planes still certify."""
    ctx, model = _config_attention("interleaved")
    with torch.no_grad():
        for lin in (model.q_proj, model.k_proj):
            lin.weight.mul_(scale)
            lin.bias.mul_(scale)
    ctx = _ctx(model, ctx.data, Gaussian())
    (c,) = [c for c in AttentionDetector().propose("", model, ctx) if c.detector == "qk-rotation"]
    assert c.info["basis"] == "rope-interleaved"
    ratio = c.info["rejected"]["so(d_head)"] / c.info["reference"]
    assert ratio > QK_CERTIFY_RATIO_MARGIN * QK_CERTIFY_RATIO
    assert c.info["certified"] <= QK_CERTIFY_RATIO * c.info["reference"]


# ------------------------------- QK scales and VO GL(d_h) (s27 audit LLAMA D1, trial HF D6)


def test_rope_plane_scales_are_symmetries_and_sym_d_is_not() -> None:
    """Under RoPE (rotate_half planes) ``exp`` of a generic combination of the plane scales
    ``E_ii + E_jj`` (keys times A, queries times A⁻¹) leaves the outputs unchanged; a generic
    symmetric ``M`` of all of ``sym(d_h)`` moves them by O(1): the scales are per plane."""
    model, x = _llama(CONFIGS["gqa"])
    ctx = _ctx(model, x)
    lay = attention_layout(model.get_submodule(ATTN))
    orbit = QKRotation(lay, f"{ATTN}.")
    cpu = torch.device("cpu")
    gen = torch.Generator().manual_seed(9)
    for name, holds in (("rope-half", True), ("so(d_head)", False)):
        gens = qk_scale_generators(name, D_HEAD, cpu)
        moves = {}
        for g in range(lay.n_kv):
            c = torch.randn(len(gens), generator=gen, dtype=torch.float64)
            moves[g] = torch.linalg.matrix_exp(
                sum(float(a) * m for a, m in zip(c, gens, strict=True))
            )
        change = relative_change(ctx, orbit.act(ctx.params, moves))
        assert (change <= RTOL_INVARIANT) if holds else (change > BROKEN_MIN), (name, change)


def test_the_scale_and_gl_directions_read_as_gauges_with_the_candidates_generators() -> None:
    """The directions the audit read as genuine singularities of order 2 (s27 audit LLAMA D1):
    the per-head QK scalar (K·c, Q/c), a rotary plane's scale, and a symmetric VO generator.
    With the candidates' generators they are curved gauges (overlap 1); without, the straight
    probe's apparent order 2 mimics a genuine singularity."""
    model, x = _llama(CONFIGS["gqa"])
    ctx = _ctx(model, x)
    lay = attention_layout(model.get_submodule(ATTN))
    cands = AttentionDetector().propose(ATTN, model.get_submodule(ATTN), ctx)
    qk = next(c for c in cands if c.detector == "qk-rotation" and c.info["head"] == 0)
    vo = next(c for c in cands if c.detector == "vo-rescale" and c.info["head"] == 0)
    assert vo.info["gl"]["certified"] <= QK_CERTIFY_RTOL
    assert len(vo.gauge_generators) == 1 + D_HEAD**2
    eye = torch.eye(D_HEAD, dtype=torch.float64)
    plane = torch.zeros(D_HEAD, D_HEAD, dtype=torch.float64)
    plane[0, 0] = plane[D_HEAD // 2, D_HEAD // 2] = 1.0  # the scale of rotary plane (0, d_h/2)
    sym = torch.randn(D_HEAD, D_HEAD, generator=torch.Generator().manual_seed(10))
    sym = (sym + sym.T).double()
    directions = (
        (QKRotation(lay, f"{ATTN}.").tangent(ctx.params, 0, eye), qk),
        (QKRotation(lay, f"{ATTN}.").tangent(ctx.params, 0, plane), qk),
        (VORescale(lay, f"{ATTN}.").matrix_tangent(ctx.params, 0, sym), vo),
    )
    for t, cand in directions:
        u = {k: v / torch.sqrt(sum((w**2).sum() for w in t.values())) for k, v in t.items()}
        assert gauge_overlap(u, cand.gauge_generators) == pytest.approx(1.0, abs=ATOL_OVERLAP)
        got = read_direction(
            model, ctx.params, u, x, Categorical(), gauge_generators=cand.gauge_generators
        )
        assert (got.klass.value, got.k) == ("curved_gauge", 2)
        bare = read_direction(model, ctx.params, u, x, Categorical())
        assert (bare.klass.value, bare.k) == ("genuine_singularity", 2)


class _GatedOutput(_ConfigAttention):
    """Each head's attention output times a fixed per-dimension gate before ``o_proj``: V's
    scalar rescale still commutes with it, a general ``A`` does not."""

    def forward(self, x: Tensor) -> Tensor:
        bsz, n, _ = x.shape
        heads, kv = self.n_q, self.n_kv
        q = self.q_proj(x).view(bsz, n, heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, n, kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, n, kv, self.head_dim).transpose(1, 2)
        k = k.repeat_interleave(heads // kv, dim=1)
        v = v.repeat_interleave(heads // kv, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / self.head_dim**0.5, dim=-1)
        return self.o_proj(((att @ v) * self.diag).transpose(1, 2).reshape(bsz, n, -1))


def test_vo_gl_is_not_certified_where_a_gate_breaks_it() -> None:
    torch.manual_seed(1)
    model = _GatedOutput().double().eval()
    ctx = _ctx(model, torch.randn(N, 5, 8, dtype=torch.float64), Gaussian())
    cands = AttentionDetector().propose("", model, ctx)
    (vo,) = [c for c in cands if c.detector == "vo-rescale"]
    assert vo.info["certified"] == 0.0 and vo.info["gl"] is None
    assert vo.gauge_generators == (vo.u,)
    # the law behind the refusal: a generic A on V against A⁻¹ on O moves the outputs
    orbit = VORescale(attention_layout(model), "")
    m = torch.randn(4, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    moved = orbit.act_matrices(ctx.params, {0: torch.linalg.matrix_exp(m / 4)})
    assert relative_change(ctx, moved) > BROKEN_MIN


def _phi3(**extra) -> tuple[nn.Module, Tensor]:
    _need_transformers()
    cfg = transformers.Phi3Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        num_key_value_heads=2,
        max_position_embeddings=16,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
        **extra,
    )
    return _peaked(transformers.Phi3ForCausalLM, cfg)


def test_phi3_fused_qkv_with_gqa_is_read_like_separate_projections() -> None:
    """Phi-3's one ``qkv_proj`` (rows Q, K, V of widths heads·d_h, kv·d_h, kv·d_h) had no
    layout, so none of its attention gauges was proposed (s27 audit LLAMA D2). Now: one QK and
    one VO candidate per KV head, RoPE planes certified, every generator first-order exact."""
    model, x = _phi3()
    ctx = _ctx(model, x)
    lay = attention_layout(model.get_submodule(ATTN))
    assert (lay.q[2], lay.k[2], lay.v[2]) == (0, HEADS * D_HEAD, (HEADS + 2) * D_HEAD)
    assert lay.n_kv == 2 and lay.layers["q"] == "qkv_proj"
    cands = AttentionDetector().propose(ATTN, model.get_submodule(ATTN), ctx)
    assert Counter(c.detector for c in cands) == {"qk-rotation": 2, "vo-rescale": 2}
    m = torch.randn(D_HEAD, D_HEAD, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    scale = _first_order(ctx, QKRotation(lay, f"{ATTN}.").tangent(ctx.params, 0, m - m.T))
    assert scale > 0.0
    for c in cands:
        if c.detector == "qk-rotation":
            assert c.info["basis"] == "rope-half" and c.info["n_scales"] == D_HEAD // 2
        else:
            assert c.info["gl"] is not None and len(c.gauge_generators) == 1 + D_HEAD**2
        assert c.info["query_heads"] == [2 * c.info["head"], 2 * c.info["head"] + 1]
        for t in (c.u, *c.gauge_generators):
            assert _first_order(ctx, t) <= RTOL_FIRST_ORDER * scale


def test_phi3_partial_rotary_width_comes_from_its_config() -> None:
    """Phi-3 at ``partial_rotary_factor = 0.5`` states the width only in its config: the layout
    reads it (d_h/2), the partial basis certifies, and a diagonal scaling of the dimensions no
    position touches (an exact symmetry, s27b audit RERUN #3, read genuine k = 2 before) lies in
    the candidate's span."""
    model, x = _phi3(partial_rotary_factor=0.5)
    ctx = _ctx(model, x)
    lay = attention_layout(model.get_submodule(ATTN))
    assert lay.rotary_dims == D_HEAD // 2
    cands = AttentionDetector().propose(ATTN, model.get_submodule(ATTN), ctx)
    qk = next(c for c in cands if c.detector == "qk-rotation" and c.info["head"] == 0)
    assert qk.info["basis"] == "rope-partial-half"
    m = torch.zeros(D_HEAD, D_HEAD, dtype=torch.float64)
    m[2, 2], m[3, 3] = 1.0, -1.0
    t = QKRotation(lay, f"{ATTN}.").tangent(ctx.params, 0, m)
    u = {k: v / torch.sqrt(sum((w**2).sum() for w in t.values())) for k, v in t.items()}
    assert gauge_overlap(u, qk.gauge_generators) == pytest.approx(1.0, abs=ATOL_OVERLAP)


MLP = "model.model.layers.0.mlp"


class _UpFirst(nn.Module):
    """A fused gated feed-forward block whose ``gate_up_proj`` rows are up first, gate second
    (``down(SiLU(rows h…2h−1) ⊙ rows 0…h−1)``): the names promise the Phi-3 order, the forward
    breaks it."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(d, 2 * h, bias=False)
        self.down_proj = nn.Linear(h, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        up, gate = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(nn.functional.silu(gate) * up)


def test_phi3_fused_gate_up_gets_the_swiglu_rescale() -> None:
    """Phi-3's fused ``gate_up_proj`` (gate rows first, then up rows) got no SwiGLU rescale (s27
    audit LLAMA D2): the up rows ``h + j`` against ``down_proj``'s columns ``j`` are an exact
    orbit. Now one certified candidate with a generator per hidden unit, each tangent the
    derivative of the action (forward-mode oracle) and first-order exact; the read classes it a
    curved gauge of apparent order 2."""
    model, x = _phi3()
    ctx = _ctx(model, x)
    mlp = model.get_submodule(MLP)
    (cand,) = GLURescaleDetector().propose(MLP, mlp, ctx)
    hidden = mlp.down_proj.in_features
    assert cand.layers == (f"{MLP}.gate_up_proj", f"{MLP}.down_proj")
    assert cand.info["certified"] == 0.0 and len(cand.gauge_generators) == hidden
    orbit = UnitRescale(
        (f"{MLP}.gate_up_proj.weight",), (f"{MLP}.down_proj.weight",), 1, offset=hidden
    )
    lay = attention_layout(model.get_submodule(ATTN))
    m = torch.randn(D_HEAD, D_HEAD, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    scale = _first_order(ctx, QKRotation(lay, f"{ATTN}.").tangent(ctx.params, 0, m - m.T))
    for j in (0, cand.info["unit"], hidden - 1):
        tangent = orbit.tangent(ctx.params, j)
        oracle = orbit.tangent_reference(ctx.params, j)
        for key, value in tangent.items():
            torch.testing.assert_close(value, oracle[key], rtol=0.0, atol=ATOL_TANGENT)
        gate_rows = tangent[f"{MLP}.gate_up_proj.weight"][:hidden]
        assert not gate_rows.any()  # the gate rows are never moved
        assert _first_order(ctx, tangent) <= RTOL_FIRST_ORDER * scale
    reading = read(model, x, Categorical())
    (rec,) = [r for r in reading.directions if r.detector == "glu-rescale"]
    assert (rec.klass, rec.k) == ("curved_gauge", 2)


def test_fused_gate_up_in_another_row_order_is_not_certified() -> None:
    """The row order is the name's convention; a block that reads its up rows first fails the
    certification (rescaling the gate's rows through SiLU moves the output) and gets nothing."""
    torch.manual_seed(3)
    model = nn.Sequential(_UpFirst(6, 5)).double().eval()
    ctx = _ctx(model, torch.randn(N, 6, dtype=torch.float64), Gaussian())
    assert fused_glu_layout(model[0]) == ("gate_up_proj", "down_proj")
    assert GLURescaleDetector().propose("0", model[0], ctx) == []
    hidden = 5
    orbit = UnitRescale(("0.gate_up_proj.weight",), ("0.down_proj.weight",), 1, offset=hidden)
    factors = torch.full((hidden,), 2.0, dtype=torch.float64)
    assert relative_change(ctx, orbit.act(ctx.params, factors)) > BROKEN_MIN
