"""Whole-model read on planted structure in random bases (issue 5 'done when')."""

from __future__ import annotations

import copy
import json
from collections import Counter

import pytest
import torch
from torch import nn

from neuromanifold.cells.planted import (
    planted_conv,
    planted_conv_chain,
    planted_deep_linear,
    planted_embedding,
    planted_mlp,
    planted_transformer,
)
from neuromanifold.singular.coordinate_scan import coordinate_scan
from neuromanifold.singular.detectors.base import Candidate, normalise
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.read import read
from neuromanifold.singular.reading import Reading

K_HAT_TOL = 0.05  # |k̂ − k| on planted cells (issue 4/5)
K_HAT_EXACT = 1e-9  # an exact power law F = c·t² (measured |k̂ − 2| = 4e-16)
R2_MIN = 0.99
# |cos| of the LN-kernel direction with its closed form γ⁻¹/‖γ⁻¹‖ (spec §9 "LN" row)
LN_COS_MIN = 0.9999
# outputs of function-preserving reparametrisations (permute, rotate, rescale hidden units) on
# O(1) outputs: measured ≤ 2.7e-15
ATOL_FUNCTION = 1e-12


def _genuine(reading: Reading) -> list:
    return [r for r in reading.directions if r.klass == "genuine_singularity"]


def _check_order(reading: Reading, k: int, layers: tuple[str, ...]) -> None:
    (rec,) = _genuine(reading)
    assert rec.detector == "duality"
    assert rec.layers == layers
    assert rec.k == k
    assert abs(rec.k_hat - k) <= K_HAT_TOL
    assert rec.r2 >= R2_MIN
    by_layer = reading.by_layer()
    for layer in layers:  # the chain is reported under every layer it touches, with order k
        assert [r.k for r in by_layer[layer] if r.klass == "genuine_singularity"] == [k]
        # and each block's own rate along the chain (A–G duality) carries the same order
        block = rec.info["per_layer"][layer]
        assert block["k"] == k and abs(block["k_hat"] - k) <= K_HAT_TOL and block["r2"] >= R2_MIN


@pytest.mark.parametrize(("activation", "k"), [("relu", 2), ("gelu", 2), ("tanh", 2), ("relu2", 3)])
def test_mlp_node_death_in_random_bases(activation: str, k: int) -> None:
    p = planted_mlp(activation=activation, n=64, seed=11)
    _check_order(read(p.model, p.data, p.family, progress=False), k, ("0", "2"))


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_deep_linear_chain_reads_depth_at_every_layer(depth: int) -> None:
    p = planted_deep_linear(depth=depth, n=64, seed=depth)
    _check_order(
        read(p.model, p.data, p.family, progress=False), depth, tuple(map(str, range(depth)))
    )


@pytest.mark.parametrize(("activation", "k"), [("relu", 2), ("relu2", 3)])
def test_conv_node_death(activation: str, k: int) -> None:
    p = planted_conv(activation=activation, n=12, size=4, seed=5)
    _check_order(read(p.model, p.data, p.family, progress=False), k, ("0", "2"))


def test_conv_chain_reads_depth() -> None:
    p = planted_conv_chain(depth=3, n=8, size=3, seed=2)
    _check_order(read(p.model, p.data, p.family, progress=False), 3, ("0", "1", "2"))


def test_transformer_gauges() -> None:
    p = planted_transformer(n=12, seq=3)
    reading = read(p.model, p.data, p.family, progress=False)
    ln = [r for r in reading.directions if r.detector == "ln-kernel"]
    assert len(ln) == 4
    assert all(r.klass == "flat_gauge" and r.info["closed_form_cos"] >= LN_COS_MIN for r in ln)
    qk = [r for r in reading.directions if r.detector == "qk-rotation"]
    assert len(qk) == 2 and all(r.klass == "curved_gauge" for r in qk)
    vo = [r for r in reading.directions if r.detector == "vo-rescale"]
    assert len(vo) == 2 and all(r.klass == "curved_gauge" for r in vo)
    assert not _genuine(reading)  # no dead units were planted
    assert reading.not_covered == ()


def test_rmsnorm_transformer_has_no_ln_kernel() -> None:
    p = planted_transformer(norm="rmsnorm", n=12, seq=3)
    reading = read(p.model, p.data, p.family, progress=False, max_directions=2)
    assert not [r for r in reading.directions if r.detector == "ln-kernel"]
    n_found = reading.meta["n_candidates"]
    assert n_found > reading.meta["n_read"] == 2
    # s14 trial N #6: the note (printed by the CLI) says how many were left unread
    assert f"2 of {n_found} candidate directions read (max_directions=2)" in reading.note
    assert f"{n_found - 2} left unread" in reading.note
    assert not [n for n in reading.not_covered if n.type == "RMSNorm"]


