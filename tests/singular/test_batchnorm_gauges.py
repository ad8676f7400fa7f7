"""The producer ↔ BatchNorm gauges: the bias shift (``bn-shift``, flat) and the channel rescale
(``bn-rescale``, curved; s26 trial CNN #8).

Closed form: in evaluation mode ``y_c = γ_c (x_c − μ_c)/σ_c + β_c``, so
``(b_c + s, β_c − s γ_c/σ_c)`` leaves the model unchanged for every ``s``: the candidate is the
normalised span direction ``Σ_c (e_{b_c} − (γ_c/σ_c) e_{β_c})``, flat along its whole line.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call

from neuromanifold.singular.detectors import DetectionContext
from neuromanifold.singular.detectors.batchnorm_scale import (
    BatchNormRescale,
    BatchNormScaleDetector,
)
from neuromanifold.singular.detectors.batchnorm_shift import BatchNormShiftDetector
from neuromanifold.singular.detectors.rescale import CERTIFY_RTOL
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.fisher import directional_fisher
from neuromanifold.singular.read import read

N = 40
COS_EXACT = 1e-12  # the proposed u against the closed form, both unit vectors
ATOL_SAME = 1e-12  # outputs (order 1) moved along the line: rounding of the shifted sums
FLAT_F_MAX = 1e-24  # F along the line (order-1 logits): forward-mode rounding only


def _bn(channels: int, dim: int, seed: int) -> nn.Module:
    """An evaluation-mode BatchNorm with random affine map and running statistics."""
    bn = (nn.BatchNorm1d if dim == 1 else nn.BatchNorm2d)(channels)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        bn.weight.copy_(torch.randn(channels, generator=gen))
        bn.bias.copy_(torch.randn(channels, generator=gen))
        bn.running_mean.copy_(torch.randn(channels, generator=gen))
        bn.running_var.copy_(torch.rand(channels, generator=gen) + 0.5)
    return bn


class _ConvNet(nn.Module):
    def __init__(self, bias: bool = True, residual: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1, bias=bias)
        self.bn = _bn(3, 2, 0)
        self.head = nn.Linear(3 * 6 * 6, 4)
        self.residual = residual

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv(x)
        y = torch.relu(self.bn(h))
        if self.residual:  # the conv output is read twice: the line moves the second read
            y = y + h
        return self.head(y.flatten(1))


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(5, 4)
        self.bn = _bn(4, 1, 1)
        self.fc2 = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(torch.tanh(self.bn(self.fc1(x))))


def _double(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return model.double().eval()


def _x(model: nn.Module) -> Tensor:
    gen = torch.Generator().manual_seed(2)
    shape = (N, 2, 6, 6) if isinstance(model, _ConvNet) else (N, 5)
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _closed_form(model: nn.Module, producer: str) -> dict[str, Tensor]:
    bn = model.bn
    slope = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach()
    u = {f"{producer}.bias": torch.ones_like(slope), "bn.bias": -slope}
    norm = torch.sqrt(sum((v**2).sum() for v in u.values()))
    return {k: v / norm for k, v in u.items()}


def _propose(model: nn.Module) -> list:
    ctx = DetectionContext.from_model(model, _x(model), Categorical())
    return BatchNormShiftDetector().propose("bn", ctx.model.bn, ctx)


def test_the_candidate_is_the_closed_form_and_flat_along_its_line() -> None:
    for model, producer in ((_double(_ConvNet()), "conv"), (_double(_MLP()), "fc1")):
        (cand,) = _propose(model)
        assert cand.layers == (producer, "bn") and cand.gauge == "flat"
        assert cand.info == {"orbit_dim": model.bn.num_features}
        u = _closed_form(model, producer)
        assert set(cand.u) == set(u)
        cos = sum(float((cand.u[k] * u[k]).sum()) for k in u)
        assert abs(cos - 1.0) <= COS_EXACT
        # the law itself: the model does not move along the line, at s = 0.7
        x = _x(model)
        params = {k: v.detach() for k, v in model.named_parameters()}
        moved = {**params, **{k: params[k] + 0.7 * u[k] for k in u}}
        base = functional_call(model, params, (x,))
        torch.testing.assert_close(
            functional_call(model, moved, (x,)), base, rtol=0, atol=ATOL_SAME
        )
        assert float(directional_fisher(model, moved, u, x, Categorical())) <= FLAT_F_MAX


def test_the_whole_read_lists_it_as_a_flat_gauge() -> None:
    model = _double(_ConvNet())
    reading = read(model, _x(model), Categorical(), progress=False)
    (rec,) = [d for d in reading.directions if d.detector == "bn-shift"]
    assert rec.klass == "flat_gauge" and rec.layers == ("conv", "bn")
    assert rec.info["orbit_dim"] == 3


def test_not_proposed_without_a_bias_or_when_the_output_is_read_twice() -> None:
    assert _propose(_double(_ConvNet(bias=False))) == []
    # a residual read of the conv output: the graph gives the conv two consumers or the
    # certification by evaluation refuses; either way nothing is proposed
    assert _propose(_double(_ConvNet(residual=True))) == []


# ---------------------------------------------------------------- the curved orbit (bn-rescale)

ATOL_TANGENT = 1e-12  # closed-form tangent vs forward-mode AD of the group action
BROKEN_MIN = 1e-3  # a move that is no symmetry changes the outputs (order 1) by O(1)


def _propose_rescale(model: nn.Module) -> list:
    ctx = DetectionContext.from_model(model, _x(model), Categorical())
    return BatchNormScaleDetector().propose("bn", ctx.model.bn, ctx), ctx


def test_the_rescale_orbit_is_a_symmetry_and_its_tangent_the_derivative() -> None:
    """(w_c, b_c, γ_c, β_c) → (a w_c, a b_c, γ_c/a, β_c − γ_c μ_c/σ_c (1 − 1/a)) keeps every
    output (a drawn in [0.3, 3] per channel), and the closed-form tangent equals d/da_j."""
    for bias in (True, False):
        model = _double(_ConvNet(bias=bias))
        (cand,), ctx = _propose_rescale(model)
        assert cand.gauge == "curved" and cand.layers == ("conv", "bn")
        assert cand.info["certified"] <= CERTIFY_RTOL
        bn = ctx.model.bn
        keys = ("conv.weight", "conv.bias") if bias else ("conv.weight",)
        orbit = BatchNormRescale(
            producers=keys,
            consumers=("bn.weight", "bn.bias"),
            mean_over_std=bn.running_mean / torch.sqrt(bn.running_var + bn.eps),
        )
        a = torch.rand(3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
        moved = {**ctx.params, **orbit.act(ctx.params, 0.3 + 2.7 * a)}
        x = _x(model)
        torch.testing.assert_close(
            functional_call(ctx.model, moved, (x,)),
            functional_call(ctx.model, ctx.params, (x,)),
            rtol=0,
            atol=ATOL_SAME,
        )
        for j in range(3):
            got, ref = orbit.tangent(ctx.params, j), orbit.tangent_reference(ctx.params, j)
            assert set(got) == set(ref)
            for k in got:
                torch.testing.assert_close(got[k], ref[k], rtol=0, atol=ATOL_TANGENT)
        # the straight probe along the tangent leaves the orbit at t²: a curved gauge, k = 2
        reading = read(model, x, Categorical(), progress=False)
        (rec,) = [d for d in reading.directions if d.detector == "bn-rescale"]
        assert (rec.klass, rec.k) == ("curved_gauge", 2)


def test_the_rescale_is_not_proposed_when_the_output_is_read_twice() -> None:
    (cands, _) = _propose_rescale(_double(_ConvNet(residual=True)))
    assert cands == []


class _LastDimLinear(nn.Module):
    """A Linear on the last dimension of ``(N, C, L)`` with ``L = C`` into ``BatchNorm1d(C)``:
    the bias is added along L, the BatchNorm's channels are C (s26b audit RERUN N2)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 4)
        self.bn = _bn(4, 1, 3)
        self.head = nn.Linear(16, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(torch.tanh(self.bn(self.fc1(x))).flatten(1))


def test_a_bias_along_another_axis_is_not_a_shift_gauge() -> None:
    """A uniform shift is flat there, but the C per-channel lines are not: nothing is proposed
    (a uniform certification proposed it with orbit_dim 4; one line moved the output by 15)."""
    model = _double(_LastDimLinear())
    x = torch.randn(N, 4, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    ctx = DetectionContext.from_model(model, x, Categorical())
    assert BatchNormShiftDetector().propose("bn", ctx.model.bn, ctx) == []
    # the single line of channel 0 is not flat: the law the refusal rests on
    u = {
        "fc1.bias": torch.zeros(4, dtype=torch.float64),
        "bn.bias": torch.zeros(4, dtype=torch.float64),
    }
    bn = ctx.model.bn
    u["fc1.bias"][0] = 1.0
    u["bn.bias"][0] = -float(bn.weight[0] / torch.sqrt(bn.running_var[0] + bn.eps))
    moved = {**ctx.params, **{k: ctx.params[k] + u[k] for k in u}}
    change = functional_call(ctx.model, moved, (x,)) - functional_call(ctx.model, ctx.params, (x,))
    assert float(change.abs().max()) > BROKEN_MIN


# ------------------------------------------- through homogeneous steps (s26c audit RERUN2 N5)


class _ActMLP(nn.Module):
    """``fc2(tanh(bn(act(fc1 x))))`` with ``act`` a ReLU (p = 1), a squared ReLU (p = 2) or tanh
    (no homogeneity: no orbit)."""

    def __init__(self, act: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(5, 4)
        self.bn = _bn(4, 1, 4)
        with torch.no_grad():  # a ReLU's output has a non-negative running mean
            self.bn.running_mean.abs_()
        self.fc2 = nn.Linear(4, 3)
        self.act = act

    def forward(self, x: Tensor) -> Tensor:
        h = self.fc1(x)
        h = torch.tanh(h) if self.act == "tanh" else torch.relu(h)
        if self.act == "squared":
            h = h**2
        return self.fc2(torch.tanh(self.bn(h)))


def _rescale_orbit(ctx: DetectionContext, degree: int) -> BatchNormRescale:
    bn = ctx.model.bn
    return BatchNormRescale(
        producers=("fc1.weight", "fc1.bias"),
        consumers=("bn.weight", "bn.bias"),
        mean_over_std=bn.running_mean / torch.sqrt(bn.running_var + bn.eps),
        degree=degree,
    )


def test_the_rescale_through_a_relu_or_a_squared_relu_has_degree_p() -> None:
    """Linear → ReLU (p = 1) or ReLU² (p = 2) → BatchNorm: (w_c, b_c) times a, γ_c over a^p,
    β_c shifted by γ_c μ_c/σ_c (1 − a^{−p}) keeps every output; the tangent is d/da_j; the
    straight probe reads a curved gauge of order 2. No bn-shift there (a ReLU does not commute
    with a shift of its input)."""
    x = torch.randn(N, 5, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    for act, degree in (("relu", 1), ("squared", 2)):
        model = _double(_ActMLP(act))
        ctx = DetectionContext.from_model(model, x, Categorical())
        (cand,) = BatchNormScaleDetector().propose("bn", ctx.model.bn, ctx)
        assert cand.layers == ("fc1", "bn") and cand.info["degree"] == degree
        assert BatchNormShiftDetector().propose("bn", ctx.model.bn, ctx) == []
        orbit = _rescale_orbit(ctx, degree)
        a = torch.rand(4, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
        moved = {**ctx.params, **orbit.act(ctx.params, 0.3 + 2.7 * a)}
        torch.testing.assert_close(
            functional_call(ctx.model, moved, (x,)),
            functional_call(ctx.model, ctx.params, (x,)),
            rtol=0,
            atol=ATOL_SAME,
        )
        for j in range(4):
            got, ref = orbit.tangent(ctx.params, j), orbit.tangent_reference(ctx.params, j)
            for k in got:
                torch.testing.assert_close(got[k], ref[k], rtol=0, atol=ATOL_TANGENT)
        # the candidate is the closed-form tangent of the unit it names
        tangent = orbit.tangent(ctx.params, cand.info["unit"])
        norm = torch.sqrt(sum((v**2).sum() for v in tangent.values()))
        cos = sum(float((cand.u[k] * tangent[k]).sum()) for k in tangent) / float(norm)
        assert abs(cos - 1.0) <= COS_EXACT
        reading = read(model, x, Categorical(), progress=False)
        (rec,) = [d for d in reading.directions if d.detector == "bn-rescale"]
        assert (rec.klass, rec.k) == ("curved_gauge", 2)


def test_the_rescale_is_not_proposed_through_tanh() -> None:
    model = _double(_ActMLP("tanh"))
    ctx = DetectionContext.from_model(model, _x(_MLP()), Categorical())
    assert BatchNormScaleDetector().propose("bn", ctx.model.bn, ctx) == []


DEAD_F_MAX = 1e-28  # F along a never-firing channel's line: its BatchNorm input is exactly 0


def test_a_channel_that_never_fires_is_not_read_first() -> None:
    """Channel 0 has the largest weights but never fires (bias −100, and the running statistics
    a dead channel leaves: mean 0, variance 0). Along its own straight line F is exactly zero
    (it would read flat, not as the certified curved gauge), so the candidate reads another
    channel: strength times the RMS input √(var + mean²)."""
    model = _ActMLP("relu")
    with torch.no_grad():
        model.fc1.weight[0] = 10.0
        model.fc1.bias[0] = -100.0
        model.bn.running_mean[0] = 0.0
        model.bn.running_var[0] = 0.0
    model = _double(model)
    x = torch.randn(N, 5, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    ctx = DetectionContext.from_model(model, x, Categorical())
    assert float(torch.relu(ctx.model.fc1(x))[:, 0].abs().max()) == 0.0  # never fires
    (cand,) = BatchNormScaleDetector().propose("bn", ctx.model.bn, ctx)
    assert cand.info["unit"] != 0
    orbit = _rescale_orbit(ctx, 1)
    assert int(orbit.strength(ctx.params).argmax()) == 0  # strength alone would pick it
    dead = orbit.tangent(ctx.params, 0)
    moved = {**ctx.params, **{k: ctx.params[k] + 0.3 * dead[k] for k in dead}}
    assert float(directional_fisher(ctx.model, moved, dead, x, Categorical())) <= DEAD_F_MAX
