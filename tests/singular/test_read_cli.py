"""`neuromanifold read`: table, JSON keys, model resolution and errors."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import torch
from typer.testing import CliRunner

from neuromanifold.cli import app

KEYS = {"layer", "detector", "k", "class", "r2", "slope", "magnitude"}


def test_read_planted_mlp_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        app,
        ["read", "--model", "zoo:planted-mlp", "--json", str(out), "--baseline"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "duality" in result.output and "genuine" in result.output
    d = json.loads(out.read_text())
    assert d["not_covered"] == []
    (rec,) = [r for r in d["directions"] if r["class"] == "genuine_singularity"]
    assert KEYS <= set(rec)
    assert rec["k"] == 2 and rec["layers"] == ["0", "2"]
    assert rec["baseline"]["0"]["best_k"] is None  # the coordinate scan misses the order
    assert "coord. scan" in result.output


def test_read_module_factory_with_data_file(tmp_path: Path) -> None:
    data = tmp_path / "x.pt"
    torch.save({"x": torch.randn(16, 4, dtype=torch.float64)}, data)
    result = CliRunner().invoke(
        app,
        [
            "read",
            "--model",
            "neuromanifold.cells.planted:planted_deep_linear",
            "--data",
            str(data),
            "--family",
            "gaussian",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "duality" in result.output


def test_read_cli_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["read", "--model", "zoo:nope"])
    assert r.exit_code != 0 and "unknown zoo model" in r.output
    r = runner.invoke(app, ["read", "--model", "no_colon"])
    assert r.exit_code != 0 and "package.module:factory" in r.output
    r = runner.invoke(app, ["read", "--model", "zoo:planted-mlp", "--family", "poisson"])
    assert r.exit_code != 0 and "--family must be one of" in r.output
    bad = tmp_path / "bad.pt"
    torch.save({"x": torch.randn(4, 9, dtype=torch.float64)}, bad)
    r = runner.invoke(app, ["read", "--model", "zoo:planted-mlp", "--data", str(bad)])
    assert r.exit_code == 2 and "does not fit the model" in r.output


def _flat(text: str) -> str:
    """The error box of the CLI may wrap a long message: join it back into one line."""
    return " ".join(line.strip(" │╭╮╰╯─") for line in text.splitlines())


def test_read_cli_errors_on_model_import_and_data_files(tmp_path: Path, monkeypatch) -> None:
    runner = CliRunner()
    env = {"COLUMNS": "200"}
    r = runner.invoke(app, ["read", "--model", "neuromanifold.no_such_module:f"], env=env)
    assert r.exit_code == 2 and "cannot import 'neuromanifold.no_such_module:f'" in _flat(r.output)
    from safetensors.torch import save_file

    st = tmp_path / "probe.safetensors"
    save_file({"inputs": torch.randn(4, 5, dtype=torch.float64)}, str(st))
    r = runner.invoke(app, ["read", "--model", "zoo:planted-mlp", "--data", str(st)], env=env)
    assert r.exit_code == 2
    assert "holds tensors ['inputs']; expected 'x' (and optionally 'y')" in _flat(r.output)
    pt = tmp_path / "probe.pt"
    torch.save({"inputs": torch.randn(4, 5, dtype=torch.float64)}, pt)
    r = runner.invoke(app, ["read", "--model", "zoo:planted-mlp", "--data", str(pt)], env=env)
    assert r.exit_code == 2 and "holds keys ['inputs']; expected 'x'" in _flat(r.output)
    # an attention mask beside x would be dropped without a word (s27 trial HF D1): refused
    ids = torch.zeros(4, 5, dtype=torch.long)
    torch.save({"x": ids, "attention_mask": torch.ones_like(ids)}, pt)
    r = runner.invoke(app, ["read", "--model", "zoo:planted-mlp", "--data", str(pt)], env=env)
    assert r.exit_code == 2
    assert "holds keys ['attention_mask'] beside 'x'" in _flat(r.output)
    assert "no attention mask" in _flat(r.output)
    # a factory that returns a bare module (no probe set) needs --data
    fake = types.ModuleType("_nm_fake_models")
    fake.bare = lambda: torch.nn.Linear(4, 2).double()
    monkeypatch.setitem(sys.modules, "_nm_fake_models", fake)
    r = runner.invoke(app, ["read", "--model", "_nm_fake_models:bare"], env=env)
    assert r.exit_code == 2 and "this model ships no probe data: pass --data PATH" in _flat(
        r.output
    )


def _live_mlp(monkeypatch) -> str:
    """A factory module whose planted MLP has a live K-FAC read beside its node death."""
    from neuromanifold.cells.planted import planted_mlp

    fake = types.ModuleType("_nm_live_models")
    fake.mlp = lambda: planted_mlp(activation="relu", n=64, seed=4)
    monkeypatch.setitem(sys.modules, "_nm_live_models", fake)
    return "_nm_live_models:mlp"


def test_read_cli_live_threshold_reaches_the_read(tmp_path: Path, monkeypatch) -> None:
    spec = _live_mlp(monkeypatch)
    runner = CliRunner()
    base, high = tmp_path / "base.json", tmp_path / "high.json"
    r = runner.invoke(app, ["read", "--model", spec, "--json", str(base)])
    assert r.exit_code == 0, r.output
    d = json.loads(base.read_text())
    assert d["meta"]["live_threshold"] is None
    (live,) = [rec for rec in d["directions"] if rec["class"] == "live"]
    tau = 2.0 * live["magnitude"]  # above the live read's magnitude: it becomes flat
    r = runner.invoke(
        app, ["read", "--model", spec, "--json", str(high), "--live-threshold", repr(tau)]
    )
    assert r.exit_code == 0, r.output
    e = json.loads(high.read_text())
    assert e["meta"]["live_threshold"] == tau
    (was_live,) = [
        rec
        for rec in e["directions"]
        if (rec["detector"], rec["layers"]) == (live["detector"], live["layers"])
    ]
    # a flat gauge reports no order; the slope-0 fit stays visible in k̂
    assert was_live["class"] == "flat_gauge" and was_live["k"] is None
    assert was_live["k_hat"] == live["k_hat"]
    others = [rec["class"] for rec in d["directions"] if rec is not live]
    assert [rec["class"] for rec in e["directions"] if rec is not was_live] == others


def test_read_cli_live_threshold_errors() -> None:
    runner = CliRunner()
    env = {"COLUMNS": "200"}
    for bad in ("0", "-1e-3", "nan", "inf"):
        r = runner.invoke(
            app, ["read", "--model", "zoo:planted-mlp", "--live-threshold", bad], env=env
        )
        assert r.exit_code == 2
        assert "--live-threshold: live_threshold must be a positive finite float" in _flat(r.output)
    r = runner.invoke(
        app, ["read", "--model", "zoo:planted-mlp", "--live-threshold", "tiny"], env=env
    )
    msg = _flat(r.output)
    assert r.exit_code == 2 and "Invalid value for '--live-threshold'" in msg


class _DeadUnitNet(torch.nn.Module):
    """An nn.Module class used as the factory (called with no arguments): a dead hidden unit."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 3).double()
        self.b = torch.nn.Linear(3, 2).double()
        with torch.no_grad():
            self.a.weight[0].zero_()
            self.a.bias[0] = 0.0
            self.b.weight[:, 0].zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))


