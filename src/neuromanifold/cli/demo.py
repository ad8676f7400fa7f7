"""`neuromanifold demo` commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the `demo` commands to the top-level app."""
