"""Tail cuts for sums of per-sample scores: normal, Bernstein's, and exact Chernoff cuts under the
null label distribution of a categorical family (`applied_cut` chooses among them).

The labelled checks (`neuromanifold.singular.minimum_check.loss_along`,
`neuromanifold.singular.critical_check.critical_check`) flag θ0 when a sum of per-position scores

    S = Σ_j x_j(y_j),   x_j(c) = a_jc − Σ_c' p_jc' a_jc'     (a = J w: an output tangent)

over every sample and position ``j`` leaves a band that a true parameter (labels ``y_j ∼ p_j``,
independent) leaves with probability at most ``e^{−L}``. Bernstein's bound (`tail_threshold`)
uses only the summed variance ``V`` and the worst per-sample range ``b``; with a rare class ``b``
is large and the cut is tens to hundreds of standard errors (s23 audit TAIL #2). Under the null
the distribution of every ``x_j`` is known exactly (`Categorical.null_scores`), so two exact
bounds are available.

**Chernoff.** With ``K(λ) = Σ_j log Σ_c p_jc e^{λ x_j(c)}``, Markov's inequality on ``e^{λS}``
gives ``P(S ≥ a) ≤ e^{K(λ) − λa}`` for every ``λ > 0``, so ``a = (K(λ) + L)/λ`` is a cut at rate
``e^{−L}``.

**Rare jumps.** Chernoff's bound is loose when one label of small probability moves ``S`` up by
a lot (a confident classifier's near-boundary sample): ``e^{λS}`` weighs that label by
``e^{λ·jump}``. For a level ``τ``, let ``E`` be the event that some label has ``x_j(y_j) > τ``;
``P(E) ≤ ε_τ = Σ_j Σ_c p_jc 1{x_j(c) > τ}`` (a union bound), and off ``E`` the sum equals
``S_τ = Σ_j x_j(y_j)·1{x_j(y_j) ≤ τ}``, whose generating function ``K_τ`` is exact (the values
above ``τ`` moved to 0). Only upward jumps need the union bound: the cut is one-sided, and the
lower tail is the upper tail of ``−x`` (s24 audit CHERNOFF #2). So ``P(S ≥ a) ≤ ε_τ +
e^{K_τ(λ) − λa}``, and for ``ε_τ < e^{−L}``

    a_τ(λ) = (K_τ(λ) + L_τ)/λ,   L_τ = −log(e^{−L} − ε_τ),     P(S ≥ a_τ(λ)) ≤ e^{−L}.

`chernoff_cut` takes the least of ``a_τ(λ)`` over ``τ ∈ {∞} ∪ {b·4^{−k}, k = 1 … 7}``
(`TRUNCATIONS`; ``τ = ∞`` is plain Chernoff, ``ε = 0``; the small levels serve sequence logits,
whose per-sample ``b`` sums the positions' ranges) and ``λ ∈ Λ``; every pair is a valid cut, and
the set is chosen without the labels (from ``V`` and ``b``), so the least is one too.

**The grid.** `lambda_grid` anchors ``Λ`` at Bernstein's own ``λ_B = s_B/(V + b·s_B/3)`` (``s_B``
Bernstein's cut), at which Bernstein's inequality bounds ``K``: so the cut is at most Bernstein's
(up to rounding). ``Λ`` holds ``λ_B·2^{j/4}``, ``j = −12 … 48`` (a factor 1/8 to 4096: the
optimum of a rare class or a truncated sum lies above ``λ_B``) and, beyond those, the normal
optimum's ``λ_N·2^{j/4}``, ``λ_N = √(2L/V) ≥ λ_B``, ``j = −12 … 24``: a truncated sum that is
nearly constant (every remaining label almost sure) needs λ far above ``λ_B`` when ``b ≫ √V``,
and without them its cut was held at about ``L·b/12000``, hundreds of standard errors (s24 audit
CHERNOFF #1). Where the optimum lies inside ``Λ``, the cut is at most a factor ``(2^{1/8} +
2^{−1/8})/2`` = 1.004 above the continuous optimum where ``K`` is quadratic, and 1.3 % above it on
a Bernoulli sum at p = 10⁻³ (N = 30). The cost is at most ``8 × 98`` log-sum-exps over the classes
per sample and position, and a row costs nothing more once its ``ε_τ`` reaches ``e^{−L}`` or
where nothing lies above its ``τ`` (then ``K_τ = K_∞``), so mostly one or two rows: a pass of its
own (`benchmarks/exact_cuts.py` times it), computed only where it can change a flag.

`tail_probability_reference` is the brute-force oracle of the law: the exact ``P(S ≥ a)`` by
enumerating every label configuration (tiny problems only).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch
from torch import Tensor

from neuromanifold.singular._validate import DTYPE

__all__ = [
    "GRID_STEPS",
    "NORMAL_STEPS",
    "TRUNCATIONS",
    "RowsOf",
    "applied_cut",
    "chernoff_cut",
    "lambda_grid",
    "null_cgf",
    "tail_probability_reference",
    "tail_threshold",
    "truncation_levels",
]

GRID_STEPS = (-12, 48, 4)
"""``(lowest, highest, per octave)``: ``λ_B·2^{j/4}`` for ``j = −12 … 48`` (61 values)."""
NORMAL_STEPS = (-12, 24, 4)
"""The same around the normal optimum ``λ_N = √(2L/V)``: those above `GRID_STEPS`' last."""
TRUNCATIONS = tuple(4.0**k for k in range(1, 8))
"""The rare-jump levels ``τ = b/k``, ``k = 4, 16, …, 16384``, tried besides ``τ = ∞``."""


