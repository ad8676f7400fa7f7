"""Whole-model read on a ViT with timm's module layout and parameter names (fused ``qkv``).

timm itself cannot be installed here (it needs torchvision, which is broken against this torch
build), so real timm models are NOT tested. This file writes, in this project's own code, a
module tree with the names and the fused-projection layout of timm's ``VisionTransformer``
(``patch_embed.proj``, ``cls_token``, ``pos_embed``, ``blocks.N.norm1``, ``blocks.N.attn.qkv``
with rows ``[Q; K; V]``, ``blocks.N.attn.proj``, ``blocks.N.norm2``, ``blocks.N.mlp.fc1/fc2``,
``norm``, ``head``), and checks that the read names its architectural gauges.
"""

from __future__ import annotations

import copy
from collections import Counter

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from neuromanifold.singular.detectors.attention import attention_layout
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read

COS_MIN = 0.9999  # |cos(a*, bottom eigenvector of the consumer's A)|, issue 5
EXACT = {"atol": 1e-12, "rtol": 0.0}  # float64 invariance of the outputs under a symmetry
K_HAT_TOL = 0.05
R2_MIN = 0.99
DIM, HEADS, DEPTH, N = 8, 2, 2, 24


class PatchEmbed(nn.Module):
    def __init__(self, patch: int, in_chans: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)
        self.norm = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


class Attention(nn.Module):
    """Fused ``qkv`` projection, rows ``[Q; K; V]``, head ``h`` at rows ``h·d_h … (h+1)·d_h``."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.q_norm = nn.Identity()
        self.k_norm = nn.Identity()
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj_drop(self.proj(x.transpose(1, 2).reshape(b, n, c)))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(0.0)
        self.norm = nn.Identity()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop2 = nn.Dropout(0.0)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.ls1 = nn.Identity()
        self.drop_path1 = nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 2 * dim)
        self.ls2 = nn.Identity()
        self.drop_path2 = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class VisionTransformer(nn.Module):
    """timm's ViT tree (class-token pooling), small: 8×8 inputs, 4×4 patches."""

    def __init__(self, *, dim: int = DIM, depth: int = DEPTH, heads: int = HEADS) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(4, 1, dim)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, 5, dim))
        self.pos_drop = nn.Dropout(0.0)
        self.patch_drop = nn.Identity()
        self.norm_pre = nn.Identity()
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.fc_norm = nn.Identity()
        self.head_drop = nn.Dropout(0.0)
        self.head = nn.Linear(dim, 3)

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(self.norm_pre(self.patch_drop(self.pos_drop(x)))))
        return self.head(self.head_drop(self.fc_norm(x[:, 0])))


def _vit(seed: int = 0) -> VisionTransformer:
    torch.manual_seed(seed)
    model = VisionTransformer().double().eval()
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.LayerNorm):  # distinct γ, β per norm, as after training
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.normal_(0.0, 0.2)
    return model


def _images(seed: int = 0) -> Tensor:
    return torch.randn(
        N, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
    )


def test_layout_names_and_fused_offsets() -> None:
    model = _vit()
    names = {n for n, _ in model.named_parameters()}
    for key in (
        "cls_token",
        "pos_embed",
        "patch_embed.proj.weight",
        "blocks.1.norm1.weight",
        "blocks.1.attn.qkv.weight",
        "blocks.1.attn.qkv.bias",
        "blocks.1.attn.proj.weight",
        "blocks.1.norm2.bias",
        "blocks.1.mlp.fc1.weight",
        "blocks.1.mlp.fc2.weight",
        "norm.weight",
        "head.weight",
    ):
        assert key in names
    lay = attention_layout(model.blocks[0].attn)
    assert (lay.heads, lay.embed) == (HEADS, DIM)
    assert lay.q == ("qkv.weight", "qkv.bias", 0)
    assert lay.k == ("qkv.weight", "qkv.bias", DIM)
    assert lay.v == ("qkv.weight", "qkv.bias", 2 * DIM)
    assert lay.o == "proj.weight"


def test_fused_layout_symmetries_hold_exactly() -> None:
    """Independent of the detector: rotating head h's rows of Q and K inside the fused weight by
    the same orthogonal R, or scaling its V rows by c and its proj columns by 1/c, leaves the
    function unchanged — the orbits whose tangents the detector proposes."""
    model, x = _vit(), _images()
    dh = DIM // HEADS
    gen = torch.Generator().manual_seed(5)
    rot, _ = torch.linalg.qr(torch.randn(dh, dh, generator=gen, dtype=torch.float64))
    with torch.no_grad():
        ref = model(x)
        for h in range(HEADS):
            moved = copy.deepcopy(model)
            attn = moved.blocks[0].attn
            for off in (0, DIM):
                rows = slice(off + h * dh, off + (h + 1) * dh)
                attn.qkv.weight[rows] = rot @ attn.qkv.weight[rows]
                attn.qkv.bias[rows] = rot @ attn.qkv.bias[rows]
            torch.testing.assert_close(moved(x), ref, **EXACT)
            moved = copy.deepcopy(model)
            attn = moved.blocks[1].attn
            rows = slice(2 * DIM + h * dh, 2 * DIM + (h + 1) * dh)
            attn.qkv.weight[rows] *= 3.0
            attn.qkv.bias[rows] *= 3.0
            attn.proj.weight[:, h * dh : (h + 1) * dh] /= 3.0
            torch.testing.assert_close(moved(x), ref, **EXACT)


