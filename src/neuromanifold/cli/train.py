"""`neuromanifold train` commands: run a named zoo recipe and write its checkpoints."""

from __future__ import annotations

from pathlib import Path

import typer

from neuromanifold.cli._files import (
    DEFAULT_CACHE_OPTION,
    JSON_STDOUT_HELP,
    check_json_target,
    check_out_dir,
    emit_json,
    json_to_stdout,
    out_dir_parser,
)

_OUT = out_dir_parser()


def register(app: typer.Typer) -> None:
    """Attach the `train` command to the top-level app."""

    @app.command("train")
    def train_command(
        recipe: str = typer.Argument(
            ..., help="Recipe: vit-digits-scratch, vit-digits-finetune or optimizer-sweep."
        ),
        out: Path | None = typer.Option(
            None,
            "--out",
            parser=_OUT,
            metavar="DIR",
            help="Output directory (default: the user cache, reused when it matches).",
        ),
        steps: int | None = typer.Option(
            None,
            "--steps",
            min=1,
            help=(
                "Override every stage's steps. Each value is its own run (a decaying learning-rate "
                "schedule spans the given steps), not a snapshot of a longer one; the checkpoints "
                "are written as OUT/<stage>.safetensors, so give each run its own --out."
            ),
        ),
        seed: int = typer.Option(0, "--seed", help="Model initialisation and batch-order seed."),
        no_cache: bool = typer.Option(
            False, "--no-cache", help="Retrain even if a checkpoint matches."
        ),
        json_path: str | None = typer.Option(
            None,
            "--json",
            help=f"Write the checkpoints and every stage's metrics to PATH {JSON_STDOUT_HELP}.",
        ),
    ) -> None:
        """Train a named recipe (or load it from its cache); print checkpoints and metrics."""
        from rich.table import Table

        from neuromanifold.cli._console import stdout_console
        from neuromanifold.zoo.recipes import RECIPES, run_recipe

        if recipe not in RECIPES:
            raise typer.BadParameter(
                f"unknown recipe {recipe!r}; expected one of {sorted(RECIPES)}", param_hint="RECIPE"
            )
        from neuromanifold.zoo.recipes import default_cache_dir

        if out is None:  # the default cache (s34 trial DEMO D1: unchecked, a late traceback)
            check_out_dir(default_cache_dir(), option=DEFAULT_CACHE_OPTION)
        else:
            check_out_dir(out)
        check_json_target(json_path, stdout_ok=True)
        result = run_recipe(
            recipe, out=out, steps=steps, seed=seed, progress=True, use_cache=not no_cache
        )
        table = Table(title=f"{recipe} ({result.wall_s:.1f} s)")
        for col in ("stage", "val loss", "val acc", "train acc", "cached", "checkpoint"):
            table.add_column(col, overflow="fold")  # fold, not "…": paths stay copyable
        for stage, path in result.checkpoints.items():
            m = result.metrics[stage]
            table.add_row(
                stage,
                f"{m['val_loss']:.4f}",
                f"{m['val_accuracy']:.4f}",
                f"{m.get('train_accuracy', float('nan')):.4f}",
                "yes" if stage in result.cached else "no",
                str(path),
            )
        if not json_to_stdout(json_path):
            stdout_console().print(table)
        emit_json(json_path, result.to_dict(), say=True)  # s32 trial TRAIN #13
