"""Probe-set size against factor width: the K-FAC factors whose kernel is forced by ``N``.

A K-FAC factor ``M = (1/N) Σ_t x_t x_tᵀ`` of side ``d`` summed from ``R`` rank-one terms that can
differ (its *contributing rows*) has rank at most ``R``. When ``R < d``, at least ``d − R`` of its
null directions exist whatever the model computes: more probe samples would shrink that kernel.
The K-FAC detectors propose candidates from factor kernels (``kfac-A``, ``kfac-G``, ``duality``):
an ``A``-kernel direction (inputs never seen along it) reads flat, a ``G``-kernel direction (no
first-order effect on the output) reads as an order-2 singularity, and on such a factor both can
be properties of the probe set rather than of the model. `rank_limited` lists those factors;
`probe_size_note` says so in one line.

Contributing rows of block ``b`` (``N`` probe samples):

* ``A`` (input side): ``N ×`` the weight-sharing positions (sequence positions, convolution
  output positions), `BlockFactors.a_rank_bound`: each position's input is one term.
* ``G`` (output side): ``N × P_b × r``, with ``P_b`` the positions of ``b`` whose output gradient
  is not identically zero and ``r`` the rank of the output-score columns the factor pass
  back-propagates per sample: ``C − 1`` for exact categorical logits ``(N, C)`` (the columns
  ``√p_c (e_c − p)`` of `neuromanifold.singular.output_scores.hessian_root` satisfy
  ``Σ_c √p_c · column_c = 0``), ``C`` for an exact Gaussian with ``C`` output coordinates per
  sample, ``k`` for ``k`` sampled labels (``fisher == "mc(k)"``); the head block whose ``G`` the
  factor pass takes in closed form (`neuromanifold.singular.factors.output_block_g`) keeps
  `BlockFactors.g_rank_bound`. `BlockFactors.g_rank_bound` counts every position and every
  column, zero or dependent ones included: a sequence-classification head reads only the pooled
  position, so the MLP of the last layer gets ``N·(C − 1)`` rows, not ``N·T·C``. `g_rows`
  measures ``P_b`` on every probe sample, a chunk of samples at a time (one forward and one
  backward pass per chunk of a seeded random output cotangent: a position gets a non-zero
  gradient from it exactly when the output depends on it at first order, up to a measure-zero
  draw) and takes the largest per-sample count (over all ranks of an initialised
  ``torch.distributed`` process group, each with its shard), so ``N · max P_b · r`` bounds the
  rows whichever samples hold the most positions (padding, masks). It costs one more forward
  and backward pass over the probe set, the factor pass taking one backward per score column.
  A block applied to rows flattened over samples and positions (OPT's MLP sees
  ``(N·T, d)``) is counted per sample in sample-major order.

The count bounds the rank; it does not explain every small rank: per-sample contributions that
share directions (e.g. the fixed span of a classifier's weights) leave a kernel that also shrinks
with ``N`` while the count exceeds ``d``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from neuromanifold.singular.blocks import gradient_positions, is_supported_block
from neuromanifold.singular.distributed import all_reduce_max
from neuromanifold.singular.factors import BlockFactors

__all__ = ["PROBE_SAMPLES", "g_rows", "probe_size_note", "rank_limited"]

PROBE_SAMPLES = 16
"""Samples per forward and backward pass of `g_rows` when no ``batch`` is given."""
NOTE_NAMES = 2
"""Factors named in `probe_size_note` (the rest are counted; all are in the list)."""


def _score_rank(family: Any, fisher: str, out: Tensor) -> int:
    """Rank of the output-score columns the factor pass back-propagates per sample (module
    docstring): ``k`` for ``"mc(k)"``; exact Gaussian: the output coordinates per sample; exact
    categorical ``(N, C)``: ``C − 1``."""
    if fisher.startswith("mc(") and fisher.endswith(")"):
        return int(fisher[3:-1])
    per_sample = out[0].numel()
    if "gauss" in type(family).__name__.lower():
        return per_sample
    return max(per_sample - 1, 0)


@torch.inference_mode(False)
@torch.enable_grad()
def g_rows(
    model: nn.Module,
    x: Tensor,
    family: Any,
    factors: Mapping[str, BlockFactors],
    *,
    batch: int = PROBE_SAMPLES,
    seed: int = 0,
) -> dict[str, int]:
    """Contributing rows of each block's ``G`` (module docstring), ``{block: rows}``.

    ``model``: the model the factors were taken on, evaluated as it is (through
    ``torch.func.functional_call`` with detached views of its parameters: nothing is changed,
    nothing but inference tensors is copied); ``x``: the probe inputs (floating inputs in the
    dtype of the model's parameters), every sample of which is run, ``batch`` samples per
    forward and backward pass (the read passes its memory plan's factor batch); ``factors``: its
    `BlockFactors` by block name (``N = n_samples``, the sampling mode ``fisher``,
    ``g_rank_bound``). A block is given
    ``min(g_rank_bound, N · max_n P_b(n) · r)``, with ``max_n P_b(n)`` the largest count over
    every sample of ``x`` (and every rank): an upper bound on the rows, so a factor of full rank
    is never given fewer rows than its side. Blocks the pass does not see as a module call (the
    per-group keys ``"name[g]"`` of a grouped convolution) and the closed-form head keep
    ``g_rank_bound``. Blocks without a ``g_rank_bound`` are left out.

    The pass runs under ``torch.inference_mode(False)`` and ``torch.enable_grad()``, so the
    counts are the same whatever grad mode the caller is in; parameters, buffers and inputs
    created under inference mode are cloned (an inference tensor cannot be saved for the
    backward), the others are used as they are.
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int; got {batch!r}")
    mods = dict(model.named_modules())
    wanted = {n for n in factors if n in mods and is_supported_block(mods[n])}
    params = {
        k: _normal(v.detach()).requires_grad_(v.is_floating_point() or v.is_complex())
        for k, v in model.named_parameters()
    }
    state = {**params, **{k: _normal(b) for k, b in model.named_buffers() if b.is_inference()}}
    dtype = next((p.dtype for p in params.values() if p.is_floating_point()), torch.float64)
    most = dict.fromkeys(wanted, 0)
    heads: set[str] = set()
    sample_out: Tensor | None = None
    outs: dict[str, list[Tensor]] = {n: [] for n in wanted}
    counts: dict[str, Tensor] = {}

    def hook(name: str):
        def fn(mod: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
            if isinstance(output, Tensor) and output.requires_grad:
                outs[name].append(output)

                def record(g: Tensor) -> None:
                    rows = (gradient_positions(mod, g.detach()) != 0).any(-1)
                    b = counts[name].shape[0]
                    if rows.shape[0] % b == 0:  # sample-major, e.g. (N·T, d) flattened (OPT)
                        counts[name] += rows.reshape(b, -1).sum(-1)
                    else:  # not laid out per sample: the mean count per sample, rounded up
                        counts[name] += -(-int(rows.sum()) // b)

                output.register_hook(record)

        return fn

    gen: torch.Generator | None = None
    handles = [mods[n].register_forward_hook(hook(n)) for n in wanted]
    try:
        for lo in range(0, x.shape[0], batch):
            xs = x[lo : lo + batch]
            xs = _normal(xs.to(dtype) if xs.is_floating_point() else xs)
            for n in wanted:
                outs[n] = []
                counts[n] = torch.zeros(xs.shape[0], dtype=torch.long, device=xs.device)
            with torch.enable_grad():
                out = torch.func.functional_call(model, state, (xs,))
                if gen is None:
                    gen = torch.Generator(device=out.device).manual_seed(seed)
                cot = torch.randn(out.shape, generator=gen, dtype=out.dtype, device=out.device)
                targets = [t for ts in outs.values() for t in ts]
                if out.requires_grad and targets:
                    # the hooks record every block output's gradient; ``params`` as the inputs
                    # keeps this valid when an in-place op changed a block output after it was
                    # recorded
                    inputs = [p for p in params.values() if p.requires_grad]
                    torch.autograd.grad((out * cot).sum(), inputs, allow_unused=True)
            heads |= {n for n, ts in outs.items() if any(t is out for t in ts)}
            sample_out = out[:1].detach()  # per-sample output shape, for `_score_rank`
            for n, c in counts.items():
                most[n] = max(most[n], int(c.max()) if c.numel() else 0)
            del out, cot, targets
    finally:
        for h in handles:
            h.remove()
        outs.clear()
    names = sorted(most)  # every rank has the same blocks (the same model)
    most = dict(zip(names, all_reduce_max([most[n] for n in names], x.device), strict=True))
    result: dict[str, int] = {}
    for n, bf in factors.items():
        if bf.g_rank_bound is None:
            continue
        if n not in wanted or (n in heads and bf.fisher != "exact"):
            result[n] = int(bf.g_rank_bound)
            continue
        r = 0 if sample_out is None else _score_rank(family, bf.fisher, sample_out)  # no samples
        rows = bf.n_samples * most[n] * r
        result[n] = min(int(bf.g_rank_bound), rows)
    return result


def _normal(t: Tensor) -> Tensor:
    """``t``, or a clone of it when it is an inference tensor (one made under
    ``torch.inference_mode``, which autograd cannot save for a backward)."""
    return t.clone() if t.is_inference() else t


def rank_limited(
    factors: Mapping[str, BlockFactors], g_counts: Mapping[str, int] | None = None
) -> list[dict[str, Any]]:
    """The factors whose side exceeds their contributing rows, in block order, ``A`` before
    ``G``: JSON-safe dicts ``{"layer", "factor", "dim", "rows", "n_min"}``.

    ``rows``: ``A``: `BlockFactors.a_rank_bound`; ``G``: ``g_counts[block]`` (`g_rows`) when
    given, else `BlockFactors.g_rank_bound` (an upper bound, so fewer factors are listed).
    ``n_min``: the probe-set size at which the rows, growing in proportion to ``N``, reach the
    side, ``⌈dim · N / rows⌉``. A factor with no contributing rows at all (a ``G`` whose block
    never reaches the output) is not listed: its kernel does not depend on ``N``.

    >>> import torch
    >>> from neuromanifold.singular.factors import BlockFactors
    >>> eye = torch.eye(4, dtype=torch.float64)
    >>> bf = BlockFactors("fc", "linear", eye, eye, n_samples=3, has_bias=False,
    ...                   weight_shape=(4, 4), n_positions=1, fisher="exact",
    ...                   a_rank_bound=3, g_rank_bound=6)
    >>> rank_limited({"fc": bf})
    [{'layer': 'fc', 'factor': 'A', 'dim': 4, 'rows': 3, 'n_min': 4}]
    """
    out = []
    for name, bf in factors.items():
        g_count = bf.g_rank_bound if g_counts is None else g_counts.get(name, bf.g_rank_bound)
        for side, mat, rows in (("A", bf.A, bf.a_rank_bound), ("G", bf.G, g_count)):
            dim = int(mat.shape[0])
            if rows is None or rows <= 0 or rows >= dim:
                continue
            n_min = math.ceil(dim * bf.n_samples / rows)
            out.append(
                {"layer": name, "factor": side, "dim": dim, "rows": int(rows), "n_min": n_min}
            )
    return out


def probe_size_note(limited: list[dict[str, Any]]) -> str:
    """One line on the `rank_limited` factors (``""`` when there are none), e.g.
    ``"factor G of 'mlp.up' has 48 contributing rows for 64 dimensions: its kernel directions
    may be probe-size artefacts; read with N well above 32 (where the rows reach the side)"``.

    The largest ``n_min`` is where the count reaches the side, a necessary size only: rows that
    share directions leave a kernel there (module docstring), so the note asks for more.

    >>> note = probe_size_note([{"layer": "fc", "factor": "A", "dim": 4, "rows": 3, "n_min": 4}])
    >>> note.split(": ")[0]
    "factor A of 'fc' has 3 contributing rows for 4 dimensions"
    >>> note.split("; ")[1]
    'read with N well above 4 (where the rows reach the side)'
    """
    if not limited:
        return ""
    named = [
        f"factor {e['factor']} of {e['layer']!r} has {e['rows']} contributing rows for "
        f"{e['dim']} dimensions"
        for e in limited[:NOTE_NAMES]
    ]
    rest = len(limited) - len(named)
    more = f" (and {rest} more factor(s), meta['probe_rank_limited'])" if rest else ""
    its = "its" if len(limited) == 1 else "their"
    n_min = max(int(e["n_min"]) for e in limited)
    return (
        f"{'; '.join(named)}{more}: {its} kernel directions may be probe-size artefacts; read "
        f"with N well above {n_min} (where the rows reach the side)"
    )
