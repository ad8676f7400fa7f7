"""Per-unit rescaling gauges (spec §6.5): ReLU rescale, norm scale, GLU up projection.

The norms include BatchNorm (evaluation mode) and GroupNorm read by convolutions, and a
BatchNorm → ReLU → conv pair (the rescale of a ResNet block's first norm); a conv's channels
reach a Linear through max pooling and a flatten (each channel a block of 4 columns).

Laws checked: the group action leaves the model function unchanged for arbitrary positive factors
(not only the powers of two `certify` uses); the closed-form tangent equals the derivative of the
action (forward-mode oracle); a straight probe along a tangent reads an apparent order 2 that is
classed curved gauge only through the generators; layouts that break the symmetry (a ReLU or norm
output that also enters a residual sum, a "GLU" whose up projection is added, not multiplied)
are not proposed.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import Tensor, nn
from torch.func import functional_call

from neuromanifold.cells.planted import planted_transformer
from neuromanifold.io import TensorOutput, import_transformers
from neuromanifold.report import reading_markdown
from neuromanifold.singular.detectors import (
    DetectionContext,
    GLURescaleDetector,
    NormScaleDetector,
    ReLURescaleDetector,
    UnitRescale,
    rescale,
    trace_graph,
)
from neuromanifold.singular.detectors.rescale import (
    CERTIFY_CACHE_BYTES,
    CERTIFY_RTOL,
    MAX_GENERATOR_ENTRIES,
    certify,
    leading_unit,
    unit_activity,
    units_cap,
)
from neuromanifold.singular.direction import read_direction
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.read import read

# outputs of a float64 model at two points of one orbit (random factors in [0.5, 2]): rounding
RTOL_INVARIANT = 1e-12
# closed-form tangent vs forward-mode derivative of the action: the same products, rounding only
ATOL_TANGENT = 1e-14
# a broken orbit moves the output by O(1) relative; this is far above CERTIFY_RTOL
BROKEN_MIN = 1e-3
N = 32
# the unit's score from the factor's diagonal vs from hooked activations: same sums, rounding
RTOL_ACTIVITY = 1e-12


class _HFSwiGLU(nn.Module):
    """``down(SiLU(gate(x)) ⊙ up(x))`` with Hugging Face child names and an up-projection bias."""

    def __init__(self, d: int, hidden: int, d_out: int, *, additive: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden)
        self.down_proj = nn.Linear(hidden, d_out, bias=False)
        self.additive = additive

    def forward(self, x: Tensor) -> Tensor:
        g = nn.functional.silu(self.gate_proj(x))
        h = g + self.up_proj(x) if self.additive else g * self.up_proj(x)
        return self.down_proj(h)


class _ResidualReLU(nn.Module):
    """``fc2(relu(fc1 x)) + Σ relu(fc1 x)``: the ReLU output is also summed outside ``fc2``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(4, 1)

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.fc1(x))
        return self.fc2(h) + h.sum(-1, keepdim=True)


def _ctx(model: nn.Module, x: Tensor) -> DetectionContext:
    return DetectionContext.from_model(model, x, Gaussian())


def _relu_mlp() -> tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    return m, torch.randn(N, 3, dtype=torch.float64)


def _prenorm(norm: type[nn.Module]) -> tuple[nn.Module, Tensor]:
    """One pre-norm block: ``norm`` (random scale and shift) read by two Linears."""
    torch.manual_seed(1)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = norm(6)
            self.a = nn.Linear(6, 4)
            self.b = nn.Linear(6, 4, bias=False)

        def forward(self, x: Tensor) -> Tensor:
            h = self.ln(x)
            return self.a(h) * self.b(h)

    m = Block()
    with torch.no_grad():
        m.ln.weight.uniform_(0.5, 1.5)
        if getattr(m.ln, "bias", None) is not None:
            m.ln.bias.uniform_(-0.5, 0.5)
    return m, torch.randn(N, 6, dtype=torch.float64)


def _randomise_norm(norm: nn.Module) -> None:
    """Scale and shift off (1, 0); a BatchNorm's running statistics off (0, 1)."""
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
        if isinstance(norm, nn.modules.batchnorm._BatchNorm):
            norm.running_mean.uniform_(-0.3, 0.3)
            norm.running_var.uniform_(0.5, 1.5)


