"""`neuromanifold read` under torchrun: a `fail` every rank meets is printed once, by rank 0; one
that a single rank meets is printed by that rank as ``rank r: error: ...``.

s19 trial AK #4: ``--data nosuch.pt``, ``--checkpoint nosuch.pt`` and a factory that raises went
through `neuromanifold.cli._files.fail`, which printed on every rank (8 identical lines with
``--nproc_per_node 8``), and a factory raising on rank 1 alone printed with no rank prefix,
followed by rank 0's gloo "Connection closed by peer".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.cli import read as cli_read
from neuromanifold.singular import distributed as dp

RUNNER = CliRunner()
FACTORY = "nm_cli_read_fail_once_models"
MODELS = """
import os

import torch
from torch import nn


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).double()


def broken():
    raise RuntimeError("factory broken")


def broken_on_rank1():
    if os.environ.get("RANK") == "1":
        raise RuntimeError("broken on rank 1")
    return net()


if os.environ.get("RANK") != "1":  # a module that differs between the ranks' environments
    net_not_on_rank1 = net
"""
MISSING_DATA = "error: --data nosuch.pt: no such file"
MISSING_CHECKPOINT = "error: checkpoint file nosuch.pt does not exist"
BROKEN = f"error: --model: the factory {FACTORY}:broken raised RuntimeError: factory broken"
BROKEN_ON_1 = (
    f"error: --model: the factory {FACTORY}:broken_on_rank1 raised RuntimeError: broken on rank 1"
)


def _models(tmp_path: Path) -> Path:
    """``FACTORY`` (``net``, ``broken``, ``broken_on_rank1``) and 8 float64 probe inputs."""
    (tmp_path / f"{FACTORY}.py").write_text(MODELS)
    data = tmp_path / "x.pt"
    torch.save(
        torch.randn(8, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)), data
    )
    return data


def _in_models_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Work in ``tmp_path`` with `FACTORY` written there and importable afresh."""
    _models(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, FACTORY, raising=False)


def test_fail_prints_its_line_unless_held(capsys) -> None:
    from neuromanifold.cli._files import Failure, fail, failures_held  # the helpers of the fix

    with pytest.raises(Failure) as outside:
        fail("--data x.pt: no such file")
    assert outside.value.exit_code == 2 and outside.value.line == "error: --data x.pt: no such file"
    assert capsys.readouterr().err == "error: --data x.pt: no such file\n"
    with pytest.raises(Failure) as inside, failures_held():
        fail("--data x.pt: no such file")
    assert inside.value.line == "error: --data x.pt: no such file"
    assert capsys.readouterr().err == ""
    with pytest.raises(Failure):  # held only inside the block
        fail("again")
    assert capsys.readouterr().err == "error: again\n"


def _torchrun_env(monkeypatch: pytest.MonkeyPatch, r: int) -> None:
    """torchrun's variables for rank ``r`` of 2; the argument checks come before the group."""
    env = {"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r)}
    env |= {"MASTER_ADDR": "localhost", "MASTER_PORT": "1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize("r", [0, 1])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--json", "."], "error: --json .: is a directory; expected a file path"),
        (["--out", ""], "error: --out: the path is empty; expected a directory"),
        (
            ["--data", ""],
            "error: --data: the path is empty; expected a torch, safetensors or .npy file",
        ),
    ],
)
def test_an_argument_failure_is_printed_by_rank_zero_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, r: int, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    _torchrun_env(monkeypatch, r)
    res = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp", *args])
    assert res.exit_code == 2
    assert res.stdout == ""
    if r == 0:
        assert res.stderr.startswith(message), res.stderr
        assert res.stderr.count("error:") == 1
    else:
        assert res.stderr == ""


def _as_rank(monkeypatch: pytest.MonkeyPatch, r: int, others: dict[int, str | None]) -> None:
    """Rank ``r`` of 2 in a (faked) process group, where the other rank met ``others[rank]``."""
    monkeypatch.setattr(dp, "rank", lambda: r)
    monkeypatch.setattr(dp, "world_size", lambda: 2)
    monkeypatch.setenv("RANK", str(r))  # read by the factory broken_on_rank1

    def gather(line: str | None) -> list[str | None]:
        return [line if k == r else others[k] for k in range(2)]

    monkeypatch.setattr(cli_read, "_gather_failures", gather, raising=False)


@pytest.mark.parametrize("r", [0, 1])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["net", "--data", "nosuch.pt"], MISSING_DATA),
        (["net", "--data", "x.pt", "--checkpoint", "nosuch.pt"], MISSING_CHECKPOINT),
        (["broken", "--data", "x.pt"], BROKEN),  # a factory that raises on every rank
    ],
)
def test_a_load_failure_every_rank_meets_is_printed_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, r: int, args: list[str], message: str
) -> None:
    _in_models_dir(monkeypatch, tmp_path)
    _as_rank(monkeypatch, r, {0: message, 1: message})
    res = RUNNER.invoke(app, ["read", "--model", f"{FACTORY}:{args[0]}", *args[1:]])
    assert res.exit_code == 2
    assert res.stderr == (f"{message}\n" if r == 0 else ""), res.stderr


