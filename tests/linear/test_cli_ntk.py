"""`neuromanifold lcn ntk`: the README example, JSON output, D = 2, and every parse error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.linear import LCN, mu, ntk
from neuromanifold.linear.normalize import normal_form_note

ATOL_EXACT = 1e-12
RTOL_EXACT = 1e-12  # a few products and sums of doubles: rounding is ~1e-16 relative
# the text output prints %.6g: rounding to 6 significant digits is off by at most half a unit in
# the 6th digit, i.e. 5e-6 of the value (atol 0: a value printed as 0 must be 0 in the JSON)
RTOL_PRINTED_6G = 5e-6
runner = CliRunner()


def test_readme_example_json(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = runner.invoke(
        app,
        [
            "lcn",
            "ntk",
            "--filters",
            "2,2",
            "--strides",
            "1",
            "--theta",
            "1,2;1,-1",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert {"v", "delta", "ntk", "rank", "dim_M", "smooth"} <= set(data)
    np.testing.assert_allclose(data["v"], [1, 1, -2], rtol=0, atol=ATOL_EXACT)
    np.testing.assert_allclose(data["delta"], [-3], rtol=0, atol=ATOL_EXACT)
    np.testing.assert_allclose(
        data["ntk"], [[2, 1, 0], [1, 7, 1], [0, 1, 5]], rtol=0, atol=ATOL_EXACT
    )
    assert data["rank"] == data["dim_M"] == 3 and data["smooth"] is True
    assert "v = [1 1 -2]" in res.output and "dim M = 3" in res.output


def test_small_theta_prints_nonzero_values(tmp_path: Path, printed_numbers) -> None:
    # trial A #4: θ scaled by 1e-4 gives v, δ ~ 1e-8 and K ~ 1e-7, which the text output printed
    # as exact zeros (fixed-point, suppress=True) while the JSON was right
    out = tmp_path / "o.json"
    args = ["lcn", "ntk", "--filters", "2,2", "--strides", "2", "--theta", "1e-4,2e-4;3e-4,1e-4"]
    res = runner.invoke(app, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    v = printed_numbers(res.output, "v = ", "\n")
    d = printed_numbers(res.output, "delta = ", "\n")
    K = printed_numbers(res.output, "K (4x4) =\n", "rank J")
    assert np.all(v != 0) and np.all(d != 0)
    assert (
        np.count_nonzero(K) == np.count_nonzero(data["ntk"]) == 12
    )  # K_03 = K_12 = 0 (and transposes)
    np.testing.assert_allclose(v, data["v"], rtol=RTOL_PRINTED_6G, atol=0)
    np.testing.assert_allclose(d, data["delta"], rtol=RTOL_PRINTED_6G, atol=0)
    np.testing.assert_allclose(K, np.ravel(data["ntk"]), rtol=RTOL_PRINTED_6G, atol=0)
    # the values themselves, by hand: v = w_1(z) w_2(z²) = (1 + 2z)(3 + z²)·1e-8, δ = (10 − 5)·1e-8
    np.testing.assert_allclose(data["v"], [3e-8, 6e-8, 1e-8, 2e-8], rtol=RTOL_EXACT, atol=0)
    np.testing.assert_allclose(data["delta"], [5e-8], rtol=RTOL_EXACT, atol=0)


def test_two_dimensional(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    theta = "1,2,3,4;1,0,1,0,1,0,1,0,2"
    res = runner.invoke(
        app,
        [
            "lcn",
            "ntk",
            "--dim",
            "2",
            "--filters",
            "2x2,3x3",
            "--strides",
            "2x1",
            "--theta",
            theta,
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    arch = LCN(((2, 2), (3, 3)), ((2, 1),), dim=2)
    th = [np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, 0, 1, 0, 1, 0, 1, 0, 2]).reshape(3, 3)]
    np.testing.assert_allclose(data["v"], mu(arch, th), rtol=0, atol=ATOL_EXACT)
    np.testing.assert_allclose(data["ntk"], ntk(arch, th), rtol=0, atol=ATOL_EXACT)
    assert data["dim_M"] == 12


def test_critical_point_reported_not_smooth(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    res = runner.invoke(
        app,
        [
            "lcn",
            "ntk",
            "--filters",
            "3,2",
            "--strides",
            "2",
            "--theta",
            "-0.49,0,1;-0.49,1",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["rank"] == 3 and data["dim_M"] == 4 and data["smooth"] is False
    assert "smooth point (rank Jμ = dim M at θ): no" in res.output


def test_crossing_label_says_what_is_checked(tmp_path: Path) -> None:
    # spec §4.2 crossing: θ is a regular parameter (rank 4 = dim M) although v is a singular
    # point of M; the label says the check is at θ only and points to `lcn fiber`
    out = tmp_path / "o.json"
    args = ["lcn", "ntk", "--filters", "3,2", "--strides", "2", "--theta", "-0.25,0,1;-2.25,1"]
    res = runner.invoke(app, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["rank"] == data["dim_M"] == 4 and data["smooth"] is True and data["notes"] == []
    # the file holds θ, so K can be recomputed from it (s31 trial LCN #6)
    arch = LCN.from_dict(data["architecture"])
    theta = [np.asarray(w, dtype=np.float64) for w in data["theta"]]
    assert np.array_equal(ntk(arch, theta), np.asarray(data["ntk"]))
    assert np.array_equal(mu(arch, theta), np.asarray(data["v"]))
    assert "smooth point (rank Jμ = dim M at θ): yes" in res.output
    assert "crossings of several fiber components need `lcn fiber`" in res.output
    assert "normal form" not in res.output


def test_not_normal_form_note_printed(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    args = ["lcn", "ntk", "--filters", "2,1,2", "--strides", "2,3,5", "--theta", "1,2;1.5;3,1"]
    res = runner.invoke(app, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.output
    note = normal_form_note(LCN((2, 1, 2), (2, 3, 5)))
    assert note is not None and f"note: {note}" in " ".join(res.output.split())
    assert json.loads(out.read_text())["notes"] == [note]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--filters", "2,2", "--theta", "1,2;1"], "layer 2 has 1 coefficients"),
        (["--filters", "2,2", "--theta", "1,2"], "1 layers"),
        (["--filters", "2,2", "--theta", "1,a;1,2"], "comma-separated numbers"),
        (["--filters", "2,2", "--theta", "1,inf;1,2"], "finite"),
        (["--filters", "2,y", "--theta", "1,2;1,2"], "--filters entry 'y'"),
        (["--filters", " ", "--theta", "1"], "--filters is empty"),
        (["--filters", ",", "--theta", "1"], "--filters ',': field 1 of 2 is empty"),
        (["--filters", "2,2", "--strides", "1,1,1", "--theta", "1,2;1,2"], "strides"),
        (["--filters", "2,2", "--strides", "0", "--theta", "1,2;1,2"], "positive"),
        (["--filters", "2,0", "--theta", "1,2;"], "positive"),
        (["--dim", "2", "--filters", "2,2", "--theta", "1,2;1,2"], "2 ints joined by 'x'"),
        (["--dim", "2", "--filters", "2x2x2", "--theta", "1"], "3 axes: --dim is 2"),
    ],
)
def test_errors(args: list[str], message: str) -> None:
    res = runner.invoke(app, ["lcn", "ntk", *args])
    assert res.exit_code != 0
    flat = " ".join(res.output.replace("│", " ").split())  # unwrap rich error boxes
    assert message in flat, res.output


@pytest.mark.parametrize("json_arg", [[], ["--json", "-"]])
def test_theta_whose_products_overflow_is_refused(json_arg: list[str]) -> None:
    """s14 trial N #3: θ = (1e200, 2; 1e200, −1) printed v = [inf ...], δ = nan, "rank J = 2,
    smooth: no" with exit 0, and --json - wrote Infinity/NaN (not JSON)."""
    args = ["lcn", "ntk", "--filters", "2,2", "--theta", "1e200,2;1e200,-1", *json_arg]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "--theta: μ(θ), δ or the NTK overflow float64" in res.output
    assert "Infinity" not in res.output and "rank J" not in res.output


