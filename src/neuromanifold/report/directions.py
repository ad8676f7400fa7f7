"""The directions a read swept, beside its `Reading`: ``read --save-directions FILE``.

A `Reading` stores each record's sweep ``F_u(t)`` and where the direction lives
(``info["support"]``), not the direction itself, which is as large as the model. To check a
record by hand (s22 trial LM #2: a user had to wrap a private function to get ``u``), the read
hands each unit direction ``û`` to ``read(..., on_vector=...)``, and `save_directions` writes
them with ``torch.save`` as

    {"kind": "neuromanifold-directions", "version": 1,
     "directions": {i: {parameter name: float64 tensor}},   # record i of the reading
     "base_shift": {i: s},                                  # record i's sweep["base_shift"]
     "rewrites": {meta key: [module names]}}                # the read's module rewrites

Record ``i`` then reads ``F_u(t) = directional_fisher(model, θ0 + (s + t)·û, û, data, family)``
at its ``sweep["t"]`` (`neuromanifold.singular.fisher.directional_fisher`). Parameter names and
layouts are those of the read's working copy: a module listed under ``rewrites`` reads as
rewritten (``rewrite_as_read`` gives the same model: an ``nn.MultiheadAttention``'s
``q_proj.weight`` … are row blocks of its ``in_proj_weight``, a Hugging Face ``Conv1D`` weight is
transposed). Load the checkpoint's weights into the model first, then rewrite it: the rewritten
model has no ``in_proj_weight`` to load into. A resumed read does not sweep the directions it
takes from its log again; their ``û`` is rebuilt from the detection's candidates (the read's
`swept_direction`), so the file has every record. `load_directions` reads the file back
(tensors only: ``torch.load(weights_only=True)``).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from neuromanifold.report._atomic import atomic_write_bytes
from neuromanifold.singular.adapt import REWRITE_KEYS
from neuromanifold.singular.reading import Reading

__all__ = ["DIRECTIONS_KIND", "DIRECTIONS_VERSION", "load_directions", "save_directions"]

DIRECTIONS_KIND = "neuromanifold-directions"
DIRECTIONS_VERSION = 1


def save_directions(
    path: str | Path, vectors: Mapping[int, Mapping[str, Tensor]], reading: Reading
) -> Path:
    """Write ``vectors`` (``{record index: û}``, from ``read(..., on_vector=...)``) with each
    record's base shift and the reading's module rewrites to ``path`` (module docstring),
    atomically. Raises ValueError when an index is not a record of ``reading`` or a record
    has no ``sweep["base_shift"]``."""
    n = len(reading.directions)
    shifts: dict[int, float] = {}
    for i in vectors:
        if not isinstance(i, int) or not 0 <= i < n:
            raise ValueError(f"direction index {i!r} is not a record of the reading (0 … {n - 1})")
        if "base_shift" not in reading.directions[i].sweep:
            raise ValueError(f"record {i} has no sweep['base_shift'] (an older reading)")
        shifts[i] = float(reading.directions[i].sweep["base_shift"])
    obj = {
        "kind": DIRECTIONS_KIND,
        "version": DIRECTIONS_VERSION,
        "directions": {
            i: {name: t.detach().to("cpu", torch.float64) for name, t in u.items()}
            for i, u in sorted(vectors.items())
        },
        "base_shift": dict(sorted(shifts.items())),
        "rewrites": {k: list(reading.meta.get(k) or ()) for k in REWRITE_KEYS},
    }
    buf = io.BytesIO()
    torch.save(obj, buf)
    return atomic_write_bytes(path, buf.getvalue())


def load_directions(path: str | Path) -> dict[str, Any]:
    """The dict `save_directions` wrote to ``path``. Raises ValueError naming the file when it
    is not such a file (not a torch file, another kind or version); OSError when it cannot be
    read."""
    p = Path(path)
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except OSError:  # a missing or unreadable file: as it is
        raise
    except Exception as err:  # torch's unpickler raises many kinds on a foreign file
        raise ValueError(f"{p}: not a torch file of directions ({type(err).__name__})") from err
    if not isinstance(obj, dict) or obj.get("kind") != DIRECTIONS_KIND:
        raise ValueError(f"{p}: not a {DIRECTIONS_KIND!r} file")
    if obj.get("version") != DIRECTIONS_VERSION:
        raise ValueError(
            f"{p}: directions file version {obj.get('version')!r}; this library reads "
            f"version {DIRECTIONS_VERSION}"
        )
    return obj
