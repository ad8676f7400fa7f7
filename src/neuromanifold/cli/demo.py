"""`neuromanifold demo`: cells, scratch and fine-tuned ViTs, optimizer comparison, one report."""

from __future__ import annotations

from pathlib import Path

import typer

from neuromanifold.cli._files import (
    DEFAULT_CACHE_OPTION,
    check_out_dir,
    nonempty_path,
    out_dir_parser,
)

_OUT = out_dir_parser()
_CACHE = nonempty_path("--cache", "a directory")


def register(app: typer.Typer) -> None:
    """Attach the `demo` command to the top-level app."""

    @app.command("demo")
    def demo_command(
        out: Path = typer.Option(
            ...,
            "--out",
            parser=_OUT,
            metavar="DIR",
            help="report directory (report.md, .json, figures)",
        ),
        probe: int = typer.Option(64, "--probe", min=1, help="validation digits per read"),
        cache: Path | None = typer.Option(
            None,
            "--cache",
            parser=_CACHE,
            metavar="DIR",
            help="checkpoint cache (default: the user cache of the recipes)",
        ),
        no_cells: bool = typer.Option(False, "--no-cells", help="skip the constructed cells"),
        no_baseline: bool = typer.Option(
            False,
            "--no-baseline",
            help="skip the per-coordinate scan beside the scratch ViT and the weakest hidden "
            "direction reads of its MLP blocks (and their findings)",
        ),
        seed: int = typer.Option(0, "--seed", help="recipe seed"),
    ) -> None:
        """Read the cells, train (or load) and read two ViTs and four optimizers; write a report."""
        from neuromanifold.cli._console import stdout_console
        from neuromanifold.demo import DemoConfig, run_demo
        from neuromanifold.report.demo_report import demo_findings
        from neuromanifold.zoo.recipes import default_cache_dir

        check_out_dir(out)
        # the default cache too: an unwritable one failed after minutes of training with a
        # worker's traceback (s34 trial DEMO D1)
        if cache is None:
            check_out_dir(default_cache_dir(), option=DEFAULT_CACHE_OPTION)
        else:
            check_out_dir(cache, option="--cache")
        config = DemoConfig(
            probe=probe,
            cache=None if cache is None else str(cache),
            cells=() if no_cells else None,
            baseline=not no_baseline,
            seed=seed,
        )
        import time

        start = time.perf_counter()
        try:
            result = run_demo(out, config)
        except (ValueError, TypeError) as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(code=2) from err
        console = stdout_console()
        for f in demo_findings(result):
            verdict = {True: "holds", False: "does not hold", None: "undecided"}[f.holds]
            console.print(f"[bold]{f.subject}[/bold]: {verdict}")
        console.print(
            f"wrote {out / 'report.md'}, {out / 'report.json'} and figures/ "
            f"in {time.perf_counter() - start:.1f} s"  # the writing included (s34 DEMO D5)
        )
