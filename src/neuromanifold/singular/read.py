"""`read`: every dead direction the detectors can name, read at one frozen checkpoint.

Pipeline (spec §7.2):

1. Validate; work on a float64, eval-mode deep copy (the caller's module is never touched; a
   float32 model is up-cast and ``meta["upcast"]`` says so; Hugging Face ``Conv1D`` modules are
   replaced by the equal ``nn.Linear``, listed in ``meta["conv1d_as_linear"]``, and so are
   ``nn.Linear`` subclasses that compute ``x Wᵀ + b`` on every probe sample,
   ``meta["linear_subclass_as_linear"]`` (`neuromanifold.singular.adapt`), and
   ``nn.MultiheadAttention`` modules by the equal attention with separate ``nn.Linear``
   projections ``q_proj``/``k_proj``/``v_proj``/``out_proj`` (the row blocks of
   ``in_proj_weight``; records name them so), ``meta["multihead_as_projections"]``
   (`neuromanifold.singular.adapt_attention`); see `working_copy` for fused attention). Non-finite
   parameters or activations raise ``ValueError`` naming the parameter or module; data that does
   not fit the model raises ``ValueError`` naming the shapes; a random forward (two evaluations
   on the same samples differ, `_check_repeatable`) raises ``ValueError``.
2. One hooked forward on a few samples traces the data-flow graph (`trace_graph`; a norm whose
   output the graph loses at a function it does not follow is named in the ``note`` and in
   ``meta["graph_stops"]``, `_norm_stops`, and so is a block whose output is lost there after a
   ReLU, `_rescale_stops`); one pass over the probe set collects the K-FAC/KFC
   factors (`kfac_factors`); a no-grad pass records the embedding indices seen (only when the
   model has embeddings).
3. Coverage: every module holding parameters must be handled by some detector of the registry;
   the others are listed in ``not_covered`` with a reason (also supported blocks never called,
   blocks too large to factor, `kfac_factors`' size cap, and zero-size blocks, which hold no
   parameters, e.g. an optional branch ``nn.Linear(4, 0)``).
4. Detect: each detector, in registry order, proposes `Candidate` directions for every module it
   applies to. They are read in `_reading_order` (possible dead directions first, by eigenvalue
   ratio; gauges last), which is also the order ``max_directions`` truncates.
   Duplicates (``|⟨u, v⟩| ≥ DEDUP_OVERLAP``) are dropped, keeping the first (closed forms first).
5. Read each candidate with `read_direction`, up to ``max_directions``: a gauge candidate with
   its own generators, a non-gauge candidate with the generators of every curved gauge found
   (collected before ``max_directions`` truncates) that shares a tensor with it. So a straight
   probe lying mostly in a curved-gauge span (overlap ``≥ GAUGE_OVERLAP_MIN``, apparent order 2)
   is classed curved gauge whichever detector proposed it (`neuromanifold.singular.classify`).
   ``live_threshold``, when given, is every candidate's live threshold.
6. Gauge hygiene (spec §6.5(b,c)): for a non-gauge candidate the overlap with the span of the
   curved-gauge generators sharing its tensors is recorded as ``gauge_overlap``. If it read as a
   genuine singularity and that overlap is at least ``PROJECT_MIN_OVERLAP``, it is re-read after
   projection onto the orthogonal complement of the span (the curved component alone mimics order
   2) and the projected read is reported (``info["unprojected"]`` keeps the first). Projection is
   not applied up front: projecting an exactly flat direction off a curved tangent *adds* a curved
   component and manufactures an apparent order 2 (observed on the CE kernel of a ReLU MLP). If
   less than ``MIN_RESIDUAL`` survives the projection, no re-read is made.

References: Shirodkar, arXiv:2607.00603 (the read); arXiv:2606.05957 (K-FAC lift, A–G duality).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Literal

import torch
from torch import Tensor, nn

from neuromanifold.singular._validate import (
    NONFINITE_LABELS,
    check_eval_mode,
    check_parameter_writes,
    first_nonfinite,
    refuse_unless_repeats,
)
from neuromanifold.singular.adapt import conv1d_as_linear, linear_subclasses_as_linear
from neuromanifold.singular.adapt_attention import multihead_as_projections
from neuromanifold.singular.blocks import conv_padding, is_supported_block
from neuromanifold.singular.classify import check_live_threshold
from neuromanifold.singular.coordinate_scan import coordinate_scan
from neuromanifold.singular.critical_check import critical_check, critical_note
from neuromanifold.singular.detectors.attention_layout import unrecognised_attention
from neuromanifold.singular.detectors.base import Candidate, DetectionContext, Detector
from neuromanifold.singular.detectors.embedding import embedding_rows_seen
from neuromanifold.singular.detectors.gapless import gapless_note, gapless_small_ratios
from neuromanifold.singular.detectors.graph import (
    PASS_THROUGH,
    ModelGraph,
    graph_passes_through,
    graph_scales_through,
    is_named_rmsnorm,
    trace_graph,
)
from neuromanifold.singular.detectors.graph_steps import SCALE
from neuromanifold.singular.detectors.qk_norm import query_key_norms
from neuromanifold.singular.detectors.registry import DetectorRegistry, default_registry
from neuromanifold.singular.detectors.rescale import CERTIFY_CACHE_BYTES, CERTIFY_CHUNK
from neuromanifold.singular.detectors.rescale_detectors import ReLURescaleDetector, chain_degree
from neuromanifold.singular.distributed import (
    PER_RANK_META,
    agreed_errors,
    resolve_device,
    world_size,
)
from neuromanifold.singular.factor_inputs import forward_checked
from neuromanifold.singular.factors import MAX_FACTOR_DIM, check_positive_int, kfac_factors
from neuromanifold.singular.family import check_family
from neuromanifold.singular.groups import group_key, is_grouped_conv
from neuromanifold.singular.memory import MemoryPlan, plan_memory
from neuromanifold.singular.passes import check_forward_mode
from neuromanifold.singular.precision import (
    PRECISION_SAMPLES,
    LowerPrecisionRecorder,
    lower_precision_note,
    promote_forward,
    promoted_note,
)
from neuromanifold.singular.probe_rank import g_rows, probe_size_note, rank_limited
from neuromanifold.singular.read_candidate import (
    LOSS_CHECK_LANES,
    MIN_RESIDUAL,
    PROJECT_MIN_OVERLAP,
    read_candidate,
    swept_direction,
)
from neuromanifold.singular.reading import DirectionRecord, NotCovered, Reading
from neuromanifold.singular.sweep import T_BATCH

__all__ = ["DEDUP_OVERLAP", "MIN_RESIDUAL", "PROJECT_MIN_OVERLAP", "check_live_threshold", "read"]

DEDUP_OVERLAP = 0.999
GRAPH_SAMPLES = PRECISION_SAMPLES
"""Probe samples of the graph trace and the early checks, the lower-precision search among them
(as many as `read_direction` looks at for it: `precision.PRECISION_SAMPLES`)."""
FORWARD_MODE_SAMPLES = 2
"""Probe samples of the read's early forward-mode test (`check_forward_mode`)."""


def _inputs(data: Any) -> tuple[Tensor, Tensor | None]:
    """``(x, y)`` of ``data`` (``y`` None without labels), checked: a Tensor with a leading sample
    axis, finite when floating; labels a Tensor with one row per sample, finite when floating
    (a NaN label made the labelled-loss check NaN and silently unflagged; s21 trial AS #7)."""
    x = data[0] if isinstance(data, (tuple, list)) else data
    if not isinstance(x, Tensor):
        raise TypeError(f"data must be a Tensor or an (X, y) tuple; got {type(data).__name__}")
    if x.ndim == 0 or x.shape[0] == 0:
        raise ValueError(f"data must hold at least one sample (N, ...); got {tuple(x.shape)}")
    y = None
    if isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise TypeError(
                f"data must be a Tensor or an (X, y) tuple; got a sequence of length {len(data)}"
            )
        y = data[1]
        if not isinstance(y, Tensor):
            raise TypeError(f"data labels y must be a Tensor; got {type(y).__name__}")
        if y.ndim == 0 or y.shape[0] != x.shape[0]:
            raise ValueError(
                f"data labels y have shape {tuple(y.shape)}; expected a leading dimension "
                f"N = {x.shape[0]} matching the inputs"
            )
    first = first_nonfinite(x)
    if first is not None:
        raise ValueError(_NONFINITE.format(first))
    first = None if y is None else first_nonfinite(y)
    if first is not None:
        raise ValueError(_NONFINITE_LABELS.format(first))
    return x, y