def test_theta_whose_products_underflow_is_refused() -> None:
    """s14 audit Q #4: θ = (1e-170, 1e-170; 1e-170, −1e-170) printed v = 0, K = 0 and "smooth
    point: no" next to "rank J = 3 = dim M"; no filter is zero, so μ ≠ 0 mathematically."""
    args = ["lcn", "ntk", "--filters", "2,2", "--theta", "1e-170,1e-170;1e-170,-1e-170"]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "μ(θ) or the NTK underflow float64" in res.output
    assert "rank J" not in res.output


def test_theta_with_a_zero_filter_whose_ntk_underflows_is_refused() -> None:
    """s25b audit RERUN N1: one zero filter and two tiny ones (K ≈ 1e-440 ≠ 0) died with an
    IndexError traceback once ntk raised on underflow; before that it printed K = 0."""
    th = "0,0;1e-110,1e-110;1e-110,1e-110"
    args = ["lcn", "ntk", "--filters", "2,2,2", "--strides", "2,2", "--theta", th]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "the NTK underflows float64" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["lcn", "ntk", "--filters", "2,,2", "--theta", "1,2;1,-1"],
            "--filters '2,,2': field 2 of 3 is empty",
        ),
        (
            ["lcn", "ntk", "--filters", "2,2", "--strides", "1,,", "--theta", "1,2;1,-1"],
            "--strides '1,,': field 2 of 3 is empty",
        ),
        (
            ["lcn", "fiber", "--filters", "2,2", "--v", "1,,1,-2", "--delta=-3"],
            "--v '1,,1,-2': field 2 of 4 is empty",
        ),
        (
            ["lcn", "fiber", "--filters", "2,2", "--v", "1,1,-2", "--delta=-3,"],
            "--delta '-3,': field 2 of 2 is empty",
        ),
        (
            [
                *("lcn", "compare", "--filters", "2,2", "--strides", "2"),
                *("--v", "3,6,,1,2", "--delta", "5", "--delta", "0"),
            ],
            "--v '3,6,,1,2': field 3 of 5 is empty",
        ),
        (["lcn", "survey", "--samples", "1", "--rows", "0,,1"], "--rows '0,,1': field 2"),
    ],
)
def test_empty_fields_in_number_lists_are_refused(args: list[str], message: str) -> None:
    """s16 trial Z #5: empty comma fields were dropped, so ``--v 3,6,,1,2`` ran on v = (3,6,1,2)
    (a valid length for stride 2) and ``--filters 2,,2`` on (2, 2); ``--theta`` refused them."""
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    flat = " ".join(res.output.replace("│", " ").split())
    assert message in flat, res.output


