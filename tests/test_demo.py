"""The demo orchestration on tiny settings: report files, JSON round trip, findings, cache."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from neuromanifold.demo import DemoConfig, DemoResult, run_demo
from neuromanifold.demo_result import optimizer_row
from neuromanifold.report.demo_report import demo_findings, load_demo

TINY = DemoConfig(
    probe=6,
    steps=2,
    sweep_steps=2,
    cells=("gaussian_location_k2",),
    max_directions=2,
    grid=tuple(np.logspace(-3, 0, 10).tolist()),
    progress=False,
    workers=1,
)
STAGES = ("sweep-adamw", "sweep-muon", "sweep-muon-polar-express", "sweep-muon-polar-svd")


def test_demo_tiny_run(tmp_path):
    """One tiny run (one test, so that xdist does not run the demo once per worker)."""
    config = dataclasses.replace(TINY, cache=str(tmp_path / "cache"))
    result = run_demo(tmp_path / "out", config)
    _check_report_directory(result, tmp_path / "out")
    _check_json_round_trip(result, tmp_path / "out")
    _check_rows(result)
    _check_findings(result)
    _check_second_run_loads_the_cache_on_two_workers(result, tmp_path / "out2")


def _check_report_directory(result, out):
    for name in (
        "report.md",
        "report.json",
        "figures/optimizers.png",
        "figures/vit-digits-scratch-spectra.png",
        "figures/vit-digits-finetune-sweeps.png",
    ):
        assert (out / name).is_file(), name
    md = (out / "report.md").read_text()
    assert "## Findings vs expectation" in md
    assert "## Optimizer comparison" in md
    assert [r.stage for r in result.rows] == list(STAGES)
    assert set(result.models) == {"vit-digits-scratch", "vit-digits-finetune"}
    probes = result.models["vit-digits-scratch"].probes
    assert [p["block"] for p in probes] == ["blocks.0.mlp", "blocks.1.mlp"]
    assert result.models["vit-digits-finetune"].probes == ()
    assert "read as a rotated node death" in md


def _check_json_round_trip(result, out):
    again = load_demo(out)
    assert again == result
    for key, mr in result.models.items():
        assert again.models[key].reading == mr.reading
    assert DemoResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def _check_rows(result):
    for mr, row in zip(result.optimizers, result.rows, strict=True):
        assert row == optimizer_row(mr)
        readable = [r for r in mr.reading.directions if r.r2 is not None and r.r2 >= 0.95]
        assert row.n_readable == len(readable) == sum(row.readable_kinds.values())
        assert row.n_read == len(mr.reading.directions) <= TINY.max_directions
        assert row.val_loss == mr.metrics["val_loss"]


def _check_findings(result):
    findings = demo_findings(result)
    subjects = [f.subject for f in findings]
    assert subjects[0] == "constructed cells" and subjects[-1] == "optimizers"
    cell = findings[0]
    assert cell.holds is result.cells[0]["passed"]
    flipped = dataclasses.replace(
        result, cells=[{**result.cells[0], "passed": not result.cells[0]["passed"]}]
    )
    assert demo_findings(flipped)[0].holds is (not cell.holds)


def _check_second_run_loads_the_cache_on_two_workers(result, out):
    again = run_demo(out, dataclasses.replace(result.config, workers=2))
    assert all(m.cached for m in again.models.values())
    assert all(m.cached for m in again.optimizers)
    for key, mr in result.models.items():  # worker processes read exactly what this one did
        assert again.models[key].reading == mr.reading
    assert [m.reading for m in again.optimizers] == [m.reading for m in result.optimizers]
    assert again.rows == result.rows


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="probe must be a positive int; got 0"):
        DemoConfig(probe=0)
    with pytest.raises(ValueError, match="steps must be a positive int or None; got -1"):
        DemoConfig(steps=-1)
    with pytest.raises(ValueError, match="workers must be a positive int; got 0"):
        DemoConfig(workers=0)
    with pytest.raises(TypeError, match="config must be a DemoConfig; got dict"):
        run_demo(tmp_path, {})
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(ValueError, match="out must be a directory"):
        run_demo(f, TINY)
    bad = tmp_path / "report.json"
    bad.write_text('{"kind": "other"}')
    with pytest.raises(ValueError, match="not a demo result"):
        load_demo(tmp_path)


def test_cli_demo_rejects_a_file_as_out(tmp_path):
    from neuromanifold.cli import app

    f = tmp_path / "file"
    f.write_text("")
    res = CliRunner().invoke(app, ["demo", "--out", str(f), "--no-cells"])
    assert res.exit_code == 2
    assert "out must be a directory" in res.output