def _check_labels(family: Any, out: Tensor, labels: Tensor, n_all: int) -> None:
    """``family.log_likelihood(out, labels)`` on the early sub-batch (``out`` and ``labels`` of
    its first samples): the family's ``ValueError`` / ``TypeError`` is raised in its own words,
    with the shapes it quotes given for the whole probe set's ``n_all`` samples (s21 trial AS
    #8: "labels y must be … of shape (16,) … got shape (16,)" for 50 samples)."""
    try:
        family.log_likelihood(out, labels)
    except (ValueError, TypeError) as err:
        n_sub = int(labels.shape[0])
        if n_sub == n_all:
            raise
        raise type(err)(_with_leading_size(str(err), n_sub, n_all)) from err


def _check_all_labels(family: Any, out: Tensor, labels: Tensor) -> None:
    """A family's own ``check_labels`` (the categorical range ``[0, C)``) on every label of this
    rank's shard, against the sub-batch's output broadcast to the shard's size (a view: no
    output is computed). `_check_labels` reads only the first samples, and an out-of-range label
    past them was met only when the labelled-loss check ran, after the sweeps (s21 note). With
    an ignore index, labels that are all of it are refused too (s25 audit IGNORE #2)."""
    # the labelled positions of every rank, counted before any rank can raise (a collective)
    mask = getattr(family, "label_mask", lambda y: None)(labels)
    count = None if mask is None else torch.tensor([float(mask.sum())], dtype=torch.float64)
    if count is not None and world_size() > 1:
        torch.distributed.all_reduce(count)
    check = getattr(family, "check_labels", None)
    if check is not None and labels.ndim > 0 and labels.shape[0] > 0:
        check(out[:1].expand(labels.shape[0], *out.shape[1:]), labels)
    if count is not None and float(count[0]) == 0.0:  # every label is the ignore index
        raise ValueError(
            f"every label is the ignore index {family.ignore_index}: the labelled checks would "
            "read nothing (is the pad value right?); pass data without labels to read without them"
        )


def _with_leading_size(message: str, n_sub: int, n_all: int) -> str:
    """``message`` with every shape that leads with ``n_sub`` (``(16,``, ``(16)``, ``[16,``)
    quoted with ``n_all`` instead."""
    return re.sub(rf"(?<=[(\[]){n_sub}(?=[,)\]])", str(n_all), message)


_NONFINITE = "data inputs hold NaN or Inf values (first in sample {})"
_NONFINITE_LABELS = NONFINITE_LABELS


def _first_nonfinite_pair(data: Any) -> tuple[int | None, int | None]:
    """The first non-finite sample of the inputs and of the labels of ``data`` (``None``: none,
    or not checkable: not a Tensor, no sample axis, labels of another length)."""
    x = data[0] if isinstance(data, tuple | list) else data
    if not isinstance(x, Tensor) or x.ndim == 0:
        return None, None
    y = data[1] if isinstance(data, tuple | list) and len(data) == 2 else None
    labelled = isinstance(y, Tensor) and y.ndim > 0 and y.shape[0] == x.shape[0]
    return first_nonfinite(x), first_nonfinite(y) if labelled else None


def _inputs_on_every_rank(data: Any) -> tuple[Tensor, Tensor | None, int]:
    """`_inputs` and the whole probe set's size N, agreed over the ranks of a process group
    before the read's first collective.

    Every rank checks its own shard; the shard sizes, the first non-finite sample of the inputs
    and of the labels, and any other error are all-gathered, so that when one rank's shard is
    bad every rank raises the same error (a rank that went on would wait in the next collective
    for one that stopped). A non-finite sample is named by its index in the whole probe set (the
    shards are contiguous, in rank order: `neuromanifold.singular.distributed.shard_slice`);
    non-finite inputs are named before non-finite labels. Without a process group this is
    `_inputs` and its N.
    """
    if world_size() == 1:
        x, y = _inputs(data)
        return x, y, int(x.shape[0])
    import torch.distributed as dist

    got, err, n_local, first = None, None, 0, (None, None)
    try:
        got = _inputs(data)
    except (TypeError, ValueError) as e:
        x = data[0] if isinstance(data, tuple | list) else data
        if isinstance(x, Tensor) and x.ndim > 0:
            n_local, first = int(x.shape[0]), _first_nonfinite_pair(data)
        err = None if first != (None, None) else (type(e).__name__, str(e))
    else:
        n_local = int(got[0].shape[0])
    states: list[Any] = [None] * world_size()
    dist.all_gather_object(states, (n_local, first, err))
    for which, message in enumerate((_NONFINITE, _NONFINITE_LABELS)):
        offset = 0
        for n_rank, first_rank, _ in states:
            if first_rank[which] is not None:
                raise ValueError(message.format(offset + first_rank[which]))
            offset += n_rank
    for _, _, err_rank in states:
        if err_rank is not None:
            kind = TypeError if err_rank[0] == "TypeError" else ValueError
            raise kind(err_rank[1])
    assert got is not None  # no rank failed
    return got[0], got[1], sum(n_rank for n_rank, _, _ in states)


def _registry(detectors: DetectorRegistry | Iterable[Detector] | None) -> DetectorRegistry:
    if detectors is None:
        return default_registry()
    if isinstance(detectors, DetectorRegistry):
        return detectors
    return DetectorRegistry(detectors)


UNUSED_REASON = (
    "no detector for this type; none of its parameters reached a function of the traced forward "
    "(unused on the probe samples: flat in every entry there)"
)
"""`_not_covered`'s reason for a module of no covered type whose parameters the traced forward
never passed to a function (`ModelGraph.used`; s29 trial SHARED #6: an unused raw parameter
was listed as "no detector for this type" only)."""


def _not_covered(
    model: nn.Module,
    registry: DetectorRegistry,
    called_blocks: set[str],
    skipped: Mapping[str, str],
    used: frozenset[str] | None = None,
) -> list[NotCovered]:
    """The modules holding parameters that no detector reads, or reads only in part, with the
    reason. ``used``: the parameters (first names) the traced forward passed to a function
    (`ModelGraph.used`); ``None``: not known."""
    first = {id(p): n for n, p in model.named_parameters()}
    out = []
    for name, mod in model.named_modules():
        own = sum(p.numel() for p in mod.parameters(recurse=False))
        if own == 0 and name not in skipped:  # a skipped zero-size block is listed all the same
            continue
        label = name or "<root>"
        if not registry.covers(mod):
            reason = "no detector for this type"
            mine = {first[id(p)] for p in mod.parameters(recurse=False)}
            if used is not None and not mine & used:
                reason = UNUSED_REASON
            if type(mod) in (nn.Conv1d, nn.Conv2d) and conv_padding(mod) is None:
                reason = (
                    f"convolution with padding={mod.padding!r}, padding_mode="
                    f"{mod.padding_mode!r}: the read needs the same zero padding on both sides "
                    "(ints, 'valid', or 'same' with an even dilation·(kernel − 1))"
                )
            out.append(NotCovered(label, type(mod).__name__, own, reason))
        elif isinstance(mod, nn.MultiheadAttention):
            # left packed (bias_k/bias_v, add_zero_attn, a tied parameter, or outputs that the
            # unpacked form did not reproduce: `multihead_as_projections`), it applies its
            # projections inside F.multi_head_attention_forward, so no K-FAC factors are collected
            # for them: only the closed-form attention gauges read them. One entry holds every
            # parameter of it.
            reason = (
                "attention projections (packed in_proj, out_proj) are read for gauges only "
                "(QK rotation, VO rescale): they get no K-FAC factors, so dead directions in "
                "them are not detected"
            )
            n_all = sum(p.numel() for p in mod.parameters())
            out.append(NotCovered(label, type(mod).__name__, n_all, reason))
        elif name in skipped:  # too large to factor: the closed-form detectors still read it
            out.append(NotCovered(label, type(mod).__name__, own, skipped[name]))
        elif (is_supported_block(mod) and name not in called_blocks) or (
            is_grouped_conv(mod) and group_key(name, 0) not in called_blocks
        ):
            out.append(
                NotCovered(label, type(mod).__name__, own, "not called as a module on the data")
            )
    return out


