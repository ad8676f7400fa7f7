"""report: exact JSON round trip, Markdown tables, figures, atomic writes under a full disk."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest

from neuromanifold.cells.planted import planted_mlp
from neuromanifold.report import (
    atomic_write_text,
    load_reading,
    reading_json,
    reading_markdown,
    write_report,
)
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.nu import nu
from neuromanifold.singular.read import read
from neuromanifold.singular.reading import Reading

GRID = np.logspace(-3, 0, 14).tolist()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RTOL_PRINTED = 1e-3  # a value printed with four significant digits


@pytest.fixture(scope="module")
def planted():
    p = planted_mlp(n=48, seed=2)
    reading = read(p.model, p.data, p.family, grid=GRID, baseline=True, progress=False)
    return p, reading


def test_json_round_trip_is_exact(planted, tmp_path):
    _, reading = planted
    assert reading.directions and reading.directions[0].baseline  # the scan is archived too
    again = Reading.from_dict(json.loads(reading_json(reading)))
    assert again == reading
    files = write_report(reading, tmp_path, figures=False)
    assert load_reading(files.json) == reading


def test_markdown_has_a_table_per_layer_with_the_scan(planted):
    p, reading = planted
    md = reading_markdown(reading, title="planted")
    for layer in p.layers:
        assert f"### `{layer}`" in md
    rec = reading.directions[0]
    assert rec.klass == "genuine_singularity" and rec.k == p.expected_k
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()]
    cells = next(c for c in rows if len(c) > 1 and c[2] == "duality")
    assert cells[0] == "0"  # the record's number: its index in reading.directions
    assert cells[1] != ""  # where it sits in the layer (`layer_units`), "—" when nowhere
    assert cells[3:6] == ["genuine_singularity", str(p.expected_k), f"{rec.k_hat:.3f}"]
    # λ_dir = 1/(2k) and ν(k) of the read order (spec §7.2 step 7; ν(2) = 0.172973, spec §4)
    assert float(cells[6]) == pytest.approx(1 / (2 * p.expected_k), rel=RTOL_PRINTED, abs=0)
    assert cells[7] == f"{nu(p.expected_k):.6f}"
    assert cells[-1] != "—"  # coordinate scan beside the direction
    assert "\n### Not covered\n" in md


def test_markdown_says_what_each_column_holds(planted):
    """Under the tables a legend names every column, "magnitude" as c_k (s22 trial LM #8)."""
    _, reading = planted
    md = reading_markdown(reading)
    header = next(
        line for line in md.splitlines() if line.startswith("| #") and "magnitude" in line
    )
    columns = [c.strip() for c in header.strip("|").split("|")]
    legend = next(line for line in md.splitlines() if line.startswith("Columns:"))
    assert md.rindex(header) < md.index(legend) < md.index("### Not covered")
    # "#", units, detector and class explain themselves; the fit's columns are named
    for name in set(columns) - {"#", "units", "detector", "class"}:
        assert f"{name} " in legend or f"{name}:" in legend, name
    assert "magnitude is c_k, the median of F_u/t^{2(k−1)} over the window" in legend
    assert "coord. scan:" in legend  # this read ran with baseline=True
    assert "Columns:" not in reading_markdown(Reading(directions=[], not_covered=[], meta={}))


def test_a_snapped_sweep_is_marked_beside_its_offset(planted):
    """s23 trial VER #2: F recomputed at θ0 differed by 5–10 % from records read from the
    snapped point, and nothing in report.md said which those were."""
    import dataclasses

    _, reading = planted
    rec = reading.directions[0]
    plain = dataclasses.replace(rec, sweep={**rec.sweep, "base_shift": 0.0})
    snapped = dataclasses.replace(rec, sweep={**rec.sweep, "base_shift": -0.25})
    for r, mark in ((plain, ""), (snapped, "†")):
        md = reading_markdown(dataclasses.replace(reading, directions=(r,)))
        row = next(line for line in md.splitlines() if line.startswith("| 0 |"))
        assert row.strip("|").split("|")[-2].strip() == f"{rec.offset:.2g}{mark}"
        assert "marked † where the sweep started from the snapped point" in md


def test_figures_are_pngs(planted, tmp_path):
    p, reading = planted
    factors = kfac_factors(p.model, p.data, p.family)
    files = write_report(reading, tmp_path / "out", title="planted", factors=factors)
    assert set(files.figures) == {"sweeps", "spectra", "classes"}
    for path in files.figures.values():
        assert path.read_bytes()[:8] == PNG_MAGIC
    md = files.markdown.read_text()
    assert "![spectra](figures/spectra.png)" in md


def test_full_disk_leaves_the_old_report_intact(planted, tmp_path, monkeypatch):
    _, reading = planted
    out = tmp_path / "rep"
    write_report(reading, out, figures=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    shorter = Reading(reading.directions[:0], reading.not_covered, reading.meta, "changed")

    def disk_full(self: Path, data: bytes) -> int:
        with open(self, "wb") as fh:
            fh.write(data[: len(data) // 3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_report(shorter, out, figures=False)
    monkeypatch.undo()
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after == before  # same files, same bytes, no temporary left behind
    assert load_reading(out / "report.json") == reading


def test_failed_figure_keeps_old_figure(planted, tmp_path, monkeypatch):
    _, reading = planted
    out = tmp_path / "rep"
    files = write_report(reading, out)
    old = files.figures["sweeps"].read_bytes()
    import matplotlib.figure

    def fail(self, fname, **kwargs):
        Path(fname).write_text("partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", fail)
    with pytest.raises(OSError, match="No space left"):
        write_report(reading, out)
    assert files.figures["sweeps"].read_bytes() == old
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["classes.png", "sweeps.png"]


def test_atomic_write_interrupted_keeps_old(tmp_path, monkeypatch):
    target = tmp_path / "a.txt"
    atomic_write_text(target, "old")

    def interrupted(self: Path, data: bytes) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_errors(planted, tmp_path):
    _, reading = planted
    with pytest.raises(TypeError, match="reading must be a Reading; got dict"):
        write_report(reading.to_dict(), tmp_path)
    with pytest.raises(TypeError, match="reading must be a Reading; got dict"):
        reading_json(reading.to_dict())
    with pytest.raises(TypeError, match="reading must be a Reading; got str"):
        reading_markdown("x")
    with pytest.raises(ValueError, match=r"level must be an int in 1\.\.5; got 0"):
        reading_markdown(reading, level=0)
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(ValueError, match="out must be a directory"):
        write_report(reading, f)
    bad = tmp_path / "bad.json"
    bad.write_text('{"directions": []}')
    with pytest.raises(ValueError, match="does not hold a Reading"):
        load_reading(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match="does not hold a Reading"):
        load_reading(bad)


def test_markdown_says_whose_passes_a_data_parallel_read_counts(planted):
    """Under data parallelism the pass counts are rank 0's over its shard (PER_RANK_META)."""
    import dataclasses

    _, reading = planted
    one = reading_markdown(reading)
    fwd = reading.meta["n_forward_passes"]
    assert f"{fwd} forward / " in one and "shard" not in one
    shard = {"world_size": 2, "rank": 0, "n_samples_local": 24, "shard": [0, 24]}
    two = dataclasses.replace(reading, meta={**reading.meta, **shard})
    md = reading_markdown(two)
    assert "backward passes on rank 0's shard of 24 samples (each of the 2 ranks" in md


def test_a_flat_plateau_fit_is_shown_in_parentheses(planted):
    """s26 trial CNN #15: a flat gauge on a rounding plateau kept "k̂ 1.000, r² 1.0000" as if an
    order had been read; the table now shows that fit in parentheses, and the legend says why."""
    import dataclasses

    _, reading = planted
    rec = reading.directions[0]
    flat = dataclasses.replace(
        rec, klass="flat_gauge", k=None, k_hat=1.0, slope=0.0, r2=1.0, magnitude=2.3e-25
    )
    md = reading_markdown(dataclasses.replace(reading, directions=(flat,)), title="flat")
    row = next(line for line in md.splitlines() if line.startswith("| 0 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5] == "(1.000)" and cells[8] == "(0.000)" and cells[9] == "(1.0000)"
    assert cells[4] == "—"  # no order
    assert "(…) marks the fit of a flat gauge's plateau" in md
    # an ordered record keeps its plain numbers
    md = reading_markdown(reading, title="planted")
    assert "(" + format(rec.k_hat, ".3f") + ")" not in md
