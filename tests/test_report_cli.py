"""`neuromanifold read --out/--resume/--checkpoint`: report directory, resume, bad input."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.report.archive import load_reading
from neuromanifold.report.resume import LOG_NAME
from neuromanifold.singular import read_candidate as candidate_mod
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read
from neuromanifold.zoo.checkpoint import CheckpointMeta, save_checkpoint, weights_sha256
from neuromanifold.zoo.models import MLPConfig, build_model

RUNNER = CliRunner()
N_PROBE = 24


@pytest.fixture(scope="module")
def zoo_files(tmp_path_factory):
    """A tiny zoo MLP checkpoint (safetensors + sidecar) and a probe file of digit-shaped x."""
    d = tmp_path_factory.mktemp("ckpt")
    config = MLPConfig(hidden=(5,), num_classes=3)
    model = build_model(config, seed=0)
    meta = CheckpointMeta(architecture=config.to_dict())
    ckpt = save_checkpoint(d / "mlp.safetensors", model, meta)
    x = torch.randn(N_PROBE, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    data = d / "probe.pt"
    torch.save({"x": x}, data)
    return ckpt, ckpt.with_suffix(".json"), data, model, x


def _args(ckpt, sidecar, data, *extra):
    return [
        "read",
        "--model",
        str(sidecar),
        "--checkpoint",
        str(ckpt),
        "--data",
        str(data),
        "--family",
        "categorical",
        *extra,
    ]


def test_out_writes_report_equal_to_the_direct_read(zoo_files, tmp_path):
    ckpt, sidecar, data, model, x = zoo_files
    out = tmp_path / "rep"
    res = RUNNER.invoke(app, _args(ckpt, sidecar, data, "--out", str(out)))
    assert res.exit_code == 0, res.output
    for name in (
        "report.json",
        "report.md",
        LOG_NAME,
        "figures/sweeps.png",
        "figures/spectra.png",
        "figures/classes.png",
    ):
        assert (out / name).is_file(), name
    direct = read(model, x, Categorical(), progress=False)
    saved = load_reading(out / "report.json")
    # the CLI adds which files were read (s32 trial TRAIN #4); all else is the direct read
    source = saved.meta.pop("source")
    assert saved == direct
    assert source["checkpoint"] == {"path": str(ckpt.resolve()), "sha256": weights_sha256(ckpt)}
    assert source["data"]["path"] == str(data.resolve()) and source["model"] == str(sidecar)
    assert source["argv"] is None and source["model_files"] == []  # called from Python
    assert direct.directions  # kfac-A kernel of the image border pixels, CE shift
    md = (out / "report.md").read_text()
    assert f"checkpoint `{ckpt.resolve()}` (SHA-256 {weights_sha256(ckpt)[:12]}…)" in md
    assert "| # | units | detector | class | k |" in md
    for layer in direct.by_layer():
        assert f"`{layer}`" in md


def test_resume_reads_no_finished_direction(zoo_files, tmp_path, monkeypatch):
    ckpt, sidecar, data, _, _ = zoo_files
    out = tmp_path / "rep"
    assert RUNNER.invoke(app, _args(ckpt, sidecar, data, "--out", str(out))).exit_code == 0
    first = load_reading(out / "report.json")
    calls = []
    original = candidate_mod.read_direction
    monkeypatch.setattr(
        candidate_mod, "read_direction", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    res = RUNNER.invoke(app, _args(ckpt, sidecar, data, "--out", str(out), "--resume"))
    assert res.exit_code == 0, res.output
    assert calls == []
    assert load_reading(out / "report.json") == first


def test_resume_without_out_is_refused(zoo_files):
    ckpt, sidecar, data, _, _ = zoo_files
    res = RUNNER.invoke(app, _args(ckpt, sidecar, data, "--resume"))
    assert res.exit_code != 0
    assert "--resume needs --out" in res.output


def test_truncated_checkpoint_exits_2_and_names_the_file(zoo_files, tmp_path):
    ckpt, sidecar, data, _, _ = zoo_files
    bad = tmp_path / "cut.safetensors"
    raw = ckpt.read_bytes()
    bad.write_bytes(raw[: len(raw) // 2])
    res = RUNNER.invoke(app, _args(bad, sidecar, data))
    assert res.exit_code == 2
    assert "truncated or corrupt" in res.output and "cut.safetensors" in res.output


def test_wrong_architecture_exits_2_listing_the_keys(zoo_files):
    ckpt, _, data, _, _ = zoo_files
    res = RUNNER.invoke(
        app, ["read", "--model", "vit-digits", "--checkpoint", str(ckpt), "--data", str(data)]
    )
    assert res.exit_code == 2
    assert "missing" in res.output.lower()


def test_data_of_the_wrong_shape_exits_2(zoo_files, tmp_path):
    ckpt, sidecar, _, _, _ = zoo_files
    wrong = tmp_path / "wrong.pt"
    torch.save({"x": torch.randn(8, 1, 7, 7)}, wrong)
    res = RUNNER.invoke(app, _args(ckpt, sidecar, wrong))
    assert res.exit_code == 2
    assert "error:" in res.output