class _ChannelNormCNN(nn.Module):
    """``head(flatten(conv2(act(norm(conv1 x)))))``: a per-channel affine norm read by a conv."""

    def __init__(self, norm: nn.Module, act: nn.Module) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3)
        self.norm = norm
        self.act = act
        self.conv2 = nn.Conv2d(4, 3, 3)
        self.head = nn.Linear(12, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.conv2(self.act(self.norm(self.conv1(x)))).flatten(1))


def _channel_norm_cnn(norm: nn.Module, act: nn.Module) -> tuple[nn.Module, Tensor]:
    torch.manual_seed(6)
    model = _ChannelNormCNN(norm, act)
    _randomise_norm(model.norm)
    return model.eval(), torch.randn(N, 2, 6, 6, dtype=torch.float64)


class _FlattenHead(nn.Module):
    """``fc(view(maxpool(relu(conv x)), N, −1))``: each channel's 4 positions read by ``fc``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.fc = nn.Linear(3 * 2 * 2, 2)

    def forward(self, x: Tensor) -> Tensor:
        z = nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(z.view(z.shape[0], -1))


def _flatten_head() -> tuple[nn.Module, Tensor]:
    torch.manual_seed(8)
    return _FlattenHead(), torch.randn(N, 2, 6, 6, dtype=torch.float64)


def _batchnorm_mlp() -> tuple[nn.Module, Tensor]:
    """``Linear → BatchNorm1d → Linear`` (evaluation mode)."""
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.Linear(5, 2))
    _randomise_norm(model[1])
    return model.eval(), torch.randn(N, 3, dtype=torch.float64)


def _swiglu(additive: bool = False) -> tuple[nn.Module, Tensor]:
    torch.manual_seed(2)
    return _HFSwiGLU(3, 5, 2, additive=additive), torch.randn(N, 3, dtype=torch.float64)


def _prelu_mlp() -> tuple[nn.Module, Tensor]:
    """Linear → PReLU with a learned slope per unit (0.1 … 0.5) → Linear."""
    torch.manual_seed(0)
    act = nn.PReLU(5)
    with torch.no_grad():
        act.weight.copy_(torch.linspace(0.1, 0.5, 5))
    m = nn.Sequential(nn.Linear(3, 5), act, nn.Linear(5, 2))
    return m, torch.randn(N, 3, dtype=torch.float64)


CASES = {
    "relu": (_relu_mlp, ReLURescaleDetector(), "0"),
    "prelu": (_prelu_mlp, ReLURescaleDetector(), "0"),
    "layernorm": (lambda: _prenorm(nn.LayerNorm), NormScaleDetector(), "ln"),
    "rmsnorm": (lambda: _prenorm(nn.RMSNorm), NormScaleDetector(), "ln"),
    "glu": (_swiglu, GLURescaleDetector(), ""),
    "batchnorm-relu-conv": (
        lambda: _channel_norm_cnn(nn.BatchNorm2d(4), nn.ReLU()),
        ReLURescaleDetector(),
        "norm",
    ),
    "groupnorm-conv": (
        lambda: _channel_norm_cnn(nn.GroupNorm(2, 4), nn.Identity()),
        NormScaleDetector(),
        "norm",
    ),
    "instancenorm-relu-conv": (
        lambda: _channel_norm_cnn(nn.InstanceNorm2d(4, affine=True), nn.ReLU()),
        ReLURescaleDetector(),
        "norm",
    ),
    "instancenorm-conv": (
        lambda: _channel_norm_cnn(nn.InstanceNorm2d(4, affine=True), nn.Identity()),
        NormScaleDetector(),
        "norm",
    ),
    "batchnorm1d-linear": (_batchnorm_mlp, NormScaleDetector(), "1"),
    "relu-pool-flatten-linear": (_flatten_head, ReLURescaleDetector(), "conv"),
}


def _proposal(case: str):
    build, det, name = CASES[case]
    model, x = build()
    ctx = _ctx(model, x)
    return ctx, det.propose(name, ctx.model.get_submodule(name), ctx)


def _orbit(case: str) -> UnitRescale:
    return {
        "relu": UnitRescale(("0.weight", "0.bias"), ("2.weight",)),
        "prelu": UnitRescale(("0.weight", "0.bias"), ("2.weight",)),
        "layernorm": UnitRescale(("ln.weight", "ln.bias"), ("a.weight", "b.weight")),
        "rmsnorm": UnitRescale(("ln.weight",), ("a.weight", "b.weight")),
        "glu": UnitRescale(("up_proj.weight", "up_proj.bias"), ("down_proj.weight",)),
        "batchnorm-relu-conv": UnitRescale(("norm.weight", "norm.bias"), ("conv2.weight",)),
        "groupnorm-conv": UnitRescale(("norm.weight", "norm.bias"), ("conv2.weight",)),
        "instancenorm-relu-conv": UnitRescale(("norm.weight", "norm.bias"), ("conv2.weight",)),
        "instancenorm-conv": UnitRescale(("norm.weight", "norm.bias"), ("conv2.weight",)),
        "batchnorm1d-linear": UnitRescale(("1.weight", "1.bias"), ("2.weight",)),
        "relu-pool-flatten-linear": UnitRescale(("conv.weight", "conv.bias"), ("fc.weight",), 1, 4),
    }[case]


@pytest.mark.parametrize("case", sorted(CASES))
def test_action_leaves_the_function_unchanged(case: str) -> None:
    ctx, _ = _proposal(case)
    orbit = _orbit(case)
    gen = torch.Generator().manual_seed(5)
    c = 0.5 + 1.5 * torch.rand(orbit.n_units(ctx.params), generator=gen, dtype=torch.float64)
    acted = orbit.act(ctx.params, c)
    half = {k: v for k, v in acted.items() if k in orbit.producers}  # no compensation
    with torch.no_grad():
        base = ctx.model(ctx.data)
        moved = functional_call(ctx.model, {**ctx.params, **acted}, (ctx.data,))
        uncompensated = functional_call(ctx.model, {**ctx.params, **half}, (ctx.data,))
    scale = float(base.abs().max())
    assert float((moved - base).abs().max()) <= RTOL_INVARIANT * scale
    assert float((uncompensated - base).abs().max()) > BROKEN_MIN * scale


@pytest.mark.parametrize("case", sorted(CASES))
def test_tangent_is_the_derivative_of_the_action(case: str) -> None:
    ctx, _ = _proposal(case)
    orbit = _orbit(case)
    for j in range(orbit.n_units(ctx.params)):
        fast, ref = orbit.tangent(ctx.params, j), orbit.tangent_reference(ctx.params, j)
        assert fast.keys() == ref.keys()
        for k in fast:
            torch.testing.assert_close(fast[k], ref[k], rtol=0, atol=ATOL_TANGENT)


@pytest.mark.parametrize("case", sorted(CASES))
def test_unit_norms_are_those_of_the_tangents_and_blocks(case: str) -> None:
    """Oracle of `UnitRescale.tangent_norms` and `strength` (reshapes of whole tensors): the
    norm of each unit's tangent, and the producer row's norm times the norm of the consumer
    entries the unit owns, sliced unit by unit."""
    ctx, _ = _proposal(case)
    orbit = _orbit(case)
    norms, strength = orbit.tangent_norms(ctx.params), orbit.strength(ctx.params)
    for j in range(orbit.n_units(ctx.params)):
        t = orbit.tangent(ctx.params, j)
        assert abs(
            float(norms[j]) - float(torch.sqrt(sum(v.pow(2).sum() for v in t.values())))
        ) <= (ATOL_TANGENT)
        cols = slice(j * orbit.block, (j + 1) * orbit.block)
        owned = [ctx.params[k][:, cols] for k in orbit.consumers]
        expected = float(ctx.params[orbit.producers[0]][j].norm()) * float(
            torch.sqrt(sum(w.pow(2).sum() for w in owned))
        )
        assert abs(float(strength[j]) - expected) <= ATOL_TANGENT * max(1.0, expected)


def _activity_oracle(ctx: DetectionContext, orbit: UnitRescale) -> Tensor:
    """``sqrt(Σ_{entries of unit j} mean square)`` at the input of the orbit's first consumer
    block, channel by channel and without the factor's patch layout: for a conv consumer the
    mean square of channel ``j`` over every kernel tap is a convolution of ``z²`` with a one-hot
    kernel on channel ``j`` (same stride, padding and dilation); for the flattened head, the
    pooled 4-D map's channel ``j`` summed over its positions; for a Linear, feature ``j``."""
    key = next(k for k in orbit.consumers if k.endswith(".weight"))
    module = ctx.model.get_submodule(key.rpartition(".")[0])
    seen: list[Tensor] = []
    hook = module.register_forward_pre_hook(lambda _m, inp: seen.append(inp[0]))
    with torch.no_grad():
        ctx.model(ctx.data)
    hook.remove()
    z, n = seen[0], orbit.n_units(ctx.params)
    if isinstance(ctx.model, _FlattenHead):
        with torch.no_grad():
            fmap = nn.functional.max_pool2d(torch.relu(ctx.model.conv(ctx.data)), 2)
        return fmap.pow(2).sum((2, 3)).mean(0).sqrt()
    if isinstance(module, nn.Conv2d):
        out = []
        for j in range(n):
            one_hot = torch.zeros(1, n, *module.kernel_size, dtype=z.dtype)
            one_hot[0, j] = 1.0
            taps = nn.functional.conv2d(
                z.pow(2), one_hot, None, module.stride, module.padding, module.dilation
            )
            out.append(taps.mean().sqrt())
        return torch.stack(out)
    return torch.stack([z[..., j].pow(2).mean().sqrt() for j in range(n)])


