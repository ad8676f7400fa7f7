"""`read --data`: NumPy ``.npy`` probe sets, and files whose layout is not probe data (s20 trial AN
#2, #3: a 1-tuple crashed with an IndexError traceback, a 3-list was read as its first two
entries, a 0-d tensor was told "must be a Tensor … got Tensor", and a ``.npy`` file was called
"truncated, corrupt or not weights-only?")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from neuromanifold.cells.planted import planted_mlp
from neuromanifold.cli import app
from neuromanifold.singular.distributed import shard_data

RUNNER = CliRunner()
ENV = {"COLUMNS": "300"}


def _read(data: Path, out: Path) -> dict:
    args = ["read", "--model", "zoo:planted-mlp", "--data", str(data), "--max-directions", "2"]
    res = RUNNER.invoke(app, [*args, "--json", str(out)], env=ENV)
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def test_a_npy_probe_set_reads_like_the_same_tensor_saved_by_torch(tmp_path: Path) -> None:
    x = planted_mlp().data
    np.save(tmp_path / "x.npy", x.numpy())
    torch.save(x, tmp_path / "x.pt")
    from_npy = _read(tmp_path / "x.npy", tmp_path / "npy.json")
    from_pt = _read(tmp_path / "x.pt", tmp_path / "pt.json")
    assert from_npy["directions"], "the planted cell must give directions to compare"
    assert from_npy["directions"] == from_pt["directions"]


ONE = (
    "the read calls the model on x alone (no attention mask, token type ids or other keyword "
    "inputs): save unpadded probe sequences of one length as 'x' (token ids: x = input_ids), "
    "labels as 'y' if any"
)


def _refused(path: Path, line: str) -> None:
    res = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp", "--data", str(path)], env=ENV)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert res.stderr.strip() == f"error: --data {path}: {line}", res.stderr


@pytest.mark.parametrize(
    ("obj", "line"),
    [
        (
            (torch.zeros(4, 2),),
            "holds a tuple of 1 entry; expected a tensor of inputs, a pair (x, y) or {'x': ...}",
        ),
        (
            [torch.zeros(4, 2), torch.zeros(4), torch.zeros(4, 2)],
            "holds a list of 3 entries; expected a tensor of inputs, a pair (x, y) or {'x': ...}",
        ),
        (torch.tensor(0.0), "holds a 0-d tensor; expected inputs with a leading sample axis"),
        (
            {"x": torch.tensor(1.0)},
            "holds a 0-d tensor; expected inputs with a leading sample axis",
        ),
    ],
)
def test_a_torch_file_that_is_not_laid_out_as_probe_data_is_refused(
    tmp_path: Path, obj: object, line: str
) -> None:
    path = tmp_path / "x.pt"
    torch.save(obj, path)
    _refused(path, line)


def test_npy_files_that_cannot_be_probe_data_are_refused(tmp_path: Path) -> None:
    scalar = tmp_path / "scalar.npy"
    np.save(scalar, np.float64(1.0))
    _refused(scalar, "holds a 0-d tensor; expected inputs with a leading sample axis")
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)  # a pickle inside
    _refused(
        objects,
        "cannot read this NumPy .npy file: Object arrays cannot be loaded when allow_pickle=False",
    )


def test_a_big_endian_npy_reads_like_the_native_one(tmp_path: Path) -> None:
    x = planted_mlp().data.numpy()
    np.save(tmp_path / "be.npy", x.astype(">f8"))
    np.save(tmp_path / "x.npy", x)
    big = _read(tmp_path / "be.npy", tmp_path / "be.json")
    assert big["directions"] == _read(tmp_path / "x.npy", tmp_path / "x.json")["directions"]


def test_a_structured_npy_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.npy"
    np.save(path, np.zeros(4, dtype=[("a", "f4"), ("b", "f4")]))
    _refused(path, "holds a NumPy array of dtype [('a', '<f4'), ('b', '<f4')]; expected numbers")


def test_a_npz_archive_is_read_by_its_array_x(tmp_path: Path) -> None:
    x = planted_mlp().data
    np.savez(tmp_path / "x.npz", x=x.numpy())
    torch.save(x, tmp_path / "x.pt")
    from_npz = _read(tmp_path / "x.npz", tmp_path / "npz.json")
    assert from_npz["directions"] == _read(tmp_path / "x.pt", tmp_path / "pt.json")["directions"]
    np.savez(tmp_path / "other.npz", inputs=x.numpy())
    _refused(
        tmp_path / "other.npz", f"holds arrays ['inputs']; expected 'x' (and optionally 'y'); {ONE}"
    )
    # another array beside x would be dropped without a word (s27 trial HF D1): refused
    np.savez(tmp_path / "ids.npz", x=x.numpy(), ids=np.zeros(len(x)))
    _refused(tmp_path / "ids.npz", f"holds arrays ['ids'] beside 'x'; {ONE}")
    compressed = tmp_path / "compressed.npz"
    np.savez_compressed(compressed, x=x.numpy())
    raw = bytearray(compressed.read_bytes())
    for i in range(100, 300):  # inside the deflated data (zlib.error); the directory stays intact
        raw[i] ^= 0x5A
    compressed.write_bytes(bytes(raw))
    res = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp", "--data", str(compressed)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert res.stderr.startswith(f"error: --data {compressed}: cannot read this NumPy .npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip archive")
    res = RUNNER.invoke(
        app, ["read", "--model", "zoo:planted-mlp", "--data", str(tmp_path / "bad.npz")], env=ENV
    )
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.startswith(
        f"error: --data {tmp_path / 'bad.npz'}: cannot read this NumPy .npz"
    )


def test_shard_data_refuses_sequences_that_are_not_pairs_and_0d_inputs() -> None:
    x = torch.zeros(4, 2)
    for data in ((x,), [x, torch.zeros(4), x]):
        with pytest.raises(TypeError, match=rf"got a sequence of length {len(data)}$"):
            shard_data(data)
    with pytest.raises(
        ValueError, match=r"data must hold at least one sample \(N, \.\.\.\); got \(\)"
    ):
        shard_data(torch.tensor(0.0))
