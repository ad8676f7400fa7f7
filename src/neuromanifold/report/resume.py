"""Resumable reads: a per-direction JSONL log that lets an interrupted `read` continue.

The log (``read.jsonl`` in the output directory) holds one header line and one line per finished
direction::

    {"kind": "neuromanifold-read-log", "version": 1, "fingerprint": "<sha256>"}
    {"index": 0, "n_passes": 96, "record": {...DirectionRecord.to_dict()...}}
    ...

Each direction line is written and flushed (``fsync``) as soon as `read` finishes that
direction, through ``read(..., on_direction=...)``. On resume the lines are handed back as
``read(..., finished=...)``: those candidates are not swept again and their records are reused
as written, so the resumed `Reading` equals the uninterrupted one (the read is deterministic and
JSON keeps floats exactly).

The **fingerprint** is the SHA-256 of the model's parameters and buffers (names, dtypes, shapes,
bytes), the probe inputs, the labels (and whether there are any: they decide the labelled-loss
check of the records), the output family and the read options, less those that only change
how the read runs (`RUN_ONLY_OPTIONS`: the memory budget, the device, the progress bar; the
records agree to rounding), so a read killed for memory resumes with ``--max-memory``. The
header also keeps the parts (model, data and labels hashes, family, options), and a log with another
fingerprint is refused (``ValueError``) naming the parts that differ. The weights do not fix the
model, its ``forward`` does too: the header also keeps the model's first outputs on the first
probe samples (`output_probe`), and a log whose outputs differ beyond `OUTPUT_RTOL` is refused. A
torn last line (the process died while writing it) is dropped; a malformed line elsewhere raises
``ValueError`` naming the line.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from neuromanifold.report._atomic import atomic_write_text
from neuromanifold.singular.reading import DirectionRecord, Reading

__all__ = ["LOG_KIND", "LOG_NAME", "ReadLog", "count_logged", "read_fingerprint", "resumable_read"]

LOG_KIND = "neuromanifold-read-log"
LOG_NAME = "read.jsonl"
LOG_VERSION = 21
"""Bumped whenever the records a read writes change for the same inputs (2: ``snap=True`` no
longer snaps gauge candidates; grouped convolutions are read; 3: ``snap="auto"`` keeps a genuine
unsnapped read the snap would lose, the CE shift of a bias-free head is ``𝟙𝟙ᵀ``; 4: G-kernels
are matched as subspaces, duality links cross flattened feature maps and attention value →
output edges, ``nn.MultiheadAttention`` is read unpacked, query/key-norm rescales are proposed;
5: row selections such as Hugging Face's ``lm_head(h[:, s, :])`` keep the graph's feature-axis
edges, so final-norm gauges and CE shifts behind them are proposed; 6: a duality chain through a
live layer carries ``info["through_live"]``, skip edges continue through channel-keeping pooling
after a channel-wise residual sum, a ReLU output read by several blocks gets its
``relu-rescale``, a skip chain's G vector is not proposed again one-sided; 7: the taps of a
linked unit its consumer still reads are proposed one-sided; 8: sampled factor labels are keyed
by sample content; 9: eigenvectors are oriented by the sign of Σ v_i³; 10: the fingerprint
leaves out `RUN_ONLY_OPTIONS` and the header keeps its parts, and sampled labels take the whole
63-bit key; 11: a QK rotation's direction is built from the head's weights; 12: duality links
inside a degenerate energy cluster are canonical, zero-size blocks are listed as not covered; 13:
each canonical link direction keeps its own energy, zero-width rescale orbits propose nothing; 14:
round-off candidate ratios are equal in the reading order, the fingerprint of a data-parallel
read's log is the whole probe set's; 15: duality links into a consumer with a bias carry its
bias shift, the first read is kept when its order shows below the offset, ``ln-kernel`` records
name the consumer only, ``qk-pair`` candidates are proposed, records carry
``info["support"]``; 16: genuine reads are checked on their mirrored side (``info["one_sided"]``),
a flat non-gauge read whose mirrored side is not flat is read along −u (``info["flipped"]``),
``snap="auto"`` keeps a classified first read over an unresolved snapped one, the support names
its tensors' sizes; 17: with labels, genuine and live records carry the labelled-loss check
``info["loss_along_u"]``, and the fingerprint covers the labels, their values and whether any
were given, so a log is not resumed with other labels or none; 18: for a categorical family its
cuts are at least Bernstein's bound, ``slope_cut`` and ``curvature_cut`` recorded; 19: a record's
sweep carries its ``base_shift``; 20: a categorical cut between the normal one and Bernstein's is
the exact Chernoff cut, `neuromanifold.singular.chernoff`; 21: ``value-bias`` and ``norm-shift``
candidates are proposed): an older log is refused."""


def _hash_tensor(h: Any, t: Tensor) -> None:
    t = t.detach().cpu().contiguous()
    h.update(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")


RUN_ONLY_OPTIONS = ("max_memory", "device", "progress")
"""Read options left out of the fingerprint: they size passes, place them or draw a bar, and the
records agree to rounding whatever they are."""


def fingerprint_parts(
    model: nn.Module, data: Tensor | tuple[Tensor, Tensor], family: Any, options: Mapping[str, Any]
) -> dict[str, Any]:
    """``{"model", "data"}`` SHA-256 hashes (parameters and buffers; probe inputs),
    ``"labels"`` (`_labels_hash`: the labels' SHA-256, ``None`` without labels), ``"family"``
    (``family.to_dict()``) and ``"options"`` (less `RUN_ONLY_OPTIONS`)."""
    hm = hashlib.sha256()
    for name, t in sorted([*model.named_parameters(), *model.named_buffers()]):
        hm.update(name.encode())
        _hash_tensor(hm, t)
    hd = hashlib.sha256()
    _hash_tensor(hd, data[0] if isinstance(data, (tuple, list)) else data)
    fam = family.to_dict() if hasattr(family, "to_dict") else repr(family)
    kept = {k: v for k, v in options.items() if k not in RUN_ONLY_OPTIONS}
    return {
        "model": hm.hexdigest(),
        "data": hd.hexdigest(),
        "labels": _labels_hash(data),
        "family": fam,
        "options": kept,
    }


def _has_labels(data: Any) -> bool:
    """Whether ``data`` is an ``(x, y)`` pair."""
    return isinstance(data, (tuple, list)) and len(data) == 2


def _labels_hash(data: Tensor | tuple[Tensor, Tensor]) -> str | None:
    """SHA-256 (hex) of the labels ``y`` of an ``(x, y)`` pair; ``None`` without labels.

    The labels decide the records' labelled-loss check (``info["loss_along_u"]``), so a log
    written with labels, with other labels or without them is another read. Labels that are
    not a Tensor (which `read` refuses) are named by their type."""
    if not _has_labels(data):
        return None
    y = data[1]
    if not isinstance(y, Tensor):
        return f"not a Tensor: {type(y).__name__}"
    h = hashlib.sha256()
    _hash_tensor(h, y)
    return h.hexdigest()


def read_fingerprint(
    model: nn.Module, data: Tensor | tuple[Tensor, Tensor], family: Any, options: Mapping[str, Any]
) -> str:
    """SHA-256 (hex) of `fingerprint_parts`: parameters, buffers, probe inputs, labels, family,
    options."""
    return _digest(fingerprint_parts(model, data, family, options))


def _digest(parts: Mapping[str, Any]) -> str:
    """SHA-256 of the parts, less ``"outputs"`` (compared to a tolerance, not hashed)."""
    hashed = {k: v for k, v in parts.items() if k != "outputs"}
    return hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()


OUTPUT_SAMPLES = 2
"""`output_probe` runs the model on this many probe samples."""
OUTPUT_VALUES = 64
"""`output_probe` keeps this many output values, spread evenly over its flattened output."""
OUTPUT_RTOL = 1e-4
"""A log whose probe outputs differ from this read's by more than this times their largest
magnitude is refused: the same weights with another forward (an output scale, a changed
activation) is another model. Both are float64 forwards of the read's working copy; the tolerance
leaves room for another device's kernels. A change of the forward below it is not seen."""


def output_probe(model: nn.Module, data: Tensor | tuple[Tensor, Tensor]) -> list[float] | None:
    """`OUTPUT_VALUES` values of the model's output on its first `OUTPUT_SAMPLES` probe inputs,
    evenly spaced over the flattened output (every sample and position takes part, not only the
    first), from the float64 eval-mode copy the read itself works on
    (`neuromanifold.singular.read.working_copy`: the caller's model is not run or changed);
    floating inputs in float64. None when that forward fails, returns no floating tensor, or a
    value kept is not finite (the read then says what is wrong, or nothing is compared).

    The parameters and buffers, which the fingerprint hashes, do not determine the model: its
    ``forward`` does too (s33 trial DIST D1: a log of a model whose outputs were doubled, with the
    same weights, was resumed and its records reused, magnitudes 4× off). The header keeps these
    values and `ReadLog.load` compares them within `OUTPUT_RTOL`. The copy costs what the read's
    own copy does (float64 parameters), and is freed before the read starts."""
    from neuromanifold.singular.read import working_copy

    x = data[0] if isinstance(data, (tuple, list)) else data
    if not isinstance(x, Tensor) or x.ndim == 0 or x.shape[0] == 0:
        return None
    x = x[:OUTPUT_SAMPLES]
    x = x.to(torch.float64) if x.is_floating_point() else x
    try:
        work = working_copy(model)
        param = next(work.parameters(), None)
        with torch.no_grad():
            out = work(x if param is None else x.to(param.device))
    except Exception:  # the read itself names a forward that fails
        return None
    if not isinstance(out, Tensor) or not out.is_floating_point() or out.numel() == 0:
        return None
    flat = out.detach().reshape(-1)
    n = min(OUTPUT_VALUES, flat.numel())
    at = torch.linspace(0, flat.numel() - 1, n, dtype=torch.float64).round().long()
    values = flat[at.to(flat.device)].double().cpu()
    if not bool(torch.isfinite(values).all()):
        return None
    return [float(v) for v in values]


def _outputs_differ(old: Any, new: Any) -> str:
    """Why the probe outputs ``old`` (a log's header) and ``new`` (this read's) differ beyond
    `OUTPUT_RTOL`, or "" (also when either is missing: a log written before they were kept)."""
    if not isinstance(old, list) or not isinstance(new, list):
        return ""
    if len(old) != len(new):
        return f"the model gave {len(new)} output values on the first probe samples, not {len(old)}"
    if not old:
        return ""
    a, b = torch.tensor(old, dtype=torch.float64), torch.tensor(new, dtype=torch.float64)
    diff = float((a - b).abs().max())
    scale = float(torch.maximum(a.abs().max(), b.abs().max()))
    if diff <= OUTPUT_RTOL * scale:
        return ""
    return (
        f"the model's outputs on the first probe samples differ (largest difference {diff:.3g}, "
        f"{diff / scale:.3g} of the largest output): its forward changed, not its parameters"
    )


def _differing(old: Any, new: Mapping[str, Any] | None) -> str:
    """The parts (and option names) in which a log's header differs from this read."""
    if not isinstance(old, Mapping) or new is None:
        return "model, data, labels, family or options"
    names = [k for k in ("model", "data", "labels", "family") if old.get(k) != new.get(k)]
    if "labels" in names and (old.get("labels") is None) != (new.get("labels") is None):
        given = ("given", "none") if new.get("labels") is None else ("none", "given")
        names[names.index("labels")] = f"labels ({given[0]} → {given[1]})"
    o, n = old.get("options") or {}, new.get("options") or {}
    opts = sorted(k for k in set(o) | set(n) if o.get(k) != n.get(k))
    if opts:
        names.append("options " + ", ".join(f"{k} ({o.get(k)!r} → {n.get(k)!r})" for k in opts))
    return "; ".join(names) or "model, data, labels, family or options"


def count_logged(path: str | Path, fingerprint: str | None = None) -> int:
    """How many direction lines the log at ``path`` holds: the lines after the first (the
    header) that parse as JSON objects; a torn last line is not counted; 0 when there is no log
    or it cannot be read. With ``fingerprint``, 0 also when the header is not JSON or names
    another fingerprint: what ``--resume`` of that read would take (without the checks of
    `ReadLog.load`). Without, whatever read wrote it: what a read without resume replaces."""
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError):
        return 0
    if fingerprint is not None:
        try:
            header = json.loads(lines[0])
        except ValueError:
            return 0
        if not isinstance(header, dict) or header.get("fingerprint") != fingerprint:
            return 0
    lines = lines[1:]

    def is_record(line: str) -> bool:
        try:
            return isinstance(json.loads(line), dict)
        except ValueError:
            return False

    return sum(is_record(line) for line in lines if line.strip())