@pytest.mark.parametrize("r", [0, 1])
def test_a_load_failure_of_one_rank_is_printed_by_that_rank(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, r: int
) -> None:
    _in_models_dir(monkeypatch, tmp_path)
    _as_rank(monkeypatch, r, {0: None, 1: BROKEN_ON_1})
    res = RUNNER.invoke(app, ["read", "--model", f"{FACTORY}:broken_on_rank1", "--data", "x.pt"])
    assert res.exit_code == 2  # rank 0 too: it stops instead of waiting for rank 1
    assert res.stderr == (f"rank 1: {BROKEN_ON_1}\n" if r == 1 else ""), res.stderr


@pytest.mark.parametrize("r", [0, 1])
def test_a_factory_missing_on_one_rank_is_printed_by_that_rank(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, r: int
) -> None:
    """A ``--model`` that cannot be imported on rank 1 only: before, its usage error was one that
    torchrun's other ranks keep quiet about (so nobody printed it) and it skipped the ranks'
    agreement, where rank 0 waited for rank 1 (s19 audit AM, noticed)."""
    _in_models_dir(monkeypatch, tmp_path)
    line = (
        f"error: --model: cannot import '{FACTORY}:net_not_on_rank1': module "
        f"'{FACTORY}' has no attribute 'net_not_on_rank1'"
    )
    _as_rank(monkeypatch, r, {0: None, 1: line})
    res = RUNNER.invoke(app, ["read", "--model", f"{FACTORY}:net_not_on_rank1", "--data", "x.pt"])
    assert res.exit_code == 2  # rank 0 too: it stops instead of waiting for rank 1
    assert res.stderr == (f"rank 1: {line}\n" if r == 1 else ""), res.stderr


def _torchrun(tmp_path: Path, model: str, data: str) -> subprocess.CompletedProcess:
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "neuromanifold", "read"]
    cmd += ["--model", f"{FACTORY}:{model}", "--data", data, "--max-directions", "0"]
    path = os.pathsep.join([str(tmp_path), *sys.path])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)


def test_torchrun_prints_a_missing_data_file_once(tmp_path: Path) -> None:
    _models(tmp_path)
    proc = _torchrun(tmp_path, "net", "nosuch.pt")
    assert proc.returncode != 0
    assert proc.stderr.count(MISSING_DATA) == 1, proc.stderr[-3000:]
    assert "rank 0: error" not in proc.stderr and "rank 1: error" not in proc.stderr


def test_torchrun_prints_a_factory_failing_on_rank1_with_its_rank(tmp_path: Path) -> None:
    _models(tmp_path)
    proc = _torchrun(tmp_path, "broken_on_rank1", "x.pt")
    assert proc.returncode != 0
    assert proc.stderr.count(f"rank 1: {BROKEN_ON_1}") == 1, proc.stderr[-3000:]
    assert proc.stderr.count(BROKEN_ON_1) == 1  # not also without the prefix
    assert "Connection closed by peer" not in proc.stderr  # rank 0 stopped with rank 1


JSON_FAILED = "error: --json out.json: cannot write: No space left on device"


@pytest.mark.parametrize("r", [0, 1])
def test_a_failed_json_write_stops_every_rank_before_the_figures_pass(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, r: int
) -> None:
    """With ``--out``, the other ranks wait in the figures' collective factor pass for rank 0,
    which writes ``--json`` first: when that write fails they must stop too, silently (rank 0
    says it), rather than be left in the pass (s19 audit AM #2: a gloo traceback per rank)."""
    import neuromanifold.report.archive as archive

    _in_models_dir(monkeypatch, tmp_path)
    _as_rank(monkeypatch, r, {0: None, 1: None})
    gathers: list[list[str | None]] = []

    def gather(line: str | None) -> list[str | None]:
        # the loading's agreement finds no failure; the second, after the read, rank 0's --json
        gathers.append(
            [line, None] if r == 0 else ([None, None] if not gathers else [JSON_FAILED, line])
        )
        return gathers[-1]

    monkeypatch.setattr(cli_read, "_gather_failures", gather)

    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(archive, "write_reading_json", no_space)
    passes: list[int] = []
    monkeypatch.setattr(cli_read, "_figure_factors", lambda *a: passes.append(r))
    args = ["read", "--model", f"{FACTORY}:net", "--data", "x.pt", "--max-directions", "0"]
    res = RUNNER.invoke(app, [*args, "--json", "out.json", "--out", "report"])
    assert res.exit_code == 2
    assert len(gathers) == 2  # the loading's agreement, then the one on rank 0's --json
    assert passes == []  # no rank enters the collective pass
    assert res.stderr.endswith(f"rank 0: {JSON_FAILED}\n" if r == 0 else ""), res.stderr
    assert res.stderr.count("error:") == (1 if r == 0 else 0)
