"""`neuromanifold read`: the whole-model read of a checkpoint, as a per-layer table and JSON.

Data-parallel: ``torchrun --nproc_per_node W -m neuromanifold read ...`` initialises a process
group from torchrun's environment (gloo on CPU, nccl with ``--device cuda``); every rank loads the
model and the probe set, reads its contiguous shard (`neuromanifold.singular.distributed`), the
sums are all-reduced, and only rank 0 prints and writes files. ``--resume`` is single-process;
``--max-memory`` is a budget per process (the ranks agree on one plan). The JSON's ``meta`` holds
rank 0's shard (``rank``, ``shard``, ``n_samples_local``) and its pass counts (``per_rank``).
An error every rank meets (the arguments, a model or data file that cannot be loaded, the input
checks agreed over the ranks) is printed once; a device error (the same on every process of a
node) once per node; an error of one rank's own (its shard's forward pass, its output's shape, its
token ids, a model factory that raises on that rank alone) is printed by that rank, as
``rank r: error: ...``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import typer

from neuromanifold.cli._files import (
    JSON_STDOUT_HELP,
    Failure,
    check_json_target,
    check_out_dir,
    fail,
    failures_held,
    json_to_stdout,
    nonempty_path,
    out_dir_parser,
    writing,
)

_FAMILIES = ("gaussian", "categorical")


def _import_factory(spec: str) -> Any:
    """The object named by ``package.module:attr``; exit 2 naming the spec when it is missing."""
    import importlib

    mod_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as err:
        hint = ""
        if mod_name.endswith(".py") or "/" in mod_name or "\\" in mod_name:
            # a file path (s22 trial LM #6): say how to name the module instead
            path = Path(mod_name)
            stem = path.stem if path.suffix == ".py" else path.name
            hint = (
                f"; --model takes a module importable from Python's path, not a file: run from "
                f"{str(path.parent) or '.'!r} or set PYTHONPATH={path.parent}, and pass "
                f"--model {stem}:{attr}"
            )
        fail(f"--model: cannot import {spec!r}: {err}{hint}")


def _check_no_arguments_needed(factory: Any, spec: str) -> None:
    """Exit 2 when ``factory()`` cannot be called without arguments (io._from_factory calls it
    so, and so does the read without --checkpoint)."""
    import inspect

    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):  # no signature (some builtins): let the call decide
        return
    try:
        sig.bind()
    except TypeError:
        needed = [
            name
            for name, p in sig.parameters.items()
            if p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        ]
        fail(
            f"--model: the factory {spec} needs arguments ({', '.join(needed)}); --model "
            "module:NAME is called with none: point it at a function that builds the model"
        )


def _is_factory_spec(spec: str) -> bool:
    """``package.module:factory`` as `neuromanifold.io.load_model` reads it (not a zoo name, a
    JSON file or a directory)."""
    path = Path(spec)
    return (
        ":" in spec
        and not spec.startswith("zoo:")
        and path.suffix.lower() != ".json"
        and not path.is_dir()
    )


ZOO_PROBES = 64
"""Validation images a trained zoo stage is read on by default (as the demo reads them)."""


def _trained_stage(spec: str) -> tuple[Any, Any, Any]:
    """``zoo:STAGE`` for a stage a zoo recipe trains (``zoo:vit-digits-scratch``, …): its
    checkpoint in the recipe cache, read by default on the first `ZOO_PROBES` validation images of
    its task with their labels, as a categorical classifier (s32 trial TRAIN #8: reading a trained
    zoo model needed a checkpoint path, a hand-made probe file and --family)."""
    from neuromanifold.singular.family import Categorical
    from neuromanifold.zoo.checkpoint import load_checkpoint
    from neuromanifold.zoo.recipes import RECIPES, default_cache_dir

    stages = {s.name: r.name for r in RECIPES.values() for s in r.stages}
    name = spec.removeprefix("zoo:")
    if name not in stages:
        fail(
            f"--model: unknown zoo model {spec!r}; available: zoo:planted-mlp and the trained "
            f"recipe stages {', '.join(f'zoo:{s}' for s in stages)}"
        )
    path = default_cache_dir() / f"{name}.safetensors"
    if not path.is_file():
        fail(
            f"--model {spec}: no trained checkpoint at {path}; train it first: neuromanifold "
            f"train {stages[name]} (or read another file with --model vit-digits --checkpoint F)"
        )
    try:
        model, meta = load_checkpoint(path)
    except (OSError, ValueError) as err:
        fail(f"--model {spec}: {err}")
    return model, _task_probes(meta.task), Categorical()


def _task_probes(task: str | None) -> tuple[Any, Any]:
    """The first `ZOO_PROBES` validation images of a zoo ``task`` (default ``"digits"``) with
    their labels, from the demo's split (seed 0)."""
    from neuromanifold.zoo.data import digits

    split = digits(task or "digits", seed=0)  # type: ignore[arg-type]
    return split.x_val[:ZOO_PROBES], split.y_val[:ZOO_PROBES]


def _checkpoint_task(checkpoint: Path | None) -> str | None:
    """The data task a zoo checkpoint's sidecar names (``neuromanifold train`` writes it), or
    None: no checkpoint, no sidecar, or a task that is not a digits task."""
    from neuromanifold.zoo.checkpoint import read_meta
    from neuromanifold.zoo.data import DIGITS_TASKS

    if checkpoint is None:
        return None
    try:
        task = read_meta(checkpoint).task
    except (OSError, ValueError, TypeError):
        return None
    return task if task in DIGITS_TASKS else None


WEIGHTS_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")


def _weights_file_hint(spec: str) -> str:
    """A hint for the commonest wrong ``--model``, a weights file (a name ending in one of
    `WEIGHTS_SUFFIXES`), or "" (s33 trial USER D5: the refusal did not say where the file
    goes)."""
    if not spec.lower().endswith(WEIGHTS_SUFFIXES):
        return ""
    return (
        f". {spec!r} looks like a weights file: pass it as --checkpoint, and name the module it "
        "loads into with --model package.module:factory (a function or class that builds it); "
        "for a Hugging Face model, pass its directory as --model"
    )


