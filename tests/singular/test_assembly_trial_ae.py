"""s17 user trial AE: what `assemble_from_reading` and `triple read` accept and what they state."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.singular.assembly import assemble_from_reading

runner = CliRunner()


def _rec(klass: str, k: int | None, layers: tuple[str, ...], **extra: Any) -> dict[str, Any]:
    return {
        "class": klass,
        "k": k,
        "layer": layers[0],
        "layers": list(layers),
        "detector": "kfac-A",
        **extra,
    }


def _flat(text: str) -> str:
    """The CLI output on one line (rich boxes and wraps the error message)."""
    return " ".join(text.replace("│", " ").split())


LIVE3 = [_rec("live", 1, ("fc",)) for _ in range(3)]


# --- trial AE #2: a regular_dims below the number of live records ---------------------------


@pytest.mark.parametrize("regular_dims", [0, 1, 2])
def test_regular_dims_below_the_live_records_is_refused(regular_dims: int) -> None:
    with pytest.raises(
        ValueError, match=rf"regular_dims = {regular_dims} is below the 3 live directions"
    ):
        assemble_from_reading(LIVE3, regular_dims=regular_dims)


def test_regular_dims_of_at_least_the_live_records_replaces_them() -> None:
    alone = assemble_from_reading(LIVE3)
    assert alone.lam == Fraction(3, 2)  # three live records, 1/2 each (spec §5 rule 1)
    for d in (3, 7):
        a = assemble_from_reading(LIVE3, regular_dims=d)
        assert (a.lam, a.m, a.regular_dims) == (Fraction(d, 2), 1, d)


def test_triple_read_refuses_regular_dims_below_the_live_records(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"directions": LIVE3}))
    res = runner.invoke(
        app,
        ["triple", "read", "--reading", str(path), "--regular-dims", "2"],
        env={"COLUMNS": "300"},
    )
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit)  # click's usage error
    text = _flat(res.output)
    assert "--regular-dims 2 is below the 3 live directions" in text and "λ =" not in text
    res = runner.invoke(app, ["triple", "read", "--reading", str(path), "--regular-dims", "3"])
    assert res.exit_code == 0 and res.output.startswith("λ = 3/2"), res.output