def tail_threshold(variance: float, bound: float | None, log_inv: float, z: float) -> float:
    """The value beyond which a sum ``S`` of independent mean-zero per-sample scores of summed
    variance ``V`` is flagged: ``z·√V`` (normal scores: a Gaussian family), and for scores
    bounded by ``b`` (`Categorical.score_bound`) the larger of that and Bernstein's

        s* = L·b/3 + √((L·b/3)² + 2·L·V),   P(S ≥ s*) ≤ e^{−L}.

    Normal approximations of a categorical mean fail with a rare class, where one label moves
    the mean by many standard errors (s22 audit MIN #1: 2.7·10⁻⁴ to 3·10⁻² at N = 10–1000
    against 6·10⁻⁵); Bernstein's bound holds at every N. Where the scores are near normal
    (``b`` ≪ ``√V``) it asks for ``√(2L)`` standard errors, 4.55 for the slope's rate, against
    the normal 4: the price of a bound that holds for every label distribution. On ordinary
    classifiers the cut is 5–6 standard errors (5.1–5.8 at N = 400, s23 audit TAIL #2); ``b``
    is the worst case over the classes, so a very confident classifier at small N gets a cut of
    tens to hundreds of standard errors (175 at logits up to 548, N = 30), and a point well off
    the minimum could pass: the rate holds, the power does not. So where a sum lies between
    ``z·√V`` and this cut, `applied_cut` computes the exact cut from the known null label
    distribution (module docstring).

    >>> tail_threshold(1.0, None, 10.0, 4.0), round(tail_threshold(1.0, 0.0, 10.0, 4.0), 4)
    (4.0, 4.4721)
    """
    normal = z * math.sqrt(max(variance, 0.0))
    if bound is None:
        return normal
    a = log_inv * bound / 3.0
    return max(normal, a + math.sqrt(a * a + 2.0 * log_inv * max(variance, 0.0)))


RowsOf = Callable[[Tensor, list[float]], Tensor]
"""``rows_of(λ, τ)``: the all-reduced `null_cgf` rows of a sum at those λ and levels (a pass)."""


def applied_cut(
    value: float,
    variance: float,
    bound: float | None,
    log_inv: float,
    z: float,
    rows_of: RowsOf | None,
) -> tuple[float, bool]:
    """The cut a sum's observed ``value`` is compared with (flagged beyond it), and whether it
    is the exact one: `tail_threshold` (``z·√V``, and with a ``bound`` at least Bernstein's),
    and where ``value`` lies strictly above ``z·√V`` and at most Bernstein's cut — the only band
    where a tighter cut can change the flag — ``max(z·√V, min(Bernstein's, exact))`` with the
    exact cut `chernoff_cut` of ``rows_of(λ, τ)`` at `lambda_grid` and `truncation_levels`
    (one more pass, made only then). ``rows_of`` None: no exact cut (normal scores, or a family
    without `Categorical.null_scores`). The decision uses all-reduced numbers only, so every
    process makes the same calls.

    >>> cut, exact = applied_cut(5.0, 1.0, 0.5, 10.0, 4.0, None)  # no rows: Bernstein's
    >>> round(cut, 4), exact
    (6.4393, False)
    """
    normal = z * math.sqrt(max(variance, 0.0))
    cut = tail_threshold(variance, bound, log_inv, z)
    if bound is None or rows_of is None or not (0.0 < normal < value <= cut):
        return cut, False
    lams = lambda_grid(variance, bound, log_inv)
    exact = chernoff_cut(rows_of(lams, truncation_levels(bound)), lams, log_inv)
    return max(normal, min(cut, exact)), True


