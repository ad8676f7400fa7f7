"""Where a direction lives: per parameter tensor, its share of ``‖u‖²`` and its dominant units.

A record names the modules a direction touches (``layers``) but a K-FAC or duality direction is
a vector over their parameters, and the unit that died is not in its name (s17 user trial AD #4:
a user had to rebuild the candidates to find that unit 2 of a layer was dead). `direction_support`
summarises ``u`` in network coordinates: for each tensor with at least `SHARE_MIN` of ``‖u‖²``,
its share, the output units (index 0 of the tensor: rows of a weight, output channels of a
convolution, tokens of an embedding) and the inputs (index 1: columns, input channels, features)
that carry at least `UNIT_SHARE_MIN` of the tensor's part, at most `TOP_UNITS` of each, largest
first. For a rank-one block ``g aᵀ`` the units are where ``g`` lives and the inputs where ``a``
does: a node death reads as one unit of the producer's weight and one input of the consumer's.
The read stores it as ``info["support"]`` of every record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

__all__ = ["SHARE_MIN", "TOP_UNITS", "UNIT_SHARE_MIN", "direction_support"]

SHARE_MIN = 1e-3
"""Tensors carrying less of ``‖u‖²`` than this are left out of the support."""
UNIT_SHARE_MIN = 0.01
"""Units and inputs carrying less of their tensor's part than this are not listed."""
TOP_UNITS = 3
"""At most this many units (and inputs) per tensor."""
DIGITS = 6
"""Shares are rounded to this many decimals (a summary, stable across summation orders)."""


def _top(weights: Tensor) -> list[list[float | int]]:
    """``[[index, share], …]``: the largest entries of ``weights`` (shares summing to 1)."""
    order = torch.argsort(weights, descending=True, stable=True)[:TOP_UNITS].tolist()
    return [
        [int(i), round(float(weights[i]), DIGITS)] for i in order if weights[i] >= UNIT_SHARE_MIN
    ]


def direction_support(u: Mapping[str, Tensor]) -> list[dict[str, Any]]:
    """``[{"tensor", "share", "units", "inputs"}, …]`` for the tensors of ``u``, largest share
    first (``inputs`` only for tensors of two or more dimensions); ``[]`` for ``u = 0``.

    >>> g, a = torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.6, 0.8])
    >>> u = {"0.weight": torch.outer(g, a), "1.weight": torch.zeros(4, 3)}
    >>> u["1.weight"][:, 2] = 1.0  # the consumer's column of unit 2
    >>> [(s["tensor"], s["share"], s["units"]) for s in direction_support(u)]
    [('1.weight', 0.8, [[0, 0.25], [1, 0.25], [2, 0.25]]), ('0.weight', 0.2, [[2, 1.0]])]
    >>> direction_support(u)[0]["inputs"], direction_support(u)[1]["inputs"]
    ([[2, 1.0]], [[1, 0.64], [0, 0.36]])
    """
    squares = {k: v.detach().double().pow(2) for k, v in u.items()}
    total = sum(float(s.sum()) for s in squares.values())
    if total == 0.0:
        return []
    out = []
    for name, sq in squares.items():
        part = float(sq.sum())
        if part / total < SHARE_MIN or part == 0.0:
            continue
        entry: dict[str, Any] = {"tensor": name, "share": round(part / total, DIGITS)}
        rows = sq.reshape(sq.shape[0], -1).sum(1) if sq.dim() else sq.reshape(1)
        entry["units"] = _top(rows / part)
        if sq.dim() >= 2:
            entry["inputs"] = _top(sq.sum(0).reshape(sq.shape[1], -1).sum(1) / part)
        out.append(entry)
    return sorted(out, key=lambda e: (-e["share"], e["tensor"]))