def test_read_module_class_as_factory(tmp_path: Path, monkeypatch) -> None:
    fake = types.ModuleType("_nm_class_models")
    fake.Net = _DeadUnitNet
    monkeypatch.setitem(sys.modules, "_nm_class_models", fake)
    data = tmp_path / "x.pt"
    torch.save(torch.randn(32, 4, dtype=torch.float64), data)
    out = tmp_path / "r.json"
    args = ["read", "--model", "_nm_class_models:Net", "--data", str(data), "--json", str(out)]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["meta"]["model"] == "_DeadUnitNet"
    assert any(rec["layers"] == ["a", "b"] for rec in d["directions"]), d["directions"]


def _long_named(monkeypatch) -> str:
    """The planted MLP under a long attribute name, so layer names are longer than a column."""
    from neuromanifold.cells.planted import planted_mlp

    class Wrapped(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.encoder_block_with_a_rather_long_name = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.encoder_block_with_a_rather_long_name(x)

    def factory():
        p = planted_mlp()
        return types.SimpleNamespace(model=Wrapped(p.model), data=p.data, family=None)

    fake = types.ModuleType("_nm_long_models")
    fake.make = factory
    monkeypatch.setitem(sys.modules, "_nm_long_models", fake)
    return "_nm_long_models:make"


def _column_text(output: str, column: int) -> str:
    """The concatenated text of one column of the printed table (folded cells join up)."""
    parts = [line.split("│")[column + 1].strip() for line in output.splitlines() if "│" in line]
    return "".join(parts)


def test_read_table_at_80_columns_shows_whole_names_and_the_family(
    tmp_path: Path, monkeypatch
) -> None:
    from rich.cells import cell_len

    spec = _long_named(monkeypatch)
    out = tmp_path / "rep"
    r = CliRunner().invoke(app, ["read", "--model", spec, "--out", str(out)], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert max(cell_len(line) for line in r.output.splitlines()) <= 80  # k̂: 2 chars, 1 cell
    assert "…" not in r.output
    layer = "encoder_block_with_a_rather_long_name"
    assert f"{layer}.0" in _column_text(r.output, 1)  # column 0: the direction's number
    assert f"{layer}.2" in _column_text(r.output, 1)
    assert "genuine_singularity" in _column_text(r.output, 6)
    # no --family and the factory names none: the default is used and said to be the default
    said = " ".join(r.output.split())
    assert "output family: gaussian (the default: --family was not given" in said
    title = (out / "report.md").read_text().splitlines()[0]
    assert title.startswith(f"# read: {spec}, output family: gaussian (the default")


def test_read_prints_the_family_and_where_it_came_from() -> None:
    runner = CliRunner()
    env = {"COLUMNS": "200"}
    r = runner.invoke(app, ["read", "--model", "zoo:planted-mlp"], env=env)
    assert r.exit_code == 0 and "output family: gaussian (the model's own" in r.output, r.output
    r = runner.invoke(
        app, ["read", "--model", "zoo:planted-mlp", "--family", "categorical"], env=env
    )
    assert r.exit_code == 0 and "output family: categorical (--family)" in r.output, r.output