def test_ce_shift_and_unseen_embedding_rows_are_flat() -> None:
    p = planted_embedding(n=16)
    reading = read(p.model, p.data, p.family, progress=False)
    classes = {r.detector: r.klass for r in reading.directions}
    assert classes["embedding-unseen"] == "flat_gauge"
    assert classes["ce-shift"] == "flat_gauge"


def test_relu_rescale_is_a_curved_gauge_not_a_singularity() -> None:
    p = planted_mlp(activation="relu", n=64, seed=4)
    reading = read(p.model, p.data, p.family, progress=False)
    (rec,) = [r for r in reading.directions if r.detector == "relu-rescale"]
    assert rec.k == 2 and rec.klass == "curved_gauge"
    # max_directions keeps the possible dead directions before the gauges
    (first,) = read(p.model, p.data, p.family, progress=False, max_directions=1).directions
    assert first.detector == "duality"


def test_coordinate_baseline_fails_where_the_read_succeeds() -> None:
    """Per-coordinate axes read live (rotated chain) or flat (node death): never the order.
    Rotated chain: every scanned axis of every layer reads live; node death: every
    smallest-|θ| axis of every layer reads flat."""
    for p, axes in (
        (planted_deep_linear(depth=3, n=64, seed=3), "live"),
        (planted_mlp(activation="relu", n=64, seed=11), "flat_gauge"),
    ):
        reading = read(p.model, p.data, p.family, progress=False, baseline=True)
        (rec,) = _genuine(reading)
        assert rec.k == p.expected_k
        scan = coordinate_scan(p.model, p.data, p.family, layers=list(rec.layers))
        for layer in rec.layers:
            assert scan.best_k(layer) is None
            assert set(scan.classes(layer)) == {axes}
            assert rec.baseline[layer] == {"best_k": None, "classes": scan.classes(layer)}


def _permute_hidden(model: nn.Sequential, perm: torch.Tensor) -> nn.Sequential:
    m = copy.deepcopy(model)
    with torch.no_grad():
        m[0].weight.copy_(model[0].weight[perm])
        m[0].bias.copy_(model[0].bias[perm])
        m[2].weight.copy_(model[2].weight[:, perm])
    return m


def _rotate_hidden(model: nn.Sequential, seed: int) -> nn.Sequential:
    gen = torch.Generator().manual_seed(seed)
    m = copy.deepcopy(model)
    layers = list(m)
    width = layers[0].weight.shape[0]
    rots = []
    for _ in layers[:-1]:
        q, r = torch.linalg.qr(torch.randn(width, width, generator=gen, dtype=torch.float64))
        rots.append(q * torch.sign(torch.diagonal(r)))
    with torch.no_grad():
        for i, layer in enumerate(layers):
            w = layer.weight
            if i < len(rots):
                w = rots[i] @ w
            if i > 0:
                w = w @ rots[i - 1].T
            layer.weight.copy_(w)
    return m


def _signature(reading: Reading) -> Counter:
    return Counter((r.detector, r.layers, r.k, r.klass) for r in reading.directions)


def test_invariant_under_hidden_permutation_and_rotation() -> None:
    p = planted_mlp(activation="gelu", n=64, seed=7)
    base = read(p.model, p.data, p.family, progress=False)
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(0))
    permuted = _permute_hidden(p.model, perm)
    torch.testing.assert_close(permuted(p.data), p.model(p.data), atol=ATOL_FUNCTION, rtol=0)
    again = read(permuted, p.data, p.family, progress=False)
    assert _signature(again) == _signature(base)
    q = planted_deep_linear(depth=3, n=64, seed=5)
    base = read(q.model, q.data, q.family, progress=False)
    rotated = _rotate_hidden(q.model, seed=1)
    torch.testing.assert_close(rotated(q.data), q.model(q.data), atol=ATOL_FUNCTION, rtol=0)
    again = read(rotated, q.data, q.family, progress=False)
    assert _signature(again) == _signature(base)
    (a,), (b,) = _genuine(base), _genuine(again)
    assert abs(a.k_hat - b.k_hat) <= K_HAT_TOL