@pytest.mark.parametrize("case", sorted(CASES))
def test_unit_activity_is_the_rms_of_the_consumer_input(case: str) -> None:
    ctx, _ = _proposal(case)
    orbit = _orbit(case)
    torch.testing.assert_close(
        unit_activity(ctx, orbit), _activity_oracle(ctx, orbit), rtol=RTOL_ACTIVITY, atol=0
    )


def test_activity_without_factors_and_the_first_consumer_with_them() -> None:
    """A norm read first by a packed attention projection (no factors) and then by a Linear:
    the Linear's input, the norm's output, decides; a layer scale's orbit has no such consumer."""

    class TwoReaders(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(6)
            self.attn = nn.MultiheadAttention(6, 2, batch_first=True)
            self.fc = nn.Linear(6, 6)
            self.head = nn.Linear(6, 2)

        def forward(self, x: Tensor) -> Tensor:
            h = self.ln(x)
            return self.head((self.attn(h, h, h)[0] + self.fc(h)).mean(1))

    torch.manual_seed(0)
    model = TwoReaders().double().eval()
    x = torch.randn(N, 4, 6, dtype=torch.float64)
    ctx = _ctx(model, x)
    orbit = UnitRescale(("ln.weight", "ln.bias"), ("attn.in_proj_weight", "fc.weight"))
    with torch.no_grad():
        h = model.ln(x)
    expected = torch.stack([h[..., j].pow(2).mean().sqrt() for j in range(6)])
    torch.testing.assert_close(unit_activity(ctx, orbit), expected, rtol=RTOL_ACTIVITY, atol=0)
    scale = UnitRescale(("fc.weight", "fc.bias"), ("ln.weight",))  # a 1-D consumer
    assert unit_activity(ctx, scale) is None


def test_all_units_dead_falls_back_to_the_weights() -> None:
    model, x = _relu_mlp()
    with torch.no_grad():
        model[0].bias.fill_(-1e3)  # no unit is ever on
    ctx = _ctx(model, x)
    orbit = _orbit("relu")
    assert float(unit_activity(ctx, orbit).max()) == 0.0
    (cand,) = ReLURescaleDetector().propose("0", ctx.model[0], ctx)
    assert cand.info["unit"] == int(torch.argmax(orbit.strength(ctx.params)))


@pytest.mark.parametrize(
    ("score", "unit"),
    [
        ([1.0, 2.0, 2.0 * (1 + 1e-12), 1.5], 1),  # within rounding of the best: the first
        ([1.0, 2.0, 2.0 * (1 + 1e-6), 1.5], 2),  # a real difference: the best
        ([0.0, 0.0, 3.0], 2),
    ],
)
def test_leading_unit_is_the_first_within_rounding_of_the_best(score, unit: int) -> None:
    assert leading_unit(torch.tensor(score, dtype=torch.float64)) == unit


def test_a_dead_unit_with_the_largest_weights_is_not_the_one_read() -> None:
    """Unit 0 gets the largest rows and a bias that keeps it off on every probe sample: by
    weights alone it would be read (and its line reads flat); the live unit is read instead,
    a curved gauge of order 2."""
    model, x = _relu_mlp()
    with torch.no_grad():
        model[0].weight[0] *= 10.0
        model[0].bias[0] = -1e3
        model[2].weight[:, 0] *= 10.0
    ctx = _ctx(model, x)
    orbit = _orbit("relu")
    assert int(torch.argmax(orbit.strength(ctx.params))) == 0
    assert float(unit_activity(ctx, orbit)[0]) == 0.0
    (cand,) = ReLURescaleDetector().propose("0", ctx.model[0], ctx)
    assert cand.info["unit"] != 0
    rec = read_direction(
        ctx.model, ctx.params, cand.u, ctx.data, Gaussian(), gauge_generators=cand.gauge_generators
    )
    assert rec.k == 2 and rec.klass.value == "curved_gauge"


@pytest.mark.parametrize("case", sorted(CASES))
def test_candidate_is_a_certified_curved_gauge(case: str) -> None:
    ctx, cands = _proposal(case)
    (cand,) = cands
    orbit = _orbit(case)
    assert cand.gauge == "curved" and cand.detector == CASES[case][1].name
    assert cand.info["certified"] <= CERTIFY_RTOL
    units = orbit.n_units(ctx.params)
    assert len(cand.gauge_generators) == units == len(cand.info["generator_units"])
    j = cand.info["unit"]
    score = orbit.strength(ctx.params) * _activity_oracle(ctx, orbit)
    assert float(score[j]) >= (1.0 - RTOL_ACTIVITY) * float(score.max())
    t = orbit.tangent(ctx.params, j)
    norm = torch.sqrt(sum(v.pow(2).sum() for v in t.values()))
    for k in t:
        torch.testing.assert_close(cand.u[k], t[k] / norm, rtol=0, atol=ATOL_TANGENT)


@pytest.mark.parametrize("case", sorted(CASES))
def test_straight_probe_reads_order_two_and_the_generators_make_it_a_gauge(case: str) -> None:
    ctx, (cand,) = _proposal(case)
    with_gens = read_direction(
        ctx.model, ctx.params, cand.u, ctx.data, Gaussian(), gauge_generators=cand.gauge_generators
    )
    assert with_gens.k == 2 and with_gens.klass.value == "curved_gauge"
    without = read_direction(ctx.model, ctx.params, cand.u, ctx.data, Gaussian())
    assert without.k == 2 and without.klass.value == "genuine_singularity"  # the mimic


def test_residual_use_of_the_relu_output_breaks_the_orbit() -> None:
    torch.manual_seed(3)
    ctx = _ctx(_ResidualReLU(), torch.randn(N, 3, dtype=torch.float64))
    assert ctx.graph.single_consumer("fc1") == "fc2"  # the layout alone looks like a rescale pair
    orbit = UnitRescale(("fc1.weight", "fc1.bias"), ("fc2.weight",))
    assert certify(ctx, orbit) > BROKEN_MIN
    assert ReLURescaleDetector().propose("fc1", ctx.model.fc1, ctx) == []


def test_additive_glu_is_not_a_rescale() -> None:
    ctx = _ctx(*_swiglu(additive=True))
    orbit = UnitRescale(("up_proj.weight", "up_proj.bias"), ("down_proj.weight",))
    assert certify(ctx, orbit) > BROKEN_MIN
    assert GLURescaleDetector().propose("", ctx.model, ctx) == []


def test_post_norm_block_proposes_no_norm_scale() -> None:
    """Post-norm: ``norm1``'s output feeds ``linear1`` and the residual sum."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    model = nn.Sequential(layer, nn.Flatten(), nn.Linear(24, 2))
    ctx = _ctx(model, torch.randn(12, 3, 8, dtype=torch.float64))
    assert ctx.graph.consumers["0.norm1"] == ("0.linear1",)
    orbit = UnitRescale(("0.norm1.weight", "0.norm1.bias"), ("0.linear1.weight",))
    assert certify(ctx, orbit) > BROKEN_MIN
    assert NormScaleDetector().propose("0.norm1", ctx.model[0].norm1, ctx) == []


def test_pre_norm_attention_in_projection_is_a_consumer() -> None:
    """Pre-norm ``nn.TransformerEncoderLayer``: norm1 → packed in-projection, norm2 → linear1."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True, norm_first=True)
    model = nn.Sequential(layer, nn.Flatten(), nn.Linear(24, 2))
    ctx = _ctx(model, torch.randn(12, 3, 8, dtype=torch.float64))
    (c1,) = NormScaleDetector().propose("0.norm1", ctx.model[0].norm1, ctx)
    (c2,) = NormScaleDetector().propose("0.norm2", ctx.model[0].norm2, ctx)
    assert set(c1.u) == {"0.norm1.weight", "0.norm1.bias", "0.self_attn.in_proj_weight"}
    assert set(c2.u) == {"0.norm2.weight", "0.norm2.bias", "0.linear1.weight"}


def test_output_without_a_float_tensor_is_not_certified() -> None:
    class Argmax(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))

        def forward(self, x: Tensor) -> Tensor:
            return self.body(x).argmax(-1)

    torch.manual_seed(4)
    model = Argmax().double()
    x = torch.randn(8, 3, dtype=torch.float64)
    ctx = DetectionContext(
        model=model,
        params={k: v.detach() for k, v in model.named_parameters()},
        factors=kfac_factors(model.body, x, Gaussian()),
        graph=trace_graph(model, x),
        family=Gaussian(),
        data=x,
    )
    orbit = UnitRescale(("body.0.weight", "body.0.bias"), ("body.2.weight",))
    assert certify(ctx, orbit) == float("inf")
    assert ReLURescaleDetector().propose("body.0", model.body[0], ctx) == []


