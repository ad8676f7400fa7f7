"""Every command's --help is plain text: no reStructuredText markup from the docstrings."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app


def _commands() -> list[list[str]]:
    """Every leaf command of the app, as its argument path (``["lcn", "ntk"]``)."""
    import typer

    out: list[list[str]] = []

    def walk(cmd: object, path: list[str]) -> None:
        if hasattr(cmd, "commands"):  # a group (typer vendors its own click classes)
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        else:
            out.append(path)

    walk(typer.main.get_command(app), [])
    return out


COMMANDS = _commands()


def test_every_command_is_listed() -> None:
    assert ["read"] in COMMANDS and ["lcn", "ntk"] in COMMANDS and len(COMMANDS) >= 13


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_help_has_no_rst_markup(args: list[str]) -> None:
    """Trial N (session 14): ``--json -`` and ``%.6g`` were shown with their double backticks."""
    r = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "``" not in r.output
