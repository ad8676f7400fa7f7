"""`neuromanifold compare A B`: do two saved readings of one model agree up to rounding?

For the JSON of two runs of `read` on the same checkpoint and probe set (another device, another
number of processes, a re-run): `neuromanifold.singular.agreement.reading_differences`. Exit
status 0 when they agree, 1 when they differ (each difference on its own line), 2 when a file
cannot be read as a Reading.
"""

from __future__ import annotations

from pathlib import Path

import typer

from neuromanifold.cli._files import (
    JSON_STDOUT_HELP,
    check_json_target,
    emit_json,
    fail,
    text_echo,
)


def _load(path: Path, which: str):
    """The Reading in ``path``: a JSON file, or the folder `read --out` wrote (its report.json)."""
    from neuromanifold.report import load_reading

    if path.is_dir():
        if not (path / "report.json").is_file():
            fail(
                f"{which} {path} is a folder without a report.json; give the Reading JSON file "
                "(read --json FILE, or the folder read --out DIR wrote)"
            )
        path = path / "report.json"
    try:
        return load_reading(path)
    except (OSError, ValueError) as err:
        fail(f"{which}: {err}")


def compare(
    first: Path = typer.Argument(..., metavar="A", help="A Reading JSON, or a read --out folder."),
    second: Path = typer.Argument(..., metavar="B", help="The Reading to compare it with."),
    json_path: str | None = typer.Option(
        None, "--json", help=f"Write the result as JSON to PATH {JSON_STDOUT_HELP}."
    ),
) -> None:
    """Whether two readings of one model agree up to floating-point rounding: the same
    decisions (candidates, orders, classes, λ_dir, rate windows), t-grids and directional
    Fishers within the rounding tolerance (neuromanifold.singular.agreement). Exits 0 when
    they agree, 1 when they differ."""
    from neuromanifold.singular.agreement import reading_differences

    check_json_target(json_path, stdout_ok=True)
    a, b = _load(first, "A"), _load(second, "B")
    differences = reading_differences(a, b)
    echo = text_echo(json_path)
    n = len(a.directions)
    if differences:
        m = len(differences)
        echo(f"the readings differ ({m} difference{'' if m == 1 else 's'}):")
        for line in differences:
            echo(f"  {line}")
    else:
        echo(f"the readings agree up to rounding ({n} direction{'' if n == 1 else 's'})")
    emit_json(json_path, {"agree": not differences, "differences": differences}, say=True)
    if differences:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
