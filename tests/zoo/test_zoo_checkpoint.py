"""Checkpoints: round trip, sidecar contents, atomic writes; recipes: cache behaviour."""

from __future__ import annotations

import json

import pytest
import torch

from neuromanifold.zoo.checkpoint import (
    CheckpointMeta,
    atomic_write,
    load_checkpoint,
    save_checkpoint,
)
from neuromanifold.zoo.compression import mlp_usage
from neuromanifold.zoo.models import MLPConfig, ViTConfig, build_model
from neuromanifold.zoo.recipes import RECIPES, run_recipe


def test_round_trip_weights_outputs_and_sidecar(tmp_path) -> None:
    cfg = ViTConfig(dim=16, heads=2, depth=1)
    model = build_model(cfg, seed=0)
    meta = CheckpointMeta(architecture=cfg.to_dict(), seed=0, steps=5, metrics={"val_loss": 1.5})
    path = save_checkpoint(tmp_path / "m.safetensors", model, meta)
    loaded, back = load_checkpoint(path)
    x = torch.rand(3, 1, 8, 8)
    assert torch.equal(loaded(x), model.eval()(x))
    sidecar = json.loads((tmp_path / "m.json").read_text())
    assert sidecar["architecture"] == cfg.to_dict() and sidecar["metrics"] == {"val_loss": 1.5}
    assert sidecar["library_version"] and back.library_version == sidecar["library_version"]
    assert CheckpointMeta.from_dict(back.to_dict()) == back


def test_failed_write_keeps_old_checkpoint(tmp_path) -> None:
    cfg = MLPConfig(hidden=(8,))
    path = save_checkpoint(
        tmp_path / "m.safetensors", build_model(cfg, seed=0), CheckpointMeta(cfg.to_dict())
    )
    before = path.read_bytes()

    def explode(tmp):
        tmp.write_bytes(b"half")
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space left on device"):
        atomic_write(path, explode)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.safetensors"]


def test_checkpoint_errors(tmp_path) -> None:
    cfg = MLPConfig(hidden=(8,))
    with pytest.raises(ValueError, match=r"checkpoint path must end in \.safetensors"):
        save_checkpoint(tmp_path / "m.pt", build_model(cfg), CheckpointMeta(cfg.to_dict()))
    with pytest.raises(FileNotFoundError, match=r"sidecar .*none\.json of checkpoint"):
        load_checkpoint(tmp_path / "none.safetensors")
    save_checkpoint(tmp_path / "m.safetensors", build_model(cfg), CheckpointMeta(cfg.to_dict()))
    (tmp_path / "m.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read checkpoint sidecar"):
        load_checkpoint(tmp_path / "m.safetensors")
    with pytest.raises(ValueError, match=r"sidecar has unknown fields \['colour'\]"):
        CheckpointMeta.from_dict({"architecture": {}, "colour": 1})


def test_recipe_writes_then_loads_from_its_cache(tmp_path) -> None:
    first = run_recipe("vit-digits-finetune", out=tmp_path, steps=3, progress=False)
    assert set(first.checkpoints) == {"vit-digits-pretrain", "vit-digits-finetune"}
    assert first.cached == ()
    side = json.loads((tmp_path / "vit-digits-finetune.json").read_text())
    assert (
        side["task"] == "digits-5to9"
        and side["steps"] == 3
        and side["recipe"] == "vit-digits-finetune"
    )
    assert side["recipe_config"]["init_from"] == "vit-digits-pretrain"
    again = run_recipe("vit-digits-finetune", out=tmp_path, steps=3, progress=False)
    assert again.cached == ("vit-digits-pretrain", "vit-digits-finetune")
    assert again.metrics["vit-digits-finetune"] == first.metrics["vit-digits-finetune"]
    other_seed = run_recipe("vit-digits-finetune", out=tmp_path, steps=3, seed=1, progress=False)
    assert other_seed.cached == ()


def test_recipe_errors(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown recipe 'nope'; expected one of"):
        run_recipe("nope", out=tmp_path)
    with pytest.raises(ValueError, match="steps must be a positive int, got 0"):
        run_recipe("vit-digits-scratch", out=tmp_path, steps=0)
    assert set(RECIPES) == {"vit-digits-scratch", "vit-digits-finetune", "optimizer-sweep"}


def test_mlp_usage_counts_killed_units_and_errors() -> None:
    model = build_model(ViTConfig(dim=8, heads=2, depth=2), seed=0)
    with torch.no_grad():
        model.blocks[1].mlp.fc2.weight[:, :7] = 0.0
    usage = mlp_usage(model, torch.rand(16, 1, 8, 8))
    assert [u.layer for u in usage] == ["blocks.0.mlp", "blocks.1.mlp"]
    assert usage[1].compressed >= 7 and usage[1].hidden == 32
    assert all(usage[1].relative_contribution[j] == 0.0 for j in range(7))
    # participation ratio: equal contributions give H
    assert 0 < usage[0].participation_ratio <= usage[0].hidden
    with pytest.raises(ValueError, match=r"threshold must lie in \(0, 1\), got 2"):
        mlp_usage(model, torch.rand(2, 1, 8, 8), threshold=2)
    with pytest.raises(ValueError, match="CNN has no MLP blocks"):
        from neuromanifold.zoo.models import CNNConfig

        mlp_usage(build_model(CNNConfig()), torch.rand(2, 1, 8, 8))


def test_cli_train_runs_recipe_and_reports(tmp_path) -> None:
    from typer.testing import CliRunner

    from neuromanifold.cli import app

    result = CliRunner().invoke(
        app, ["train", "vit-digits-scratch", "--out", str(tmp_path), "--steps", "2"]
    )
    assert result.exit_code == 0, result.output
    assert (
        "vit-digits-scratch" in result.output
        and (tmp_path / "vit-digits-scratch.safetensors").is_file()
    )
    again = CliRunner().invoke(
        app, ["train", "vit-digits-scratch", "--out", str(tmp_path), "--steps", "2"]
    )
    assert again.exit_code == 0 and "yes" in again.output  # loaded from its cache
    bad = CliRunner().invoke(app, ["train", "resnet-imagenet"])
    assert bad.exit_code != 0 and "unknown recipe 'resnet-imagenet'" in bad.output