def test_cap_records_the_truncation() -> None:
    ctx, _ = _proposal("layernorm")
    (cand,) = NormScaleDetector(max_units=2).propose("ln", ctx.model.ln, ctx)
    assert len(cand.gauge_generators) == 2
    assert cand.info["truncated"] == {"cap": 2, "found": 6, "kept": 2, "of": "generators"}


def test_default_cap_is_the_entry_budget() -> None:
    """`units_cap`: ``MAX_GENERATOR_ENTRIES // entries per generator`` without ``max_units``."""
    ctx, (cand,) = _proposal("layernorm")
    orbit = _orbit("layernorm")
    entries = sum(ctx.params[k].numel() for k in (*orbit.producers, *orbit.consumers))
    assert units_cap(orbit, ctx.params, None) == MAX_GENERATOR_ENTRIES // entries
    assert units_cap(orbit, ctx.params, 3) == 3
    assert "truncated" not in cand.info  # 6 features, far under the budget
    wide = {**ctx.params}
    wide.update({k: torch.empty(4, MAX_GENERATOR_ENTRIES, device="meta") for k in orbit.consumers})
    assert units_cap(orbit, wide, None) == 1  # one generator alone exceeds the budget


@pytest.mark.parametrize("det", [NormScaleDetector, GLURescaleDetector, ReLURescaleDetector])
@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", True])
def test_max_units_must_be_a_positive_int(det, bad) -> None:
    with pytest.raises(ValueError, match="max_units"):
        det(max_units=bad)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_whole_read_of_a_planted_transformer_finds_both_norm_scales(norm: str) -> None:
    p = planted_transformer(norm=norm, n=12, seq=3)
    reading = read(p.model, p.data, p.family, progress=False)
    recs = [r for r in reading.directions if r.detector == "norm-scale"]
    assert Counter(r.layers for r in recs) == Counter(
        [("ln1", "attn.q_proj", "attn.k_proj", "attn.v_proj"), ("ln2", "fc1")]
    )
    assert all(r.klass == "curved_gauge" and r.k == 2 for r in recs)


