"""One candidate of `neuromanifold.singular.read.read`, read: the sweep and its follow-ups.

`read_candidate` runs `read_direction` along the candidate (a gauge candidate with its own
generators, any other against the span of the curved-gauge generators sharing its tensors,
`related_generators`, so that its class follows the overlap rule of
`neuromanifold.singular.classify`), then, as `read`
documents (its module docstring, steps 5–6): the snapped re-read when ``snap="auto"`` and the
rate is not visible; the re-read off the span of those generators (`project_out_gauges`) when it
read genuine; and, for a duality chain, each block's own rate (`per_layer_rates`). A read that
ends genuine is also checked on the mirrored side (`one_sided_check`): the directional Fisher at
``θ_b − t·u`` for the t of its fitted window, because the sweep runs along ``t > 0`` only; a
non-gauge read that ends flat is checked there at the sweep's largest t (`flat_side_check`) and,
when that side is not flat, read along ``−u`` instead. With labels, a genuine or live read is
checked for θ0 being a minimum of the probe loss along it (`loss_along`). `record` turns the
result into a `DirectionRecord`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn

from neuromanifold.singular._validate import check_direction, prepare
from neuromanifold.singular.classify import (
    FLOOR_MARGIN,
    PROJECT_MIN_OVERLAP,
    fit_past_noise_plateau,
    order_at_point,
)
from neuromanifold.singular.detectors.base import Candidate
from neuromanifold.singular.direction import VISIBILITY_FACTOR, read_direction
from neuromanifold.singular.fisher import directional_fisher, fisher_along_line
from neuromanifold.singular.memory import MemoryPlan
from neuromanifold.singular.minimum_check import loss_along, loss_along_reason
from neuromanifold.singular.passes import chunks
from neuromanifold.singular.rate import fit_rate
from neuromanifold.singular.reading import DirectionRecord
from neuromanifold.singular.support import direction_support
from neuromanifold.singular.sweep import floor_from_scale

__all__ = [
    "LOSS_CHECKED",
    "LOSS_CHECK_LANES",
    "MIN_RESIDUAL",
    "MIRROR_RATIO",
    "MIRROR_TOP_POINTS",
    "ONE_SIDED_REASON",
    "ORDER_BELOW_KEY",
    "PROJECT_MIN_OVERLAP",
    "flat_side_check",
    "one_sided_check",
    "per_layer_rates",
    "project_out_gauges",
    "read_candidate",
    "record",
    "related_generators",
    "swept_direction",
]

LOSS_CHECKED = ("genuine_singularity", "live")
"""Classes whose records get the labelled-loss check (`loss_along`) when the data has labels: the
orders that enter (λ, m), and the live directions, along which a saddle also shows."""
LOSS_CHECK_LANES = 3
"""JVP lanes a sample of the labelled-loss check is counted as under a memory plan."""
MIN_RESIDUAL = 0.1
"""No re-read off the gauge span when less than this fraction of the candidate's norm survives."""
ORDER_BELOW_KEY = "order_below"
"""The ``info`` key of a genuine record read near, not on, its structure (`order_at_point`):
``{"k": k_s, "t": [t_first, t_last], "slope": s}``, the order the base point has along u as
t → 0 and the small-t points that show it."""
ONE_SIDED_REASON = (
    "; F vanishes along −u (F(−t) ≤ {margin:g}×floor = {cut:.3g} at the {n} t of the window, "
    "max F(−t) {top:.3g}): the zero set of K extends to one side of θ0, so the order k holds "
    "along +u only (for a ReLU unit that its inputs can switch off, the local λ there is 0, "
    "not 1/(2k): docs/triple.md)"
)
"""Clause appended to the reason of a genuine record whose mirrored side is flat
(`one_sided_check`)."""


def _flatten(
    u: dict[str, Tensor], keys: Sequence[str], params: dict[str, Tensor], out: Tensor | None = None
) -> Tensor:
    """``u`` over ``keys`` as one float64 vector (zero where ``u`` has no entry), written into
    ``out`` (a zeroed vector or matrix column of the same length) when given."""
    if out is None:
        ref = params[keys[0]]
        out = torch.zeros(
            sum(params[k].numel() for k in keys), dtype=torch.float64, device=ref.device
        )
    pos = 0
    for k in keys:
        n = params[k].numel()
        if k in u:
            out[pos : pos + n] = u[k].reshape(-1)
        pos += n
    return out