@torch.inference_mode(False)
@torch.enable_grad()
def read(
    model: nn.Module,
    data: Tensor | tuple[Tensor, Tensor],
    family: Any,
    *,
    detectors: DetectorRegistry | Iterable[Detector] | None = None,
    grid: Sequence[float] | Tensor | None = None,
    max_directions: int | None = None,
    snap: bool | Literal["auto"] = "auto",
    project_gauges: bool = True,
    per_layer: bool = True,
    baseline: bool = False,
    batch_size: int = 256,
    progress: bool = True,
    on_direction: Callable[[int, DirectionRecord, int], None] | None = None,
    on_vector: Callable[[int, dict[str, Tensor]], None] | None = None,
    finished: Mapping[int, tuple[DirectionRecord, int]] | None = None,
    max_memory: int | str | None = None,
    device: str | torch.device | None = None,
    live_threshold: float | None = None,
    max_factor_dim: int = MAX_FACTOR_DIM,
    promote: bool = True,
) -> Reading:
    """Detect and read every dead direction of ``model`` on the probe set ``data``.

    Args:
        model: any ``nn.Module`` (never modified).
        data: probe inputs ``(N, ...)`` or ``(X, y)``. The Fisher is the true one (labels
            integrated out); labels, when given, are used only to check that θ0 is a minimum of
            the probe loss along each genuine and live direction read
            (`neuromanifold.singular.minimum_check.loss_along`: its slope and curvature in
            ``info["loss_along_u"]``, a clause in the reason and a reading note when the slope is
            beyond 4 standard errors or the curvature below ``−curvature_threshold``).
        family: output family, ``Gaussian(sigma)`` or ``Categorical()``;
            ``Categorical(ignore_index=-100)`` leaves positions labelled −100 out of the checks.
        detectors: a `DetectorRegistry` or detectors (default: `default_registry`).
        grid: t-grid for every sweep (default: `read_direction`'s per-direction policy).
        max_directions: read at most this many candidates, in `_reading_order` (possible dead
            directions by ascending eigenvalue ratio, then gauges). The curved-gauge generators
            of every candidate found are still used for the gauge tests of those read.
        snap: ``True``: read non-gauge candidates from the snapped base point
            ``θ0 − (uᵀθ0)u``; ``False``: from θ0; ``"auto"``: from θ0, and for non-gauge
            candidates again snapped when the unsnapped rate is not visible
            (``DirectionReading.rate_visible``: window below ``10·|uᵀθ0|``), reporting the
            snapped read with ``info["unsnapped"]`` keeping the first — unless the first read
            is a genuine singularity (k ≥ 2) and the snapped one is not: then the offset hid
            nothing, the first read is reported and ``info["snapped_read"]`` keeps the second.
            The first read is kept too when it is genuine in a window starting at
            ``t ≤ |uᵀθ0|/10``, whatever the snapped read says: an offset along ``u`` would show
            slope 0 there, so the offset hid nothing. And it is kept when the snapped read is
            ``unresolved`` (no rate window) and the first is not: the snap showed no rate.
            The re-read is skipped when the offset ``|uᵀθ0|`` is at least the sweep's largest t
            (``ρ_W`` on the default grid): the snap corrects dead weights that are small on the
            scale of the sweep (spec §7.2 step 3), and a snapped point farther from θ0 than
            every point of the sweep is not the checkpoint's neighbourhood;
            ``info["snap_skipped"]`` records it.
            Gauge candidates are never snapped, whatever ``snap`` says: a gauge tangent such as
            the ReLU rescale is a function of θ0, so its offset is intrinsic, and the snapped
            point is another model, off the orbit.
        project_gauges: project non-gauge candidates off curved-gauge spans (module docstring).
        per_layer: for duality chains, also fit each block's own rate
            (`neuromanifold.singular.read_candidate.per_layer_rates`).
        baseline: beside every genuine singularity, run the per-coordinate scan
            (`coordinate_scan`, 2 smallest-|θ| axes per weight) on the blocks it touches and
            store ``{layer: {"best_k", "classes"}}`` in its record's ``baseline``. Under
            ``max_memory`` its sweeps are chunked by the plan, as the read's own.
        batch_size: probe samples per factor-pass batch.
        max_factor_dim: blocks with a K-FAC factor side above it are not factored
            (`kfac_factors`' size cap): no K-FAC candidates there, the block is listed in
            ``not_covered`` with the reason, closed-form detectors still read it.
        progress: show a rich progress bar over directions.
        on_direction: called as ``on_direction(i, record, n_passes)`` after candidate ``i`` (its
            index in `_reading_order`, after ``max_directions``) is read, with the sweep forward
            passes it cost; an exception raised there stops the read (used by resumable reads
            to log each finished direction, `neuromanifold.report.resume`).
        on_vector: called as ``on_vector(i, û)`` before ``on_direction``, with the unit
            direction ``û`` that record ``i``'s sweep went along (after a flip to ``−u`` or a
            projection off a gauge span), a dict ``{parameter name: float64 tensor}`` of the
            read's working copy on the read's device: the names and layouts of the modules it
            rewrote (``meta["conv1d_as_linear"]``: a ``Conv1D`` weight transposed;
            ``meta["multihead_as_projections"]``: ``<attn>.q_proj.weight`` … for row blocks of
            ``in_proj_weight``). The sweep's base point is ``θ0 + s·û``, ``s =
            record.sweep["base_shift"]``, so ``F_u(t)`` of the record can be checked by hand
            (s22 trial LM #2). For a ``finished`` candidate ``û`` is rebuilt from the
            candidate and its record (`swept_direction`), without a sweep.
        finished: ``{i: (record, n_passes)}`` of candidates already read (e.g. from such a log):
            they are not read again, their records are used as they are. A record whose layers or
            detector differ from candidate ``i`` raises ``ValueError`` (the log is from another
            read).
        max_memory: memory budget in bytes (or ``"2GB"``-style string) for the whole read, on
            top of what the process holds when it starts: sample chunks, t-values per ``vmap``
            and factor batches are sized by `plan_memory`, which also counts the detection's
            factors and eigendecompositions, and once the detection has run the sweeps are
            resized to leave room for the candidate directions it found (`MemoryPlan.holding`).
            ``ValueError`` naming the budget and the estimated cost when one sample, or the
            detection, does not fit. Not foreseen: the candidates' own storage while the
            detection runs, and the few fixed-size passes outside the plan
            (`neuromanifold.singular.memory` lists what is and is not counted).
            ``None`` = no chunking (all samples per pass, ``T_BATCH`` t-values per group).
            ``meta["memory_plan"]`` records the plan (as resized for the sweeps).
        device: where the read runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``; validated by
            `resolve_device`); the working copy of the model and the probe data are moved there.
            ``None``: where the model's parameters are.
        live_threshold: the Fisher magnitude a slope-0 read must reach to be classed live
            (below it: flat gauge), for every candidate; e.g. the spec's ``τ_live ≈ 1e−3 ×``
            the median Fisher of known live directions. A positive finite float (``TypeError``
            / ``ValueError`` otherwise); ``None`` (default): each read's own
            ``LIVE_REL·F_scale`` (`neuromanifold.singular.classify`). Recorded in
            ``meta["live_threshold"]``.
        promote: run the steps the model's float64 forward takes below float64 (Hugging Face's
            eager softmax with ``dtype=torch.float32``, a Llama RMSNorm's ``.to(float32)``, the
            rotary tables) in float64 (`neuromanifold.singular.precision.promote_forward`), so
            that the read is of the float64 function, not of one rounded at ~6e-8 in places;
            ``meta["promoted_steps"]`` names them and a reading note says so. ``False``: read
            the mixed-precision program as it is (``meta["lower_precision_steps"]`` and a note
            name the steps, whose rounding floors F near 1e-16 of its scale). A forward with no
            such step is not touched either way.

    Grad modes: the read runs under ``torch.inference_mode(False)`` and ``torch.enable_grad()``
    (its K-FAC factor pass and probe-rank count are backward passes), so it gives the same
    `Reading` when called under ``torch.no_grad()`` or ``torch.inference_mode()``; probe data
    created under inference mode is cloned (the working copy of the model is a copy anyway).

    Data parallelism: under an initialised ``torch.distributed`` process group, pass each rank's
    shard of the probe set (`neuromanifold.singular.distributed.read_sharded`); factor and Fisher
    sums, the sample count and the embedding rows seen are combined over the ranks, so every rank
    returns the same `Reading` and ``meta["n_samples"]`` is the global N. The pass counts are
    this rank's, over its shard: their keys are listed in ``meta["per_rank"]``
    (`neuromanifold.singular.distributed.PER_RANK_META`). ``max_memory`` is a budget per
    process; the ranks agree on one plan (`plan_memory`), recorded in ``meta["memory_plan"]``.

    Returns:
        `Reading` (see `neuromanifold.singular.reading`). ``meta["truncated"]`` lists every
        detector cap that cut candidates (``{"layers", "detector", "cap", "found", "kept"}``, one
        per block and kind): more directions qualified there than were read, so a count of dead
        directions from this reading is a lower bound (raise the cap, e.g.
        ``detectors=[..., LinearDetector(max_chains=…)]``).
    """
    with agreed_errors():  # the arguments, and the input checks agreed over the ranks
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
        family = check_family(family)
        if max_directions is not None and (
            not isinstance(max_directions, int) or max_directions < 0
        ):
            raise ValueError(
                f"max_directions must be a non-negative int or None; got {max_directions!r}"
            )
        if snap not in (True, False, "auto"):
            raise ValueError(f"snap must be True, False or 'auto'; got {snap!r}")
        batch_size = check_positive_int("batch_size", batch_size)
        live_threshold = check_live_threshold(live_threshold)
        if not isinstance(promote, bool):
            raise TypeError(f"promote must be True or False; got {promote!r}")
        x, y, n_all = _inputs_on_every_rank(data)
    # the device can differ between nodes, and between ranks without LOCAL_WORLD_SIZE
    dev = resolve_device(device) if device is not None else None
    with agreed_errors():  # the detectors, modes and parameters: the same on every rank
        registry = _registry(detectors)
        upcast = any(p.is_floating_point() and p.dtype != torch.float64 for p in model.parameters())
        check_eval_mode(model)  # the caller's modes: the working copy below is set to eval mode
        check_parameter_writes(model)  # a forward writing into its weights (max_norm)
        work = working_copy(model)
        rewritten = conv1d_as_linear(work)
        if dev is not None:
            work = work.to(dev)
        for name, p in work.named_parameters():
            if not torch.isfinite(p).all():
                raise ValueError(f"parameter {name!r} holds NaN or Inf values")
    xw = x.to(torch.float64) if x.is_floating_point() else x
    if xw.is_inference():  # made under inference mode: autograd cannot save it for a backward
        xw = xw.clone()
    if dev is not None:
        xw = xw.to(dev)
    labels = None if y is None else y.to(xw.device)
    with torch.no_grad():
        out = forward_checked(
            work, xw[:GRAPH_SAMPLES], data_shape=tuple(x.shape), data_dtype=x.dtype
        )
    with agreed_errors():  # the output's type: the same on every rank
        if not isinstance(out, Tensor):
            raise TypeError(
                f"model output must be a Tensor (N, ...); got {type(out).__name__}: wrap the "
                f"model so that it returns the logits or means (neuromanifold.io.TensorOutput "
                f"picks the 'logits' of a Hugging Face output)"
            )
    # the output's shape is this rank's own: it can depend on the shard's size (a model ending in
    # ``squeeze()`` fails on a one-sample shard only), so every rank that fails reports it
    n_graph = min(GRAPH_SAMPLES, xw.shape[0])
    if out.ndim == 0 or out.shape[0] != n_graph:
        raise ValueError(
            f"the model returned shape {tuple(out.shape)} for {n_graph} samples of data of "
            f"shape {tuple(xw[:n_graph].shape)}: the first axis of the data and of the output "
            f"must be the sample axis, one row per sample"
        )
    try:
        family.check_output(out)
    except ValueError as err:  # its shape is the batch's (s33 trial USER D4)
        if n_graph == xw.shape[0]:
            raise
        raise ValueError(
            f"{err} (the read ran the model on a batch of {n_graph} of the {xw.shape[0]} samples)"
        ) from None
    if labels is not None:  # read by the labelled-loss check of the records: refused up front
        with agreed_errors():
            _check_labels(family, out, labels[:n_graph], n_all)
            _check_all_labels(family, out, labels)
    lower = _check_repeatable(work, xw[:GRAPH_SAMPLES], out, data_shape=tuple(x.shape))
    promoted: dict[str, str] = {}
    if promote and lower and promote_forward(work):  # the same checks on the promoted forward
        promoted = lower
        with torch.no_grad():
            out = forward_checked(
                work, xw[:GRAPH_SAMPLES], data_shape=tuple(x.shape), data_dtype=x.dtype
            )
        lower = _check_repeatable(work, xw[:GRAPH_SAMPLES], out, data_shape=tuple(x.shape))
    unpacked, mha_passes = multihead_as_projections(work, xw)
    linear_subclasses, adapt_passes = linear_subclasses_as_linear(work, xw)
    adapt_passes += mha_passes
    if max_directions != 0 or max_memory is not None:  # sweeps and memory planning use jvp
        check_forward_mode(work, xw[:FORWARD_MODE_SAMPLES], data_shape=tuple(x.shape))
    graph = trace_graph(work, xw[:GRAPH_SAMPLES])
    plan: MemoryPlan | None = None
    if max_memory is not None:
        with agreed_errors():  # the plan is agreed over the ranks (all_reduce_max)
            plan = plan_memory(
                work,
                xw,
                family,
                max_memory=max_memory,
                factor_batch=batch_size,
                max_factor_dim=max_factor_dim,
                held=_own_bytes(xw, x),
            )
            batch_size = plan.factor_batch
            if baseline:  # the scan's copy of the parameters is known now: refuse before the read
                plan.holding(_scan_bytes(work), what="the coordinate scan's copy of the parameters")
            if labels is not None:  # the labelled checks' lanes: refuse before the read
                plan.holding(_critical_bytes(work), what=_CRITICAL_HELD).require_lanes(
                    LOSS_CHECK_LANES, _LOSS_CHECKS
                )
    factors = kfac_factors(work, xw, family, batch_size=batch_size, max_factor_dim=max_factor_dim)
    # one forward + backward over the samples in chunks of the factor batch (the plan's under a
    # budget): which G factors have fewer contributing rows than their side
    probe_limited = rank_limited(factors, g_rows(work, xw, family, factors, batch=batch_size))
    probe_passes = -(-int(xw.shape[0]) // batch_size)
    seen, emb_passes = embedding_rows_seen(work, xw, batch_size)
    params = {k: v.detach().clone() for k, v in work.named_parameters()}
    ctx = DetectionContext(
        model=work,
        params=params,
        factors=factors,
        graph=graph,
        family=family,
        data=xw,
        # under a budget the certifications' forwards run in factor batches (a no-grad forward
        # costs less than a factor pass over as many samples) and keep what the share leaves
        forward_chunk=None if plan is None else min(CERTIFY_CHUNK, plan.factor_batch),
        cache_bytes=None if plan is None else min(CERTIFY_CACHE_BYTES, plan.detection_room()),
    )
    ctx.cache["embedding_seen"] = seen
    not_covered = _not_covered(work, registry, set(factors.blocks), factors.skipped, graph.used)
    n_supported = sum(1 for _, m in work.named_modules() if registry.covers(m))

    candidates: list[Candidate] = []
    truncated: dict[tuple, dict[str, Any]] = {}
    modules = list(work.named_modules())
    for det in registry:  # registry order first: closed forms win the deduplication
        for name, mod in modules:
            if not det.applies_to(mod):
                continue
            for cand in det.propose(name, mod, ctx):
                _note_truncation(truncated, cand)
                if all(cand.overlap(c) < DEDUP_OVERLAP for c in candidates):
                    candidates.append(cand)
    n_found = len(candidates)
    # what the meta needs of the detection; the factors and the spectra the detectors cached
    # are then released, so the sweeps do not hold them (GPT-2 small: a few GB)
    factor_counts = {
        "n_samples": int(factors.n_samples),
        "n_forward": factors.n_forward_passes,
        "n_backward": factors.n_backward_passes,
        "fisher": factors.fisher,
    }
    n_certify = ctx.cache.get("certify_passes", 0)
    gapless = gapless_small_ratios(ctx.cache.get("spectrum", {}))
    del ctx, factors
    candidates = _reading_order(candidates)
    # the generators of every curved gauge found, collected before ``max_directions`` truncates:
    # gauges are read last, and a truncated read must still test its candidates against them
    gauges = [g for c in candidates if c.gauge == "curved" for g in (c.gauge_generators or ())]
    if max_directions is not None:
        candidates = candidates[:max_directions]
    if plan is not None:  # the candidates stay alive through the sweeps: resize them
        with agreed_errors():  # candidates come from all-reduced factors: the same on every rank
            plan = plan.holding(
                _candidate_bytes(candidates, gauges),
                what=f"the {len(candidates)} candidate directions to read and the curved-gauge "
                f"generators",
            )
            if baseline:  # and beside them, the scan's copy: refuse before the sweeps
                plan.holding(_scan_bytes(work), what="the coordinate scan's copy of the parameters")
            if labels is not None:  # and the whole-gradient check's tensors, and its lanes
                # (the per-direction checks run as many lanes beside less: they fit then too)
                plan.holding(_critical_bytes(work), what=_CRITICAL_HELD).require_lanes(
                    LOSS_CHECK_LANES, _LOSS_CHECKS
                )
    chunk = None if plan is None else plan.chunk_size
    t_batch = T_BATCH if plan is None else plan.t_batch

    records: list[DirectionRecord] = []
    n_sweep_passes = 0
    bar = _progress(progress, len(candidates))
    try:
        for i, cand in enumerate(candidates):
            if finished is not None and i in finished:
                rec, passes = finished[i]
                if rec.layers != tuple(cand.layers) or rec.detector != cand.detector:
                    raise ValueError(
                        f"finished[{i}] is a {rec.detector!r} record on {list(rec.layers)} but "
                        f"candidate {i} is {cand.detector!r} on {list(cand.layers)}: the resume "
                        "log belongs to a different read"
                    )
                records.append(rec)
                n_sweep_passes += int(passes)
                if on_vector is not None:  # not swept again: rebuilt from the candidate
                    on_vector(i, swept_direction(cand, rec, gauges, params))
                if bar is not None:
                    bar[0].advance(bar[1])
                continue
            xd = (xw, labels) if labels is not None else xw
            rec, passes = read_candidate(
                cand,
                work,
                params,
                xd,
                family,
                grid=grid,
                snap=snap,
                gauges=gauges,
                project_gauges=project_gauges,
                per_layer=per_layer,
                chunk=chunk,
                t_batch=t_batch,
                plan=plan,
                live_threshold=live_threshold,
                on_vector=None if on_vector is None else partial(on_vector, i),
            )
            n_sweep_passes += passes
            records.append(rec)
            if on_direction is not None:
                on_direction(i, rec, passes)
            if bar is not None:
                bar[0].advance(bar[1])
    finally:
        if bar is not None:
            bar[0].stop()

    n_baseline = 0
    if baseline:
        scan_plan = plan
        if plan is not None:  # the scan reads on its own float64 copy of the model
            scan_plan = plan.holding(
                _scan_bytes(work), what="the coordinate scan's copy of the parameters"
            )
        records, n_baseline = _attach_baseline(records, work, xw, family, grid, scan_plan)
    critical, critical_passes = None, (0, 0)
    if labels is not None:
        critical, critical_passes = _whole_gradient_check(
            work, params, (xw, labels), family, batch_size, plan
        )
    note = ""
    if n_supported == 0:
        note = "no supported layers: no detector applies to any module of this model"
    elif n_found == 0:
        note = "no candidate directions were detected"
    elif not candidates:
        note = (
            f"{n_found} candidate direction(s) were detected and none was read "
            f"(max_directions={max_directions})"
        )
    elif len(candidates) < n_found:
        note = (
            f"{len(candidates)} of {n_found} candidate directions read "
            f"(max_directions={max_directions}); {n_found - len(candidates)} left unread"
        )
    grouped = [n for n, m in work.named_modules() if is_grouped_conv(m)]
    if grouped:
        names = ", ".join(grouped[:3]) + (", …" if len(grouped) > 3 else "")
        grouped_note = (
            f"grouped convolutions ({names}) are read per group: a dead unit feeding one, or fed "
            "by one, shows as one-sided records on each side, not as one duality chain"
        )
        note = f"{note}; {grouped_note}" if note else grouped_note
    for extra in (
        _crossing_chains_note(records),
        _shared_output_note(records, graph),
        _not_minimum_note(records),
        critical_note(critical),
    ):
        if extra:
            note = f"{note}; {extra}" if note else extra
    size_note = probe_size_note(probe_limited)
    if size_note:
        note = f"{note}; {size_note}" if note else size_note
    graph_stops = _norm_stops(work, graph)
    rescale_stops = _rescale_stops(work, graph)
    unrecognised = {
        n or "<root>": why for n, m in work.named_modules() if (why := unrecognised_attention(m))
    }
    for extra in (
        _norm_stops_note(work, graph_stops, records),
        _rescale_stops_note(rescale_stops),
        _outside_note(graph),
        _unrecognised_attention_note(unrecognised),
    ):
        if extra:
            note = f"{note}; {extra}" if note else extra
    gap_note = gapless_note(gapless)
    if gap_note:
        note = f"{note}; {gap_note}" if note else gap_note
    for low_note in (
        promoted_note(promoted),
        lower_precision_note(lower),
        _frozen_note(model),
        _zero_norm_channels_note(work),
        _zero_layers_note(work),
        _caps_note(list(truncated.values())),
    ):
        if low_note:
            note = f"{note}; {low_note}" if note else low_note
    meta = {
        "model": _model_name(model),
        "n_params": sum(p.numel() for p in model.parameters()),
        "n_covered_modules": n_supported,
        "module_order": [n for n, m in work.named_modules() if _has_own_params(m)],
        "module_types": dict(
            Counter(
                type(m).__name__
                for m in model.modules()
                if any(True for _ in m.parameters(recurse=False))
            )
        ),
        "family": family.to_dict(),
        "n_samples": factor_counts["n_samples"],
        "dtype": str(next(model.parameters()).dtype)
        if any(True for _ in model.parameters())
        else "",
        "upcast": bool(upcast),
        "upcast_note": _upcast_note(model),
        "n_frozen_params": sum(p.numel() for p in model.parameters() if not p.requires_grad),
        "lower_precision_steps": lower,
        "promoted_steps": promoted,
        "n_candidates": n_found,
        "n_read": len(records),
        "n_forward_passes": 2
        + probe_passes
        + factor_counts["n_forward"]
        + emb_passes
        + adapt_passes
        + n_sweep_passes
        + n_certify
        + critical_passes[0],
        "n_certify_passes": n_certify,
        "n_backward_passes": factor_counts["n_backward"] + probe_passes + critical_passes[1],
        "probe_rank_limited": probe_limited,
        "factor_fisher": factor_counts["fisher"],
        "snap": snap if snap == "auto" else bool(snap),
        "n_baseline_reads": n_baseline,
        "dedup_overlap": DEDUP_OVERLAP,
        "device": str(xw.device),
        "world_size": world_size(),
        "memory_plan": None if plan is None else plan.to_dict(),
        **({"per_rank": list(PER_RANK_META)} if world_size() > 1 else {}),
        "live_threshold": live_threshold,
        "truncated": list(truncated.values()),
        "conv1d_as_linear": rewritten,
        "linear_subclass_as_linear": linear_subclasses,
        "multihead_as_projections": unpacked,
        "graph_stops": {**graph_stops, **{k: v for k, (_, v) in rescale_stops.items()}},
        "outside_uses": {k: list(v) for k, v in graph.outside.items()},
        "unrecognised_attention": unrecognised,
        "gapless_small_ratios": gapless,
        "critical_check": critical,
    }
    return Reading(directions=tuple(records), not_covered=tuple(not_covered), meta=meta, note=note)


def _check_repeatable(
    model: nn.Module, x: Tensor, first: Tensor, *, data_shape: tuple[int, ...]
) -> dict[str, str]:
    """Raise a ``ValueError`` unless ``model(x)`` evaluated again equals ``first`` (its output on
    ``x``) to `REPEAT_RTOL` relative (`_validate.refuse_unless_repeats`); return the steps of
    that forward that computed below float64 (`precision.lower_precision_steps`).

    The read takes the model as a fixed function of θ (its Fisher, factors and sweeps are
    derivatives of that function); a forward that draws random numbers even in eval mode
    (dropout hard-wired on, ``F.dropout(..., training=True)``; noise added in ``forward``) would be
    read as structure from noise. One extra forward on the first ``GRAPH_SAMPLES`` samples, a
    fixed check like `check_forward_mode`'s and, like it, not counted in
    ``meta["n_forward_passes"]``. A non-finite ``first`` is left to the factor pass, which names
    it.
    """
    if not bool(torch.isfinite(first).all()):
        return {}
    with torch.no_grad(), (rec := LowerPrecisionRecorder()):
        again = forward_checked(model, x, data_shape=data_shape)
    refuse_unless_repeats(first, again, x.shape[0])
    return rec.steps


def _frozen_note(model: nn.Module) -> str:
    """The clause for parameters with ``requires_grad=False`` (``""`` when none): they are part of
    θ and read like the others (s29 trial SHARED #4: a frozen first layer carried 52 % of a
    genuine record's direction, which the reading did not point out)."""
    frozen = [(n, p.numel()) for n, p in model.named_parameters() if not p.requires_grad]
    if not frozen:
        return ""
    names = ", ".join(f"'{n}'" for n, _ in frozen[:3]) + (", …" if len(frozen) > 3 else "")
    total = sum(p.numel() for p in model.parameters())
    return (
        f"{sum(k for _, k in frozen)} of {total} parameter entries ({names}) have "
        f"requires_grad=False: they are part of θ and read like the others (register them as "
        f"buffers to read the trainable parameters alone)"
    )


_NORMS = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.RMSNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
)


