"""Exact Chernoff cuts for the categorical checks (`neuromanifold.singular.chernoff`): the
cumulant generating function against enumeration, the tail law ``P(S ≥ cut) ≤ e^{−L}`` against
the exact tail of every label configuration, the cut against a continuous minimisation, and the
power it gives the checks where Bernstein's cut was tens of standard errors (s23 audit TAIL #2)."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.stats import binom
from test_categorical_tail import _bias_model  # the bias-only rare-class model
from torch import nn
from torch.func import functional_call, jvp

from neuromanifold.singular import distributed as dp
from neuromanifold.singular.chernoff import (
    GRID_STEPS,
    TRUNCATIONS,
    applied_cut,
    chernoff_cut,
    lambda_grid,
    null_cgf,
    tail_probability_reference,
    tail_threshold,
    truncation_levels,
)
from neuromanifold.singular.critical_check import critical_check, critical_check_reference
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.minimum_check import (
    FALSE_FLAG_RATE,
    MIN_Z,
    SLOPE_RATE,
    loss_along,
    loss_along_reference,
)
from neuromanifold.singular.read import read

D = torch.float64
CGF_RTOL = 1e-12  # logsumexp against a sum of exponentials, float64
ROUND_RTOL = 1e-12  # the cut against Bernstein's: equal up to rounding at λ_B
POISSON_EXCESS = 1.02  # the grid's cut over the continuous optimum on a Bernoulli sum (1.013)
RTOL = 1e-10  # forward mode against the reverse-mode oracles
CHUNK_RTOL = 1e-12  # the same sums in other chunks or processes


def _enumerated(out: torch.Tensor, jv: torch.Tensor, lam: float, tau: float) -> tuple[float, float]:
    """One sample's ``(log E[exp(λ Σ_t x_t 1{x_t ≤ τ})], Σ_t P(x_t > τ))`` by summing over
    every label sequence (the first) and over every position's classes (the second)."""
    c = out.shape[-1]
    p = torch.softmax(out, -1).reshape(-1, c).tolist()
    a = jv.reshape(-1, c).tolist()
    means = [
        sum(pc * ac for pc, ac in zip(pt, at, strict=True)) for pt, at in zip(p, a, strict=True)
    ]
    x = [[a_c - mean for a_c in at] for at, mean in zip(a, means, strict=True)]
    total = 0.0
    for labels in itertools.product(range(c), repeat=len(p)):
        prob = math.prod(p[t][y] for t, y in enumerate(labels))
        kept = sum(x[t][y] for t, y in enumerate(labels) if x[t][y] <= tau)
        total += prob * math.exp(lam * kept)
    eps = sum(p[t][k] for t in range(len(p)) for k in range(c) if x[t][k] > tau)
    return math.log(total), eps


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 3)])
def test_the_cgf_rows_are_log_mean_exponentials_over_label_sequences(shape) -> None:
    """`null_cgf` of one sample against enumeration, for every level τ (rows: K_τ at each λ,
    then ε_τ), with ``τ = ∞`` plain Chernoff."""
    g = torch.Generator().manual_seed(0)
    out = 4 * torch.randn(shape, dtype=D, generator=g)
    jv = torch.randn(shape, dtype=D, generator=g)
    lams = torch.tensor([-3.0, -0.2, 0.0, 1e-3, 0.7, 5.0], dtype=D)
    fam = Categorical()
    taus = truncation_levels(float(fam.score_bound(out, jv).max()))
    assert taus[0] == math.inf and len(taus) == len(TRUNCATIONS) + 1
    for i in range(shape[0]):
        got = null_cgf(*fam.null_scores(out[i : i + 1], jv[i : i + 1]), lams, taus)
        assert got.shape == (len(taus), len(lams) + 1)
        for row, tau in enumerate(taus):
            for col, lam in enumerate(lams.tolist()):
                want, eps = _enumerated(out[i], jv[i], lam, tau)
                assert float(got[row, col]) == pytest.approx(want, rel=CGF_RTOL, abs=CGF_RTOL)
            assert float(got[row, -1]) == pytest.approx(eps, rel=CGF_RTOL, abs=CGF_RTOL)
    whole = null_cgf(*fam.null_scores(out, jv), lams, taus)
    parts = sum(
        null_cgf(*fam.null_scores(out[i : i + 1], jv[i : i + 1]), lams, taus)
        for i in range(shape[0])
    )
    assert torch.allclose(whole, parts, rtol=CGF_RTOL, atol=CGF_RTOL)
    assert not null_cgf(*fam.null_scores(out[:0], jv[:0]), lams, taus).any()


