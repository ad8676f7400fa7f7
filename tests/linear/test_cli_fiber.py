"""`neuromanifold lcn fiber | survey | converge` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.linear import LCN
from neuromanifold.linear.architecture import flatten_params
from neuromanifold.linear.fiber import lcn_fiber
from neuromanifold.linear.fiber_numeric import FIBER_RTOL, curve_through
from neuromanifold.linear.fiber_report import FiberReport, continuum_note
from neuromanifold.linear.normalize import normal_form_note

ATOL_EXACT = 1e-12
# the text output prints %.6g: rounding to 6 significant digits is off by at most half a unit in
# the 6th digit, i.e. 5e-6 of the value (atol 0: a value printed as 0 must be 0 in the JSON)
RTOL_PRINTED_6G = 5e-6
runner = CliRunner()


def test_fiber_command_prints_small_values(tmp_path: Path, printed_numbers) -> None:
    # trial A #4 (same defect as `lcn ntk`): θ = ((1, 2), (3, 1))·1e-4, stride 2, so
    # v = (1 + 2z)(3 + z²)·1e-8 and δ = (10 − 5)·1e-8; v, δ and K were printed as zeros
    out = tmp_path / "fiber.json"
    args = ["lcn", "fiber", "--filters", "2,2", "--strides", "2", "--starts", "8"]
    res = runner.invoke(
        app, [*args, "--v", "3e-8,6e-8,1e-8,2e-8", "--delta", "5e-8", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text())
    assert d["n_points"] == 1  # strides > 1: one point modulo signs
    v = printed_numbers(res.output, "v = ", "δ = ")
    delta = printed_numbers(res.output, "δ = ", "\n")
    w = [printed_numbers(res.output, f"w_{i} = ", "\n") for i in (1, 2)]
    K = printed_numbers(res.output, "K =\n", "\n\n")
    assert np.all(v != 0) and np.all(delta != 0) and np.count_nonzero(K) > 0
    np.testing.assert_allclose(v, d["v"], rtol=RTOL_PRINTED_6G, atol=0)
    np.testing.assert_allclose(delta, d["delta"], rtol=RTOL_PRINTED_6G, atol=0)
    for printed, stored in zip(w, d["points"][0], strict=True):
        np.testing.assert_allclose(printed, stored, rtol=RTOL_PRINTED_6G, atol=0)
    np.testing.assert_allclose(K, np.ravel(d["ntks"][0]), rtol=RTOL_PRINTED_6G, atol=0)


def test_fiber_command_stride_one_example(tmp_path: Path) -> None:
    out = tmp_path / "fiber.json"
    args = ["lcn", "fiber", "--filters", "2,2", "--strides", "1", "--v", "1,1,-2", "--delta", "-3"]
    res = runner.invoke(app, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "2 distinct NTK(s)" in res.output and "routes agree: True" in res.output
    d = json.loads(out.read_text())
    assert d["n_points"] == 2 and d["n_distinct_ntks"] == 2
    K = np.array([[2, 1, 0], [1, 7, 1], [0, 1, 5]], dtype=float)
    assert any(np.max(np.abs(np.array(k) - K)) <= ATOL_EXACT for k in d["ntks"])
    # the file reads back into a report (s29 trial LIN2 F3) that writes the same file, and whose
    # points and NTKs are those lcn_fiber gives
    back = FiberReport.from_dict(d)
    assert json.loads(json.dumps(back.to_dict())) == d
    rep = lcn_fiber(LCN((2, 2), (1,)), [1, 1, -2], [-3])
    assert back.n_points == rep.n_points and back.architecture_spec == rep.architecture_spec
    for a, b in zip(back.ntk_arrays(), rep.ntk_arrays(), strict=True):
        assert np.max(np.abs(a - b)) <= ATOL_EXACT
    assert [r.name for r in back.routes] == [r.name for r in rep.routes]


def test_fiber_command_prints_normal_form_note(tmp_path: Path) -> None:
    # scalar middle layer c = 1.5 and s_L = 5: used as given, and the output says so
    out = tmp_path / "fiber.json"
    args = ["lcn", "fiber", "--filters", "2,1,2", "--strides", "2,3,5", "--starts", "4"]
    res = runner.invoke(
        app, [*args, "--v", "3,1,0,0,0,0,6,2", "--delta", "1,1", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    note = normal_form_note(LCN((2, 1, 2), (2, 3, 5)))
    assert note is not None and f"note: {note}" in " ".join(res.output.split())
    assert json.loads(out.read_text())["notes"] == [note]
    res = runner.invoke(app, ["lcn", "fiber", "--filters", "2,2", "--v", "1,1,-2", "--delta", "-3"])
    assert res.exit_code == 0 and "normal form" not in res.output


def test_fiber_command_says_a_positive_dimensional_fiber_is_sampled(tmp_path: Path) -> None:
    # trial H #2: over v = 0 with δ = −3 the stride-one (2, 2) fiber is the circle
    # {w_2 = 0, ‖w_1‖² = 3}; the output counted "N point(s) modulo signs" with N = --starts
    out = tmp_path / "fiber.json"
    args = ["lcn", "fiber", "--filters", "2,2", "--strides", "1", "--v", "0,0,0", "--delta", "-3"]
    res = runner.invoke(app, [*args, "--starts", "3", "--json", str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text())
    assert d["fiber_dimension"] == 1 and d["n_points"] >= 1
    # the points lie on the circle: residuals are unit-scale (ρ² = |δ| = 3 here), so the
    # absolute error of ‖w_1‖² and of w_2 is at most FIBER_RTOL·ρ² (fiber_numeric docstring)
    atol_circle = FIBER_RTOL * 3.0
    for w1, w2 in d["points"]:
        assert abs(float(np.sum(np.square(w1))) - 3.0) <= atol_circle
        assert float(np.max(np.abs(w2))) <= atol_circle
    assert d["continuum"] is True
    note = continuum_note(1, d["n_points"])
    assert note is not None and "is a continuum (dimension 1" in note and "samples of it" in note
    assert note in d["notes"]
    flat = " ".join(res.stdout.split())
    assert f"note: {note}" in flat
    assert f"{d['n_points']} sample point(s) of a fiber of dimension 1 modulo signs" in flat


def test_fiber_command_finite_fiber_has_no_continuum_note(tmp_path: Path) -> None:
    # θ = ((1, 2), (1, −1)) (the spec example): v = (1 + 2z)(1 − z) = (1, 1, −2), δ = 2 − 5
    # = −3; the fiber is finite (two points modulo signs), so nothing speaks of a continuum
    out = tmp_path / "fiber.json"
    args = ["lcn", "fiber", "--filters", "2,2", "--strides", "1", "--v", "1,1,-2", "--delta", "-3"]
    res = runner.invoke(app, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text())
    assert d["fiber_dimension"] == 0 and continuum_note(0, d["n_points"]) is None
    assert d["continuum"] is False
    assert not any("continuum" in n for n in d["notes"])
    assert "continuum" not in res.stdout and "sample point(s)" not in res.stdout
    assert f"{d['n_points']} point(s) modulo signs" in res.stdout


def test_an_isolated_singular_point_is_not_called_a_continuum(tmp_path: Path) -> None:
    """Audit S12c #1: over v = (1 + z)², δ = 0, the only point (modulo signs) is w_1 = w_2 =
    (1, 1), where the two factors coincide and dΦ loses rank, so n_params − rank dΦ = 1 there.
    A step along the null vector polishes back to the same point: no curve, no continuum note,
    also when only the algebraic route runs (n_starts = 0)."""
    out = tmp_path / "fiber.json"
    args = ["lcn", "fiber", "--filters", "2,2", "--strides", "1", "--v", "1,2,1", "--delta", "0"]
    res = runner.invoke(app, [*args, "--starts", "5", "--json", str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text())
    assert d["n_points"] == 1 and d["fiber_dimension"] == 1  # dΦ's null space at the point
    assert d["continuum"] is False
    assert not any("continuum" in n for n in d["notes"])
    assert "sample point(s)" not in res.stdout and "1 point(s) modulo signs" in res.stdout
    algebraic = lcn_fiber(LCN((2, 2), (1,)), [1.0, 2.0, 1.0], [0.0], n_starts=0)
    assert algebraic.n_points == 1 and algebraic.continuum is False and not algebraic.notes


def test_fiber_command_two_dimensional() -> None:
    # w1 = 1 + 2 z2 + 3 z1 + 5 z1 z2 and w2 = 2 − z2 + z1 + 4 z1 z2, stride (1,1): v by hand
    w1 = np.array([[1.0, 2.0], [3.0, 5.0]])
    w2 = np.array([[2.0, -1.0], [1.0, 4.0]])
    v = np.zeros((3, 3))
    for i in range(2):
        for j in range(2):
            v[i : i + 2, j : j + 2] += w1[i, j] * w2
    d = float(np.sum(w2**2) - np.sum(w1**2))
    args = ["lcn", "fiber", "--dim", "2", "--filters", "2x2,2x2", "--strides", "1x1"]
    res = runner.invoke(app, [*args, "--v", ",".join(map(str, v.ravel())), "--delta", str(d)])
    assert res.exit_code == 0, res.output
    assert "2 distinct NTK(s)" in res.output  # the equal-shape swap (spec §4.4)


def test_fiber_command_off_manifold_and_bad_lengths() -> None:
    base = ["lcn", "fiber", "--filters", "3,2", "--strides", "2"]
    res = runner.invoke(app, [*base, "--v", "1,0.3,-2,0.7,1.5", "--delta", "0.5", "--starts", "5"])
    assert res.exit_code == 1
    assert "NOT ON THE NEUROMANIFOLD" in res.output and "best residual" in res.output
    res = runner.invoke(app, [*base, "--v", "1,0.3,-2,0.7", "--delta", "0.5"])
    assert res.exit_code == 2 and "v has shape (4,)" in res.output
    res = runner.invoke(app, [*base, "--v", "1,0,-2,0,1", "--delta", "0.5,1"])
    assert res.exit_code == 2 and "delta has length 2" in res.output
    res = runner.invoke(app, [*base, "--v", "1,a,-2,0,1", "--delta", "0.5"])
    assert res.exit_code == 2 and "expected comma-separated numbers" in res.output


def test_survey_command_writes_outputs(tmp_path: Path) -> None:
    out = tmp_path / "survey"
    js = tmp_path / "rows.json"
    args = ["lcn", "survey", "--samples", "1", "--seed", "2", "--rows", "2,3"]
    res = runner.invoke(app, [*args, "--out", str(out), "--json", str(js)])
    assert res.exit_code == 0, res.output
    rows = json.loads(js.read_text())["rows"]
    assert [r["condition"] for r in rows] == ["all strides > 1", "some stride = 1"]
    assert all(r["verdict"] in ("independent", "dependent") for r in rows)
    assert (out / "survey.md").read_text().startswith("# NTK determinacy survey")
    assert (out / "survey.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "survey.json").read_text())["rows"] == rows
    res = runner.invoke(app, ["lcn", "survey", "--rows", "99"])
    assert res.exit_code == 2 and "indices must lie in 0..9" in res.output
    res = runner.invoke(app, ["lcn", "survey", "--rows", "2,0,2"], env={"COLUMNS": "200"})
    assert res.exit_code == 2 and "row(s) [2] given more than once" in res.output
    # an empty list says so (s25 trial LIN: it said "indices must lie in 0..9")
    res = runner.invoke(app, ["lcn", "survey", "--rows", ""], env={"COLUMNS": "200"})
    assert res.exit_code == 2 and "--rows '': no row given" in res.output


def test_survey_rows_option_keeps_each_rows_samples(tmp_path: Path) -> None:
    """Trial D #4: `--rows 3` used the random stream of row 0; a row's line must not depend on
    which other rows are selected (compared with the selection 0..3, its own position)."""
    lines = []
    for sel in ("3", "0,1,2,3"):
        js = tmp_path / f"rows{sel.replace(',', '')}.json"
        args = ["lcn", "survey", "--samples", "1", "--seed", "0", "--rows", sel]
        res = runner.invoke(app, [*args, "--json", str(js)])
        assert res.exit_code == 0, res.output
        lines.append(json.loads(js.read_text())["rows"][-1])
        # the table's first column is the index --rows takes (s31 trial LCN #9)
        table = [ln for ln in res.output.splitlines() if ln.startswith("| ") and "---" not in ln]
        assert table[0].startswith("| row | architecture |")
        assert [ln.split("|")[1].strip() for ln in table[1:]] == sel.split(",")
    assert lines[0]["row_index"] == 3 and lines[0] == lines[1]


def test_converge_command(tmp_path: Path) -> None:
    res = runner.invoke(app, ["lcn", "converge", "--seeds", "1", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert res.output.count("reached") == 3
    # where σ is measured (s34 trial LCN1D O3: not at θ itself)
    assert (
        " ".join(res.output.split()).count("σ_dimM/σ_max of Jμ at the balanced representative") == 3
    )
    reps = json.loads((tmp_path / "converge.json").read_text())
    assert len(reps) == 3 and all(len(r["runs"]) == 1 for r in reps)
    assert (tmp_path / "converge.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("delta", [-5.0, -2.0, 1.0, 2.0, 3.0])
def test_every_point_of_a_circle_fiber_has_a_curve_through_it(delta: float) -> None:
    """Audit S12d #1: the first `curve_through` polished the stepped point freely; the solver
    slid along the circle by 0.15–3.2 step lengths, outside the accepted band, so most circles
    (δ = ±2, ±5) were called finite. Solving on the hyperplane through the step, ⊥ the null
    vector, finds the crossing at every point of every circle."""
    arch = LCN((2, 2), (1,))
    rep = lcn_fiber(arch, [0.0, 0.0, 0.0], [delta], n_starts=4)
    assert rep.n_points >= 2 and rep.continuum is True
    for point in rep.point_arrays():
        assert curve_through(arch, np.zeros(3), [delta], flatten_params(arch, list(point)))


@pytest.mark.parametrize("delta", [2.0, -3.0])
def test_every_point_of_a_two_dimensional_sphere_fiber_has_a_curve_through_it(delta: float) -> None:
    """D = 2, filters 2×2 and 2×2 over v = 0: the fiber is a 3-sphere in one layer (dimension 3);
    the other null directions, on which dΦ vanishes, stalled the solver before (audit S12d)."""
    arch = LCN(((2, 2), (2, 2)), ((1, 1),), dim=2)
    v = np.zeros((3, 3))
    rep = lcn_fiber(arch, v, [delta], n_starts=3)
    assert rep.n_points >= 2 and rep.fiber_dimension == 3 and rep.continuum is True
    for point in rep.point_arrays():
        assert curve_through(arch, v, [delta], flatten_params(arch, list(point)))


def test_routes_agree_at_a_critical_point() -> None:
    """s14 trial O #3: at v = (1 + z)² both routes find the one point (w_1 ∝ w_2 = (1, 1), a
    singular point of μ), the numeric one ~1e-8 away (about √ of its residual), and the report
    said "routes agree: False"."""
    rep = lcn_fiber(LCN((2, 2), (1,)), np.array([1.0, 2.0, 1.0]), [2.0])
    assert rep.n_points == 1 and [r.n_points for r in rep.routes] == [1, 1]
    assert rep.jacobian_ranks[0] < rep.dim_M  # the point is critical
    assert rep.routes_agree
    res = runner.invoke(
        app, ["lcn", "fiber", "--filters", "2,2", "--strides", "1", "--v", "1,2,1", "--delta", "2"]
    )
    assert res.exit_code == 0 and "routes agree: True" in res.output


def test_the_fiber_over_zero_with_zero_invariants_is_the_origin() -> None:
    """s14 trial N #2: v = 0, δ = 0 gave a point of size 1e-121 with "rank J = 3" and a K of
    1e-241; μ = 0 makes a layer zero and δ = 0 then all of them, so the fiber is θ = 0."""
    rep = lcn_fiber(LCN((2, 2), (1,)), np.zeros(3), [0.0])
    assert rep.n_points == 1 and rep.jacobian_ranks == (0,)
    assert all(not np.any(w) for w in rep.point_arrays()[0])
    assert not np.any(rep.ntk_arrays()[0])
    res = runner.invoke(app, ["lcn", "fiber", "--filters", "2,2", "--v", "0,0,0", "--delta", "0"])
    assert res.exit_code == 0 and "rank J = 0" in res.output


def test_architecture_in_json_is_the_spec_for_every_lcn_command(tmp_path: Path) -> None:
    """s15 trial T #4: `lcn ntk` wrote LCN.to_dict() under "architecture", `lcn fiber` and
    `lcn converge` a display string (in two formats), so a fiber could not be passed on to
    `ntk` without parsing text. Every command writes the spec now, the text as a label."""
    from neuromanifold.linear import FC
    from neuromanifold.linear.converge import convergence_experiment
    from neuromanifold.linear.fiber import fc_fiber

    runner = CliRunner()
    arch = LCN((2, 2), (2,))
    ntk_js, fib_js = tmp_path / "ntk.json", tmp_path / "fib.json"
    common = ["--filters", "2,2", "--strides", "2"]
    r1 = runner.invoke(app, ["lcn", "ntk", *common, "--theta", "1,2;1,-1", "--json", str(ntk_js)])
    r2 = runner.invoke(
        app, ["lcn", "fiber", *common, "--v", "1,2,-1,-2", "--delta", "-3", "--json", str(fib_js)]
    )
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    specs = [json.loads(p.read_text())["architecture"] for p in (ntk_js, fib_js)]
    assert specs[0] == specs[1] and LCN.from_dict(specs[1]) == arch
    assert json.loads(fib_js.read_text())["architecture_label"].startswith("LCN D=1")
    fc = fc_fiber(FC((2, 2, 2)), [[1.0, 2.0], [3.0, 4.0]], [[[0.0, 0.0], [0.0, 0.0]]])
    assert fc.to_dict()["architecture"] == FC((2, 2, 2)).to_dict()
    from neuromanifold.linear.survey import _witness

    wit = _witness(lcn_fiber(arch, [1.0, 2.0, -1.0, -2.0], [-3.0], n_starts=4))
    assert wit["architecture"] == arch.to_dict()  # the survey's witness too (s15 audit V #3)
    conv = convergence_experiment(arch, n_runs=1).to_dict()
    assert LCN.from_dict(conv["architecture"]) == arch
    assert conv["architecture_label"] == json.loads(fib_js.read_text())["architecture_label"]