def _zero_norm_channels_note(model: nn.Module) -> str:
    """The clause for normalisation channels whose scale is 0 and whose shift is 0 or absent
    (``""`` when none): such a channel outputs 0 on every input, a dead unit. Where the
    consumer's weights on it are 0 too, (its scale, those weights) is an order-2 node death that
    no detector proposes (s34 trial CONV D2: a BatchNorm channel with γ = β = 0 and a zero
    consumer column, k = 2 on both sides by hand, only flat records in the reading). Norms are
    torch's and any module whose class name ends in ``Norm`` with a 1-D ``weight`` (Hugging
    Face's ``LlamaRMSNorm``, ``T5LayerNorm``)."""
    dead = []
    for name, mod in model.named_modules():
        weight, bias = getattr(mod, "weight", None), getattr(mod, "bias", None)
        is_norm = isinstance(mod, _NORMS) or type(mod).__name__.endswith("Norm")
        if not is_norm or not isinstance(weight, Tensor) or weight.ndim != 1:
            continue  # no affine scale, or one over several axes (its entries are no channels)
        zero = weight == 0
        if isinstance(bias, Tensor) and bias.shape == weight.shape:
            zero = zero & (bias == 0)
        idx = zero.nonzero().flatten().tolist()
        if idx:
            shown = ", ".join(map(str, idx[:4])) + (", …" if len(idx) > 4 else "")
            dead.append(f"'{name}' channel(s) {shown}")
    if not dead:
        return ""
    return (
        f"normalisation channels with scale 0 and shift 0 or none ({'; '.join(dead[:3])}"
        f"{'; …' if len(dead) > 3 else ''}) output 0 on every input: each is a dead unit, and "
        "where the consumer's weights on it are 0 too, (its scale, those weights) is an order-2 "
        "node death that this read does not propose (read it with read_direction)"
    )


