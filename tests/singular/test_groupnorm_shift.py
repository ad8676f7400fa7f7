"""The bias feeding a GroupNorm, shifted by the same amount on a group's channels: a flat gauge
of dimension G (s28 trial EXOTIC #3).

Closed form: the group mean over the group's channels and positions moves by the shift and the
group variance does not, so GroupNorm's output is unchanged; a shift that varies within a group
is no symmetry, and a producer output that also enters a residual sum breaks it.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.func import functional_call

from neuromanifold.singular.detectors import DetectionContext, GroupNormShiftDetector
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.fisher import directional_fisher
from neuromanifold.singular.read import read

N = 32
RTOL_SAME = 1e-12  # outputs after an O(1) per-group shift: rounding of the group mean only
FLAT_F_MAX = 1e-24  # F along the span: forward-mode rounding only
BROKEN_MIN = 1e-3  # a shift that is no symmetry moves the outputs by O(1e-1) here


class _Net(nn.Module):
    """conv(2→4, bias) → GroupNorm(2, 4) (``instance``: InstanceNorm1d(4), one channel per
    group) → ReLU → mean over positions → Linear(4→3); with ``residual`` the conv output is also
    added back after the norm."""

    def __init__(self, residual: bool = False, bias: bool = True, instance: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3, bias=bias)
        self.gn = nn.InstanceNorm1d(4, affine=True) if instance else nn.GroupNorm(2, 4)
        self.fc = nn.Linear(4, 3)
        self.residual = residual

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv(x)
        z = self.gn(h)
        if self.residual:
            z = z + h
        return self.fc(torch.relu(z).mean(-1))


def _setup(**kw: bool) -> tuple[nn.Module, Tensor, DetectionContext]:
    torch.manual_seed(0)
    model = _Net(**kw).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.7)
    x = torch.randn(N, 2, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return model, x, DetectionContext.from_model(model, x, Gaussian())


def _change(model: nn.Module, x: Tensor, shift: list[float]) -> float:
    params = {k: v.detach() for k, v in model.named_parameters()}
    moved = {**params, "conv.bias": params["conv.bias"] + torch.tensor(shift, dtype=torch.float64)}
    base = functional_call(model, params, (x,))
    return float((functional_call(model, moved, (x,)) - base).abs().max() / base.abs().max())


def test_the_group_shifts_are_one_flat_candidate() -> None:
    model, x, ctx = _setup()
    (cand,) = GroupNormShiftDetector().propose("gn", model.gn, ctx)
    assert (cand.detector, cand.gauge, cand.layers) == ("gn-shift", "flat", ("conv",))
    assert cand.info == {"orbit_dim": 2, "norm": "gn"}
    torch.testing.assert_close(cand.u["conv.bias"], torch.full((4,), 0.5, dtype=torch.float64))
    params = {k: v.detach() for k, v in model.named_parameters()}
    assert float(directional_fisher(model, params, cand.u, x, Gaussian())) <= FLAT_F_MAX


@pytest.mark.parametrize(
    ("shift", "law"),
    [([2.0, 2.0, -3.0, -3.0], "keeps"), ([2.0, 0.0, 0.0, 0.0], "moves"), ([1.0] * 4, "keeps")],
)
def test_the_law_a_shift_constant_on_each_group_and_only_that(shift, law) -> None:
    model, x, _ = _setup()
    change = _change(model, x, shift)
    assert change <= RTOL_SAME if law == "keeps" else change > BROKEN_MIN


def test_the_read_lists_it_as_a_flat_gauge() -> None:
    model, x, _ = _setup()
    reading = read(model, x, Gaussian(), progress=False)
    (rec,) = [d for d in reading.directions if d.detector == "gn-shift"]
    assert rec.klass == "flat_gauge" and rec.info["orbit_dim"] == 2


def test_a_residual_use_of_the_producer_output_is_not_certified() -> None:
    model, x, ctx = _setup(residual=True)
    assert GroupNormShiftDetector().propose("gn", model.gn, ctx) == []
    assert _change(model, x, [2.0, 2.0, -3.0, -3.0]) > BROKEN_MIN  # the law behind the refusal


def test_no_producer_bias_no_candidate() -> None:
    model, _, ctx = _setup(bias=False)
    assert GroupNormShiftDetector().applies_to(model.gn)
    assert GroupNormShiftDetector().propose("gn", model.gn, ctx) == []


def test_an_instance_norm_has_one_line_per_channel() -> None:
    """InstanceNorm1d(4): a GroupNorm of one channel per group (s28 trial EXOTIC: a conv bias
    before an InstanceNorm read F = 0, not covered). Any per-channel shift keeps the model; the
    read lists 4 flat lines. With running statistics it is a fixed affine map: no such gauge."""
    model, x, ctx = _setup(instance=True)
    (cand,) = GroupNormShiftDetector().propose("gn", model.gn, ctx)
    assert cand.info["orbit_dim"] == 4
    assert _change(model, x, [2.0, -1.0, 0.5, 3.0]) <= RTOL_SAME
    reading = read(model, x, Gaussian(), progress=False)
    (rec,) = [d for d in reading.directions if d.detector == "gn-shift"]
    assert rec.klass == "flat_gauge" and reading.not_covered == ()
    assert not GroupNormShiftDetector().applies_to(nn.InstanceNorm1d(4, track_running_stats=True))