def test_model_is_never_mutated_and_float32_is_upcast() -> None:
    p = planted_mlp(activation="tanh", n=32, seed=2)
    model = copy.deepcopy(p.model).float()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    reading = read(model, p.data.float(), p.family, progress=False)
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) and after[k].dtype == torch.float32 for k in after)
    assert reading.meta["upcast"] and "up-cast" in reading.meta["upcast_note"]
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_the_upcast_note_names_the_dtypes_that_were_upcast() -> None:
    """User trial I #5: bfloat16 and float16 models were said to hold float32 parameters."""
    p = planted_mlp(activation="tanh", n=16, seed=2)
    mixed = copy.deepcopy(p.model).to(torch.bfloat16)
    mixed[2].float()
    note = read(mixed, p.data, p.family, max_directions=0, progress=False).meta["upcast_note"]
    assert note == "bfloat16/float32 parameters were up-cast to float64 for the read"
    plain = read(p.model, p.data, p.family, max_directions=0, progress=False).meta
    assert plain["upcast_note"] == "" and not plain["upcast"]


def test_reading_json_round_trip() -> None:
    p = planted_deep_linear(depth=2, n=32)
    reading = read(p.model, p.data, p.family, progress=False)
    text = json.dumps(reading.to_dict())
    back = Reading.from_dict(json.loads(text))
    assert back == reading
    d = json.loads(text)["directions"][0]
    assert {"layer", "detector", "k", "class", "r2", "slope", "magnitude"} <= set(d)


class _Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def test_model_without_supported_layers_says_so() -> None:
    reading = read(_Scale(), torch.randn(4, 3, dtype=torch.float64), Gaussian(), progress=False)
    assert reading.directions == ()
    assert "no supported layers" in reading.note
    assert [(n.name, n.type, n.reason) for n in reading.not_covered] == [
        ("<root>", "_Scale", "no detector for this type")
    ]


def test_unsupported_modules_are_listed() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.PReLU(), nn.Linear(4, 2)).double()
    reading = read(model, torch.randn(8, 3, dtype=torch.float64), Gaussian(), progress=False)
    assert [(n.name, n.type) for n in reading.not_covered] == [("1", "PReLU")]


class _TupleOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 2).double()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.fc(x)
        return y, y


class _OldStyleGELU(torch.autograd.Function):
    """A custom function with ``forward(ctx, x)`` and no ``setup_context`` (as Bloom's GELU):
    autograd runs it, torch.func's forward mode cannot."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return torch.nn.functional.gelu(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return grad * torch.func.grad(lambda z: torch.nn.functional.gelu(z).sum())(x)


class _CustomFunctionMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(5, 4)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(_OldStyleGELU.apply(self.fc1(x)))


def test_a_weight_norm_is_named_when_forward_mode_fails_in_it() -> None:
    """torch's weight norm has no forward-mode formula: the error names the module and a way
    around it (s28 trial EXOTIC #6: it named only the operator), and the way works."""
    torch.manual_seed(0)
    normed = nn.utils.parametrizations.weight_norm(nn.Linear(3, 4))
    model = nn.Sequential(normed, nn.Tanh(), nn.Linear(4, 2)).double()
    x = torch.randn(8, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"in the weight norm of 0: .*remove_parametrizations"):
        read(model, x, Gaussian(), progress=False)
    nn.utils.parametrize.remove_parametrizations(normed, "weight", leave_parametrized=True)
    reading = read(model, x, Gaussian(), progress=False)  # runs: the plain weight is read
    assert reading.meta["n_params"] == (3 * 4 + 4) + (4 * 2 + 2)


def test_model_without_forward_mode_derivatives_fails_early() -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"forward-mode derivatives.*setup_context"):
        read(_CustomFunctionMLP(), x, Gaussian(), progress=False)
    detection = read(_CustomFunctionMLP(), x, Gaussian(), max_directions=0, progress=False)
    assert detection.meta["n_read"] == 0  # detection alone never differentiates forward
    with pytest.raises(ValueError, match=r"forward-mode derivatives"):  # memory planning does
        read(_CustomFunctionMLP(), x, Gaussian(), max_directions=0, max_memory="1GB")


