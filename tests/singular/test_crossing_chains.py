"""A duality chain through a live layer crosses dead units that are lower-order dead directions on
their own (trial G, s11): the read names such chains in its note and ``info["through_live"]``.

On the matrix deep-linear chain (spec §9.1 "rotated matrix chain", depth 3) the read proposes the
chain 0+1+2 (order 3 along the joint modes); the hidden dead unit of layer 0's output, paired
with a live output of layer 1 instead, is a node death of order 2 that the read does not
propose. The width-one scalar chain has no live layer: no note."""

from __future__ import annotations

import torch

from neuromanifold import read, read_direction
from neuromanifold.cells.deep_linear import matrix_chain, scalar_chain


def test_matrix_chain_is_named_as_a_crossing_and_its_piece_is_order_two() -> None:
    cell = matrix_chain(depth=3)
    r = read(cell.model, cell.data, cell.family, progress=False)
    chains = [d for d in r.directions if d.detector == "duality"]
    assert [(d.layers, d.k) for d in chains] == [(("0", "1", "2"), 3)]
    assert chains[0].info["through_live"] == ["1"]
    assert "0+1+2 (through 1) pass through layers with live units" in r.note
    assert "the chain's order is that of their crossing (read the pieces with" in r.note
    # the note's claim: the dead unit between layers 0 and 1 with a live unit of layer 1's output
    params = {k: v.detach() for k, v in cell.model.named_parameters()}
    j = params["0.weight"].shape[0] - 1  # the dead hidden unit (matrix_chain: the last one)
    u = {k: torch.zeros_like(v) for k, v in params.items()}
    u["0.weight"][j] = torch.randn(params["0.weight"].shape[1], dtype=torch.float64)
    u["1.weight"][0, j] = 1.0  # unit 0 of layer 1's output is live
    piece = read_direction(cell.model, params, u, cell.data, cell.family)
    assert piece.klass.value == "genuine_singularity" and piece.k == 2


def test_width_one_chain_has_no_live_layer() -> None:
    cell = scalar_chain(depth=3)
    r = read(cell.model, cell.data, cell.family, progress=False)
    assert all("through_live" not in d.info for d in r.directions)
    assert "live layers" not in r.note


def test_a_unit_read_by_two_blocks_is_named_in_the_note() -> None:
    """Trial G #3: a node death of a ReLU output read by two convolutions (a ResNet block's branch
    and 1×1 shortcut) reads as one-sided records only, since the duality join follows a single
    consumer; the reading's note now says so. A single-consumer model gets no such note."""
    from torch import nn

    from neuromanifold import Gaussian

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(2, 4, 3, padding=1)
            self.c1 = nn.Conv2d(4, 6, 3, stride=2, padding=1)
            self.sc = nn.Conv2d(4, 6, 1, stride=2)
            self.fc = nn.Linear(6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.stem(x))
            return self.fc(torch.relu(self.c1(h) + self.sc(h)).mean((2, 3)))

    torch.manual_seed(0)
    m = Block().double()
    with torch.no_grad():  # stem channel 1: no input, and neither consumer reads it
        m.stem.weight[1] = 0
        m.stem.bias[1] = 0
        m.c1.weight[:, 1] = 0
        m.sc.weight[:, 1] = 0
    x = torch.randn(64, 2, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    r = read(m.eval(), x, Gaussian(1.0), progress=False)
    assert any(d.layers == ("stem",) and d.detector == "kfac-G" for d in r.directions)
    assert "the output of stem → c1, sc goes to several blocks" in r.note
    cell = matrix_chain(depth=2)
    single = read(cell.model, cell.data, cell.family, progress=False)
    assert "several blocks" not in single.note


def test_parallel_chains_over_the_same_layers_are_named_once_with_their_count(record_of) -> None:
    """s33 trial USER D1: two parallel chains 0+3+7 were listed as "0+3+7 (through 3); 0+3+7
    (through 3)"."""
    from dataclasses import replace

    from neuromanifold.singular.read import _crossing_chains_note

    chain = record_of(("0", "3", "7"), "duality", "flat_gauge")
    base = replace(chain, info={"through_live": ["3"], "chain_index": 0})
    other = replace(base, layers=("1", "3", "7"), info={"through_live": ["3"]})
    twin = replace(base, info={"through_live": ["3"], "chain_index": 1})
    note = _crossing_chains_note([base, twin, other, replace(base, info={})])
    assert "the duality chain(s) 0+3+7 (through 3) ×2; 1+3+7 (through 3) pass through" in note