def _model_name(model: nn.Module) -> str:
    """The class name of ``model``, or of the model a wrapper holds as ``.model``: "BertModel
    (in TensorOutput)" for a Hugging Face directory, whose reports named the wrapper alone (s34
    trial REPORT D2)."""
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module) and type(model).__name__ == "TensorOutput":
        return f"{type(inner).__name__} (in TensorOutput)"
    return type(model).__name__


def _zero_layers_note(model: nn.Module) -> str:
    """The clause for Linear and convolution layers whose weights are all exactly 0 (``""``
    when none): nothing passes through such a layer at θ0, so every direction of what reaches
    the output only through it reads flat there (s34 trial CONV O4: a zero-initialised head, all
    11 records flat, and nothing said why)."""
    kinds = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
    zero = [
        name or "<root>"
        for name, mod in model.named_modules()
        if isinstance(mod, kinds) and mod.weight.numel() and not bool(mod.weight.any())
    ]
    if not zero:
        return ""
    shown = ", ".join(f"'{n}'" for n in zero[:3]) + (", …" if len(zero) > 3 else "")
    return (
        f"layers with every weight 0 ({shown}) pass nothing on at θ0: the directions of what "
        "reaches the output only through them read flat there (a zero-initialised layer)"
    )


def _caps_note(truncated: Sequence[dict[str, Any]]) -> str:
    """The clause for candidates that detector caps cut before the read (``""`` when none): the
    command line prints each cap, a Python caller saw them in ``meta["truncated"]`` only (s34
    trial CONV O5: a fifth dead channel went unread without a word in ``Reading.note``)."""
    cuts = [c for c in truncated if c.get("of") != "generators"]
    if not cuts:
        return ""
    by_detector = Counter()
    for c in cuts:  # which kinds were cut: dead-unit chains weigh more than input-kernel modes
        by_detector[c["detector"]] += int(c["found"]) - int(c["kept"])
    kinds = ", ".join(f"{d} {n}" for d, n in sorted(by_detector.items()))
    return (
        f"detector caps left {by_detector.total()} found direction(s) unread ({kinds}) on "
        f"{len(cuts)} "
        f"(detector, layer) pair(s) (meta['truncated'] names them)"
    )


