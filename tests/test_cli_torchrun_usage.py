"""Under torchrun every rank parses the same command line: a usage error is printed once, by
rank 0; the other ranks exit with the same code silently (before, once per rank)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run(args: list[str], rank: int | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    if rank is not None:  # what torchrun sets (the process group is not created by these errors)
        env |= {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)}
        env |= {"MASTER_ADDR": "localhost", "MASTER_PORT": "1"}
    cmd = [sys.executable, "-m", "neuromanifold", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["read", "--bogus"], "No such option: --bogus"),  # the parser's own error
        (["read", "--model", "zoo:planted-mlp", "--resume"], "--resume needs --out"),  # a command's
    ],
)
def test_usage_errors_print_once_under_torchrun(args: list[str], message: str) -> None:
    alone, r0, r1 = _run(args, None), _run(args, 0), _run(args, 1)
    assert alone.returncode == r0.returncode == r1.returncode == 2
    assert message in alone.stderr and message in r0.stderr
    assert r1.stderr == "" and r1.stdout == ""


def test_other_ranks_still_run_commands() -> None:
    """Rank 1 runs a valid command normally (output and exit code)."""
    proc = _run(["version"], 1)
    assert proc.returncode == 0 and proc.stdout.strip()
