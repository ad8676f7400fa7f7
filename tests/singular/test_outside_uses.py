"""Parameters the forward uses outside their module's calls, and parameters it never uses (s29
trial SHARED #1, #6): the graph trace names both, the reading says so."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from neuromanifold.singular.detectors.graph import trace_graph
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import UNUSED_REASON, read

D = torch.float64


class TiedAutoencoder(nn.Module):
    """6 → 3 → 6, the decoder the encoder's transpose (the same Parameter, used functionally)."""

    def __init__(self, tied: bool = True) -> None:
        super().__init__()
        self.enc = nn.Linear(6, 3)
        self.dec = None if tied else nn.Linear(3, 6, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.enc(x))
        if self.dec is None:
            return F.linear(h, self.enc.weight.t())
        return self.dec(h)


class TiedHead(nn.Module):
    """Token embedding and output head sharing one Parameter, both called as modules."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.fc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 7, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: Tensor) -> Tensor:
        return self.head(torch.tanh(self.fc(self.emb(ids)))).mean(1)


class Gate(nn.Module):
    """A module no detector covers, whose parameter the forward uses."""

    def __init__(self) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.ones(3, dtype=D))

    def forward(self, h: Tensor) -> Tensor:
        return h * self.g


class WithSpare(nn.Module):
    """A raw root parameter the forward never touches, beside a used uncovered module."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.gate = Gate()
        self.spare = nn.Parameter(torch.zeros(5, dtype=D))

    def forward(self, x: Tensor) -> Tensor:
        return self.gate(self.fc(x))


def _x(n: int = 24, d: int = 6) -> Tensor:
    return torch.randn(n, d, dtype=D, generator=torch.Generator().manual_seed(0))


def test_the_trace_names_a_parameter_used_outside_its_modules_calls() -> None:
    torch.manual_seed(0)
    graph = trace_graph(TiedAutoencoder().double(), _x())
    assert graph.outside == {"enc.weight": ("torch.Tensor.t",)}
    assert graph.used == {"enc.weight", "enc.bias"}
    # a tied parameter used inside the call of each module holding it is no outside use
    ids = torch.randint(0, 7, (5, 3), generator=torch.Generator().manual_seed(1))
    graph = trace_graph(TiedHead().double(), ids)
    assert graph.outside == {}
    assert graph.used == {"emb.weight", "fc.weight", "fc.bias"}
    # the root's own parameters, read by its own forward
    assert trace_graph(nn.Linear(6, 2).double(), _x()).outside == {}


def test_the_reading_says_which_parameters_are_used_outside_their_modules() -> None:
    torch.manual_seed(0)
    tied = read(TiedAutoencoder().double(), _x(), Gaussian(), progress=False, max_directions=0)
    assert tied.meta["outside_uses"] == {"enc.weight": ["torch.Tensor.t"]}
    assert "'enc.weight' (torch.Tensor.t) is also used outside calls of its module" in tied.note
    torch.manual_seed(0)
    untied = read(TiedAutoencoder(tied=False).double(), _x(), Gaussian(), progress=False)
    assert untied.meta["outside_uses"] == {}
    assert "outside calls" not in untied.note


def test_an_unused_uncovered_parameter_is_named_unused() -> None:
    torch.manual_seed(0)
    reading = read(WithSpare().double(), _x(d=4), Gaussian(), progress=False, max_directions=0)
    reasons = {n.name: n.reason for n in reading.not_covered}
    assert reasons["<root>"] == UNUSED_REASON
    assert reasons["gate"] == "no detector for this type"


def test_frozen_parameters_are_named_and_counted() -> None:
    """s29 trial SHARED #4: parameters with ``requires_grad=False`` are part of θ (docs); the
    reading now says so and counts them, and reads them exactly as when they train."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)).double()
    x = _x(d=4)
    trained = read(model, x, Gaussian(), progress=False)
    assert trained.meta["n_frozen_params"] == 0 and "requires_grad" not in trained.note
    for p in model[0].parameters():
        p.requires_grad_(False)
    frozen = read(model, x, Gaussian(), progress=False)
    assert frozen.meta["n_frozen_params"] == 25
    assert "25 of 43 parameter entries ('0.weight', '0.bias') have requires_grad=False" in (
        frozen.note
    )
    assert [(r.detector, r.klass, r.k) for r in frozen.directions] == [
        (r.detector, r.klass, r.k) for r in trained.directions
    ]