def _upcast_note(model: nn.Module) -> str:
    """Which floating dtypes were up-cast to float64 (empty for a float64 model; user trial I #5:
    a bfloat16 model was said to hold float32 parameters)."""
    dtypes = {
        str(p.dtype).removeprefix("torch.")
        for p in model.parameters()
        if p.is_floating_point() and p.dtype != torch.float64
    }
    if not dtypes:
        return ""
    return f"{'/'.join(sorted(dtypes))} parameters were up-cast to float64 for the read"


def _has_own_params(module: nn.Module) -> bool:
    """Whether ``module`` holds parameters itself (not only through its children)."""
    return any(True for _ in module.parameters(recurse=False))


def _crossing_chains_note(records: Sequence[DirectionRecord]) -> str:
    """A clause naming the duality chains that pass through layers with live units, or "".

    Such a chain (``info["through_live"]``, `LinearDetector`) joins dead units that are, each
    with the live layer's other units, dead directions of their own of lower order (a node
    death: order 2); the chain's direction is their crossing. The read reports the chain's order
    and proposes no two-layer pieces, and the assembly counts the chain as one locus. (A unit held
    on a flat part of its activation on every probe — a ReLU that never fires, a saturated unit —
    is silent, not dead, and is not linked, `neuromanifold.singular.detectors.silent`; before,
    chains through such units read flat and hid the node deaths joined to them, s26 trial CNN #5
    and s34 trial MLPREC D1. The exception that module names, a zero row with a bias on a flat
    part, still chains.)
    """
    named = Counter(
        f"{'+'.join(r.layers)} (through {', '.join(r.info['through_live'])})"
        for r in records
        if r.info.get("through_live")
    )  # parallel chains over the same layers are named once, with their count (s33 USER D1)
    chains = [c if n == 1 else f"{c} ×{n}" for c, n in named.items()]
    if not chains:
        return ""
    return (
        f"the duality chain(s) {'; '.join(chains)} pass through layers with live units: each "
        "dead unit on such a chain can be a lower-order dead direction on its own (a node death, "
        "order 2, with that layer's live units), which this read does not propose; the chain's "
        "order is that of their crossing (read the pieces with read_direction)"
    )


