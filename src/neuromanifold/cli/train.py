"""`neuromanifold train` commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the `train` commands to the top-level app."""