def _resolve_model(spec: str) -> tuple[Any, Any, Any]:
    """``zoo:planted-mlp`` or ``module.path:factory`` → (model, default data or None, family).

    As in `neuromanifold.io` (``_from_factory``), a callable that is not a module instance (a
    function, or an ``nn.Module`` class) is called with no arguments; it may return a module or
    an object with ``model``, ``data`` (and ``family``) such as the planted cells. The module is
    put in eval mode, as `neuromanifold.io.load_model` puts it with ``--checkpoint``.
    """
    if spec == "zoo:planted-mlp":
        from neuromanifold.cells.planted import planted_mlp

        p = planted_mlp()
        return p.model, p.data, p.family
    if spec.startswith("zoo:"):
        return _trained_stage(spec)
    if ":" not in spec:
        fail(
            f"--model must be 'zoo:NAME', 'package.module:factory' or a Hugging Face model "
            f"directory; got {spec!r}{_weights_file_hint(spec)}"
        )
    from torch import nn

    factory = _import_factory(spec)
    obj = factory
    if callable(factory) and not isinstance(factory, nn.Module):
        _check_no_arguments_needed(factory, spec)
        try:
            obj = factory()
        except Exception as err:  # user code: one line instead of its traceback
            fail(f"--model: the factory {spec} raised {type(err).__name__}: {err}")
    model, data, family = obj, None, None
    if hasattr(obj, "model") and hasattr(obj, "data"):
        model, data, family = obj.model, obj.data, getattr(obj, "family", None)
    if not isinstance(model, nn.Module):  # s30 trial DOCS #3: name the option and the factory
        what = "its .model is" if model is not obj else "it is"
        fail(
            f"--model: {spec} gave {type(model).__name__}, and {what} not a torch.nn.Module: "
            f"the factory must return a module, or an object with .model (a module) and .data"
        )
    # as io.load_model does with --checkpoint: a freshly built module is in training mode, which
    # the read refuses for dropout
    model = model.eval()
    return model, data, family


_NPY_MAGIC = b"\x93NUMPY"
"""The first bytes of a file written by ``numpy.save``."""