def related_generators(cand: Candidate, gauges: list[dict[str, Tensor]]) -> list[dict[str, Tensor]]:
    """The curved-gauge generators that share at least one tensor with ``cand.u``."""
    return [g for g in gauges if set(g) & set(cand.u)]


def project_out_gauges(
    cand: Candidate, gauges: list[dict[str, Tensor]], params: dict[str, Tensor]
) -> tuple[dict[str, Tensor], float | None]:
    """Project ``cand.u`` off the span of the generators sharing its tensors.

    Returns ``(u_proj, overlap)``: ``overlap = ‖P_G û‖`` (``None`` when no generator shares a
    tensor with ``u``) and ``u_proj`` the unit residual ``(û − P_G û)/‖û − P_G û‖`` over the union
    of the tensors; ``u_proj`` is ``cand.u`` itself (no re-read possible) when less than
    ``MIN_RESIDUAL`` of the norm survives or the overlap is below 1e-12.
    """
    u_proj, overlap, _ = _gauge_split(cand, gauges, params)
    return u_proj, overlap


def _gauge_split(
    cand: Candidate, gauges: list[dict[str, Tensor]], params: dict[str, Tensor]
) -> tuple[dict[str, Tensor], float | None, dict[str, Tensor] | None]:
    """`project_out_gauges` and the projection ``P_G û`` itself (``None`` when it is zero or no
    generator shares a tensor), from one SVD of the related generators.

    ``P_G û`` spans a line on which ``û`` has the same overlap as on the whole span
    (``⟨û, P_G û⟩/‖P_G û‖ = ‖P_G û‖``), so the sweeps classify against that single vector
    instead of orthonormalising every generator again. The generators are written straight
    into one ``(entries, generators)`` matrix and the singular vectors kept are a view of the
    SVD's: at most two such matrices are alive (a one-layer GPT-2's 260 attention generators
    over 4 224 entries, 8.8 MB each; stacking a list of columns and masking the vectors held
    four, s29 `--max-memory` over-run).
    """
    related = related_generators(cand, gauges)
    if not related:
        return cand.u, None, None
    keys = sorted(set(cand.u).union(*(g.keys() for g in related)))
    u = _flatten(cand.u, keys, params)
    u = u / u.norm()
    basis = u.new_zeros(u.numel(), len(related))
    for j, g in enumerate(related):
        _flatten(g, keys, params, out=basis[:, j])
    q, s, _ = torch.linalg.svd(basis, full_matrices=False)
    del basis
    q = q[:, : int((s > s.max() * 1e-10).sum())]  # s descends: the kept vectors lead
    proj = q @ (q.T @ u)
    overlap = float(proj.norm())
    line = _unflatten(proj, keys, params, keep=set(keys)) if overlap > 0.0 else None
    rest = u - proj
    if rest.norm() < MIN_RESIDUAL or overlap < 1e-12:
        return cand.u, overlap, line
    return _unflatten(rest / rest.norm(), keys, params, keep=set(cand.u)), overlap, line


def swept_direction(
    cand: Candidate,
    rec: DirectionRecord,
    gauges: list[dict[str, Tensor]],
    params: dict[str, Tensor],
) -> dict[str, Tensor]:
    """The unit direction ``û`` that ``rec``'s sweep went along, rebuilt from its candidate and
    the choices `read_candidate` recorded: ``cand.u``, projected off the curved-gauge span when
    ``info["projected"]``, negated when ``info["flipped"]`` (in that order, as there). For a
    record taken from a resume log, whose direction was not swept again (s23 trial VER #1:
    ``--resume --save-directions`` wrote none of them)."""
    u = cand.u
    if rec.info.get("projected"):
        u = _gauge_split(cand, gauges, params)[0]
    if "flipped" in rec.info:
        u = {k: -v for k, v in u.items()}
    return check_direction(params, u)[0]