def test_whole_read_of_a_swiglu_with_a_dead_dimension(dead_swiglu) -> None:
    model = dead_swiglu(3, 5, 2, seed=3)
    x = torch.randn(64, 3, dtype=torch.float64)
    reading = read(model, x, Gaussian(), progress=False)
    kinds = Counter((r.detector, r.klass, r.k) for r in reading.directions)
    assert kinds[("glu-rescale", "curved_gauge", 2)] == 1
    assert kinds[("glu-dead-dimension", "genuine_singularity", 3)] == 1
    (rec,) = [r for r in reading.directions if r.detector == "glu-rescale"]
    assert 2 not in rec.info["generator_units"]  # the dead unit has no tangent


def test_generator_cap_is_reported_as_a_partial_span() -> None:
    model, x = _relu_mlp()
    det = ReLURescaleDetector(max_units=1)
    reading = read(model.double(), x, Gaussian(), detectors=[det], progress=False)
    (cut,) = reading.meta["truncated"]
    assert cut == {
        "layers": ["0", "2"],
        "detector": "relu-rescale",
        "cap": 1,
        "found": 5,
        "kept": 1,
        "of": "generators",
    }
    text = reading_markdown(reading)
    assert "`relu-rescale` on `0`, `2` keeps 1 of its 5 gauge generators (cap 1)" in text
    assert "were not read" not in text


