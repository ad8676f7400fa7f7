"""Digits tasks and user-data loaders (npz, pt, class folders) with their errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuromanifold.zoo.data import digits, load_arrays, split_arrays


def test_digits_tasks_shapes_labels_and_range() -> None:
    full = digits("digits", seed=0)
    assert full.x_train.shape[1:] == (1, 8, 8) and full.x_train.dtype == torch.float32
    assert full.num_classes == 10
    assert full.x_train.shape[0] + full.x_val.shape[0] == 1797
    assert float(full.x_train.min()) >= 0.0 and float(full.x_train.max()) <= 1.0
    low, high = digits("digits-0to4", seed=0), digits("digits-5to9", seed=0)
    for part in (low, high):
        labels = torch.cat([part.y_train, part.y_val])
        assert sorted(labels.unique().tolist()) == [0, 1, 2, 3, 4]
    assert (
        low.x_train.shape[0] + low.x_val.shape[0] + high.x_train.shape[0] + high.x_val.shape[0]
        == 1797
    )


def test_split_is_seeded_and_disjoint() -> None:
    a, b, c = digits(seed=1), digits(seed=1), digits(seed=2)
    assert torch.equal(a.x_val, b.x_val) and not torch.equal(a.x_val, c.x_val)
    rows = lambda t: {tuple(r.flatten().tolist()) for r in t}  # noqa: E731
    # digits has a few duplicate images; overlap can only come from those
    assert len(rows(a.x_train) & rows(a.x_val)) < 10


def test_npz_and_pt_round_trip(tmp_path) -> None:
    x = np.random.default_rng(0).random((6, 1, 4, 4)).astype(np.float32)
    y = np.array([0, 1, 2, 0, 1, 2])
    np.savez(tmp_path / "a.npz", X=x, y=y)
    torch.save({"x": torch.from_numpy(x), "y": torch.from_numpy(y)}, tmp_path / "b.pt")
    torch.save((torch.from_numpy(x), torch.from_numpy(y)), tmp_path / "c.pth")
    for name in ("a.npz", "b.pt", "c.pth"):
        xt, yt = load_arrays(tmp_path / name)
        assert torch.equal(xt, torch.from_numpy(x)) and torch.equal(yt, torch.from_numpy(y))
        assert yt.dtype == torch.int64


def test_class_folder(tmp_path) -> None:
    for label, cls in enumerate(["cat", "dog"]):
        (tmp_path / cls).mkdir()
        for i in range(3):
            np.save(tmp_path / cls / f"{i}.npy", np.full((4, 4), label + i / 10, dtype=np.float32))
    x, y = load_arrays(tmp_path)
    assert x.shape == (6, 1, 4, 4) and y.tolist() == [0, 0, 0, 1, 1, 1]
    # each image is the constant label + i/10, stored as float32 and read back bit for bit
    expected = torch.tensor([0.0, 0.1, 0.2, 1.0, 1.1, 1.2], dtype=torch.float32)
    assert torch.equal(x, expected.reshape(6, 1, 1, 1).expand(6, 1, 4, 4))


def test_loader_errors(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_arrays(tmp_path / "missing.npz")
    np.savez(tmp_path / "keys.npz", data=np.zeros((3, 2)), labels=np.zeros(3))
    with pytest.raises(
        KeyError,
        match=r"expected arrays under keys 'x' \(or 'X'\) and 'y', found \['data', 'labels'\]",
    ):
        load_arrays(tmp_path / "keys.npz")
    np.savez(tmp_path / "len.npz", x=np.zeros((3, 2)), y=np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="x has 3 samples but y has 4"):
        load_arrays(tmp_path / "len.npz")
    np.savez(tmp_path / "flt.npz", x=np.zeros((3, 2)), y=np.zeros(3))
    with pytest.raises(
        ValueError, match=r"y must hold integer class labels, got dtype torch\.float64"
    ):
        load_arrays(tmp_path / "flt.npz")
    np.savez(tmp_path / "vec.npz", x=np.zeros(3), y=np.zeros(3, dtype=np.int64))
    with pytest.raises(
        ValueError, match=r"x must have shape \(N, \.\.\.\) with at least 2 dims, got \(3,\)"
    ):
        load_arrays(tmp_path / "vec.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip archive")
    with pytest.raises(ValueError, match=r"cannot read .*bad\.npz as an \.npz archive"):
        load_arrays(tmp_path / "bad.npz")
    (tmp_path / "bad.pt").write_bytes(b"\x00\x01garbage")
    with pytest.raises(ValueError, match=r"cannot read .*bad\.pt as a torch file"):
        load_arrays(tmp_path / "bad.pt")
    (tmp_path / "d.csv").write_text("1,2")
    with pytest.raises(ValueError, match=r"unsupported data format '\.csv'"):
        load_arrays(tmp_path / "d.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="expected class sub-directories"):
        load_arrays(tmp_path / "empty")


def test_split_and_task_errors() -> None:
    x, y = torch.zeros(10, 2), torch.arange(10)
    with pytest.raises(ValueError, match=r"val_fraction must lie in \(0, 1\), got 1.5"):
        split_arrays(x, y, val_fraction=1.5)
    with pytest.raises(ValueError, match="task must be one of"):
        digits("mnist")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"data: 2 samples are too few for val_fraction=0\.9"):
        split_arrays(torch.zeros(2, 2), torch.arange(2), val_fraction=0.9)
    with pytest.raises(TypeError, match="x and y must be tensors, got ndarray, Tensor"):
        split_arrays(np.zeros((3, 2)), torch.arange(3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"y must have shape \(N,\), got \(3, 1\)"):
        split_arrays(torch.zeros(3, 2), torch.zeros(3, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match="class labels must be >= 0, got min -1"):
        split_arrays(torch.zeros(3, 2), torch.tensor([0, -1, 2]))


def test_pt_triple_and_class_folder_errors(tmp_path) -> None:
    x, y = torch.zeros(3, 1, 2, 2), torch.arange(3)
    torch.save((x, y, y), tmp_path / "triple.pt")
    with pytest.raises(
        ValueError, match=r"expected a dict with keys 'x'/'y' or a pair \(x, y\), got tuple"
    ):
        load_arrays(tmp_path / "triple.pt")
    bad = tmp_path / "bad"
    (bad / "a").mkdir(parents=True)
    (bad / "a" / "0.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match=r"cannot read image file .*0\.png"):
        load_arrays(bad)
    text = tmp_path / "text"
    (text / "a").mkdir(parents=True)
    (text / "a" / "0.txt").write_text("1 2 3")
    with pytest.raises(ValueError, match=r"no \.npy or \.png files under its class directories"):
        load_arrays(text)
    mixed = tmp_path / "mixed"
    for cls, side in (("a", 4), ("b", 5)):
        (mixed / cls).mkdir(parents=True)
        np.save(mixed / cls / "0.npy", np.zeros((side, side), dtype=np.float32))
    with pytest.raises(
        ValueError, match=r"images have different shapes \[\(4, 4\), \(5, 5\)\]; expected one"
    ):
        load_arrays(mixed)


def test_class_folder_of_png(tmp_path) -> None:
    import matplotlib.image as mpimg

    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        img = np.zeros((5, 6, 3), dtype=np.float32)
        img[..., 0] = 1.0 if cls == "b" else 0.0
        mpimg.imsave(tmp_path / cls / "0.png", img)
    x, y = load_arrays(tmp_path)
    assert x.shape[0] == 2 and x.shape[2:] == (5, 6) and x.shape[1] in (3, 4)
    assert y.tolist() == [0, 1]
    # red channel 1.0 in class b, 0.0 in class a: both exact in an 8-bit PNG (255/255, 0/255)
    assert torch.equal(x[1, 0], torch.ones(5, 6)) and torch.equal(x[0, 0], torch.zeros(5, 6))
