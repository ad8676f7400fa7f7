"""Whole-model read of a small ResNet: BatchNorm in the data-flow graph and its rescale gauges.

In a ResNet block ``conv2(relu(bn1(conv1 x)))`` the first norm's channel ``c`` can be scaled by
``α > 0`` (its scale and shift) against input channel ``c`` of ``conv2`` divided by ``α``: a
curved gauge of every block. The norm that feeds a residual sum (the stem's, here) carries no
such symmetry, and a depthwise consumer is not a supported block; neither is proposed.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors import (
    DetectionContext,
    NormScaleDetector,
    ReLURescaleDetector,
    UnitRescale,
    trace_graph,
)
from neuromanifold.singular.detectors.rescale import certify
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read

# a broken orbit moves the output by O(1) relative (as in test_rescale_gauges)
BROKEN_MIN = 1e-3
N = 48


class _Block(nn.Module):
    """``relu(bn2(conv2(relu(bn1(conv1 x)))) + shortcut(x))``, one in-place ``nn.ReLU`` reused."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)  # as in torchvision's BasicBlock
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: Tensor) -> Tensor:
        y = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(y + (x if self.down is None else self.down(x)))


class _ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU()
        )
        self.l1 = _Block(8, 8, 1)
        self.l2 = _Block(8, 16, 2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.l2(self.l1(self.stem(x))).mean((2, 3)))


def _resnet() -> tuple[nn.Module, Tensor]:
    """Evaluation mode; every BatchNorm's scale, shift and running statistics randomised."""
    torch.manual_seed(0)
    model = _ResNet().double()
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    return model.eval(), torch.randn(N, 1, 8, 8, dtype=torch.float64)


def test_batchnorm_is_a_graph_source_and_sink() -> None:
    model, x = _resnet()
    graph = trace_graph(model, x[:4])
    assert graph.consumers["l1.conv1"] == ("l1.bn1",)
    assert graph.consumers["l1.bn1"] == ("l1.conv2",)
    assert graph.via[("l1.bn1", "l1.conv2")] == ("ReLU",)
    assert graph.consumers["stem.1"] == ("l1.conv1",)  # the residual sum is not an edge


def test_whole_read_finds_each_blocks_rescale_and_covers_every_norm() -> None:
    model, x = _resnet()
    reading = read(model, x, Categorical(), progress=False)
    assert reading.not_covered == ()
    recs = [r for r in reading.directions if r.detector == "relu-rescale"]
    assert sorted(r.layers for r in recs) == [("l1.bn1", "l1.conv2"), ("l2.bn1", "l2.conv2")]
    assert all(r.klass == "curved_gauge" and r.k == 2 for r in recs)


def test_norm_feeding_a_residual_sum_is_no_rescale() -> None:
    model, x = _resnet()
    ctx = DetectionContext.from_model(model, x, Categorical())
    orbit = UnitRescale(("stem.1.weight", "stem.1.bias"), ("l1.conv1.weight",))
    assert certify(ctx, orbit) > BROKEN_MIN
    assert ReLURescaleDetector().propose("stem.1", ctx.model.stem[1], ctx) == []


def test_depthwise_consumer_is_not_proposed() -> None:
    """BatchNorm → depthwise conv: the consumer's weight has one input channel per group."""
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3),
        nn.BatchNorm2d(4),
        nn.Conv2d(4, 4, 3, groups=4),
        nn.Flatten(),
        nn.Linear(16, 3),
    )
    model = model.double().eval()
    x = torch.randn(N, 1, 6, 6, dtype=torch.float64)
    ctx = DetectionContext.from_model(model, x, Categorical())
    assert ctx.graph.consumers["1"] == ("2",)
    assert NormScaleDetector().propose("1", ctx.model[1], ctx) == []
    # the depthwise conv is covered by its per-group K-FAC detector (test_grouped_conv.py)
    assert read(model, x, Categorical(), max_directions=0, progress=False).not_covered == ()


def test_batchnorm_without_running_statistics_is_rejected() -> None:
    """It normalises with the batch's statistics even in evaluation mode (a sample's output
    depends on the others), so the read refuses the model, and no gauge detector applies."""
    torch.manual_seed(2)
    model = nn.Sequential(
        nn.Linear(3, 4), nn.BatchNorm1d(4, track_running_stats=False), nn.ReLU(), nn.Linear(4, 2)
    )
    model = model.double().eval()
    x = torch.randn(N, 3, dtype=torch.float64)
    with torch.no_grad():
        assert not torch.allclose(model(x[:4])[0], model(x[:8])[0])  # batch-dependent
    with pytest.raises(ValueError, match=r"'1' \(BatchNorm1d\) keeps no running statistics"):
        read(model, x, Categorical(), max_directions=0, progress=False)
    assert not ReLURescaleDetector().applies_to(model[1])
    assert not NormScaleDetector().applies_to(model[1])
