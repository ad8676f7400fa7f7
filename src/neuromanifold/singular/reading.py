"""`Reading`: the result of the whole-model read, JSON round-trip and a per-layer view.

A `Reading` lists one `DirectionRecord` per read candidate (layer, detector, order, class, fit
numbers, offset, gauge overlap, the sweep itself, an optional coordinate-scan baseline), the
modules no detector covers (``not_covered``, each with a reason) and ``meta`` (model summary,
family, sample count, dtype up-cast note, pass counts, thresholds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["DirectionRecord", "NotCovered", "Reading"]


@dataclass(frozen=True)
class DirectionRecord:
    """One read direction.

    ``layer`` is the first module the direction touches and ``layers`` all of them; ``detector``
    the provenance label; ``k``/``k_hat``/``slope``/``r2``/``magnitude``/``window`` from the rate
    fit (``None`` when no window passed); ``klass`` the class string; ``offset`` ``|uᵀθ0|``;
    ``gauge_overlap`` the overlap with the closed-form gauge span (``None`` if none applies);
    ``ratio`` the detector's eigenvalue ratio; ``sweep`` ``{"t": [...], "F": [...], "floor": x}``;
    ``baseline`` the coordinate-scan result on the same layer when computed.
    """

    layer: str
    layers: tuple[str, ...]
    detector: str
    k: int | None
    k_hat: float | None
    slope: float | None
    r2: float | None
    magnitude: float | None
    klass: str
    window: tuple[float, float] | None
    offset: float
    gauge_overlap: float | None
    ratio: float | None
    reason: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    sweep: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; the class is under the key ``"class"``."""
        d = asdict(self)
        d["class"] = d.pop("klass")
        d["layers"] = list(self.layers)
        d["window"] = None if self.window is None else list(self.window)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DirectionRecord:
        """Inverse of `to_dict`."""
        d = dict(d)
        d["klass"] = d.pop("class")
        d["layers"] = tuple(d["layers"])
        d["window"] = None if d["window"] is None else tuple(d["window"])
        return cls(**d)


@dataclass(frozen=True)
class NotCovered:
    """A module with parameters that no detector reads (``reason`` says why)."""

    name: str
    type: str
    n_params: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return asdict(self)


@dataclass(frozen=True)
class Reading:
    """Whole-model read: ``directions``, ``not_covered``, ``meta`` and a one-line ``note``."""

    directions: tuple[DirectionRecord, ...]
    not_covered: tuple[NotCovered, ...]
    meta: dict[str, Any]
    note: str = ""

    def by_layer(self) -> dict[str, list[DirectionRecord]]:
        """Records grouped by every layer they touch (a chain appears under each of its layers)."""
        out: dict[str, list[DirectionRecord]] = {}
        for r in self.directions:
            for layer in r.layers:
                out.setdefault(layer, []).append(r)
        return out

    def by_class(self) -> dict[str, list[DirectionRecord]]:
        """Records grouped by class string."""
        out: dict[str, list[DirectionRecord]] = {}
        for r in self.directions:
            out.setdefault(r.klass, []).append(r)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict with keys ``directions``, ``not_covered``, ``meta``, ``note``."""
        return {
            "directions": [r.to_dict() for r in self.directions],
            "not_covered": [n.to_dict() for n in self.not_covered],
            "meta": dict(self.meta),
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Reading:
        """Inverse of `to_dict`."""
        return cls(
            directions=tuple(DirectionRecord.from_dict(r) for r in d["directions"]),
            not_covered=tuple(NotCovered(**n) for n in d["not_covered"]),
            meta=dict(d["meta"]),
            note=str(d.get("note", "")),
        )