@pytest.mark.parametrize("confident", [False, True])
def test_rows_that_can_give_no_cut_are_skipped_without_changing_it(confident: bool) -> None:
    """Chunk by chunk with ``log_inv``: the rows whose ε reached e^{−L} keep no K (and are the
    ones `chernoff_cut` skips), ε is summed in full, and the cut equals the one-shot cut. Random
    logits void every truncated row; one class ahead by 30 in every sample voids none."""
    g = torch.Generator().manual_seed(3)
    out = torch.randn(40, 5, dtype=D, generator=g)
    jv = torch.randn(40, 5, dtype=D, generator=g)
    if confident:
        out[:, 0] += 30.0
    fam, log_inv = Categorical(), 6.0
    bound = float(fam.score_bound(out, jv).max())
    lams = lambda_grid(float(fam.quadratic(out, jv).sum()), bound, log_inv)
    taus = truncation_levels(bound)
    full = null_cgf(*fam.null_scores(out, jv), lams, taus)
    rows = torch.zeros_like(full)
    for sl in (slice(0, 7), slice(7, 30), slice(30, 40)):
        got = null_cgf(*fam.null_scores(out[sl], jv[sl]), lams, taus, log_inv=log_inv, into=rows)
        assert got is rows
    assert torch.allclose(rows[:, -1], full[:, -1], rtol=CGF_RTOL, atol=0.0)
    void = rows[:, -1] >= math.exp(-log_inv)
    kept = ~void
    assert torch.allclose(rows[kept], full[kept], rtol=CGF_RTOL, atol=CGF_RTOL)
    assert chernoff_cut(rows, lams, log_inv) == pytest.approx(
        chernoff_cut(full, lams, log_inv), rel=CGF_RTOL
    )
    assert void.tolist() == [False] + [not confident] * len(TRUNCATIONS)


def test_a_chunk_with_nothing_above_tau_adds_the_untruncated_sums() -> None:
    """The rare-jump case below, one sample per chunk: the balanced sample has nothing above
    τ = b/4 … b/256 but its own jumps of 5·10⁻³ lie above b/256, so the rows differ by chunk."""
    out = torch.tensor([[0.0, -9.0], [0.0, 0.0]], dtype=D)
    jv = torch.tensor([[0.0, 1.0], [0.0, 1e-2]], dtype=D)
    fam = Categorical()
    lams = lambda_grid(float(fam.quadratic(out, jv).sum()), 1.0, 8.0)
    taus = truncation_levels(float(fam.score_bound(out, jv).max()))
    full = null_cgf(*fam.null_scores(out, jv), lams, taus)
    rows = null_cgf(*fam.null_scores(out[:1], jv[:1]), lams, taus)
    null_cgf(*fam.null_scores(out[1:], jv[1:]), lams, taus, into=rows)
    assert torch.allclose(rows, full, rtol=CGF_RTOL, atol=CGF_RTOL)
    balanced = null_cgf(*fam.null_scores(out[1:], jv[1:]), lams, taus)
    assert torch.equal(balanced[1:4], balanced[:1].expand(3, -1))  # nothing above b/4 … b/64
    assert not torch.equal(balanced[4], balanced[0])  # its ±5·10⁻³ lie above b/256


