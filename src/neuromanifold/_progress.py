"""The transient progress bars of long work: on stderr, and only where a terminal shows them."""

from __future__ import annotations

from typing import Any

__all__ = ["stderr_progress"]


def stderr_progress(*columns: Any) -> Any:
    """A transient rich ``Progress`` on stderr (stdout carries only results).

    Off a terminal (stderr a log file or a pipe) a transient bar shows nothing and leaves one
    blank line when it stops, so every library `read` call wrote a "\\n" into a pipeline's log
    (s15 trial T); the bar is then disabled. A terminal, a Jupyter notebook, or
    ``FORCE_COLOR``/``TTY_COMPATIBLE`` (which rich reads) draws it as before.
    """
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    shown = console.is_terminal or console.is_jupyter  # rich's is_terminal is False in Jupyter
    return Progress(*columns, transient=True, console=console, disable=not shown)
