"""``--json -`` is one convention for every command with ``--json``: the JSON on stdout instead
of the text output, nothing else on stdout, and no file named ``-`` (`neuromanifold.cli._files`).

Trial H #4: `triple *` printed the JSON, while `lcn *`, `read` and `cells` wrote a file named
``-`` and printed their text output and "wrote -".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import typer
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.cli._files import JSON_STDOUT_HELP

RUNNER = CliRunner()
ENV = {"COLUMNS": "200"}

# fast argument lists of every command with --json (the target is appended)
JSON_COMMANDS = {
    "cells": ["cells", "--only", "gaussian_location_k1"],
    "lcn ntk": ["lcn", "ntk", "--filters", "2,2", "--strides", "1", "--theta", "1,2;1,-1"],
    "lcn fiber": ["lcn", "fiber", "--filters", "2,2", "--v", "1,1,-2", "--delta", "-3"],
    "lcn compare": [
        *("lcn", "compare", "--filters", "2,2", "--strides", "2", "--v", "3,6,0,0"),
        *("--delta", "0", "--delta", "1", "--starts", "2"),
    ],
    "lcn survey": ["lcn", "survey", "--samples", "1", "--rows", "0"],
    "triple nu": ["triple", "nu", "--k", "1-2"],
    "triple rrr": ["triple", "rrr", "3", "2", "3", "1"],
    "triple dln": ["triple", "dln", "--widths", "2,2,2"],
}
# keys whose value legitimately differs between two runs of the same command (wall-clock time)
RUN_DEPENDENT_KEYS = {"lcn survey": ("elapsed_s",)}


def _without(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


def _dash_equals_file(name: str, args: list[str], tmp_path: Path) -> None:
    """Run ``args`` with ``--json -`` (cwd ``tmp_path``) and with ``--json FILE``: stdout is
    exactly the JSON the file gets, and no file named ``-`` appears."""
    file_run = RUNNER.invoke(app, [*args, "--json", str(tmp_path / "out.json")], env=ENV)
    assert file_run.exit_code == 0, file_run.output
    dash_run = RUNNER.invoke(app, [*args, "--json", "-"], env=ENV)
    assert dash_run.exit_code == 0, dash_run.output
    assert not (tmp_path / "-").exists()
    printed = json.loads(dash_run.stdout)  # fails when anything else is printed on stdout
    written = json.loads((tmp_path / "out.json").read_text())
    keys = RUN_DEPENDENT_KEYS.get(name, ())
    assert _without(printed, keys) == _without(written, keys)


@pytest.mark.parametrize("name", sorted(JSON_COMMANDS))
def test_json_dash_prints_the_json_on_stdout_only(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _dash_equals_file(name, JSON_COMMANDS[name], tmp_path)


def test_read_json_dash_prints_the_json_on_stdout_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _dash_equals_file("read", ["read", "--model", "zoo:planted-mlp"], tmp_path)


def test_dot_slash_dash_still_names_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # only the exact text "-" means stdout: "./-" is the way to write a file called "-"
    monkeypatch.chdir(tmp_path)
    r = RUNNER.invoke(app, [*JSON_COMMANDS["lcn ntk"], "--json", "./-"], env=ENV)
    assert r.exit_code == 0, r.output
    assert "architecture" in r.stdout and "wrote ./-" in r.stdout  # the text output
    assert "ntk" in json.loads((tmp_path / "-").read_text())


def _json_option_help(command: list[str]) -> str:
    cmd: Any = typer.main.get_command(app)
    for word in command:
        cmd = cmd.commands[word]
    (option,) = [p for p in cmd.params if "--json" in p.opts]
    return option.help or ""


@pytest.mark.parametrize("name", sorted(JSON_COMMANDS))
def test_json_help_states_the_dash_convention(name: str) -> None:
    words = [w for w in JSON_COMMANDS[name] if not w.startswith("-")][: len(name.split())]
    assert JSON_STDOUT_HELP in _json_option_help(words)


def test_read_json_dash_keeps_progress_and_wrote_lines_off_stdout(tmp_path: Path) -> None:
    """Audit S12c #3 and #4: with a terminal-like stdout (FORCE_COLOR) the read's progress bar
    was drawn on stdout, ahead of the JSON; with --out the "wrote …" line went to a silenced
    console. Progress is on stderr, and so is what was written when stdout holds the JSON."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "FORCE_COLOR": "1", "OMP_NUM_THREADS": "1"}
    out = tmp_path / "rep"
    cmd = [sys.executable, "-m", "neuromanifold", "read", "--model", "zoo:planted-mlp"]
    r = subprocess.run(
        [*cmd, "--json", "-", "--out", str(out)], capture_output=True, text=True, env=env,
        timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["directions"]
    import re

    plain = " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", r.stderr).split())  # no colour codes
    assert f"wrote {out / 'report.md'}, {out / 'report.json'} and 3 figures" in plain


def test_read_json_dash_says_its_warnings_on_stderr() -> None:
    """s15 trial T #2: under --json - the family line, the modules not covered and the reading's
    note went to the silenced text console, so a pipeline never saw them."""
    args = ["read", "--model", "zoo:planted-mlp", "--max-directions", "0", "--json", "-"]
    r = RUNNER.invoke(app, args, env=ENV)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["meta"]["n_read"] == 0  # stdout: the JSON only
    err = " ".join(r.stderr.split())
    assert "output family: gaussian" in err
    assert "none was read (max_directions=0)" in err


@pytest.mark.parametrize(
    ("args", "whole"),
    [
        (["cells", "--only", "gaussian_location_k2"], "gaussian_location_k2"),
        (["read", "--model", "zoo:planted-mlp"], "genuine_singularity"),
    ],
)
def test_piped_tables_keep_each_row_on_one_line(args: list[str], whole: str) -> None:
    """s15 trial T #1: with stdout a pipe and no COLUMNS, rich laid tables out at 80 columns and
    folded cells, so ``grep genuine_singularity`` found nothing. Each row is one line now."""
    r = RUNNER.invoke(app, args, env={"COLUMNS": None})
    assert r.exit_code == 0, r.output
    assert any(whole in line for line in r.stdout.splitlines()), r.stdout


def test_library_read_writes_nothing_to_a_non_terminal_stderr(capfd, monkeypatch) -> None:
    """s15 trial T: with stderr a log file every `read()` call wrote one blank line (a transient
    bar that a non-terminal never shows). Off a terminal the bar is disabled."""
    from torch import nn

    from neuromanifold import read
    from neuromanifold.singular import Gaussian

    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    with torch.no_grad():
        model[0].weight[0].zero_()  # a dead unit: at least one direction to read
    read(model, torch.randn(32, 3, dtype=torch.float64), Gaussian())
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_progress_bars_stay_on_in_jupyter(monkeypatch) -> None:
    """s15 audit W #2: rich's is_terminal is False in a notebook, where the bars were drawn
    before 51d5d74 disabled them off a terminal; a notebook shows them."""
    import rich.console

    from neuromanifold._progress import stderr_progress

    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    assert stderr_progress().disable  # a captured, non-terminal stderr
    monkeypatch.setattr(rich.console, "_is_jupyter", lambda: True)
    assert not stderr_progress().disable
