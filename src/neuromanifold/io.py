"""Loading models: a weights file plus an architecture, with errors that say what is wrong.

:func:`load_model` builds a module from ``architecture`` and, when ``checkpoint`` is given, loads
its weights. ``architecture`` may be

* a zoo config (:class:`~neuromanifold.zoo.models.ViTConfig`, ``MLPConfig``, ``CNNConfig``) or the
  name of one in :data:`~neuromanifold.zoo.models.ZOO_ARCHITECTURES` (e.g. ``"vit-digits"``);
* the path of a JSON file: a checkpoint sidecar (its ``"architecture"`` entry) or a bare config
  dict (``{"kind": "vit", ...}``);
* ``"package.module:factory"`` — ``factory()`` is called with no arguments and must return an
  ``nn.Module``;
* the path of a Hugging Face model directory on disk (``config.json`` inside; needs
  ``transformers``, loaded lazily, weights from the directory unless ``checkpoint`` is given);
* otherwise a timm model name (needs ``timm``, loaded lazily; built with ``pretrained=False``,
  nothing is downloaded);
* ``None`` — only for a zoo checkpoint whose sidecar ``<checkpoint>.json`` sits beside it.

Weights files: ``.safetensors``, or ``.pt`` / ``.pth`` / ``.bin`` torch files read with
``weights_only=True`` (a dict of tensors, or a dict holding one under ``"state_dict"`` or
``"model"``). Keys and shapes are compared before anything is copied: missing keys, unexpected
keys and shape mismatches are all listed in one ``ValueError``; unreadable or truncated files raise
``ValueError`` naming the file.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["load_model", "load_state_dict_checked", "read_state_dict"]

_TORCH_SUFFIXES = (".pt", ".pth", ".bin")
_EXTRA_HINT = "install the optional loaders with `pip install 'neuromanifold[loaders]'`"


def read_state_dict(path: str | Path) -> dict[str, Tensor]:
    """Read a ``.safetensors`` or torch (``.pt/.pth/.bin``) weights file into ``{name: tensor}``."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint file {p} does not exist")
    suffix = p.suffix.lower()
    if suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return dict(load_file(str(p), device="cpu"))
        except Exception as err:  # SafetensorError, OSError, … — the message names the file
            raise ValueError(
                f"cannot read safetensors file {p} (truncated or corrupt?): {err}"
            ) from err
    if suffix in _TORCH_SUFFIXES:
        try:
            obj = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as err:
            raise ValueError(
                f"cannot read torch file {p} (truncated, corrupt or not weights-only?): {err}"
            ) from err
        if isinstance(obj, dict):
            for key in ("state_dict", "model"):
                if key in obj and isinstance(obj[key], dict):
                    obj = obj[key]
                    break
        if not isinstance(obj, dict) or not all(isinstance(v, Tensor) for v in obj.values()):
            raise ValueError(
                f"{p}: expected a dict of tensors (a state dict), got {type(obj).__name__}"
            )
        return dict(obj)
    raise ValueError(
        f"{p}: unsupported checkpoint format {suffix!r}; expected .safetensors, .pt, .pth or .bin"
    )


def load_state_dict_checked(
    model: nn.Module, state: dict[str, Tensor], *, source: str = "checkpoint"
) -> nn.Module:
    """Copy ``state`` into ``model`` after checking keys and shapes; returns ``model``.

    Raises ``ValueError`` listing every missing key, unexpected key and shape mismatch
    (``name: expected (…), got (…)``) — nothing is copied when any check fails.
    """
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mismatched = [
        f"{k}: expected {tuple(expected[k].shape)}, got {tuple(state[k].shape)}"
        for k in expected
        if k in state and tuple(expected[k].shape) != tuple(state[k].shape)
    ]
    problems = []
    if missing:
        problems.append(f"missing keys {missing}")
    if unexpected:
        problems.append(f"unexpected keys {unexpected}")
    if mismatched:
        problems.append(f"shape mismatches [{'; '.join(mismatched)}]")
    if problems:
        raise ValueError(f"{source} does not fit {type(model).__name__}: " + ", ".join(problems))
    model.load_state_dict(state, strict=True)
    return model


