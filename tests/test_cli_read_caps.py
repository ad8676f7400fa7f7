"""`read` says in its text output which detector caps cut candidates (s28 trial EXOTIC #7: the
cut was in the JSON's ``meta["truncated"]`` and the markdown report only)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.report.markdown import truncation_notes

FACTORY = "nm_six_dead_units"


def test_the_text_output_names_the_cap_that_cut_chains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six dead hidden units, four duality chains kept (the default cap): one line says so."""
    (tmp_path / f"{FACTORY}.py").write_text(
        "import torch\n"
        "from neuromanifold.cells.planted import planted_mlp\n"
        "def net():\n"
        "    p = planted_mlp(d_in=5, hidden=16, d_out=3, seed=0)\n"
        "    others = [j for j in range(16) if j != p.dead['0']][:5]\n"
        "    with torch.no_grad():\n"
        "        for j in (p.dead['0'], *others):\n"
        "            p.model[0].weight[j] = 0.0\n"
        "            p.model[0].bias[j] = 0.0\n"
        "            p.model[2].weight[:, j] = 0.0\n"
        "    return p.model\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, FACTORY, raising=False)
    from neuromanifold.cells.planted import planted_mlp

    torch.save(planted_mlp(d_in=5, hidden=16, d_out=3, seed=0).data, tmp_path / "x.pt")
    args = ["read", "--model", f"{FACTORY}:net", "--data", str(tmp_path / "x.pt")]
    res = CliRunner().invoke(app, [*args, "--max-directions", "2"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    said = "cap: duality on 0, 2 found 6 directions and kept 4 (cap 4): the others were not read"
    assert said in res.output


def test_generator_caps_read_as_a_partial_span() -> None:
    cut = {"layers": ["a", "b"], "detector": "relu-rescale", "cap": 3, "found": 9, "kept": 3}
    (line,) = truncation_notes({"truncated": [{**cut, "of": "generators"}]}, lambda s: f"`{s}`")
    assert line.startswith("`relu-rescale` on `a`, `b` keeps 3 of its 9 gauge generators (cap 3)")
    assert truncation_notes({}) == []