class _PlainRMSNorm(nn.Module):
    """An RMSNorm defined outside torch: ``w ⊙ x / rms(x)``."""

    def __init__(self, d: int, *, one_plus: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, d))
        self.one_plus = one_plus  # Gemma's convention: the scale is ``1 + w``

    def forward(self, x: Tensor) -> Tensor:
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return n * (1.0 + self.weight) if self.one_plus else n * self.weight


class _GemmaStyleRMSNorm(_PlainRMSNorm):
    def __init__(self, d: int) -> None:
        super().__init__(d, one_plus=True)


@pytest.mark.parametrize("norm, proposed", [(_PlainRMSNorm, True), (_GemmaStyleRMSNorm, False)])
def test_rmsnorm_defined_outside_torch(norm: type[nn.Module], proposed: bool) -> None:
    """Matched by its class name; a scale entering as ``1 + w`` fails the certification."""
    model, x = _prenorm(norm)
    ctx = _ctx(model, x)
    assert ctx.graph.consumers["ln"] == ("a", "b")
    det = NormScaleDetector()
    assert det.applies_to(ctx.model.ln)
    cands = det.propose("ln", ctx.model.ln, ctx)
    orbit = _orbit("rmsnorm")
    if proposed:
        (cand,) = cands
        assert set(cand.u) == {"ln.weight", "a.weight", "b.weight"}
        assert certify(ctx, orbit) <= CERTIFY_RTOL
    else:
        assert cands == [] and certify(ctx, orbit) > BROKEN_MIN


