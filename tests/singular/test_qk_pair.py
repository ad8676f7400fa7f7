"""The ``qk-pair`` detector: a query/key bilinear dead entry is an order-2 direction (spec §6.5).

s17 trial AD #2: with query feature j and key feature j of one head dead (rows and biases zero)
each one-sided move is flat, but the joint move changes the scores by ``t² (a·x_t)(b·x_s)``. The
read reported only the two flat ``kfac-G`` records; the dead QK head alike. Here the joint
direction is proposed (`QKPairDetector`) and reads ``genuine_singularity`` with k = 2 through
`neuromanifold.read`, for ``nn.MultiheadAttention``, separate q/k/v ``nn.Linear`` projections
(the zoo ViT's `Attention`), a fused ``qkv`` block and grouped-query attention; a live attention
gets no candidate.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from torch import nn

from neuromanifold import Categorical, Gaussian, read
from neuromanifold.singular.assembly import assemble_from_reading
from neuromanifold.singular.detectors import DetectionContext, default_registry
from neuromanifold.singular.detectors.linear import block_spectrum
from neuromanifold.singular.detectors.qk_pair import (
    PairSide,
    QKPairDetector,
    canonical_span,
    dead_pair_span,
    dead_pair_span_reference,
    head_energy_max,
)
from neuromanifold.zoo.models import Attention, ViTConfig, build_model

# Two spans agree to float64 rounding: both are eigen-selections and a polar factor of d_h × d_h
# matrices (measured ≤ 1e-14 on the random cases below)
ATOL_SPAN = 1e-10
# Exact zeros planted in the weights stay exactly zero in the direction (the lift is an outer
# product with the zero pattern of v, which is exact for an axis-aligned v); rotated v: rounding
ATOL_SUPPORT = 1e-12

D, HEADS, T = 6, 2, 5


def _records(reading, detector: str = "qk-pair"):
    return [d for d in reading.directions if d.detector == detector]


class _MHABlock(nn.Module):
    """The trial's model: one ``nn.MultiheadAttention`` and a Linear head on the token mean."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.head = nn.Linear(D, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.attn(x, x, x, need_weights=False)[0].mean(1))


class _Wrap(nn.Module):
    """An attention module (``x (N, T, D) → (N, T, D)``) and a Linear head on the token mean."""

    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        self.attn = attn
        self.head = nn.Linear(D, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.attn(x).mean(1))


class _Fused(nn.Module):
    """timm-style attention: one ``qkv`` Linear with rows ``[Q; K; V]``, output ``proj``."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.num_heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        h = self.num_heads
        q, k, v = self.qkv(x).reshape(n, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // h), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(n, t, d))


class _NeoX(nn.Module):
    """GPT-NeoX-style attention: ``query_key_value`` rows ``[Q_h; K_h; V_h]`` per head."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.num_attention_heads = heads
        self.query_key_value = nn.Linear(d, 3 * d)
        self.dense = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        h = self.num_attention_heads
        dh = d // h
        qkv = self.query_key_value(x).reshape(n, t, h, 3 * dh).transpose(1, 2)
        q, k, v = qkv[..., :dh], qkv[..., dh : 2 * dh], qkv[..., 2 * dh :]
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)
        return self.dense((att @ v).transpose(1, 2).reshape(n, t, d))


