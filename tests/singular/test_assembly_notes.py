"""Notes of the assembly from a read: what the numbers do not cover (user trial F, items 2–4).

The notes never change (λ, m): each test also checks the numbers against the rules (the
additive law λ = Σ λ_block, m = 1 + Σ(m_b − 1), docs/triple.md §3).
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from neuromanifold import read
from neuromanifold.cli import app
from neuromanifold.singular import Gaussian
from neuromanifold.singular.assembly import assemble_from_reading, loci_from_reading

runner = CliRunner()


def _rec(klass: str, k: int | None, layers: tuple[str, ...], detector: str) -> dict[str, Any]:
    return {
        "class": klass,
        "k": k,
        "layer": layers[0],
        "layers": list(layers),
        "detector": detector,
    }


def _limited(layer: str, factor: str, dim: int, rows: int, n_min: int) -> dict[str, Any]:
    """One `meta["probe_rank_limited"]` entry (the structure `probe_rank.rank_limited` writes)."""
    return {"layer": layer, "factor": factor, "dim": dim, "rows": rows, "n_min": n_min}


# --- item 2: genuine records on an under-sampled factor -------------------------------------


def _probe_limited_reading() -> dict[str, Any]:
    directions = [
        _rec("flat_gauge", None, ("2",), "kfac-A"),
        _rec("genuine_singularity", 2, ("0",), "kfac-G"),  # G of '0' limited: named
        _rec("genuine_singularity", 2, ("1",), "kfac-G"),  # only A of '1' limited: not named
        _rec("genuine_singularity", 2, ("3", "4"), "duality"),  # crosses A of '4': named
        _rec("live", 1, ("0",), "kfac-A"),
    ]
    meta = {
        "probe_rank_limited": [
            _limited("0", "G", 32, 16, 16),
            _limited("1", "A", 33, 8, 33),
            _limited("4", "A", 40, 8, 40),
        ]
    }
    return {"directions": directions, "meta": meta, "note": "factor G of '0' has 16 rows"}


def test_genuine_records_on_a_probe_limited_factor_are_named() -> None:
    reading = _probe_limited_reading()
    a = assemble_from_reading(reading)
    probe = [n for n in a.notes if "probe-size artefact" in n]
    assert len(probe) == 1, a.notes
    assert "1:0:kfac-G" in probe[0] and "3:3:duality" in probe[0]
    assert "2:1:kfac-G" not in probe[0]  # its G factor is fully sampled
    assert "factor G of '0'" in probe[0] and "factor A of '4'" in probe[0]
    assert "N well above 40" in probe[0]  # the largest n_min of the factors it names
    # the numbers are the rules' (three order-2 blocks: (1/4, 1), (1/4, 1), (1/2, 2); one live)
    assert (a.lam, a.m) == (Fraction(1, 4) + Fraction(1, 4) + Fraction(1, 2) + Fraction(1, 2), 2)
    plain = assemble_from_reading({**reading, "meta": {}})
    assert (plain.lam, plain.m) == (a.lam, a.m)
    assert not any("probe-size" in n for n in plain.notes)


def test_no_probe_note_without_a_genuine_record_on_a_limited_factor() -> None:
    reading = _probe_limited_reading()
    reading["directions"] = [reading["directions"][0], reading["directions"][2]]
    assert not any("probe-size" in n for n in assemble_from_reading(reading).notes)


def test_read_on_eight_samples_names_its_kfac_g_records() -> None:
    # trial F #2: 8 samples give G of the 32-wide layer 0 16 rows (Gaussian, 2 outputs): its
    # kernel reads genuine k = 2, which the read's own note calls a possible probe-size artefact
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 32), nn.GELU(), nn.Linear(32, 2)).double().eval()
    x = torch.randn(8, 3, dtype=torch.float64)
    r = read(model, x, Gaussian(1.0), progress=False)
    limited = {(e["layer"], e["factor"]) for e in r.meta["probe_rank_limited"]}
    genuine = [
        f"{i}:{d.layer}:{d.detector}"
        for i, d in enumerate(r.directions)
        if d.klass == "genuine_singularity"
    ]
    assert ("0", "G") in limited and genuine
    a = assemble_from_reading(r)
    probe = [n for n in a.notes if "probe-size artefact" in n]
    assert len(probe) == 1 and all(name in probe[0] for name in genuine)
    assert assemble_from_reading(r.to_dict()).notes == a.notes


def test_triple_read_prints_the_probe_note_and_the_readings_note(tmp_path: Path) -> None:
    path = tmp_path / "reading.json"
    path.write_text(json.dumps(_probe_limited_reading()))
    res = runner.invoke(app, ["triple", "read", "--reading", str(path)])
    assert res.exit_code == 0, res.output
    assert "reading note: factor G of '0' has 16 rows" in res.output
    assert "probe-size artefact" in res.output and "1:0:kfac-G" in res.output


# --- item 3: several genuine records on the same layers -------------------------------------


def test_two_dead_units_of_one_layer_pair_get_the_determinantal_note() -> None:
    # trial F #3: RRR (M, H, N, r) = (5, 3, 5, 1) reads two duality records on ('0', '1'); the
    # closed form is (8, 1), the two blocks give (17/2, 3) (docs/triple.md §4)
    M, N, r = 5, 5, 1
    records = [
        _rec("genuine_singularity", 2, ("0", "1"), "duality"),
        _rec("genuine_singularity", 2, ("0", "1"), "duality"),
        _rec("genuine_singularity", 2, ("2", "3"), "duality"),  # another pair: not named
        _rec("live", 1, ("0", "1"), "kfac-A"),
    ]
    dims = {i: (M - r, N - r) for i in range(3)}
    a = assemble_from_reading(records, regular_dims=r * (M + N - r), component_dims=dims)
    det = [n for n in a.notes if "determinantal" in n]
    assert len(det) == 1, a.notes
    assert "0:0:duality" in det[0] and "1:0:duality" in det[0] and "2:2:duality" not in det[0]
    assert "3:0:kfac-A" not in det[0] and "0+1" in det[0]
    # unchanged numbers: three blocks of slices (M−r)/2 = (N−r)/2 tied, plus r(M+N−r)/2
    slice_ = Fraction(M - r, 2)
    assert (a.lam, a.m) == (3 * slice_ + Fraction(r * (M + N - r), 2), 1 + 3 * (2 - 1))
    alone = assemble_from_reading(records[1:], regular_dims=r * (M + N - r))
    assert not any("determinantal" in n for n in alone.notes)


# --- item 4: the ν printed is per direction, not the model's ν ------------------------------


def test_triple_read_labels_nu_as_per_direction_not_the_models(tmp_path: Path) -> None:
    # trial F #4: two live records with --regular-dims 10 give λ = d/2 = 5; the ν printed is
    # ν(1) = 1/2 of one regular direction, while a regular model of dimension d has ν = d/2
    live = {"directions": [_rec("live", 1, (str(i),), "kfac-A") for i in range(2)], "meta": {}}
    path = tmp_path / "live.json"
    path.write_text(json.dumps(live))
    res = runner.invoke(app, ["triple", "read", "--reading", str(path), "--regular-dims", "10"])
    assert res.exit_code == 0, res.output
    line = next(s for s in res.output.splitlines() if "no genuine block" in s)
    assert "per regular direction" in line and "not the model's ν" in line and "d/2" in line
    res = runner.invoke(
        app, ["triple", "read", "--reading", str(path), "--regular-dims", "10", "--json", "-"]
    )
    data = json.loads(res.output)
    assert (data["lambda"], data["m"], data["nu_universal"]) == ("5", 1, 0.5)  # keys kept
    assert "not the model's ν" in data["nu_universal_scope"]
    node = {"directions": [_rec("genuine_singularity", 2, ("0", "2"), "duality")], "meta": {}}
    path.write_text(json.dumps(node))
    res = runner.invoke(app, ["triple", "read", "--reading", str(path)])
    line = next(s for s in res.output.splitlines() if s.startswith("dominant block"))
    assert "per-direction ν(k_diag) of the dominant direction" in line
    assert "not the model's ν" in line and "λ = 1/2 (0.5), m = 2" in res.output


# --- trial F: a genuine record whose order is below its number of tensors ------------------


def test_order_below_the_factor_count_is_noted_as_a_lower_bound_on_its_block():
    """k = 2 across 5 tensors: read as one normal form t^4, λ_block = 1/4; any crossing of
    components with orders summing to 2 has λ_block = 1/(2 max k_i) ≥ 1/4, so 1/4 bounds it
    from below, and the note says so."""
    reading = {"directions": [_rec("genuine_singularity", 2, ("a", "b", "c", "d", "e"), "skip")]}
    res = assemble_from_reading(reading)
    assert res.lam == Fraction(1, 4) and res.m == 1
    note = next(n for n in res.notes if "below its 5 factors" in n)
    assert "t^4" in note and "1/4 is a lower bound" in note


@pytest.mark.parametrize(
    ("reading", "message"),
    [
        ("runs/report.json", r"got str 'runs/report.json' \(a path\? load it with"),
        (b"{}", "got bytes"),
        ("", "got str ''"),
        ({}, r"got a mapping with keys \[\]"),
        ({"cells": []}, r"got a mapping with keys \['cells'\]"),
        ({"directions": None}, "its 'directions' must be a list, got NoneType"),
        (3, "got int"),
    ],
)
def test_what_is_not_a_reading_is_refused_saying_what_it_is(reading: object, message: str) -> None:
    """s34 trial TRIPLE D2: a path string and a dict without directions were iterated (their
    characters or keys read as records: "directions[0] has class 'None'"), and "" and {} gave
    λ = 0. An empty list of records is still a reading with nothing in it."""
    for f in (assemble_from_reading, loci_from_reading):
        with pytest.raises(TypeError, match=message):
            f(reading)
    assert assemble_from_reading([]).lam == 0