def test_hugging_face_llama_norms_are_covered_scale_gauges() -> None:
    """A tiny ``LlamaForSequenceClassification``: every ``LlamaRMSNorm`` (before attention, before
    the SwiGLU MLP, before the head) gives a certified norm-scale gauge, none is left uncovered."""
    try:
        transformers = import_transformers()
    except ImportError:
        pytest.skip("transformers is not installed")
    cfg = transformers.LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16,
        num_labels=3,
        pad_token_id=0,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = TensorOutput(transformers.LlamaForSequenceClassification(cfg))
    x = torch.randint(1, 32, (24, 6), generator=torch.Generator().manual_seed(0))
    reading = read(model, x, Categorical(), progress=False)
    assert reading.not_covered == ()
    pre = "model.model."
    recs = {r.layers: r for r in reading.directions if r.detector == "norm-scale"}
    attn, mlp = f"{pre}layers.0.self_attn.", f"{pre}layers.0.mlp."
    assert set(recs) == {
        (f"{pre}layers.0.input_layernorm", f"{attn}q_proj", f"{attn}k_proj", f"{attn}v_proj"),
        (f"{pre}layers.0.post_attention_layernorm", f"{mlp}gate_proj", f"{mlp}up_proj"),
        (f"{pre}norm", "model.score"),
    }
    assert all(r.klass == "curved_gauge" and r.k == 2 for r in recs.values())
    (glu,) = [r for r in reading.directions if r.detector == "glu-rescale"]
    assert glu.klass == "curved_gauge" and glu.layers == (f"{mlp}up_proj", f"{mlp}down_proj")


