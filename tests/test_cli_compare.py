"""`neuromanifold compare A B`: exit 0 when two saved readings agree up to rounding, 1 when they
differ (naming each difference), 2 when a file is not a Reading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from neuromanifold.cells.planted import planted_mlp
from neuromanifold.cli import app
from neuromanifold.report import write_reading_json
from neuromanifold.singular.read import read


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The planted MLP's reading, and the same model read with its probes permuted (every sum
    taken in another order)."""
    import torch

    net = planted_mlp()
    folder = tmp_path_factory.mktemp("readings")
    write_reading_json(read(net.model, net.data, net.family, progress=False), folder / "a.json")
    perm = torch.randperm(net.data.shape[0], generator=torch.Generator().manual_seed(3))
    again = read(net.model, net.data[perm], net.family, progress=False)
    write_reading_json(again, folder / "b.json")
    return folder


def _run(*args: str):
    return CliRunner().invoke(app, ["compare", *args])


def test_two_reads_agree_and_exit_zero(saved: Path) -> None:
    res = _run(str(saved / "a.json"), str(saved / "b.json"))
    n = len(json.loads((saved / "a.json").read_text())["directions"])
    assert res.exit_code == 0, res.output
    count = f"{n} direction" if n == 1 else f"{n} directions"
    assert res.output.strip() == f"the readings agree up to rounding ({count})"


def test_a_difference_is_named_and_exits_one(saved: Path, tmp_path: Path) -> None:
    other = json.loads((saved / "a.json").read_text())
    other["directions"][0]["k"] = 7
    (tmp_path / "c.json").write_text(json.dumps(other))
    res = _run(str(saved / "a.json"), str(tmp_path / "c.json"))
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert lines[0] == "the readings differ (1 difference):"
    # the loaded Reading derives λ_dir from k, so both differ
    assert lines[1].startswith("  direction 0: k, lambda_dir differ: ") and "k=7" in lines[1]


def test_json_on_stdout_and_a_read_out_folder(saved: Path, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(saved / "b.json", folder / "report.json")  # what read --out DIR writes
    res = _run(str(saved / "a.json"), str(folder), "--json", "-")
    assert res.exit_code == 0
    assert json.loads(res.output) == {"agree": True, "differences": []}


def test_files_that_are_not_readings_exit_two(saved: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _run(str(saved / "a.json"), str(empty))
    assert res.exit_code == 2
    assert f"error: B {empty} is a folder without a report.json" in res.output
    (tmp_path / "x.json").write_text("[1, 2]")
    res = _run(str(tmp_path / "x.json"), str(saved / "a.json"))
    assert res.exit_code == 2
    assert "error: A: " in res.output and "does not hold a Reading as JSON" in res.output
    res = _run(str(tmp_path / "missing.json"), str(saved / "a.json"))
    assert res.exit_code == 2 and "error: A: " in res.output
