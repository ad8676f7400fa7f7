"""A chain through a block whose output has a second reader (a function the graph does not
follow) does not stand for the next block's own chains (s28 trial EXOTIC #1).

Squeeze-and-excitation: ``x * sigmoid(fc2(relu(fc1(mean(x)))))`` with ``x = act(conv(·))``. The
graph's only consumer of ``conv`` is ``fc1`` (through the mean), but the product ``x * s`` reads
``conv``'s output too. A dead-in conv channel was linked into ``fc1`` as if ``fc1`` were its only
reader; the link made ``fc1`` a middle block, so the node death of ``fc1``'s hidden unit (its row
and ``fc2``'s column zero: k = 2, each half exactly flat) was read only inside a chain through the
conv channel, which the gate makes live, and no record had order 2. Now a block whose producer
has such a second reader starts its own chains as well.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.graph import trace_graph
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read

N = 48


class _SE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 3), nn.Linear(3, 4)

    def forward(self, x: Tensor) -> Tensor:
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3))))))
        return x * s[:, :, None, None]


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.se = _SE()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.se(torch.tanh(self.conv(x))).mean((2, 3)))


WEAK = 1e-4  # the head's and the squeeze's weights on conv channel 1: its G ratio ~1e-8 < τ


def _planted() -> tuple[nn.Module, Tensor]:
    """Conv channel 1 dead-in (filter and bias 0, tanh(0) = 0) and read weakly (``WEAK``) by the
    head and the squeeze, so that it is in the conv's G near-kernel and links into ``fc1``; SE
    hidden unit 2 a node death."""
    torch.manual_seed(0)
    model = _Net().double().eval()
    with torch.no_grad():
        model.conv.weight[1], model.conv.bias[1] = 0.0, 0.0
        model.fc.weight[:, 1] *= WEAK
        model.se.fc1.weight[:, 1] *= WEAK
        model.se.fc1.weight[2], model.se.fc1.bias[2] = 0.0, 0.0
        model.se.fc2.weight[:, 2] = 0.0
    x = torch.randn(N, 1, 5, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return model, x


def test_the_gate_product_is_a_second_reader_of_the_conv() -> None:
    model, x = _planted()
    graph = trace_graph(model, x)
    assert graph.consumers["conv"] == ("se.fc1",)
    assert "torch.Tensor.mul" in graph.stops["conv"]


def test_the_squeeze_node_death_reads_order_two_beside_the_live_chain_through_the_conv() -> None:
    """Before: only the chain through the conv (live: the gate reads the channel) and no
    record of order 2. Now the squeeze's own chain is read too."""
    model, x = _planted()
    reading = read(model, x, Gaussian(), progress=False)
    kinds = {(r.detector, r.layers, r.klass, r.k) for r in reading.directions}
    assert ("duality", ("se.fc1", "se.fc2"), "genuine_singularity", 2) in kinds
    assert ("duality", ("conv", "se.fc1", "se.fc2"), "live", 1) in kinds
