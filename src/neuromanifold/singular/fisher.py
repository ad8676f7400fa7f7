"""Directional Fisher ``uᵀF(θ)u`` by forward mode, and its per-sample-gradient oracle.

``directional_fisher`` computes, at the given parameters θ,

    F_u = (1/N) Σ_{i=1}^{N} q_i(J_i u),    J_i = ∂ model(x_i)/∂θ,

with ``q_i`` the output family's quadratic form (Gaussian ``‖z‖²/σ²``, categorical
``Var_{c∼p}[z_c]``, summed over positions ``Σ_t Var_{c∼p_t}[z_tc]`` for sequence logits
``(N, ..., C)``; see `neuromanifold.singular.family`). This is the **true (expected)
Fisher** — labels integrated exactly through H_out — normalised as a **mean over the N
samples**. ``J_i u`` comes from one ``torch.func.jvp`` through ``functional_call``; several
directions share the primal pass by ``vmap`` over the tangents. No per-sample gradient and no
d×d matrix is formed. Sums are accumulated over sample chunks and divided by N once; under an
initialised ``torch.distributed`` process group the sums and counts are all-reduced first, so each
rank passes its own shard of the probe set (`global_mean`).

**Lanes and chunks.** Samples are split into chunks and directions or t-values grouped into
``vmap`` lanes by the pass policy of `neuromanifold.singular.passes` (`lane_chunk`,
`line_lanes`); only the order of the float64 sums depends on the grouping.

What batching directions can gain is bounded: the lanes share the primal pass, but each lane's
tangent costs about two primal passes (every linear map meets both a tangent input and a tangent
weight), so with negligible call overhead L directions cost ``P + L·m`` against ``L·(P + m)`` one
at a time: the gain tends to ``1 + P/m``, with ``m/P`` measured at 1.7–2.8 on the dim-32 ViT
(so 1.4–1.6×). Larger gains come only where per-call overhead dominates (small probe sets).
Reverse mode computes the same numbers from the C rows of ``S_i J_i`` (``S_iᵀS_i = H_out``) at a
cost that does not grow with the number of directions; `benchmarks/batching_routes.py` times two
such routes against the lanes (on the dim-32 ViT, 10 classes: a route through Linear-layer hooks
was 1.2–1.4× faster than the lanes for directions on Linear layers only; per-sample Jacobians were
slower). They are not used here.
Elementwise activations would add a per-lane recomputation of their derivative (torch's
forward-mode formula for GELU and SiLU is its fused backward kernel); under direction lanes
their derivative is formed once from the primal (`neuromanifold.singular.lane_activations`).

``directional_fisher_reference`` is the brute-force oracle: explicit per-sample gradients of the
log-likelihood (``vmap(grad)``) at a label set that integrates the expectation exactly — Gaussian:
labels ``out_i + σ e_j`` for every output coordinate j (so ``Σ_j g gᵀ = J_iᵀJ_i/σ²``); categorical:
every class c with weight ``p_c`` (so ``Σ_c p_c ∇log p_c ∇log p_cᵀ``), and for sequence logits
every (position t, class c) pair with weight ``p_tc`` and the log-likelihood of position t alone
(the other positions masked). It costs ``N × (#outputs)`` backward passes and exists for tests and
benchmarks.

References: Martens, *New insights and perspectives on the natural gradient method* (JMLR 2020)
for ``F = E[Jᵀ H_out J]``; arXiv:2607.00603 for the forward-mode directional read.
"""

from __future__ import annotations

import copy
import itertools
import math
import types
from collections.abc import Mapping, Sequence

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.func import functional_call, grad, jvp, vmap
from torch.nn import functional as F

from neuromanifold.singular._validate import (
    DTYPE,
    Direction,
    Prepared,
    check_direction,
    check_tensor_output,
    is_captured_write_error,
    name_buffer_writes,
    prepare,
)
from neuromanifold.singular.family import OutputFamily, check_family
from neuromanifold.singular.lane_activations import lane_activations
from neuromanifold.singular.passes import (
    chunks,
    differentiable_kernels,
    lane_chunk,
    line_lanes,
    tangent_keys,
)

__all__ = ["directional_fisher", "directional_fisher_reference"]