def _config_from_json(path: Path) -> Any:
    from neuromanifold.zoo.models import config_from_dict

    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read architecture JSON {path}: {err}") from err
    if isinstance(data, dict) and isinstance(data.get("architecture"), dict):
        data = data["architecture"]
    return config_from_dict(data)


def _from_factory(spec: str) -> nn.Module:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(
            f"architecture {spec!r}: cannot import module {module_name!r}: {err}"
        ) from err
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ValueError(f"architecture {spec!r}: {module_name} has no callable {attr!r}")
    model = factory()
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"architecture {spec!r}: factory returned {type(model).__name__}, expected nn.Module"
        )
    return model


def _from_huggingface(directory: Path, *, with_weights: bool) -> nn.Module:
    try:
        transformers = importlib.import_module("transformers")
    except ImportError as err:
        raise ImportError(
            f"loading the Hugging Face directory {directory} needs `transformers`; {_EXTRA_HINT}"
        ) from err
    if with_weights:
        return transformers.AutoModel.from_pretrained(str(directory), local_files_only=True)
    config = transformers.AutoConfig.from_pretrained(str(directory), local_files_only=True)
    return transformers.AutoModel.from_config(config)


def _from_timm(name: str) -> nn.Module:
    try:
        timm = importlib.import_module("timm")
    except ImportError as err:
        from neuromanifold.zoo.models import ZOO_ARCHITECTURES

        raise ImportError(
            f"architecture {name!r} is not a zoo architecture {sorted(ZOO_ARCHITECTURES)}, a JSON "
            "file, a directory or module:factory, so it is read as a timm model name, which needs "
            f"`timm`; {_EXTRA_HINT}"
        ) from err
    try:
        return timm.create_model(name, pretrained=False)
    except Exception as err:
        raise ValueError(f"timm cannot build model {name!r}: {err}") from err


def _build(architecture: Any, checkpoint: Path | None) -> tuple[nn.Module, bool]:
    """Return ``(model, has_weights)``."""
    from neuromanifold.zoo.models import (
        ZOO_ARCHITECTURES,
        CNNConfig,
        MLPConfig,
        ViTConfig,
        build_model,
    )

    if isinstance(architecture, ViTConfig | MLPConfig | CNNConfig):
        return build_model(architecture), False
    if architecture is None:
        if checkpoint is None:
            raise ValueError("architecture=None needs a checkpoint with a JSON sidecar beside it")
        sidecar = checkpoint.with_suffix(".json")
        if not sidecar.is_file():
            raise ValueError(
                f"architecture=None but no sidecar {sidecar} next to {checkpoint}; "
                "pass architecture="
            )
        return build_model(_config_from_json(sidecar)), False
    if not isinstance(architecture, str):
        raise TypeError(
            f"architecture must be a zoo config or a str, got {type(architecture).__name__}"
        )
    if architecture in ZOO_ARCHITECTURES:
        return build_model(ZOO_ARCHITECTURES[architecture]), False
    path = Path(architecture)
    if path.suffix.lower() == ".json":
        if not path.is_file():
            raise FileNotFoundError(f"architecture JSON {path} does not exist")
        return build_model(_config_from_json(path)), False
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"{path} is a directory without config.json; "
                "expected a Hugging Face model directory"
            )
        return _from_huggingface(path, with_weights=checkpoint is None), checkpoint is None
    if ":" in architecture:
        return _from_factory(architecture), False
    return _from_timm(architecture), False


def load_model(checkpoint: str | Path | None, *, architecture: Any = None) -> nn.Module:
    """Build ``architecture`` (module docstring: accepted forms) and load ``checkpoint`` into it.

    Returns the module in eval mode. ``checkpoint=None`` returns the freshly built model (random
    initialisation for zoo/timm/factory architectures, the directory's weights for Hugging Face).
    """
    ckpt = Path(checkpoint) if checkpoint is not None else None
    if ckpt is not None and not ckpt.is_file():
        raise FileNotFoundError(f"checkpoint file {ckpt} does not exist")
    model, _ = _build(architecture, ckpt)
    if ckpt is not None:
        load_state_dict_checked(model, read_state_dict(ckpt), source=str(ckpt))
    return model.eval()
