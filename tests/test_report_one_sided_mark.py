"""report.md and the read CLI's table mark a one-sided record and say what it means (s20 audit AP,
suggestion: a one-sided record printed λ_dir = 0.25 with nothing beside it, though its own
reason says the local λ there may be 0)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.report.markdown import ONE_SIDED_FOOTNOTE, reading_markdown
from neuromanifold.singular import Gaussian
from neuromanifold.singular.read import read

MODULE = "nm_one_sided_cell"
CELL = """
from types import SimpleNamespace

import torch
from torch import nn

from neuromanifold.singular import Gaussian


def relu_cell(one_sided=True):
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.ReLU(), nn.Linear(1, 1, bias=False))
    model = model.double()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    x = torch.randn(128, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return SimpleNamespace(model=model.eval(), data=x.abs() if one_sided else x, family=Gaussian())


def two_sided():
    return relu_cell(one_sided=False)


def small():
    cell = relu_cell()
    cell.data = 3e-3 * cell.data  # magnitude ≈ 1e-5: printed as d.dde-0d, 8 characters
    return cell
"""


@pytest.fixture
def cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / f"{MODULE}.py").write_text(CELL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    import importlib

    return importlib.import_module(MODULE)


def _rows(md: str, klass: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()]
    return [r for r in rows if len(r) > 3 and r[3].startswith(klass)]


def test_report_marks_the_one_sided_record(cell) -> None:
    net = cell.relu_cell()
    reading = read(net.model, net.data, Gaussian(), progress=False)
    assert [("one_sided" in d.info, d.klass) for d in reading.directions] == [
        (True, "genuine_singularity")
    ]
    md = reading_markdown(reading, title="relu")
    rows = _rows(md, "genuine_singularity")
    assert rows and all(r[3] == "genuine_singularity*" for r in rows)
    assert md.count(ONE_SIDED_FOOTNOTE) == 1
    two = cell.two_sided()
    plain = reading_markdown(read(two.model, two.data, Gaussian(), progress=False), title="t")
    assert all(r[3] == "genuine_singularity" for r in _rows(plain, "genuine_singularity"))
    assert ONE_SIDED_FOOTNOTE not in plain


def test_the_cli_table_marks_it_too(cell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(
        app, ["read", "--model", f"{MODULE}:relu_cell"], env={"COLUMNS": "200"}
    )
    assert res.exit_code == 0, res.output
    assert "genuine_singularity*" in res.stdout
    assert '* one-sided: F vanishes along −u (info["one_sided"])' in res.stdout
    res = CliRunner().invoke(
        app, ["read", "--model", f"{MODULE}:two_sided"], env={"COLUMNS": "200"}
    )
    assert res.exit_code == 0, res.output
    assert "genuine_singularity*" not in res.stdout and "one-sided" not in res.stdout


def test_numbers_stay_whole_in_an_80_column_table(cell, tmp_path: Path, monkeypatch) -> None:
    """s20 audit AR #2: with the one-sided marker widening the class column, an 80-column table
    folded the magnitude 9.05e-06 into "9.05e-0" over "6", which reads as 9.05."""
    import json

    from rich.cells import cell_len

    monkeypatch.chdir(tmp_path)
    args = ["read", "--model", f"{MODULE}:small", "--json", "r.json"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    (rec,) = json.loads((tmp_path / "r.json").read_text())["directions"]
    shown = f"{rec['magnitude']:.3g}"
    assert "e-" in shown and len(shown) >= 8
    rows = [line for line in res.stdout.splitlines() if line.startswith("│")]
    assert [r.split("│")[-2].strip() for r in rows] == [shown] * len(rec["layers"])
    assert max(cell_len(line) for line in res.stdout.splitlines()) <= 80  # k̂: 2 chars, 1 cell
