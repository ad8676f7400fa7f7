"""Layer-scale rescaling (DeiT-III, CaiT, DINOv2, ConvNeXt): ``γ ⊙ (W h + b)``.

Laws checked (float64): the action ``(W_j, b_j, γ_j) → (c W_j, c b_j, γ_j / c)`` leaves the model
unchanged for arbitrary positive factors, uncompensated it does not; the closed-form tangent is the
derivative of the action (forward-mode oracle); the candidate is certified, and a straight probe
along it reads an apparent order 2 that is classed curved gauge only through the generators; a
projection output that is also used outside the scale breaks the orbit; a whole read covers the
layer-scale modules and classes their records curved gauges of order 2.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.func import functional_call

from neuromanifold.singular.detectors import DetectionContext, LayerScaleDetector, UnitRescale
from neuromanifold.singular.detectors.graph import layer_scale_param
from neuromanifold.singular.detectors.layer_scale import ScalarRescale
from neuromanifold.singular.detectors.rescale import certify
from neuromanifold.singular.direction import read_direction
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.read import read

# outputs at two points of one orbit (random factors in [0.5, 2]): rounding
RTOL_INVARIANT = 1e-12
# closed-form tangent vs forward-mode derivative of the action: the same products
ATOL_TANGENT = 1e-14
# a broken orbit moves the outputs by O(1) relative
BROKEN_MIN = 1e-3
N, D = 32, 6


class LayerScale(nn.Module):
    """timm's layout: ``x * gamma``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.empty(dim).uniform_(0.5, 1.5))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma


class Dinov2LayerScale(nn.Module):
    """Hugging Face DINOv2's layout: ``hidden * lambda1``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lambda1 = nn.Parameter(torch.empty(dim).uniform_(0.5, 1.5))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.lambda1


class LayerScale2d(nn.Module):
    """timm's conv layout: ``x * gamma`` per channel."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.empty(dim).uniform_(0.5, 1.5))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma.view(1, -1, 1, 1)


class ScalarLayerScale(nn.Module):
    """One learned scale for the whole branch: ``x * gamma`` with ``gamma`` of shape ``(1,)``
    (s28 trial EXOTIC #2)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.empty(1).uniform_(0.5, 1.5))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma


class _Block(nn.Module):
    """``head(x + ls(fc2(gelu(fc1(ln x)))))``; ``leak`` also adds ``fc2``'s output unscaled."""

    def __init__(self, scale: type[nn.Module], *, leak: bool = False) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 2 * D)
        self.fc2 = nn.Linear(2 * D, D)
        self.ls = scale(D)
        self.head = nn.Linear(D, 3)
        self.leak = leak

    def forward(self, x: Tensor) -> Tensor:
        h = self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))
        y = x + self.ls(h) + (h if self.leak else 0.0)
        return self.head(y)


class _ConvBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.ls = LayerScale2d(4)
        self.head = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.ls(self.conv(x)).mean((2, 3)))


CASES = {
    "timm": (lambda: _Block(LayerScale), "fc2", "ls.gamma"),
    "dinov2": (lambda: _Block(Dinov2LayerScale), "fc2", "ls.lambda1"),
    "conv": (_ConvBlock, "conv", "ls.gamma"),
    "scalar": (lambda: _Block(ScalarLayerScale), "fc2", "ls.gamma"),
}


def _case(name: str) -> tuple[DetectionContext, UnitRescale | ScalarRescale]:
    build, producer, gamma = CASES[name]
    torch.manual_seed(0)
    model = build().double()
    x = torch.randn(N, 2, 4, 4) if name == "conv" else torch.randn(N, D)
    ctx = DetectionContext.from_model(model, x.double(), Gaussian())
    kind = ScalarRescale if name == "scalar" else UnitRescale
    orbit = kind((f"{producer}.weight", f"{producer}.bias"), (gamma,))
    return ctx, orbit


@pytest.mark.parametrize("name", sorted(CASES))
def test_action_leaves_the_function_unchanged(name: str) -> None:
    ctx, orbit = _case(name)
    gen = torch.Generator().manual_seed(5)
    c = 0.5 + 1.5 * torch.rand(orbit.n_units(ctx.params), generator=gen, dtype=torch.float64)
    acted = orbit.act(ctx.params, c)
    half = {k: v for k, v in acted.items() if k in orbit.producers}
    with torch.no_grad():
        base = ctx.model(ctx.data)
        moved = functional_call(ctx.model, {**ctx.params, **acted}, (ctx.data,))
        broken = functional_call(ctx.model, {**ctx.params, **half}, (ctx.data,))
    scale = float(base.abs().max())
    assert float((moved - base).abs().max()) <= RTOL_INVARIANT * scale
    assert float((broken - base).abs().max()) > BROKEN_MIN * scale


