"""`neuromanifold lcn fiber | survey | converge` commands."""

from __future__ import annotations

import typer


def register(lcn_app: typer.Typer) -> None:
    """Attach the fiber, survey and convergence commands to the `lcn` group."""