def lambda_grid(variance: float, bound: float, log_inv: float) -> Tensor:
    """The positive λ at which `chernoff_cut` evaluates ``K``, ascending: ``λ_B·2^{j/4}``,
    ``j = −12 … 48``, around Bernstein's ``λ_B = s_B/(V + b·s_B/3)`` with ``s_B = L·b/3 +
    √((L·b/3)² + 2LV)``, then the points ``λ_N·2^{j/4}``, ``j = −12 … 24``, around the normal
    optimum ``λ_N = √(2L/V)`` that lie above them. Shape ``(61 … 98,)``, float64. Needs ``V > 0``
    (a sum of constant scores has no tail to cut).

    >>> g = lambda_grid(1.0, 0.0, 8.0)  # b = 0: λ_B = λ_N = √(2L/V) = 4
    >>> float(g[12]), len(g)
    (4.0, 61)
    >>> len(lambda_grid(1.0, 1e6, 8.0))  # b ≫ √V: the normal optimum's points all lie above
    98
    """
    if not (variance > 0.0 and math.isfinite(variance)) or not bound >= 0.0:
        raise ValueError(
            f"lambda_grid needs a finite positive variance and a bound ≥ 0; got V = {variance!r}, "
            f"b = {bound!r}"
        )
    a = log_inv * bound / 3.0
    s_b = a + math.sqrt(a * a + 2.0 * log_inv * variance)
    lam_b = s_b / (variance + bound * s_b / 3.0)
    low, high, per = GRID_STEPS
    grid = lam_b * torch.pow(2.0, torch.arange(low, high + 1, dtype=DTYPE) / per)
    low, high, per = NORMAL_STEPS
    lam_n = math.sqrt(2.0 * log_inv / variance)
    normal = lam_n * torch.pow(2.0, torch.arange(low, high + 1, dtype=DTYPE) / per)
    return torch.cat([grid, normal[normal > grid[-1]]])


def truncation_levels(bound: float) -> list[float]:
    """``[∞, b/4, b/16, …, b/16384]``: the levels ``τ`` of `null_cgf`'s rows."""
    return [math.inf] + [bound / k for k in TRUNCATIONS]


def null_cgf(
    logp: Tensor,
    values: Tensor,
    lams: Tensor,
    taus: list[float],
    *,
    log_inv: float | None = None,
    into: Tensor | None = None,
) -> Tensor:
    """Summed over samples and positions, for each level ``τ`` (rows) the generating function
    ``K_τ(λ) = Σ_j log Σ_c p_jc e^{λ·x_j(c)·1{x_j(c) ≤ τ}}`` at each ``λ`` (columns) and, in the
    last column, the union bound ``ε_τ = Σ_j Σ_c p_jc 1{x_j(c) > τ}`` (the upper tail's).
    ``logp`` and ``values`` as `Categorical.null_scores` gives them, ``(N, M, C)``; returns
    ``(len(taus), len(lams) + 1)`` float64 on the CPU: sums over samples, ready to all-reduce.

    ``into``: running sums of earlier chunks, added to (in place) and returned. With
    ``log_inv``, a row whose ``ε_τ`` (``into``'s plus this chunk's) has reached ``e^{−L}`` gets
    no ``K_τ`` (its columns are left as they are): ``ε`` only grows over chunks and processes,
    so that row can give no cut (`chernoff_cut` skips it), and most rows of an ordinary model
    end there after their first chunk. A row with nothing above its ``τ`` in a chunk adds the
    untruncated row's sums for that chunk.
    """
    out = torch.zeros(len(taus), len(lams) + 1, dtype=DTYPE) if into is None else into
    if logp.numel() == 0:
        return out
    lams = lams.to(values.device, values.dtype)
    rate = 0.0 if log_inv is None else math.exp(-log_inv)
    logp, values = logp.reshape(-1, logp.shape[-1]), values.reshape(-1, values.shape[-1])
    p = logp.exp()
    untruncated: Tensor | None = None
    for row, tau in enumerate(taus):
        big = values > tau
        out[row, -1] += float(p.masked_fill(~big, 0.0).sum())
        if log_inv is not None and float(out[row, -1]) >= rate:
            continue
        if untruncated is not None and not bool(big.any()):
            out[row, :-1] += untruncated  # nothing above τ in this chunk: K_τ = K_∞ here
            continue
        sums = _log_mgf_sums(logp, values.masked_fill(big, 0.0), lams)
        untruncated = sums if untruncated is None and not bool(big.any()) else untruncated
        out[row, :-1] += sums
    return out