def _load_data(path: Path) -> Any:
    """The probe data in ``path``: a tensor or a pair ``(x, y)``; the entry ``x`` of a dict /
    safetensors file / NumPy ``.npz`` archive, as the pair ``(x, y)`` when an entry ``y`` (the
    labels) is beside it; or a NumPy ``.npy`` array (no pickled objects). Every file problem
    exits 2 with one line naming ``--data``."""
    import torch

    from neuromanifold.io import torch_error_line

    if path.is_dir():
        fail(f"--data {path}: is a directory; expected a torch (.pt), safetensors or .npy file")
    if not path.exists():
        fail(f"--data {path}: no such file")
    with path.open("rb") as fh:
        numpy_file = fh.read(len(_NPY_MAGIC)) == _NPY_MAGIC
    if numpy_file or path.suffix == ".npz":  # np.save's format whatever the suffix, np.savez's
        return _checked_layout(_numpy_data(path, npy=numpy_file), path)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            tensors = load_file(str(path))
        except Exception as err:  # SafetensorError, OSError: the file is unreadable or corrupt
            fail(f"--data {path}: cannot read safetensors file (truncated or corrupt?): {err}")
        _check_entries(tensors, path, "tensors")
        return _checked_layout(_with_labels(tensors), path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError, KeyError, RuntimeError, OSError, ...
        if isinstance(err, OSError) and err.strerror:
            reason = err.strerror
        else:  # torch's reason, not its advice to load unsafely
            reason = torch_error_line(err)
        fail(
            f"--data {path}: cannot read it as a torch file saved with torch.save "
            f"(truncated, corrupt or not weights-only?): {reason}"
        )
    if isinstance(obj, dict):
        _check_entries(obj, path, "keys")
        obj = _with_labels(obj)
    return _checked_layout(obj, path)


_ONE_INPUT = (
    "the read calls the model on x alone (no attention mask, token type ids or other keyword "
    "inputs): save unpadded probe sequences of one length as 'x' (token ids: x = input_ids), "
    "labels as 'y' if any"
)


def _check_entries(names: Any, path: Path, what: str) -> None:
    """Exit 2 naming ``--data`` unless the named entries hold ``x`` and at most ``y`` beside it:
    another entry (an ``attention_mask``) would be dropped without a word (s27 trial HF D1: a
    padded batch was read as the unmasked model)."""
    names = sorted(names)
    if "x" not in names:
        fail(
            f"--data {path}: holds {what} {names}; expected 'x' (and optionally 'y'); {_ONE_INPUT}"
        )
    extra = [k for k in names if k not in ("x", "y")]
    if extra:
        fail(f"--data {path}: holds {what} {extra} beside 'x'; {_ONE_INPUT}")


def _with_labels(entries: Any) -> Any:
    """``entries["x"]``, or the pair ``(entries["x"], entries["y"])`` when labels ``y`` are
    beside the inputs (s21 trial AS #6: they were dropped without a word)."""
    return (entries["x"], entries["y"]) if "y" in entries else entries["x"]


def _numpy_data(path: Path, *, npy: bool) -> Any:
    """The tensor of a NumPy ``.npy`` file (``npy``) or of the array ``x`` of an ``.npz``
    archive (the pair ``(x, y)`` when it holds an array ``y`` too), in native byte order;
    pickled objects are not loaded. Exit 2 naming ``--data`` when it cannot be read or holds no
    numbers (s20 trial AN #3, audit AP #3)."""
    import zipfile
    import zlib

    import numpy as np

    kind = "NumPy .npy file" if npy else "NumPy .npz archive"
    try:
        array = np.load(path, allow_pickle=False)
        if not npy:  # an archive of named arrays, read like {'x': ..., 'y': ...}
            with array as archive:
                _check_entries(archive.files, path, "arrays")
                entries = {k: archive[k] for k in ("x", "y") if k in archive.files}
            return _with_labels({k: _numpy_tensor(a, path) for k, a in entries.items()})
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as err:  # pickles,
        # truncated or corrupt files and archives
        fail(f"--data {path}: cannot read this {kind}: {err}")
    return _numpy_tensor(array, path)


def _numpy_tensor(array: Any, path: Path) -> Any:
    """``array`` as a tensor in native byte order; exit 2 naming ``--data`` when it holds no
    numbers."""
    import torch

    if array.dtype.byteorder not in ("=", "|"):  # e.g. '>f4' written on a big-endian host
        array = array.astype(array.dtype.newbyteorder("="))
    try:
        return torch.from_numpy(array)
    except TypeError:  # structured or string dtypes: no tensor of them
        fail(f"--data {path}: holds a NumPy array of dtype {array.dtype}; expected numbers")


def _checked_layout(obj: Any, path: Path) -> Any:
    """``obj`` when it is laid out as probe data (a tensor with a sample axis, or a pair whose
    first entry is one); else exit 2 naming ``--data`` (s20 trial AN #2, #3: a 1-tuple crashed
    with an IndexError, a 3-list was read as its first two entries, a 0-d tensor was told it
    was not a Tensor). What the entries hold (dtypes, label shapes) the read itself checks."""
    import torch

    if isinstance(obj, tuple | list) and len(obj) != 2:
        fail(
            f"--data {path}: holds a {type(obj).__name__} of {len(obj)} "
            f"entr{'y' if len(obj) == 1 else 'ies'}; expected a "
            "tensor of inputs, a pair (x, y) or {'x': ...}"
        )
    x = obj[0] if isinstance(obj, tuple | list) else obj
    if isinstance(x, torch.Tensor) and x.ndim == 0:
        fail(f"--data {path}: holds a 0-d tensor; expected inputs with a leading sample axis")
    y = obj[1] if isinstance(obj, tuple | list) else None
    if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
        if y.ndim == 0 or y.shape[0] != x.shape[0]:
            fail(
                f"--data {path}: the labels y have shape {tuple(y.shape)} and the inputs x "
                f"{tuple(x.shape)}; expected one label row per sample (leading size {x.shape[0]})"
            )
    return obj


_WHOLE_COLUMNS = ("#", "k", "k̂", "r²", "class", "magnitude")
"""Columns of the read table that never wrap (numbers and the class)."""


def _provenance(model: str, checkpoint: Path | None, data: Path | None) -> dict[str, Any]:
    """``meta["source"]``: the ``--model`` given (with the SHA-256 of a Hugging Face directory's
    weight files), the checkpoint and data files (absolute paths) with their SHA-256, taken before
    the read, and the command line when this process is the ``neuromanifold`` command (None when
    the CLI is called from Python)."""
    import sys

    from neuromanifold.zoo.checkpoint import file_sha256

    def file(path: Path | str | None) -> dict[str, str] | None:
        if path is None or not Path(path).is_file():
            return None
        return {"path": str(Path(path).resolve()), "sha256": file_sha256(path)}

    weights = (
        sorted(p for pattern in ("*.safetensors", "*.bin") for p in Path(model).glob(pattern))
        if Path(model).is_dir()
        else []
    )
    entry = Path(sys.argv[0]).name if sys.argv else ""
    return {
        "model": model,
        "model_files": [file(p) for p in weights],
        "checkpoint": file(checkpoint),
        "data": file(data),
        "argv": ["neuromanifold", *sys.argv[1:]]
        if entry in ("neuromanifold", "__main__.py")
        else None,
    }


def _say_replaced_log(log: Path, say: Callable[[str], None]) -> None:
    """Say, before a read without ``--resume`` starts over, that ``log`` holds finished directions
    it will replace (s32 trial TRAIN #5: a finished 53-direction log was restarted without a
    word, beside the old report files)."""
    from neuromanifold.report.resume import count_logged

    n = count_logged(log)
    if n:
        say(
            f"{log} holds {n} finished direction{'s' * (n != 1)} of an earlier read, which this "
            f"read replaces (--resume continues it instead); the report files in {log.parent} are "
            "the earlier read's until this one finishes"
        )


def _resume_hint() -> str:
    """How to continue an interrupted read from its log: the same command with ``--resume``; under
    ``torchrun``, where ``--resume`` is refused, in one process (s28 trial DIST F4)."""
    from neuromanifold.singular import distributed as dp

    if dp.world_size() > 1:
        return "run the same read in one process (without torchrun) with --resume to continue"
    return "run the same command with --resume to continue"


def _kept(log: Path, fingerprint: Callable[[], str]) -> str:
    """What the log of an interrupted read keeps: its finished directions and how to continue
    (`_resume_hint`), or that no direction finished (s33 trial DIST D3: the directions were said
    to be kept in a log that did not exist, a read stopped before its first direction). Only a
    log of this read counts, ``fingerprint()`` (computed only when a log is there): an earlier
    read's log, which a new read replaces at its first direction, is not one ``--resume`` of this
    read would take (s33 review #5)."""
    from neuromanifold.report.resume import count_logged

    n = count_logged(log, fingerprint()) if log.is_file() else 0
    if not n:
        return "no direction was finished, so there is nothing to resume: run the same read again"
    kept = f"the {n} directions read so far are" if n != 1 else "the direction read so far is"
    return f"{kept} kept in {log}; {_resume_hint()}"


_GROUP_FAILURES = ("gloo", "nccl", "connection reset", "connection closed", "broken pipe")
"""Fragments of the message of a collective that failed because another rank is gone."""


def _group_failure(err: BaseException) -> bool:
    """Whether ``err``, raised in a read under a process group of several ranks, is a failed
    collective (``torch.distributed.DistError``, or a backend's ``RuntimeError`` naming gloo,
    NCCL or a lost connection) rather than a failure of the read itself.

    >>> _group_failure(RuntimeError("[gloo/pair.cc:537] Read error: Connection reset by peer"))
    False
    """
    from torch import distributed as dist

    from neuromanifold.singular import distributed as dp

    if dp.world_size() <= 1:
        return False
    if isinstance(err, dist.DistError):
        return True
    return any(f in str(err).lower() for f in _GROUP_FAILURES)


def _layer_cell(layer: str, units: str) -> str:
    """The table's ``layer: units`` cell (`neuromanifold.singular.support.layer_units`); the
    layer alone when the direction names no unit there; the model itself is ``<root>`` (a
    ViT's ``cls_token``, as in the markdown report's headings).

    >>> _layer_cell("fc1", "out 2"), _layer_cell("", "pos_embed spread"), _layer_cell("fc", "")
    ('fc1: out 2', '<root>: pos_embed spread', 'fc')
    """
    name = layer or "<root>"
    return f"{name}: {units}" if units else name


def _refined_family(fam: Any, kind: type, said: str, **value: Any) -> Any:
    """``kind(**value)``, the output family ``fam`` refined by one option (``--sigma`` of a
    gaussian, ``--ignore-index`` of a categorical); a usage error, starting with ``said`` (the
    option and what it is for), when ``fam`` is of another kind, or naming the option when
    ``kind`` refuses the value."""
    option, name = said.split()[0], kind.__name__.lower()
    if not isinstance(fam, kind):
        purpose = "a regression" if name == "gaussian" else "a classifier"
        raise typer.BadParameter(
            f"{said}; the output family is {fam.to_dict().get('name')} (pass --family {name} "
            f"for {purpose})"
        )
    try:
        return kind(**value)
    except ValueError as err:
        raise typer.BadParameter(f"{option}: {err}") from None


def _family_label(family: str | None, default_family: Any, fam: Any) -> str:
    """One line naming the output family used and where it came from (the JSON holds the
    family itself in ``meta["family"]``)."""
    name = fam.to_dict().get("name", type(fam).__name__)
    ignored = getattr(fam, "ignore_index", None)
    if ignored is not None:
        name = f"{name}, label {ignored} = no label"
    if fam.to_dict().get("sigma", 1.0) != 1.0:
        name = f"{name}, σ = {fam.to_dict()['sigma']:g}"
    if family is not None:
        return f"output family: {name} (--family)"
    if default_family is not None:
        return f"output family: {name} (the model's own; --family was not given)"
    return (
        f"output family: {name} (the default: --family was not given and the model names none; "
        "pass --family categorical for a classifier)"
    )


def _launch_rank_world() -> tuple[int, int]:
    """This process's rank and the world size: the process group's, else torchrun's ``RANK`` and
    ``WORLD_SIZE`` (before the group is initialised), else ``(0, 1)``."""

    from neuromanifold.singular import distributed as dp

    if dp.world_size() > 1:
        return dp.rank(), dp.world_size()
    if dp.launched_by_torchrun():
        return int(os.environ["RANK"]), int(os.environ.get("WORLD_SIZE", "1"))
    return 0, 1


def _error(message: str, *, agreed: bool, per_node: bool = False) -> None:
    """Print ``message`` on stderr.

    ``agreed=True``: every rank meets the same error (a check on the arguments, or the read's
    input checks, which are agreed over the ranks), so only rank 0 prints it, once.
    ``per_node=True`` (with ``agreed``): every process of one node meets the same error (the
    device check against that node's GPUs), so each node's first process (``LOCAL_RANK`` 0)
    prints it.
    ``agreed=False``: the error is this rank's own (its shard's forward pass, token ids, model
    outputs); the rank that hit it prints it, prefixed ``rank r: `` when there are several
    ranks. The other ranks then stop in their next collective (gloo: "Connection closed by
    peer").
    """
    r, world = _launch_rank_world()
    if agreed:
        first = int(os.environ.get("LOCAL_RANK", "0")) == 0 if per_node and world > 1 else r == 0
        if first:
            typer.echo(message, err=True)
    else:
        typer.echo(message if world == 1 else f"rank {r}: {message}", err=True)


@contextmanager
def _said_once() -> Iterator[None]:
    """Run checks of the arguments, which every rank meets alike: a `fail` inside is printed by
    rank 0 only (`_error` with ``agreed``), the other ranks exit with status 2 silently."""
    try:
        with failures_held():
            yield
    except Failure as failure:
        _error(failure.line, agreed=True)
        raise


def _parsed_once(parse: Callable[[str], Path]) -> Callable[[str], Path]:
    """The option parser ``parse`` with its `fail` said once under torchrun (`_said_once`)."""

    def parse_once(value: str) -> Path:
        with _said_once():
            return parse(value)

    return parse_once


_DATA = _parsed_once(nonempty_path("--data", "a torch, safetensors or .npy file"))
_CHECKPOINT = _parsed_once(nonempty_path("--checkpoint", "a weights file"))
_OUT = _parsed_once(out_dir_parser())


def _gather_failures(line: str | None) -> list[str | None]:
    """Every rank's failure line (``None``: none) in rank order; collective under a process
    group, ``[line]`` without one."""
    from neuromanifold.singular import distributed as dp

    if dp.world_size() == 1:
        return [line]
    import torch.distributed as dist

    lines: list[str | None] = [None] * dp.world_size()
    dist.all_gather_object(lines, line)
    return lines


@contextmanager
def _failures_over_ranks() -> Iterator[None]:
    """Build the model and load the probe data; a `fail` inside is said once over the ranks.

    Every rank leaves through `_gather_failures`, failed or not, so none is left waiting in a
    later collective. When every rank failed with the same line (a missing ``--data`` file, a
    factory that always raises) rank 0 prints it once; otherwise each rank that failed prints
    its own as ``rank r: error: ...`` (a factory that raises on one rank only). When any rank
    failed, every rank exits with status 2.
    """
    line = None
    try:
        with failures_held():
            yield
    except Failure as failure:
        line = failure.line
    lines = _gather_failures(line)
    if all(seen is None for seen in lines):
        return
    if line is not None:
        _error(line, agreed=len(set(lines)) == 1)
    raise typer.Exit(code=2)


def _n_samples(data: Any) -> int:
    """Leading size of the probe inputs ``data`` (a tensor or an ``(x, y)`` pair; 0 if none)."""
    x = data[0] if isinstance(data, tuple | list) else data
    shape = getattr(x, "shape", ())
    return int(shape[0]) if len(shape) else 0


def _figure_factors(net: Any, x: Any, fam: Any, reading: Any) -> Any:
    """The K-FAC factors behind the report's spectra figure: `kfac_factors` of ``net`` on this
    rank's shard ``x`` (collective under a process group), in the read's factor batches.

    Under ``--max-memory`` the read's plan (``reading.meta["memory_plan"]``) gives the factor
    batch that fits the budget; the pass takes it, so that it stays within the budget the read
    was held to (s19 trial AK #1: the default batch of 256 went 7x over an 8 MB budget). The CLI
    reads with the default ``max_factor_dim``, and so does this pass.

    The read's module rewrites (``nn.MultiheadAttention`` as projections, ``Conv1D`` and
    ``nn.Linear`` subclasses as ``nn.Linear``) are applied to ``net`` first (`rewrite_as_read`:
    the read is done, and ``net`` is the CLI's own), so that the figure has a panel for every
    block the read had factors of (s22 trial LM #10: an ``nn.MultiheadAttention``'s projections,
    where the read's live directions sat, had none).
    """
    from neuromanifold.singular.adapt import rewrite_as_read
    from neuromanifold.singular.factors import kfac_factors

    rewrite_as_read(net, reading.meta)
    plan = reading.meta.get("memory_plan")
    batch = {} if plan is None else {"batch_size": int(plan["factor_batch"])}
    return kfac_factors(net, x, fam, **batch)


def _write_directions(
    path: Path, vectors: dict[int, dict[str, Any]], reading: Any, say: Any
) -> None:
    """``--save-directions``: write the swept unit directions (`save_directions`, one per
    record: a resumed read's are rebuilt from their candidates) and say how many."""
    from neuromanifold.report.directions import save_directions

    with writing(path, option="--save-directions"):
        save_directions(path, vectors, reading)
    say(f"wrote {path} ({len(vectors)} direction{'s' * (len(vectors) != 1)})")


def _scan_summary(b: dict[str, Any]) -> str:
    if b["best_k"] is not None:
        return f"k = {b['best_k']}"
    return "/".join(sorted(set(b["classes"]))) or "—"


def register(app: typer.Typer) -> None:
    """Attach the `read` commands to the top-level app."""

    @app.command("read")
    def read_cmd(
        model: str = typer.Option(
            ...,
            "--model",
            help="zoo:planted-mlp, a trained zoo stage (zoo:vit-digits-scratch, ...: from the "
            "recipe cache, on 64 labelled validation images), package.module:factory, or a "
            "Hugging Face model directory (config.json and weights; read as saved)",
        ),
        json_path: str | None = typer.Option(
            None, "--json", help=f"write the Reading as JSON {JSON_STDOUT_HELP}"
        ),
        data: Path | None = typer.Option(
            None,
            "--data",
            parser=_DATA,
            metavar="FILE",
            help="probe data: a torch file (a tensor of inputs, a pair (x, y) or {'x': ..., "
            "'y': ...}), safetensors or NumPy .npz (arrays 'x' and, optionally, 'y') or NumPy "
            ".npy (inputs only); labels y, one per sample, are optional and used only to check "
            "that the checkpoint is a minimum of the labelled probe loss along the directions "
            "read; no other entries (the model is called on x alone: no attention mask, so "
            "probe sequences must be unpadded)",
        ),
        family: str | None = typer.Option(
            None,
            "--family",
            help="output family: gaussian or categorical (default: the model's own, categorical "
            "for Hugging Face classification and language-model heads; else gaussian)",
        ),
        sigma: float | None = typer.Option(
            None,
            "--sigma",
            metavar="FLOAT",
            help="σ of a gaussian family, y ~ N(model(x), σ²): the noise level of the data "
            "(default 1); F_u scales as 1/σ² and the orders do not change (nor the classes, "
            "unless --live-threshold, an absolute F, is given); the labelled checks are in its "
            "units",
        ),
        ignore_index: int | None = typer.Option(
            None,
            "--ignore-index",
            metavar="INT",
            help="categorical labels equal to this negative integer mark positions without a "
            "label (torch's cross_entropy uses -100): the labelled checks leave them out; y[:, t] "
            "is the label of logits[:, t] (shift Hugging Face labels: y = labels[:, 1:] with the "
            "last position padded by this index, for a model that returns every position's "
            "logits)",
        ),
        max_directions: int | None = typer.Option(
            None,
            "--max-directions",
            min=0,
            help="read at most N candidate directions, possible dead directions first (by "
            "ascending eigenvalue ratio), gauges last; the report says how many were left "
            "unread (default: all)",
        ),
        snap: bool = typer.Option(
            False,
            "--snap",
            help="read every non-gauge candidate from the snapped base point (default: only "
            "when the offset hides the rate; gauges are never snapped)",
        ),
        baseline: bool = typer.Option(
            False, "--baseline", help="also run the per-coordinate scan beside each singularity"
        ),
        keep_precision: bool = typer.Option(
            False,
            "--keep-precision",
            help="read the steps a float64 forward takes below float64 (a float32 softmax or "
            "norm) as they are, rounded at their precision (default: run them in float64 and "
            "say so in the note)",
        ),
        checkpoint: Path | None = typer.Option(
            None,
            "--checkpoint",
            parser=_CHECKPOINT,
            metavar="FILE",
            help="weights file (.safetensors/.pt); --model is then its architecture: a zoo name "
            "(vit-digits, ...), a config/sidecar JSON or package.module:factory",
        ),
        out: Path | None = typer.Option(
            None,
            "--out",
            parser=_OUT,
            metavar="DIR",
            help="write report.json, report.md and figures/ into DIR, logging each direction to "
            "DIR/read.jsonl",
        ),
        resume: bool = typer.Option(
            False, "--resume", help="continue an interrupted read from DIR/read.jsonl (--out)"
        ),
        save_directions: Path | None = typer.Option(
            None,
            "--save-directions",
            metavar="FILE",
            help="write the unit direction of every record swept, and its sweep's base shift, "
            "to FILE (torch.save; neuromanifold.report.directions says how to check a record)",
        ),
        device: str = typer.Option(
            "cpu",
            "--device",
            help="cpu, cuda or cuda:N (the read runs in float64 there; under torchrun cuda means "
            "cuda:LOCAL_RANK)",
        ),
        max_memory: str | None = typer.Option(
            None,
            "--max-memory",
            help="memory budget for the whole read on top of what the process holds, per "
            "process under torchrun, e.g. 2GB or 512MiB: probe samples, t-values and factor "
            "batches are chunked to fit, and a budget that one sample or the detection (factors, "
            "their eigendecompositions, the candidates found) cannot fit is refused; "
            "neuromanifold.singular.memory lists what is counted (not the one-time costs of a "
            "process's first read, torch's code, kernels and caches: 35-120 MB of RSS measured "
            "on CPU MLPs, about 70 MB more with attention)",
        ),
        live_threshold: float | None = typer.Option(
            None,
            "--live-threshold",
            help="Fisher magnitude a slope-0 read must reach to be classed live (below: flat "
            "gauge), e.g. 1e-3 x the median Fisher of known live directions (the spec's tau_live); "
            "a positive finite number (default: each read's own 1e-10 x F_scale, the larger of "
            "its block's typical Fisher and the sweep's largest F)",
        ),
    ) -> None:
        """Detect and read every dead direction of a model; print a per-layer table."""
        from rich.console import Console
        from rich.table import Table

        from neuromanifold.cli._console import stdout_console, warnings_as_notes
        from neuromanifold.report.markdown import truncation_notes
        from neuromanifold.singular import distributed as dp
        from neuromanifold.singular.family import Categorical, Gaussian
        from neuromanifold.singular.memory import parse_memory
        from neuromanifold.singular.read import check_live_threshold, read

        if resume and out is None:
            raise typer.BadParameter("--resume needs --out DIR (the read log lives there)")
        with _said_once():
            check_json_target(json_path, stdout_ok=True)
            check_json_target(save_directions, option="--save-directions")
            check_out_dir(out)
        try:  # the same on every process of a node where torchrun says how many there are
            dev = dp.resolve_device(device)
        except (ValueError, TypeError) as err:
            node = dp.device_errors_per_node()
            _error(f"error: {err}", agreed=node, per_node=node)
            raise typer.Exit(code=2) from err
        try:
            budget = None if max_memory is None else parse_memory(max_memory)
        except (ValueError, TypeError) as err:
            _error(f"error: {err}", agreed=True)
            raise typer.Exit(code=2) from err
        try:
            live_threshold = check_live_threshold(live_threshold)
        except (ValueError, TypeError) as err:
            _error(f"error: --live-threshold: {err}", agreed=True)
            raise typer.Exit(code=2) from err
        if dp.init_from_env(dev):
            import atexit

            import torch.distributed as dist

            atexit.register(dist.destroy_process_group)
        if resume and dp.world_size() > 1:
            raise typer.BadParameter("--resume runs in a single process; launch without torchrun")
        main_rank = dp.is_main_process()
        console = stdout_console(quiet=json_to_stdout(json_path))  # stdout: the JSON only
        # warnings and what was written are said with the text output, or on stderr (unwrapped,
        # paths whole) when stdout holds the JSON
        said = Console(stderr=True, soft_wrap=True) if json_to_stdout(json_path) else console

        def say_note(line: str) -> None:
            """A library warning as one plain line (`warnings_as_notes`), where notes go."""
            said.print(line, markup=False, highlight=False, soft_wrap=True)

        def load_warnings() -> AbstractContextManager[None]:
            """Building and loading the model: the loader's dtype warnings and the hidden
            torchvision said as notes, other warnings as Python shows them; rank 0 only."""
            from neuromanifold.io import BrokenTorchvisionWarning, CheckpointDtypeWarning

            notes = (CheckpointDtypeWarning, BrokenTorchvisionWarning)
            return warnings_as_notes(say_note if main_rank else None, notes)

        # a failure here (a missing file, a factory that raises) is said once over the ranks,
        # or by each rank that met it alone (s19 trial AK #4)
        probes_from_task: str | None = None  # default probes of a zoo checkpoint's own task
        with _failures_over_ranks():
            hf_dir = Path(model).is_dir() and (Path(model) / "config.json").is_file()
            if checkpoint is not None and model.startswith("zoo:"):
                from neuromanifold.zoo.models import ZOO_ARCHITECTURES

                name = model.removeprefix("zoo:")
                if name in ZOO_ARCHITECTURES:
                    fail(
                        f"--model {model}: with --checkpoint name the architecture as "
                        f"--model {name}"
                    )
                fail(
                    f"--model {model} takes no --checkpoint (it builds its own weights); to load a "
                    f"checkpoint name its architecture: one of {sorted(ZOO_ARCHITECTURES)}, a "
                    "package.module:factory, an architecture .json or a Hugging Face directory"
                )
            if checkpoint is not None or hf_dir:
                from neuromanifold.io import CheckpointLoadError, load_model

                if _is_factory_spec(model):  # load_model calls it with no arguments
                    from torch import nn

                    factory = _import_factory(model)
                    if isinstance(factory, nn.Module):
                        fail(
                            f"--model: {model} is a module instance; with --checkpoint, name a "
                            "function or class that builds the model (it is called with no "
                            "arguments)"
                        )
                    _check_no_arguments_needed(factory, model)
                try:  # a Hugging Face directory holds its own weights unless --checkpoint is given
                    with load_warnings():
                        net = load_model(checkpoint, architecture=model)
                except (ValueError, TypeError, OSError, ImportError) as err:
                    fail(str(err))
                except CheckpointLoadError as err:  # the module built; taking the weights failed
                    fail(f"--checkpoint: {err}")
                except Exception as err:  # raised by user code (a factory): one line, no traceback
                    fail(f"--model: building {model} raised {type(err).__name__}: {err}")
                default_x, default_family = None, None
                task = _checkpoint_task(checkpoint) if data is None else None
                if task is not None:  # a checkpoint `neuromanifold train` wrote: its own task
                    default_x, default_family = _task_probes(task), Categorical()
                    probes_from_task = task
            else:
                with load_warnings():  # a factory's warnings: once, as with --checkpoint
                    net, default_x, default_family = _resolve_model(model)
            if default_family is None:  # a Hugging Face classification or language-model head
                from neuromanifold.io import family_hint

                default_family = Categorical() if family_hint(net) == "categorical" else None
            x = _load_data(data) if data is not None else default_x
        if x is None:
            raise typer.BadParameter("this model ships no probe data: pass --data PATH")
        from neuromanifold.io import padded_sequences

        padded = padded_sequences(net, x) if main_rank else None
        if padded is not None:  # s34 trial REPORT O1: a padded batch was read without a word
            n_pad, n_all, pad_id, also = padded
            same = f", the {also} token id too: they may be {also} tokens" if also else ""
            say_note(
                f"note: {n_pad} of {n_all} probe sequences hold the pad token id {pad_id} "
                f"(config.pad_token_id{same}): the read passes no attention mask, so the model "
                "attends to those positions as tokens; save unpadded sequences of one length "
                "unless that is meant"
            )
        if family is not None and family not in _FAMILIES:
            raise typer.BadParameter(f"--family must be one of {_FAMILIES}; got {family!r}")
        fam = {"gaussian": Gaussian(), "categorical": Categorical()}.get(family or "")
        fam = fam or default_family or Gaussian()
        if sigma is not None:
            fam = _refined_family(
                fam, Gaussian, "--sigma is the noise level of a gaussian family", sigma=sigma
            )
        if ignore_index is not None:
            fam = _refined_family(
                fam,
                Categorical,
                "--ignore-index marks categorical labels",
                ignore_index=ignore_index,
            )
            if not isinstance(x, tuple | list):  # no labels: no labelled check would run
                raise typer.BadParameter(
                    "--ignore-index marks labels, and the probe data has none (give --data a "
                    "file with 'y' beside 'x', or a pair (x, y))"
                )
        family_line = _family_label(family, default_family, fam)
        probes_line = (
            f"probe data: the first {ZOO_PROBES} labelled validation images of the checkpoint's "
            f"task {probes_from_task!r} (--data reads others)"
            if probes_from_task is not None
            else ""
        )
        options = {
            "max_directions": max_directions,
            "snap": True if snap else "auto",
            "baseline": baseline,
        }
        # only non-default values: the options are part of a resumable read's fingerprint
        if dev.type != "cpu":
            options["device"] = str(dev)
        if budget is not None:
            options["max_memory"] = budget
        if live_threshold is not None:
            options["live_threshold"] = live_threshold
        if keep_precision:
            options["promote"] = False
        if not main_rank:
            options["progress"] = False
        try:  # the same on every rank: the data's shape
            n_global = _n_samples(x)
            x_all, x = x, dp.shard_data(x)  # this rank's contiguous shard (all without torchrun)
        except (ValueError, TypeError) as err:
            _error(f"error: {err}", agreed=True)
            raise typer.Exit(code=2) from err
        # which files this reading is of, hashed before the read (s32 trial TRAIN #4: reports of
        # several checkpoints could not be told apart, and a stale one can sit beside a new log)
        source = _provenance(model, checkpoint, data) if main_rank else {}
        vectors: dict[int, dict[str, Any]] = {}  # --save-directions: rank 0 keeps û per record

        def keep(i: int, u: dict[str, Any]) -> None:
            vectors[i] = {name: t.detach().cpu() for name, t in u.items()}

        on_vector = keep if save_directions is not None and main_rank else None

        def this_read() -> str:  # the log fingerprint of this read (`resumable_read`'s)
            from neuromanifold.report.resume import read_fingerprint

            return read_fingerprint(net, x_all, fam, options)

        try:
            if out is not None and main_rank:
                from neuromanifold.report.resume import LOG_NAME, resumable_read

                def resumed(n: int, torn: bool) -> None:  # before the bars (s22 trial LM #9)
                    log = out / LOG_NAME
                    said = (
                        f"--resume: {n} finished direction{'s' * (n != 1)} taken from {log}"
                        if n
                        else f"--resume: no finished direction in {log}; reading from the start"
                    )
                    torn_line = "; its torn last line was dropped and that direction is read again"
                    say_note(said + (torn_line if torn else ""))

                if not resume:
                    _say_replaced_log(out / LOG_NAME, say_note)
                try:
                    reading = resumable_read(  # the log's fingerprint: the whole probe set
                        net,
                        x,
                        fam,
                        log_path=out / LOG_NAME,
                        resume=resume,
                        fingerprint_data=x_all,
                        on_resume=resumed,
                        on_vector=on_vector,
                        **options,
                    )
                except KeyboardInterrupt:  # the log keeps every direction read so far
                    typer.echo(f"interrupted: {_kept(out / LOG_NAME, this_read)}", err=True)
                    raise typer.Exit(code=130) from None
            else:
                reading = read(net, x, fam, on_vector=on_vector, **options)
        except RuntimeError as err:  # another rank died: its collective fails here
            if not _group_failure(err):
                raise
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            # with --out, rank 0 says what its log keeps; without, there is no log (s33 trial
            # DIST D5: that case printed gloo's 65-line traceback)
            kept = f"; {_kept(out / LOG_NAME, this_read)}" if out is not None and main_rank else ""
            typer.echo(
                f"error: a process of the group failed ({type(err).__name__}: {first}){kept}",
                err=True,
            )
            raise typer.Exit(code=1) from None
        except (ValueError, TypeError) as err:  # agreed checks are marked; others: this rank's
            _error(f"error: {err}", agreed=dp.is_agreed(err))
            raise typer.Exit(code=2) from err
        import dataclasses

        if dp.world_size() > 1:  # this rank's shard beside the global N (the pass counts are its)
            reading = dataclasses.replace(reading, meta={**reading.meta, **dp.shard_meta(n_global)})
        if main_rank:
            reading = dataclasses.replace(reading, meta={**reading.meta, "source": source})
        # the figures' factor pass is collective under torchrun: every rank takes part, rank 0
        # after it has written --json (a pass stopped by the memory limit loses the figures only);
        # the ranks first agree that rank 0's --json was written, so that a failed write stops
        # every rank instead of leaving the others in the pass (s19 audit AM #2)
        if not main_rank:
            if out is not None:
                with _failures_over_ranks():
                    pass
                _figure_factors(net, x, fam, reading)
            return
        table = Table(title=f"read: {model} ({reading.meta['n_samples']} samples)")
        # "#": the direction's index in the reading (its JSON and report.md): a chain across
        # several layers has a row per layer, all with its number; after the layer, where it
        # sits there, e.g. "0: out 2" / "2: in 2" for a node death of unit 2 (s20 trial AN,
        # suggestions)
        from neuromanifold.report.markdown import (
            PLATEAU_NOTE,
            class_cell,
            class_footnotes,
            fit_format,
            fmt,
        )
        from neuromanifold.singular.support import record_units

        # no slope column: k̂ = 1 + slope/2 says the same (the slope is in the JSON and report.md)
        cols = ["#", "layer: units", "detector", "k", "k̂", "r²", "class", "magnitude"]
        number = {id(r): i for i, r in enumerate(reading.directions)}
        plateaus = False  # whether a row shows a flat gauge's plateau fit
        for col in cols + (["coord. scan"] if baseline else []):
            # long names fold onto further lines instead of being cut with an ellipsis; the
            # numbers and the class stay whole (a folded 9.05e-06 read as 9.05e-0; s20 audit
            # AR #2), so the layer and the detector give way at 80 columns
            table.add_column(col, overflow="fold", no_wrap=col in _WHOLE_COLUMNS)
        for layer, recs in reading.by_layer().items():
            for r in recs:
                extra = []
                if baseline:
                    b = (r.baseline or {}).get(layer)
                    extra = ["—" if b is None else _scan_summary(b)]
                fit = fit_format(r)  # a flat gauge's plateau fit in parentheses (DOCS #4)
                plateaus = plateaus or (fit is not fmt and r.k_hat is not None)
                table.add_row(
                    str(number[id(r)]),
                    _layer_cell(layer, record_units(r.info, layer)),
                    r.detector,
                    "—" if r.k is None else str(r.k),
                    fit(r.k_hat, ".3f"),
                    fit(r.r2, ".4f"),
                    class_cell(r),
                    "—" if r.magnitude is None else f"{r.magnitude:.3g}",
                    *extra,
                )
        # the family, what was not covered and the reading's note are warnings a pipeline
        # needs too: on stderr when stdout holds the JSON (s15 trial T #2)
        said.print(family_line)
        if probes_line:  # not in the report's title, which names the family (s33 review #9)
            said.print(probes_line, markup=False)
        console.print(table)
        if plateaus:
            said.print(f"k̂, r² {PLATEAU_NOTE}", markup=False)
        for note in class_footnotes(reading.directions):  # as plain text, not Markdown
            plain = note.replace("\\*", "*").replace("`", "")
            said.print(plain, markup=False)
        for nc in reading.not_covered:
            said.print(f"not covered: {nc.name} ({nc.type}, {nc.n_params} params): {nc.reason}")
        for line in truncation_notes(reading.meta):  # s28 trial EXOTIC #7: said in JSON only
            said.print(f"cap: {line}", markup=False)
        if reading.note:
            said.print(reading.note)
        with _failures_over_ranks() if out is not None else nullcontext():
            if json_path is not None:
                from neuromanifold.report.archive import reading_json, write_reading_json

                if json_to_stdout(json_path):
                    typer.echo(reading_json(reading))
                else:
                    with writing(json_path, option="--json"):
                        write_reading_json(reading, json_path)
                    console.print(f"wrote {json_path}")
            if save_directions is not None:
                _write_directions(save_directions, vectors, reading, say_note)
        if out is not None:
            from neuromanifold.report.write import write_report

            try:
                factors = _figure_factors(net, x, fam, reading)
                title = f"read: {model}, {family_line}"
                with writing(out, option="--out"):
                    files = write_report(reading, out, title=title, factors=factors)
            except KeyboardInterrupt:  # s33 trial DIST D4: exit 130 without a word, half a report
                typer.echo(
                    f"interrupted while writing the report in {out}: its files may be missing or "
                    "an earlier read's; the read itself is complete in its log: "
                    f"{_resume_hint().replace('to continue', 'to write the report')} (no "
                    "direction is read again)",
                    err=True,
                )
                raise typer.Exit(code=130) from None
            said.print(f"wrote {files.markdown}, {files.json} and {len(files.figures)} figures")
