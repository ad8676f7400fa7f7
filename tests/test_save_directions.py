"""``read --save-directions FILE`` / ``read(..., on_vector=...)``: the unit direction of every
record swept and its base shift, from which each record's sweep is recomputed by hand (s22 trial
LM #2: checking a reported F needed a private hook)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.report import load_directions, load_reading, save_directions
from neuromanifold.singular import Categorical, directional_fisher, rewrite_as_read
from neuromanifold.singular.read import read

# F recomputed from (θ0, s, û, t) against the record's sweep: the same float64 sums, evaluated
# in one direction per call instead of the read's batches (measured worst 5e-16)
RTOL_SWEEP = 1e-10
ABOVE_FLOOR = 1e3  # points compared: F at least this multiple of the sweep's rounding floor
RUNNER = CliRunner()
ENV = {"COLUMNS": "200"}

NET = """
import torch
from torch import nn


class Net(nn.Module):  # attention read unpacked, a dead hidden unit, a live head
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(4, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.mid = nn.Linear(8, 6)
        self.head = nn.Linear(6, 3)
        with torch.no_grad():
            self.mid.weight[2] = 0.0
            self.mid.bias[2] = 0.0
            self.head.weight[:, 2] = 0.0

    def forward(self, x):
        h = self.inp(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        return self.head(torch.relu(self.mid(h + a)).mean(1))


def factory():
    return Net().double().eval()


def data():
    torch.manual_seed(1)
    return torch.randn(16, 5, 4, dtype=torch.float64)
"""


@pytest.fixture
def net_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "dirs_net.py").write_text(NET)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    import dirs_net

    return importlib.reload(dirs_net)


def _check_every_sweep(net_module, reading, saved) -> int:
    """Recompute every record's F_u(t) from the saved û and base shift; returns points compared."""
    model = net_module.factory()
    assert rewrite_as_read(model, saved["rewrites"]) == ["attn"]
    theta = {k: v.detach() for k, v in model.named_parameters()}
    x, compared = net_module.data(), 0
    for i, rec in enumerate(reading.directions):
        u, s = saved["directions"][i], saved["base_shift"][i]
        assert s == rec.sweep["base_shift"]
        norm2 = sum(float((t**2).sum()) for t in u.values())
        assert norm2 == pytest.approx(1.0, rel=1e-12)
        dot = sum(float((u[k] * theta[k]).sum()) for k in u)
        if "unsnapped" in rec.info:  # read from the snapped point θ0 − (ûᵀθ0)û
            assert s == pytest.approx(-dot, rel=1e-12)
        else:
            assert s == 0.0
        for t, f in zip(rec.sweep["t"], rec.sweep["F"], strict=True):
            if f < ABOVE_FLOOR * rec.sweep["floor"]:
                continue
            p = {k: v + (s + t) * u[k] if k in u else v for k, v in theta.items()}
            again = float(directional_fisher(model, p, u, x, Categorical()))
            assert again == pytest.approx(f, rel=RTOL_SWEEP), (i, t)
            compared += 1
    return compared


def test_the_saved_directions_give_back_every_sweep(net_module, tmp_path: Path) -> None:
    torch.save(net_module.data(), tmp_path / "x.pt")
    path, js = tmp_path / "dirs.pt", tmp_path / "r.json"
    args = ["read", "--model", "dirs_net:factory", "--data", str(tmp_path / "x.pt")]
    args += ["--family", "categorical", "--save-directions", str(path), "--json", str(js)]
    res = RUNNER.invoke(app, args, env=ENV)
    assert res.exit_code == 0, res.output
    reading, saved = load_reading(js), load_directions(path)
    n = len(reading.directions)
    assert f"wrote {path} ({n} directions)" in res.output
    assert sorted(saved["directions"]) == list(range(n))
    assert any("unsnapped" in r.info for r in reading.directions)  # a snapped base point too
    assert _check_every_sweep(net_module, reading, saved) > 5 * n


def test_on_vector_hears_each_record_once_in_order(net_module) -> None:
    heard: list[int] = []
    reading = read(
        net_module.factory(),
        net_module.data(),
        Categorical(),
        progress=False,
        on_vector=lambda i, u: heard.append(i),
    )
    assert heard == list(range(len(reading.directions)))


@pytest.mark.parametrize("kept", [2, None])  # records left in the log; None: all of them
def test_a_resumed_read_saves_every_direction_as_the_full_read_does(
    net_module, tmp_path: Path, kept: int | None
) -> None:
    """s23 trial VER #1: the directions a resume takes from its log were missing from the file
    (a complete log gave an empty one); they are rebuilt from the candidates, bit for bit."""
    torch.save(net_module.data(), tmp_path / "x.pt")
    out, full, resumed = tmp_path / "out", tmp_path / "full.pt", tmp_path / "resumed.pt"
    args = ["read", "--model", "dirs_net:factory", "--data", str(tmp_path / "x.pt")]
    args += ["--family", "categorical", "--out", str(out)]
    assert RUNNER.invoke(app, [*args, "--save-directions", str(full)], env=ENV).exit_code == 0
    log = out / "read.jsonl"
    if kept is not None:
        log.write_text("\n".join(log.read_text().splitlines()[: 1 + kept]) + "\n")
    res = RUNNER.invoke(app, [*args, "--resume", "--save-directions", str(resumed)], env=ENV)
    assert res.exit_code == 0, res.output
    a, b = load_directions(full), load_directions(resumed)
    n = len(a["directions"])
    assert f"wrote {resumed} ({n} directions)" in res.output
    assert a["base_shift"] == b["base_shift"] and sorted(b["directions"]) == list(range(n))
    for i, u in a["directions"].items():
        assert u.keys() == b["directions"][i].keys()
        for name, t in u.items():
            assert torch.equal(t, b["directions"][i][name]), (i, name)


def test_errors(net_module, tmp_path: Path) -> None:
    reading = read(net_module.factory(), net_module.data(), Categorical(), progress=False)
    u = {"head.bias": torch.ones(3)}
    with pytest.raises(ValueError, match=r"direction index 99 is not a record of the reading"):
        save_directions(tmp_path / "a.pt", {99: u}, reading)
    old = json.loads(json.dumps(reading.to_dict()))
    del old["directions"][0]["sweep"]["base_shift"]  # a reading archived before version 19
    from neuromanifold.singular.reading import Reading

    with pytest.raises(ValueError, match=r"record 0 has no sweep\['base_shift'\]"):
        save_directions(tmp_path / "a.pt", {0: u}, Reading.from_dict(old))
    torch.save({"x": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a 'neuromanifold-directions' file"):
        load_directions(tmp_path / "other.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(ValueError, match="not a torch file of directions"):
        load_directions(tmp_path / "text.pt")
    save_directions(tmp_path / "ok.pt", {0: u}, reading)
    obj = torch.load(tmp_path / "ok.pt", weights_only=True)
    torch.save({**obj, "version": 0}, tmp_path / "v0.pt")
    with pytest.raises(ValueError, match="directions file version 0; this library reads version 1"):
        load_directions(tmp_path / "v0.pt")
    res = RUNNER.invoke(
        app, ["read", "--model", "zoo:planted-mlp", "--save-directions", str(tmp_path)], env=ENV
    )
    assert (
        res.exit_code == 2 and "--save-directions" in res.output and "is a directory" in res.output
    )