def test_compare_names_its_sheet_and_calls_the_rank_column_regular(tmp_path: Path) -> None:
    """s31 trial LCN #7: the text did not say which sheet was compared (|w_l|² is the same on
    both sheets of the spec §4.2 crossing) and its 'smooth yes' read as v being smooth."""
    out = tmp_path / "c.json"
    args = ["lcn", "compare", "--filters", "3,2", "--strides", "2"]
    args += ["--v", "0.5625,0,-2.5,0,1", "--delta", "5", "--delta=-1.3", "--json", str(out)]
    res = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    theta = [
        np.asarray(w, dtype=np.float64)
        for w in json.loads(out.read_text())["per_delta"][0]["theta"]
    ]
    (line,) = [ln for ln in res.output.splitlines() if ln.startswith("sheet: θ at δ of row 0 = ")]
    shown = [
        np.array([float(x) for x in part.strip(" []").split()])
        for part in line.split(" = ", 1)[1].split(" (another sheet")[0].split(";")
    ]
    for w, s in zip(theta, shown, strict=True):  # printed to 6 significant digits
        np.testing.assert_allclose(s, w.ravel(), rtol=1e-5, atol=1e-12)
    (header,) = [ln for ln in res.output.splitlines() if "rank J" in ln and "cond K|T" in ln]
    assert "regular" in header and "smooth" not in header