def _problem(seed: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Three samples of two positions over three classes (3⁶ label configurations)."""
    g = torch.Generator().manual_seed(seed)
    out = scale * torch.randn(3, 2, 3, dtype=D, generator=g)
    return out, torch.randn(3, 2, 3, dtype=D, generator=g)


def _cut(out: torch.Tensor, jv: torch.Tensor, log_inv: float, taus: list[float] | None = None):
    fam = Categorical()
    variance = float(fam.quadratic(out, jv).sum())
    bound = float(fam.score_bound(out, jv).abs().max())
    lams = lambda_grid(variance, bound, log_inv)
    taus = truncation_levels(bound) if taus is None else taus
    cgf = null_cgf(*fam.null_scores(out, jv), lams, taus)
    return chernoff_cut(cgf, lams, log_inv), tail_threshold(variance, bound, log_inv, 0.0)


@pytest.mark.parametrize("log_inv", [1.0, 2.5, 4.0])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("scale", [0.5, 6.0])
def test_the_cut_bounds_the_exact_tail_on_both_sides_and_beats_bernstein(
    seed: int, scale: float, log_inv: float
) -> None:
    out, jv = _problem(seed, scale)
    for side in (1.0, -1.0):  # the upper tail of S and of −S
        cut, bernstein = _cut(out, side * jv, log_inv)
        assert tail_probability_reference(out, side * jv, cut) <= math.exp(-log_inv)
        assert cut <= bernstein * (1 + ROUND_RTOL)


def test_a_rare_jump_is_union_bounded() -> None:
    """One sample at log-odds −9 (p ≈ 1.2·10⁻⁴) whose rare label jumps by about 1, and one
    balanced sample with jumps of ±5·10⁻³: at L = 8 (e^{−L} = 3.4·10⁻⁴) the rare jump's mass is
    union-bounded, and the truncated rows give a cut far below plain Chernoff's (which must
    cover the jump); the exact tail holds."""
    out = torch.tensor([[0.0, -9.0], [0.0, 0.0]], dtype=D)
    jv = torch.tensor([[0.0, 1.0], [0.0, 1e-2]], dtype=D)
    log_inv = 8.0
    plain, _ = _cut(out, jv, log_inv, taus=[math.inf])
    cut, bernstein = _cut(out, jv, log_inv)
    assert cut < plain / 10 < bernstein
    assert tail_probability_reference(out, jv, cut) <= math.exp(-log_inv)


def test_a_nearly_constant_truncated_sum_reaches_the_normal_floor() -> None:
    """Eight samples with one class ahead by 25 (every other label has p ≈ 1.4·10⁻¹¹) and tangents
    of size 100: b/√V ≈ 10⁵. With the rare jumps union-bounded the rest of the sum is almost
    constant and its cut needs λ far above Bernstein's: the normal optimum's grid points give a
    cut below 0.1 se (the applied cut is then the normal floor), where the points around λ_B
    alone gave 82 se and plain Chernoff 4.2·10⁴ (s24 audit CHERNOFF #1)."""
    out = torch.zeros(8, 3, dtype=D)
    out[:, 0] = 25.0
    jv = 100 * torch.randn(8, 3, dtype=D, generator=torch.Generator().manual_seed(0))
    fam, log_inv = Categorical(), 10.0
    variance, bound = float(fam.quadratic(out, jv).sum()), float(fam.score_bound(out, jv).max())
    lams = lambda_grid(variance, bound, log_inv)
    around_b = GRID_STEPS[1] - GRID_STEPS[0] + 1
    assert len(lams) > around_b and bool((lams[1:] > lams[:-1]).all())
    se = math.sqrt(variance)
    for side in (1.0, -1.0):
        rows = null_cgf(*fam.null_scores(out, side * jv), lams, truncation_levels(bound))
        cut = chernoff_cut(rows, lams, log_inv)
        assert cut < 0.1 * se
        assert tail_probability_reference(out, side * jv, cut) <= math.exp(-log_inv)
        only_b = rows[:, [*range(around_b), -1]]
        assert chernoff_cut(only_b, lams[:around_b], log_inv) > 50 * se
        assert chernoff_cut(rows[:1], lams, log_inv) > 1e4 * se


def test_the_cut_is_the_grid_minimum_of_the_closed_form_chernoff_objective() -> None:
    """A Bernoulli sum (one rare class, p = 10⁻³, N = 30): the cut is ``min_grid (K(λ) + L)/λ``
    with ``K(λ) = N·(log(1 + p(e^λ − 1)) − λp)`` in closed form (the truncated rows are void:
    their ε = Np exceeds e^{−L}), at least the continuous minimum (scipy), and within
    `POISSON_EXCESS` of it (measured: 1.3 %)."""
    p_rare, n, log_inv = 1e-3, 30, 10.0
    out = torch.tensor([[0.0, math.log(p_rare / (1 - p_rare))]] * n, dtype=D)
    jv = torch.tensor([[0.0, 1.0]] * n, dtype=D)
    fam = Categorical()
    variance, bound = float(fam.quadratic(out, jv).sum()), float(fam.score_bound(out, jv).max())
    lams = lambda_grid(variance, bound, log_inv)
    cut, bernstein = _cut(out, jv, log_inv)

    def objective(log_lam: float) -> float:
        lam = math.exp(log_lam)
        cgf = n * (float(np.logaddexp(math.log1p(-p_rare), math.log(p_rare) + lam)) - lam * p_rare)
        return (cgf + log_inv) / lam

    on_grid = min(objective(math.log(lam)) for lam in lams.tolist())
    assert cut == pytest.approx(on_grid, rel=CGF_RTOL)
    best = minimize_scalar(objective, bounds=(-10.0, 10.0), method="bounded").fun
    assert best <= cut <= best * POISSON_EXCESS
    assert cut < bernstein / 2  # Bernstein's is more than twice as high


def test_the_applied_cut_makes_the_exact_pass_only_inside_its_band() -> None:
    """`applied_cut`: normal scores keep ``z·√V``; a bounded sum inside the normal cut or beyond
    Bernstein's keeps Bernstein's and never calls ``rows_of`` (the pass it would cost); between
    them the exact cut is asked for once and applied as ``max(z·√V, min(Bernstein's, exact))``."""
    variance, bound, log_inv, z = 4.0, 0.5, 10.0, 4.0
    bernstein = tail_threshold(variance, bound, log_inv, z)
    calls: list[int] = []

    def rows_of(exact: float):
        def rows(lams: torch.Tensor, taus: list[float]) -> torch.Tensor:
            calls.append(len(taus))
            assert len(taus) == len(TRUNCATIONS) + 1
            out = torch.zeros(len(taus), len(lams) + 1, dtype=D)
            out[0, :-1] = exact * lams - log_inv  # (K + L)/λ = exact at every λ
            out[1:, -1] = 1.0  # truncated rows void
            return out

        return rows

    assert applied_cut(100.0, variance, None, log_inv, z, rows_of(0.0)) == (8.0, False)
    for value in (7.9, bernstein + 1e-9):  # inside the normal cut, beyond Bernstein's
        assert applied_cut(value, variance, bound, log_inv, z, rows_of(0.0)) == (bernstein, False)
    assert calls == []
    value = (8.0 + bernstein) / 2
    for exact, want in ((9.0, 9.0), (1.0, 8.0), (2 * bernstein, bernstein)):
        cut, made = applied_cut(value, variance, bound, log_inv, z, rows_of(exact))
        assert made and cut == pytest.approx(want, rel=CGF_RTOL)
    assert applied_cut(value, variance, bound, log_inv, z, None) == (bernstein, False)
    assert calls == [len(TRUNCATIONS) + 1] * 3


def test_bad_arguments_are_refused() -> None:
    for variance, bound in ((0.0, 1.0), (float("nan"), 1.0), (float("inf"), 1.0), (1.0, -1.0)):
        with pytest.raises(ValueError, match="lambda_grid needs"):
            lambda_grid(variance, bound, 5.0)
    lams = lambda_grid(1.0, 0.5, 5.0)
    assert len(lams) == GRID_STEPS[1] - GRID_STEPS[0] + 1
    rows = torch.zeros(2, len(lams) + 1, dtype=D)
    with pytest.raises(ValueError, match="positive lams"):
        chernoff_cut(rows, -lams, 5.0)
    with pytest.raises(ValueError, match="one K per λ and ε"):
        chernoff_cut(rows[:, 1:], lams, 5.0)
    with pytest.raises(ValueError, match="one K per λ and ε"):
        chernoff_cut(rows[0], lams, 5.0)
    with pytest.raises(ValueError, match="enumerates"):
        tail_probability_reference(torch.zeros(13, 3, dtype=D), torch.zeros(13, 3, dtype=D), 0.0)


class _Square(nn.Module):
    """Logits ``(0, β + a²)`` with a buffer ``β``: along ``a`` at 0 the output's first derivative
    is 0 and its second is ``2`` on the rare class, so the curvature is ``2(p − K/N)`` for ``K``
    rare labels: only the curvature test speaks, through the upper tail of the score along f̈."""

    def __init__(self, p_rare: float) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros(1, dtype=D))
        self.register_buffer("beta", torch.tensor(math.log(p_rare / (1 - p_rare)), dtype=D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        zero = x[:, :1] * 0
        return torch.cat([zero, zero + self.beta + self.a**2], -1)


def _labels(n: int, k: int) -> torch.Tensor:
    y = torch.zeros(n, dtype=torch.long)
    y[:k] = 1
    return y


@pytest.mark.parametrize("p_rare", [0.01, 0.001])
def test_the_curvature_test_keeps_its_rate_at_a_rare_class(p_rare: float) -> None:
    """The exact rate over ``K ∼ Binomial(N, p)``, as in test_categorical_tail.py, for the
    curvature (whose exact cut is the upper tail of the score along f̈)."""
    n, model = 30, _Square(p_rare)
    x, u = torch.zeros(n, 1, dtype=D), {"a": torch.ones(1, dtype=D)}
    rate = 0.0
    for k in range(n + 1):
        check = loss_along(model, {}, u, (x, _labels(n, k)), Categorical())
        assert check["slope"] == 0.0 and not check["not_critical"]
        rate += float(binom.pmf(k, n, p_rare)) * check["curved_down"]
    assert rate <= FALSE_FLAG_RATE
    assert loss_along(model, {}, u, (x, _labels(n, n // 2)), Categorical())["curved_down"]


def test_the_exact_cut_flags_fewer_rare_labels_than_bernstein() -> None:
    """Bias-only model at p = 0.001, N = 30: the slope test flags from K = 3 rare labels where
    Bernstein's cut needed 8; under an alternative with rare-class frequency 0.15 its power is
    the binomial tail ``P(K ≥ 3)`` = 0.85 (Bernstein's: ``P(K ≥ 8)`` = 0.07), and under the
    null the rate stays below `SLOPE_RATE`."""
    p_rare, n, alt = 0.001, 30, 0.15
    model, x = _bias_model(p_rare), torch.zeros(n, 1, dtype=D)
    u = {"bias": torch.tensor([1.0, -1.0], dtype=D)}
    flags = [
        loss_along(model, {}, u, (x, _labels(n, k)), Categorical())["not_critical"]
        for k in range(n + 1)
    ]
    assert flags == [k >= 3 for k in range(n + 1)]
    out = model(x).detach()
    jv = torch.tensor([[1.0, -1.0]] * n, dtype=D) / math.sqrt(2)
    fam = Categorical()
    variance, bound = float(fam.quadratic(out, jv).sum()), float(fam.score_bound(out, jv).max())
    bernstein = tail_threshold(variance, bound, math.log(2 / SLOPE_RATE), MIN_Z)
    slope_sum = [abs(k - n * p_rare) * math.sqrt(2) for k in range(n + 1)]  # |Σ g_i| at K
    assert [s > bernstein for s in slope_sum].index(True) == 8
    power = sum(float(binom.pmf(k, n, alt)) for k in range(n + 1) if flags[k])
    assert power == pytest.approx(float(binom.sf(2, n, alt)), rel=1e-12)
    assert power > 0.8 > 0.1 > float(binom.sf(7, n, alt))
    assert sum(float(binom.pmf(k, n, p_rare)) for k in range(n + 1) if flags[k]) <= SLOPE_RATE


def _confident(wrong_every: int = 1) -> SimpleNamespace:
    """A 2→8→3 tanh network whose last layer is scaled ×1000 (logits up to 1028), 30 inputs and
    wrong labels on every ``wrong_every``-th (the model's own plus one): far from a true
    parameter. Like the s23 audit TAIL case, where Bernstein's cuts left both flags down; here
    they are 2547 se (slope) and 9974 se (curvature) with every label wrong (s24 audit
    CHERNOFF)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    with torch.no_grad():
        model[2].weight.mul_(1e3)
        model[2].bias.mul_(1e3)
    x = torch.randn(30, 2, dtype=D, generator=torch.Generator().manual_seed(1))
    y = model(x).argmax(-1)
    y[::wrong_every] = (y[::wrong_every] + 1) % 3
    g = torch.Generator().manual_seed(2)
    u = {k: torch.randn(v.shape, dtype=D, generator=g) for k, v in model.named_parameters()}
    return SimpleNamespace(model=model, data=(x, y), family=Categorical(), u=u)


def _bernstein_slope_cut(case: SimpleNamespace, x: torch.Tensor, check: dict) -> float:
    """Bernstein's cut for the slope of ``check`` (per sample): the summed variance from its
    standard error, the bound from the output tangent along the unit ``u``."""
    params = dict(case.model.named_parameters())
    norm = math.sqrt(sum(float((t * t).sum()) for t in case.u.values()))
    out, jv = jvp(
        lambda p: functional_call(case.model, p, (x,)),
        (params,),
        ({k: case.u[k] / norm for k in params},),
    )
    bound = float(case.family.score_bound(out.detach(), jv.detach()).max())
    n = check["n"]
    variance = (check["slope_se"] * n) ** 2
    return tail_threshold(variance, bound, math.log(2 / SLOPE_RATE), MIN_Z) / n


def test_a_confident_classifier_off_its_minimum_is_flagged_and_matches_the_oracle() -> None:
    """Both flags are raised; the slope's applied cut is the normal floor, 4 se, where Bernstein's
    is 2547 se (s24 audit CHERNOFF #3)."""
    case = _confident()
    params = dict(case.model.named_parameters())
    fast = loss_along(case.model, params, case.u, case.data, case.family)
    assert fast["not_critical"] and fast["curved_down"]
    assert fast["exact_cuts"] == ["slope", "curvature"]
    assert fast["slope_cut"] < _bernstein_slope_cut(case, case.data[0], fast) / 10
    ref = loss_along_reference(case.model, params, case.u, case.data, case.family)
    chunked = loss_along(case.model, params, case.u, case.data, case.family, chunk_size=7)
    for other, rtol in ((ref, RTOL), (chunked, CHUNK_RTOL)):
        assert (other["not_critical"], other["curved_down"]) == (True, True)
        for key in ("slope_cut", "curvature_cut", "slope", "lowest_curvature"):
            assert other[key] == pytest.approx(fast[key], rel=rtol), key
    # the whole-gradient check: beyond Bernstein's cut with every label wrong (no exact cut),
    # inside it with every third (the exact cut, 4 se, where Bernstein's is 3.2·10⁴)
    for wrong_every, exact in ((1, False), (3, True)):
        data = _confident(wrong_every).data
        whole = critical_check(case.model, params, data, case.family)
        whole_ref = critical_check_reference(case.model, params, data, case.family)
        assert whole["not_critical"] and whole_ref["not_critical"]
        assert whole["exact_cut"] == whole_ref["exact_cut"] == exact
        assert whole_ref["slope_cut"] == pytest.approx(whole["slope_cut"], rel=RTOL)
        assert (whole["slope_cut"] < 5 * whole["slope_se"]) == exact


def test_off_the_band_the_reported_cut_is_bernsteins() -> None:
    """The exact cut is computed only where it can change a flag (between the normal cut and
    Bernstein's): with the model's own labels the slope is inside the normal cut and the
    reported cut is Bernstein's."""
    case = _confident()
    x, _ = case.data
    y = case.model(x).argmax(-1)
    check = loss_along(case.model, {}, case.u, (x, y), case.family)
    assert not check["not_critical"] and abs(check["slope"]) < MIN_Z * check["slope_se"]
    assert check["exact_cuts"] == []
    assert check["slope_cut"] == pytest.approx(_bernstein_slope_cut(case, x, check), rel=RTOL)


def confident_critical() -> SimpleNamespace:
    """Factory for `launch_local`: the confident case for the whole-gradient check, in the exact
    cut's band (every third label wrong)."""
    case = _confident(wrong_every=3)
    return SimpleNamespace(model=case.model, data=case.data, family=case.family)


def test_two_processes_give_the_one_process_exact_cut() -> None:
    case = confident_critical()
    one = read(case.model, case.data, case.family, max_directions=0, progress=False)
    check = one.meta["critical_check"]
    assert check["not_critical"] and check["exact_cut"]
    two = dp.launch_local(
        2,
        "test_chernoff:confident_critical",
        read_kwargs={"progress": False, "max_directions": 0},
    )
    for rank in two:
        got = rank["reading"]["meta"]["critical_check"]
        assert got["not_critical"] and got["exact_cut"]
        for key in ("slope_cut", "slope", "slope_se", "z"):
            assert got[key] == pytest.approx(check[key], rel=CHUNK_RTOL), key
