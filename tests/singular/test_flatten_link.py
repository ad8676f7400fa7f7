"""The duality join across a flattened feature map: conv → ReLU → pool → flatten → Linear.

A node death of the last convolution's channel ``c`` reaches a Linear head that reads the
feature map flattened, where channel ``c`` owns ``P`` consecutive columns. The join lifts the
channel vector as ``g ⊗ 𝟙_P/√P`` (a user trial: the join required ``in_features = C`` and read
the death as three flat gauges, while the same network with global average pooling read k = 2).
Laws checked: both heads read one duality chain (conv2, head) of order 2 and no one-sided mode
inside the dead channel's columns; the lift is the Kronecker product and its batch equals the
one-vector form; the fast detection equals the `REFERENCE` one.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import neuromanifold.singular.detectors.linear as lin
from neuromanifold import read
from neuromanifold.singular.detectors import DetectionContext, default_registry
from neuromanifold.singular.detectors.link import input_lift, input_lift_batch, tap_span
from neuromanifold.singular.family import Categorical

# candidate directions, fast vs REFERENCE detection: the same vectors up to rounding
ATOL_U = 1e-10
# lifts computed two ways from the same products: rounding of one multiply
ATOL_LIFT = 1e-15
POSITIONS = 4  # the 2×2 map each conv2 channel leaves after pooling
DEAD = 2


class SmallCNN(nn.Module):
    """conv1 → ReLU → max-pool → conv2 → ReLU → avg-pool → flatten (or spatial mean) → head."""

    def __init__(self, head: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 6, 3, padding=1)
        self.flat = head == "flatten"
        self.head = nn.Linear(6 * POSITIONS if self.flat else 6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.avg_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(x.flatten(1) if self.flat else x.mean((2, 3)))


def _dead_cnn(head: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(1)
    model = SmallCNN(head).double().eval()
    with torch.no_grad():
        model.conv2.weight[DEAD] = 0.0
        model.conv2.bias[DEAD] = 0.0
        cols = slice(DEAD * POSITIONS, (DEAD + 1) * POSITIONS) if head == "flatten" else DEAD
        model.head.weight[:, cols] = 0.0
    x = torch.randn(48, 1, 8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return model, x


@pytest.mark.parametrize("head", ["gap", "flatten"])
def test_channel_death_reads_one_order_two_chain_with_either_head(head: str) -> None:
    model, x = _dead_cnn(head)
    reading = read(model, x, Categorical(), progress=False)
    chains = [d for d in reading.directions if d.detector == "duality"]
    assert [(d.layers, d.klass, d.k) for d in chains] == [
        (("conv2", "head"), "genuine_singularity", 2)
    ]
    # the dead channel's columns are explained by the chain, not proposed one-sided
    assert not [d for d in reading.directions if d.detector == "kfac-A" and d.layers == ("head",)]


def test_flattened_lift_is_the_uniform_pattern_over_a_channels_columns() -> None:
    head = nn.Linear(3 * POSITIONS, 2).double()
    g = torch.tensor([0.6, 0.0, -0.8], dtype=torch.float64)
    expected = torch.cat(
        [
            torch.kron(g, torch.full((POSITIONS,), 0.5, dtype=torch.float64)),
            torch.zeros(1, dtype=torch.float64),
        ]
    )
    torch.testing.assert_close(input_lift(head, g, POSITIONS), expected, atol=ATOL_LIFT, rtol=0)
    gs = torch.stack([g, torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)], 1)
    batch = input_lift_batch(head, gs, POSITIONS)
    for j in range(2):
        torch.testing.assert_close(
            batch[:, j], input_lift(head, gs[:, j], POSITIONS), atol=ATOL_LIFT, rtol=0
        )
    assert input_lift(head, g) is None and input_lift(head, g, 3) is None  # widths do not fit
    span = tap_span(head, g, POSITIONS)
    assert span.shape == (3 * POSITIONS + 1, POSITIONS)
    torch.testing.assert_close(span.sum(1)[:-1] / 2.0, expected[:-1], atol=ATOL_LIFT, rtol=0)


def _detect(model, x, reference: bool, monkeypatch) -> list:
    monkeypatch.setattr(lin, "REFERENCE", reference)
    ctx = DetectionContext.from_model(model, x, Categorical())
    return [
        c
        for name, mod in ctx.model.named_modules()
        for det in default_registry().for_module(mod)
        for c in det.propose(name, mod, ctx)
    ]


def test_fast_detection_equals_reference_on_the_flattened_head(monkeypatch) -> None:
    model, x = _dead_cnn("flatten")
    fast = _detect(model, x, False, monkeypatch)
    ref = _detect(model, x, True, monkeypatch)
    assert any(c.detector == "duality" for c in fast)
    assert [(c.detector, c.layers) for c in fast] == [(c.detector, c.layers) for c in ref]
    for a, b in zip(fast, ref, strict=True):
        for key in a.u:
            torch.testing.assert_close(a.u[key], b.u[key], atol=ATOL_U, rtol=0)