def _not_minimum_note(records: Sequence[DirectionRecord]) -> str:
    """Clauses naming the records along which θ0 is not a minimum of the labelled probe loss
    (``info["loss_along_u"]``, `neuromanifold.singular.minimum_check.loss_along`) and those where
    the check could not run (its ``"error"``), or ""."""
    checked = [
        (i, r.info["loss_along_u"])
        for i, r in enumerate(records)
        if isinstance(r.info.get("loss_along_u"), Mapping)
    ]
    flagged = [i for i, c in checked if c.get("not_critical") or c.get("curved_down")]
    failed = [(i, c["error"]) for i, c in checked if "error" in c]
    clauses = []
    if flagged:
        clauses.append(
            f"θ0 is not a minimum of the labelled probe loss along {len(flagged)} of the "
            f"{len(checked)} checked direction(s) (#{', #'.join(map(str, flagged))}: a slope or "
            "a downward curvature beyond its threshold, info['loss_along_u']): the orders "
            "describe the parametrization at θ0, and (λ, m) assembled from them are Watanabe's "
            "only at a true parameter"
        )
    if failed:
        clauses.append(
            f"the labelled-loss check could not run along {len(failed)} direction(s) "
            f"(#{', #'.join(str(i) for i, _ in failed)}; first: {failed[0][1]}): whether θ0 is "
            "a minimum along them is unknown"
        )
    return "; ".join(clauses)


def _shared_output_note(records: Sequence[DirectionRecord], graph: ModelGraph) -> str:
    """A clause naming the blocks whose ``kfac-G`` modes were read one-sided because their output
    goes to several blocks, which the duality join does not follow (docs/order_read.md §5), or
    ""."""
    shared = sorted(
        {
            r.layers[0]
            for r in records
            if r.detector == "kfac-G" and len(graph.consumers.get(r.layers[0], ())) >= 2
        }
    )
    if not shared:
        return ""
    where = "; ".join(f"{b} → {', '.join(graph.consumers[b])}" for b in shared)
    return (
        f"the output of {where} goes to several blocks, which the duality join does not follow: "
        "a dead unit there shows as one-sided records on each side, not as one duality chain"
    )


def _norm_stops(model: nn.Module, graph: ModelGraph) -> dict[str, list[str]]:
    """Norms (``nn.LayerNorm``, ``nn.RMSNorm``, `is_named_rmsnorm`) whose output reaches no graph
    consumer and is not the model output, and went through functions the graph does not follow
    (``graph.stops``): norm → those functions' names. Their norm-scale (and, for a LayerNorm,
    LayerNorm-kernel) gauges need a graph consumer, so none was proposed. A LayerNorm with a
    consumer reached through constant factors alone (``"Scale"`` steps, `graph_scales_through`)
    maps to ``["Scale"]``: its kernel identity does not survive a factor that may differ by
    position, so that gauge was not proposed from the graph. The
    query and key norms of a recognised attention are left out (`query_key_norms`: they have no
    such gauges; the query/key-norm rescale is theirs)."""
    out: dict[str, list[str]] = {}
    qk = query_key_norms(model)
    for name, mod in model.named_modules():
        if name in qk:
            continue
        is_norm = isinstance(mod, nn.LayerNorm | nn.RMSNorm) or is_named_rmsnorm(mod)
        stopped = graph.stops.get(name, ())
        if is_norm and stopped and not graph.consumers.get(name) and graph.output != name:
            out[name] = list(stopped)
        elif isinstance(mod, nn.LayerNorm) and any(
            graph_scales_through(graph, name, c) and not graph_passes_through(graph, name, c)
            for c in graph.consumers.get(name, ())
        ):  # a consumer the kernel would reach but for a constant factor (s30 trial SCALE F2)
            out[name] = [SCALE]
    return out


def _norm_stops_note(
    model: nn.Module,
    stops: Mapping[str, Sequence[str]],
    records: Sequence[DirectionRecord] = (),
) -> str:
    """One clause per norm of `_norm_stops`, naming the functions and the gauges not proposed.

    A LayerNorm whose kernel gauge a record of ``records`` holds anyway (an ``ln-kernel`` record
    naming it in ``info["norm"]``; for a norm without a graph consumer only the factor test,
    ``info["via"] == "factor-test"``, proposes one) is said to have it (s33 trial USER D2: the
    clause said the gauge was not proposed beside the record that read it)."""
    found = {r.info.get("norm") for r in records if r.detector == "ln-kernel"}
    clauses = []
    for name, funcs in stops.items():
        kernel = (
            " (the factor test found its LayerNorm-kernel gauge: an ln-kernel record)"
            if name in found
            else ""
        )
        if list(funcs) == [SCALE]:
            clauses.append(
                f"the output of '{name}' reaches the next layer through a constant factor "
                "(Scale), which the LayerNorm-kernel gauge is not carried across: that gauge was "
                f"not proposed from the graph{kernel}"
            )
            continue
        if isinstance(model.get_submodule(name), nn.LayerNorm) and not kernel:
            gauges = "norm-scale and LayerNorm-kernel gauges were"
        else:
            gauges = "norm-scale gauge was"
        clauses.append(
            f"the output of '{name}' reaches the next layer through {', '.join(funcs)}, which the "
            f"graph does not follow: its {gauges} not proposed{kernel}"
        )
    return "; ".join(clauses)


def _rescale_stops(model: nn.Module, graph: ModelGraph) -> dict[str, tuple[str, list[str]]]:
    """Blocks the ReLU-rescale detector applies to whose output passed a positively homogeneous
    activation (`chain_degree` of the steps) and then reached a function the graph does not
    follow (``graph.cuts``), with no graph consumer: block → (the steps, those functions' names).
    Their per-unit rescaling needs a consumer, so none was proposed (s29 trial SHARED #7: a
    chain cut this way was silent). Cuts before any activation are not reported (attention
    projections are always reshaped into heads)."""
    rescale = ReLURescaleDetector()
    out: dict[str, tuple[str, list[str]]] = {}
    for name, cuts in graph.cuts.items():
        if graph.consumers.get(name) or not rescale.applies_to(model.get_submodule(name)):
            continue
        for func, via in cuts:
            steps = [v for v in via if v not in PASS_THROUGH]
            if chain_degree(steps) is None:
                continue
            seen = out.setdefault(name, (" → ".join(steps), []))
            if func not in seen[1]:
                seen[1].append(func)
    return out


def _rescale_stops_note(stops: Mapping[str, tuple[str, Sequence[str]]]) -> str:
    """One clause per block of `_rescale_stops`, naming the steps, the functions and the gauge
    not proposed."""
    return "; ".join(
        f"the output of '{name}' passes {steps} and then {', '.join(funcs)}, which the graph does "
        f"not follow: its relu-rescale gauges were not proposed"
        for name, (steps, funcs) in stops.items()
    )


def _outside_note(graph: ModelGraph) -> str:
    """One clause naming the parameters of layers that the forward also uses outside their
    module's calls (`ModelGraph.outside`, ``meta["outside_uses"]``): a tied decoder
    ``F.linear(h, self.enc.weight.t())`` (s29 trial SHARED #1: the K-FAC duality of a dead
    hidden unit of a tied autoencoder was not proposed, and nothing said why)."""
    if not graph.outside:
        return ""
    names = list(graph.outside)
    shown = ", ".join(f"'{n}' ({', '.join(graph.outside[n])})" for n in names[:3])
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return (
        f"{shown}{more} {'is' if len(names) == 1 else 'are'} also used outside calls of "
        f"{'its module' if len(names) == 1 else 'their modules'}: the K-FAC factors and the "
        f"data-flow graph see only the module calls, so dead directions and gauges through the "
        f"other use are not proposed (every direction read is swept through both uses)"
    )