def _unflatten(
    v: Tensor, keys: Sequence[str], params: dict[str, Tensor], *, keep: set[str]
) -> dict[str, Tensor]:
    """``v`` cut into the tensors ``keys``; kept where in ``keep`` or not identically zero."""
    out, pos = {}, 0
    for k in keys:
        n = params[k].numel()
        piece = v[pos : pos + n].reshape(params[k].shape)
        pos += n
        if k in keep or piece.abs().max() > 0:
            out[k] = piece
    return out


def read_candidate(
    cand: Candidate,
    work: nn.Module,
    params: dict[str, Tensor],
    xd: Tensor | tuple[Tensor, Tensor],
    family: Any,
    *,
    grid: Sequence[float] | Tensor | None,
    snap: bool | Literal["auto"],
    gauges: list[dict[str, Tensor]],
    project_gauges: bool,
    per_layer: bool,
    chunk: int | None,
    t_batch: int,
    plan: MemoryPlan | None,
    live_threshold: float | None = None,
    on_vector: Callable[[dict[str, Tensor]], None] | None = None,
) -> tuple[DirectionRecord, int]:
    """Read one candidate as `read` documents it: the sweep, the snapped re-read (``snap="auto"``),
    the re-read off curved-gauge spans, and per-block rates of a duality chain.

    ``gauges``: the generators of every curved gauge of the read; a non-gauge candidate's sweeps
    are classified against the span of those sharing a tensor with it (passed as the single
    vector ``P_G û``, which gives the same overlap). ``live_threshold``: passed to
    every sweep's classification (``None``: each read's default).

    A read that ends genuine (k ≥ 2) is checked on its mirrored side (`one_sided_check`); when
    that side is flat the record gets ``info["one_sided"]`` and a clause in its reason (class and
    k unchanged). A non-gauge read that ends flat is checked on its mirrored side at the sweep's
    largest t (`flat_side_check`); when that side is not flat, ``−u`` is read, and reported with
    ``info["flipped"]`` when it classifies (genuine or live), else noted in
    ``info["mirrored_read"]``.

    When ``xd`` is ``(x, y)``, a read that ends genuine or live (`LOSS_CHECKED`) gets the
    labelled-loss check at θ0 along the direction read (`loss_along`: ``info["loss_along_u"]``, and
    a clause in its reason when θ0 is on a slope or curved downward there).

    Returns ``(record, forward passes of its sweeps, of the mirrored-side check and of the loss
    check: per sample chunk, one per part and pair of parts of its span and one along its
    lowest-curvature direction)``. ``on_vector(û)``, when given, receives the unit direction the
    record's sweep went along (after a flip to ``−u`` or a projection off the gauge span), as
    ``{parameter name: tensor}`` of ``work``; the sweep's base point is ``θ0 + s·û`` with ``s =
    record.sweep["base_shift"]``.
    """
    n_passes = 0
    xw = xd[0] if isinstance(xd, tuple) else xd
    gens = list(cand.gauge_generators) if cand.gauge_generators else None
    overlap, u_proj = None, cand.u
    if cand.gauge is None and gauges:
        # a non-gauge candidate is classified against the curved gauges sharing its tensors,
        # through the projection of u on their span (same overlap, one SVD per candidate)
        u_proj, overlap, line = _gauge_split(cand, gauges, params)
        gens = None if line is None else [line]

    def sweep_read(u: dict[str, Tensor], snapped: bool, generators) -> Any:
        return read_direction(
            work,
            params,
            u,
            xd,
            family,
            grid=grid,
            snap=snapped,
            gauge_generators=generators,
            chunk_size=chunk,
            live_threshold=live_threshold,
            t_batch=t_batch,
            # ``work`` is the read's working copy, promoted or kept as the read was asked
            # (`promote_forward`): promoting here again would run a kept read's sweeps in float64
            # and search PRECISION_SAMPLES samples for lower steps before every sweep
            promote=False,
        )

    # a gauge's offset is intrinsic (its tangent is a function of θ0): never snapped
    r = sweep_read(cand.u, snap is True and cand.gauge is None, gens)
    info, u_read, gens_read = {}, cand.u, gens
    re_snap = snap == "auto" and cand.gauge is None and not r.rate_visible
    if re_snap and r.offset >= r.sweep.ts[-1]:  # beyond the swept neighbourhood
        re_snap = False
        info = {"snap_skipped": {"offset": r.offset, "t_max": r.sweep.ts[-1]}}
    if re_snap:
        first, snapped = r, sweep_read(cand.u, True, gens)
        keep_first = _is_genuine(first) and (not _is_genuine(snapped) or _order_below_offset(first))
        # the snap is there to show a rate the offset hides; a snapped sweep with no rate
        # window showed none, and a classified first read stands (s20 trial AN #1: zero weights
        # of a ReLU channel snapped below zero, F ≈ 0 up to the offset, then a jump)
        keep_first = keep_first or (_unresolved(snapped) and not _unresolved(first))
        # an offset off the locus shows as F ≈ c·δ_off² > 0 below it; F at the rounding floor
        # there means θ0 is flat along u and the snapped point another model (s26 trial CNN #6:
        # a never-firing channel's chain, snapped, revived the channel and read live)
        keep_first = keep_first or _flat_below_offset(first)
        if keep_first:
            # the unsnapped sweep already shows an order ≥ 2 below the offset, so the offset hid
            # nothing; the snapped point is another model (a regular point of the product a·b
            # snapped along the diagonal reads live; a chain through a unit of constant output
            # snapped to live input weights): keep the first read, note the second
            info = {"snapped_read": _summary(snapped)}
            r, other = first, snapped
        else:
            info = {"unsnapped": _summary(first)}
            r, other = snapped, first
        n_passes += other.sweep.n_forward_passes  # the reported read's passes are added below
    if (
        project_gauges
        and r.klass.value == "genuine_singularity"
        and overlap is not None
        and overlap >= PROJECT_MIN_OVERLAP
        and u_proj is not cand.u
    ):
        n_passes += r.sweep.n_forward_passes
        info = {**info, "unprojected": {"k": r.k, "class": r.klass.value}, "projected": True}
        unprojected_k = r.k
        r = sweep_read(u_proj, r.snapped, None)
        u_read, gens_read = u_proj, None
        # the re-read ran without generators, and its reason said "no gauge generators" beside
        # the record's own overlap (s34 trial CONV D1): it says what was done instead
        r = dataclasses.replace(
            r,
            reason=r.reason.replace("; no gauge generators", "", 1)
            + f"; read after projecting u off the curved-gauge span it overlapped by "
            f"{overlap:.3g} (≥ {PROJECT_MIN_OVERLAP:g}; unprojected: order {unprojected_k})",
        )
    n_passes += r.sweep.n_forward_passes
    if cand.gauge is None and r.klass.value == "flat_gauge":
        # flat along u: is it flat along −u too? If not, read −u and report that read when it
        # classifies (genuine or live); its own mirrored check then finds u flat (one_sided)
        mirrored, checked = flat_side_check(
            work, params, u_read, r, xd, family, chunk=chunk, t_batch=t_batch
        )
        n_passes += checked
        if mirrored is not None:
            negated = {k: -v for k, v in u_read.items()}
            other = sweep_read(negated, r.snapped, gens_read)
            n_passes += other.sweep.n_forward_passes
            if other.klass.value in ("genuine_singularity", "live"):
                # the snap's reads so far were along the given sign: kept with that read
                given = {**_summary(r), **{k: info.pop(k) for k in _SIGNED_KEYS if k in info}}
                info = {**info, "flipped": {**mirrored, "given_sign": given}}
                r, u_read = other, negated
            else:
                info = {**info, "mirrored_read": {**mirrored, **_summary(other)}}
    one_sided = None
    if _is_genuine(r):
        one_sided, mirror_passes = one_sided_check(
            work, params, u_read, r, xd, family, chunk=chunk, t_batch=t_batch
        )
        n_passes += mirror_passes
        if one_sided is not None:
            info = {**info, "one_sided": one_sided}
    if per_layer and cand.detector == "duality" and len(cand.layers) > 1:
        rates = per_layer_rates(
            work, params, cand, u_read, r, xw, family, plan=plan, live_threshold=live_threshold
        )
        info = {**info, "per_layer": rates}
        n_passes += len(r.sweep.ts)
    loss_check = None
    if isinstance(xd, tuple) and r.klass.value in LOSS_CHECKED:
        # labels given: is θ0 a minimum of the probe loss along the direction read?
        # a JVP of a JVP holds 2.3–2.6× the activations of one JVP lane (measured on an MLP and
        # the dim-32 ViT): under a budget its chunks are sized for `LOSS_CHECK_LANES` lanes
        loss_chunk = chunk if plan is None else plan.chunk_for(LOSS_CHECK_LANES)
        try:
            loss_check = loss_along(work, params, u_read, xd, family, chunk_size=loss_chunk)
        except (RuntimeError, NotImplementedError) as err:
            # an operator without a forward-over-forward formula: the read stands without the
            # check, and says why (the first line of the error; `_not_minimum_note`)
            loss_check = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
        info = {**info, "loss_along_u": loss_check}
        # per chunk, one JVP of a JVP along each part and pair of parts of the span, along v,
        # and along u and v again for each exact cut
        n = int(loss_check.get("span_dim", 0))
        per_chunk = n * (n + 1) // 2 + 1 + len(loss_check.get("exact_cuts", ()))
        n_passes += per_chunk * len(chunks(int(xw.shape[0]), loss_chunk))
    info = {**info, "support": direction_support(u_read)}
    below = order_at_point(
        r.fit, floor=r.sweep.floor, scale=r.sweep.scale, live_threshold=live_threshold
    )
    if _is_genuine(r) and below is not None:
        # near, not on: the report marks the record (s34 trial REPORT D1: its reason said so,
        # report.md and the table did not)
        lo, hi = r.fit.small_t_window
        info = {
            **info,
            ORDER_BELOW_KEY: {"k": below, "t": [lo, hi], "slope": float(r.fit.small_t_slope)},
        }
    if on_vector is not None:
        on_vector(check_direction(params, u_read)[0])
    rec = record(cand, r, overlap, info)
    if one_sided is not None:
        cut = FLOOR_MARGIN * r.sweep.floor
        clause = ONE_SIDED_REASON.format(
            margin=FLOOR_MARGIN, cut=cut, n=len(one_sided["t"]), top=max(one_sided["F_minus"])
        )
        rec = dataclasses.replace(rec, reason=rec.reason + clause)
    if loss_check is not None:
        rec = dataclasses.replace(rec, reason=rec.reason + loss_along_reason(loss_check))
    if cand.detector == "kfac-A" and rec.klass == "flat_gauge":
        rec = dataclasses.replace(rec, reason=rec.reason + _input_kernel_clause(cand.ratio))
    if cand.detector == "kfac-G" and rec.klass in ("flat_gauge", "unresolved"):
        rec = dataclasses.replace(rec, reason=rec.reason + _output_kernel_clause(cand.ratio))
    return rec, n_passes


