"""CLI output that must not lose information on an 80-column terminal (trial B #9): `train`
prints whole checkpoint paths (folded, not cut with "…"), and `read --max-directions` has help."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.zoo import recipes

RUNNER = CliRunner()
NARROW = {"COLUMNS": "80"}  # the trial's terminal width


def _column(table: str, index: int) -> list[str]:
    """Cells of column ``index`` in the body rows of a rich box table (one per printed line)."""
    body = table.split("┡", 1)[1].splitlines()[1:]
    return [line.split("│")[index + 1].strip() for line in body if line.startswith("│")]


def test_train_prints_the_whole_checkpoint_path(tmp_path: Path, monkeypatch) -> None:
    deep = tmp_path / "a-long-output-directory" / "for-the-trained" / "stage-checkpoints"
    ckpt = deep / "vit-digits-scratch.safetensors"
    metrics = {"val_loss": 0.5, "val_accuracy": 0.75, "train_accuracy": 0.8}

    def fake_run_recipe(name: str, **_: object) -> recipes.RecipeResult:
        # stands in for training: only the table printed from the result is under test
        return recipes.RecipeResult(
            name=name, checkpoints={name: ckpt}, metrics={name: metrics}, wall_s=0.0
        )

    monkeypatch.setattr(recipes, "run_recipe", fake_run_recipe)
    res = RUNNER.invoke(app, ["train", "vit-digits-scratch", "--out", str(deep)], env=NARROW)
    assert res.exit_code == 0, res.output
    assert len(str(ckpt)) > 40 and "…" not in res.output  # longer than its column; not cut
    assert "".join(_column(res.output, 5)) == str(ckpt)
    assert "".join(_column(res.output, 0)) == "vit-digits-scratch"


def test_read_help_describes_max_directions() -> None:
    from typer.main import get_command

    read = get_command(app).commands["read"]  # type: ignore[attr-defined]
    (param,) = [p for p in read.params if "--max-directions" in p.opts]
    assert param.help and param.help.startswith("read at most N candidate directions")
    res = RUNNER.invoke(app, ["read", "--help"], env=NARROW)
    assert res.exit_code == 0, res.output
    (line,) = [line for line in res.output.splitlines() if "--max-directions" in line]
    assert "read at most N" in line  # printed beside the option


def test_train_json_holds_the_result(tmp_path: Path, monkeypatch) -> None:
    """s32 trial TRAIN #13: `train` had no --json; the metrics were in the table only."""
    import json

    ckpt = tmp_path / "vit-digits-scratch.safetensors"
    metrics = {"val_loss": 0.5, "val_accuracy": 0.75, "train_accuracy": 0.8}
    result = recipes.RecipeResult(
        name="vit-digits-scratch",
        checkpoints={"vit-digits-scratch": ckpt},
        metrics={"vit-digits-scratch": metrics},
        cached=("vit-digits-scratch",),
    )
    monkeypatch.setattr(recipes, "run_recipe", lambda name, **_: result)
    res = RUNNER.invoke(app, ["train", "vit-digits-scratch", "--json", "-"], env=NARROW)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == result.to_dict()  # stdout holds the JSON only
    path = tmp_path / "t.json"
    res = RUNNER.invoke(app, ["train", "vit-digits-scratch", "--json", str(path)], env=NARROW)
    assert res.exit_code == 0 and f"wrote {path}" in " ".join(res.output.split())
    assert json.loads(path.read_text())["metrics"]["vit-digits-scratch"] == metrics
