"""`neuromanifold cells`: read every constructed cell and print the pass/fail table."""

from __future__ import annotations

import difflib
from pathlib import Path

import typer

from neuromanifold.cli._files import (
    JSON_STDOUT_HELP,
    check_json_target,
    check_out_dir,
    emit_json,
    json_to_stdout,
    out_dir_parser,
    prepare_out_dir,
    writing,
)

_OUT = out_dir_parser()


def cells(
    json_path: str | None = typer.Option(
        None, "--json", help=f"Write the results as JSON to PATH {JSON_STDOUT_HELP}."
    ),
    out: Path | None = typer.Option(
        None, "--out", parser=_OUT, metavar="DIR", help="Write one log–log PNG per cell into DIR."
    ),
    only: list[str] | None = typer.Option(None, "--only", help="Read only this cell (repeatable)."),
    seed: int = typer.Option(0, "--seed", help="Seed passed to every cell constructor."),
    list_cells: bool = typer.Option(
        False,
        "--list",
        help="Print every cell's name, expected answer and construction, and exit (reads nothing).",
    ),
) -> None:
    """Read every constructed cell; print cell, expected, k, k̂, slope, r², class, pass/fail.

    Exits with code 1 (naming the failing cells) if any cell fails its expected order or class;
    under '--json -' the table is not printed and the failures are named on stderr.
    """
    from rich.console import Console
    from rich.table import Table

    from neuromanifold.cells.registry import CELLS, all_cells, get_cell
    from neuromanifold.cells.table import read_cells
    from neuromanifold.cli._console import stdout_console

    if list_cells:
        _print_list(seed)
        return
    check_json_target(json_path, stdout_ok=True)
    check_out_dir(out)
    to_stdout = json_to_stdout(json_path)
    console = stdout_console(
        quiet=to_stdout
    )  # the text output; stdout holds the JSON under --json -
    failures = Console(stderr=True) if to_stdout else console
    names = list(dict.fromkeys(only)) if only else []  # a name given twice is read once
    for name in names:
        if name not in CELLS:
            # the close names alone when there are some: the whole list is 44 names long
            close = difflib.get_close_matches(name, list(CELLS), n=3, cutoff=0.6)
            hint = (
                f"did you mean {' or '.join(close)}? (every name: neuromanifold cells --list)"
                if close
                else f"expected one of: {', '.join(CELLS)}"
            )
            raise typer.BadParameter(f"unknown cell {name!r}; {hint}", param_hint="--only")
    chosen = [get_cell(name, seed=seed) for name in names] if names else all_cells(seed=seed)
    rows = read_cells(chosen)

    def fmt(v: float | None, spec: str) -> str:
        return "—" if v is None else format(v, spec)

    table = Table(title="Constructed cells: directional-Fisher order read")
    # narrow terminals (80 columns whenever the output is piped) fold the long names onto
    # further lines; the short columns keep their full width, never cut to an ellipsis or to 0
    table.add_column("cell", overflow="fold")
    table.add_column("expected", overflow="fold")
    for col, width in (("k", 2), ("k̂", 6), ("slope", 6), ("r²", 7)):
        table.add_column(col, no_wrap=True, min_width=width)
    table.add_column("class", overflow="fold")
    table.add_column("pass", no_wrap=True, min_width=4)
    for _, _, res in rows:
        expected = res.expected_class if res.expected_k is None else f"k={res.expected_k}"
        table.add_row(
            res.name,
            expected,
            "—" if res.k is None else str(res.k),
            fmt(res.k_hat, ".4f"),
            fmt(res.slope, ".4f"),
            fmt(res.r2, ".5f"),
            res.klass,
            "[green]pass[/green]" if res.passed else "[red]FAIL[/red]",
        )
    console.print(table)

    # the seed and the selection with the results: the file alone reproduces them
    payload = {"seed": seed, "only": names or None}
    written = emit_json(json_path, {**payload, "cells": [res.to_dict() for _, _, res in rows]})
    if written is not None:
        console.print(f"wrote {written}")
    if out is not None:
        from neuromanifold.cells.plot import plot_reading

        prepare_out_dir(out)
        with writing(out, option="--out"):
            for cell, reading, res in rows:
                plot_reading(
                    reading, out / f"{cell.name}.png", title=cell.name, expected_k=res.expected_k
                )
        console.print(f"wrote {len(rows)} figure{'s' * (len(rows) != 1)} to {out}")

    failed = [res for _, _, res in rows if not res.passed]
    if failed:
        for res in failed:
            failures.print(f"[red]FAIL[/red] {res.name}: {'; '.join(res.failures)}")
        failures.print(
            f"{len(failed)} of {len(rows)} cells failed: {', '.join(r.name for r in failed)}"
        )
        raise typer.Exit(code=1)
    console.print(f"all {len(rows)} cells passed")


def register(app: typer.Typer) -> None:
    """Attach the `cells` command to the top-level app."""
    app.command(name="cells")(cells)


def _print_list(seed: int) -> None:
    """One line per registry cell: name, expected order or class, the construction's first
    sentence."""
    from neuromanifold.cells.registry import CELLS, get_cell

    width = max(map(len, CELLS))
    for name in CELLS:
        cell = get_cell(name, seed=seed)
        expected = cell.expected_class if cell.expected_k is None else f"k={cell.expected_k}"
        first = cell.description.split(". ")[0].rstrip(".")
        typer.echo(f"{name:<{width}}  {expected:<19}  {first}")
