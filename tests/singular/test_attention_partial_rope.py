"""QK rotation and VO rescale under partial rotary embeddings and GPT-NeoX's fused layout.

GPT-NeoX (Pythia) fuses Q, K and V in one ``query_key_value`` Linear whose rows are grouped per
head, ``[Q_h; K_h; V_h]``, and applies RoPE (``rotate_half`` convention) to the first
``rotary_ndims`` dimensions of each head only. The rotations commuting with that encoding are
the rotary planes ``(i, i + r/2)``, ``i < r/2``, and all of ``so(d_h − r)`` on the other
dimensions. Laws checked on a self-contained module of that layout (float64): those rotations,
written directly on the weight rows, leave the outputs unchanged and a plane joining a rotary
and a free dimension does not; the layout's per-head rows are GPT-NeoX's; certification picks the
partial basis with its full generator count; the tangents are the derivatives of the actions;
and a Hugging Face GPT-NeoX read gives a curved QK and VO gauge per head.
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor, nn

from neuromanifold.io import TensorOutput, import_transformers
from neuromanifold.singular.detectors import DetectionContext
from neuromanifold.singular.detectors.attention import (
    QK_CERTIFY_RTOL,
    AttentionDetector,
    QKRotation,
    VORescale,
    attention_layout,
    qk_basis,
)
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.read import read

# outputs at two points of one orbit: rounding of float64 rotations (measured ≤ 4e-16)
RTOL_INVARIANT = 1e-12
# closed-form tangent vs the forward-mode derivative of the action: the same products
ATOL_TANGENT = 1e-14
# a broken rotation moves the outputs by O(1) relative here (weights of scale 0.5)
BROKEN_MIN = 1e-3
HEADS, D_HEAD, ROTARY, WIDTH, SEQ, N = 2, 6, 2, 8, 5, 24


class _NeoXAttention(nn.Module):
    """GPT-NeoX-style attention: per-head ``[Q_h; K_h; V_h]`` rows, RoPE on ``rotary_ndims``."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(num_attention_heads=HEADS)
        self.rotary_ndims = ROTARY
        self.query_key_value = nn.Linear(WIDTH, 3 * HEADS * D_HEAD)
        self.dense = nn.Linear(HEADS * D_HEAD, WIDTH)

    @staticmethod
    def _rope(z: Tensor) -> Tensor:
        rot, free = z[..., :ROTARY], z[..., ROTARY:]
        half = ROTARY // 2
        ang = torch.arange(z.shape[-2], dtype=z.dtype)[:, None] * (0.7 ** torch.arange(half))
        cos, sin = torch.cat((ang.cos(), ang.cos()), -1), torch.cat((ang.sin(), ang.sin()), -1)
        rotated = torch.cat((-rot[..., half:], rot[..., :half]), -1)
        return torch.cat((rot * cos + rotated * sin, free), -1)

    def forward(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        qkv = self.query_key_value(x).view(b, n, HEADS, 3 * D_HEAD).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
        q, k = self._rope(q), self._rope(k)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D_HEAD), dim=-1)
        return self.dense((att @ v).transpose(1, 2).reshape(b, n, -1))


def _model() -> tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    model = _NeoXAttention().double().eval()
    with torch.no_grad():
        model.query_key_value.weight.normal_(0.0, 0.5)
    return model, torch.randn(N, SEQ, WIDTH, dtype=torch.float64)


def _rotated(model: nn.Module, r: Tensor, part: str) -> nn.Module:
    """``model`` with the rows of ``part`` ("q" or "qk") of every head times ``r`` (written on
    the weight rows by GPT-NeoX's layout, independent of the package)."""
    out = copy.deepcopy(model)
    w, b = out.query_key_value.weight, out.query_key_value.bias
    with torch.no_grad():
        for h in range(HEADS):
            for j in range(len(part)):
                rows = slice(h * 3 * D_HEAD + j * D_HEAD, h * 3 * D_HEAD + (j + 1) * D_HEAD)
                w[rows], b[rows] = r @ w[rows], r @ b[rows]
    return out


def _plane(i: int, j: int, angle: float = 0.9) -> Tensor:
    r = torch.eye(D_HEAD, dtype=torch.float64)
    c, s = math.cos(angle), math.sin(angle)
    r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
    return r


