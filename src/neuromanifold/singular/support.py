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

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "DOMINANT_SHARE",
    "FEW_UNITS_SIDE",
    "SHARE_MIN",
    "TOP_UNITS",
    "UNIT_SHARE_MIN",
    "direction_support",
    "layer_units",
    "record_units",
]

SHARE_MIN = 1e-3
"""Tensors carrying less of ``‖u‖²`` than this are left out of the support."""
UNIT_SHARE_MIN = 0.01
"""Units and inputs carrying less of their tensor's part than this are not listed."""
TOP_UNITS = 3
"""At most this many units (and inputs) per tensor."""
DIGITS = 6
"""Shares are rounded to this many decimals (a summary, stable across summation orders)."""
DOMINANT_SHARE = 0.9
"""`layer_units` names a unit (or input) only when it carries at least this much of its tensor's
part of ``‖u‖²``: one unit, not a spread direction."""


FEW_UNITS_SIDE = 4
"""`layer_units` names two or three units (``"out 2+7"``) only on a side of at least this many
times as many units."""


def _top(weights: Tensor) -> list[list[float | int]]:
    """``[[index, share], …]``: the largest entries of ``weights`` (shares summing to 1), ordered
    by their share rounded to `DIGITS` decimals and then by index, so that shares equal up to
    rounding (a direction spread evenly over its units) list the first indices whatever the
    summation order (s28 trial DIST F1: one and two processes named different units).

    >>> _top(torch.tensor([0.25, 0.25 + 1e-16, 0.25 - 1e-16, 0.25], dtype=torch.float64))
    [[0, 0.25], [1, 0.25], [2, 0.25]]
    """
    rounded = torch.round(weights.double(), decimals=DIGITS)
    order = torch.argsort(rounded, descending=True, stable=True)[:TOP_UNITS].tolist()
    return [
        [int(i), round(float(weights[i]), DIGITS)] for i in order if weights[i] >= UNIT_SHARE_MIN
    ]


