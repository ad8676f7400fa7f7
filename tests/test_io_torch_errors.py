"""A file that is not a torch file, or ends early, gets a readable reason naming the file.

s17 trial AF #6: ``hello world`` as a checkpoint or ``--data`` gave the reason ``101`` (torch's
weights-only unpickler raised ``KeyError(101)``: ``h`` is BINGET, ``e`` = 101 its memo key), and
an empty ``--data`` file ``EOFError()``.
"""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.io import load_model, read_state_dict
from neuromanifold.zoo.models import MLPConfig

NOT_TORCH = "not a torch file (not a zip archive or a pickle that torch.save writes)"
ENDS_EARLY = "the file ends early (empty or truncated)"


def _legacy_truncated() -> bytes:
    """A torch file in the legacy (pickle, not zip) format, cut after 40 bytes."""
    buf = io.BytesIO()
    torch.save({"w": torch.ones(3)}, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()[:40]


# bytes → the reason; each case is a different bare error of the unpickler (in the comment)
CASES = {
    "hello": (b"hello world" * 10, NOT_TORCH),  # KeyError(101): BINGET of an unknown memo key
    "abc": (b"abc", NOT_TORCH),  # IndexError: APPEND pops from the empty stack
    "utf8": (b"X\x02\x00\x00\x00\xff\xfe", NOT_TORCH),  # UnicodeDecodeError: BINUNICODE
    "binint": (b"J\x01", ENDS_EARLY),  # struct.error: BININT needs 4 bytes, 1 is left
    "legacy_cut": (_legacy_truncated(), ENDS_EARLY),  # EOFError
    # s17 audit AH #7: torch's own "Unsupported operand N" (N = the first byte) for other files
    "png": (b"\x89PNG\r\n\x1a\n" + b"\x00" * 32, NOT_TORCH),
    "zeros": (b"\x00" * 64, NOT_TORCH),
    "json": (b'{"a": 1}', NOT_TORCH),
}


def _write(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.pt"
    path.write_bytes(CASES[name][0])
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_checkpoint_reason_is_readable_and_names_the_file(tmp_path, name) -> None:
    path = _write(tmp_path, name)
    reason = CASES[name][1]
    pattern = re.escape(f"cannot read torch file {path}") + ".*" + re.escape(reason)
    with pytest.raises(ValueError, match=pattern) as err:
        read_state_dict(path)
    assert len(str(err.value)) < 400 + len(str(path))  # one short line, no dump of the bytes
    with pytest.raises(ValueError, match=pattern):
        load_model(path, architecture=MLPConfig(hidden=(4,), num_classes=3))


def _flat(text: str) -> str:
    """The CLI's output with a wrapped error box joined back into one line."""
    return " ".join(line.strip(" │╭╮╰╯─") for line in text.splitlines())


@pytest.mark.parametrize("name", ["hello", "legacy_cut"])
def test_cli_checkpoint_and_data_reasons(tmp_path, name) -> None:
    path = _write(tmp_path, name)
    reason = CASES[name][1]
    runner = CliRunner()
    env = {"COLUMNS": "200"}
    r = runner.invoke(app, ["read", "--model", "zoo:planted-mlp", "--data", str(path)], env=env)
    assert r.exit_code == 2, r.output
    assert f"--data {path}: cannot read it as a torch file" in _flat(r.output), r.output
    assert reason in _flat(r.output), r.output
    probe = tmp_path / "probe.pt"
    torch.save(torch.zeros(2, 64), probe)
    args = ["read", "--model", "mlp-digits", "--checkpoint", str(path), "--data", str(probe)]
    r = runner.invoke(app, args, env=env)
    assert r.exit_code == 2, r.output
    assert f"cannot read torch file {path}" in _flat(r.output), r.output
    assert reason in _flat(r.output), r.output


def test_cli_empty_data_file_ends_early(tmp_path) -> None:
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    r = CliRunner().invoke(
        app, ["read", "--model", "zoo:planted-mlp", "--data", str(path)], env={"COLUMNS": "200"}
    )
    assert r.exit_code == 2, r.output
    assert f"--data {path}: cannot read it as a torch file" in _flat(r.output), r.output
    assert ENDS_EARLY in _flat(r.output), r.output
    assert "EOFError()" not in r.output


def test_a_torchscript_archive_is_named_without_torchs_unsafe_advice(tmp_path: Path) -> None:
    """s31 trial DISK #3: ``torch.jit.save`` output got "truncated, corrupt or not weights-only?"
    after a raw UserWarning, with torch's advice to reload with ``weights_only=False``."""
    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.load is not reached: no "dispatching" warning
        with pytest.raises(ValueError) as err:
            read_state_dict(path)
    message = str(err.value)
    assert message.startswith(f"{path} is a TorchScript archive (torch.jit.save)"), message
    assert "weights_only=False" not in message
    plain = tmp_path / "plain.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), plain)  # a state dict's archive is read
    assert set(read_state_dict(plain)) == {"weight", "bias"}


def test_a_wrapper_prefix_on_every_key_is_named(tmp_path: Path) -> None:
    """s31 trial DISK #4: a state dict saved from DataParallel (every key ``module.…``) was
    refused with the key lists only; the refusal now names the prefix. Keys that carry it but
    are not the module's own get no such hint."""
    from neuromanifold.io import load_state_dict_checked

    model = torch.nn.Sequential(torch.nn.Linear(2, 3))
    wrapped = {f"module.{k}": v for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"every checkpoint key carries the prefix 'module\.'"):
        load_state_dict_checked(model, wrapped)
    other = {**wrapped, "module.extra": torch.zeros(1)}
    with pytest.raises(ValueError, match="unexpected keys") as err:
        load_state_dict_checked(model, other)
    assert "prefix" not in str(err.value)