class ReadLog:
    """The per-direction JSONL log of one read (module docstring: format and checks)."""

    def __init__(
        self, path: str | Path, fingerprint: str, parts: Mapping[str, Any] | None = None
    ) -> None:
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.torn = False
        """Whether the last `load` dropped a torn last line (its direction is read again)."""
        self.parts = None if parts is None else dict(parts)

    def _header(self) -> dict[str, Any]:
        header = {"kind": LOG_KIND, "version": LOG_VERSION, "fingerprint": self.fingerprint}
        return header if self.parts is None else {**header, "parts": self.parts}

    def start(self) -> None:
        """(Re)create the log with only its header (atomically: an old log is replaced whole)."""
        atomic_write_text(self.path, json.dumps(self._header()) + "\n")

    def load(self) -> dict[int, tuple[DirectionRecord, int]]:
        """Finished directions ``{index: (record, n_passes)}``; ``{}`` when there is no log.

        Raises ValueError when the header is not a read log, its fingerprint differs, or a line
        other than the last is malformed.
        """
        self.torn = False
        if not self.path.is_file():
            return {}
        lines = self.path.read_text(encoding="utf-8").split("\n")
        try:
            header = json.loads(lines[0])
        except json.JSONDecodeError as err:
            raise ValueError(f"{self.path}: line 1 is not a read-log header: {err}") from err
        if not isinstance(header, dict) or header.get("kind") != LOG_KIND:
            raise ValueError(f"{self.path}: line 1 is not a {LOG_KIND!r} header; got {header!r}")
        if header.get("version") != LOG_VERSION:
            raise ValueError(
                f"{self.path} was written by read-log version {header.get('version')!r} and this "
                f"library writes version {LOG_VERSION} (its records may differ); remove it or read "
                "into another directory"
            )
        if header.get("fingerprint") != self.fingerprint:
            raise ValueError(
                f"{self.path} was written by a different read (fingerprint "
                f"{str(header.get('fingerprint'))[:12]}… != {self.fingerprint[:12]}…; differing: "
                f"{_differing(header.get('parts'), self.parts)}); remove it or read into another "
                "directory"
            )
        why = _outputs_differ(
            (header.get("parts") or {}).get("outputs"), (self.parts or {}).get("outputs")
        )
        if why:
            raise ValueError(
                f"{self.path} was written by a different read: {why}; remove it or read into "
                "another directory"
            )
        body = lines[1:]
        while body and body[-1] == "":
            body.pop()
        out: dict[int, tuple[DirectionRecord, int]] = {}
        for n, line in enumerate(body, start=2):
            try:
                entry = json.loads(line)
                rec = DirectionRecord.from_dict(entry["record"])
                out[int(entry["index"])] = (rec, int(entry["n_passes"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                if n == len(body) + 1:  # torn last line: the direction is read again
                    self.torn = True
                    break
                raise ValueError(f"{self.path}: line {n} is malformed: {err}") from err
        return out

    def rewrite(self, finished: Mapping[int, tuple[DirectionRecord, int]]) -> None:
        """Replace the log (atomically) by its header and ``finished`` (drops a torn last line)."""
        lines = [json.dumps(self._header())] + [
            json.dumps({"index": i, "n_passes": n, "record": rec.to_dict()})
            for i, (rec, n) in sorted(finished.items())
        ]
        atomic_write_text(self.path, "\n".join(lines) + "\n")

    def append(self, index: int, record: DirectionRecord, n_passes: int) -> None:
        """Append one finished direction and fsync (the ``on_direction`` hook of `read`)."""
        line = json.dumps({"index": index, "n_passes": n_passes, "record": record.to_dict()})
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def resumable_read(
    model: nn.Module,
    data: Tensor | tuple[Tensor, Tensor],
    family: Any,
    *,
    log_path: str | Path,
    resume: bool = False,
    fingerprint_data: Tensor | tuple[Tensor, Tensor] | None = None,
    on_resume: Callable[[int, bool], None] | None = None,
    on_vector: Callable[[int, dict[str, Tensor]], None] | None = None,
    **options: Any,
) -> Reading:
    """`read` that logs every finished direction to ``log_path``; with ``resume`` it continues.

    ``resume=False`` starts a fresh log (an old one is replaced once the read reaches its first
    direction, so a read its input checks refuse leaves the old log); ``resume=True`` reuses the
    directions of an existing log with the same fingerprint (``ValueError`` for another one) and
    starts a fresh log when there is none. ``options`` are passed to `read` (and fingerprinted,
    less `RUN_ONLY_OPTIONS`; they must be JSON-serialisable, so ``detectors`` and tensor grids
    are not accepted here).
    ``meta["resumed_directions"]`` is not added: the result equals an uninterrupted read.
    ``fingerprint_data`` (default ``data``) is the probe set the fingerprint hashes: rank 0 of a
    data-parallel read reads its shard but logs under the whole probe set, so the single-process
    ``--resume`` of that log is accepted (s16 trial Y #3: it said the data differed). It is an
    ``(x, y)`` pair exactly when ``data`` is one, so the whole set's labels are fingerprinted
    (``ValueError`` otherwise).
    ``on_resume(n, torn)`` (with ``resume`` only) is called once the log is loaded, before any
    direction is read, with the number ``n`` of finished directions taken from it (0 when there
    is no log) and whether a torn last line was dropped (a process killed while writing it; its
    direction is read again): the CLI says it, since the Reading does not (s22 trial LM #9, s23
    trial VER #4). ``on_vector`` is
    passed to `read` (not fingerprinted); it hears every record, those taken from the log with
    ``û`` rebuilt from their candidates (`read`'s ``finished``).
    """
    from neuromanifold.singular.read import read

    for key in ("on_direction", "finished"):
        if key in options:
            raise TypeError(f"resumable_read sets {key!r} itself; do not pass it")
    try:
        json.dumps(options, sort_keys=True)
    except TypeError as err:
        raise TypeError(
            f"read options must be JSON-serialisable to fingerprint them: {err}"
        ) from err
    hashed = data if fingerprint_data is None else fingerprint_data
    if _has_labels(hashed) != _has_labels(data):
        raise ValueError(
            "fingerprint_data must be an (x, y) pair exactly when data is one (the labels are "
            f"fingerprinted); got data with{'' if _has_labels(data) else 'out'} labels and "
            f"fingerprint_data with{'' if _has_labels(hashed) else 'out'}"
        )
    parts = fingerprint_parts(model, hashed, family, options)  # the model is hashed once
    parts["outputs"] = output_probe(model, hashed)
    log = ReadLog(log_path, _digest(parts), parts)
    finished = log.load() if resume else {}
    if resume and on_resume is not None:
        on_resume(len(finished), log.torn)
    opened = False

    def begin() -> None:
        # the log is (re)written only once the read is under way: a read refused by its input
        # checks leaves an existing log as it was
        nonlocal opened
        if not opened:
            log.rewrite(finished) if finished else log.start()
            opened = True

    def append(i: int, rec: Any, passes: int) -> None:
        begin()
        log.append(i, rec, passes)

    reading = read(
        model, data, family, on_direction=append, on_vector=on_vector, finished=finished, **options
    )
    begin()  # also when no direction was left to read
    return reading