def global_mean(total: Tensor, n: int) -> Tensor:
    """``Σ total / Σ n`` over the ranks of the default process group (``total / n`` without one).

    Sums over samples are exact under data parallelism: each rank passes its shard of the probe
    set, the per-rank sums and counts are all-reduced, and the division by the global N happens
    once. With the same data on every rank the result equals the single-process value.
    """
    if dist.is_available() and dist.is_initialized():
        total = total.clone()
        count = torch.tensor([float(n)], dtype=DTYPE, device=total.device)
        dist.all_reduce(total)
        dist.all_reduce(count)
        return total / count[0]
    return total / n


def _device(params: Mapping[str, Tensor]) -> torch.device:
    """Device of the parameters (the read runs where the model lives)."""
    return next(iter(params.values())).device


def _as_direction_list(params: Mapping[str, Tensor], u: object) -> tuple[list[Direction], bool]:
    """Normalise ``u`` (one dict or a list of dicts) into unit directions; report if batched."""
    if isinstance(u, Sequence) and not isinstance(u, str | bytes):
        if len(u) == 0:
            raise ValueError("u is an empty list of directions; expected at least one direction")
        return [check_direction(params, d, name=f"u[{i}]")[0] for i, d in enumerate(u)], True
    return [check_direction(params, u)[0]], False


def _random_op(err: BaseException) -> bool:
    """Whether ``err`` is functorch's randomness error (a random operation met under ``vmap``).

    `prepare` has already refused a forward whose two evaluations differ
    (`neuromanifold.singular._validate.check_repeatable`), so a random operation that reaches
    ``vmap`` draws the same numbers on every call (a generator re-seeded in ``forward``): the
    callers then evaluate it without ``vmap``.
    """
    return "random operation" in str(err)


def _stack_tangents(dirs: Sequence[Direction], keys: Sequence[str], params: Mapping[str, Tensor]):
    """Per key, stack the directions' entries (zero where a direction lacks the key)."""
    return {
        k: torch.stack([d[k] if k in d else torch.zeros_like(params[k]) for d in dirs])
        for k in keys
    }


def _chunk_quadratic(
    model: nn.Module,
    prep: Prepared,
    base: Mapping[str, Tensor],
    keys: Sequence[str],
    family: OutputFamily,
    sl: slice,
    *,
    empirical: bool,
):
    """``q_sum(primal, tangent) = Σ_{i ∈ chunk} q_i(J_i tangent)`` at ``{**base, **primal}``."""
    if empirical and prep.y is None:
        raise ValueError("empirical=True needs labels: pass data as a pair (x, y)")
    rest = {k: v for k, v in base.items() if k not in keys}
    xc = prep.x[sl]
    yc = prep.y[sl] if prep.y is not None else None

    def f(pu: dict[str, Tensor]) -> Tensor:
        # checked inside the jvp: a non-tensor output (a dataclass) fails in jvp itself
        return check_tensor_output(functional_call(model, ({**rest, **pu}, prep.buffers), (xc,)))

    def q_sum(primal: dict[str, Tensor], tangent: dict[str, Tensor]) -> Tensor:
        try:
            out, jv = jvp(f, (primal,), (tangent,))
        except RuntimeError as err:
            if not is_captured_write_error(err):
                raise
            # an in-place write into a buffer: name it (s16 trial X #2, audit BB #1)
            at_base = {**rest, **{k: base[k] for k in keys}}
            raise name_buffer_writes(
                model, lambda bufs: functional_call(model, (at_base, bufs), (xc,)), err
            ) from None
        family.check_output(out)
        if out.shape[0] != xc.shape[0]:
            raise ValueError(
                f"model output has leading dimension {out.shape[0]} for {xc.shape[0]} input "
                f"samples; expected one output row per sample"
            )
        if empirical:
            return family.empirical_quadratic(out, jv, yc).sum()
        return family.quadratic(out, jv).sum()

    return q_sum