def test_read_names_the_gauges_of_the_timm_layout() -> None:
    model, x = _vit(), _images()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    reading = read(model, x, Categorical(), progress=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())

    ln = {r.layers[0]: r for r in reading.directions if r.detector == "ln-kernel"}
    expected = {f"blocks.{i}.attn.qkv": f"blocks.{i}.norm1" for i in range(DEPTH)}
    expected |= {f"blocks.{i}.mlp.fc1": f"blocks.{i}.norm2" for i in range(DEPTH)}
    expected["head"] = "norm"  # through the class-token selection (factor test)
    assert set(ln) == set(expected)
    for consumer, norm in expected.items():
        rec = ln[consumer]
        assert rec.info["norm"] == norm and rec.klass == "flat_gauge"
        assert rec.info["closed_form_cos"] >= COS_MIN

    qk = [r for r in reading.directions if r.detector == "qk-rotation"]
    vo = [r for r in reading.directions if r.detector == "vo-rescale"]
    assert len(qk) == len(vo) == DEPTH * HEADS
    assert all(r.klass == "curved_gauge" and r.k == 2 for r in qk + vo)
    assert all(r.layers == (f"{r.info['module']}.qkv",) for r in qk)
    assert Counter(r.detector for r in reading.directions)["ce-shift"] == 1

    # cls_token and pos_embed, parameters of the root module, were left uncovered until s28:
    # each is a table of rows that only LayerNorms read, flat along 𝟙 (`embedding-mean`)
    assert reading.not_covered == ()
    tables = [r for r in reading.directions if r.detector == "embedding-mean"]
    assert sorted((r.info["parameter"], r.info["orbit_dim"], r.klass) for r in tables) == [
        ("cls_token", 1, "flat_gauge"),
        ("pos_embed", 5, "flat_gauge"),
    ]
    assert not [r for r in reading.directions if r.klass == "genuine_singularity"]


def test_fused_qk_candidate_moves_only_its_head_rows() -> None:
    """The QK candidate of head h lives in rows h·d_h…(h+1)·d_h of the Q and K thirds of the
    fused weight and bias, nowhere in V, and is tangent to the rotation orbit there."""
    from neuromanifold.singular.detectors.attention import AttentionDetector
    from neuromanifold.singular.detectors.base import DetectionContext

    model = _vit()
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    ctx = DetectionContext(
        model=model, params=params, factors={}, graph=None, family=Categorical(), data=_images()
    )
    cands = AttentionDetector().propose("blocks.0.attn", model.blocks[0].attn, ctx)
    qk = [c for c in cands if c.detector == "qk-rotation"]
    assert [c.info["head"] for c in qk] == list(range(HEADS))
    dh = DIM // HEADS
    for c in qk:
        h = c.info["head"]
        w = c.u["blocks.0.attn.qkv.weight"]
        own = torch.zeros(3 * DIM, dtype=torch.bool)
        own[h * dh : (h + 1) * dh] = True
        own[DIM + h * dh : DIM + (h + 1) * dh] = True
        assert float(w[~own].abs().max()) == 0.0 and float(w[own].abs().max()) > 0.0
        # tangent: δW_Q = S W_Q, δW_K = S W_K with the same skew S (solve from the Q block)
        wq = params["blocks.0.attn.qkv.weight"][h * dh : (h + 1) * dh]
        wk = params["blocks.0.attn.qkv.weight"][DIM + h * dh : DIM + (h + 1) * dh]
        s = w[h * dh : (h + 1) * dh] @ torch.linalg.pinv(wq)
        torch.testing.assert_close(s, -s.T, **EXACT)
        torch.testing.assert_close(w[DIM + h * dh : DIM + (h + 1) * dh], s @ wk, **EXACT)
        b, b0 = c.u["blocks.0.attn.qkv.bias"], params["blocks.0.attn.qkv.bias"]
        for off in (0, DIM):
            rows = slice(off + h * dh, off + (h + 1) * dh)
            torch.testing.assert_close(b[rows], s @ b0[rows], **EXACT)


def test_planted_dead_mlp_unit_reads_order_two() -> None:
    model = _vit(seed=2)
    j = 3
    with torch.no_grad():
        mlp = model.blocks[1].mlp
        mlp.fc1.weight[j] = 0.0
        mlp.fc1.bias[j] = 0.0
        mlp.fc2.weight[:, j] = 0.0
    reading = read(model, _images(seed=1), Categorical(), progress=False, max_directions=4)
    (rec,) = [r for r in reading.directions if r.klass == "genuine_singularity"]
    assert rec.detector == "duality"
    assert rec.layers == ("blocks.1.mlp.fc1", "blocks.1.mlp.fc2")
    assert rec.k == 2 and abs(rec.k_hat - 2) <= K_HAT_TOL and rec.r2 >= R2_MIN
