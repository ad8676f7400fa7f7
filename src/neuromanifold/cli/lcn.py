"""`neuromanifold lcn` commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the `lcn` commands to the top-level app."""