def fisher_along_line(
    model: nn.Module,
    prep: Prepared,
    base: Mapping[str, Tensor],
    u: Direction,
    ts: Tensor,
    family: OutputFamily,
    *,
    empirical: bool = False,
    chunk_size: int | None = None,
    t_batch: int = 1,
) -> tuple[Tensor, bool]:
    """``F_u(base + t·u)`` for every t of ``ts`` (float64, shape ``(len(ts),)``).

    Groups of up to ``t_batch`` t-values share one ``vmap`` over the (batched) primal point, which
    removes per-call overhead on small models at the price of ``t_batch ×`` the activation memory
    of a sample chunk. Every lane computes its own primal and tangent, so lanes save overhead
    only: `line_lanes` lowers the group size (down to one t per pass) and splits samples so that
    a pass stays within its lane budget (``LANE_BYTES`` per tensor; on CPU a group of t-lanes at
    most ``SWEEP_LANE_BYTES`` per thread). Parameters downstream of ``u`` carry zero tangents
    (`tangent_keys`). If the model cannot be vmapped over its
    parameters (in-place updates, data-dependent control flow, a random operation drawn from a
    re-seeded generator), the group is recomputed one t at a time. A forward that is really random
    never gets here: `prepare` refused it (`neuromanifold.singular._validate.check_repeatable`).

    Returns:
        ``(values, batched)``: the Fisher values and whether every group ran under ``vmap``.
    """
    if not isinstance(t_batch, int) or isinstance(t_batch, bool) or t_batch < 1:
        raise ValueError(f"t_batch must be a positive int; got {t_batch!r}")
    t_batch, chunk_size = line_lanes(model, prep, t_batch, chunk_size)
    moved = sorted(u)
    keys = tangent_keys(base, moved)
    tangent = {k: u[k] if k in u else torch.zeros_like(base[k]) for k in keys}
    dev = _device(base)
    values = torch.zeros(ts.numel(), dtype=DTYPE, device=dev)
    all_batched = True
    for i in range(0, ts.numel(), t_batch):
        group = ts[i : i + t_batch].to(dev)
        for sl in chunks(prep.n, chunk_size):
            q_sum = _chunk_quadratic(model, prep, base, keys, family, sl, empirical=empirical)

            def at_t(t: Tensor, q_sum=q_sum) -> Tensor:
                point = {k: base[k] for k in keys}  # zero-tangent keys stay un-batched
                point.update({k: base[k] + t * u[k] for k in moved})
                return q_sum(point, tangent)

            with differentiable_kernels():
                part = None
                if group.numel() > 1:
                    try:
                        part = vmap(at_t)(group)
                    except (RuntimeError, NotImplementedError):
                        all_batched = False
                if part is None:
                    part = torch.stack([at_t(t) for t in group])
            values[i : i + group.numel()] += part
    out = global_mean(values, prep.n)
    return out, all_batched and t_batch > 1 and ts.numel() > 1


def fisher_prepared(
    model: nn.Module,
    prep: Prepared,
    base: Mapping[str, Tensor],
    dirs: Sequence[Direction],
    family: OutputFamily,
    *,
    empirical: bool = False,
    chunk_size: int | None = None,
) -> Tensor:
    """Core of `directional_fisher` on already validated float64 inputs.

    Args:
        base: full float64 parameter dict at which the Fisher is evaluated.
        dirs: unit directions (float64 dicts over subsets of ``base``'s keys).

    Returns:
        float64 tensor of shape ``(len(dirs),)``: ``(1/N) Σ_i q_i(J_i u)`` per direction.

    Several directions run as ``vmap`` lanes over the tangents with the primal point un-batched
    (one primal pass per chunk, shared by every lane; GELU and SiLU modules share their
    derivative too, `neuromanifold.singular.lane_activations`); samples are split by
    `lane_chunk`. A
    forward with a random operation (a generator re-seeded in ``forward``, which `prepare` found
    to repeat exactly) cannot run under ``vmap``: its directions then run one at a time.
    """
    keys = tangent_keys(base, set().union(*(d.keys() for d in dirs)))
    primal = {k: base[k] for k in keys}
    tangents = _stack_tangents(dirs, keys, base)
    total = torch.zeros(len(dirs), dtype=DTYPE, device=_device(base))
    chunk_size = lane_chunk(model, prep, len(dirs), chunk_size)
    for sl in chunks(prep.n, chunk_size):
        q_sum = _chunk_quadratic(model, prep, base, keys, family, sl, empirical=empirical)
        with differentiable_kernels():
            part = None
            if len(dirs) > 1:
                try:
                    with lane_activations(model):
                        part = vmap(q_sum, in_dims=(None, 0))(primal, tangents)
                except RuntimeError as err:
                    if not _random_op(err):
                        raise
            if part is None:
                one = [{k: v[j] for k, v in tangents.items()} for j in range(len(dirs))]
                part = torch.stack([q_sum(primal, t) for t in one])
            total = total + part
    return global_mean(total, prep.n)


