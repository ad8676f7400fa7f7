"""Atomic file writes: a temporary file in the target's directory, then ``os.replace``.

``os.replace`` within one directory is atomic on POSIX and Windows, so a reader sees either the
old file or the complete new one; a write that fails midway (full disk, ``ENOSPC``; an interrupt)
removes its temporary file and leaves the old file untouched.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text"]


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a fresh temporary file beside ``path``, fsync it, then replace.

    On any exception (including ``KeyboardInterrupt``) the temporary file is removed, ``path`` is
    left as it was and the exception propagates. Returns ``path``.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Atomically replace ``path`` by ``data`` (see `atomic_write`)."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Atomically replace ``path`` by ``text`` encoded as UTF-8 (see `atomic_write`)."""
    return atomic_write_bytes(path, text.encode("utf-8"))
