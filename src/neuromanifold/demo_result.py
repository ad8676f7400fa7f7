"""The demo's configuration and results: `DemoConfig`, `ModelRead`, `OptimizerRow`, `DemoResult`.

Every type round-trips through JSON (``to_dict`` / ``from_dict``); ``report.json`` holds a
`DemoResult`. `optimizer_row` computes one optimizer's comparison numbers from its read. The
runner is :mod:`neuromanifold.demo`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from neuromanifold.singular.reading import Reading

__all__ = [
    "GAUGE_DETECTORS",
    "OPTIMIZER_STAGES",
    "READABLE_R2",
    "DemoConfig",
    "DemoResult",
    "ModelRead",
    "OptimizerRow",
    "optimizer_row",
]

READABLE_R2 = 0.95
"""A direction is *readable* when its selected window fits with ``r² ≥ READABLE_R2``."""

OPTIMIZER_STAGES = {
    "sweep-adamw": "AdamW",
    "sweep-muon": "Muon (Newton–Schulz)",
    "sweep-muon-polar-express": "Muon + Polar Express",
    "sweep-muon-polar-svd": "Muon + exact polar (SVD)",
}


@dataclass(frozen=True)
class DemoConfig:
    """Settings of the demo; the defaults are the real run, tests pass tiny ones.

    Attributes:
        probe: validation digits per read.
        cache: recipe checkpoint directory (``None``: the user cache of `run_recipe`).
        steps, sweep_steps: override every stage's steps of the ViT recipes / of the optimizer
            sweep (``None``: the recipes' own).
        cells: cell names to read (``None``: all; ``()``: none).
        max_directions: cap per read (``None``: all candidates).
        baseline: per-coordinate scan beside the scratch ViT's genuine singularities.
        grid: t-grid of every sweep (``None``: the read's per-direction default).
        seed: recipe seed; progress: rich progress bars.
        workers: processes for training and reads (``1``: everything in this process).
        threads: torch intra-op threads per process during the demo (restored afterwards):
            the models are tiny, so one thread per process and one process per core is fastest.
    """

    probe: int = 64
    cache: str | None = None
    steps: int | None = None
    sweep_steps: int | None = None
    cells: tuple[str, ...] | None = None
    max_directions: int | None = None
    baseline: bool = True
    grid: tuple[float, ...] | None = None
    seed: int = 0
    progress: bool = True
    workers: int = 2
    threads: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.probe, int) or self.probe < 1:
            raise ValueError(f"probe must be a positive int; got {self.probe!r}")
        for name in ("workers", "threads"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int; got {v!r}")
        for name in ("steps", "sweep_steps", "max_directions"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive int or None; got {v!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (tuples as lists)."""
        d = asdict(self)
        d["cells"] = None if self.cells is None else list(self.cells)
        d["grid"] = None if self.grid is None else list(self.grid)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DemoConfig:
        """Inverse of `to_dict`."""
        d = dict(d)
        d["cells"] = None if d.get("cells") is None else tuple(d["cells"])
        d["grid"] = None if d.get("grid") is None else tuple(d["grid"])
        return cls(**d)


@dataclass(frozen=True)
class ModelRead:
    """One trained model and its read: ``metrics`` from the checkpoint sidecar, ``reading``,
    ``spectra`` (`block_spectra`), whether the checkpoint came from the cache, wall times."""

    name: str
    stage: str
    task: str
    checkpoint: str
    metrics: dict[str, Any]
    reading: Reading
    spectra: dict[str, dict[str, Any]]
    cached: bool
    read_s: float
    probes: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (the reading as `Reading.to_dict`)."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["reading"] = self.reading.to_dict()
        d["probes"] = list(self.probes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelRead:
        """Inverse of `to_dict`."""
        return cls(
            **{
                **d,
                "reading": Reading.from_dict(d["reading"]),
                "probes": tuple(d.get("probes", ())),
            }
        )


@dataclass(frozen=True)
class OptimizerRow:
    """The optimizer comparison row of one sweep stage (`optimizer_row`: definitions)."""

    stage: str
    optimizer: str
    val_loss: float
    val_accuracy: float
    n_read: int
    n_readable: int
    readable_kinds: dict[str, int]
    n_possible: int
    unreadable_fraction: float | None
    fc2_n_small: int
    fc2_kernel: int
    fc2_max_gap: float
    fc2_n_zero: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OptimizerRow:
        """Inverse of `to_dict`."""
        return cls(**d)


def _kind(r: Any) -> str:
    return r.klass if r.k is None else f"{r.klass} k={r.k}"


def optimizer_row(mr: ModelRead) -> OptimizerRow:
    """Comparison numbers of one optimizer's read.

    ``n_readable``: directions whose window fits with ``r² ≥ READABLE_R2``, counted by
    ``readable_kinds`` (``"class k=…"``). ``n_possible``: directions not proposed as gauges by
    construction (detectors not in `GAUGE_DETECTORS`), ``unreadable_fraction``: of
    those, the fraction neither readable nor classed flat gauge (a flat gauge has no window by
    definition: its magnitude sits at the floor, which decides its class). ``fc2_*``: the
    `spread` of ``A`` of every MLP
    ``fc2`` (its hidden activations' second moment), summed (``n_small``, ``n_zero``, ``kernel``)
    or the largest (``max_gap``, between ratios above round-off) over blocks.
    """
    from neuromanifold.report.spectra import spread

    recs = mr.reading.directions
    readable = [r for r in recs if r.r2 is not None and r.r2 >= READABLE_R2]
    kinds: dict[str, int] = {}
    for r in readable:
        kinds[_kind(r)] = kinds.get(_kind(r), 0) + 1
    possible = [r for r in recs if r.detector not in GAUGE_DETECTORS]
    unread = [
        r for r in possible if (r.r2 is None or r.r2 < READABLE_R2) and r.klass != "flat_gauge"
    ]
    fc2 = [s for name, s in mr.spectra.items() if name.endswith("mlp.fc2")]
    spreads = [spread(s["A"], rows=s.get("A_rows")) for s in fc2]
    return OptimizerRow(
        stage=mr.stage,
        optimizer=OPTIMIZER_STAGES.get(mr.stage, mr.stage),
        val_loss=float(mr.metrics.get("val_loss", float("nan"))),
        val_accuracy=float(mr.metrics.get("val_accuracy", float("nan"))),
        n_read=len(recs),
        n_readable=len(readable),
        readable_kinds=dict(sorted(kinds.items())),
        n_possible=len(possible),
        unreadable_fraction=len(unread) / len(possible) if possible else None,
        fc2_n_small=int(sum(s["n_small"] for s in spreads)),
        fc2_kernel=int(sum(s["A_kernel"] for s in fc2)),
        fc2_max_gap=float(max((s["max_gap"] for s in spreads), default=0.0)),
        fc2_n_zero=int(sum(s["n_zero"] for s in spreads)),
    )


GAUGE_DETECTORS = (
    "ln-kernel",
    "qk-rotation",
    "vo-rescale",
    "key-bias",
    "value-bias",
    "norm-shift",
    "ce-shift",
    "bn-shift",
    "gn-shift",
    "bn-rescale",
    "relu-rescale",
    "norm-scale",
    "glu-rescale",
    "qk-norm-rescale",
    "layer-scale",
    "embedding-unseen",
    "embedding-mean",
)
"""Detectors that propose closed-form gauge directions (not possible dead directions)."""


@dataclass(frozen=True)
class DemoResult:
    """Everything the demo computed; ``report.json`` holds its `to_dict`."""

    config: DemoConfig
    cells: list[dict[str, Any]]
    models: dict[str, ModelRead]
    optimizers: list[ModelRead]
    rows: list[OptimizerRow]
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {
            "kind": "neuromanifold-demo",
            "config": self.config.to_dict(),
            "cells": self.cells,
            "models": {k: v.to_dict() for k, v in self.models.items()},
            "optimizers": [m.to_dict() for m in self.optimizers],
            "rows": [r.to_dict() for r in self.rows],
            "timings": self.timings,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DemoResult:
        """Inverse of `to_dict` (Readings compare equal to the originals)."""
        if d.get("kind") != "neuromanifold-demo":
            raise ValueError(f"not a demo result: kind {d.get('kind')!r}")
        return cls(
            config=DemoConfig.from_dict(d["config"]),
            cells=list(d["cells"]),
            models={k: ModelRead.from_dict(v) for k, v in d["models"].items()},
            optimizers=[ModelRead.from_dict(m) for m in d["optimizers"]],
            rows=[OptimizerRow.from_dict(r) for r in d["rows"]],
            timings=dict(d["timings"]),
        )