def test_certification_uses_every_probe_sample() -> None:
    """The residual ReLU pair with a probe set whose first 16 samples activate no unit: on them
    alone the broken orbit changes nothing; on the whole probe set it is rejected."""
    torch.manual_seed(3)
    model = _ResidualReLU().double()
    with torch.no_grad():
        model.fc1.weight.uniform_(0.5, 1.5)
        model.fc1.bias.zero_()
    x = torch.rand(32, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.1
    x = torch.cat([-x[:16], x[16:]])
    orbit = UnitRescale(("fc1.weight", "fc1.bias"), ("fc2.weight",))
    assert certify(_ctx(model, x[:16]), orbit) == 0.0  # invisible on the inactive samples
    ctx = _ctx(model, x)
    assert certify(ctx, orbit) > BROKEN_MIN
    assert ReLURescaleDetector().propose("fc1", ctx.model.fc1, ctx) == []


@pytest.mark.parametrize("cache_bytes, passes", [(CERTIFY_CACHE_BYTES, 1 + 2), (0, 2 + 2)])
def test_unmoved_outputs_are_computed_once_and_passes_counted(
    monkeypatch, cache_bytes: int, passes: int
) -> None:
    """Two certifications: ``f(θ)`` once (kept) plus one moved pass each; without room for the
    cache, ``f(θ)`` again each time. Same values either way."""
    monkeypatch.setattr(rescale, "CERTIFY_CACHE_BYTES", cache_bytes)
    ctx, _ = _proposal("layernorm")
    ctx.cache.pop("certify_base", None)
    ctx.cache.pop("certify_passes", None)
    orbit = _orbit("layernorm")
    first, second = certify(ctx, orbit), certify(ctx, orbit)
    assert first == second <= CERTIFY_RTOL
    assert ctx.cache["certify_passes"] == passes


def test_read_counts_the_certification_passes() -> None:
    p = planted_transformer(n=12, seq=3)
    meta = read(p.model, p.data, p.family, progress=False, max_directions=0).meta
    assert meta["n_certify_passes"] >= 1 + 2  # f(θ), the two norm scales at least
    assert meta["n_forward_passes"] >= meta["n_certify_passes"] + 2


def test_a_node_death_through_a_prelu_reads_as_one_chain() -> None:
    """A PReLU (per-unit learned slopes) stopped the duality chain, so a planted node death read
    as one-sided flats only (s28 trial EXOTIC #4). It is elementwise with ``φ(0) = 0`` and
    positively homogeneous: the chain reads the death, k = 2, and the rescale is its gauge."""
    model, _ = _prelu_mlp()
    model = model.double()
    with torch.no_grad():
        model[0].weight[2], model[0].bias[2], model[2].weight[:, 2] = 0.0, 0.0, 0.0
    x = torch.randn(64, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    reading = read(model, x, Gaussian(), progress=False)
    kinds = {(r.detector, r.layers, r.klass, r.k) for r in reading.directions}
    assert ("duality", ("0", "2"), "genuine_singularity", 2) in kinds
    assert ("relu-rescale", ("0", "2"), "curved_gauge", 2) in kinds


def test_a_prelu_is_no_stop_and_at_slope_zero_reads_as_the_relu() -> None:
    """The PReLU module calls ``F.prelu``, which the graph did not follow: recorded as a second
    reader of the producer, it gave an extra chain (s28b audit RERUN #2). At slopes 0 the PReLU
    model is the ReLU model, bit for bit, and reads the same records."""
    model, _ = _prelu_mlp()
    model = model.double()
    with torch.no_grad():
        model[1].weight.zero_()
        model[0].weight[2], model[0].bias[2], model[2].weight[:, 2] = 0.0, 0.0, 0.0
    relu = nn.Sequential(model[0], nn.ReLU(), model[2])
    x = torch.randn(64, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert torch.equal(model(x), relu(x))
    assert trace_graph(model, x).stops == {}
    readings = [read(m, x, Gaussian(), progress=False) for m in (model, relu)]
    records = [[(r.detector, r.layers, r.klass, r.k) for r in rd.directions] for rd in readings]
    assert records[0] == records[1]
