"""Embedding rows shifted along 𝟙 where only LayerNorms read them: a flat gauge (s27 trial HF
D2: GPT-2's position embeddings, BERT's embeddings; never proposed).

Closed form: ``E[p] → E[p] + c_p·𝟙`` adds ``c_p·𝟙`` to the residual stream, which every
LayerNorm removes (``LN(x + c𝟙) = LN(x)``); a reader that keeps the mean (a Linear on the stream,
a head tied to the embedding) breaks it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call

from neuromanifold.singular.detectors import DetectionContext, EmbeddingMeanDetector
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read
from neuromanifold.zoo.models import ViT, ViTConfig

VOCAB, POS, D, N = 12, 5, 6, 20
RTOL_SAME = 1e-12  # outputs after shifting rows by O(1) along 𝟙: LayerNorm rounding only
BROKEN_MIN = 1e-3  # a shift some reader sees moves the outputs by O(1e-1) here


class _PreLN(nn.Module):
    """Token + position embeddings, one pre-LN residual block, a final LayerNorm and a head
    (tied to the token embedding when ``tied``; ``leak``: a Linear also reads the raw stream)."""

    def __init__(self, tied: bool = False, leak: bool = False) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(POS, D)
        self.ln1, self.fc, self.ln_f = nn.LayerNorm(D), nn.Linear(D, D), nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)
        if tied:
            self.head.weight = self.tok.weight
        self.leak = nn.Linear(D, VOCAB) if leak else None

    def forward(self, ids: Tensor) -> Tensor:
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        h = h + torch.tanh(self.fc(self.ln1(h)))
        out = self.head(self.ln_f(h))
        if self.leak is not None:
            out = out + self.leak(h)
        return out.mean(1)


def _setup(model: nn.Module) -> tuple[nn.Module, Tensor, DetectionContext]:
    torch.manual_seed(0)
    model = model.double().eval()
    with torch.no_grad():  # trained-like norms: γ ≠ 1, β ≠ 0 (at γ = 1, β = 0 the final norm's
        for mod in model.modules():  # output has zero mean and a tied head would not see 𝟙)
            if isinstance(mod, nn.LayerNorm):
                mod.weight.normal_(1.0, 0.3)
                mod.bias.normal_(0.0, 0.3)
    x = torch.randint(0, VOCAB, (N, POS), generator=torch.Generator().manual_seed(1))
    return model, x, DetectionContext.from_model(model, x, Categorical())


def _shift(model: nn.Module, x: Tensor, key: str) -> float:
    params = {k: v.detach() for k, v in model.named_parameters()}
    rows = params[key].shape[0]
    c = torch.linspace(-2.0, 3.0, rows, dtype=torch.float64)[:, None]
    base = functional_call(model, params, (x,))
    moved = functional_call(model, {**params, key: params[key] + c}, (x,))
    return float((moved - base).abs().max() / base.abs().max())


def test_rows_shifted_along_ones_keep_the_model_and_are_one_flat_candidate() -> None:
    model, x, ctx = _setup(_PreLN())
    for name in ("tok", "pos"):
        assert _shift(model, x, f"{name}.weight") <= RTOL_SAME  # the law, every row its own c
        (cand,) = EmbeddingMeanDetector().propose(name, getattr(model, name), ctx)
        assert cand.gauge == "flat" and cand.layers == (name,)
        u = cand.u[f"{name}.weight"]
        assert torch.allclose(u, u[0, 0].expand_as(u))  # every row along 𝟙, one size
    reading = read(model, x, Categorical(), progress=False)
    recs = [d for d in reading.directions if d.detector == "embedding-mean"]
    assert sorted((d.layers, d.klass) for d in recs) == [
        (("pos",), "flat_gauge"),
        (("tok",), "flat_gauge"),
    ]


def test_a_tied_head_or_a_reader_of_the_raw_stream_breaks_it() -> None:
    for model, broken in ((_PreLN(tied=True), ("tok",)), (_PreLN(leak=True), ("tok", "pos"))):
        model, x, ctx = _setup(model)
        for name in broken:
            assert _shift(model, x, f"{name}.weight") > BROKEN_MIN
            assert EmbeddingMeanDetector().propose(name, getattr(model, name), ctx) == []


def test_one_feature_has_no_mean_direction() -> None:
    assert not EmbeddingMeanDetector().applies_to(nn.Embedding(4, 1))
    assert EmbeddingMeanDetector().applies_to(nn.Embedding(4, 2))


class _LeakyViT(ViT):
    """The zoo ViT whose logits also read the raw class token (a reader that keeps the mean)."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x) + self.cls_token[0, 0, :3]


