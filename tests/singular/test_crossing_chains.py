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
    assert "0+1+2 (through 1) pass through live layers" in r.note
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
