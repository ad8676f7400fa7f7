"""Atomic file writes for the report: re-exported from `neuromanifold._atomic`."""

from __future__ import annotations

from neuromanifold._atomic import (
    atomic_write,
    atomic_write_bytes,
    atomic_write_text,
    new_file_mode,
)

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text", "new_file_mode"]