def _change(model: nn.Module, moved: nn.Module, x: Tensor) -> float:
    with torch.no_grad():
        base = model(x)
        return float((moved(x) - base).abs().max() / base.abs().max())


@pytest.mark.parametrize(
    ("plane", "holds"),
    [((0, 1), True), ((2, 5), True), ((3, 4), True), ((0, 2), False), ((1, 4), False)],
)
def test_rotations_commuting_with_partial_rope(plane: tuple[int, int], holds: bool) -> None:
    model, x = _model()
    change = _change(model, _rotated(model, _plane(*plane), "qk"), x)
    assert (change <= RTOL_INVARIANT) if holds else (change > BROKEN_MIN)
    assert _change(model, _rotated(model, _plane(*plane), "q"), x) > BROKEN_MIN  # queries alone


def test_layout_rows_are_grouped_per_head() -> None:
    lay = attention_layout(_NeoXAttention())
    assert (lay.heads, lay.d_head, lay.head_stride, lay.rotary_dims) == (2, 6, 18, 2)
    assert [lay.rows(off, 1) for off in (lay.q[2], lay.k[2], lay.v[2])] == [
        slice(18, 24),
        slice(24, 30),
        slice(30, 36),
    ]
    assert lay.o == "dense.weight"


def test_partial_basis_is_certified_with_every_generator() -> None:
    model, x = _model()
    ctx = DetectionContext.from_model(model, x, Gaussian())
    cands = AttentionDetector().propose("", ctx.model, ctx)
    qk = [c for c in cands if c.detector == "qk-rotation"]
    vo = [c for c in cands if c.detector == "vo-rescale"]
    assert len(qk) == len(vo) == HEADS
    free = D_HEAD - ROTARY
    for c in qk:
        assert c.info["basis"] == "rope-partial-half" and c.info["certified"] <= QK_CERTIFY_RTOL
        # rotations and scales of the rotary planes, gl of the free dimensions
        scales = ROTARY // 2 + free * (free + 1) // 2
        assert c.info["n_scales"] == scales
        assert len(c.gauge_generators) == ROTARY // 2 + free * (free - 1) // 2 + scales
        assert c.info["rejected"]["so(d_head)"] > BROKEN_MIN
    assert all(c.info["certified"] == 0.0 for c in vo)  # powers of two: exact


def test_tangents_are_the_derivatives_of_the_actions() -> None:
    model, x = _model()
    ctx = DetectionContext.from_model(model, x, Gaussian())
    lay = attention_layout(ctx.model)
    qk, vo = QKRotation(lay, ""), VORescale(lay, "")
    s = torch.zeros(D_HEAD, D_HEAD, dtype=torch.float64)
    for i, j in qk_basis("rope-partial-half", D_HEAD, ROTARY):
        s[i, j], s[j, i] = 0.3 + i, -(0.3 + i)
    for g in range(HEADS):
        pairs = [
            (qk.tangent(ctx.params, g, s), qk.tangent_reference(ctx.params, g, s)),
            (vo.tangent(ctx.params, g), vo.tangent_reference(ctx.params, g)),
        ]
        for fast, ref in pairs:
            assert fast.keys() == ref.keys()
            for k in fast:
                torch.testing.assert_close(fast[k], ref[k], rtol=0, atol=ATOL_TANGENT)


def test_hugging_face_gpt_neox_read_has_a_qk_and_vo_gauge_per_head() -> None:
    try:
        transformers = import_transformers()
    except ImportError:
        pytest.skip("transformers is not installed")
    cfg = transformers.GPTNeoXConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=16,
        rotary_pct=0.25,
        num_labels=3,
        pad_token_id=0,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = TensorOutput(transformers.GPTNeoXForSequenceClassification(cfg))
    x = torch.randint(1, 32, (16, 5), generator=torch.Generator().manual_seed(0))
    reading = read(model, x, Categorical(), progress=False)
    assert reading.not_covered == ()
    for detector in ("qk-rotation", "vo-rescale"):
        recs = [r for r in reading.directions if r.detector == detector]
        assert len(recs) == 2 and all(r.klass == "curved_gauge" and r.k == 2 for r in recs)
    qk = [r for r in reading.directions if r.detector == "qk-rotation"]
    assert {r.info["basis"] for r in qk} == {"rope-partial-half"}  # rotary_ndims = 2 of 8
