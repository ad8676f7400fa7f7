"""`read --sigma`: the noise level of a gaussian family, from the command line (s33 trial USER
O3: the README asks for the data's σ, and only the Python API took one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app

RUNNER = CliRunner()
ENV = {"COLUMNS": "300"}
ARGS = ["read", "--model", "zoo:planted-mlp", "--max-directions", "1"]
RTOL = 1e-9  # F of one read against another's, rescaled: float64 round-off of the sweeps


def _read(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    res = RUNNER.invoke(app, [*ARGS, *extra, "--json", str(out)], env=ENV)
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def test_sigma_scales_f_by_one_over_sigma_squared_and_keeps_the_orders(tmp_path: Path) -> None:
    plain = _read(tmp_path, "plain")
    half = _read(tmp_path, "half", "--sigma", "0.5")
    assert plain["meta"]["family"] == {"name": "gaussian", "sigma": 1.0}
    assert half["meta"]["family"] == {"name": "gaussian", "sigma": 0.5}
    (a,), (b,) = plain["directions"], half["directions"]
    assert (a["class"], a["k"]) == (b["class"], b["k"])
    assert b["sweep"]["t"] == a["sweep"]["t"]
    assert b["sweep"]["F"] == pytest.approx([4.0 * f for f in a["sweep"]["F"]], rel=RTOL)


def test_sigma_is_named_in_the_family_line(tmp_path: Path) -> None:
    res = RUNNER.invoke(app, [*ARGS, "--sigma", "0.25"], env=ENV)
    assert res.exit_code == 0, res.output
    assert "output family: gaussian, σ = 0.25" in res.output


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--sigma", "0"], "--sigma: Gaussian sigma must be a finite positive float; got 0.0"),
        (["--sigma", "-1"], "--sigma: Gaussian sigma must be a finite positive float"),
        (["--sigma", "inf"], "--sigma: Gaussian sigma must be a finite positive float"),
        (
            ["--sigma", "0.5", "--family", "categorical"],
            "--sigma is the noise level of a gaussian family; the output family is categorical",
        ),
    ],
)
def test_bad_sigma_is_a_usage_error(extra: list[str], said: str) -> None:
    res = RUNNER.invoke(app, [*ARGS, *extra], env=ENV)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert said in " ".join(res.output.split()), res.output
