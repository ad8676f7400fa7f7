"""`demo` and `train` check the default checkpoint cache before any work (s34 trial DEMO D1: an
``XDG_CACHE_HOME`` that is a file failed after minutes of training with a worker's 79-line
traceback; ``--cache`` was checked, the default was not)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app

RUNNER = CliRunner()


@pytest.mark.parametrize(
    "argv",
    [["demo", "--out", "OUT", "--no-cells"], ["train", "vit-digits-scratch"]],
    ids=["demo", "train"],
)
def test_an_unwritable_default_cache_is_one_line_at_once(tmp_path: Path, argv, monkeypatch) -> None:
    import neuromanifold.demo as demo
    import neuromanifold.zoo.recipes as recipes

    ran = []
    monkeypatch.setattr(demo, "run_demo", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(recipes, "run_recipe", lambda *a, **k: ran.append(a))
    blocker = tmp_path / "cache-file"
    blocker.write_text("")
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    res = RUNNER.invoke(app, argv, env={"XDG_CACHE_HOME": str(blocker), "COLUMNS": "300"})
    assert res.exit_code == 2 and not ran
    assert res.output.strip() == (
        f"error: the default checkpoint cache ($XDG_CACHE_HOME/neuromanifold/zoo) "
        f"{blocker}/neuromanifold/zoo: {blocker} is a file, not a directory"
    )