@pytest.mark.parametrize("name", sorted(CASES))
def test_tangent_is_the_derivative_of_the_action(name: str) -> None:
    ctx, orbit = _case(name)
    for j in range(orbit.n_units(ctx.params)):
        fast, ref = orbit.tangent(ctx.params, j), orbit.tangent_reference(ctx.params, j)
        assert fast.keys() == ref.keys()
        for k in fast:
            torch.testing.assert_close(fast[k], ref[k], rtol=0, atol=ATOL_TANGENT)


@pytest.mark.parametrize("name", sorted(CASES))
def test_candidate_is_certified_and_reads_as_a_curved_gauge(name: str) -> None:
    ctx, orbit = _case(name)
    (cand,) = LayerScaleDetector().propose("ls", ctx.model.ls, ctx)
    assert cand.detector == "layer-scale" and cand.info["certified"] == 0.0
    assert set(cand.u) == {*orbit.producers, *orbit.consumers}
    assert len(cand.gauge_generators) == orbit.n_units(ctx.params)
    gens = read_direction(
        ctx.model, ctx.params, cand.u, ctx.data, Gaussian(), gauge_generators=cand.gauge_generators
    )
    assert gens.k == 2 and gens.klass.value == "curved_gauge"
    straight = read_direction(ctx.model, ctx.params, cand.u, ctx.data, Gaussian())
    assert straight.k == 2 and straight.klass.value == "genuine_singularity"  # the mimic


def test_projection_used_outside_the_scale_is_no_symmetry() -> None:
    torch.manual_seed(0)
    model = _Block(LayerScale, leak=True).double()
    ctx = DetectionContext.from_model(model, torch.randn(N, D, dtype=torch.float64), Gaussian())
    orbit = UnitRescale(("fc2.weight", "fc2.bias"), ("ls.gamma",))
    assert ctx.graph.single_producer("ls") == "fc2"  # the layout alone looks like a pair
    assert certify(ctx, orbit) > BROKEN_MIN
    assert LayerScaleDetector().propose("ls", ctx.model.ls, ctx) == []


def test_layer_scale_modules_are_matched_by_name_and_one_vector() -> None:
    assert [layer_scale_param(m(3)) for m in (LayerScale, Dinov2LayerScale, LayerScale2d)] == [
        "gamma",
        "lambda1",
        "gamma",
    ]

    two = type("LayerScale", (nn.Module,), {})()  # the name, but two parameters
    two.gamma, two.beta = nn.Parameter(torch.ones(3)), nn.Parameter(torch.zeros(3))
    assert layer_scale_param(two) is None
    assert layer_scale_param(nn.LayerNorm(3)) is None


def test_max_units_must_be_a_positive_int() -> None:
    with pytest.raises(ValueError, match="max_units"):
        LayerScaleDetector(max_units=0)


def test_whole_read_covers_the_scales() -> None:
    torch.manual_seed(0)
    model = _Block(LayerScale).double()
    reading = read(model, torch.randn(N, D, dtype=torch.float64), Categorical(), progress=False)
    assert reading.not_covered == ()
    (rec,) = [r for r in reading.directions if r.detector == "layer-scale"]
    assert rec.layers == ("fc2", "ls") and rec.klass == "curved_gauge" and rec.k == 2


def test_only_a_pass_through_producer_with_one_vector_is_matched() -> None:
    """An activation between projection and scale breaks the orbit's layout (not proposed); a
    bias-free projection is a producer of its rows only; a 2-D scale is no layer scale."""

    class Gelu(_Block):
        def forward(self, x: Tensor) -> Tensor:
            h = self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))
            return self.head(x + self.ls(nn.functional.gelu(h)))

    torch.manual_seed(0)
    x = torch.randn(N, D, dtype=torch.float64)
    ctx = DetectionContext.from_model(Gelu(LayerScale).double(), x, Gaussian())
    assert ctx.graph.via[("fc2", "ls")] == ("GELU",)
    assert LayerScaleDetector().propose("ls", ctx.model.ls, ctx) == []
    model = _Block(LayerScale).double()
    model.fc2.bias = None
    ctx = DetectionContext.from_model(model, x, Gaussian())
    (cand,) = LayerScaleDetector().propose("ls", ctx.model.ls, ctx)
    assert set(cand.u) == {"fc2.weight", "ls.gamma"} and cand.info["certified"] == 0.0
    flat = type("LayerScale", (nn.Module,), {})()
    flat.gamma = nn.Parameter(torch.ones(2, 3))
    assert layer_scale_param(flat) is None