def _input_kernel_clause(ratio: float | None) -> str:
    """Why a ``kfac-A`` record reads flat: its input side lies in the kernel of the layer's input
    factor A, so the layer's inputs have (next to) no component along it on the probe samples.
    The word "gauge" of its class suggests a symmetry; the clause says it is the probe set's
    (s33 trial USER O1: a unit that never fires; O5: the data-span kernel of an embedding)."""
    share = "" if ratio is None else f" (A's eigenvalue ratio {ratio:.2g})"
    return (
        f"; the layer's inputs have no component, or a vanishing one, along the direction's "
        f"input side on the probe samples{share}: an input unit that never fires on them, or a "
        "direction the probe data do not span, flat on this probe set rather than a symmetry "
        "of the model"
    )


def _output_kernel_clause(ratio: float | None) -> str:
    """Why a ``kfac-G`` record reads flat, or rises only late in its grid: its output side lies
    in the kernel of the layer's output-gradient factor G, so no gradient reaches the layer's
    outputs along it on the probe samples. A unit held off on every probe (a ReLU that never
    fires, `neuromanifold.singular.detectors.silent`) is the common case: a small move of its row
    leaves it off, a large one turns it on, where F rises (s35: the silent units' records read
    "unresolved" with no word of why)."""
    share = "" if ratio is None else f" (G's eigenvalue ratio {ratio:.2g})"
    return (
        f"; no gradient reaches the layer's outputs along the direction's output side on the "
        f"probe samples{share}: an output unit held off on every probe (a ReLU that never fires "
        "there: flat until the move turns it on) or one nothing downstream reads, rather than a "
        "symmetry of the model"
    )


