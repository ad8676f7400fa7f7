"""Assembly of a global (λ, m) from typed loci, with ν(k) of the dominant order.

A :class:`Locus` is one enumerated piece of singular structure through the point θ*:

* ``kind="genuine"``: a crossing of components i with transverse KL orders k_i and dimensions
  d_i (K ≍ Π_i ρ_i^{2k_i}, ρ_i the norm of the component's d_i coordinates); a single normal-form
  direction t^{2k} is one component (k, 1).
* ``kind="regular"``: ``dim`` regular directions (K ≍ Σ y_j²), each contributing 1/2.
* ``kind="gauge"``: a symmetry orbit (flat or curved); it contributes nothing to (λ, m).

Rules (spec §5; Watanabe's volume laws, with the crossing rule's Jacobian weight ρ^{d−1}):

1. Genuine loci sharing a ``block`` id are components of one crossing (rule 2):
   λ_block = min_i d_i/(2k_i), m_block = #{i : d_i/(2k_i) = λ_block}. With d_i = 1 this is
   λ = 1/(2 max k_i) and m = the number of components tied at the maximal order.
2. Different blocks are independent coordinates and add (rule 1, under (G⁺)):
   λ = Σ_blocks λ_block + (Σ regular dims)/2,  m = 1 + Σ_blocks (m_block − 1).
3. Regular loci add d/2 and leave m unchanged, whatever their block; gauge loci add nothing.

Single-locus assumption: m is read from the enumerated structure as if each block were one
crossing through θ* (no further loci meeting it); the result states this in ``assumption``.
``nu_universal`` is ν(k) of the dominant order k (the largest component order), the universal
upper reference for the fluctuation of that direction, not the realized value.

References: S. Watanabe, Algebraic Geometry and Statistical Learning Theory (2009);
T. P. Shirodkar, arXiv:2606.05957 (volume laws), arXiv:2607.00603 (assembly from orders).

>>> node = Locus("unit0", "genuine", orders=(1, 1), block="unit0")
>>> assemble([node]).lam, assemble([node]).m
(Fraction(1, 2), 2)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from neuromanifold.singular.nu import nu

__all__ = [
    "SINGLE_LOCUS_ASSUMPTION",
    "Assembly",
    "BlockTriple",
    "Locus",
    "LocusKind",
    "assemble",
]

LocusKind = Literal["genuine", "regular", "gauge"]
_KINDS = ("genuine", "regular", "gauge")

SINGLE_LOCUS_ASSUMPTION = (
    "single-locus assumption: each block is one crossing of the listed components through θ*; "
    "m counts the components tied at the block's minimum and blocks add (m = 1 + Σ(m_b − 1)); "
    "loci not enumerated here are assumed absent"
)


@dataclass(frozen=True)
class Locus:
    """One typed locus: a crossing component set (genuine), regular directions, or a gauge orbit.

    ``orders``: transverse KL orders k_i ≥ 1 of the components (genuine only). ``dims``: their
    dimensions d_i ≥ 1 (default all 1). ``dim``: number of regular directions (regular only) or
    the orbit dimension (gauge; reported, not counted). ``block``: independence group id.
    """

    name: str
    kind: LocusKind
    orders: tuple[int, ...] = ()
    dims: tuple[int, ...] = ()
    block: str = ""
    dim: int = 1

    def __post_init__(self) -> None:
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
                if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in seq):
                    raise ValueError(f"{label} must be ints >= 1, got {seq} (locus {self.name!r})")
            if len(self.dims) != len(self.orders):
                raise ValueError(
                    f"dims must match orders in length, got dims={self.dims}, "
                    f"orders={self.orders} (locus {self.name!r})"
                )
        elif self.orders:
            raise ValueError(
                f"orders must be empty for a {self.kind} locus, got {self.orders} "
                f"(locus {self.name!r})"
            )
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 0:
            raise ValueError(f"dim must be an int >= 0, got {self.dim!r} (locus {self.name!r})")

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
            block=d.get("block", ""),
            dim=int(d.get("dim", 1)),
        )


@dataclass(frozen=True)
class BlockTriple:
    """One crossing block: its components (k_i, d_i), λ_block, m_block and the loci in it."""

    block: str
    orders: tuple[int, ...]
    dims: tuple[int, ...]
    lam: Fraction
    m: int
    loci: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON form (λ as a string fraction and a float)."""
        return {
            "block": self.block,
            "orders": list(self.orders),
            "dims": list(self.dims),
            "lambda": str(self.lam),
            "lambda_float": float(self.lam),
            "m": self.m,
            "loci": list(self.loci),
        }


@dataclass(frozen=True)
class Assembly:
    """Global (λ, m) assembled from typed loci, plus ν(k) of the dominant order.

    ``lam`` exact; ``regular_dims`` the regular directions counted at 1/2 each; ``gauge`` the
    gauge loci ignored; ``dominant_order`` the largest component order (1 if none);
    ``nu_universal`` = ν(dominant_order); ``assumption`` the single-locus statement.
    """

    lam: Fraction
    m: int
    dominant_order: int
    nu_universal: float
    blocks: tuple[BlockTriple, ...]
    regular_dims: int
    gauge: tuple[str, ...]
    assumption: str = SINGLE_LOCUS_ASSUMPTION
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def lam_float(self) -> float:
        """λ as a float."""
        return float(self.lam)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``lambda`` the exact fraction as a string, ``lambda_float``, ``m``, …."""
        return {
            "lambda": str(self.lam),
            "lambda_float": float(self.lam),
            "m": self.m,
            "dominant_order": self.dominant_order,
            "nu_universal": self.nu_universal,
            "blocks": [b.to_dict() for b in self.blocks],
            "regular_dims": self.regular_dims,
            "gauge": list(self.gauge),
            "assumption": self.assumption,
            "notes": list(self.notes),
        }


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
            groups.setdefault(locus.block, []).append(locus)
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
    dominant = max((k for b in blocks for k in b.orders), default=1)
    return Assembly(
        lam=lam,
        m=m,
        dominant_order=dominant,
        nu_universal=nu(dominant),
        blocks=tuple(blocks),
        regular_dims=regular_dims,
        gauge=tuple(gauge),
        notes=tuple(notes),
    )
