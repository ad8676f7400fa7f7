"""`neuromanifold triple` commands: JSON contracts and argument errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.cli.triple import parse_k_range
from neuromanifold.singular.nu import nu

ATOL_JSON = 1e-15

runner = CliRunner()


def test_nu_json(tmp_path: Path) -> None:
    out = tmp_path / "nu.json"
    res = runner.invoke(app, ["triple", "nu", "--k", "1-3", "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert list(data["nu"]) == ["1", "2", "3"]
    assert data["nu"]["1"] == 0.5
    assert data["nu"]["2"] == pytest.approx(nu(2), abs=ATOL_JSON)
    assert data["lambda_dir"]["3"] == pytest.approx(1 / 6, abs=ATOL_JSON)
    assert "0.172973" in res.output
    assert f"wrote {out}" in res.output  # s30 trial DOCS #2: the file written is named


def test_rrr_json_to_stdout() -> None:
    res = runner.invoke(app, ["triple", "rrr", "5", "3", "5", "0", "--json", "-"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert (data["lambda"], data["lambda_float"], data["m"]) == ("13/2", 6.5, 2)


def test_dln_human_and_json(tmp_path: Path) -> None:
    res = runner.invoke(app, ["triple", "dln", "--widths", "4,4,4,4", "--rank", "0"])
    assert res.exit_code == 0, res.output
    assert "λ = 11/2" in res.output
    out = tmp_path / "dln.json"
    res = runner.invoke(
        app, ["triple", "dln", "--widths", "1,1,1,1,1", "--rank", "0", "--json", str(out)]
    )
    data = json.loads(out.read_text())
    assert (data["lambda"], data["m"], data["m_restated"]) == ("1/2", 4, 2)
    assert "caveat" in res.output and f"wrote {out}" in res.output


def test_dln_width_one_hidden_multiplicity() -> None:
    # trial A #5: K ∝ w_1² w_2² w_3² ‖W_4‖²: three scalars tie at 1/2 (‖W_4‖², n = 2, has pole 1)
    res = runner.invoke(
        app, ["triple", "dln", "--widths", "1,1,1,1,2", "--rank", "0", "--json", "-"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert (data["lambda"], data["m"], data["m_restated"]) == ("1/2", 3, 2)
    assert "rule 2" in data["caveat"]


def test_parse_k_range() -> None:
    assert parse_k_range("1-3,7") == [1, 2, 3, 7]
    assert parse_k_range("5") == [5]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["triple", "nu", "--k", "3-1"], "runs backwards (start 3 > end 1)"),
        (["triple", "nu", "--k", "0"], "--k must look like"),
        # an end below 1 is not a backwards range: '-3-1' was suggested and then refused (s34
        # trial TRIPLE D3)
        (["triple", "nu", "--k", "1--3"], "--k must look like"),
        (["triple", "nu", "--k", "1-99"], "--k must be <="),
        (["triple", "rrr", "5", "3", "5", "9"], "r must satisfy"),
        (["triple", "dln", "--widths", "4,x", "--rank", "0"], "--widths must be comma-separated"),
        (["triple", "dln", "--widths", "3", "--rank", "0"], "widths must list at least 2"),
    ],
)
def test_errors(argv: list[str], message: str) -> None:
    res = runner.invoke(app, argv)
    assert res.exit_code != 0
    assert message in " ".join(res.output.split()).replace("│", "").replace("  ", " ")


def test_read_from_saved_reading(tmp_path: Path) -> None:
    reading = {
        "directions": [
            {"class": "genuine_singularity", "k": 3, "layer": "0", "layers": ["0", "2"]},
            {"class": "flat_gauge", "k": None, "layer": "2", "layers": ["2"]},
        ],
        "not_covered": [],
        "meta": {},
    }
    path = tmp_path / "reading.json"
    path.write_text(json.dumps(reading))
    res = runner.invoke(app, ["triple", "read", "--reading", str(path), "--json", "-"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    # squared-ReLU node death read at k = 3: components (1, 2), λ = 1/4, ν of the read order 3
    assert (data["lambda"], data["m"], data["dominant_order"]) == ("1/4", 1, 3)
    assert data["nu_universal"] == nu(3) and data["blocks"][0]["diagonal_order"] == 3
    res = runner.invoke(app, ["triple", "read", "--reading", str(path), "--regular-dims", "3"])
    assert res.exit_code == 0 and "λ = 7/4" in res.output and "single-locus" in res.output
    assert f"diagonal order k = Σ k_i = 3, ν(k) = {nu(3):.6f}" in res.output
    res = runner.invoke(app, ["triple", "read", "--reading", str(path), "--regular-dims", "-1"])
    assert res.exit_code != 0 and "--regular-dims must be >= 0" in " ".join(res.output.split())
    live = tmp_path / "live.json"
    live.write_text(json.dumps({**reading, "directions": reading["directions"][1:]}))
    res = runner.invoke(app, ["triple", "read", "--reading", str(live)])
    assert res.exit_code == 0 and "no genuine block: ν = 0.500000 (regular)" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    res = runner.invoke(app, ["triple", "read", "--reading", str(bad)])
    assert res.exit_code != 0 and "directions" in res.output
    res = runner.invoke(app, ["triple", "read", "--reading", str(tmp_path / "missing.json")])
    assert res.exit_code != 0 and "readable Reading JSON" in " ".join(res.output.split())
    # the folder `read --out` writes reads as its report.json; a folder without one is told so
    # (s34 trial TRIPLE O3: "[Errno 21] Is a directory")
    out = tmp_path / "out"
    out.mkdir()
    res = runner.invoke(app, ["triple", "read", "--reading", str(out)])
    assert res.exit_code == 2 and "is a folder without a report.json" in " ".join(
        res.output.replace("│", " ").split()
    )
    (out / "report.json").write_text(json.dumps(reading))
    res = runner.invoke(app, ["triple", "read", "--reading", str(out), "--json", "-"])
    assert res.exit_code == 0 and json.loads(res.output)["lambda"] == "1/4"


def test_read_of_a_binary_file_is_a_one_line_error(tmp_path: Path) -> None:
    # trial B #7: a torch file passed as --reading raised UnicodeDecodeError with a traceback
    import torch

    pt = tmp_path / "x.pt"
    torch.save(torch.zeros(3, dtype=torch.float64), pt)
    res = runner.invoke(app, ["triple", "read", "--reading", str(pt)])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit)  # click's usage error
    text = " ".join(res.output.replace("│", " ").split())  # rich boxes the message
    assert "--reading must be a readable Reading JSON file: 'utf-8' codec can't decode" in text
    assert "Traceback" not in res.output


def test_read_node_death_reports_nu_of_the_read_order(tmp_path: Path) -> None:
    # σ'(0) ≠ 0 node death read at k = 2 across two layers: λ = 1/2, m = 2 and ν(2), not ν(1).
    reading = {
        "directions": [
            {"class": "genuine_singularity", "k": 2, "layer": "fc1", "layers": ["fc1", "fc2"]}
        ],
        "not_covered": [],
        "meta": {},
    }
    path = tmp_path / "node.json"
    path.write_text(json.dumps(reading))
    res = runner.invoke(app, ["triple", "read", "--reading", str(path)])
    assert res.exit_code == 0, res.output
    assert "λ = 1/2 (0.5), m = 2" in res.output
    assert f"diagonal order k = Σ k_i = 2, ν(k) = {nu(2):.6f}" in res.output
    assert "orders (1, 1), dims (1, 1) -> λ = 1/2, m = 2, diagonal order 2" in res.output


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["triple", "rrr", "3", "4", "5", "-1"], "r must be an int >= 0, got -1"),
        (["triple", "rrr", "-3", "4", "5", "1"], "M must be an int >= 1, got -3"),
    ],
)
def test_rrr_negative_numbers_reach_the_own_check(argv: list[str], message: str) -> None:
    res = runner.invoke(app, argv)
    flat = " ".join(res.output.split()).replace("│", "").replace("  ", " ")
    assert res.exit_code == 2 and message in flat, res.output
    assert "No such option" not in flat


def test_read_says_lambda_counts_the_read_directions_only(tmp_path: Path) -> None:
    from neuromanifold.cli.triple import READ_ONLY_NOTE

    record = {"class": "genuine_singularity", "k": 2, "layer": "fc1", "layers": ["fc1", "fc2"]}
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"directions": [record], "not_covered": [], "meta": {}}))
    res = runner.invoke(app, ["triple", "read", "--reading", str(path)])
    assert res.exit_code == 0, res.output
    assert READ_ONLY_NOTE in res.output
    assert "read directions only" in READ_ONLY_NOTE and "--regular-dims D" in READ_ONLY_NOTE
    res = runner.invoke(app, ["triple", "read", "--reading", str(path), "--regular-dims", "2"])
    assert res.exit_code == 0 and "read directions only" not in res.output, res.output
    res = runner.invoke(app, ["triple", "read", "--reading", str(path), "--json", "-"])
    assert json.loads(res.output)["lambda"] == "1/2"  # stdout JSON stays pure JSON


GENUINE = {"class": "genuine_singularity", "k": 2, "layer": "0", "layers": ["0", "2"]}


@pytest.mark.parametrize(
    ("directions", "message"),
    [
        ({}, "with a 'directions' list"),
        ([1], "directions[0] is int, expected a record object"),
        ([{**GENUINE, "k": -2}], "directions[0] has order k = -2; expected an integer >= 1"),
        ([{**GENUINE, "k": 0}], "directions[0] has order k = 0"),
        ([GENUINE, {**GENUINE, "k": 2.5}], "directions[1] has order k = 2.5"),
        ([{**GENUINE, "k": "2"}], "directions[0] has order k = '2'"),
        ([{**GENUINE, "k": True}], "directions[0] has order k = True"),
    ],
)
def test_read_refuses_a_corrupt_reading(directions: object, message: str, tmp_path: Path) -> None:
    """s14 trial N #5: these printed λ = 0, m = 1 with exit 0 (the record "skipped")."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"directions": directions}))
    res = runner.invoke(app, ["triple", "read", "--reading", str(path)], env={"COLUMNS": "300"})
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit)
    text = " ".join(res.output.replace("│", " ").split())
    assert message in text and "λ =" not in text


def test_read_accepts_records_without_an_order(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    flat = {"class": "flat_gauge", "k": None, "layer": "0", "layers": ["0"]}
    path.write_text(json.dumps({"directions": [GENUINE, flat]}))
    res = runner.invoke(app, ["triple", "read", "--reading", str(path)])
    assert res.exit_code == 0 and res.output.startswith("λ = 1/2")


@pytest.mark.parametrize(
    ("layers", "scope"),
    [
        (["0"], "an upper reference for this block of one component"),
        (["0", "2"], "not a bound for this crossing of 2 components"),
    ],
)
def test_the_nu_line_says_which_case_its_block_is(tmp_path: Path, layers, scope) -> None:
    """s34 trial TRIPLE O4: the dominant block's ν line named both cases, whatever the block."""
    rec = {"class": "genuine_singularity", "k": 2, "layer": layers[0], "layers": layers}
    path = tmp_path / "reading.json"
    path.write_text(json.dumps({"directions": [rec], "not_covered": [], "meta": {}}))
    res = runner.invoke(app, ["triple", "read", "--reading", str(path)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert f"(the normal form's universal value: {scope}), not the model's ν" in text