def test_float_token_ids_are_blamed_on_the_data() -> None:
    """The read casts float inputs to float64; an embedding then rejects them as indices."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(12, 2))
    x = torch.randint(0, 10, (8, 3)).double()
    with pytest.raises(ValueError, match=r"data of shape \(8, 3\) does not fit.*indices < 10"):
        read(model, x, Gaussian(), progress=False)


def test_bad_input_errors() -> None:
    p = planted_mlp(n=8)
    with pytest.raises(ValueError, match=r"data of shape \(8, 7\) does not fit.*'0'.*5"):
        read(p.model, torch.randn(8, 7, dtype=torch.float64), p.family, progress=False)
    bad = copy.deepcopy(p.model)
    with torch.no_grad():
        bad[2].bias[0] = float("inf")
    with pytest.raises(ValueError, match=r"parameter '2.bias' holds NaN or Inf"):
        read(bad, p.data, p.family, progress=False)
    nan_x = p.data.clone()
    nan_x[0, 0] = float("nan")
    nan_x[3, 1] = float("inf")
    with pytest.raises(
        ValueError, match=r"data inputs hold NaN or Inf values \(first in sample 0\)"
    ):
        read(p.model, nan_x, p.family, progress=False)
    with pytest.raises(ValueError, match=r"first in sample 2\)"):
        read(p.model, nan_x[1:], p.family, progress=False)
    with pytest.raises(TypeError, match=r"data labels y must be a Tensor; got str"):
        read(p.model, (p.data, "abc"), p.family, progress=False)
    with pytest.raises(ValueError, match=r"labels y have shape \(3,\); expected a leading"):
        read(p.model, (p.data, torch.zeros(3)), p.family, progress=False)
    with pytest.raises(TypeError, match=r"got a sequence of length 3"):
        read(p.model, (p.data, p.data, p.data), p.family, progress=False)
    flat = torch.randn(16, dtype=torch.float64)  # a 1-D probe set: no feature axis
    with pytest.raises(
        ValueError, match=r"returned shape \(\d+,\) for 16 samples of data of shape"
    ):
        read(nn.Linear(16, 2).double().eval(), flat, p.family, progress=False)
    ints = torch.randint(0, 3, p.data.shape)
    with pytest.raises(ValueError, match=r"data of dtype torch.int64 does not fit the model"):
        read(p.model, ints, p.family, progress=False)
    conv = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 2)).double().eval()
    images = torch.randint(0, 3, (4, 1, 4, 3))
    with pytest.raises(ValueError, match=r"dtype torch.int64 .* first layer '0' \(Conv2d\)"):
        read(conv, images, p.family, progress=False)
    with pytest.raises(ValueError, match=r"forward fails in float64"):
        read(
            _Float32Inside().double().eval(), torch.randint(0, 5, (4, 3)), p.family, progress=False
        )
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module"):
        read("model", p.data, p.family, progress=False)
    with pytest.raises(ValueError, match="max_directions must be a non-negative int"):
        read(p.model, p.data, p.family, max_directions=-1, progress=False)
    with pytest.raises(ValueError, match=r"Categorical family expects floating logits"):
        read(nn.Linear(5, 1).double(), p.data[:, :5], Categorical(), progress=False)
    x40 = torch.randn(40, 5, dtype=torch.float64)  # the shape quoted is the first batch's
    with pytest.raises(
        ValueError,
        match=r"shape \(16, 1\).*\(the read ran the model on a batch of 16 of the 40 samples\)$",
    ):
        read(nn.Linear(5, 1).double(), x40, Categorical(), progress=False)  # s33 trial USER D4
    with pytest.raises(ValueError, match=r"shape \(8, 1\), dtype torch.float64$"):
        read(nn.Linear(5, 1).double(), p.data[:, :5], Categorical(), progress=False)  # all of it
    with pytest.raises(TypeError, match="model output must be a Tensor"):
        read(_TupleOut(), p.data, p.family, progress=False)
    with pytest.raises(ValueError, match="at least one sample"):
        read(p.model, p.data[:0], p.family, progress=False)


@pytest.mark.parametrize("bad", [0.0, -1e-3, float("nan"), float("inf")])
def test_live_threshold_must_be_positive_and_finite(bad: float) -> None:
    p = planted_mlp(n=8)
    with pytest.raises(ValueError, match=r"live_threshold must be a positive finite float"):
        read(p.model, p.data, p.family, live_threshold=bad, progress=False)


@pytest.mark.parametrize("bad", ["1e-3", True, [1e-3]])
def test_live_threshold_must_be_a_number(bad: object) -> None:
    p = planted_mlp(n=8)
    with pytest.raises(TypeError, match=r"live_threshold must be a positive finite float or None"):
        read(p.model, p.data, p.family, live_threshold=bad, progress=False)


def test_live_threshold_reaches_every_candidate() -> None:
    """The spec's τ_live (§7.2 step 8) through the whole-model read: a slope-0 read is live
    exactly when its magnitude reaches τ, for every candidate; other classes are unchanged."""
    p = planted_mlp(activation="relu", n=64, seed=4)
    default = read(p.model, p.data, p.family, progress=False)
    assert default.meta["live_threshold"] is None
    (live,) = [r for r in default.directions if r.klass == "live"]
    seen = []
    for tau in (0.5 * live.magnitude, 2.0 * live.magnitude):
        reading = read(p.model, p.data, p.family, live_threshold=tau, progress=False)
        assert reading.meta["live_threshold"] == tau
        for before, after in zip(default.directions, reading.directions, strict=True):
            assert (after.detector, after.layers, after.k_hat) == (
                before.detector,
                before.layers,
                before.k_hat,
            )
            # a flat gauge reports no order (`DirectionReading.k`); every other class keeps k
            assert after.k == (None if after.klass == "flat_gauge" else before.k)
            if before.klass == "live":
                assert after.klass == ("live" if after.magnitude >= tau else "flat_gauge")
                seen.append(after.klass)
                assert f"live threshold {tau:.3g}" in after.reason
            else:
                assert after.klass == before.klass
    assert seen == ["live", "flat_gauge"]  # τ below, then above its magnitude


def test_torch_transformer_encoder_layer_gauges() -> None:
    """nn.TransformerEncoderLayer (packed MultiheadAttention, pre-norm): LN kernels, QK, VO; the
    packed projections are read unpacked (`adapt_attention`)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True, norm_first=True)
    model = nn.Sequential(layer, nn.Flatten(), nn.Linear(24, 2)).double().eval()
    x = torch.randn(12, 3, 8, dtype=torch.float64)
    reading = read(model, x, Gaussian(), progress=False)
    kinds = Counter((r.detector, r.klass) for r in reading.directions)
    # norm1 → self_attn's q/k/v projections (the read unpacks in_proj: one kernel direction in
    # each reader), norm2 → linear1
    assert kinds[("ln-kernel", "flat_gauge")] == 4
    assert reading.meta["multihead_as_projections"] == ["0.self_attn"]
    assert kinds[("qk-rotation", "curved_gauge")] == 2
    assert kinds[("vo-rescale", "curved_gauge")] == 2
    assert not _genuine(reading) and reading.not_covered == ()
    assert not model[0].training  # the caller's module keeps its mode