class _GQA(nn.Module):
    """Llama-style grouped-query attention: ``heads`` query heads read ``kv`` KV heads."""

    def __init__(self, d: int, heads: int, kv: int, head_dim: int) -> None:
        super().__init__()
        self.num_heads, self.num_key_value_heads, self.head_dim = heads, kv, head_dim
        self.q_proj = nn.Linear(d, heads * head_dim)
        self.k_proj = nn.Linear(d, kv * head_dim)
        self.v_proj = nn.Linear(d, kv * head_dim)
        self.o_proj = nn.Linear(heads * head_dim, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, _ = x.shape
        h, kv, dh = self.num_heads, self.num_key_value_heads, self.head_dim
        q = self.q_proj(x).reshape(n, t, h, dh).transpose(1, 2)
        k = self.k_proj(x).reshape(n, t, kv, dh).transpose(1, 2).repeat_interleave(h // kv, 1)
        v = self.v_proj(x).reshape(n, t, kv, dh).transpose(1, 2).repeat_interleave(h // kv, 1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(n, t, h * dh))


def _mha(case: str, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """The trial's ``nn.MultiheadAttention`` block with ``case`` planted in head 0 (d_h = 3)."""
    torch.manual_seed(seed)
    model = _MHABlock().double().eval()
    x = torch.randn(150, T, D, dtype=torch.float64)
    with torch.no_grad():
        w, b = model.attn.in_proj_weight, model.attn.in_proj_bias
        b.normal_()
        if case == "entry":  # query feature 1 and key feature 1 of head 0
            w[1] = b[1] = w[D + 1] = b[D + 1] = 0.0
        elif case == "head":  # the whole query/key block of head 0
            w[:3] = b[:3] = w[D : D + 3] = b[D : D + 3] = 0.0
        elif case == "query":  # queries of head 0 only: one-sided, keys live
            w[:3] = b[:3] = 0.0
        elif case == "value":  # head 0's values and output columns: its scores reach nothing
            w[2 * D : 2 * D + 3] = b[2 * D : 2 * D + 3] = 0.0
            model.attn.out_proj.weight[:, :3] = 0.0
    return model, x


def test_mha_dead_entry_reads_genuine_order_two() -> None:
    """The trial's repro: one joint record on (q_proj, k_proj), genuine, k = 2, head 0, j = 1;
    the one-sided kfac-G records stay flat."""
    model, x = _mha("entry")
    reading = read(model, x, Gaussian(), progress=False)
    (rec,) = _records(reading)
    assert rec.layers == ("attn.q_proj", "attn.k_proj")
    assert rec.klass == "genuine_singularity" and rec.k == 2
    assert (rec.info["head"], rec.info["coordinate"], rec.info["pair_dim"]) == (0, 1, 1)
    assert rec.info["coordinate_cos"] == pytest.approx(1.0, abs=ATOL_SUPPORT)
    one_sided = [d for d in _records(reading, "kfac-G") if d.layers[0] != "attn.out_proj"]
    assert {d.layers for d in one_sided} == {("attn.q_proj",), ("attn.k_proj",)}
    assert all(d.klass == "flat_gauge" for d in one_sided)


def test_mha_dead_qk_head_reads_genuine_order_two_on_every_coordinate() -> None:
    """A dead QK head (trial t17 ``deadQK``): one joint record per head coordinate, all k = 2."""
    model, x = _mha("head")
    recs = _records(read(model, x, Gaussian(), progress=False))
    assert sorted(r.info["coordinate"] for r in recs) == [0, 1, 2]
    assert all(r.info["head"] == 0 and r.info["pair_dim"] == 3 for r in recs)
    assert all(r.klass == "genuine_singularity" and r.k == 2 for r in recs)


@pytest.mark.parametrize("case", ["live", "query", "value"])
def test_mha_no_pair_without_a_two_sided_dead_entry(case: str) -> None:
    """Random weights; dead queries alone (the joint move is first order there); a head whose
    values and output columns are dead (G-kernels on both sides, rows live): no candidate."""
    model, x = _mha(case)
    assert _records(read(model, x, Gaussian(), progress=False)) == []


def _zoo_attention(dead: bool, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """The zoo ViT's separate-projection `Attention` (2 heads of 3) in `_Wrap`; ``dead``: query
    and key row 4 (head 1, coordinate 1) zero, the key bias left as drawn (the softmax ignores a
    key bias, so the pair is dead whatever it is)."""
    torch.manual_seed(seed)
    model = _Wrap(Attention(D, HEADS)).double().eval()
    if dead:
        with torch.no_grad():
            model.attn.q_proj.weight[4] = model.attn.q_proj.bias[4] = 0.0
            model.attn.k_proj.weight[4] = 0.0
    return model, torch.randn(120, T, D, dtype=torch.float64)


def test_separate_projections_dead_entry_reads_genuine_order_two() -> None:
    model, x = _zoo_attention(dead=True)
    (rec,) = _records(read(model, x, Gaussian(), progress=False))
    assert rec.layers == ("attn.q_proj", "attn.k_proj")
    assert rec.klass == "genuine_singularity" and rec.k == 2
    assert (rec.info["head"], rec.info["coordinate"]) == (1, 1)


def test_direction_is_the_joint_rank_one_move_of_the_dead_rows() -> None:
    """``u`` moves query row 4 and key row 4 only, each by ``v a_topᵀ`` of its block, the two
    parts of equal norm 1/√2 (module docstring)."""
    model, x = _zoo_attention(dead=True)
    ctx = DetectionContext.from_model(model, x, Gaussian())
    (cand,) = QKPairDetector().propose("attn", ctx.model.attn, ctx)
    assert cand.detector == "qk-pair" and cand.gauge is None
    for role in ("q_proj", "k_proj"):
        w, b = cand.u[f"attn.{role}.weight"], cand.u[f"attn.{role}.bias"]
        full = torch.cat([w, b[:, None]], dim=1)
        others = torch.cat([full[:4], full[5:]])
        assert float(others.abs().max()) <= ATOL_SUPPORT
        a_top = block_spectrum(ctx, f"attn.{role}").a_top
        assert float(full[4].norm()) == pytest.approx(2**-0.5, abs=ATOL_SUPPORT)
        assert float((full[4] / full[4].norm()) @ a_top) ** 2 == pytest.approx(1.0, abs=1e-12)


def test_rotated_dead_pair_is_found_as_the_rotated_direction() -> None:
    """Turning the head's query and key rows by one rotation R leaves every score unchanged; the
    dead direction becomes ``R e_1`` and the detector proposes it (spec §9.1: alignment-free)."""
    model, x = _zoo_attention(dead=True)
    gen = torch.Generator().manual_seed(5)
    r, _ = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=torch.float64))
    rows = slice(3, 6)
    with torch.no_grad():
        for p in (model.attn.q_proj, model.attn.k_proj):
            p.weight[rows] = r @ p.weight[rows]
            p.bias[rows] = r @ p.bias[rows]
    ctx = DetectionContext.from_model(model, x, Gaussian())
    (cand,) = QKPairDetector().propose("attn", ctx.model.attn, ctx)
    q = torch.cat([cand.u["attn.q_proj.weight"], cand.u["attn.q_proj.bias"][:, None]], dim=1)
    v = torch.linalg.svd(q[rows])[0][:, 0]  # the head vector of the rank-one query block
    assert abs(float(v @ r[:, 1])) == pytest.approx(1.0, abs=1e-10)
    reading = read(model, x, Gaussian(), progress=False)
    (rec,) = _records(reading)
    assert rec.klass == "genuine_singularity" and rec.k == 2


@pytest.mark.parametrize(
    ("make", "name", "q_row", "k_row"),
    [
        (_Fused, "qkv", 4, D + 4),  # rows [Q; K; V]: head 1, coordinate 1
        (_NeoX, "query_key_value", 3 * 3 + 1, 3 * 3 + 3 + 1),  # head 1 rows [Q_1; K_1; V_1]
    ],
)
def test_fused_projection_dead_entry_reads_genuine_order_two(make, name, q_row, k_row) -> None:
    torch.manual_seed(0)
    model = _Wrap(make(D, HEADS)).double().eval()
    with torch.no_grad():
        lin = model.attn.get_submodule(name)
        lin.weight[q_row] = lin.bias[q_row] = lin.weight[k_row] = 0.0
    x = torch.randn(120, T, D, dtype=torch.float64)
    (rec,) = _records(read(model, x, Gaussian(), progress=False))
    assert rec.layers == (f"attn.{name}",)
    assert rec.klass == "genuine_singularity" and rec.k == 2
    assert (rec.info["head"], rec.info["coordinate"]) == (1, 1)
    # two factors (query rows, key rows) in one fused block: the assembly must count two, as
    # for separate projections (λ = 1/2, m = 2), not one (λ = 1/4); s17 audit AG #3
    a = assemble_from_reading([rec.to_dict()])
    assert (a.lam, a.m) == (Fraction(1, 2), 2)


def test_grouped_query_dead_entry_moves_every_query_head_of_the_group() -> None:
    torch.manual_seed(0)
    model = _Wrap(_GQA(D, heads=4, kv=2, head_dim=2)).double().eval()
    with torch.no_grad():  # KV head 1 (query heads 2, 3), coordinate 0
        model.attn.k_proj.weight[2] = model.attn.k_proj.bias[2] = 0.0
        for h in (2, 3):
            model.attn.q_proj.weight[2 * h] = model.attn.q_proj.bias[2 * h] = 0.0
    x = torch.randn(120, T, D, dtype=torch.float64)
    (rec,) = _records(read(model, x, Gaussian(), progress=False))
    assert rec.klass == "genuine_singularity" and rec.k == 2
    assert (rec.info["head"], rec.info["coordinate"], rec.info["query_heads"]) == (1, 0, [2, 3])


@pytest.mark.parametrize("seed", range(3))
def test_live_zoo_vit_gets_no_pair(seed: int) -> None:
    model = build_model(ViTConfig(), seed=seed).double().eval()
    x = torch.randn(64, 1, 8, 8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    ctx = DetectionContext.from_model(model, x, Categorical())
    det = QKPairDetector()
    mods = [(n, m) for n, m in ctx.model.named_modules() if det.applies_to(m)]
    assert len(mods) == 2
    assert all(det.propose(n, m, ctx) == [] for n, m in mods)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_live_vit_on_a_tiny_probe_set_gets_no_pair(n: int) -> None:
    """Two tokens and 1–4 samples: the G-kernels of q_proj and k_proj are most of the 64
    features and meet every 16-wide head for dimensional reasons; the rows are live."""
    model = build_model(ViTConfig(image_size=4, patch_size=4, dim=64), seed=0).double().eval()
    x = torch.randn(n, 1, 4, 4, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    ctx = DetectionContext.from_model(model, x, Categorical())
    det = QKPairDetector()
    name = "blocks.0.attn"
    spec = block_spectrum(ctx, f"{name}.q_proj")
    assert len(spec.ker_g) >= 64 - 16  # r ≤ d_h: the regime this test is about
    assert det.propose(name, ctx.model.get_submodule(name), ctx) == []


def test_cap_truncates_and_records_it() -> None:
    model, x = _mha("head")
    reg = default_registry()  # read rewrites the MultiheadAttention: pass the capped registry
    capped = [QKPairDetector(max_pairs=1) if isinstance(d, QKPairDetector) else d for d in reg]
    (rec,) = _records(read(model, x, Gaussian(), progress=False, detectors=capped))
    assert rec.info["truncated"] == {"cap": 1, "found": 3, "kept": 1}
    assert rec.klass == "genuine_singularity" and rec.k == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_cap_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match="max_pairs must be an int >= 1"):
        QKPairDetector(max_pairs=bad)  # type: ignore[arg-type]


def test_registered_by_default() -> None:
    assert any(isinstance(d, QKPairDetector) for d in default_registry())


def test_head_energy_bound_is_the_rotated_null_bound() -> None:
    # NULL_FRACTION · (√r − √d_h)²/n with r = n − m (link.rotated_energy_max's formula)
    assert head_energy_max(64, 1, 16) == pytest.approx(min(0.0199, 0.04 * (63**0.5 - 4) ** 2 / 64))
    assert head_energy_max(64, 60, 16) == 1e-10  # d_h ≥ r: dimensional, rounding level only


def _random_sides(seed: int, rotated: bool) -> tuple[tuple[PairSide, PairSide], int]:
    """Two sides of a 3-head block (d_h = 4, n = 12) with a planted dead pair of dimension 2 in
    head 1 (the kernel basis holds it and a random extra vector; rows zero along it), optionally
    turned by a random rotation of the head coordinates."""
    gen = torch.Generator().manual_seed(seed)
    d, n = 4, 12
    dead = torch.eye(d, dtype=torch.float64)[:, :2]
    if rotated:
        dead = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))[0][:, :2]
    sides = []
    for _ in range(2):
        emb = torch.zeros(n, 2, dtype=torch.float64)
        emb[4:8] = dead
        extra = torch.randn(n, 1, generator=gen, dtype=torch.float64)
        kernel = torch.linalg.qr(torch.cat([emb, extra], dim=1))[0]
        w = torch.randn(n, 7, generator=gen, dtype=torch.float64)
        w[4:8] = w[4:8] - dead @ (dead.T @ w[4:8])  # rows along the dead span vanish
        mean_sq = float(w.pow(2).sum()) / n
        bound = head_energy_max(n, kernel.shape[1], d)
        sides.append(PairSide(kernel, (slice(4, 8),), w, mean_sq, bound))
    return (sides[0], sides[1]), d


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rotated", [False, True])
def test_selection_matches_the_brute_force_oracle(seed: int, rotated: bool) -> None:
    sides, d = _random_sides(seed, rotated)
    fast, ref = dead_pair_span(sides, d), dead_pair_span_reference(sides, d)
    assert fast.shape == ref.shape == (d, 2)
    assert torch.allclose(fast, ref, atol=ATOL_SPAN)
    planted = sides[0].kernel[4:8, :2]  # the dead span itself (orthonormal columns)
    assert torch.allclose(fast @ fast.T, planted @ planted.T, atol=ATOL_SPAN)


def test_canonical_span_returns_axes_for_an_axis_span() -> None:
    gen = torch.Generator().manual_seed(0)
    axes = torch.eye(5, dtype=torch.float64)[:, [1, 3]]
    mixed = axes @ torch.linalg.qr(torch.randn(2, 2, generator=gen, dtype=torch.float64))[0]
    assert torch.allclose(canonical_span(mixed), axes, atol=ATOL_SPAN)
