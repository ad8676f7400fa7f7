"""``read --model zoo:STAGE`` reads a trained zoo recipe stage from the recipe cache on its task's
validation images with their labels, as a classifier (s32 trial TRAIN #8: it needed a checkpoint
path, a hand-made probe file and --family)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.cli.read import ZOO_PROBES
from neuromanifold.zoo.data import digits
from neuromanifold.zoo.recipes import default_cache_dir, run_recipe

RUNNER = CliRunner()


def test_a_trained_stage_is_read_from_the_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    run_recipe("vit-digits-finetune", out=default_cache_dir(), steps=2, progress=False)
    res = RUNNER.invoke(
        app, ["read", "--model", "zoo:vit-digits-finetune", "--max-directions", "1", "--json", "-"]
    )
    assert res.exit_code == 0, res.output
    meta = json.loads(res.stdout)["meta"]
    assert meta["family"]["name"] == "categorical" and meta["n_samples"] == ZOO_PROBES
    assert meta["critical_check"] is not None  # the labels came with the probes
    assert digits("digits-5to9", seed=0).x_val.shape[0] >= ZOO_PROBES


def test_an_untrained_or_unknown_stage_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    res = RUNNER.invoke(app, ["read", "--model", "zoo:sweep-muon"])
    said = " ".join(res.output.split())
    assert res.exit_code != 0 and "no trained checkpoint at" in said
    assert "train it first: neuromanifold train optimizer-sweep" in said
    res = RUNNER.invoke(app, ["read", "--model", "zoo:nope"])
    assert res.exit_code != 0 and "zoo:vit-digits-scratch" in " ".join(res.output.split())


@pytest.mark.parametrize("stage", ["vit-digits-scratch", "sweep-adamw"])
def test_every_stage_name_is_offered(stage: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    res = RUNNER.invoke(app, ["read", "--model", "zoo:nope"])
    assert f"zoo:{stage}" in " ".join(res.output.split())


def test_a_zoo_checkpoint_without_data_is_read_on_its_own_task(tmp_path: Path, monkeypatch) -> None:
    """s32 trial TRAIN #8 (the rest): ``--model vit-digits-5way --checkpoint F`` with a checkpoint
    `neuromanifold train` wrote asked for a probe file; it is read on the validation images of
    the task its sidecar names, with their labels, and says so. With --data, the file decides."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    run_recipe("vit-digits-finetune", out=default_cache_dir(), steps=2, progress=False)
    ckpt = default_cache_dir() / "vit-digits-finetune.safetensors"
    args = ["read", "--model", "vit-digits-5way", "--checkpoint", str(ckpt)]
    res = RUNNER.invoke(app, [*args, "--max-directions", "1", "--json", "-"])
    assert res.exit_code == 0, res.output
    meta = json.loads(res.stdout)["meta"]
    assert meta["family"]["name"] == "categorical" and meta["n_samples"] == ZOO_PROBES
    assert meta["critical_check"] is not None  # the labels came with the probes
    said = " ".join(res.stderr.split())
    assert f"the first {ZOO_PROBES} labelled validation images of the checkpoint's task" in said
    assert "'digits-5to9'" in said
    import torch

    data = tmp_path / "x.pt"
    torch.save(digits("digits-5to9", seed=0).x_val[:8], data)
    res = RUNNER.invoke(app, [*args, "--data", str(data), "--max-directions", "1", "--json", "-"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["meta"]["n_samples"] == 8
    assert "validation images" not in res.stderr