BLOCK_ELEMENTS = 1 << 18
"""Positions × classes per block of `_log_mgf_sums` (2 MiB of float64: its temporaries stay in
cache; 61 λ over 512 positions × 5000 classes took 0.87 s in blocks against 7.7 s whole, one
CPU thread)."""


def _log_mgf_sums(logp: Tensor, values: Tensor, lams: Tensor) -> Tensor:
    """``Σ_j logsumexp_c(log p_jc + λ·x_jc)`` for each ``λ``, over the rows ``j`` of ``(M, C)``
    inputs, in blocks of `BLOCK_ELEMENTS`; shape ``(G,)`` float64 on the CPU."""
    step = max(1, BLOCK_ELEMENTS // max(1, logp.shape[-1]))
    total = torch.zeros(len(lams), dtype=DTYPE, device=logp.device)
    for start in range(0, logp.shape[0], step):
        lp, x = logp[start : start + step], values[start : start + step]
        total += torch.stack([torch.logsumexp(lp + lam * x, dim=-1).sum() for lam in lams])
    return total.cpu()


def chernoff_cut(cgf: Tensor, lams: Tensor, log_inv: float) -> float:
    """``min_{τ, λ} (K_τ(λ) + L_τ)/λ`` with ``L_τ = −log(e^{−L} − ε_τ)`` over the rows of
    ``cgf`` (`null_cgf`'s layout: ``K_τ`` at positive ``lams``, then ``ε_τ``) whose ``ε_τ <
    e^{−L}``: a value the sum exceeds with probability at most ``e^{−L}`` (module docstring).
    Row 0 (``ε = 0``) is plain Chernoff.

    >>> lams = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    >>> row = torch.cat([lams**2 / 2, torch.zeros(1, dtype=torch.float64)])
    >>> chernoff_cut(row[None], lams, 2.0)  # a standard normal: λ/2 + L/λ, least at λ = 2
    2.0
    """
    if cgf.ndim != 2 or cgf.shape[1] != len(lams) + 1 or not bool((lams > 0).all()):
        raise ValueError(
            f"chernoff_cut needs positive lams and rows of one K per λ and ε; got cgf of shape "
            f"{tuple(cgf.shape)} for {len(lams)} lams"
        )
    rate = math.exp(-log_inv)
    best = math.inf
    for row in cgf:
        eps = float(row[-1])
        if eps >= rate:
            continue
        level = log_inv if eps == 0.0 else -math.log(rate - eps)
        best = min(best, float(((row[:-1] + level) / lams).min()))
    return best


def tail_probability_reference(out: Tensor, jv: Tensor, threshold: float) -> float:
    """Exact ``P(S ≥ threshold)`` for ``S = Σ_j x_j(y_j)`` with labels ``y ∼ softmax(out)``
    independent at every sample and position, ``x_j(c) = jv_jc − Σ_c' p_jc' jv_jc'``, by
    enumerating all ``C^M`` label configurations of the ``M`` sample-positions (``out``, ``jv``:
    ``(N, ..., C)``). For tests: refuses ``C^M > 10⁶``."""
    c = out.shape[-1]
    p = torch.softmax(out.to(DTYPE), -1).reshape(-1, c)
    a = jv.to(DTYPE).reshape(-1, c)
    centred = a - (p * a).sum(-1, keepdim=True) / p.sum(-1, keepdim=True)
    m = p.shape[0]
    if c**m > 10**6:
        raise ValueError(f"tail_probability_reference enumerates C^M = {c}^{m} configurations")
    total = 0.0
    for labels in itertools.product(range(c), repeat=m):
        prob, s = 1.0, 0.0
        for pos, y in enumerate(labels):
            prob *= float(p[pos, y])
            s += float(centred[pos, y])
        if s >= threshold:
            total += prob
    return total