def one_sided_check(
    model: nn.Module,
    params: dict[str, Tensor],
    u: dict[str, Tensor],
    reading: Any,
    xd: Tensor | tuple[Tensor, Tensor],
    family: Any,
    *,
    chunk: int | None,
    t_batch: int,
) -> tuple[dict[str, list[float]] | None, int]:
    """Whether the genuine read ``reading`` of ``u`` holds on one side of its base point only.

    The sweep reads ``F_u(θ_b + t·u)`` for ``t > 0`` (``θ_b = θ0 + s·u``, ``s`` the read's
    ``sweep.base_shift``: 0, or ``−uᵀθ0`` when it was snapped), so its class can depend on the
    arbitrary sign of ``u``: a ReLU unit whose inputs lie on one side of 0 reads order 2 along
    the diagonal of its (input, output) weights that turns it on, and is flat along the one that
    switches it off. This evaluates the directional Fisher at the mirrored points ``θ_b − t·u``
    for the t of the read's fitted window (``F_{−u} = F_u``: the same quadratic form), one JVP
    pass per t, with the read's ``chunk`` and ``t_batch``.

    Returns ``(result, passes)``: ``result`` is ``{"t", "F_plus", "F_minus"}`` (lists of floats:
    the window's t, the sweep's F there and the mirrored F) when every mirrored value is at or
    below the flat level of the classification (``FLOOR_MARGIN·F_floor``, `classify` rule 1, with
    the read's own floor) while every swept value in the window is above it; ``None`` otherwise
    (and when the read has no window).
    """
    window = reading.fit.window
    if window is None:
        return None, 0
    i0, i1 = window
    ts = list(reading.sweep.ts[i0 : i1 + 1])
    f_plus = [float(v) for v in reading.sweep.F[i0 : i1 + 1]]
    f_minus = _mirrored_fisher(model, params, u, reading, ts, xd, family, chunk, t_batch)
    cut = FLOOR_MARGIN * reading.sweep.floor
    if all(f <= cut for f in f_minus) and all(f > cut for f in f_plus):
        return {"t": ts, "F_plus": f_plus, "F_minus": f_minus}, len(ts)
    return None, len(ts)