def _unrecognised_attention_note(found: dict[str, str]) -> str:
    """One clause naming modules that look like attention but whose layout the read does not know
    (`attention_layout.unrecognised_attention`, ``meta["unrecognised_attention"]``: name → reason;
    s32 trial ATTN #1: a nanoGPT attention's ``n_head``, or a head count kept as ``self.H``, lost
    every attention gauge without a word), with advice for each reason. Their projections are
    still read as Linears."""
    if not found:
        return ""
    clauses = []
    for why, advice in (
        (
            "no head count",
            "if they are attention, give each an int num_heads (and num_key_value_heads, "
            "head_dim where they differ)",
        ),
        (
            "layout not supported",
            "they have a head count, but their projections' widths or their fused layout (with "
            "grouped-query attention) are not one the read knows (attention_layout)",
        ),
    ):
        names = [n for n, w in found.items() if w == why]
        if names:
            shown = ", ".join(f"'{n}'" for n in names[:3])
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            clauses.append(f"{shown}{more} ({why}: {advice})")
    return (
        "modules that look like attention (query, key and value Linears) have no recognised "
        "layout, so the attention gauges (QK, VO, key and value bias) are not proposed there: "
        + "; ".join(clauses)
    )


def _own_bytes(copy: Tensor, original: Tensor) -> int:
    """Bytes of ``copy`` when it does not share storage with ``original`` (else 0)."""
    if copy.untyped_storage().data_ptr() == original.untyped_storage().data_ptr():
        return 0
    return copy.numel() * copy.element_size()


def _candidate_bytes(candidates: list[Candidate], gauges: list[dict[str, Tensor]]) -> int:
    """Bytes of the distinct tensor storages the candidates and gauge generators hold."""
    seen: dict[int, int] = {}
    tensors = [t for c in candidates for t in c.u.values()]
    tensors += [t for c in candidates for g in c.gauge_generators or () for t in g.values()]
    tensors += [t for g in gauges for t in g.values()]
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _note_truncation(truncated: dict[tuple, dict[str, Any]], cand: Candidate) -> None:
    """Record a detector cap that cut candidates (``cand.info["truncated"]``) once per
    ``(layers, detector)``, as proposed: kept in ``meta["truncated"]`` even when deduplication or
    ``max_directions`` later drops every candidate that carried it."""
    cut = cand.info.get("truncated") if cand.info else None
    if cut:
        key = (tuple(cand.layers), cand.detector)
        truncated.setdefault(key, {"layers": list(cand.layers), "detector": cand.detector, **cut})


_FUSED = (nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)


_TIE_FIRST = ("duality",)
#: candidate ratios (α/α_max, γ/γ_max or their product) at or below this are round-off of zero
#: in the reading order: 64 ε, above the ~1e-16 of a float64 null eigenvalue and below any ratio
#: a factor resolves
ROUNDOFF_ORDER_RATIO = 64 * float(torch.finfo(torch.float64).eps)


def _reading_order(candidates: list[Candidate]) -> list[Candidate]:
    """Candidates that may be dead directions first (smallest eigenvalue ratio first; closed-form
    non-gauge candidates after them), then the closed-form gauges in registry order. Stable.

    Ratios at or below ``ROUNDOFF_ORDER_RATIO`` are round-off of zero and count as equal: their
    order came from the summation order of the factors (a ratio of 1.5e-36 against 1.7e-35 swapped
    with the factor batch size, which ``max_memory`` sets, and a resumed read then refused its own
    log; s16 trial Y #2). Among equal ratios (typically exact zeros: null eigenvalues of the
    factors are reported as 0, see `neuromanifold.singular.factor_spectrum.factor_spectrum`)
    duality chains come first (a dead unit seen in both factors is stronger evidence than a
    one-sided kernel vector), then the proposal order, which follows the modules."""
    dead = [c for c in candidates if c.gauge is None]
    gauges = [c for c in candidates if c.gauge is not None]

    def ratio_key(c: Candidate) -> float:
        r = c.ratio if c.ratio is not None else 0.0
        return 0.0 if r <= ROUNDOFF_ORDER_RATIO else r

    dead.sort(key=lambda c: (c.ratio is None, ratio_key(c), c.detector not in _TIE_FIRST))
    return dead + gauges


def working_copy(model: nn.Module) -> nn.Module:
    """Float64 eval-mode deep copy; fused-attention modules are set to train mode with dropout 0.

    PyTorch's fused inference path for ``nn.MultiheadAttention`` and the ``nn.Transformer*Layer``
    modules (taken in eval mode) has no forward-mode AD; in train mode with every dropout at 0 the
    modules compute the same eval-mode function through differentiable ops.
    """
    work = copy.deepcopy(model).to(torch.float64).eval()
    for mod in work.modules():
        if isinstance(mod, _FUSED):
            for sub in mod.modules():
                if isinstance(sub, nn.Dropout):
                    sub.p = 0.0
                if isinstance(sub, nn.MultiheadAttention):
                    sub.dropout = 0.0
                sub.train()
    return work


_CRITICAL_HELD = "the whole-gradient check's gradient and its copy"
_LOSS_CHECKS = (
    "the labelled checks (labels were given: the whole-gradient check, beside its gradient and "
    "that gradient's copy, and the labelled-loss check of each direction)"
)


def _critical_bytes(model: nn.Module) -> int:
    """Bytes the whole-gradient check holds beside a pass: the float64 gradient it sums over the
    even-indexed samples and autograd's per-chunk gradient (`critical_check`)."""
    return 2 * sum(p.numel() * 8 for p in model.parameters())


def _whole_gradient_check(
    work: nn.Module,
    params: dict[str, Tensor],
    data: tuple[Tensor, Tensor],
    family: Any,
    batch_size: int,
    plan: MemoryPlan | None,
) -> tuple[dict[str, Any], tuple[int, int]]:
    """`critical_check` at θ0 (``meta["critical_check"]``) and its ``(forward, backward)`` pass
    counts. Its chunks are the factor pass's batch, and under a budget at most what the plan
    gives `LOSS_CHECK_LANES` lanes beside the check's gradient (a backward pass holds about as
    much as a JVP of a JVP). An operator without a forward-mode formula leaves the check's
    ``"error"`` (the first line of the message) and the read stands, as for `loss_along`."""
    chunk = batch_size
    if plan is not None:
        chunk = min(
            chunk, plan.holding(_critical_bytes(work), _CRITICAL_HELD).chunk_for(LOSS_CHECK_LANES)
        )
    n = int(data[0].shape[0])
    n_a = -(-(n - n // 2) // chunk)  # the even-indexed half: a forward and a backward each
    n_b = -(-(n // 2) // chunk)  # the odd-indexed half: a JVP each, twice for the exact cut
    try:
        check = critical_check(work, params, data, family, chunk_size=chunk)
    except (RuntimeError, NotImplementedError) as err:
        error = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
        return error, (n_b + n_a, n_a)
    return check, (n_b * (2 if check.get("exact_cut") else 1) + n_a, n_a)


def _scan_bytes(model: nn.Module) -> int:
    """Bytes of the coordinate scan's float64 copy of ``model``'s parameters."""
    return sum(p.numel() * 8 for p in model.parameters())


def _attach_baseline(
    records: list[DirectionRecord],
    model: nn.Module,
    x: Tensor,
    family: Any,
    grid: Any,
    plan: MemoryPlan | None = None,
) -> tuple[list[DirectionRecord], int]:
    """Coordinate-scan results beside each genuine singularity (cached per block), its sweeps
    chunked as ``plan`` says (``None``: no chunking, ``T_BATCH`` t-values per group).

    Returns the new records and the number of coordinate reads made.
    """
    sizes: dict[str, Any] = {}
    if plan is not None:
        sizes = {"chunk_size": plan.chunk_size, "t_batch": plan.t_batch}
    cache: dict[str, dict[str, Any]] = {}
    out = []
    n_reads = 0
    for rec in records:
        if rec.klass != "genuine_singularity":
            out.append(rec)
            continue
        blocks = [
            layer
            for layer in rec.layers
            if is_supported_block(model.get_submodule(layer)) and layer not in cache
        ]
        if blocks:
            scan = coordinate_scan(model, x, family, layers=blocks, grid=grid, **sizes)
            n_reads += len(scan.records)
            for layer in blocks:
                cache[layer] = {"best_k": scan.best_k(layer), "classes": scan.classes(layer)}
        base = {layer: cache[layer] for layer in rec.layers if layer in cache}
        out.append(dataclasses.replace(rec, baseline=base))
    return out, n_reads


def _progress(enabled: bool, total: int):
    if not enabled or total == 0:
        return None
    from neuromanifold._progress import stderr_progress

    bar = stderr_progress()  # progress, not output
    task = bar.add_task("reading directions", total=total)
    bar.start()
    return bar, task
