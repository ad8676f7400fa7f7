"""Per-unit rescaling orbits: tangents, the group action, and certification by evaluation.

A hidden unit ``j`` whose value is produced elementwise by some tensors (their index ``j`` along
dimension 0: a Linear's row and bias entry, a norm's scale and shift entry) and read only by
consumer weights (their index ``j`` along dimension 1: a Linear's column, a conv's input
channel, or the ``block`` columns of a channel's flattened feature map) sits on the orbit

    producers[j] → c·producers[j],    consumers[:, j] → c^{−p}·consumers[:, j],    c > 0,

which leaves the model function unchanged when the unit passes through nothing or through a
positively homogeneous map of degree ``p`` (``φ(cz) = c^p φ(z)``: ReLU p = 1, squared ReLU
p = 2), or when it multiplies a gate elementwise (a GLU's up projection, p = 1). The tangent at
``c = 1`` is

    τ_j = (producers[j], −p·consumers[:, j])     (zeros elsewhere),

and the orbit is curved: along the straight line ``θ0 + t·τ_j`` the unit's contribution scales by
``(1 + t)^p (1 − p t) = 1 − p(p + 1)t²/2 + O(t³)`` (``1 − t²`` exactly for p = 1), so a straight
probe shows an apparent order 2 with no singularity present (spec §6.5).

Whether a module layout really carries this symmetry depends on how the unit's value is used
after the consumers read it: a ReLU output that also enters a residual sum, a norm output read by
anything but its consumers' weights, or a gated module whose ``forward`` is not
``down(φ(gate(x)) ⊙ up(x))`` break it. `certify` decides by evaluation instead of by layout: it
applies one group element with factors ``c_j ∈ {2, ½}`` (alternating over the units) and
compares the model's outputs on every probe sample (`relative_change`). Powers of two scale every
floating-point product exactly, so on a true orbit the outputs agree to rounding of identically
ordered sums (bitwise, in practice), and a broken one changes them by O(1) relative;
``CERTIFY_RTOL`` sits far between the two. The probe set decides: an orbit broken only through
units that no probe sample activates changes nothing the read can measure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.func import functional_call
from torch.utils._pytree import tree_leaves

from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise

__all__ = [
    "CERTIFY_CACHE_BYTES",
    "CERTIFY_CHUNK",
    "CERTIFY_RTOL",
    "MAX_GENERATOR_ENTRIES",
    "UNIT_TIE_RTOL",
    "UnitRescale",
    "action_derivative",
    "alternating_factors",
    "certify",
    "certify_shift",
    "generator_cap",
    "leading_unit",
    "relative_change",
    "rescale_candidate",
    "truncation_record",
    "unit_activity",
    "units_cap",
]

CERTIFY_RTOL = 1e-10
"""Largest ``max|f(g·θ) − f(θ)| / max|f(θ)|`` over the probe samples for which an orbit counts as
a symmetry (`certify`); exact orbits give 0 (power-of-two factors), broken ones O(1)."""
UNIT_TIE_RTOL = 1e-9
"""Units whose score (`rescale_candidate`) is within this relative distance of the best count as
tied; the first of them is read."""
CERTIFY_CHUNK = 64
"""Probe samples per forward pass of `relative_change` (which evaluates every probe sample); under a
memory budget `read` passes the plan's factor batch instead, when smaller
(`DetectionContext.forward_chunk`)."""
CERTIFY_CACHE_BYTES = 64 * 2**20
"""The unmoved model's outputs on the probe set are kept for all certifications of one read when
they hold at most this many bytes (a classifier's logits; not a language model's per-token
vocabulary logits, which are recomputed); under a memory budget, at most what the detection's
estimate leaves of its share (`DetectionContext.cache_bytes`, `MemoryPlan.detection_room`)."""


@dataclass(frozen=True)
class UnitRescale:
    """The rescaling orbit of every unit of one layer (module docstring).

    Attributes:
        producers: parameter names indexed by the unit along dimension 0 (weight rows, bias,
            norm scale and shift entries); all of the same length ``n_units`` in that dimension.
        consumers: parameter names indexed by the unit along dimension 1 (weight columns), or
            along dimension 0 for a one-dimensional tensor (a layer scale's entries).
        degree: ``p``, the degree of homogeneity between producer and consumer (a positive int).
        block: columns per unit in the consumers: unit ``j`` owns columns
            ``j·block … (j+1)·block − 1`` (a conv's feature map of ``block`` positions per
            channel flattened into a Linear); 1 otherwise.
        offset: the producers' rows before the first unit: unit ``j`` is producer row
            ``offset + j`` (a fused gate-and-up projection whose up rows follow the gate's,
            Phi-3's ``gate_up_proj``: offset = the hidden width); the rows before it are left
            alone. 0 otherwise.
    """

    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    degree: int = 1
    block: int = 1
    offset: int = 0

    def n_units(self, params: dict[str, Tensor]) -> int:
        """Number of units: the producers' length along dimension 0 past ``offset``."""
        return int(params[self.producers[0]].shape[0]) - self.offset

    def strength(self, params: dict[str, Tensor]) -> Tensor:
        """``‖producers[0][j]‖ · ‖consumer columns_j‖`` per unit (shape ``(n_units,)``; the first
        producer is the weight or scale, biases and shifts do not count). Weights only: a unit
        with large weights may still be one no probe sample excites (`unit_activity`)."""
        return self._row_norms(self._unit_rows(params, self.producers[:1]), 0) * self._row_norms(
            params, 1, self.block, self.consumers
        )

    def tangent_norms(self, params: dict[str, Tensor]) -> Tensor:
        """``‖τ_j‖`` per unit (shape ``(n_units,)``); zero for a unit with nothing to rescale."""
        prod = self._row_norms(self._unit_rows(params, self.producers), 0)
        cons = self._row_norms(params, 1, self.block, self.consumers)
        return torch.sqrt(prod**2 + self.degree**2 * cons**2)

    def tangent(self, params: dict[str, Tensor], j: int) -> dict[str, Tensor]:
        """``τ_j``: ``producers[j]`` and ``−p·consumers[:, cols_j]`` (``cols_j``: unit ``j``'s
        ``block`` columns), zero elsewhere in those tensors."""
        out: dict[str, Tensor] = {}
        for key in self.producers:
            d = torch.zeros_like(params[key])
            d[self.offset + j] = params[key][self.offset + j]
            out[key] = d
        cols = slice(j * self.block, (j + 1) * self.block)
        for key in self.consumers:
            w = params[key]
            d = torch.zeros_like(w)
            if w.dim() == 1:
                d[cols] = -self.degree * w[cols]
            else:
                d[:, cols] = -self.degree * w[:, cols]
            out[key] = d
        return out

    def tangent_reference(self, params: dict[str, Tensor], j: int) -> dict[str, Tensor]:
        """Oracle of `tangent` (`action_derivative`)."""
        return action_derivative(self, params, j)

    def act(self, params: dict[str, Tensor], factors: Tensor) -> dict[str, Tensor]:
        """The group element: producers' unit ``j`` times ``c_j``, consumers' times
        ``c_j^{−p}`` (``factors`` = ``c``, shape ``(n_units,)``, positive; the producers' rows
        before ``offset`` unchanged)."""
        out: dict[str, Tensor] = {}
        rows = torch.cat([factors.new_ones(self.offset), factors])
        for key in self.producers:
            p = params[key]
            out[key] = p * rows.reshape(-1, *([1] * (p.dim() - 1)))
        inverse = factors.pow(-self.degree).repeat_interleave(self.block)
        for key in self.consumers:
            w = params[key]
            shape = (-1,) if w.dim() == 1 else (1, -1, *([1] * (w.dim() - 2)))
            out[key] = w * inverse.reshape(shape)
        return out

    def _unit_rows(self, params: dict[str, Tensor], keys: tuple[str, ...]) -> dict[str, Tensor]:
        """The producers ``keys`` cut to their unit rows (those past ``offset``; views)."""
        return {key: params[key][self.offset :] for key in keys}

    @staticmethod
    def _row_norms(
        params: dict[str, Tensor], dim: int, block: int = 1, keys: tuple[str, ...] | None = None
    ) -> Tensor:
        """Per unit, the root of the summed squares of its entries in ``keys`` (default: every
        tensor of ``params``; the unit along ``dim``, or along 0 in a one-dimensional tensor;
        ``block`` entries per unit there), shape ``(n_units,)``; empty for a layer of zero
        width."""
        total = None
        for key in params if keys is None else keys:
            p = params[key].double()
            axis = min(dim, p.dim() - 1)  # a one-dimensional consumer holds the unit along 0
            rows = p.shape[axis] // block
            # the row length is named, not -1: a zero-width layer has 0 rows, for which -1 is
            # ambiguous (and so is a zero-size tensor's)
            cols = p.numel() // rows if rows else 0
            sq = p.transpose(0, axis).reshape(rows, cols).pow(2).sum(1)
            total = sq if total is None else total + sq
        return torch.sqrt(total)


def action_derivative(orbit: Any, params: dict[str, Tensor], j: int) -> dict[str, Tensor]:
    """``d/dc_j orbit.act(params, c)`` at ``c = 𝟙`` by forward-mode AD: the oracle of an orbit's
    closed-form ``tangent`` (any orbit with ``producers``, ``n_units`` and ``act``)."""
    ref = params[orbit.producers[0]]
    ones = torch.ones(orbit.n_units(params), dtype=ref.dtype, device=ref.device)
    e_j = torch.zeros_like(ones)
    e_j[j] = 1.0
    _, out = torch.func.jvp(lambda c: orbit.act(params, c), (ones,), (e_j,))
    return out


def _outputs(ctx: DetectionContext, params: dict[str, Tensor], x: Tensor) -> list[Tensor]:
    out = functional_call(ctx.model, params, (x,))
    return [t for t in tree_leaves(out) if isinstance(t, Tensor) and t.is_floating_point()]


def _chunk(ctx: DetectionContext) -> int:
    """Samples per certification pass: ``ctx.forward_chunk`` (a memory plan's), else
    ``CERTIFY_CHUNK``."""
    return CERTIFY_CHUNK if ctx.forward_chunk is None else max(1, ctx.forward_chunk)


def _base_outputs(ctx: DetectionContext) -> list[list[Tensor]]:
    """``f(θ)`` per pass of `_chunk` samples, kept in ``ctx.cache`` when it holds at most
    ``ctx.cache_bytes`` (default ``CERTIFY_CACHE_BYTES``; else recomputed by every
    certification)."""
    cached = ctx.cache.get("certify_base")
    if cached is not None:
        return cached
    params = dict(ctx.params)
    step = _chunk(ctx)
    base = [
        _outputs(ctx, params, ctx.data[i : i + step]) for i in range(0, ctx.data.shape[0], step)
    ]
    _count_passes(ctx, 1)
    limit = CERTIFY_CACHE_BYTES if ctx.cache_bytes is None else ctx.cache_bytes
    if sum(t.numel() * t.element_size() for ts in base for t in ts) <= limit:
        ctx.cache["certify_base"] = base
    return base


def _count_passes(ctx: DetectionContext, n: int) -> None:
    ctx.cache["certify_passes"] = ctx.cache.get("certify_passes", 0) + n


def certify_shift(rows: Tensor, like: Tensor) -> Tensor:
    """Distinct shifts ``1 … 2`` times ``like``'s RMS (1 … 2 where it is zero) on the ``True``
    entries of ``rows``, zero elsewhere; float64, shape of ``rows``. The move a flat gauge is
    certified with (`relative_change`): distinct per line, so that a symmetry of their common
    direction alone (a bias added along another axis) does not pass for all of them.

    >>> certify_shift(torch.tensor([True, False, True]), torch.tensor([3.0, 4.0])).tolist()
    [3.5355339059327378, 0.0, 7.0710678118654755]
    """
    n = int(rows.sum())
    rms = float(like.double().pow(2).mean().sqrt())
    shift = torch.zeros(rows.shape, dtype=torch.float64, device=like.device)
    shift[rows] = torch.linspace(1.0, 2.0, n, dtype=torch.float64, device=like.device)
    return shift * (rms if rms > 0.0 else 1.0)


def relative_change(ctx: DetectionContext, moved: dict[str, Tensor]) -> float:
    """``max|f(θ') − f(θ)| / max|f(θ)|`` over the model's floating-point output tensors on every
    probe sample (passes of `_chunk` samples), ``θ'`` = the parameters with ``moved``
    substituted; ``inf`` when the output holds no floating-point tensor or a forward fails.

    The probe set decides: a change that no probe sample shows (e.g. through units dead on all of
    them) is one the read cannot see either. Under an initialised ``torch.distributed`` process
    group both maxima (and a failure flag) are all-reduced with ``MAX`` before dividing, so every
    rank, certifying on its own shard, gets the value of the whole probe set and takes the same
    decision. ``f(θ)`` is computed once per context and kept (`_base_outputs`); the passes over
    the probe set are counted in ``ctx.cache["certify_passes"]`` (the read adds them to its
    forward-pass count).
    """
    diff, scale, failed = 0.0, 0.0, 0.0
    moved_params = {**dict(ctx.params), **moved}
    try:
        with torch.no_grad():
            base_all = _base_outputs(ctx)
            _count_passes(ctx, 1)
            step = _chunk(ctx)
            for k, i in enumerate(range(0, ctx.data.shape[0], step)):
                base = base_all[k]
                acted = _outputs(ctx, moved_params, ctx.data[i : i + step])
                if not base or len(base) != len(acted):
                    failed = 1.0
                    break
                for a, b in zip(acted, base, strict=True):
                    if b.numel():
                        scale = max(scale, float(b.abs().max()))
                        diff = max(diff, float((a - b).abs().max()))
    except (RuntimeError, ValueError, TypeError):  # a layout the model cannot run
        failed = 1.0
    if dist.is_available() and dist.is_initialized():
        stats = torch.tensor([diff, scale, failed], dtype=torch.float64, device=ctx.data.device)
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)
        diff, scale, failed = stats.tolist()
    if failed:
        return float("inf")
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / scale


def certify(ctx: DetectionContext, orbit: UnitRescale) -> float:
    """`relative_change` under the group element with factors ``2, ½, 2, …`` over the units.

    The orbit is a symmetry of the model when this is at most ``CERTIFY_RTOL`` (module docstring).
    """
    factors = alternating_factors(orbit.n_units(ctx.params), ctx.params[orbit.producers[0]])
    return relative_change(ctx, orbit.act(ctx.params, factors))


def leading_unit(score: Tensor) -> int:
    """The first unit whose score is within ``UNIT_TIE_RTOL`` of the best (not ``argmax``: the
    factor sums behind a score are rounded in an order that follows the batch size and the ranks,
    which must not change the unit read).

    >>> leading_unit(torch.tensor([1.0, 2.0, 2.0 * (1 + 1e-12), 1.5], dtype=torch.float64))
    1
    """
    top = float(score.max())
    return next(i for i in range(score.numel()) if float(score[i]) >= (1.0 - UNIT_TIE_RTOL) * top)


def unit_activity(ctx: DetectionContext, orbit: UnitRescale) -> Tensor | None:
    """How strongly the probe set excites each unit where its first consumer with K-FAC factors
    reads it, shape ``(n_units,)``: ``sqrt(Σ_{entries e of unit j} A_ee)``, the root of the
    summed mean squares over the consumer's input second moment ``A`` (mean over samples and
    positions; a conv's kernel taps and a flattened feature map's positions are the unit's
    entries, so this is the unit's RMS value times the root of their number). Zero for a unit
    no probe sample excites (a dead ReLU); None when no consumer is a block with factors (a
    layer scale, a packed attention projection). The consumers' widths are ``n_units·block``
    (`UnitRescale`), so the entries group evenly. An orbit that knows its units' activity
    itself (an ``activity()`` method, e.g. `BatchNormRescale` from the running statistics)
    answers instead."""
    own = getattr(orbit, "activity", None)
    if own is not None:
        return own()
    n = orbit.n_units(ctx.params)
    for key in orbit.consumers:
        module, _, leaf = key.rpartition(".")
        bf = ctx.factors.blocks.get(module) if leaf == "weight" else None
        if bf is not None:
            diag = bf.A.diagonal()[: bf.A.shape[0] - int(bf.has_bias)]
            return diag.reshape(n, -1).sum(1).clamp_min(0.0).sqrt()
    return None


def rescale_candidate(
    ctx: DetectionContext,
    orbit: UnitRescale,
    *,
    layers: tuple[str, ...],
    detector: str,
    max_units: int | None = None,
    info: dict[str, Any] | None = None,
) -> list[Candidate]:
    """One curved-gauge candidate for ``orbit``, or none.

    None when the layer has no unit (zero width), when no unit has a non-zero tangent or when
    `certify` finds the orbit is not a symmetry.
    Otherwise ``u`` is the normalised tangent of the unit of largest `UnitRescale.strength` times
    `unit_activity` (a clearly live unit, read to certify the curved-gauge class: the largest
    weights may belong to a unit no probe sample excites, whose line reads flat; the strength
    alone where no activity is known or all of it is zero; the first unit within
    ``UNIT_TIE_RTOL`` of the best) and ``gauge_generators`` are the tangents of every unit with
    a non-zero tangent, that unit first, then by score, at most `units_cap`
    (``max_units``, or the ``MAX_GENERATOR_ENTRIES`` budget when ``None``;
    ``info["truncated"] = {"cap", "found", "kept", "of": "generators"}`` when the cap cuts).
    ``info`` also records ``unit``, ``degree``, ``generator_units`` and ``certified`` (the
    relative change `certify` measured).
    """
    if orbit.n_units(ctx.params) == 0:  # a layer of zero width: no unit, nothing to rescale
        return []
    score = orbit.strength(ctx.params)
    activity = unit_activity(ctx, orbit)
    if activity is not None and float((score * activity).max()) > 0.0:
        score = score * activity  # read a unit the probe set excites, not a dead one
    tnorm = orbit.tangent_norms(ctx.params)
    if float(score.max()) == 0.0:
        return []
    j = leading_unit(score)
    change = certify(ctx, orbit)
    if not change <= CERTIFY_RTOL:
        return []
    rest = sorted(
        (i for i in range(tnorm.numel()) if float(tnorm[i]) > 0.0 and i != j),
        key=lambda i: (-float(score[i]), i),
    )
    order = [j, *rest]  # the unit read first, then by score
    cap = units_cap(orbit, ctx.params, max_units)
    units = order[:cap]
    u = normalise(orbit.tangent(ctx.params, units[0]))
    # u itself stands for the leading unit's tangent (same line, same span): one copy, not two
    gens = (u, *(orbit.tangent(ctx.params, i) for i in units[1:]))
    extra = {
        **(info or {}),
        "unit": j,
        "degree": orbit.degree,
        "generator_units": units,
        "certified": change,
    }
    if len(order) > cap:
        extra["truncated"] = truncation_record(cap, len(order), len(units))
    cand = Candidate(
        layers=layers,
        detector=detector,
        u=u,
        gauge="curved",
        gauge_generators=gens,
        info=extra,
    )
    return ctx.canonical([cand])


MAX_GENERATOR_ENTRIES = 2**21
"""Default budget of a rescale candidate's ``gauge_generators``: units kept × entries of the
orbit's tensors (each generator is dense over them) at most this many float64 numbers (16 MiB).

`read` classes every candidate sharing a tensor with these generators against their span (a
dense SVD over the shared tensors per sweep), so the read's cost grows with the generators: a
256→256→256→10 ReLU MLP on 128 probes read in 1.7 s with 8 units per pair, 3.5 s with 16
(the budget keeps 15: 2·256² + 256 entries per unit), 6.2 s with 32 and 32 s with 64 (one
thread). A norm of
width 32 read by three 32×32 projections (3 136 entries per unit) keeps all its units."""


def generator_cap(entries: int) -> int:
    """Generators of ``entries`` float64 numbers each that fit ``MAX_GENERATOR_ENTRIES`` (≥ 1).

    >>> generator_cap(2 * 256 * 256 + 256), generator_cap(10**9)
    (15, 1)
    """
    return max(1, MAX_GENERATOR_ENTRIES // entries)


def units_cap(orbit: UnitRescale, params: dict[str, Tensor], max_units: int | None) -> int:
    """Units a candidate may keep: ``max_units`` when given, else `generator_cap` of the entries
    of the orbit's tensors."""
    if max_units is not None:
        return max_units
    return generator_cap(sum(params[k].numel() for k in (*orbit.producers, *orbit.consumers)))


def truncation_record(cap: int, found: int, kept: int) -> dict[str, Any]:
    """``info["truncated"]`` of a candidate whose gauge span keeps ``kept`` of ``found``
    generators (``"of": "generators"``: the candidate is read, its span is partial)."""
    return {"cap": cap, "found": found, "kept": kept, "of": "generators"}


def alternating_factors(n: int, like: Tensor) -> Tensor:
    """``(2, ½, 2, ½, …)`` of length ``n`` (float64, on ``like``'s device): the group element
    the rescale certifications apply (powers of two scale floating-point products exactly)."""
    factors = torch.ones(n, dtype=torch.float64, device=like.device)
    factors[0::2], factors[1::2] = 2.0, 0.5
    return factors
