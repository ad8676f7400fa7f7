"""The ``neuromanifold`` command line.

Each command group lives in its own module exposing ``register(app)``; this module only
assembles them, so adding a command never touches another command's code.
"""

from __future__ import annotations

import typer

from neuromanifold.cli import cells, demo, lcn, read, train, triple

app = typer.Typer(
    name="neuromanifold",
    help="Measure the geometry of neural-network parametrizations.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Measure the geometry of neural-network parametrizations."""


@app.command()
def version() -> None:
    """Print the installed version."""
    from neuromanifold import __version__

    typer.echo(__version__)


for _module in (lcn, cells, triple, read, train, demo):
    _module.register(app)


def main() -> None:
    """Console-script entry point."""
    app()