def directional_fisher(
    model: nn.Module,
    params: Mapping[str, Tensor],
    u: Mapping[str, Tensor] | Sequence[Mapping[str, Tensor]],
    data: Tensor | tuple[Tensor, Tensor],
    family: OutputFamily,
    *,
    empirical: bool = False,
    chunk_size: int | None = None,
) -> Tensor:
    """Directional Fisher ``F_u = uᵀF(θ)u`` at ``params`` by one forward-mode JVP.

    ``F_u = (1/N) Σ_i (J_i u)ᵀ H_out (J_i u)`` (mean over samples; true Fisher unless
    ``empirical=True``, which uses the observed labels ``y`` of ``data = (x, y)``). ``u`` is
    normalised to unit norm first. Float32 models and inputs are evaluated on float64 copies.

    Args:
        model: the network; called as ``functional_call(model, (params, buffers), (x,))``.
        params: parameter values keyed like ``model.named_parameters()`` (missing names: the
            model's own values).
        u: one direction ``dict[str, Tensor]`` or a list of them (batched by ``vmap``).
        data: inputs ``x`` (leading dimension N) or ``(x, y)``.
        family: `Gaussian` or `Categorical`.
        chunk_size: at most this many samples per JVP pass (bounds memory); ``None`` = no
            bound. Passes are split further to keep each tensor within ``LANE_BYTES`` (see
            the module docstring); only the order of the float64 sums depends on the split.

    Returns:
        float64 scalar tensor, or shape ``(n_dirs,)`` when ``u`` is a list.

    >>> import torch
    >>> from neuromanifold.singular.family import Gaussian
    >>> lin = torch.nn.Linear(2, 1, bias=False)
    >>> x = torch.tensor([[1.0, 0.0], [0.0, 3.0]])
    >>> u = {"weight": torch.tensor([[0.0, 1.0]])}
    >>> directional_fisher(lin, dict(lin.named_parameters()), u, x, Gaussian()).item()  # (0+9)/2
    4.5
    """
    family = check_family(family)
    prep = prepare(model, params, data)
    dirs, batched = _as_direction_list(prep.params, u)
    values = fisher_prepared(
        model, prep, prep.params, dirs, family, empirical=empirical, chunk_size=chunk_size
    )
    return values if batched else values[0]


def _unmasked_forward(self: nn.Embedding, input: Tensor) -> Tensor:
    """``nn.Embedding.forward`` without ``padding_idx``: the lookup, with no gradient mask."""
    return F.embedding(
        input,
        self.weight,
        None,
        self.max_norm,
        self.norm_type,
        self.scale_grad_by_freq,
        self.sparse,
    )


def _unmasked_embeddings(model: nn.Module) -> nn.Module:
    """``model``, or a copy of it whose ``nn.Embedding`` modules look up without the pad mask.

    An embedding's ``padding_idx`` leaves its forward unchanged (the pad row is looked up like any
    other) and only zeroes that row's gradient in the backward. The forward-mode read
    differentiates the forward, so the per-sample gradients of the oracle must not be masked. Each
    copied module of exact type ``nn.Embedding`` with a ``padding_idx`` gets an instance
    ``forward`` that calls ``F.embedding`` with ``padding_idx=None``; the attribute itself is kept,
    so a forward that reads it (a pad mask, position ids) computes as in the model. Subclasses of
    ``nn.Embedding`` keep their own ``forward`` (and with it any mask), and ``nn.EmbeddingBag`` is
    left alone: its ``padding_idx`` changes the forward. The copy shares the model's parameters
    and buffers (``functional_call`` replaces them anyway).
    """
    if not any(type(m) is nn.Embedding and m.padding_idx is not None for m in model.modules()):
        return model
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    clone = copy.deepcopy(model, memo=shared)
    for m in clone.modules():
        if type(m) is nn.Embedding and m.padding_idx is not None:
            m.forward = types.MethodType(_unmasked_forward, m)
    return clone