def direction_support(u: Mapping[str, Tensor]) -> list[dict[str, Any]]:
    """``[{"tensor", "share", "units", "size", "n_units", "inputs", "n_inputs"}, …]`` for the
    tensors of ``u``, largest share first (``size`` the tensor's number of entries, ``n_units``
    the size of index 0, 1 for a scalar; ``inputs`` and ``n_inputs``, the size of index 1, only
    for tensors of two or more dimensions); ``[]`` for ``u = 0``.

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
        entry["size"] = int(sq.numel())
        entry["n_units"] = int(rows.numel())
        if sq.dim() >= 2:
            entry["inputs"] = _top(sq.sum(0).reshape(sq.shape[1], -1).sum(1) / part)
            entry["n_inputs"] = int(sq.shape[1])
        out.append(entry)
    return sorted(out, key=lambda e: (-e["share"], e["tensor"]))


def _dominant(top: Sequence[Sequence[float | int]], side: int | None) -> list[int]:
    """The fewest of the listed units (largest first) that carry `DOMINANT_SHARE` of their
    tensor's part together, in index order; ``[]`` when the listed units do not (a spread
    direction). More than one unit is named only on a side of at least `FEW_UNITS_SIDE` times as
    many units (``side``; unknown: one unit only): on a narrow side any direction sits on a few
    of its units. At most `TOP_UNITS` are listed, so a label names at most that many.

    >>> _dominant([[7, 0.5], [2, 0.5]], 16), _dominant([[4, 0.95]], 16)
    ([2, 7], [4])
    >>> _dominant([[1, 0.5], [3, 0.3]], 16), _dominant([[7, 0.5], [2, 0.5]], 6)
    ([], [])
    """
    total = 0.0
    for n, (_, share) in enumerate(top, start=1):
        total += float(share)
        if round(total, DIGITS) >= DOMINANT_SHARE:  # the shares are rounded to DIGITS
            if n > 1 and (side is None or side < FEW_UNITS_SIDE * n):
                return []
            return sorted(int(i) for i, _ in top[:n])
    return []


def layer_units(support: Sequence[Mapping[str, Any]], layer: str) -> str:
    """A short label of where a direction sits in module ``layer``, from its ``support``
    (`direction_support`): ``"out i"`` when one output unit of a tensor of the layer carries at
    least `DOMINANT_SHARE` of that tensor's part, ``"out i+k"`` when two or three do together on
    a wide side (`_dominant`: a direction on duplicated units, s34 trial MLPREC D4), ``"in j"``
    likewise for inputs, joined by
    ``", "`` over the layer's tensors without repeats (a side of size 1, ``n_units`` or
    ``n_inputs``, is not named: a single input channel says nothing); ``"spread"`` when the
    layer has a side of size above 1 with no dominant unit; ``""`` when it has none (or only
    sides of size 1: a scalar layer is one unit). A node death of hidden unit 2 of
    ``fc1 → fc2`` reads ``"out 2"`` on ``fc1`` and ``"in 2"`` on ``fc2``.

    >>> sup = [{"tensor": "fc2.weight", "share": 0.5, "units": [[0, 0.5], [1, 0.5]],
    ...         "inputs": [[2, 1.0]]},
    ...        {"tensor": "fc1.weight", "share": 0.45, "units": [[2, 1.0]],
    ...         "inputs": [[0, 0.6], [1, 0.4]]},
    ...        {"tensor": "fc1.bias", "share": 0.05, "units": [[2, 1.0]]}]
    >>> layer_units(sup, "fc1"), layer_units(sup, "fc2"), layer_units(sup, "fc3")
    ('out 2', 'in 2', '')
    """
    labels: list[str] = []
    spread = False
    for entry in support:
        if str(entry.get("tensor", "")).rpartition(".")[0] != layer:
            continue
        for key, word, size in (("units", "out", "n_units"), ("inputs", "in", "n_inputs")):
            top = entry.get(key) or []
            if entry.get(size) == 1 or (key == "inputs" and key not in entry):
                continue  # one unit (a single input channel), or no such side: names nothing
            few = _dominant(top, entry.get(size))
            if few:
                label = f"{word} {'+'.join(str(i) for i in few)}"
                if label not in labels:
                    labels.append(label)
            else:
                spread = True
    if labels:
        return ", ".join(labels)
    return "spread" if spread else ""


def record_units(info: Mapping[str, Any], layer: str) -> str:
    """`layer_units` of a record's ``info`` in module ``layer``, tied parameters included: a
    record whose tensor of ``layer`` is tied to another module's (``info["tied"]``: ``{alias:
    parameter}``, e.g. a language-model head sharing the input embedding) has its support under
    the parameter's name, so that part is read as the alias's, and the label says which module
    it is tied to (s27 trial HF D5: ``model.lm_head`` showed units "—" and no word of the
    embedding its direction moves).

    A record on one named parameter of the module (``info["parameter"]``, as the
    ``embedding-mean`` candidate of a ViT's ``pos_embed``) names it first.

    >>> sup = [{"tensor": "wte.weight", "share": 1.0, "units": [[3, 0.9]], "inputs": [[0, 0.2]]}]
    >>> record_units({"support": sup, "tied": {"head.weight": "wte.weight"}}, "head")
    'out 3 (tied to wte)'
    >>> pos = [{"tensor": "pos_embed", "share": 1.0, "units": [[0, 1.0]], "n_units": 1,
    ...         "inputs": [[0, 0.06]], "n_inputs": 17}]
    >>> record_units({"support": pos, "parameter": "pos_embed"}, "")
    'pos_embed spread'

    A layer the record names whose tensors all carry less than `SHARE_MIN` of ``‖u‖²`` (not in
    the support) says so (s33 trial USER D6: a rescale scaled ×8 / ×⅛ left its second layer
    9e-5 of the direction, and its row showed no unit):

    >>> record_units({"support": sup}, "fc")
    'share < 0.001'
    """
    tied = {
        target: alias
        for alias, target in (info.get("tied") or {}).items()
        if alias.rpartition(".")[0] == layer
    }
    support = [
        {**e, "tensor": tied.get(str(e.get("tensor", "")), e.get("tensor", ""))}
        for e in info.get("support") or []
    ]
    units = layer_units(support, layer)
    here = any(str(e.get("tensor", "")).rpartition(".")[0] == layer for e in support)
    if support and not here and not tied:  # the layer's tensors fell below SHARE_MIN
        return f"share < {SHARE_MIN:g}"
    owner, _, leaf = str(info.get("parameter") or "").rpartition(".")
    if leaf and owner == layer:  # one named table of the module (a ViT's cls_token, pos_embed)
        units = f"{leaf} {units}".strip()
    if not tied:
        return units
    owners = ", ".join(sorted({t.rpartition(".")[0] for t in tied}))
    return f"{units or 'spread'} (tied to {owners})"
