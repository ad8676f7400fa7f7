"""A genuine record read flat along −u (``info["one_sided"]``) is named in a note (s20 AO #1).

The block is still counted as read, so (λ, m) do not change; the note says that if K vanishes
on an open set next to θ0 (a ReLU unit its inputs or bias can switch off) the local λ there is 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pytest

from neuromanifold.singular.assembly import assemble_from_reading, loci_from_reading

ONE_SIDED = {"t": [1e-3, 1e-2], "F_minus": [0.0, 0.0]}
NOTE = "the Fisher vanishes along −u"


def _rec(k: int, layers: tuple[str, ...], info: dict[str, Any] | None = None) -> dict:
    rec = {"class": "genuine_singularity", "k": k, "layer": layers[0], "layers": list(layers)}
    if info is not None:
        rec["info"] = info
    return rec


@dataclass
class _Record:
    """An attribute-style record, as a DirectionRecord is read (``rec.info``)."""

    klass: str
    k: int
    layers: tuple[str, ...]
    layer: str
    info: dict[str, Any] = field(default_factory=dict)


def _one_sided_notes(notes: Any) -> list[str]:
    return [n for n in notes if NOTE in n]


def test_dict_record_with_one_sided_info_is_noted_and_numbers_unchanged() -> None:
    sided = [_rec(2, ("0", "2"), {"one_sided": ONE_SIDED}), _rec(3, ("4", "6"))]
    plain = [_rec(2, ("0", "2")), _rec(3, ("4", "6"))]
    _, notes = loci_from_reading(sided)
    [note] = _one_sided_notes(notes)
    assert note.startswith("0:0:direction:") and "local λ there is 0" in note
    assert "(λ_block = 1/2)" in note
    a, b = assemble_from_reading(sided), assemble_from_reading(plain)
    assert (a.lam, a.m) == (b.lam, b.m) == (Fraction(1, 2) + Fraction(1, 4), 2)
    assert _one_sided_notes(b.notes) == []


def test_object_record_with_one_sided_info_is_noted() -> None:
    recs = [
        _Record("genuine_singularity", 2, ("0", "2"), "0", {"one_sided": ONE_SIDED}),
        _Record("genuine_singularity", 2, ("3", "5"), "3", {"chain_length": 2}),
    ]
    [note] = _one_sided_notes(assemble_from_reading(recs).notes)
    assert note.startswith("0:0:direction:")


@pytest.mark.parametrize("info", [None, {}, {"one_sided": None}, {"chain_length": 2}])
def test_no_one_sided_info_no_note(info: dict[str, Any] | None) -> None:
    _, notes = loci_from_reading([_rec(2, ("0", "2"), info)])
    assert _one_sided_notes(notes) == []


def test_one_sided_note_uses_the_given_component_dims() -> None:
    recs = [_rec(2, ("0", "1"), {"one_sided": ONE_SIDED})]
    [note] = _one_sided_notes(loci_from_reading(recs, component_dims={0: (3, 2)})[1])
    assert "(λ_block = 1)" in note  # min(3/2, 2/2), not the default 1/2