def directional_fisher_reference(
    model: nn.Module,
    params: Mapping[str, Tensor],
    u: Mapping[str, Tensor] | Sequence[Mapping[str, Tensor]],
    data: Tensor | tuple[Tensor, Tensor],
    family: OutputFamily,
    *,
    empirical: bool = False,
    chunk_size: int | None = None,
) -> Tensor:
    """Oracle for `directional_fisher` from explicit per-sample gradients (``vmap(grad)``).

    ``F_u = (1/N) Σ_i Σ_ℓ w_iℓ (∇_θ log p(y_iℓ | x_i, θ) · u)²`` over a label set that integrates
    the label expectation exactly: Gaussian ``y_iℓ = out_i + σ e_ℓ``, ``w = 1``; categorical
    ``y_iℓ = ℓ``, ``w = p_ℓ(x_i)``; empirical: the observed label with ``w = 1``. Categorical
    sequence logits ``(N, ..., C)``: ``ℓ`` runs over (position j, class c) with ``w = p_jc(x_i)``
    and the log-likelihood of position j alone (the scores of distinct positions are uncorrelated,
    so these terms are the whole expectation; a test checks it against the enumerated product
    distribution). Same arguments and return shape as `directional_fisher`; ``chunk_size``
    bounds the samples per ``vmap``. The gradients are the true ones of the forward: an
    ``nn.Embedding``'s ``padding_idx`` row, which torch's backward masks, is differentiated like
    any other row (`_unmasked_embeddings`). Not covered: a forward that runs part of itself under
    ``torch.no_grad()`` — reverse mode stops there and forward mode does not, so for such a model
    this oracle misses that part while `directional_fisher` and finite differences agree.
    """
    family = check_family(family)
    prep = prepare(model, params, data)
    model = _unmasked_embeddings(model)
    dirs, batched = _as_direction_list(prep.params, u)
    if empirical and prep.y is None:
        raise ValueError("empirical=True needs labels: pass data as a pair (x, y)")
    keys = sorted(set().union(*(d.keys() for d in dirs)))
    primal = {k: prep.params[k] for k in keys}
    rest = {k: v for k, v in prep.params.items() if k not in primal}
    tangents = _stack_tangents(dirs, keys, prep.params)

    def loglik(pu: dict[str, Tensor], xi: Tensor, yi: Tensor) -> Tensor:
        out = functional_call(model, ({**rest, **pu}, prep.buffers), (xi.unsqueeze(0),))
        if family.name == "categorical":  # label -1: the position does not count
            yl = yi.unsqueeze(0)
            logp = torch.log_softmax(out, dim=-1).gather(-1, yl.clamp(min=0).unsqueeze(-1))
            return (logp.squeeze(-1) * (yl >= 0)).sum()
        return family.log_likelihood(out, yi.unsqueeze(0))[0]

    per_sample_grad = vmap(grad(loglik), in_dims=(None, 0, 0))
    dev = _device(prep.params)
    total = torch.zeros(len(dirs), dtype=DTYPE, device=dev)
    for sl in chunks(prep.n, chunk_size):
        xc = prep.x[sl]
        n = xc.shape[0]
        with torch.no_grad():
            out = check_tensor_output(functional_call(model, (prep.params, prep.buffers), (xc,)))
        family.check_output(out)
        if empirical:
            if family.name == "categorical":  # observed labels; an ignore index (< 0) is masked
                family.check_labels(out, prep.y[sl])  # type: ignore[attr-defined]
            xs, ys, w = xc, prep.y[sl], torch.ones(n, dtype=DTYPE, device=dev)
        elif family.name == "gaussian":
            m = out[0].numel()
            sigma = float(family.sigma)  # type: ignore[attr-defined]
            eye = torch.eye(m, dtype=out.dtype, device=dev).reshape(m, *out.shape[1:])
            ys = (out.unsqueeze(1) + sigma * eye.unsqueeze(0)).reshape(n * m, *out.shape[1:])
            xs = xc.repeat_interleave(m, dim=0)
            w = torch.ones(n * m, dtype=DTYPE, device=dev)
        elif family.name == "categorical":  # class l at position j, the others masked
            c, pos = out.shape[-1], out.shape[1:-1]
            m = math.prod(pos) * c
            idx = torch.arange(m, device=dev)
            labels = torch.full((m, m // c), -1, dtype=torch.long, device=dev)
            labels[idx, idx // c] = idx % c
            ys = labels.reshape(m, *pos).repeat(n, *([1] * len(pos)))
            xs = xc.repeat_interleave(m, dim=0)
            w = torch.softmax(out, dim=-1).reshape(-1)
        else:
            raise TypeError(f"no reference label set for family {family.name!r}")
        with differentiable_kernels():
            try:
                g = per_sample_grad(primal, xs, ys)
            except RuntimeError as err:
                if not _random_op(err):
                    raise
                # a random operation that repeats exactly (`prepare` refused any other): one
                # sample at a time, without vmap
                rows = [grad(loglik)(primal, xs[i], ys[i]) for i in range(xs.shape[0])]
                g = {k: torch.stack([r[k] for r in rows]) for k in keys}
        for j in range(len(dirs)):
            proj = sum(
                (g[k].reshape(g[k].shape[0], -1) * tangents[k][j].reshape(1, -1)).sum(1)
                for k in keys
            )
            total[j] += (w * proj * proj).sum()
    values = global_mean(total, prep.n)
    return values if batched else values[0]