def test_conv1d_node_death() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(2, 4, 3, padding=1), nn.GELU(), nn.Conv1d(4, 2, 3, padding=1), nn.Flatten()
    ).double()
    with torch.no_grad():
        model[0].weight[1] = 0.0
        model[0].bias[1] = 0.0
        model[2].weight[:, 1] = 0.0
    x = torch.randn(16, 2, 6, dtype=torch.float64)
    _check_order(read(model, x, Gaussian(), progress=False), 2, ("0", "2"))


def test_invariant_under_relu_rescaling() -> None:
    """ReLU unit rescaling ``(w_in, b_in, w_out) → (c w_in, c b_in, w_out/c)`` keeps the read."""
    p = planted_mlp(activation="relu", n=64, seed=8)
    base = read(p.model, p.data, p.family, progress=False)
    scaled = copy.deepcopy(p.model)
    c = torch.linspace(0.5, 2.0, 6, dtype=torch.float64)
    with torch.no_grad():
        scaled[0].weight.mul_(c[:, None])
        scaled[0].bias.mul_(c)
        scaled[2].weight.div_(c[None, :])
    torch.testing.assert_close(scaled(p.data), p.model(p.data), atol=ATOL_FUNCTION, rtol=0)
    again = read(scaled, p.data, p.family, progress=False)
    assert _signature(again) == _signature(base)
    (a,), (b,) = _genuine(base), _genuine(again)
    assert a.k == b.k == 2 and abs(a.k_hat - b.k_hat) <= K_HAT_TOL


class _LNPoolHead(nn.Module):
    def __init__(self, pool: str) -> None:
        super().__init__()
        self.pool = pool
        self.norm = nn.LayerNorm(6)
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.norm(x)
        return self.head(z[:, 0] if self.pool == "cls" else z.mean(dim=1))


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_ln_kernel_reaches_a_head_through_token_selection(pool: str) -> None:
    torch.manual_seed(0)
    model = _LNPoolHead(pool).double()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.normal_(0.0, 0.2)
    x = torch.randn(16, 4, 6, dtype=torch.float64)
    reading = read(model, x, Categorical(), progress=False)
    (ln,) = [r for r in reading.directions if r.detector == "ln-kernel"]
    # the direction moves the head alone; the norm whose kernel it is stays (s17 trial AD #6)
    assert ln.klass == "flat_gauge" and ln.layers == ("head",) and ln.info["norm"] == "norm"
    # the [CLS] row is a graph edge (a row selection); the token mean only the factor test finds
    assert ln.info.get("via") == ("factor-test" if pool == "mean" else None)
    assert ln.info["closed_form_cos"] >= LN_COS_MIN


