"""`rewrite_as_read` applies a reading's recorded module rewrites to the model again, so that a
later factor pass (the report's spectra) sees the blocks the read saw (s22 trial LM #10: the
projections of an ``nn.MultiheadAttention`` had no spectrum panel, though the read's live
directions sat there)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from neuromanifold.singular.adapt import REWRITE_KEYS, rewrite_as_read
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read

# the rewritten model against the packed one: the same sums in another order (float64)
RTOL_SAME_MAP = 1e-12
PROJECTIONS = {f"attn.{p}_proj" for p in "qkv"} | {"attn.out_proj"}

NET = """
import torch
from torch import nn


class Conv1D(nn.Module):  # the layout of Hugging Face's Conv1D: y = x W + b, W (nx, nf)
    def __init__(self, nf, nx):
        super().__init__()
        self.nf, self.nx = nf, nx
        self.weight = nn.Parameter(torch.randn(nx, nf) / nx**0.5)
        self.bias = nn.Parameter(0.1 * torch.randn(nf))

    def forward(self, x):
        return x @ self.weight + self.bias


class Plain(nn.Linear):  # an nn.Linear subclass computing x Wᵀ + b its own way
    def forward(self, z):
        return z @ self.weight.T + self.bias


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inp = Conv1D(8, 4)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.mid = Plain(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.inp(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        return self.head(torch.tanh(self.mid(h + a)).mean(1))


def factory():
    return Net().double().eval()


def data():
    torch.manual_seed(1)
    return torch.randn(12, 5, 4, dtype=torch.float64)
"""


@pytest.fixture
def net_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "rewrite_net.py").write_text(NET)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    import rewrite_net

    return importlib.reload(rewrite_net)


def test_the_recorded_rewrites_give_the_reads_blocks_and_the_same_function(net_module) -> None:
    model, x = net_module.factory(), net_module.data()
    reading = read(model, x, Categorical(), max_directions=0, progress=False)
    meta = reading.meta
    assert meta["conv1d_as_linear"] == ["inp"]
    assert meta["multihead_as_projections"] == ["attn"]
    assert meta["linear_subclass_as_linear"] == ["mid"]
    raw = set(kfac_factors(model, x, Categorical()))
    assert not raw & PROJECTIONS  # what the figure drew before: no attention projection
    again = copy.deepcopy(model)
    assert rewrite_as_read(again, meta) == ["inp", "attn", "mid"]
    torch.testing.assert_close(again(x), model(x), rtol=RTOL_SAME_MAP, atol=0)
    blocks = set(kfac_factors(again, x, Categorical()))
    assert blocks == {"inp", "mid", "head"} | PROJECTIONS
    assert set(kfac_factors(model, x, Categorical())) == raw  # the caller's model is untouched


def test_a_second_call_leaves_the_rewritten_model_as_it_is(net_module) -> None:
    """s23 trial VER #3: a second call said "pass the model that was read" of that model."""
    model, x = net_module.factory(), net_module.data()
    meta = read(model, x, Categorical(), max_directions=0, progress=False).meta
    once = copy.deepcopy(model)
    assert rewrite_as_read(once, meta) == ["inp", "attn", "mid"]
    kinds = [type(m) for m in once.modules()]
    assert rewrite_as_read(once, meta) == []
    assert [type(m) for m in once.modules()] == kinds
    torch.testing.assert_close(once(x), model(x), rtol=RTOL_SAME_MAP, atol=0)


def test_nothing_recorded_changes_nothing(net_module) -> None:
    model = net_module.factory()
    before = [type(m) for m in model.modules()]
    assert rewrite_as_read(model, {}) == []
    assert rewrite_as_read(model, dict.fromkeys(REWRITE_KEYS)) == []
    assert [type(m) for m in model.modules()] == before


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"multihead_as_projections": ["nope"]}, "names module 'nope', which the model does not"),
        (
            {"multihead_as_projections": ["head"]},
            "'head', which the read rewrote from an nn.MultiheadAttention; here it is a Linear",
        ),
        (
            {"linear_subclass_as_linear": ["attn"]},
            "'attn', which the read rewrote from an nn.Linear subclass; here it is a "
            "MultiheadAttention",
        ),
        (
            {"conv1d_as_linear": ["attn"]},
            "'attn', which the read rewrote from a Hugging Face Conv1D; here it is a "
            "MultiheadAttention",
        ),
    ],
)
def test_a_meta_of_another_model_is_refused(net_module, meta, message) -> None:
    with pytest.raises(ValueError, match="pass the model that was read") as err:
        rewrite_as_read(net_module.factory(), meta)
    assert message in str(err.value)


def test_the_cli_figure_pass_has_the_attention_projections(
    net_module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import neuromanifold.report.write as write
    from neuromanifold.cli import app

    drawn: list[set[str]] = []
    original = write.write_report

    def capture(reading, out, **kw):
        drawn.append(set(kw["factors"]))
        return original(reading, out, **kw)

    monkeypatch.setattr(write, "write_report", capture)
    torch.save(net_module.data(), tmp_path / "x.pt")
    args = ["read", "--model", "rewrite_net:factory", "--data", str(tmp_path / "x.pt")]
    args += ["--family", "categorical", "--max-directions", "0", "--out", str(tmp_path / "out")]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert drawn == [{"inp", "mid", "head"} | PROJECTIONS]
