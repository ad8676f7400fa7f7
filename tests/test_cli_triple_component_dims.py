"""`neuromanifold triple read --component-dims I:D1,D2` (s20 audit AP #5: the default-dims note
asked CLI users for component_dims, which only Python could take)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from neuromanifold.cells.planted import planted_mlp
from neuromanifold.cli import app
from neuromanifold.singular.read import read

RUNNER = CliRunner()
ENV = {"COLUMNS": "300"}


@pytest.fixture(scope="module")
def planted_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    net = planted_mlp()
    path = tmp_path_factory.mktemp("triple") / "planted.json"
    path.write_text(json.dumps(read(net.model, net.data, net.family, progress=False).to_dict()))
    return path


def _triple(path: Path, *args: str) -> object:
    return RUNNER.invoke(app, ["triple", "read", "--reading", str(path), "--json", "-", *args])


def test_component_dims_reach_the_assembly(planted_json: Path) -> None:
    default = json.loads(_triple(planted_json).stdout)
    assert (default["lambda"], default["m"]) == ("1/2", 2)
    assert any("no component_dims were given" in n for n in default["notes"])
    given = _triple(planted_json, "--component-dims", "0:3,4")
    assert given.exit_code == 0, given.output
    out = json.loads(given.stdout)
    assert (out["lambda"], out["m"]) == ("3/2", 1)  # min(3/2, 4/2), one component at the minimum
    assert [b["dims"] for b in out["blocks"]] == [[3, 4]]
    assert not any("no component_dims were given" in n for n in out["notes"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["0-3,4"], "--component-dims '0-3,4': expected RECORD:D1,D2,... with integers"),
        (["0:3,x"], "--component-dims '0:3,x': expected RECORD:D1,D2,... with integers"),
        (["0:3,4", "0:1,1"], "--component-dims: record 0 is given twice"),
        (["0:3"], "--component-dims: component_dims[0] must have 2 entries"),
        (["5:1,1"], "--component-dims: component_dims key 5: expected the int index"),
        (["0:0,1"], "--component-dims '0:0,1': dimensions must be >= 1"),
    ],
)
def test_bad_component_dims_exit_2(planted_json: Path, args: list[str], message: str) -> None:
    _assert_refused(planted_json, "--component-dims", args, message)


def _assert_refused(path: Path, option: str, args: list[str], message: str) -> None:
    """``triple read`` with ``option`` given each of ``args`` exits 2 saying ``message``."""
    res = _triple(path, *[a for v in args for a in (option, v)])
    assert res.exit_code == 2, res.output
    flat = " ".join(line.strip(" │╭╮╰╯─") for line in res.output.splitlines())
    assert message in flat, res.output


@pytest.fixture(scope="module")
def chain_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Reading JSON with one genuine record of order 7 over 3 tensors (s30 trial TRIPLE F1:
    Lin–Sq–Lin–Sq–Lin, truly orders (1, 2, 4))."""
    rec = {"class": "genuine_singularity", "k": 7, "layer": "a", "layers": ["a", "b", "c"]}
    path = tmp_path_factory.mktemp("triple") / "chain.json"
    path.write_text(json.dumps({"directions": [rec], "not_covered": [], "meta": {}}))
    return path


def test_component_orders_reach_the_assembly(chain_json: Path) -> None:
    default = json.loads(_triple(chain_json).stdout)
    assert (default["lambda"], default["m"]) == ("1/10", 1)
    assert any("is a lower bound (the most even split gives 1/6)" in n for n in default["notes"])
    given = _triple(chain_json, "--component-orders", "0:1,2,4")
    assert given.exit_code == 0, given.output
    out = json.loads(given.stdout)
    assert (out["lambda"], out["m"]) == ("1/8", 1)
    assert [b["orders"] for b in out["blocks"]] == [[1, 2, 4]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["0:1,2"], "--component-orders: component_orders[0] must have 3 entries"),
        (["0:1,2,x"], "--component-orders '0:1,2,x': expected RECORD:D1,D2,... with integers"),
        (["0:0,3,4"], "--component-orders '0:0,3,4': orders must be >= 1"),
        (["0:1,2,4", "0:1,2,4"], "--component-orders: record 0 is given twice"),
        (["3:1,2,4"], "--component-orders: component_orders key 3: expected the int index"),
    ],
)
def test_bad_component_orders_exit_2(chain_json: Path, args: list[str], message: str) -> None:
    _assert_refused(chain_json, "--component-orders", args, message)
