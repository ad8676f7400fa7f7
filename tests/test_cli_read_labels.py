"""`read --data` with labels (s21 trial AS #6): labels stored as ``'y'`` beside ``'x'`` in a dict
torch file, a NumPy ``.npz`` archive or a safetensors file are read, as the pair ``(x, y)`` is.
Before, only the pair's labels reached the read; the others were dropped without a word, so the
labelled-loss check (``info["loss_along_u"]``) silently did not run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from neuromanifold.cells.planted import planted_mlp
from neuromanifold.cli import app

RUNNER = CliRunner()
ENV = {"COLUMNS": "300"}
NOISE = 0.1  # Gaussian label noise around the planted model's outputs
RTOL, ATOL = 1e-9, 1e-12  # the same read from another file layout: equal up to float64 round-off


@pytest.fixture(scope="module")
def xy() -> tuple[torch.Tensor, torch.Tensor]:
    """The planted cell's probe inputs and float64 labels drawn around its outputs."""
    p = planted_mlp()
    with torch.no_grad():
        mean = p.model(p.data)
    gen = torch.Generator().manual_seed(4)
    return p.data, mean + NOISE * torch.randn(mean.shape, dtype=torch.float64, generator=gen)


def _save(fmt: str, x: torch.Tensor, y: torch.Tensor, where: Path) -> Path:
    """``x`` and ``y`` in one file of the form ``fmt``."""
    if fmt == "tuple":
        path = where / "xy_tuple.pt"
        torch.save((x, y), path)
    elif fmt == "dict":
        path = where / "xy_dict.pt"
        torch.save({"x": x, "y": y}, path)
    elif fmt == "npz":
        path = where / "xy.npz"
        np.savez(path, x=x.numpy(), y=y.numpy())
    else:
        path = where / "xy.safetensors"
        save_file({"x": x.contiguous(), "y": y.contiguous()}, str(path))
    return path


def _checks(path: Path, out: Path) -> list:
    """The ``loss_along_u`` of each record of ``read --data path`` (None where there is none)."""
    args = ["read", "--model", "zoo:planted-mlp", "--data", str(path), "--max-directions", "1"]
    res = RUNNER.invoke(app, [*args, "--json", str(out)], env=ENV)
    assert res.exit_code == 0, res.output
    return [d["info"].get("loss_along_u") for d in json.loads(out.read_text())["directions"]]


@pytest.mark.parametrize("fmt", ["dict", "npz", "safetensors"])
def test_labels_beside_x_are_read_like_the_pair(xy, tmp_path: Path, fmt: str) -> None:
    x, y = xy
    from_pair = _checks(_save("tuple", x, y, tmp_path), tmp_path / "pair.json")
    assert from_pair and all(isinstance(c, dict) for c in from_pair), from_pair
    from_file = _checks(_save(fmt, x, y, tmp_path), tmp_path / f"{fmt}.json")
    _assert_same_checks(from_file, from_pair)


def _assert_same_checks(got: object, want: object) -> None:
    """``got`` equals ``want`` in keys, flags and counts, and in floats to `RTOL`/`ATOL` (the
    summation order of a round-off-sized slope can follow the tensors' memory layout)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), (got, want)
        for key in want:
            _assert_same_checks(got[key], want[key])
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want, strict=True):
            _assert_same_checks(g, w)
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=RTOL, abs=ATOL)
    else:
        assert got == want


@pytest.mark.parametrize("fmt", ["tuple", "dict", "npz", "safetensors"])
def test_labels_of_another_length_are_refused_in_one_line(xy, tmp_path: Path, fmt: str) -> None:
    x, y = xy
    path = _save(fmt, x, y[:7], tmp_path)
    res = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp", "--data", str(path)], env=ENV)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    expected = (
        f"error: --data {path}: the labels y have shape (7, 4) and the inputs x (256, 5); "
        "expected one label row per sample (leading size 256)"
    )
    assert res.stderr.strip() == expected, res.stderr


def test_0d_labels_are_refused_in_one_line(xy, tmp_path: Path) -> None:
    x, _ = xy
    path = tmp_path / "y0d.pt"
    torch.save({"x": x, "y": torch.tensor(1.0, dtype=torch.float64)}, path)
    res = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp", "--data", str(path)], env=ENV)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        f"error: --data {path}: the labels y have shape () and the inputs x (256, 5); "
        "expected one label row per sample (leading size 256)"
    ), res.stderr


def test_the_data_help_says_how_labels_are_passed_and_what_for() -> None:
    res = RUNNER.invoke(app, ["read", "--help"], env=ENV)
    assert res.exit_code == 0, res.output
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", res.output).split())
    assert "a pair (x, y) or {'x': ..., 'y': ...}" in text, text
    assert "arrays 'x' and, optionally, 'y'" in text, text
    assert "used only to check that the checkpoint is a minimum of the labelled probe loss" in text