def test_offset_checkpoint_is_re_read_snapped() -> None:
    """Dead weights slightly off zero hide the small-t rate; ``snap="auto"`` re-reads snapped."""
    p = planted_mlp(activation="gelu", n=64, seed=4)
    j = p.dead["0"]
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        p.model[0].weight[j] = 1e-3 * torch.randn(5, generator=gen, dtype=torch.float64)
        p.model[2].weight[:, j] = 1e-3 * torch.randn(4, generator=gen, dtype=torch.float64)
    (rec,) = _genuine(read(p.model, p.data, p.family, progress=False))
    assert rec.offset > 0 and "unsnapped" in rec.info
    assert rec.k == 2  # the snapped read (the unsnapped window sits below 10·offset)
    with pytest.raises(ValueError, match="snap must be True, False or 'auto'"):
        read(p.model, p.data, p.family, snap="yes", progress=False)


class _Product(nn.Module):
    """``a·b·x`` with a third tensor ``c = (c0, 1)`` that the output ignores."""

    def __init__(self, c0: float) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros(1, dtype=torch.float64))
        self.b = nn.Parameter(torch.zeros(1, dtype=torch.float64))
        self.c = nn.Parameter(torch.tensor([c0, 1.0], dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a * self.b * x + 0.0 * self.c.sum()


class _Diagonal:
    """Proposes ``u ∝ (e_a, e_b, (1, 0)_c)``: order 2 at θ0, offset ``c0/√3``."""

    name = "diagonal"

    def applies_to(self, module: nn.Module) -> bool:
        return isinstance(module, _Product)

    def propose(self, name, module, ctx):
        one = torch.ones(1, dtype=torch.float64)
        u = {"a": one, "b": one, "c": torch.tensor([1.0, 0.0], dtype=torch.float64)}
        return [Candidate(layers=(name,), detector="diagonal", u=normalise(u), ratio=0.0)]


def test_auto_snap_keeps_a_genuine_read_the_snap_would_lose() -> None:
    """Along the diagonal of ``a·b`` at θ0 = 0 the output is ``t²/3·x``: order 2 at every t,
    below the offset too. Snapping moves to ``(−c0/3, −c0/3)``, a regular point (live, k = 1),
    so ``snap="auto"`` keeps the first read and records the snapped one."""
    x = torch.randn(16, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    net = _Product(0.1)
    (rec,) = read(net, x, Gaussian(), detectors=[_Diagonal()], progress=False).directions
    assert (rec.klass, rec.k) == ("genuine_singularity", 2)
    assert rec.k_hat == pytest.approx(2.0, abs=K_HAT_EXACT)
    assert rec.info["snapped_read"]["class"] == "live" and rec.info["snapped_read"]["k"] == 1
    (always,) = read(
        net, x, Gaussian(), detectors=[_Diagonal()], snap=True, progress=False
    ).directions
    assert (always.klass, always.k) == ("live", 1)  # what the snapped point reads


def test_offset_beyond_the_sweep_is_not_re_read_snapped() -> None:
    """A candidate whose offset |uᵀθ0| reaches the sweep's largest t is read once, unsnapped
    (the snapped point would lie outside the swept neighbourhood), and the record says so; the
    pass count drops by one sweep per such candidate against ``snap=True`` re-reads."""
    net = planted_deep_linear(depth=4, width=4, n=256, seed=0)
    reading = read(net.model, net.data, net.family, progress=False, per_layer=False)
    skipped = [d for d in reading.directions if "snap_skipped" in d.info]
    assert skipped, "the planted chain's kfac candidates sit at offsets above ρ_W"
    for d in skipped:
        s = d.info["snap_skipped"]
        assert "unsnapped" not in d.info and d.klass == "live"
        assert s["offset"] == d.offset >= s["t_max"] == d.sweep["t"][-1]
    (chain,) = _genuine(reading)
    assert chain.k == 4 and chain.offset < chain.sweep["t"][-1]
    sweeps = len(reading.directions) + sum("unsnapped" in d.info for d in reading.directions)
    n_sweep = reading.meta["n_forward_passes"] - 3 - 1  # structure and probe-rank passes, factors
    # a genuine read is also evaluated at the mirrored t of its window (one_sided_check)
    lo, hi = chain.window
    mirror = sum(lo <= t <= hi for t in chain.sweep["t"])
    assert mirror >= 6  # MIN_POINTS
    assert n_sweep == sweeps * (len(chain.sweep["t"]) + 1) + mirror


def test_two_dead_units_give_two_chains() -> None:
    p = planted_mlp(activation="tanh", hidden=7, n=64, seed=6)
    j = p.dead["0"]
    k = (j + 3) % 7
    with torch.no_grad():
        p.model[0].weight[k] = 0.0
        p.model[0].bias[k] = 0.0
        p.model[2].weight[:, k] = 0.0
    reading = read(p.model, p.data, p.family, progress=False)
    chains = [r for r in reading.directions if r.detector == "duality"]
    assert [r.k for r in chains] == [2, 2]
    assert all(r.klass == "genuine_singularity" and r.r2 >= R2_MIN for r in chains)


@pytest.mark.parametrize(("activation", "k"), [("tanh", 2), ("relu2", 3)])
def test_all_zero_width_one_node_death(activation: str, k: int) -> None:
    """``a·σ(b x)`` at ``a = b = 0``: both factors of the pair vanish identically (full kernels)."""
    from neuromanifold.cells.dense import SquaredReLU

    act = SquaredReLU() if activation == "relu2" else nn.Tanh()
    model = nn.Sequential(nn.Linear(1, 1, bias=False), act, nn.Linear(1, 1, bias=False)).double()
    with torch.no_grad():
        model[0].weight.zero_()
        model[2].weight.zero_()
    x = torch.randn(32, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    _check_order(read(model, x, Gaussian(), progress=False), k, ("0", "2"))


def test_swiglu_dead_dimension_reads_order_three(dead_swiglu) -> None:
    model = dead_swiglu(3, 5, 2, seed=3)
    x = torch.randn(64, 3, dtype=torch.float64)
    reading = read(model, x, Gaussian(), progress=False)
    (rec,) = _genuine(reading)
    assert rec.detector == "glu-dead-dimension"
    assert rec.layers == ("gate_proj", "up_proj", "down_proj")
    assert rec.k == 3 and abs(rec.k_hat - 3) <= K_HAT_TOL and rec.r2 >= R2_MIN


def test_error_data_not_a_tensor_or_pair() -> None:
    p = planted_mlp(activation="relu", n=8, seed=0)
    with pytest.raises(TypeError, match="data must be a Tensor or an \\(X, y\\) tuple; got str"):
        read(p.model, "abc", p.family, progress=False)


def test_coordinate_scan_errors() -> None:
    p = planted_mlp(activation="relu", n=8, seed=0)
    with pytest.raises(ValueError, match="per_tensor must be a positive int; got 0"):
        coordinate_scan(p.model, p.data, p.family, per_tensor=0)
    with pytest.raises(ValueError, match=r"layers \['1'\] are not Linear/Conv blocks of the model"):
        coordinate_scan(p.model, p.data, p.family, layers=["0", "1"])


def test_read_reports_a_block_too_large_to_factor() -> None:
    """A head over 16 385 classes (G would be 2.1 GB) is not factored: the read lists it in
    ``not_covered`` with the reason and still proposes its closed-form logit shift."""
    from neuromanifold.singular.factors import MAX_FACTOR_DIM

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, MAX_FACTOR_DIM + 1)).double()
    x = torch.randn(8, 3, dtype=torch.float64)
    reading = read(model, x, Categorical(), progress=False)
    assert [(c.name, c.reason) for c in reading.not_covered] == [
        (
            "2",
            f"no K-FAC directions: its factor G would be {MAX_FACTOR_DIM + 1} × "
            f"{MAX_FACTOR_DIM + 1} (2.1 GB float64) above max_factor_dim {MAX_FACTOR_DIM} (raise "
            "it: read(..., max_factor_dim=...)); closed-form detectors still read it",
        )
    ]
    shift = [d for d in reading.directions if d.detector == "ce-shift"]
    assert len(shift) == 1 and shift[0].klass == "flat_gauge"
    assert all(d.layers != ("2",) or d.detector == "ce-shift" for d in reading.directions)
    # a smaller cap, passed through read, also skips the first block (A of '0' is 3 + 1 = 4)
    small = read(model, x, Categorical(), max_directions=0, max_factor_dim=3, progress=False)
    assert [c.name for c in small.not_covered] == ["0", "2"]


class _Float32Inside(nn.Module):
    """Token ids → Embedding, then a float32 tensor made inside ``forward``: fails in float64."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(5, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.ones(4, dtype=torch.float32)
        return self.head(self.emb(x).mean(1) * scale) @ torch.eye(2, dtype=torch.float32)


def test_snap_true_leaves_gauge_candidates_at_the_checkpoint() -> None:
    """``snap=True`` snaps non-gauge candidates only: the ReLU rescale (a certified curved gauge)
    reads the same record as under ``snap="auto"``, from θ0 (snapping it read live, k = 1)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).double().eval()
    x = torch.randn(32, 4, dtype=torch.float64)
    auto = read(model, x, Gaussian(), snap="auto", progress=False)
    always = read(model, x, Gaussian(), snap=True, progress=False)
    gauges = [d for d in auto.directions if d.detector == "relu-rescale"]
    assert gauges and all(d.klass == "curved_gauge" and d.k == 2 for d in gauges)
    snapped_gauges = [d for d in always.directions if d.detector == "relu-rescale"]
    assert [d.to_dict() for d in snapped_gauges] == [d.to_dict() for d in gauges]


def test_error_read_of_a_training_mode_model() -> None:
    """``read`` rejects Dropout or BatchNorm in training mode, like ``read_direction`` (the working
    copy is put in evaluation mode, so the check runs on the caller's model)."""
    torch.manual_seed(0)
    x = torch.randn(8, 3, dtype=torch.float64)
    drop = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.1), nn.Linear(4, 2)).double()
    with pytest.raises(ValueError, match=r"'1' \(Dropout\) is in training mode.*model\.eval\(\)"):
        read(drop, x, Gaussian(), progress=False)
    bn = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).double()
    with pytest.raises(ValueError, match=r"'1' \(BatchNorm1d\) is in training mode"):
        read(bn, x, Gaussian(), progress=False)
    assert read(drop.eval(), x, Gaussian(), max_directions=0, progress=False).meta["n_read"] == 0


