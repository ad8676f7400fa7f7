"""Assembly of a global (λ, m) from typed loci, with ν(k) of the dominant order.

A :class:`Locus` is one enumerated piece of singular structure through the point θ*:

* ``kind="genuine"``: a crossing of components i with transverse KL orders k_i and dimensions
  d_i (K ≍ Π_i ρ_i^{2k_i}, ρ_i the norm of the component's d_i coordinates); a single normal-form
  direction t^{2k} is one component (k, 1).
* ``kind="regular"``: ``dim`` regular directions (K ≍ Σ y_j²), each contributing 1/2.
* ``kind="gauge"``: a symmetry orbit (flat or curved); it contributes nothing to (λ, m).

Rules (spec §5; Watanabe's volume laws, with the crossing rule's Jacobian weight ρ^{d−1}):

1. Genuine loci sharing a ``block`` id are components of one crossing (spec §5 rule 2):
   λ_block = min_i d_i/(2k_i), m_block = #{i : d_i/(2k_i) = λ_block}. With d_i = 1 this is
   λ = 1/(2 max k_i) and m = the number of components tied at the maximal order.
2. Different blocks are independent coordinates and add (spec §5 rule 1, under (G⁺)):
   λ = Σ_blocks λ_block + (Σ regular dims)/2,  m = 1 + Σ_blocks (m_block − 1).
3. Regular loci add d/2 and leave m unchanged, whatever their block; gauge loci add nothing.

Single-locus assumption: m is read from the enumerated structure as if each block were one
crossing through θ* (no further loci meeting it); the result states this in ``assumption``.

Dominant order and ν (spec §0 "k fixes the universal ν(k)", §5 operational reading): the *dominant
block* is the genuine block with the smallest λ_block (ties: the largest diagonal order, then the
first listed). Its *diagonal order* k_diag = Σ_i k_i is the order a read along the block's diagonal
measures (a node death a·σ(b·) with σ of leading order p: components (p, 1) for (b, a), k_diag = 1 +
p; a width-one chain of depth L: k_diag = L). ``dominant_order`` is that k_diag and ``nu_universal``
= ν(k_diag), the universal value of the normal form t^{2k} along the dominant dead direction, not
the realized value (see :mod:`neuromanifold.singular.realized_nu`): an upper reference when the
block has one component (live structure only lowers it), but not a bound for a crossing, whose own
fluctuation exceeds its diagonal line's (s30 trial TRIPLE F2: y = a·b·x realises ν̂ ≈ 0.438 against
ν(2) ≈ 0.173, y = a·b·c·x ≈ 0.374 against ν(3) ≈ 0.278); and a per-direction value, not the model's
ν (spec §2: a regular model of dimension d has ν = d/2; the other blocks and the regular directions
do not enter it). Note that k_diag is not the order entering λ: the crossing's λ_block = min_i
d_i/(2k_i) uses the component orders. With no genuine block, ``dominant_order`` = 1 and ν = ν(1) =
1/2, that of one regular direction; when k_diag exceeds :data:`~neuromanifold.singular.nu.K_MAX`, ν
is not computed (``None``, with a note).

References: S. Watanabe, Algebraic Geometry and Statistical Learning Theory (2009);
T. P. Shirodkar, arXiv:2606.05957 (volume laws), arXiv:2607.00603 (assembly from orders).

>>> node = Locus("unit0", "genuine", orders=(1, 1), block="unit0")
>>> a = assemble([node])
>>> a.lam, a.m, a.dominant_order, round(a.nu_universal, 6)
(Fraction(1, 2), 2, 2, 0.172973)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from numbers import Integral
from typing import Any, Literal

from neuromanifold.singular.critical_check import critical_note
from neuromanifold.singular.nu import K_MAX, nu

__all__ = [
    "NU_UNIVERSAL_SCOPE",
    "READ_ONLY_SCOPE",
    "REGULAR_DIMS_SCOPE",
    "SINGLE_LOCUS_ASSUMPTION",
    "Assembly",
    "BlockTriple",
    "Locus",
    "LocusKind",
    "assemble",
    "assemble_from_reading",
    "loci_from_reading",
]

LocusKind = Literal["genuine", "regular", "gauge"]
_KINDS = ("genuine", "regular", "gauge")

NU_UNIVERSAL_SCOPE = (
    "per-direction ν(k_diag) of the dominant block's diagonal direction, the universal value of "
    "the 1-D normal form t^(2k) (ν(1) = 1/2 of one regular direction when there is no genuine "
    "block): not the model's ν (a regular model of dimension d has ν = d/2); an upper reference "
    "for a block of one component, not a bound for a crossing (y = a·b·x realises about 0.44 "
    "against ν(2) = 0.173)"
)

#: ``scope`` of `assemble_from_reading` without ``regular_dims`` (docs/triple.md §4, "What the
#: result covers"): λ is then the read structure's contribution, not a global λ.
READ_ONLY_SCOPE = (
    "λ is assembled from the read directions only (each live record counts 1/2); the regular "
    "dimensions of the rest of the model are not counted. For a global λ pass regular_dims "
    "(`triple read --regular-dims D`), the dimension of the live part (e.g. its parameter count "
    "minus its gauge dimension)."
)

#: ``scope`` of `assemble_from_reading` with the caller's ``regular_dims``.
REGULAR_DIMS_SCOPE = (
    "λ is assembled from the read directions and the caller's regular_dims regular directions "
    "(1/2 each), which replace the live records: a global λ when regular_dims is the dimension "
    "of the whole live part."
)

SINGLE_LOCUS_ASSUMPTION = (
    "single-locus assumption: each block is one crossing of the listed components through θ*; "
    "m counts the components tied at the block's minimum and blocks add (m = 1 + Σ(m_b − 1)); "
    "loci not enumerated here are assumed absent"
)


def _is_count(v: Any) -> bool:
    """An integer ≥ 1 (Python or NumPy; not a bool)."""
    return not isinstance(v, bool) and isinstance(v, Integral) and v >= 1


@dataclass(frozen=True)
class Locus:
    """One typed locus: a crossing component set (genuine), regular directions, or a gauge orbit.

    ``orders``: transverse KL orders k_i ≥ 1 of the components (genuine only). ``dims``: their
    dimensions d_i ≥ 1 (default all 1). ``dim``: number of regular directions (regular only) or
    the orbit dimension (gauge; reported, not counted). Integers may be Python or NumPy ints
    (not bools); they are stored as ``int``. ``block``: independence group id (a
    string); loci sharing one are components of one crossing. Omitted (``None``), the locus is
    its own block, named ``name`` (`group`): independent loci add (s16 trial X #3: the old default
    ``""`` put every locus built without a block into one crossing). Two loci of one name and no
    block are one group: give distinct names or explicit blocks.
    """

    name: str
    kind: LocusKind
    orders: tuple[int, ...] = ()
    dims: tuple[int, ...] = ()
    block: str | None = None
    dim: int = 1

    @property
    def group(self) -> str:
        """The block the assembly puts the locus in: ``block``, or ``name`` when it is None
        (resolved when assembled, so `dataclasses.replace` of the name moves it too)."""
        return self.name if self.block is None else self.block

    def __post_init__(self) -> None:
        if self.block is not None and not isinstance(self.block, str):
            raise ValueError(
                f"block must be a str (an independence group id) or None, got {self.block!r} "
                f"(locus {self.name!r})"
            )
        if self.kind not in _KINDS:
            raise ValueError(
                f"kind must be one of {_KINDS}, got {self.kind!r} (locus {self.name!r})"
            )
        object.__setattr__(self, "orders", tuple(self.orders))
        object.__setattr__(self, "dims", tuple(self.dims) or (1,) * len(self.orders))
        if self.kind == "genuine":
            if not self.orders:
                raise ValueError(
                    f"orders must be a non-empty tuple of ints >= 1 for a genuine locus, "
                    f"got () (locus {self.name!r})"
                )
            for label, seq in (("orders", self.orders), ("dims", self.dims)):
                if not all(_is_count(v) for v in seq):
                    raise ValueError(f"{label} must be ints >= 1, got {seq} (locus {self.name!r})")
                object.__setattr__(self, label, tuple(int(v) for v in seq))  # NumPy ints too
            if len(self.dims) != len(self.orders):
                raise ValueError(
                    f"dims must match orders in length, got dims={self.dims}, "
                    f"orders={self.orders} (locus {self.name!r})"
                )
        elif self.orders or self.dims:
            # dims without orders were dropped without a word (s34 trial TRIPLE O5)
            label, seq = ("orders", self.orders) if self.orders else ("dims", self.dims)
            raise ValueError(
                f"{label} must be empty for a {self.kind} locus, got {seq} (locus {self.name!r}; "
                "a regular or gauge locus counts by its dim)"
            )
        if isinstance(self.dim, bool) or not isinstance(self.dim, Integral) or self.dim < 0:
            raise ValueError(f"dim must be an int >= 0, got {self.dim!r} (locus {self.name!r})")
        object.__setattr__(self, "dim", int(self.dim))

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "name": self.name,
            "kind": self.kind,
            "orders": list(self.orders),
            "dims": list(self.dims),
            "block": self.block,
            "dim": self.dim,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Locus:
        """Inverse of :meth:`to_dict`."""
        return cls(
            name=d["name"],
            kind=d["kind"],
            orders=tuple(d.get("orders", ())),
            dims=tuple(d.get("dims", ())),
            block=d.get("block"),
            dim=int(d.get("dim", 1)),
        )


@dataclass(frozen=True)
class BlockTriple:
    """One crossing block: its components (k_i, d_i), λ_block, m_block and the loci in it.

    ``diagonal_order`` (derived) is k_diag = Σ_i k_i, the order of the block's diagonal
    direction (the order a read along it measures).
    """

    block: str
    orders: tuple[int, ...]
    dims: tuple[int, ...]
    lam: Fraction
    m: int
    loci: tuple[str, ...]

    @property
    def diagonal_order(self) -> int:
        """k_diag = Σ_i k_i (spec §5: the diagonal of a crossing has the summed order)."""
        return sum(self.orders)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (λ as a string fraction and a float; ``diagonal_order`` = Σ k_i)."""
        return {
            "block": self.block,
            "orders": list(self.orders),
            "dims": list(self.dims),
            "diagonal_order": self.diagonal_order,
            "lambda": str(self.lam),
            "lambda_float": float(self.lam),
            "m": self.m,
            "loci": list(self.loci),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BlockTriple:
        """Inverse of :meth:`to_dict` (``lambda`` read as the exact fraction; the derived
        ``lambda_float`` and ``diagonal_order`` are not read)."""
        return cls(
            block=str(d["block"]),
            orders=tuple(int(k) for k in d["orders"]),
            dims=tuple(int(v) for v in d["dims"]),
            lam=Fraction(d["lambda"]),
            m=int(d["m"]),
            loci=tuple(str(name) for name in d["loci"]),
        )


@dataclass(frozen=True)
class Assembly:
    """Global (λ, m) assembled from typed loci, plus the per-direction ν(k) of the dominant order.

    ``lam`` exact; ``regular_dims`` the regular directions counted at 1/2 each; ``gauge`` the
    gauge loci ignored; ``dominant_block`` the id of the genuine block with the smallest λ_block
    (ties: the largest diagonal order, then the first listed; ``None`` if no genuine block);
    ``dominant_order`` its diagonal order k_diag = Σ_i k_i (1 if none); ``nu_universal`` =
    ν(dominant_order), the per-direction universal value of the dominant direction's normal
    form (1/2 of one regular direction if no genuine block; an upper reference for a
    one-component block, not a bound for a crossing), not the model's ν (``None`` when
    k_diag > ``K_MAX``; its JSON says so in ``nu_universal_scope``); ``assumption`` the
    single-locus statement. For an assembly from a reading (`assemble_from_reading`):
    ``regular_dims_given`` whether the caller gave ``regular_dims``, ``scope`` what λ covers
    (`READ_ONLY_SCOPE`: the read directions only; `REGULAR_DIMS_SCOPE`) and ``reading_note`` the
    Reading's own one-line note (``""`` if none); ``None``, ``None`` and ``""`` for `assemble` of
    loci.
    """

    lam: Fraction
    m: int
    dominant_order: int
    nu_universal: float | None
    blocks: tuple[BlockTriple, ...]
    regular_dims: int
    gauge: tuple[str, ...]
    assumption: str = SINGLE_LOCUS_ASSUMPTION
    notes: tuple[str, ...] = field(default_factory=tuple)
    dominant_block: str | None = None
    regular_dims_given: bool | None = None
    scope: str | None = None
    reading_note: str = ""

    @property
    def lam_float(self) -> float:
        """λ as a float."""
        return float(self.lam)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``lambda`` the exact fraction as a string, ``lambda_float``, ``m``, …;
        ``nu_universal_scope`` states what ``nu_universal`` is (`NU_UNIVERSAL_SCOPE`)."""
        return {
            "lambda": str(self.lam),
            "lambda_float": float(self.lam),
            "m": self.m,
            "dominant_block": self.dominant_block,
            "dominant_order": self.dominant_order,
            "nu_universal": self.nu_universal,
            "nu_universal_scope": NU_UNIVERSAL_SCOPE,
            "blocks": [b.to_dict() for b in self.blocks],
            "regular_dims": self.regular_dims,
            "gauge": list(self.gauge),
            "assumption": self.assumption,
            "notes": list(self.notes),
            "regular_dims_given": self.regular_dims_given,
            "scope": self.scope,
            "reading_note": self.reading_note,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Assembly:
        """Inverse of :meth:`to_dict` (also after a JSON round trip): ``lambda`` is read as the
        exact fraction; the derived ``lambda_float`` and ``nu_universal_scope`` are not read.

        >>> a = assemble([Locus("unit0", "genuine", orders=(1, 1), block="unit0")])
        >>> Assembly.from_dict(a.to_dict()) == a
        True
        """
        nu_k = d["nu_universal"]
        given = d.get("regular_dims_given")
        return cls(
            lam=Fraction(d["lambda"]),
            m=int(d["m"]),
            dominant_order=int(d["dominant_order"]),
            nu_universal=None if nu_k is None else float(nu_k),
            blocks=tuple(BlockTriple.from_dict(b) for b in d["blocks"]),
            regular_dims=int(d["regular_dims"]),
            gauge=tuple(str(name) for name in d["gauge"]),
            assumption=str(d.get("assumption", SINGLE_LOCUS_ASSUMPTION)),
            notes=tuple(str(n) for n in d.get("notes", ())),
            dominant_block=d.get("dominant_block"),
            regular_dims_given=None if given is None else bool(given),
            scope=d.get("scope"),
            reading_note=str(d.get("reading_note", "")),
        )


def _crossing(components: Sequence[tuple[int, int]]) -> tuple[Fraction, int]:
    slices = [Fraction(d, 2 * k) for k, d in components]
    lam = min(slices)
    return lam, slices.count(lam)


def assemble(loci: Iterable[Locus], *, notes: Sequence[str] = ()) -> Assembly:
    """Apply the additive/crossing rules (module docstring) to typed loci.

    >>> chain = [Locus(f"w{i}", "genuine", orders=(1,), block="chain") for i in range(4)]
    >>> a = assemble(chain)
    >>> (a.lam, a.m)
    (Fraction(1, 2), 4)
    """
    loci = list(loci)
    for i, locus in enumerate(loci):
        if not isinstance(locus, Locus):
            raise TypeError(f"loci[{i}] must be a Locus, got {type(locus).__name__}")
    groups: dict[str, list[Locus]] = {}
    regular_dims = 0
    gauge: list[str] = []
    for locus in loci:
        if locus.kind == "genuine":
            groups.setdefault(locus.group, []).append(locus)
        elif locus.kind == "regular":
            regular_dims += locus.dim
        else:
            gauge.append(locus.name)
    blocks = []
    for block_id, members in groups.items():
        comps = [(k, d) for loc in members for k, d in zip(loc.orders, loc.dims, strict=True)]
        lam_b, m_b = _crossing(comps)
        blocks.append(
            BlockTriple(
                block=block_id,
                orders=tuple(k for k, _ in comps),
                dims=tuple(d for _, d in comps),
                lam=lam_b,
                m=m_b,
                loci=tuple(loc.name for loc in members),
            )
        )
    lam = sum((b.lam for b in blocks), Fraction(regular_dims, 2))
    m = 1 + sum(b.m - 1 for b in blocks)
    notes = list(notes)
    dom = _dominant(blocks)
    k_diag = 1 if dom is None else dom.diagonal_order
    if k_diag <= K_MAX:
        nu_k: float | None = nu(k_diag)
    else:
        nu_k = None
        notes.append(f"ν(k) not computed: dominant diagonal order {k_diag} > K_MAX = {K_MAX}")
    return Assembly(
        lam=lam,
        m=m,
        dominant_order=k_diag,
        nu_universal=nu_k,
        blocks=tuple(blocks),
        regular_dims=regular_dims,
        gauge=tuple(gauge),
        notes=tuple(notes),
        dominant_block=None if dom is None else dom.block,
    )


def _dominant(blocks: Sequence[BlockTriple]) -> BlockTriple | None:
    """The genuine block with the smallest λ_block; ties: largest k_diag, then first listed."""
    best: BlockTriple | None = None
    for b in blocks:
        if best is None or (b.lam, -b.diagonal_order) < (best.lam, -best.diagonal_order):
            best = b
    return best


_GENUINE = "genuine_singularity"
_LIVE = "live"
_GAUGES = ("flat_gauge", "curved_gauge")


def _field(rec: Any, *names: str) -> Any:
    for name in names:
        if isinstance(rec, Mapping):
            if name in rec:
                return rec[name]
        elif hasattr(rec, name):
            return getattr(rec, name)
    return None


def _class_of(rec: Any) -> str:
    klass = _field(rec, "klass", "class")
    return str(getattr(klass, "value", klass))


#: the values of `neuromanifold.singular.classify.DirectionClass` (kept torch-free here)
_CLASSES = frozenset({_GENUINE, _LIVE, *_GAUGES, "unresolved"})


#: The orders a record of each class can carry besides ``None`` (no order), as (least, most)
#: (spec §3, §7.2 step 8): a genuine singularity has k ≥ 2 (k = 1 is live/regular); a live
#: direction k = 1; a flat gauge no order, or the k = 1 of a slope-0 plateau below the live
#: threshold (reads before 69dbda9 wrote it); a curved gauge the apparent order of a straight
#: probe of its orbit, 2 (reads before c1fc66d wrote any apparent order ≥ 2 in the gauge span).
#: Unresolved records are skipped whatever their k.
_ORDER_RANGE: dict[str, tuple[int, int | None]] = {
    _GENUINE: (2, None),
    _LIVE: (1, 1),
    "flat_gauge": (1, 1),
    "curved_gauge": (2, None),
}


def _check_records(records: Sequence[Any]) -> None:
    """``ValueError`` for a malformed record, which would otherwise change (λ, m) silently:

    * a class that is not a ``DirectionClass`` value;
    * an order that is neither ``None`` nor an integer ≥ 1 (``2.0``, ``"2"``, ``0``, ``True``): a
      genuine record with ``k = 2.0`` was skipped and gave λ = 0, m = 1 instead of 1/2, 2 (s15
      trial T #3);
    * an order its class cannot have (`_ORDER_RANGE`): a genuine singularity with k = 1, a live
      direction with k ≥ 2, a flat gauge with k ≥ 2, a curved gauge with k = 1;
    * ``layers`` that is not a list or tuple of strings (a string was counted per character);
    * ``info["chain_length"]`` that is neither absent/``None`` nor an integer ≥ 1 (``0``, ``-1``
      or ``True`` overrode ``layers``; s17 trial AE #4).
    """
    for i, rec in enumerate(records):
        klass = _class_of(rec)
        if klass not in _CLASSES:
            raise ValueError(
                f"directions[{i}] has class {klass!r}; expected one of {sorted(_CLASSES)}"
            )
        k = _field(rec, "k")
        if k is not None and not _is_count(k):
            raise ValueError(
                f"directions[{i}] has order k = {k!r}; expected an integer >= 1 or null (no order)"
            )
        if k is not None and klass in _ORDER_RANGE:
            lo, hi = _ORDER_RANGE[klass]
            if k < lo or (hi is not None and k > hi):
                allowed = f"k = {lo}" if hi == lo else f"k >= {lo}"
                raise ValueError(
                    f"directions[{i}] has class {klass!r} with order k = {k!r}; a {klass} record "
                    f"has {allowed} or null (no order) (spec §3, §7.2 step 8: k = 1 is live, "
                    f"a genuine singularity has k >= 2)"
                )
        layers = _field(rec, "layers")
        if layers is not None and (
            not isinstance(layers, list | tuple) or not all(isinstance(x, str) for x in layers)
        ):
            raise ValueError(
                f"directions[{i}] has layers = {layers!r}; expected a list of layer names "
                f"(strings) or null"
            )
        info = _field(rec, "info")
        n = info.get("chain_length") if isinstance(info, Mapping) else None
        if n is not None and not _is_count(n):
            raise ValueError(
                f"directions[{i}] has info['chain_length'] = {n!r}; expected an integer >= 1 "
                f"(the number of weight tensors the direction crosses) or null"
            )


def _n_factors(rec: Any) -> int:
    """Number of weight tensors (modules) the dead direction crosses."""
    info = _field(rec, "info") or {}
    if isinstance(info, Mapping) and info.get("chain_length") is not None:
        return int(info["chain_length"])  # an integer >= 1 (_check_records)
    layers = _field(rec, "layers")
    if layers:
        return len(tuple(layers))
    keys = _field(rec, "direction_keys")
    if keys:
        return len({str(k).rsplit(".", 1)[0] for k in keys})
    return 1


def _records(reading: Any) -> list[Any]:
    """The direction records of a `Reading`, its ``to_dict()`` JSON or an iterable of records.

    Raises:
        TypeError: a string or bytes (a path is not read here: `load_reading` reads one), a
            mapping without a ``"directions"`` list (the `cells --json` payload, ``{}``), a
            ``"directions"`` entry that is not a list, or anything else that is not iterable.
            Each was iterated before and failed on its characters or keys, or gave λ = 0 for
            ``{}`` and ``""`` (s34 trial TRIPLE D2).
    """
    want = "reading must be a Reading, its to_dict() JSON or an iterable of direction records"
    if isinstance(reading, (str, bytes)):
        raise TypeError(
            f"{want}, got {type(reading).__name__} {str(reading)[:60]!r} (a path? load it "
            "with neuromanifold.report.load_reading first)"
        )
    if isinstance(reading, Mapping):
        if "directions" not in reading:
            raise TypeError(f"{want}, got a mapping with keys {sorted(map(str, reading))[:8]}")
        directions = reading["directions"]
        if not isinstance(directions, (list, tuple)):
            raise TypeError(
                f"{want}: its 'directions' must be a list, got {type(directions).__name__}"
            )
        return list(directions)
    if hasattr(reading, "directions"):
        return list(reading.directions)
    if isinstance(reading, Iterable):
        return list(reading)
    raise TypeError(f"{want}, got {type(reading).__name__}")


def _record_name(i: int, rec: Any) -> str:
    """The name of record i in loci and notes: ``"{i}:{layer}:{detector}"``."""
    layer = _field(rec, "layer") or ",".join(_field(rec, "direction_keys") or ()) or str(i)
    return f"{i}:{layer}:{_field(rec, 'detector') or 'direction'}"


def _check_component_dims(
    records: Sequence[Any],
    component_dims: Mapping[int, Sequence[int]] | None,
    option: str = "component_dims",
) -> None:
    """Every key of ``component_dims`` (or of ``component_orders``, named by ``option``) must be
    the int index of a genuine record with an order.

    A key that names no such record would be ignored and leave that record at dimension 1, a
    different λ with no sign of it (user trial H #1); string keys are what a JSON round trip of
    an int-keyed dict gives back.
    """
    if not component_dims:
        return
    genuine = [
        i
        for i, rec in enumerate(records)
        if _class_of(rec) == _GENUINE and _is_count(_field(rec, "k"))
    ]
    for key in component_dims:
        if isinstance(key, bool) or not isinstance(key, Integral) or int(key) not in genuine:
            hint = (
                " (a JSON round trip turns int keys into strings: convert them with int())"
                if isinstance(key, str)
                else ""
            )
            raise ValueError(
                f"{option} key {key!r}: expected the int index of a genuine record with "
                f"an order; the genuine records are {genuine}{hint}"
            )


def _given_orders(i: int, given: Sequence[int], k: int, n: int) -> tuple[int, ...]:
    """``component_orders[i]`` checked against record i: ``n`` integers ≥ 1 (one per factor the
    record crosses) summing to its read order ``k`` (spec §5: k_diag = Σ k_i)."""
    orders = tuple(given)
    if any(isinstance(o, bool) or not isinstance(o, Integral) or o < 1 for o in orders):
        raise ValueError(f"component_orders[{i}] must be integers >= 1, got {orders}")
    orders = tuple(int(o) for o in orders)  # NumPy ints too
    if len(orders) != n or sum(orders) != k:
        raise ValueError(
            f"component_orders[{i}] must have {n} entries (one per factor the record crosses) "
            f"summing to its read order k={k}, got {orders}"
        )
    return orders


def loci_from_reading(
    reading: Any,
    *,
    component_dims: Mapping[int, Sequence[int]] | None = None,
    component_orders: Mapping[int, Sequence[int]] | None = None,
    count_live: bool = True,
) -> tuple[list[Locus], list[str]]:
    """Typed loci from the records of a read, and notes on what was skipped.

    ``reading``: a :class:`~neuromanifold.singular.reading.Reading`, its ``to_dict()`` JSON, or
    any iterable of direction records (``DirectionRecord``, ``DirectionReading`` or dicts) with
    a class (``klass``/``class``), an order ``k`` and the layers or tensors the direction crosses
    (``layers``/``info["chain_length"]``/``direction_keys``).

    Rule (documented, [design]): a genuine direction of diagonal order k crossing n weight tensors
    is a crossing of n components, one per tensor, whose orders add up to the diagonal order (spec
    §5: k_diag = Σ k_i): n − 1 linear factors of order 1 and one factor carrying the rest. Orders
    and ``component_dims`` are listed in the record's ``layers`` order, input side first, and the
    default is (k − n + 1, 1, …, 1): the first tensor carries the rest, as the input weights b of a
    node death a·σ(b·) do (n = 2, k = 1 + p: (p, 1), K ∝ a²b^{2p}; s31 trial DISK #1: with the rest
    on the last tensor, dims given input side first paired the order p with a's dimension); a
    depth-L linear chain (n = L = k) gives (1, …, 1). Either way the block's diagonal order Σ_i k_i
    is the read order k, so the assembly's ``dominant_order`` and ν are those of the order the read
    measured. Each genuine direction is its own block (distinct dead units are independent
    coordinates). A direction inside one tensor (n = 1) is a 1-D normal form (k). A direction whose
    order is below its number of tensors (k < n, e.g. a path that a skip connection keeps partly
    alive) is read as one normal form (k) too; its λ_block = 1/(2k) is then a lower bound, since
    components of orders k_i summing to k have λ_block = 1/(2 max k_i) ≥ 1/(2k), and a note says so.
    From k ≥ n + 2 on the split is not determined by k (Lin–Sq–Lin–Sq–Lin reads k = 7 over 3
    factors, truly (4, 2, 1)): the default has the largest top order, so its λ_block is a lower
    bound and its m_block can be too low; a note says so (`_split_note`), and
    ``component_orders[i]`` gives record i's orders (n integers ≥ 1 summing to k, checked; keys as
    for ``component_dims``). Live directions are regular (1/2 each) when ``count_live`` (otherwise
    they are only named in the notes); flat and curved gauges contribute nothing. Unresolved records
    and genuine ones with no order (``k`` null) are skipped and named in the notes; a malformed
    record raises ``ValueError`` (an unknown class, an order that is not an integer ≥ 1 or that its
    class cannot have, ``layers`` that is not a list of strings, an ``info["chain_length"]`` that is
    not an integer ≥ 1: `_check_records`).

    Component dimensions: 1 each, unless ``component_dims[i]`` gives them for record i (every
    key must be the integer index — Python or NumPy int — of a genuine record with an order, else
    ``ValueError``; the dimensions are integers ≥ 1, Python or NumPy). The read
    measures orders, not how many coordinates each crossing component has beyond what the live
    part absorbs: that is architecture (e.g. a dead unit of a rank-r linear layer pair has
    components of dimensions (fan-in − r, fan-out − r)). With dimension 1 the slice
    coefficient d/(2k) is a lower bound for wider components; it is exact for scalar units,
    width-1 chains and dead paths through square linear layers of deficiency one. The error in
    m goes the other way: components of dimension 1 and equal order tie, where wider ones often
    do not, so m can be too high (a(b·x) with x in R², i.e. RRR(2, 1, 1, 0): (1/2, 2) with the
    default, (1/2, 1) with ``component_dims={i: (2, 1)}``). One note names the genuine crossings
    (records of n ≥ 2 factors) left at the default (`_default_dims_note`).

    A genuine record whose ``info`` has ``"one_sided"`` (the read found F = 0 along −u on the
    record's window) is still counted as read, but a note names it: if K vanishes on an open set
    next to θ0 (a ReLU unit that one-signed inputs or a bias can switch off), the local λ there
    is 0 and the block's contribution an overestimate (docs/triple.md §5, "One-sided ReLU
    units").

    A record whose labelled-loss check (``info["loss_along_u"]``, present when the read had
    labels) found θ0 on a slope or curved downward along it gets a note: the orders are then the
    parametrization's at θ0, and (λ, m) are Watanabe's only at a true parameter (s20 AO #2).

    Two or more genuine records crossing the same ``layers`` (e.g. two dead units of one
    reduced-rank-regression layer pair) are still separate blocks, but a note names them: such
    units may mix into a determinantal structure that does not split into independent crossings
    (docs/triple.md §4), and the blocks' sum is then not the closed form.
    """
    records = _records(reading)
    _check_records(records)
    _check_component_dims(records, component_dims)
    _check_component_dims(records, component_orders, "component_orders")
    loci: list[Locus] = []
    notes: list[str] = []
    shared: dict[tuple[str, ...], list[str]] = {}
    default_dims: list[str] = []
    not_minimum: list[str] = []
    for i, rec in enumerate(records):
        klass, k = _class_of(rec), _field(rec, "k")
        k = None if k is None else int(k)  # an integer >= 1 (_check_records)
        name = _record_name(i, rec)
        if _not_minimum(rec):
            not_minimum.append(name)
        if klass in _GAUGES:
            loci.append(Locus(name, "gauge", dim=1))
        elif klass == _LIVE:
            if count_live:
                loci.append(Locus(name, "regular", dim=1))
            else:
                notes.append(f"{name}: live direction, counted in the caller's regular_dims")
        elif klass == _GENUINE and k is not None:
            n = _n_factors(rec)
            if component_orders and i in component_orders:
                orders = _given_orders(i, component_orders[i], k, n)
            elif n >= 2 and k >= n:
                orders = (k - n + 1,) + (1,) * (n - 1)
                if k >= n + 2:
                    notes.append(_split_note(name, k, n))
            else:
                orders = (k,)
                if n >= 2:
                    notes.append(
                        f"{name}: order k={k} below its {n} factors; read as one normal form "
                        f"t^{2 * k}, so its λ_block = 1/(2k) = {Fraction(1, 2 * k)} is a lower "
                        f"bound (a crossing of components whose orders k_i sum to k has "
                        f"λ_block = 1/(2 max k_i) ≥ 1/(2k))"
                    )
            dims = tuple(component_dims[i]) if component_dims and i in component_dims else ()
            if dims and len(dims) != len(orders):
                raise ValueError(
                    f"component_dims[{i}] must have {len(orders)} entries (one per factor of "
                    f"the orders {orders}), got {dims}"
                )
            if not dims and len(orders) >= 2 and not _scalar_tensors(rec):
                default_dims.append(name)
            info = _field(rec, "info")
            if isinstance(info, Mapping) and info.get("one_sided") is not None:
                notes.append(_one_sided_note(name, orders, dims or (1,) * len(orders)))
            loci.append(Locus(name, "genuine", orders=orders, dims=dims, block=name))
            layers = tuple(map(str, _field(rec, "layers") or ()))
            if layers:
                shared.setdefault(layers, []).append(name)
        else:
            notes.append(f"{name}: skipped (class {klass!r}, k={k!r})")
    for layers, names in shared.items():
        if len(names) >= 2:
            notes.append(
                f"genuine records {', '.join(names)} cross the same layers "
                f"{'+'.join(layers)}: several dead units of one layer set may mix into a "
                f"determinantal (non-enumerable) structure, e.g. two dead units of reduced-rank "
                f"regression under GL(2) (docs/triple.md §4, 'Where the assembly stops'); they "
                f"are added here as independent blocks, whose sum is then not the closed form "
                f"(there: λ = 5 as two blocks against 9/2 for (5, 2, 5, 0)); use the closed "
                f"forms or posterior sampling"
            )
    if default_dims:
        notes.append(_default_dims_note(default_dims))
    if not_minimum:
        notes.append(
            f"θ0 is not a minimum of the labelled probe loss along {', '.join(not_minimum)} "
            f"(info['loss_along_u']: a slope or a downward curvature beyond its threshold): "
            f"the orders describe the parametrization at θ0, and this (λ, m) is Watanabe's "
            f"only at a true parameter (docs/triple.md §4)"
        )
    return loci, notes


def _split_note(name: str, k: int, n: int) -> str:
    """The note for a genuine record whose order ``k ≥ n + 2`` over ``n`` factors has several
    splits into orders ``k_i ≥ 1`` (s30 trial TRIPLE F1: Lin–Sq–Lin–Sq–Lin, K ∝ c²b⁴a⁸, reads k = 7
    over 3 factors; the default (5, 1, 1) gives (1/10, 1) where the truth (4, 2, 1), in layer order,
    is (1/8, 1); Lin–Tanh–Lin–Sq–Lin, (2, 2, 1), gives (1/6, 1) for (1/4, 2)). The default split has
    the largest possible top order, so its λ_block is the least the read allows; the most even
    split, top order ⌈k/n⌉, gives the most."""
    low, high = Fraction(1, 2 * (k - n + 1)), Fraction(1, 2 * -(-k // n))
    return (
        f"{name}: order k={k} over {n} factors is split as {(k - n + 1,) + (1,) * (n - 1)} "
        f"(layer order, input side first), "
        f"but any orders k_i ≥ 1 summing to {k} fit the read (the Fisher along a chain measures "
        f"their sum only): its λ_block = {low} is a lower bound (the most even split gives "
        f"{high}) and its m_block = 1 may be too low (components tied at the top order); pass "
        f"the orders the architecture fixes with component_orders"
    )


def _not_minimum(rec: Any) -> bool:
    """Whether the record's labelled-loss check (``info["loss_along_u"]``,
    `neuromanifold.singular.minimum_check.loss_along`) found a slope or a downward curvature."""
    info = _field(rec, "info")
    check = info.get("loss_along_u") if isinstance(info, Mapping) else None
    return isinstance(check, Mapping) and bool(
        check.get("not_critical") or check.get("curved_down")
    )


def _one_sided_note(name: str, orders: Sequence[int], dims: Sequence[int]) -> str:
    """The note for a genuine record that reads flat along −u (s20 AO #1)."""
    lam = _crossing(list(zip(orders, dims, strict=True)))[0]
    return (
        f"{name}: counted as read (λ_block = {lam}), but the Fisher vanishes along "
        f"−u (info['one_sided']): if K vanishes on an open set next to θ0 (a ReLU unit that "
        f"one-signed inputs or a bias can switch off) the local λ there is 0 and this block's "
        f"contribution an overestimate (docs/triple.md §5, 'One-sided ReLU units')"
    )


def _scalar_tensors(rec: Any) -> bool:
    """Whether every tensor the record's direction moves has one entry, by the ``size`` its
    ``info["support"]`` records (`neuromanifold.singular.support.direction_support`): its
    components are then 1-dimensional exactly. False when the support or a size is missing
    (a record written before the sizes, or built by hand). The entry count, not the unit and
    input counts: a ``Conv1d(1, 1, k)`` kernel has one of each and k entries (s20 audit AR #1)."""
    info = _field(rec, "info")
    support = info.get("support") if isinstance(info, Mapping) else None
    if not support or not isinstance(support, Sequence):
        return False
    return all(isinstance(e, Mapping) and e.get("size") == 1 for e in support)


def _default_dims_note(names: Sequence[str]) -> str:
    """The note for genuine crossings whose component dimensions were not given (s20 AO #3)."""
    return (
        f"genuine records {', '.join(names)} cross n >= 2 factors and no component_dims were "
        f"given: each component is taken as 1-dimensional, which is exact for scalar units and "
        f"width-one chains; for wider components λ is a lower bound and m can be too high "
        f"(1-dimensional components of equal order tie where wider ones do not: a(b·x) with "
        f"x in R² assembles to (1/2, 2) by default, against the true (1/2, 1)); give these "
        f"records' dimensions (component_dims in Python, --component-dims I:D1,D2 in "
        f"`neuromanifold triple read`)"
    )


def assemble_from_reading(
    reading: Any,
    *,
    regular_dims: int | None = None,
    component_dims: Mapping[int, Sequence[int]] | None = None,
    component_orders: Mapping[int, Sequence[int]] | None = None,
) -> Assembly:
    """(λ, m) of the structure a read found, by :func:`loci_from_reading` and :func:`assemble`.

    The read lists the directions its detectors proposed, not an enumeration of the live
    parameters: with ``regular_dims=None`` the result is the contribution of the read loci, each
    live record counting 1/2. When the caller enumerates the live part (``regular_dims``, e.g.
    the live parameter count minus its gauge dimension), that count replaces the live records
    (which are then only noted, not added twice); a count below the number of live records
    contradicts the reading and raises ``ValueError`` (it would drop directions the read
    found). For a model whose parameters are all in the read structure (one-node cells, width-1
    chains) the result is the global (λ, m).

    Where θ0 must lie: (λ, m) are Watanabe's learning coefficient and multiplicity only when the
    read point θ0 is a true parameter (θ0 ∈ W₀, the model at θ0 realises the data distribution,
    as at a minimum of the population loss). The read cannot check this; with labels it tests
    two necessary conditions on the probe loss, the slope and curvature along each genuine or
    live record (``info["loss_along_u"]``) and the whole gradient (``meta["critical_check"]``),
    and a note names what they flag (:func:`_critical_notes`). At another point
    (a saddle, an unconverged checkpoint) the numbers describe the singularity of the read
    structure at θ0 only; an SGLD local learning coefficient there measures something else and
    can be negative (a saddle of Linear→Tanh→Linear read as (1/2, 2) gave −22).

    ``regular_dims`` is an integer ≥ 0 (Python or NumPy) or ``None``. ``component_dims`` and
    ``component_orders``: see :func:`loci_from_reading`. A reading that left directions out
    (``max_directions``, or a detector cap that cut dead directions: ``meta["truncated"]``)
    gets a note saying so; after a cap cut of dead directions m and λ are lower bounds. Genuine
    records on a factor the probe set under-samples (``meta["probe_rank_limited"]``) are named
    in a note as possible probe-size artefacts (:func:`_probe_size_notes`).

    The result states its scope (also in its JSON): ``regular_dims_given`` whether
    ``regular_dims`` was given and ``scope`` what λ covers (`READ_ONLY_SCOPE` without it,
    `REGULAR_DIMS_SCOPE` with it); ``reading_note`` is the Reading's own one-line note. When no
    direction counts toward λ (no genuine record with an order, no live record, no
    ``regular_dims``: an empty reading, or gauges only) the result is λ = 0, m = 1 and a note
    says that nothing was counted.
    """
    if regular_dims is not None and (
        isinstance(regular_dims, bool) or not isinstance(regular_dims, Integral) or regular_dims < 0
    ):
        raise ValueError(f"regular_dims must be an int >= 0 or None, got {regular_dims!r}")
    regular_dims = None if regular_dims is None else int(regular_dims)  # NumPy ints too
    if not isinstance(reading, Mapping) and not hasattr(reading, "directions"):
        # an iterable of records is read several times below: a generator would be used up by
        # the first pass and the live count taken on nothing (s17 audit AH #1)
        reading = _records(reading)
    loci, notes = loci_from_reading(
        reading,
        component_dims=component_dims,
        component_orders=component_orders,
        count_live=regular_dims is None,
    )
    n_live = sum(_class_of(rec) == _LIVE for rec in _records(reading))
    if regular_dims is not None and regular_dims < n_live:
        raise ValueError(
            f"regular_dims = {regular_dims} is below the {n_live} live directions the reading "
            f"found: regular_dims is the dimension of the live part, which contains them; pass "
            f"at least {n_live}, or None to count the live records (1/2 each)"
        )
    notes = (
        _critical_notes(reading) + _truncation_notes(reading) + _probe_size_notes(reading) + notes
    )
    if regular_dims:
        loci.append(Locus("caller: regular directions", "regular", dim=regular_dims))
    if not any(loc.kind in ("genuine", "regular") for loc in loci):
        notes.append(_nothing_counted_note(_records(reading)))
    return replace(
        assemble(loci, notes=notes),
        regular_dims_given=regular_dims is not None,
        scope=READ_ONLY_SCOPE if regular_dims is None else REGULAR_DIMS_SCOPE,
        reading_note=_reading_note(reading),
    )


def _nothing_counted_note(records: Sequence[Any]) -> str:
    """The note for an assembly in which no direction counts toward λ (s17 trial AE #10)."""
    counts: dict[str, int] = {}
    for rec in records:
        counts[_class_of(rec)] = counts.get(_class_of(rec), 0) + 1
    what = (
        "the reading has no direction records"
        if not records
        else "the reading's records are "
        + ", ".join(f"{n} {klass}" for klass, n in counts.items())
        + " (none a genuine record with an order or a live record)"
    )
    return (
        f"no direction counted toward λ: {what}, and regular_dims adds no regular direction; "
        f"λ = 0, m = 1 are the values of an empty structure, and ν(1) = 1/2 is the per-direction "
        f"reference of one regular direction, not of a direction found here"
    )


def _reading_note(reading: Any) -> str:
    """The one-line ``note`` of a `Reading` or its JSON (``""`` for a bare iterable of records)."""
    note = reading.get("note") if isinstance(reading, Mapping) else getattr(reading, "note", None)
    return note if isinstance(note, str) else ""


def _truncation_notes(reading: Any) -> list[str]:
    """Notes for a reading that read or proposed fewer directions than it found, from its ``meta``
    (a `Reading` or its JSON) and its records' ``info["truncated"]``.

    * ``max_directions`` (``meta["n_read"] < meta["n_candidates"]``): the assembly covers the read
      directions only.
    * A detector cap (``meta["truncated"]`` entries and records' ``info["truncated"]``, each
      ``{"cap", "found", "kept"}`` for one block and detector kind): noted when the cut kind holds
      dead directions, i.e. duality chains or a kind with a record classed genuine in this
      reading. Each cut dead direction is one more genuine block, which adds to λ and never
      lowers m (``m = 1 + Σ(m_b − 1)``), so the assembled m and λ are lower bounds. Cuts of gauge
      generators or of live modes change neither and are not noted.
    """
    notes: list[str] = []
    meta = _meta(reading)
    found, read_ = meta.get("n_candidates"), meta.get("n_read")
    if isinstance(found, int) and isinstance(read_, int) and read_ < found:
        notes.append(
            f"the reading read {read_} of the {found} candidate directions it detected "
            f"(max_directions): the unread ones are not in this assembly"
        )
    try:
        records = _records(reading)
    except TypeError:
        records = []
    cuts: dict[tuple[tuple[str, ...], str], Mapping[str, Any]] = {}
    entries = meta.get("truncated")
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("layers"), list | tuple):
            cuts.setdefault((tuple(map(str, entry["layers"])), str(entry.get("detector"))), entry)
    genuine_kinds: set[tuple[tuple[str, ...], str]] = set()
    for rec in records:
        key = (tuple(map(str, _field(rec, "layers") or ())), str(_field(rec, "detector")))
        info = _field(rec, "info")
        cut = info.get("truncated") if isinstance(info, Mapping) else None
        if isinstance(cut, Mapping):
            cuts.setdefault(key, cut)
        if _class_of(rec) == _GENUINE:
            genuine_kinds.add(key)
    for (layers, detector), cut in cuts.items():
        if detector != "duality" and (layers, detector) not in genuine_kinds:
            continue
        notes.append(
            f"{detector} on {'+'.join(layers)} found {cut.get('found')} directions and kept "
            f"{cut.get('kept')} (cap {cut.get('cap')}): the cut ones are not in this assembly, "
            f"so m and λ are lower bounds"
        )
    return notes


def _critical_notes(reading: Any) -> list[str]:
    """The reading's whole-gradient check (``meta["critical_check"]``,
    `neuromanifold.singular.critical_check`) as a note when it found θ0 not critical or could not
    run; none otherwise (and none for a reading without labels, which has no check)."""
    note = critical_note(_meta(reading).get("critical_check"))
    return [note] if note else []


def _meta(reading: Any) -> Mapping[str, Any]:
    """``meta`` of a `Reading` or its JSON (empty for a bare iterable of records)."""
    meta = reading.get("meta") if isinstance(reading, Mapping) else getattr(reading, "meta", None)
    return meta if isinstance(meta, Mapping) else {}


def _probe_size_notes(reading: Any) -> list[str]:
    """A note naming the genuine records that lie on a factor the probe set under-samples.

    ``meta["probe_rank_limited"]`` (written by `read`, see
    :func:`neuromanifold.singular.probe_rank.rank_limited`) lists the K-FAC factors with fewer
    contributing rows than their side, each ``{"layer", "factor", "dim", "rows", "n_min"}``. Part
    of such a factor's kernel belongs to the probe set: a G-kernel direction then reads
    ``genuine_singularity`` of order 2 and is regular on a larger probe set (docs/order_read.md,
    "Probe-set size"). A genuine record is named when one of its layers has a listed factor on
    the side its detector reads: ``G`` for ``kfac-G``, ``A`` for ``kfac-A``, either for every
    other detector (a duality chain links a G-kernel to the next layer's A-kernel). The note
    does not change λ or m: they count these records as genuine blocks.
    """
    limited: dict[tuple[str, str], Mapping[str, Any]] = {}
    entries = _meta(reading).get("probe_rank_limited")
    for entry in entries if isinstance(entries, list | tuple) else ():
        if isinstance(entry, Mapping) and "layer" in entry:
            limited.setdefault((str(entry["layer"]), str(entry.get("factor"))), entry)
    if not limited:
        return []
    try:
        records = _records(reading)
    except TypeError:
        return []
    names: list[str] = []
    hit: dict[tuple[str, str], Mapping[str, Any]] = {}
    for i, rec in enumerate(records):
        if _class_of(rec) != _GENUINE:
            continue
        layers = tuple(map(str, _field(rec, "layers") or ())) or (str(_field(rec, "layer")),)
        detector = str(_field(rec, "detector"))
        sides = {"kfac-G": ("G",), "kfac-A": ("A",)}.get(detector, ("A", "G"))
        keys = [(layer, side) for layer in layers for side in sides if (layer, side) in limited]
        if keys:
            names.append(_record_name(i, rec))
            hit.update((key, limited[key]) for key in keys)
    if not names:
        return []
    factors = "; ".join(
        f"factor {side} of {layer!r}: {e.get('rows')} contributing rows for {e.get('dim')} "
        f"dimensions"
        for (layer, side), e in hit.items()
    )
    n_min = max(
        (e.get("n_min") for e in hit.values() if isinstance(e.get("n_min"), int)), default=None
    )
    again = (
        f"read again with N well above {n_min}"
        if n_min is not None
        else "read again on more samples"
    )
    return [
        f"genuine records {', '.join(names)} lie on under-sampled factors ({factors}; "
        f"meta['probe_rank_limited']): they may be probe-size artefacts, regular on a larger "
        f"probe set (docs/order_read.md, 'Probe-set size'). λ and m count them as genuine "
        f"blocks, and a cap note's 'lower bounds' holds only if they are genuine; {again}"
    ]
