"""``neuromanifold read --out DIR --resume`` says how many finished directions it took from the
read log before it reads the rest (s22 trial LM #9: a resumed read gave no sign that it resumed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app

RUNNER = CliRunner()
ENV = {"COLUMNS": "200"}
ARGS = ["read", "--model", "resume_net:three_dead"]

FACTORY = """
import torch
from neuromanifold.cells.planted import planted_mlp

def three_dead():
    p = planted_mlp(n=48, hidden=7, seed=1)  # one dead unit, and two more killed here
    with torch.no_grad():
        live = [i for i in range(7) if p.model[0].weight[i].abs().sum() > 0][:2]
        for i in live:
            p.model[0].weight[i] = 0.0
            p.model[0].bias[i] = 0.0
            p.model[2].weight[:, i] = 0.0
    return p
"""


@pytest.fixture(autouse=True)
def _factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "resume_net.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))


def _resume_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("--resume:")]


def test_a_resumed_read_names_the_directions_taken_from_its_log(tmp_path: Path) -> None:
    out = tmp_path / "report"
    full = tmp_path / "full.json"
    first = RUNNER.invoke(app, [*ARGS, "--out", str(out), "--json", str(full)], env=ENV)
    assert first.exit_code == 0, first.output
    assert _resume_lines(first.output) == []  # a fresh read says nothing of resuming
    log = out / "read.jsonl"
    lines = log.read_text().splitlines()
    n_total = len(json.loads(full.read_text())["directions"])
    assert len(lines) == 1 + n_total >= 3  # header + one line per direction
    keep = 1
    log.write_text("\n".join(lines[: 1 + keep]) + "\n")  # as if stopped after one direction
    again = tmp_path / "again.json"
    res = RUNNER.invoke(app, [*ARGS, "--out", str(out), "--resume", "--json", str(again)], env=ENV)
    assert res.exit_code == 0, res.output
    assert _resume_lines(res.output) == [f"--resume: {keep} finished direction taken from {log}"]
    assert json.loads(again.read_text())["directions"] == json.loads(full.read_text())["directions"]


def test_a_read_without_resume_says_it_replaces_a_finished_log(tmp_path: Path) -> None:
    """s32 trial TRAIN #5: a rerun into a DIR holding a finished log restarted it silently."""
    out = tmp_path / "report"
    assert RUNNER.invoke(app, [*ARGS, "--out", str(out)], env=ENV).exit_code == 0
    log = out / "read.jsonl"
    n = len(json.loads((out / "report.json").read_text())["directions"])  # the read's own count
    res = RUNNER.invoke(app, [*ARGS, "--out", str(out)], env=ENV)
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert f"{log} holds {n} finished directions of an earlier read, which this read replaces" in (
        said
    )
    assert "(--resume continues it instead)" in said


def test_a_torn_last_line_is_named(tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert RUNNER.invoke(app, [*ARGS, "--out", str(out)], env=ENV).exit_code == 0
    log = out / "read.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])  # killed while writing line 3
    res = RUNNER.invoke(app, [*ARGS, "--out", str(out), "--resume"], env=ENV)
    assert res.exit_code == 0, res.output
    assert _resume_lines(res.output) == [
        f"--resume: 1 finished direction taken from {log}; its torn last line was dropped and "
        "that direction is read again"
    ]


def test_a_resume_without_a_log_says_it_reads_from_the_start(tmp_path: Path) -> None:
    out = tmp_path / "report"
    res = RUNNER.invoke(app, [*ARGS, "--out", str(out), "--resume"], env=ENV)
    assert res.exit_code == 0, res.output
    assert _resume_lines(res.output) == [
        f"--resume: no finished direction in {out / 'read.jsonl'}; reading from the start"
    ]


def test_with_json_on_stdout_the_resume_line_goes_to_stderr(tmp_path: Path) -> None:
    out = tmp_path / "report"
    res = RUNNER.invoke(app, [*ARGS, "--out", str(out), "--resume", "--json", "-"], env=ENV)
    assert res.exit_code == 0, res.output
    json.loads(res.stdout)  # stdout holds the JSON only
    assert len(_resume_lines(res.stderr)) == 1


def test_the_resume_hint_under_torchrun_says_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torchrun … read --resume`` is refused, so the hint after an interrupted or failed group
    read says to resume in one process (s28 trial DIST F4: it said "the same command")."""
    from neuromanifold.cli import read as cli_read
    from neuromanifold.singular import distributed as dp

    assert cli_read._resume_hint() == "run the same command with --resume to continue"
    monkeypatch.setattr(dp, "world_size", lambda: 2)
    assert "in one process (without torchrun) with --resume" in cli_read._resume_hint()


def test_a_failed_collective_is_told_apart_from_a_failure_of_the_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch.distributed as dist

    from neuromanifold.cli import read as cli_read
    from neuromanifold.singular import distributed as dp

    lost = RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer")
    own = RuntimeError("mat1 and mat2 shapes cannot be multiplied")
    assert not cli_read._group_failure(lost)  # one process: no group to fail
    monkeypatch.setattr(dp, "world_size", lambda: 2)
    assert cli_read._group_failure(lost) and cli_read._group_failure(dist.DistError("timeout"))
    assert not cli_read._group_failure(own)