def test_note_of_a_read_with_max_directions_zero_counts_the_candidates() -> None:
    net = planted_mlp()
    reading = read(net.model, net.data, net.family, max_directions=0, progress=False)
    n = reading.meta["n_candidates"]
    assert n >= 1 and reading.meta["n_read"] == 0 and reading.directions == ()
    assert reading.note == (
        f"{n} candidate direction(s) were detected and none was read (max_directions=0)"
    )


def test_read_notes_factors_with_fewer_rows_than_their_side() -> None:
    """8 samples, 3 classes: the hidden layer's G has 8·2 = 16 rows for 32 dimensions and the
    head's A has 8 rows for 32 inputs; with 64 samples neither is limited."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 3)).double().eval()
    kw = {"max_directions": 0, "progress": False}
    small = read(model, torch.randn(8, 4, dtype=torch.float64), Categorical(), **kw)
    limited = {(e["layer"], e["factor"]) for e in small.meta["probe_rank_limited"]}
    assert limited == {("0", "G"), ("2", "A")}
    assert "probe-size artefacts" in small.note
    big = read(model, torch.randn(64, 4, dtype=torch.float64), Categorical(), **kw)
    assert big.meta["probe_rank_limited"] == [] and "probe-size" not in big.note


def test_data_that_does_not_fit_is_named_by_its_whole_shape() -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(12, 2)).double().eval()
    ids = torch.randint(0, 10, (32, 3), generator=torch.Generator().manual_seed(0))
    ids[0, 0] = 11
    with pytest.raises(ValueError, match=r"data of shape \(32, 3\) does not fit.*indices < 10"):
        read(model, ids, Gaussian(), progress=False)


def test_baseline_under_a_budget_refuses_before_the_sweeps(monkeypatch) -> None:
    """``read(baseline=True, max_memory=…)`` on the planted ReLU MLP: at a budget where the scan's
    copy of the parameters is the first thing that does not fit beside the candidates, the
    refusal comes before any candidate is read (it came after every sweep before, the records
    discarded). The budget is found by following the refusals' named minima up from 5 kB (the
    window is narrow and moves with the plan's rules: 26.5–28.5 kB once, 14.75–15.0 kB after
    s21 trial AT #2); every refusal on the way comes before the sweeps too."""
    import re

    import neuromanifold.singular.read as read_module
    from neuromanifold.cells.planted import planted_mlp
    from neuromanifold.singular.memory import parse_memory

    swept: list[int] = []
    real = read_module.read_candidate

    def spy(*args, **kwargs):
        swept.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(read_module, "read_candidate", spy)
    net = planted_mlp(activation="relu", n=128, seed=3)
    budget, refusals = 5_000, []
    for _ in range(12):
        with pytest.raises(ValueError, match=r"is too small") as err:
            read_module.read(
                net.model,
                net.data,
                net.family,
                max_memory=budget,
                max_directions=2,
                baseline=True,
                progress=False,
            )
        assert swept == [], refusals  # no refusal comes after a sweep
        message = str(err.value)
        refusals.append(budget)
        if "coordinate scan's copy of the parameters" in message:
            break
        named = re.search(r"to at least ([0-9.]+ [kMG]?B)", message)
        assert named, message
        budget = max(budget + 1, int(parse_memory(named.group(1)) * 1.001) + 16)
    else:
        pytest.fail(f"no budget refused the scan's copy first; tried {refusals}")
    assert swept == []
