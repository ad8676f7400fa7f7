"""Files written atomically get the permissions of any new file (user trial H #3).

``mkstemp`` creates its temporary file with mode 0o600; renamed into place, that made every report,
read log, figure and zoo checkpoint private whatever the umask, while the other commands'
files honoured it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from torch import nn

from neuromanifold._atomic import atomic_write_text, new_file_mode
from neuromanifold.zoo.checkpoint import CheckpointMeta, save_checkpoint


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_gets_0666_less_the_umask(tmp_path: Path, umask_022) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # what open() gives a new file under this umask
    atomic = atomic_write_text(tmp_path / "atomic.txt", "x")
    assert _mode(atomic) == _mode(plain) == 0o644
    os.umask(0o077)
    assert _mode(atomic_write_text(tmp_path / "private.txt", "x")) == 0o600


def test_a_replaced_file_keeps_its_mode(tmp_path: Path, umask_022) -> None:
    target = tmp_path / "report.md"
    target.write_text("old")
    target.chmod(0o640)
    assert new_file_mode(target) == 0o640
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and _mode(target) == 0o640


def test_checkpoints_follow_the_umask(tmp_path: Path, umask_022) -> None:
    path = save_checkpoint(
        tmp_path / "m.safetensors", nn.Linear(2, 1), CheckpointMeta({"kind": "linear"})
    )
    assert _mode(path) == _mode(path.with_suffix(".json")) == 0o644


def test_a_read_only_or_setuid_target_is_replaced_with_its_plain_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Audit S12b #2: the temporary file was chmod-ed to a mode without read permission and then
    reopened for the fsync (PermissionError for non-root users), and setuid/setgid/sticky bits
    were copied onto the new content. Now the fsync comes first and only 0o777 bits carry over.
    Root may reopen any file, so the order of the two calls is checked directly."""
    import neuromanifold._atomic as atomic

    calls: list[str] = []
    fsync, chmod = os.fsync, os.chmod

    def spy_fsync(fd: int) -> None:
        calls.append("fsync")
        fsync(fd)

    def spy_chmod(path, mode, **kw) -> None:  # os is shared: record the temporary file only
        if str(path).endswith(".tmp"):
            calls.append(f"chmod {mode:o}")
        chmod(path, mode, **kw)

    monkeypatch.setattr(atomic.os, "fsync", spy_fsync)
    monkeypatch.setattr(atomic.os, "chmod", spy_chmod)
    target = tmp_path / "locked.txt"
    target.write_text("old")
    target.chmod(0o200)  # write-only
    atomic_write_text(target, "new")
    assert calls == ["fsync", "chmod 200"]
    assert _mode(target) == 0o200
    target.chmod(0o644)
    assert target.read_text() == "new"
    target.chmod(0o4755)
    assert new_file_mode(target) == 0o755
    atomic_write_text(target, "newer")
    assert _mode(target) == 0o755