def _mirrored_fisher(
    model: nn.Module,
    params: dict[str, Tensor],
    u: dict[str, Tensor],
    reading: Any,
    ts: Sequence[float],
    xd: Tensor | tuple[Tensor, Tensor],
    family: Any,
    chunk: int | None,
    t_batch: int,
) -> list[float]:
    """``F_u(θ_b − t·u)`` for the given t (one JVP pass each), ``θ_b`` the base point the read
    ``reading`` of ``u`` swept from (``θ0 + s·u``, ``s = reading.sweep.base_shift``)."""
    prep = prepare(model, params, xd)
    u_unit, _ = check_direction(prep.params, u)
    shift = reading.sweep.base_shift
    base = {k: (v + shift * u_unit[k] if k in u_unit else v) for k, v in prep.params.items()}
    minus = {k: -v for k, v in u_unit.items()}
    values, _ = fisher_along_line(
        model,
        prep,
        base,
        minus,
        torch.tensor(list(ts), dtype=torch.float64),
        family,
        chunk_size=chunk,
        t_batch=t_batch,
    )
    return [float(v) for v in values]


_SIGNED_KEYS = ("unsnapped", "snapped_read")
"""``info`` keys that describe reads along the candidate's given sign: a flipped record keeps
them under ``info["flipped"]["given_sign"]``."""
MIRROR_TOP_POINTS = 3
"""A flat read of a non-gauge candidate is checked on its mirrored side at this many of the
sweep's largest t (`flat_side_check`)."""
MIRROR_RATIO = 100.0
"""`flat_side_check` calls the mirrored side not flat only when its largest F is this many times
above everything the flat read showed (its largest F, or the flat level when that is higher): a
flat read at a noise plateau (F constant at rounding level, below the live threshold) has the
same plateau on both sides, and re-reading it along −u would only read it again."""


