"""`neuromanifold read --checkpoint` says the loader's dtype warnings as ``note:`` lines.

s17 audit AH #6: a float64 checkpoint for a float32 factory printed Python's warning format,
``.../neuromanifold/io.py:585: UserWarning: ...`` and a line of the library's source, ahead of
the CLI's plain lines ("output family: ...", "error: ...").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import torch
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.cli._console import warnings_as_notes

RUNNER = CliRunner()
ENV = {"COLUMNS": "200"}
FACTORY = "nm_cli_load_notes_models"
# the loader's warning on a float64 checkpoint for a float32 module (io._match_dtypes)
WIDENED = "holds float64 tensors wider than Sequential's float32"
CONVERTED = "were converted to float64 so that they are copied exactly"


def _files(tmp_path: Path) -> tuple[Path, Path]:
    """An importable factory ``FACTORY:net`` (a float32 MLP), its float64 checkpoint ``ckpt``
    and 8 float64 probe inputs ``data``; returns ``(ckpt, data)``."""
    (tmp_path / f"{FACTORY}.py").write_text(
        "from torch import nn\n"
        "def net():\n"
        "    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))\n"
    )
    ckpt, data = tmp_path / "net64.pt", tmp_path / "x.pt"
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    torch.save(net.double().state_dict(), ckpt)
    torch.save(torch.randn(8, 4, dtype=torch.float64), data)
    return ckpt, data


def _args(ckpt: Path, data: Path) -> list[str]:
    return ["read", "--model", f"{FACTORY}:net", "--checkpoint", str(ckpt), "--data", str(data),
            "--max-directions", "0"]  # fmt: skip


def _note_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("note: ")]


def test_read_says_the_loader_warning_as_one_note_line(tmp_path: Path, monkeypatch) -> None:
    ckpt, data = _files(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, FACTORY, raising=False)
    r = RUNNER.invoke(app, _args(ckpt, data), env=ENV)
    assert r.exit_code == 0, r.output
    (note,) = _note_lines(r.stdout)  # with the text output, on one line
    assert note.startswith(f"note: {ckpt} {WIDENED}") and note.endswith(CONVERTED), note
    assert "UserWarning" not in r.output and "io.py" not in r.output


def test_read_json_dash_says_the_note_on_stderr(tmp_path: Path, monkeypatch) -> None:
    ckpt, data = _files(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, FACTORY, raising=False)
    r = RUNNER.invoke(app, [*_args(ckpt, data), "--json", "-"], env=ENV)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["meta"]["n_read"] == 0  # stdout: the JSON only
    (note,) = _note_lines(r.stderr)
    assert note.startswith(f"note: {ckpt} {WIDENED}") and note.endswith(CONVERTED), note


def test_read_in_a_process_prints_no_python_warning_format(tmp_path: Path) -> None:
    """Outside pytest (which catches warnings itself) Python's format showed; a real process."""
    ckpt, data = _files(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    r = subprocess.run(
        [sys.executable, "-m", "neuromanifold", *_args(ckpt, data), "--json", "-"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["directions"] == []
    assert "UserWarning" not in r.stderr and "io.py" not in r.stderr, r.stderr
    (note,) = _note_lines(r.stderr)
    assert WIDENED in note and note.endswith(CONVERTED), note


LOADS = "nm_cli_load_checkpoints"


def _load_factories(tmp_path: Path, monkeypatch) -> Path:
    """An importable ``LOADS`` with ``indexed`` (a layer and an int64 buffer ``idx``) and
    ``refuses`` (a module whose ``_load_from_state_dict`` raises); returns 8 probe inputs."""
    (tmp_path / f"{LOADS}.py").write_text(
        "import torch\n"
        "from torch import nn\n"
        "class Indexed(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = nn.Linear(4, 2)\n"
        "        self.register_buffer('idx', torch.arange(5))\n"
        "    def forward(self, x):\n"
        "        return self.lin(x)\n"
        "def indexed():\n"
        "    return Indexed()\n"
        "class Refuses(Indexed):\n"
        "    def _load_from_state_dict(self, *args, **kwargs):\n"
        "        raise RuntimeError('custom load failure')\n"
        "def refuses():\n"
        "    return Refuses()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, LOADS, raising=False)
    data = tmp_path / "x4.pt"
    torch.save(torch.randn(8, 4), data)
    return data


def test_read_loads_a_float8_buffer_with_a_note(tmp_path: Path, monkeypatch) -> None:
    """s18 audit AJ #2: a float8 ``idx`` into the int64 buffer crashed the load (``isfinite`` is
    not implemented for float8) and the CLI said the factory raised."""
    from safetensors.torch import save_file

    data = _load_factories(tmp_path, monkeypatch)
    state = {"lin.weight": torch.zeros(2, 4), "lin.bias": torch.zeros(2),
             "idx": torch.tensor([0.5, 1, 2, 3, 4]).to(torch.float8_e4m3fn)}  # fmt: skip
    ckpt = tmp_path / "f8.safetensors"
    save_file(state, str(ckpt))
    args = ["read", "--model", f"{LOADS}:indexed", "--checkpoint", str(ckpt), "--data", str(data),
            "--max-directions", "0"]  # fmt: skip
    r = RUNNER.invoke(app, args, env=ENV)
    assert r.exit_code == 0, r.output
    (note,) = _note_lines(r.stdout)
    said = "holds float8_e4m3fn tensors (idx) whose values change when cast to Indexed's int64"
    assert f"{said}: fractions are truncated toward zero" in note, note


def test_read_says_a_failed_load_is_the_checkpoints(tmp_path: Path, monkeypatch) -> None:
    """s18 audit AJ #2: an error raised while the built module took the weights was said as
    ``--model: building ... raised``; the factory had built the module."""
    data = _load_factories(tmp_path, monkeypatch)
    ckpt = tmp_path / "refuses.pt"
    torch.save({"lin.weight": torch.zeros(2, 4), "lin.bias": torch.zeros(2),
                "idx": torch.arange(5)}, ckpt)  # fmt: skip
    args = ["read", "--model", f"{LOADS}:refuses", "--checkpoint", str(ckpt), "--data", str(data),
            "--max-directions", "0"]  # fmt: skip
    r = RUNNER.invoke(app, args, env=ENV)
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == (
        f"error: --checkpoint: loading {ckpt} into Refuses failed: RuntimeError: custom load "
        "failure"
    ), r.stderr


class _LoaderNote(UserWarning):
    """Stands for the library's own warning categories (io.CheckpointDtypeWarning)."""


def _warn_three() -> None:
    warnings.simplefilter("always")  # inside warnings_as_notes' catch, which restores the filters
    warnings.warn("the  loader's\n   word", _LoaderNote, stacklevel=2)
    warnings.warn("factory says hi", UserWarning, stacklevel=2)
    warnings.warn("factory deprecated", FutureWarning, stacklevel=2)


def test_warnings_as_notes_says_only_the_given_categories_as_notes(monkeypatch) -> None:
    """s18 audit AJ #4/#5: every UserWarning became an anonymous note (torch's, a factory's),
    and other categories were printed by every rank under torchrun."""
    shown: list[tuple[type[Warning], str]] = []

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        shown.append((category, filename))

    monkeypatch.setattr(warnings, "showwarning", show)
    said: list[str] = []
    with warnings_as_notes(said.append, (_LoaderNote,)):
        _warn_three()
    assert said == ["note: the loader's word"]
    # the others as Python shows them, naming the file that warned
    assert shown == [(UserWarning, __file__), (FutureWarning, __file__)]
    said.clear()
    shown.clear()
    with warnings_as_notes(None, (_LoaderNote,)):  # a rank other than 0
        _warn_three()
    assert said == [] and shown == []


def test_read_keeps_a_factorys_warnings_in_pythons_format(tmp_path: Path) -> None:
    """A factory's UserWarning and FutureWarning name the factory's file and line; only the
    loader's dtype warning is a note (s18 audit AJ #5: 'note: factory says hi')."""
    ckpt, data = _files(tmp_path)
    (tmp_path / "nm_cli_warning_factory.py").write_text(
        "import warnings\n"
        "from torch import nn\n"
        "def net():\n"
        "    warnings.warn('factory deprecated', FutureWarning)\n"
        "    warnings.warn('factory says hi', UserWarning)\n"
        "    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))\n"
    )
    paths = [str(tmp_path), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1",
           "COLUMNS": "200"}  # fmt: skip
    args = _args(ckpt, data)
    args[2] = "nm_cli_warning_factory:net"
    r = subprocess.run(
        [sys.executable, "-m", "neuromanifold", *args, "--json", "-"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["directions"] == []
    factory = tmp_path / "nm_cli_warning_factory.py"
    lines = r.stderr.splitlines()
    assert lines.count(f"{factory}:4: FutureWarning: factory deprecated") == 1, r.stderr
    assert lines.count(f"{factory}:5: UserWarning: factory says hi") == 1, r.stderr
    (note,) = _note_lines(r.stderr)
    assert WIDENED in note and note.endswith(CONVERTED), note


def test_padded_probe_sequences_of_a_hugging_face_model_are_said(tmp_path: Path) -> None:
    """s34 trial REPORT O1: probe ids holding the config's pad id were read (no attention mask,
    the model attends to the pads) without a word. Unpadded ids get no note."""
    import pytest

    from neuromanifold.io import import_transformers

    try:
        transformers = import_transformers()
    except ImportError:
        pytest.skip("transformers is not installed")
    cfg = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32,
                                  max_position_embeddings=12, pad_token_id=0,
                                  architectures=["BertModel"])  # fmt: skip
    transformers.BertModel(cfg).save_pretrained(str(tmp_path / "bert"))
    ids = torch.randint(1, 40, (4, 6), generator=torch.Generator().manual_seed(0))
    padded = ids.clone()
    padded[1, 4:] = 0
    padded[3, 5:] = 0
    for name, x in (("ids.pt", ids), ("padded.pt", padded)):
        torch.save(x, tmp_path / name)
    args = ["read", "--model", str(tmp_path / "bert"), "--max-directions", "0"]
    res = RUNNER.invoke(app, [*args, "--data", str(tmp_path / "padded.pt")], env=ENV)
    assert res.exit_code == 0, res.output
    assert (
        "note: 2 of 4 probe sequences hold the pad token id 0 (config.pad_token_id): the read "
        "passes no attention mask" in res.output
    )
    res = RUNNER.invoke(app, [*args, "--data", str(tmp_path / "ids.pt")], env=ENV)
    assert res.exit_code == 0, res.output
    assert "pad token id" not in res.output
