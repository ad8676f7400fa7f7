"""The per-coordinate baseline: read single weight entries along the coordinate axes.

This is the canonical-alignment read that the whole-model read replaces (spec §0, §6.6): it
assumes a dead direction sits on a parameter axis. For every weight tensor of the chosen blocks it
takes the ``per_tensor`` entries of smallest ``|θ_i|`` (the likeliest dead coordinates; ties broken
by flat index) and reads ``u = e_i`` with `read_direction`. A single axis cannot carry a node
death (the incoming and outgoing weights must move together: along either alone the output does not
change, so the read is flat) nor a dead direction in a rotated basis (every axis mixes it with live
structure, so the read is live). `CoordinateScan.best_k` is the largest genuine order it found on
a layer (``None`` when it found none).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from neuromanifold.singular.blocks import is_supported_block
from neuromanifold.singular.direction import read_direction
from neuromanifold.singular.sweep import T_BATCH

__all__ = ["CoordinateRecord", "CoordinateScan", "coordinate_scan"]


@dataclass(frozen=True)
class CoordinateRecord:
    """Read of one coordinate axis ``e_i`` of parameter ``param`` (``index`` into its shape)."""

    layer: str
    param: str
    index: tuple[int, ...]
    value: float
    k: int | None
    k_hat: float | None
    slope: float | None
    r2: float | None
    klass: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (class under ``"class"``)."""
        d = asdict(self)
        d["class"] = d.pop("klass")
        d["index"] = list(self.index)
        return d


@dataclass(frozen=True)
class CoordinateScan:
    """All coordinate reads of a scan."""

    records: tuple[CoordinateRecord, ...]

    def best_k(self, layer: str) -> int | None:
        """Largest order classed genuine singularity on ``layer`` (``None`` if none)."""
        ks = [
            r.k
            for r in self.records
            if r.layer == layer and r.klass == "genuine_singularity" and r.k is not None
        ]
        return max(ks) if ks else None

    def classes(self, layer: str) -> list[str]:
        """Classes read on ``layer``."""
        return [r.klass for r in self.records if r.layer == layer]

    def to_dict(self) -> dict[str, Any]:
        """``{"records": [...]}``."""
        return {"records": [r.to_dict() for r in self.records]}


def coordinate_scan(
    model: nn.Module,
    data: Tensor | tuple[Tensor, Tensor],
    family: Any,
    *,
    layers: Sequence[str] | None = None,
    per_tensor: int = 2,
    grid: Sequence[float] | Tensor | None = None,
    chunk_size: int | None = None,
    t_batch: int = T_BATCH,
) -> CoordinateScan:
    """Read the ``per_tensor`` smallest-``|value|`` weight axes of each block (module docstring).

    ``layers`` selects blocks by module name (default: every Linear/Conv block). Never mutates
    ``model`` (reads run on a float64 copy). ``chunk_size`` (samples per pass) and ``t_batch``
    (t-values per ``vmap``) are passed to every `read_direction`, e.g. from a
    `neuromanifold.singular.memory.MemoryPlan`; they change the memory, not the values.
    """
    if not isinstance(per_tensor, int) or per_tensor < 1:
        raise ValueError(f"per_tensor must be a positive int; got {per_tensor!r}")
    work = copy.deepcopy(model).to(torch.float64).eval()
    mods = dict(work.named_modules())
    names = [n for n, m in mods.items() if is_supported_block(m)] if layers is None else layers
    unknown = [n for n in names if n not in mods or not is_supported_block(mods[n])]
    if unknown:
        raise ValueError(f"layers {unknown} are not Linear/Conv blocks of the model")
    params = {k: v.detach() for k, v in work.named_parameters()}
    records = []
    for name in names:
        key = f"{name}.weight" if name else "weight"
        w = params[key]
        order = torch.argsort(w.reshape(-1).abs(), stable=True)[:per_tensor]
        for flat in order.tolist():
            e = torch.zeros(w.numel(), dtype=torch.float64, device=w.device)
            e[flat] = 1.0
            r = read_direction(
                work,
                params,
                {key: e.reshape(w.shape)},
                data,
                family,
                grid=grid,
                chunk_size=chunk_size,
                t_batch=t_batch,
            )
            idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), w.shape))
            records.append(
                CoordinateRecord(
                    layer=name,
                    param=key,
                    index=idx,
                    value=float(w.reshape(-1)[flat]),
                    k=r.k,
                    k_hat=r.k_hat,
                    slope=r.slope,
                    r2=r.r2,
                    klass=r.klass.value,
                )
            )
    return CoordinateScan(records=tuple(records))
