"""`Reading`: the result of the whole-model read, JSON round-trip and a per-layer view.

A `Reading` lists one `DirectionRecord` per read candidate (layer, detector, order, class, fit
numbers, offset, gauge overlap, the sweep itself, an optional coordinate-scan baseline), the
modules no detector covers (``not_covered``, each with a reason) and ``meta`` (model summary,
family, sample count, dtype up-cast note, pass counts, thresholds).

Each record also reports, derived from its order k (spec §7.2 step 7), the per-direction learning
coefficient ``lambda_dir`` = 1/(2k) and the universal singular fluctuation ``nu_k`` = ν(k)
(:func:`neuromanifold.singular.nu.nu`, the normal form's value, not the realized one: an upper
reference for a direction inside one tensor, not a bound for a crossing, docs/triple.md). They are
properties, written by ``to_dict`` and ignored by ``from_dict``. The global (λ, m, ν) is not a
per-record quantity: it is assembled from the records by
:func:`neuromanifold.singular.assembly.assemble_from_reading` (``neuromanifold triple read``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from numbers import Integral
from typing import Any

__all__ = ["DERIVED_KEYS", "ORDERED_CLASSES", "DirectionRecord", "NotCovered", "Reading"]

#: Classes whose order k is a KL order of the direction: a genuine singularity (k ≥ 2) and a
#: live direction (k = 1, regular). A curved gauge's k is an artefact of the straight probe
#: leaving the orbit and a flat gauge has none, so their λ_dir and ν(k) are ``None``.
ORDERED_CLASSES = ("genuine_singularity", "live")
#: Keys ``DirectionRecord.to_dict`` adds from properties; ``from_dict`` drops them.
DERIVED_KEYS = ("lambda_dir", "nu_k")


@dataclass(frozen=True)
class DirectionRecord:
    """One read direction.

    ``layers`` are the modules whose parameters the direction moves (a duality chain spans
    several) and ``layer`` is the first of them; a module a closed-form gauge is derived from but
    does not move is named in ``info`` instead (the LayerNorm of an ``ln-kernel`` record is
    ``info["norm"]``, its ``layers`` the consumer alone); ``detector`` the provenance label;
    ``k``/``k_hat``/``slope``/``r2``/``magnitude``/``window`` from the rate fit (``None`` when no
    window passed); ``klass`` the class string; ``offset`` ``|uᵀθ0|``;
    ``gauge_overlap`` the overlap with the closed-form gauge span (``None`` if none applies);
    ``ratio`` the detector's eigenvalue ratio; ``sweep`` ``{"t": [...], "F": [...], "floor": x,
    "base_shift": s}``, the read of ``F_u`` along ``θ0 + (s + t)·û`` (``s = 0``, or ``−ûᵀθ0``
    when the read was snapped; readings archived before read-log version 19 have no
    ``base_shift``);
    ``baseline`` the coordinate-scan result on the same layer when computed; ``info`` the
    detector's and the read's details, among them ``info["support"]`` in a whole read: where the
    direction swept lives, per parameter tensor its share of ``‖u‖²`` and its dominant output
    units and inputs (`neuromanifold.singular.support.direction_support`). Derived (not
    stored): ``lambda_dir`` = 1/(2k) and ``nu_k`` = ν(k) for a genuine or live record with an
    order, else ``None``.

    >>> rec = DirectionRecord("fc1", ("fc1", "fc2"), "duality", 3, 3.0, 4.0, 1.0, 1.0,
    ...                       "genuine_singularity", (0.01, 1.0), 0.0, None, None)
    >>> rec.lambda_dir, round(rec.nu_k, 6)
    (0.16666666666666666, 0.278366)
    >>> DirectionRecord.from_dict(rec.to_dict()) == rec
    True
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

    def _order(self) -> int | None:
        k = self.k
        if self.klass not in ORDERED_CLASSES or isinstance(k, bool):
            return None
        if not isinstance(k, Integral) or k < 1:
            return None
        return int(k)

    @property
    def lambda_dir(self) -> float | None:
        """λ_dir = 1/(2k), the slice RLCT of t^{2k} (genuine or live record with an order)."""
        k = self._order()
        return None if k is None else 1.0 / (2 * k)

    @property
    def nu_k(self) -> float | None:
        """ν(k), the normal form's universal value (genuine or live with k ≤ ``K_MAX``, else
        None)."""
        from neuromanifold.singular.nu import K_MAX, nu

        k = self._order()
        return None if k is None or k > K_MAX else nu(k)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; the class is under the key ``"class"``; the derived ``DERIVED_KEYS``
        (``lambda_dir``, ``nu_k``) follow the fields."""
        d = asdict(self)
        d["class"] = d.pop("klass")
        d["layers"] = list(self.layers)
        d["window"] = None if self.window is None else list(self.window)
        d["lambda_dir"] = self.lambda_dir
        d["nu_k"] = self.nu_k
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DirectionRecord:
        """Inverse of `to_dict` (the derived keys, if present, are dropped: JSON written before
        they existed reads back the same)."""
        d = {key: v for key, v in d.items() if key not in DERIVED_KEYS}
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
        """Records grouped by every layer they touch, i.e. every module in their ``layers`` whose
        parameters they move (a chain appears under each of its layers).

        Layers come in the model's module order (``meta["module_order"]``, the order of
        ``named_modules()``, as ``print(model)`` lists them; s33 trial USER D3: the first layer
        of an MLP came last), then any layer it does not name, in the order of the records."""
        out: dict[str, list[DirectionRecord]] = {}
        for r in self.directions:
            for layer in r.layers:
                out.setdefault(layer, []).append(r)
        order = {name: i for i, name in enumerate(self.meta.get("module_order") or ())}
        first = {layer: i for i, layer in enumerate(out)}
        return {
            layer: out[layer]
            for layer in sorted(out, key=lambda n: (order.get(n, len(order)), first[n]))
        }

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
