"""`lcn fiber` without `--delta`: the message names the option (s19 trial AL S3).

Before, a network with L ≥ 2 layers and no `--delta` was told "delta has length 0: expected
L − 1 = 1 invariants", which does not say that an option is missing.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app

runner = CliRunner()


def _flat(text: str) -> str:
    """The output with rich's error box unwrapped into one line."""
    return " ".join(text.replace("│", " ").split())


@pytest.mark.parametrize(
    ("args", "L"),
    [
        (["--filters", "2,2", "--v", "1,1,-2"], 2),
        (["--filters", "2,2,2", "--strides", "2,2", "--v", "1,1,1,1,1,1,1,1"], 3),
        (["--filters", "2,2", "--v", "1,1,-2", "--delta", " "], 2),  # blank: no values
        (["--dim", "2", "--filters", "2x2,2x2", "--v", "1,2,1,2,4,2,1,2,1"], 2),
    ],
)
def test_a_missing_delta_is_named_as_the_option(args: list[str], L: int) -> None:
    res = runner.invoke(app, ["lcn", "fiber", *args])
    out = _flat(res.output)
    assert res.exit_code == 2, res.output
    assert "--delta is required for networks with L ≥ 2 layers" in out
    assert f"this one has L = {L}, so give L − 1 = {L - 1} value(s)" in out
    assert "delta has length 0" not in out and "Traceback" not in out


def test_one_layer_needs_no_delta() -> None:
    res = runner.invoke(app, ["lcn", "fiber", "--filters", "3", "--v", "1,2,3"])
    assert res.exit_code == 0, res.output
    assert "1 point(s) modulo signs" in res.output


def test_a_delta_of_the_wrong_length_is_still_said_as_before() -> None:
    args = ["lcn", "fiber", "--filters", "2,2,2", "--strides", "2,2", "--v", "1,1,1,1,1,1,1,1"]
    res = runner.invoke(app, [*args, "--delta", "0.5"])
    assert res.exit_code == 2
    assert "delta has length 1: expected L − 1 = 2 invariants" in _flat(res.output)
