"""`neuromanifold lcn` commands: linear convolutional network geometry."""

from __future__ import annotations

import typer

from neuromanifold.cli import lcn_fiber

lcn_app = typer.Typer(help="Linear (convolutional) network geometry.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Attach the `lcn` command group to the top-level app."""
    lcn_fiber.register(lcn_app)
    app.add_typer(lcn_app, name="lcn")
