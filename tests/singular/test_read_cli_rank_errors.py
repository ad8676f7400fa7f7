"""`neuromanifold read` under torchrun: an error every rank meets is printed once, an error of one
rank's own shard is printed by that rank (before, only rank 0 printed, so a rank-1 error vanished
and the user saw only gloo's "Connection closed by peer")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from neuromanifold.cli import read as cli_read
from neuromanifold.singular import distributed as dp


def _as_rank(monkeypatch: pytest.MonkeyPatch, r: int, world: int) -> None:
    monkeypatch.setattr(dp, "rank", lambda: r)
    monkeypatch.setattr(dp, "world_size", lambda: world)


@pytest.mark.parametrize("r", [0, 1])
def test_printing_decision(monkeypatch: pytest.MonkeyPatch, capsys, r: int) -> None:
    """Agreed errors: rank 0 alone prints them, unprefixed; a rank's own error: that rank prints
    it with its rank; one process: the message as it is."""
    _as_rank(monkeypatch, r, 2)
    cli_read._error("error: agreed", agreed=True)
    cli_read._error("error: own", agreed=False)
    err = capsys.readouterr().err.splitlines()
    assert err == (["error: agreed"] if r == 0 else []) + [f"rank {r}: error: own"]
    _as_rank(monkeypatch, 0, 1)
    monkeypatch.delenv("RANK", raising=False)
    cli_read._error("error: agreed", agreed=True)
    cli_read._error("error: own", agreed=False)
    assert capsys.readouterr().err.splitlines() == ["error: agreed", "error: own"]


@pytest.mark.parametrize(
    ("r", "local", "prints"), [(0, "0", True), (1, "1", False), (2, "0", True)]
)
def test_a_per_node_error_is_printed_by_each_nodes_first_process(
    monkeypatch: pytest.MonkeyPatch, capsys, r: int, local: str, prints: bool
) -> None:
    """The device check is the same on every process of a node, not over nodes (two nodes of
    two processes here): each node's LOCAL_RANK 0 prints it, so a node that fails is heard
    even when rank 0's node passes."""
    _as_rank(monkeypatch, r, 4)
    monkeypatch.setenv("LOCAL_RANK", local)
    cli_read._error("error: device", agreed=True, per_node=True)
    assert capsys.readouterr().err.splitlines() == (["error: device"] if prints else [])


def test_before_the_group_exists_torchrun_rank_decides(monkeypatch, capsys) -> None:
    """Argument errors come before the process group: torchrun's RANK and WORLD_SIZE decide."""
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "1"}
    assert set(dp.TORCHRUN_ENV) <= set(env)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cli_read._error("error: agreed", agreed=True)
    cli_read._error("error: own", agreed=False)
    assert capsys.readouterr().err.splitlines() == ["rank 1: error: own"]


TOKEN_MODEL = """
import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(10, 4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.emb(x).mean(1))


def build():
    return M()
"""


def test_torchrun_prints_a_rank_local_error_from_that_rank(tmp_path: Path) -> None:
    """Token id 15 ≥ the embedding's 10 rows, in sample 6 of 8: in rank 1's shard only. The
    token-id check is that rank's own (not agreed), so rank 1 prints it, once, with its rank."""
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    (tmp_path / "tokmodel.py").write_text(TOKEN_MODEL)
    ids = torch.randint(0, 10, (8, 5), generator=torch.Generator().manual_seed(0))
    ids[6, 2] = 15
    torch.save(ids, tmp_path / "tok.pt")
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "neuromanifold", "read"]
    cmd += ["--model", "tokmodel:build", "--data", "tok.pt", "--family", "categorical"]
    cmd += ["--max-directions", "1"]
    path = os.pathsep.join([str(tmp_path), *sys.path])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert proc.returncode != 0
    assert proc.stderr.count("rank 1: error: data of shape") == 1, proc.stderr[-3000:]
    assert "expects indices < 10" in proc.stderr
    assert "rank 0: error" not in proc.stderr


@pytest.mark.parametrize(
    ("local_world", "local_rank", "expected"),
    [
        ("2", "0", "error: device 'cuda' under torchrun gives each of this node's 2 processes"),
        ("2", "1", None),  # the node's first process prints it
        (None, "1", "rank 1: error: device 'cuda' resolves to cuda:1 but this machine has 1"),
    ],
)
def test_cli_device_error_reaches_the_user(
    monkeypatch: pytest.MonkeyPatch, local_world, local_rank, expected
) -> None:
    """Audit S12 #1 and S12b #3, through the CLI: 2 processes on a (faked) one-GPU node. With
    LOCAL_WORLD_SIZE every process fails alike and LOCAL_RANK 0 prints once; without it only
    rank 1 fails, and it prints its own error (before: nobody printed anything)."""
    from typer.testing import CliRunner

    from neuromanifold.cli import app

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    env = {"RANK": local_rank, "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "1"}
    env["LOCAL_RANK"] = local_rank
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    if local_world is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_world)
    r = CliRunner().invoke(app, ["read", "--model", "zoo:planted-mlp", "--device", "cuda"])
    assert r.exit_code == 2
    assert r.stdout == ""
    if expected is None:
        assert r.stderr == ""
    else:
        assert r.stderr.startswith(expected)
