"""A genuine crossing left at the default component dimensions gets one note (s20 AO #3).

With dimension 1 per component, a crossing of wider components assembles λ too low and m too
high: a(b·x) with x in R² (reduced-rank regression (2, 1, 1, 0)) gives (1/2, 2) against the true
(1/2, 1). The note names such records and disappears once ``component_dims`` covers them; the
numbers are never changed by it.
"""

from __future__ import annotations

from fractions import Fraction

import torch
from torch import nn

import neuromanifold as nm
from neuromanifold.singular import Gaussian
from neuromanifold.singular.assembly import assemble_from_reading, loci_from_reading
from neuromanifold.singular.closed_forms import rrr

D = torch.float64
N_PROBE = 256
NOTE = "no component_dims were given"


def _rec(klass: str, k: int | None, layers: tuple[str, ...]) -> dict:
    return {"class": klass, "k": k, "layer": layers[0], "layers": list(layers)}


def _dims_notes(notes: tuple[str, ...] | list[str]) -> list[str]:
    return [n for n in notes if NOTE in n]


def test_a_bx_read_notes_the_default_dims_and_component_dims_fix_m() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 1, bias=False), nn.Linear(1, 1, bias=False)).to(D)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    reading = nm.read(model, torch.randn(N_PROBE, 2, dtype=D), Gaussian())
    genuine = [i for i, d in enumerate(reading.directions) if d.klass == "genuine_singularity"]
    assert len(genuine) == 1
    default = assemble_from_reading(reading)
    assert (default.lam, default.m) == (Fraction(1, 2), 2)  # unchanged: the note only warns
    [note] = _dims_notes(default.notes)
    assert "m can be too high" in note and "λ is a lower bound" in note
    assert f"{genuine[0]}:" in note  # names the record
    given = assemble_from_reading(reading, component_dims={genuine[0]: (2, 1)})
    truth = rrr(2, 1, 1, 0)
    assert (given.lam, given.m) == (truth.lam, truth.m) == (Fraction(1, 2), 1)
    assert _dims_notes(given.notes) == []


def test_one_note_names_every_default_crossing_and_only_those() -> None:
    records = [
        _rec("genuine_singularity", 2, ("0", "2")),  # crossing (1, 1): default dims
        _rec("genuine_singularity", 3, ("a", "b", "c")),  # chain (1, 1, 1): default dims
        _rec("genuine_singularity", 2, ("w",)),  # one tensor: a 1-D normal form, no dims
        _rec("genuine_singularity", 2, ("p", "q", "r")),  # k < n: one normal form (k,)
        _rec("live", 1, ("0",)),
    ]
    _, notes = loci_from_reading(records)
    [note] = _dims_notes(notes)
    assert "0:0:direction" in note and "1:a:direction" in note
    assert "2:w:direction" not in note and "3:p:direction" not in note
    # covering one of the two leaves the other named; covering both removes the note
    _, notes = loci_from_reading(records, component_dims={0: (1, 1)})
    [note] = _dims_notes(notes)
    assert "0:0:direction" not in note and "1:a:direction" in note
    both = {0: (1, 1), 1: (1, 1, 1)}
    _, notes = loci_from_reading(records, component_dims=both)
    assert _dims_notes(notes) == []
    plain, given = (
        assemble_from_reading(records),
        assemble_from_reading(records, component_dims=both),
    )
    assert (plain.lam, plain.m) == (given.lam, given.m)  # dims of 1 given explicitly: same numbers


def test_a_scalar_cell_gets_no_default_dims_note() -> None:
    """y = a·tanh(b x) at 0 (scalar weights): dimension 1 is exact, so the note would only be
    noise (s20 audit AP #5); the support's sizes say so. A record without sizes keeps it."""
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.Tanh(), nn.Linear(1, 1, bias=False))
    model = model.to(D)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    x = torch.randn(N_PROBE, 1, dtype=D, generator=torch.Generator().manual_seed(0))
    reading = nm.read(model, x, Gaussian(), progress=False)
    (rec,) = reading.directions
    assert (rec.klass, rec.k) == ("genuine_singularity", 2)
    assert all(e["n_units"] == 1 and e.get("n_inputs", 1) == 1 for e in rec.info["support"])
    a = assemble_from_reading(reading)
    assert (a.lam, a.m) == (Fraction(1, 2), 2)
    assert _dims_notes(a.notes) == []
    bare = assemble_from_reading([_rec("genuine_singularity", 2, ("0", "2"))])
    assert len(_dims_notes(bare.notes)) == 1


def test_a_conv_kernel_of_one_channel_is_not_a_scalar() -> None:
    """a(b·x) with x in R² built from Conv1d(1, 1, 2) → tanh → Conv1d(1, 1, 1): the first
    kernel has one output and one input channel but two entries, so dimension 1 is not exact and
    the note stays (s20 audit AR #1: the unit and input counts alone dropped it)."""
    model = nn.Sequential(
        nn.Conv1d(1, 1, 2, bias=False), nn.Tanh(), nn.Conv1d(1, 1, 1, bias=False), nn.Flatten()
    ).to(D)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    x = torch.randn(N_PROBE, 1, 2, dtype=D, generator=torch.Generator().manual_seed(0))
    reading = nm.read(model.eval(), x, Gaussian(), progress=False)
    genuine = [d for d in reading.directions if d.klass == "genuine_singularity"]
    assert genuine and {e["size"] for e in genuine[0].info["support"]} == {1, 2}
    assert len(_dims_notes(assemble_from_reading(reading).notes)) == 1
