"""`neuromanifold read --max-memory M --out DIR`: the factor pass behind the report's spectra
figure keeps to the read's memory plan, and runs after ``--json`` is written.

s19 trial AK #1: after the read, the CLI ran `kfac_factors` again for the figures with the
default batch of 256 over the whole probe set: 7x over an 8 MB budget by the library's own
tracker (`peak_allocated`), and before the JSON was written, so a process killed there for its
memory lost the JSON too. Here a 16→32→tanh→10 MLP on 256 samples under a 300 kB budget: the
plan's factor batch is 21 (tracked peak about 180 kB); the batch of 256 peaked at 1.9 MB.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

import neuromanifold.singular.factors as factors_module
from neuromanifold.cli import app
from neuromanifold.singular.memory import parse_memory, peak_allocated

RUNNER = CliRunner()
ENV = {"COLUMNS": "200"}
FACTORY = "nm_cli_read_budget_models"
N_SAMPLES = 256  # the default factor batch: the unplanned pass took them all at once
BUDGET = "300kB"


def _files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable ``FACTORY:net`` (a float64 16→32→tanh→10 MLP) and ``N_SAMPLES`` float64
    probe inputs; returns the data file."""
    (tmp_path / f"{FACTORY}.py").write_text(
        "import torch\n"
        "from torch import nn\n"
        "def net():\n"
        "    torch.manual_seed(0)\n"
        "    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 10)).double()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, FACTORY, raising=False)
    data = tmp_path / "x.pt"
    torch.save(torch.randn(N_SAMPLES, 16, dtype=torch.float64, generator=_gen()), data)
    return data


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(1)


def _tracked_kfac_calls(monkeypatch: pytest.MonkeyPatch, json_file: Path) -> list[dict[str, Any]]:
    """Wrap `kfac_factors` where the CLI and the memory plan look it up: each call records its
    batch size, its number of samples, its tracked peak (`peak_allocated`) and whether the
    ``--json`` file existed when it started."""
    calls: list[dict[str, Any]] = []
    original = factors_module.kfac_factors

    def tracked(model: Any, data: Any, family: Any, **kwargs: Any) -> Any:
        call = {
            "batch_size": kwargs.get("batch_size", 256),
            "n": int(data.shape[0]),
            "json_written": json_file.exists(),
        }
        box: dict[str, Any] = {}
        call["peak"] = peak_allocated(
            lambda: box.setdefault("f", original(model, data, family, **kwargs))
        )
        calls.append(call)
        return box["f"]

    monkeypatch.setattr(factors_module, "kfac_factors", tracked)
    return calls


def _read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the budgeted read with ``--out`` and ``--json``; the figures' factor pass (the last
    `kfac_factors` call, over the whole probe set) and the JSON's memory plan."""
    data = _files(tmp_path, monkeypatch)
    json_file = tmp_path / "reading.json"
    calls = _tracked_kfac_calls(monkeypatch, json_file)
    args = ["read", "--model", f"{FACTORY}:net", "--data", str(data), "--family", "categorical",
            "--max-memory", BUDGET, "--max-directions", "0", "--out", str(tmp_path / "out"),
            "--json", str(json_file)]  # fmt: skip
    r = RUNNER.invoke(app, args, env=ENV)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "figures" / "spectra.png").is_file()  # the pass's figure
    figures_pass = calls[-1]
    assert figures_pass["n"] == N_SAMPLES, calls  # the plan's own passes take at most 8 samples
    plan = json.loads(json_file.read_text())["meta"]["memory_plan"]
    return figures_pass, plan


def test_figures_factor_pass_takes_the_planned_factor_batch(tmp_path, monkeypatch) -> None:
    figures_pass, plan = _read(tmp_path, monkeypatch)
    assert plan["factor_batch"] < N_SAMPLES  # the budget does constrain the batch
    assert figures_pass["batch_size"] == plan["factor_batch"], (figures_pass, plan)


def test_figures_factor_pass_stays_within_the_budget(tmp_path, monkeypatch) -> None:
    figures_pass, plan = _read(tmp_path, monkeypatch)
    budget = parse_memory(BUDGET)
    assert plan["budget"] == budget
    assert figures_pass["peak"] <= budget, (figures_pass, plan)


def test_json_is_written_before_the_figures_factor_pass(tmp_path, monkeypatch) -> None:
    figures_pass, _ = _read(tmp_path, monkeypatch)
    assert figures_pass["json_written"], figures_pass
