"""The ``neuromanifold`` command line.

Each command group lives in its own module exposing ``register(app)``; this module only
assembles them, so adding a command never touches another command's code.
"""

from __future__ import annotations

import typer

from neuromanifold.cli import cells, compare, demo, lcn, read, train, triple

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


for _module in (lcn, cells, triple, read, compare, train, demo):
    _module.register(app)


def main() -> None:
    """Console-script entry point.

    Under torchrun every rank parses the same command line, so a usage error (an unknown option,
    a bad value) is met by every rank alike: rank 0 prints it, the other ranks exit with the same
    code silently (before, the message appeared once per rank).
    """
    r = _torchrun_rank()
    if r is None or r == 0:
        app()
        return
    # click's base of usage errors; recent typer versions vendor click, so take it from typer
    usage = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    try:
        code = app(standalone_mode=False)
    except usage as err:  # printed by rank 0
        raise SystemExit(getattr(err, "exit_code", 2)) from None
    except typer.Abort:
        raise SystemExit(1) from None
    raise SystemExit(code if isinstance(code, int) else 0)


def _torchrun_rank() -> int | None:
    """torchrun's ``RANK`` when this process was launched by torchrun, else None (the check
    imports torch.distributed only when ``RANK`` is set)."""
    import os

    if "RANK" not in os.environ:
        return None
    from neuromanifold.singular.distributed import launched_by_torchrun

    return int(os.environ["RANK"]) if launched_by_torchrun() else None
