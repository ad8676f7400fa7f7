"""Checkpoints: round trip, sidecar contents, atomic writes; recipes: cache behaviour."""

from __future__ import annotations

import json
import math

import pytest
import torch

from neuromanifold.zoo.checkpoint import (
    CheckpointMeta,
    atomic_write,
    load_checkpoint,
    read_meta,
    save_checkpoint,
    weights_sha256,
)
from neuromanifold.zoo.compression import mlp_usage
from neuromanifold.zoo.models import MLPConfig, ViTConfig, build_model
from neuromanifold.zoo.recipes import RECIPES, run_recipe

RTOL_USAGE = (
    1e-12  # float64 contributions and participation ratio vs closed forms (measured 5.5e-15)
)


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
    with pytest.raises(FileNotFoundError, match=r"checkpoint .*none\.safetensors does not exist"):
        load_checkpoint(tmp_path / "none.safetensors")  # named before its missing sidecar
    (tmp_path / "dir.safetensors").mkdir()  # exists, but is no file (s15 audit W #4)
    with pytest.raises(FileNotFoundError, match=r"checkpoint .*dir\.safetensors is not a file"):
        load_checkpoint(tmp_path / "dir.safetensors")
    (tmp_path / "lone.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"sidecar .*lone\.json of checkpoint"):
        load_checkpoint(tmp_path / "lone.safetensors")
    save_checkpoint(tmp_path / "m.safetensors", build_model(cfg), CheckpointMeta(cfg.to_dict()))
    (tmp_path / "m.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read checkpoint sidecar"):
        load_checkpoint(tmp_path / "m.safetensors")
    with pytest.raises(ValueError, match="sidecar must be a JSON object with an 'architecture'"):
        CheckpointMeta.from_dict({})
    with pytest.raises(ValueError, match="sidecar must be a JSON object with an 'architecture'"):
        CheckpointMeta.from_dict([1])  # type: ignore[arg-type]
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


def test_the_cache_is_bound_to_the_weights_and_to_the_parent_stage(tmp_path) -> None:
    """s32 trial TRAIN #1, #2: a fine-tune was taken from the cache after its pretrain stage had
    been retrained into other weights, and other weights under a matching sidecar were taken
    with the sidecar's metrics."""
    first = run_recipe("vit-digits-finetune", out=tmp_path, steps=3, progress=False)
    pre, fine = (first.checkpoints[n] for n in ("vit-digits-pretrain", "vit-digits-finetune"))
    assert read_meta(fine).weights_sha256 == weights_sha256(fine)
    assert read_meta(fine).recipe_config["init_sha256"] == weights_sha256(pre)
    # other weights under the fine-tune's sidecar: not a cache hit
    fine_sidecar = fine.with_suffix(".json").read_text()
    fine.write_bytes(pre.read_bytes())
    again = run_recipe("vit-digits-finetune", out=tmp_path, steps=3, progress=False)
    assert again.cached == ("vit-digits-pretrain",)
    assert weights_sha256(fine) == json.loads(fine_sidecar)["weights_sha256"]  # retrained, same
    # the pretrain stage holds other weights (a retrain), its sidecar consistent: the
    # fine-tune that started from the old weights is retrained
    model, meta = load_checkpoint(pre)
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    save_checkpoint(pre, model, meta)
    third = run_recipe("vit-digits-finetune", out=tmp_path, steps=3, progress=False)
    assert third.cached == ("vit-digits-pretrain",)
    assert read_meta(fine).recipe_config["init_sha256"] == weights_sha256(pre)


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
    assert 0 < usage[0].participation_ratio <= usage[0].hidden
    with pytest.raises(ValueError, match=r"threshold must lie in \(0, 1\), got 2"):
        mlp_usage(model, torch.rand(2, 1, 8, 8), threshold=2)
    with pytest.raises(ValueError, match="CNN has no MLP blocks"):
        from neuromanifold.zoo.models import CNNConfig

        mlp_usage(build_model(CNNConfig()), torch.rand(2, 1, 8, 8))


def _gelu(v: float) -> float:
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


def _usage_with_constant_hidden(bias: torch.Tensor, w2: torch.Tensor):
    """ViT MLP with fc1.weight = 0: every token's hidden unit j is GELU(bias_j), float64."""
    model = build_model(ViTConfig(dim=8, heads=2, depth=1), seed=0).double()
    mlp = model.blocks[0].mlp
    with torch.no_grad():
        mlp.fc1.weight.zero_()
        mlp.fc1.bias.copy_(bias)
        mlp.fc2.weight.copy_(w2)
    x = torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return mlp_usage(model, x, threshold=0.5)[0]


def test_mlp_usage_matches_closed_form_contributions() -> None:
    """c_j = RMS(h_j)·‖W₂[:, j]‖ = |GELU(b_j)|·‖W₂[:, j]‖; PR = (Σc²)²/Σc⁴ (H when all equal)."""
    gen = torch.Generator().manual_seed(0)
    hidden = 32
    bias = torch.randn(hidden, generator=gen, dtype=torch.float64)
    w2 = torch.randn(8, hidden, generator=gen, dtype=torch.float64)
    usage = _usage_with_constant_hidden(bias, w2)
    c = [abs(_gelu(float(bias[j]))) * float(w2[:, j].norm()) for j in range(hidden)]
    peak = max(c)
    assert usage.hidden == hidden
    for j in range(hidden):
        assert usage.relative_contribution[j] == pytest.approx(
            c[j] / peak, rel=RTOL_USAGE, abs=0
        ), j
    pr = sum(v**2 for v in c) ** 2 / sum(v**4 for v in c)
    assert usage.participation_ratio == pytest.approx(pr, rel=RTOL_USAGE, abs=0)
    assert usage.compressed == sum(v / peak < 0.5 for v in c)
    # equal contributions: same bias everywhere, unit-norm columns of W₂ -> PR = H, none compressed
    unit = w2 / w2.norm(dim=0, keepdim=True)
    equal = _usage_with_constant_hidden(torch.full((hidden,), 0.7, dtype=torch.float64), unit)
    assert equal.participation_ratio == pytest.approx(hidden, rel=RTOL_USAGE, abs=0)
    assert equal.compressed == 0
    assert all(r == pytest.approx(1.0, rel=RTOL_USAGE, abs=0) for r in equal.relative_contribution)
    # one unit alone carries output: PR = 1 and the other H − 1 units are compressed
    lone = unit.clone()
    lone[:, 1:] = 0.0
    one = _usage_with_constant_hidden(torch.full((hidden,), 0.7, dtype=torch.float64), lone)
    assert one.participation_ratio == pytest.approx(1.0, rel=RTOL_USAGE, abs=0)
    assert one.compressed == hidden - 1


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