def _vit(pool: str, leak: bool = False) -> tuple[nn.Module, Tensor, DetectionContext]:
    """The zoo's pre-LN ViT (class token, position embeddings as plain parameters); ``leak``:
    `_LeakyViT`."""
    torch.manual_seed(0)
    model = (_LeakyViT if leak else ViT)(
        ViTConfig(dim=8, depth=1, heads=2, mlp_ratio=2, num_classes=3, pool=pool)
    )
    model = model.double().eval()
    with torch.no_grad():
        model.cls_token.normal_(0.0, 0.5)
        for mod in model.modules():
            if isinstance(mod, nn.LayerNorm):
                mod.weight.normal_(1.0, 0.3)
                mod.bias.normal_(0.0, 0.3)
    x = torch.randn(N, 1, 8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return model, x, DetectionContext.from_model(model, x, Categorical())


def _table_shift(model: nn.Module, x: Tensor, key: str, along_ones: bool) -> float:
    """Relative output change after a distinct shift per row of the table ``key``, along 𝟙 or
    along the first feature only."""
    params = {k: v.detach() for k, v in model.named_parameters()}
    rows = params[key].shape[:-1]
    c = torch.linspace(-2.0, 3.0, max(rows.numel(), 2), dtype=torch.float64)[: rows.numel()]
    c = c.reshape(*rows, 1)
    step = (
        c.expand_as(params[key])
        if along_ones
        else torch.cat((c, torch.zeros(*rows, params[key].shape[-1] - 1, dtype=torch.float64)), -1)
    )
    base = functional_call(model, params, (x,))
    moved = functional_call(model, {**params, key: params[key] + step}, (x,))
    return float((moved - base).abs().max() / base.abs().max())


def test_a_vits_class_token_and_position_table_are_flat_along_ones() -> None:
    """Kept as plain parameters (not ``nn.Embedding``), the tables got no candidate (s27 trial
    HF). Both pools: each row shifted along 𝟙 keeps the model, along one feature it does not;
    one flat candidate per table, its rows counted; the read lists both flat."""
    for pool in ("cls", "mean"):
        model, x, ctx = _vit(pool)
        cands = EmbeddingMeanDetector().propose("", model, ctx)
        assert sorted((c.info["parameter"], c.info["orbit_dim"]) for c in cands) == [
            ("cls_token", 1),
            ("pos_embed", 17),
        ]
        for c in cands:
            key = c.info["parameter"]
            assert _table_shift(model, x, key, along_ones=True) <= RTOL_SAME
            assert _table_shift(model, x, key, along_ones=False) > BROKEN_MIN
            assert c.gauge == "flat" and torch.allclose(c.u[key], c.u[key].flatten()[0])
        reading = read(model, x, Categorical(), progress=False)
        recs = [d for d in reading.directions if d.detector == "embedding-mean"]
        assert sorted((d.info["parameter"], d.klass) for d in recs) == [
            ("cls_token", "flat_gauge"),
            ("pos_embed", "flat_gauge"),
        ]


def test_a_table_some_reader_sees_raw_is_not_certified() -> None:
    model, x, ctx = _vit("cls", leak=True)
    assert _table_shift(model, x, "cls_token", along_ones=True) > BROKEN_MIN
    cands = EmbeddingMeanDetector().propose("", model, ctx)
    assert [c.info["parameter"] for c in cands] == ["pos_embed"]
