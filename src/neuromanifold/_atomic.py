"""Atomic file writes: a temporary file in the target's directory, then ``os.replace``.

``os.replace`` within one directory is atomic on POSIX and Windows, so a reader sees either the
old file or the complete new one; a write that fails midway (full disk, ``ENOSPC``; an interrupt)
removes its temporary file and leaves the old file untouched.

The new file gets the permissions any file the user creates gets (``0o666`` less the umask), or
those of the file it replaces: ``mkstemp`` alone would leave every report private (``0o600``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text", "new_file_mode"]


def new_file_mode(target: Path) -> int:
    """Permission bits for a file written to ``target``: the read/write/execute bits of the file
    there now (not its setuid, setgid or sticky bits: new content does not inherit them), else
    ``0o666 & ~umask`` (what ``open(target, "w")`` would give a new file)."""
    try:
        return target.stat().st_mode & 0o777
    except FileNotFoundError:
        mask = os.umask(0)  # reading the umask means setting it: restored at once
        os.umask(mask)
        return 0o666 & ~mask


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a fresh temporary file beside ``path``, fsync it, then replace.

    On any exception (including ``KeyboardInterrupt``) the temporary file is removed, ``path`` is
    left as it was and the exception propagates. Returns ``path``.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = new_file_mode(target)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # after the fsync: a read-only mode must not stop it
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
