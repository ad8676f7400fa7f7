"""Data for the zoo: scikit-learn's bundled digits (no download) and loaders for user data.

Digits: 1797 greyscale 8×8 images of the digits 0–9 with integer pixel values 0–16, shipped inside
scikit-learn. :func:`digits` returns them as float32 tensors ``x`` of shape ``(N, 1, 8, 8)`` scaled
to ``[0, 1]`` (divided by 16) and int64 labels ``y`` ``(N,)``, split into train/val by a seeded
permutation (not stratified).

Tasks (``task=``):

* ``"digits"`` — all ten classes, labels 0–9.
* ``"digits-0to4"`` — only images of 0–4, labels 0–4 (the pretraining task of the fine-tune recipe).
* ``"digits-5to9"`` — only images of 5–9, relabelled ``y − 5`` ∈ 0–4 (the fine-tuning task: same
  head shape, new classes).

User data (:func:`load_arrays`):

* ``.npz`` — arrays under keys ``x`` and ``y`` (or ``X`` and ``y``);
* ``.pt`` / ``.pth`` — a dict ``{"x": Tensor, "y": Tensor}`` (or ``X``), or a tuple ``(x, y)``,
  loaded with ``weights_only=True``;
* a directory of class folders (ImageFolder layout: ``root/<class>/<file>.npy|.png``), classes in
  sorted order get labels 0, 1, …; ``.png`` files are read with matplotlib.

``x`` must have at least 2 dimensions with ``x.shape[0] == len(y)``; ``y`` must be 1-D integers.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

__all__ = ["DIGITS_TASKS", "DataSplit", "DigitsTask", "digits", "load_arrays", "split_arrays"]

DigitsTask = Literal["digits", "digits-0to4", "digits-5to9"]
DIGITS_TASKS: tuple[str, ...] = ("digits", "digits-0to4", "digits-5to9")
"""Names accepted by :func:`digits`."""


@dataclass(frozen=True)
class DataSplit:
    """A train/validation split: ``x_*`` ``(N, C, H, W)`` float32, ``y_*`` ``(N,)`` int64."""

    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor
    num_classes: int
    name: str

    def to_dict(self) -> dict[str, object]:
        """Summary (not the arrays): name, sizes, input shape, number of classes."""
        return {
            "name": self.name,
            "num_train": int(self.x_train.shape[0]),
            "num_val": int(self.x_val.shape[0]),
            "input_shape": list(self.x_train.shape[1:]),
            "num_classes": self.num_classes,
        }


def split_arrays(
    x: Tensor, y: Tensor, *, seed: int = 0, val_fraction: float = 0.2, name: str = "data"
) -> DataSplit:
    """Shuffle ``(x, y)`` with a seeded permutation and cut off the last ``val_fraction`` as val."""
    _check_xy(x, y, source=name)
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction!r}")
    n = int(x.shape[0])
    n_val = max(1, round(n * val_fraction))
    if n_val >= n:
        raise ValueError(f"{name}: {n} samples are too few for val_fraction={val_fraction}")
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=gen)
    tr, va = perm[: n - n_val], perm[n - n_val :]
    num_classes = int(y.max().item()) + 1
    return DataSplit(x[tr], y[tr], x[va], y[va], num_classes, name)


def digits(task: DigitsTask = "digits", *, seed: int = 0, val_fraction: float = 0.2) -> DataSplit:
    """scikit-learn's 8×8 digits as a seeded train/val :class:`DataSplit` (see module doc).

    >>> s = digits("digits-5to9", seed=0)
    >>> tuple(s.x_train.shape[1:]), s.num_classes, float(s.x_train.max()) <= 1.0
    ((1, 8, 8), 5, True)
    """
    from sklearn.datasets import load_digits

    if task not in DIGITS_TASKS:
        raise ValueError(f"task must be one of {DIGITS_TASKS}, got {task!r}")
    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float32) / 16.0
    labels = np.asarray(bunch.target, dtype=np.int64)
    if task == "digits-0to4":
        keep = labels <= 4
        images, labels = images[keep], labels[keep]
    elif task == "digits-5to9":
        keep = labels >= 5
        images, labels = images[keep], labels[keep] - 5
    x = torch.from_numpy(images).unsqueeze(1)
    y = torch.from_numpy(labels)
    return split_arrays(x, y, seed=seed, val_fraction=val_fraction, name=task)


def _check_xy(x: object, y: object, *, source: str) -> None:
    if not isinstance(x, Tensor) or not isinstance(y, Tensor):
        raise TypeError(
            f"{source}: x and y must be tensors, got {type(x).__name__}, {type(y).__name__}"
        )
    if x.ndim < 2:
        raise ValueError(
            f"{source}: x must have shape (N, ...) with at least 2 dims, got {tuple(x.shape)}"
        )
    if y.ndim != 1:
        raise ValueError(f"{source}: y must have shape (N,), got {tuple(y.shape)}")
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"{source}: x has {x.shape[0]} samples but y has {y.shape[0]}; expected equal lengths"
        )
    if y.dtype.is_floating_point or y.dtype == torch.bool or y.dtype.is_complex:
        raise ValueError(f"{source}: y must hold integer class labels, got dtype {y.dtype}")
    if y.numel() and int(y.min()) < 0:
        raise ValueError(f"{source}: class labels must be >= 0, got min {int(y.min())}")


def _finish(x: object, y: object, source: str) -> tuple[Tensor, Tensor]:
    x = torch.as_tensor(np.asarray(x)) if not isinstance(x, Tensor) else x
    y = torch.as_tensor(np.asarray(y)) if not isinstance(y, Tensor) else y
    _check_xy(x, y, source=source)
    return x.to(torch.float32), y.to(torch.int64)


def _pick(keys: object, container: dict, source: str) -> tuple[object, object]:
    x_key = "x" if "x" in container else ("X" if "X" in container else None)
    if x_key is None or "y" not in container:
        raise KeyError(
            f"{source}: expected arrays under keys 'x' (or 'X') and 'y', found {sorted(keys)}"
        )
    return container[x_key], container["y"]


def _load_npz(path: Path) -> tuple[Tensor, Tensor]:
    try:
        with np.load(path, allow_pickle=False) as data:
            x, y = _pick(data.files, {k: data[k] for k in data.files}, str(path))
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        raise ValueError(f"cannot read {path} as an .npz archive: {err}") from err
    return _finish(x, y, str(path))


def _load_pt(path: Path) -> tuple[Tensor, Tensor]:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for corrupt pickles/zips
        raise ValueError(f"cannot read {path} as a torch file: {err}") from err
    if isinstance(obj, dict):
        x, y = _pick(obj.keys(), obj, str(path))
    elif isinstance(obj, tuple | list) and len(obj) == 2:
        x, y = obj
    else:
        raise ValueError(
            f"{path}: expected a dict with keys 'x'/'y' or a pair (x, y), got {type(obj).__name__}"
        )
    return _finish(x, y, str(path))


def _read_image(path: Path) -> np.ndarray:
    try:
        if path.suffix == ".npy":
            return np.asarray(np.load(path, allow_pickle=False), dtype=np.float32)
        import matplotlib.image as mpimg

        return np.asarray(mpimg.imread(path), dtype=np.float32)
    except Exception as err:
        raise ValueError(f"cannot read image file {path}: {err}") from err


def _load_folder(root: Path) -> tuple[Tensor, Tensor]:
    classes = sorted(p for p in root.iterdir() if p.is_dir())
    if not classes:
        raise ValueError(
            f"{root}: expected class sub-directories (root/<class>/<file>), found none"
        )
    images, labels = [], []
    for label, cdir in enumerate(classes):
        for f in sorted(cdir.iterdir()):
            if f.suffix.lower() in (".npy", ".png"):
                images.append(_read_image(f))
                labels.append(label)
    if not images:
        raise ValueError(f"{root}: no .npy or .png files under its class directories")
    shapes = {im.shape for im in images}
    if len(shapes) != 1:
        raise ValueError(f"{root}: images have different shapes {sorted(shapes)}; expected one")
    x = np.stack(images)
    if x.ndim == 3:  # (N, H, W) greyscale -> (N, 1, H, W)
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3, 4):  # (N, H, W, C) -> (N, C, H, W)
        x = np.transpose(x, (0, 3, 1, 2))
    return _finish(x, np.asarray(labels, dtype=np.int64), str(root))


def load_arrays(path: str | Path) -> tuple[Tensor, Tensor]:
    """Load user data ``(x, y)`` from ``.npz``, ``.pt``/``.pth`` or a class-folder directory.

    Returns ``x`` float32 ``(N, ...)`` and ``y`` int64 ``(N,)``. Raises ``FileNotFoundError`` for
    a missing path, ``KeyError`` for missing arrays, ``ValueError`` for unreadable files or
    inconsistent shapes (each message names the file).
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"data path {p} does not exist")
    if p.is_dir():
        return _load_folder(p)
    suffix = p.suffix.lower()
    if suffix == ".npz":
        return _load_npz(p)
    if suffix in (".pt", ".pth"):
        return _load_pt(p)
    raise ValueError(
        f"{p}: unsupported data format {suffix!r}; expected .npz, .pt, .pth or a directory"
    )
