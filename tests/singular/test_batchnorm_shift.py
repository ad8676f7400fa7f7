"""The producer-bias ↔ BatchNorm-shift flat gauge (``bn-shift``; s26 trial CNN #8).

Closed form: in evaluation mode ``y_c = γ_c (x_c − μ_c)/σ_c + β_c``, so
``(b_c + s, β_c − s γ_c/σ_c)`` leaves the model unchanged for every ``s``: the candidate is the
normalised span direction ``Σ_c (e_{b_c} − (γ_c/σ_c) e_{β_c})``, flat along its whole line.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call

from neuromanifold.singular.detectors import DetectionContext
from neuromanifold.singular.detectors.batchnorm_shift import BatchNormShiftDetector
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