def flat_side_check(
    model: nn.Module,
    params: dict[str, Tensor],
    u: dict[str, Tensor],
    reading: Any,
    xd: Tensor | tuple[Tensor, Tensor],
    family: Any,
    *,
    chunk: int | None,
    t_batch: int,
) -> tuple[dict[str, list[float]] | None, int]:
    """Whether the flat read ``reading`` of ``u`` is flat on its own side only.

    The mirror image of `one_sided_check`: a detector's direction has an arbitrary sign, and a
    ReLU unit whose inputs lie on one side of 0 is flat along the diagonal that switches it off
    and reads order 2 along the other. This evaluates ``F_u(θ_b − t·u)`` at the
    `MIRROR_TOP_POINTS` largest t of the sweep (where a power law in t is largest), one JVP pass
    each. Returns ``({"t", "F_minus"}, passes)`` when the largest value is more than
    `MIRROR_RATIO` times above both the flat level (``FLOOR_MARGIN·F_floor``, the read's own
    floor) and the read's largest F, else ``(None, passes)``.
    """
    ts = list(reading.sweep.ts[-MIRROR_TOP_POINTS:])
    f_minus = _mirrored_fisher(model, params, u, reading, ts, xd, family, chunk, t_batch)
    seen = max(FLOOR_MARGIN * reading.sweep.floor, max(float(f) for f in reading.sweep.F))
    if max(f_minus) > MIRROR_RATIO * seen:
        return {"t": ts, "F_minus": f_minus}, len(ts)
    return None, len(ts)


def _summary(r: Any) -> dict[str, Any]:
    """``{"k", "k_hat", "class"}`` of a read that is not the one reported."""
    return {"k": r.k, "k_hat": r.k_hat, "class": r.klass.value}


def _order_below_offset(r: Any) -> bool:
    """Whether the unsnapped read ``r`` already shows an order ``k ≥ 2`` in a window that starts
    at ``t ≤ δ_off / VISIBILITY_FACTOR``: a checkpoint that sat ``δ_off`` off the locus along
    ``u`` would show slope 0 there (`neuromanifold.singular.direction`, visibility rule), so the
    offset ``|uᵀθ0|`` is not an obstruction and the snapped point would be another model. Such
    offsets come from entries of ``u`` on parameters that are free on the locus, e.g. the
    consumer bias shift of a chain through a unit of constant output
    (`neuromanifold.singular.detectors.bias_link`)."""
    window = r.fit.t_window
    return _is_genuine(r) and window is not None and window[0] * VISIBILITY_FACTOR <= r.offset


def _flat_below_offset(r: Any) -> bool:
    """Whether the unsnapped read ``r`` has ``F ≤ FLOOR_MARGIN·F_floor`` (the flat level) at every
    grid point ``t ≤ δ_off / VISIBILITY_FACTOR``, and at least one such point. A checkpoint
    ``δ_off`` off the locus along ``u`` shows the constant ``F ≈ c·δ_off²`` there (the
    visibility rule), never 0: F at the floor means the offset hides no rate, and the snapped
    point ``θ0 − (uᵀθ0)u`` is another model (e.g. a ReLU unit that never fires at θ0, revived)."""
    ts, F = r.sweep.ts, r.sweep.F
    below = [float(f) for t, f in zip(ts, F, strict=True) if t * VISIBILITY_FACTOR <= r.offset]
    return bool(below) and max(below) <= FLOOR_MARGIN * r.sweep.floor


def _unresolved(r: Any) -> bool:
    """Whether the read ``r`` found no rate window to classify (class ``unresolved``)."""
    return r.klass.value == "unresolved"


def _is_genuine(r: Any) -> bool:
    """A genuine singularity with an order ``k ≥ 2``."""
    return r.klass.value == "genuine_singularity" and r.k is not None and r.k >= 2


