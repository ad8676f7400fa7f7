"""`neuromanifold triple` commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the `triple` commands to the top-level app."""