def per_layer_rates(
    model: nn.Module,
    params: dict[str, Tensor],
    cand: Candidate,
    u: dict[str, Tensor],
    reading: Any,
    x: Tensor,
    family: Any,
    *,
    plan: MemoryPlan | None = None,
    live_threshold: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Block rates along a chain: ``F_ℓ(t) = u_ℓᵀ F(θ0 + (t + s)u) u_ℓ``, u_ℓ = block ℓ of ``u``.

    ``s`` is the base shift of the chain's own read (``reading.sweep.base_shift``: 0 for an
    unsnapped read, ``−uᵀθ0`` when the read was snapped), so the block sweeps start from the same
    base point as the chain's sweep. The sweep runs along the whole chain direction ``u`` (same
    t-grid as its read) and the Fisher
    is evaluated along each block's unit part, batched in one JVP pass per t. By the A–G duality
    every block of a depth-L linear dead path shows ``t^{2(L−1)}`` (spec §6.1), i.e. order L at
    every layer the direction touches. Returns ``{layer: {"k", "k_hat", "slope", "r2"}}``. Each
    layer's fit reads past a noise plateau as the chain's own does (`fit_past_noise_plateau`,
    with the read's ``live_threshold``). At a point rounded off the locus (a float32 copy) a
    layer's sweep can also show a lower-order branch below the chain's (the float32 depth-5
    rotated chain: t² at F ~ 1e-25 under t⁸ at layer 3), and that layer then reads the lower
    order, the order of the rounded point along its block.
    """
    parts, layers = [], []
    for layer in cand.layers:
        prefix = f"{layer}." if layer else ""
        part = {
            k: v
            for k, v in u.items()
            if k[len(prefix) :] in ("weight", "bias") and k.startswith(prefix)
        }
        norm = float(torch.sqrt(sum((v**2).sum() for v in part.values()))) if part else 0.0
        if norm > 0.0:
            parts.append({k: v / norm for k, v in part.items()})
            layers.append(layer)
    if not parts:
        return {}
    ts = list(reading.sweep.ts)
    shift = reading.sweep.base_shift
    chunk = None if plan is None else plan.chunk_for(len(parts))
    values = []
    for t in ts:
        point = {k: (v + (t + shift) * u[k] if k in u else v) for k, v in params.items()}
        values.append(directional_fisher(model, point, parts, x, family, chunk_size=chunk))
    table = torch.stack(values).T  # (n_layers, n_t)
    out = {}
    for layer, f in zip(layers, table, strict=True):
        floor = floor_from_scale(max(float(f.max()), reading.sweep.scale))
        # a float32 noise plateau under a layer's rising branch is read past, as the
        # direction's own fit is (`fit_past_noise_plateau`; s15 audit U #3)
        fit = fit_past_noise_plateau(
            fit_rate(ts, f.tolist(), floor=floor),
            ts,
            f.tolist(),
            floor=floor,
            scale=reading.sweep.scale,
            live_threshold=live_threshold,
        )
        out[layer] = {
            "k": fit.k,
            "k_hat": _finite(fit.k_hat),
            "slope": _finite(fit.slope),
            "r2": _finite(fit.r2),
        }
    return out


def _finite(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def record(
    cand: Candidate, r: Any, overlap: float | None, extra: dict[str, Any]
) -> DirectionRecord:
    fit = r.fit
    return DirectionRecord(
        layer=cand.layers[0],
        layers=tuple(cand.layers),
        detector=cand.detector,
        k=r.k,  # None for a flat gauge (`DirectionReading.k`)
        k_hat=_finite(fit.k_hat),
        slope=_finite(fit.slope),
        r2=_finite(fit.r2),
        magnitude=_finite(fit.magnitude),
        klass=r.klass.value,
        window=None if fit.t_window is None else (float(fit.t_window[0]), float(fit.t_window[1])),
        offset=float(r.offset),
        gauge_overlap=r.gauge_overlap if r.gauge_overlap is not None else overlap,
        ratio=cand.ratio,
        reason=r.reason,
        info={**cand.info, **extra},
        sweep={
            "t": list(r.sweep.ts),
            "F": list(r.sweep.F),
            "floor": r.sweep.floor,
            "base_shift": float(r.sweep.base_shift),
        },
    )
