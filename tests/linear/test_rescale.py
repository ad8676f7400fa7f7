"""The rescaling lemma (spec §3, §7.5) and balanced FC factorisations."""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear import (
    FC,
    LCN,
    delta,
    fc_balanced_params,
    fc_delta,
    fc_mu,
    lemma_scalings,
    lemma_squared_norms,
    mu,
    rescale_to_delta,
    sq_norms,
)

ATOL_EXACT = 1e-12
ATOL_INVARIANT = 1e-9  # spec §7.5, relative to max(1, |δ|)
ATOL_PRODUCT = 1e-12  # |Πλ − 1|, spec §7.5
RTOL_NORM_PRODUCT = 1e-12  # Π‖w_l‖² is kept by a rescaling with Πλ = 1 (relative)


def test_exact_example() -> None:
    x = lemma_squared_norms([1.0, 2.0, 3.0], [1.0, -2.0])
    np.testing.assert_allclose(x, [2.0, 3.0, 1.0], rtol=0, atol=ATOL_EXACT)
    lam = lemma_scalings([1.0, 2.0, 3.0], [1.0, -2.0])
    np.testing.assert_allclose(
        lam, [np.sqrt(2), np.sqrt(1.5), 1 / np.sqrt(3)], rtol=0, atol=ATOL_EXACT
    )


def test_reference_values_section6() -> None:
    # ‖w‖² = (5, 10) with δ = 5 is already consistent: x = (5, 10); δ = 0 gives x = √50 twice
    np.testing.assert_allclose(
        lemma_squared_norms([5.0, 10.0], [5.0]), [5.0, 10.0], rtol=0, atol=ATOL_EXACT
    )
    np.testing.assert_allclose(
        lemma_squared_norms([5.0, 10.0], [0.0]), [np.sqrt(50)] * 2, rtol=0, atol=ATOL_EXACT
    )


@pytest.mark.parametrize("seed", range(6))
def test_random_cases(seed: int) -> None:
    rng = np.random.default_rng(seed)
    L = int(rng.integers(2, 7))
    a = rng.uniform(1e-3, 10.0, size=L)
    d = rng.standard_normal(L - 1) * rng.choice([1e-3, 1.0, 1e2, 1e3])
    lam = lemma_scalings(a, d)
    assert np.all(lam > 0)
    assert abs(np.prod(lam) - 1) < ATOL_PRODUCT
    np.testing.assert_allclose(
        np.diff(lam**2 * a), d, rtol=0, atol=ATOL_INVARIANT * max(1.0, np.max(np.abs(d)))
    )


def test_balanced_gives_equal_norms() -> None:
    x = lemma_squared_norms([0.5, 3.0, 7.0, 2.0], np.zeros(3))
    np.testing.assert_allclose(x, np.full(4, (0.5 * 3 * 7 * 2) ** 0.25), rtol=0, atol=ATOL_EXACT)


def test_single_layer() -> None:
    np.testing.assert_array_equal(lemma_scalings([4.0], []), [1.0])
    np.testing.assert_array_equal(lemma_squared_norms([4.0], []), [4.0])


def _naive_x(a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The cancellation-prone variant of spec §3: evaluate (t + c) + D_l, bisection on t."""
    D = np.concatenate([[0.0], np.cumsum(d)])
    c = -D.min()
    P = np.prod(a)
    lo, hi = 0.0, 1.0
    while np.prod((hi + c) + D) < P:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.prod((mid + c) + D) < P:
            lo = mid
        else:
            hi = mid
    return (hi + c) + D


def test_large_delta_no_cancellation() -> None:
    """δ = (1e3, −2e3, 5e2): the offset-first solver keeps |Πλ − 1| < 1e-12 (spec §3 pitfall)."""
    d = np.array([1e3, -2e3, 5e2])
    rng = np.random.default_rng(11)
    worst_ours, worst_naive = 0.0, 0.0
    for _ in range(20):
        a = rng.uniform(0.1, 5.0, size=4)
        lam = lemma_scalings(a, d)
        worst_ours = max(worst_ours, abs(np.prod(lam) - 1))
        worst_naive = max(worst_naive, abs(np.prod(np.sqrt(_naive_x(a, d) / a)) - 1))
    assert worst_ours < ATOL_PRODUCT
    # the pitfall is real: the naive evaluation is orders of magnitude worse on the same inputs
    assert worst_naive > 1e3 * max(worst_ours, 1e-16)


RTOL_SMALL_INVARIANT = 1e-12  # a small δ_l next to a large one, relative to |δ_l| itself


@pytest.mark.parametrize("big", [-1e8, -1e12, -1e16, 1e8])
def test_small_invariant_after_a_large_one(big: float) -> None:
    """s15 trial R #1: offsets taken as differences of the running sums ``D`` kept only
    ulp(|D|) of δ₂ = 0.3 after δ₁ = −1e8 (x₃ − x₂ = 0.29999999702; 0 at −1e16). The layers
    with small squared norms are exact now: ``x₃ − x₂ = δ₂`` to 1e-12 of δ₂ whenever both lie
    below |δ₁| (for δ₁ > 0 the layers after it are the large ones)."""
    x = lemma_squared_norms([1.0, 1.0, 1.0], [big, 0.3])
    if big < 0:
        assert abs((x[2] - x[1]) - 0.3) <= RTOL_SMALL_INVARIANT * 0.3
    np.testing.assert_allclose(np.diff(x), [big, 0.3], rtol=1e-15 * abs(big) / 0.3 + 1e-12)
    assert abs(np.prod(x) - 1.0) < ATOL_PRODUCT


def test_offsets_are_exact_sums_from_the_minimum() -> None:
    """``e_l`` is the correctly rounded sum of the δ's between the minimising layer and l,
    also when float cumulative sums misplace the minimum (a near tie)."""
    from neuromanifold.linear.rescale import _offsets

    d = np.array([1e16, -1e16, 1.0, -2.0])  # D = (0, 1e16, 0, 1, −1): minimum at the last layer
    np.testing.assert_array_equal(_offsets(d), [1.0, 1e16 + 1.0, 1.0, 2.0, 0.0])
    d = np.array([0.1, 0.2, -0.3])  # D_3 = 0.1 + 0.2 − 0.3 = 0 exactly; floats give 5.6e-17
    e = _offsets(d)
    assert e.min() == 0.0 and np.all(e >= 0)


def test_rescale_to_delta_keeps_mu() -> None:
    rng = np.random.default_rng(3)
    arch = LCN(((2, 2), (3, 2), (2, 2)), ((2, 1), (1, 2)), dim=2)
    theta = [rng.standard_normal(f) for f in arch.filters]
    target = np.array([4.0, -1.5])
    new = rescale_to_delta(theta, target)
    np.testing.assert_allclose(mu(arch, new), mu(arch, theta), rtol=0, atol=ATOL_EXACT)
    np.testing.assert_allclose(delta(new), target, rtol=0, atol=ATOL_INVARIANT)
    assert np.prod(sq_norms(new)) == pytest.approx(
        np.prod(sq_norms(theta)), rel=RTOL_NORM_PRODUCT, abs=0
    )


def test_fc_balanced_params() -> None:
    rng = np.random.default_rng(4)
    arch = FC((4, 3, 2, 5))
    W = rng.standard_normal((5, 2)) @ rng.standard_normal((2, 4))
    for gen in (None, rng):
        Ws = fc_balanced_params(arch, W, rng=gen)
        np.testing.assert_allclose(fc_mu(arch, Ws), W, rtol=0, atol=ATOL_EXACT * np.max(np.abs(W)))
        for D in fc_delta(Ws):
            np.testing.assert_allclose(D, 0.0, rtol=0, atol=ATOL_EXACT * np.max(np.abs(W)))


@pytest.mark.parametrize(
    ("a", "d", "match"),
    [
        ([], [], r"sq_norms has shape \(0,\)"),
        ([[1.0]], [], "sq_norms has shape"),
        ([1.0, 0.0], [1.0], "finite positive squared norms"),
        ([1.0, np.inf], [1.0], "finite positive"),
        ([1.0, 2.0], [1.0, 2.0], r"delta has shape \(2,\): expected \(1,\)"),
        ([1.0, 2.0], [np.nan], "delta.*finite"),
    ],
)
def test_lemma_errors(a, d, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        lemma_scalings(a, d)


def test_fc_balanced_rank_test_is_scale_free() -> None:
    """Trial D #8: whether W factors through width 1 does not depend on its scale. A full-rank W
    of size 1e-13 was accepted (absolute threshold) and the factorisation was 41 % off; a rank-1
    W factors at every scale, to relative accuracy."""
    rng = np.random.default_rng(0)
    arch = FC((3, 1, 3))
    full = rng.standard_normal((3, 3))
    rank1 = np.outer(rng.standard_normal(3), rng.standard_normal(3))
    for c in (1e-13, 1.0, 1e13):
        with pytest.raises(ValueError, match=r"W has rank 3 > min\(widths\) = 1"):
            fc_balanced_params(arch, c * full)
        W = c * rank1
        Ws = fc_balanced_params(arch, W)
        np.testing.assert_allclose(fc_mu(arch, Ws), W, rtol=0, atol=ATOL_EXACT * np.max(np.abs(W)))
    zero = fc_balanced_params(arch, np.zeros((3, 3)))  # rank 0 factors (all layers zero)
    assert all(not np.any(w) for w in zero)


def test_balanced_errors() -> None:
    arch = FC((3, 1, 3))
    with pytest.raises(ValueError, match=r"W has shape \(2, 3\): expected \(3, 3\)"):
        fc_balanced_params(arch, np.ones((2, 3)))
    with pytest.raises(ValueError, match="rank 3 > min\\(widths\\) = 1"):
        fc_balanced_params(arch, np.eye(3))
    with pytest.raises(TypeError, match="expected an FC"):
        fc_balanced_params(LCN((2, 2), (1,)), np.eye(3))
    with pytest.raises(ValueError, match="theta layer 1 is the zero filter"):
        rescale_to_delta([np.zeros(2), np.ones(2)], [0.0])


# exp of a logarithm of size ~450 (the log-space λ below) carries ~450ε ≈ 1e-13 relative error
RTOL_LOG_SCALE = 1e-12


def test_lemma_underflow_raises_or_is_evaluated_in_logs() -> None:
    """Squared norms 1e-200, δ = (1e-3, 1e-3) (user trial A #6): x_1 = t* ≈ 5e-595 underflows.

    ``t(t + 1e-3)(t + 2e-3) = 1e-600`` gives ``t* = 5e-595 (1 + O(t*))``, so ``x`` is not
    representable, but ``λ = (√(t*/a), √(1e-3/a), √(2e-3/a))`` is: it must come out exactly so
    (``λ > 0``, ``Π λ = 1``), not with ``λ_1 = 0``.
    """
    a, d = [1e-200] * 3, [1e-3, 1e-3]
    with pytest.raises(
        ValueError,
        match=r"lemma_squared_norms\(sq_norms=\[1e-200, 1e-200, 1e-200\], delta=.*"
        r"not representable",
    ):
        lemma_squared_norms(a, d)
    lam = lemma_scalings(a, d)
    log_t = np.log(5.0) - 595 * np.log(10.0)
    want_log = 0.5 * (np.array([log_t, np.log(1e-3), np.log(2e-3)]) - np.log(1e-200))
    np.testing.assert_allclose(lam, np.exp(want_log), rtol=RTOL_LOG_SCALE, atol=0)
    assert np.all(lam > 0) and abs(np.prod(lam) - 1) < ATOL_PRODUCT
    # scalings that are themselves out of range: λ_1 = √(a_2 a_3 / (e_2 e_3)) ≈ 1e-600
    with pytest.raises(
        ValueError,
        match=r"lemma_scalings\(sq_norms=\[1e-300, 1e-300, 1e-300\], "
        r"delta=\[1e\+300, 1e\+300\]\).*not representable",
    ):
        lemma_scalings([1e-300] * 3, [1e300, 1e300])


@pytest.mark.parametrize("seed", range(4))
def test_lemma_scalings_direct_at_normal_scales(seed: int) -> None:
    """At normal scales λ is the direct √(x / a) of the cancellation-safe x (no log detour)."""
    rng = np.random.default_rng(seed)
    L = int(rng.integers(2, 6))
    a = rng.uniform(1e-3, 10.0, size=L)
    d = rng.standard_normal(L - 1) * rng.choice([1e-3, 1.0, 1e3])
    np.testing.assert_array_equal(lemma_scalings(a, d), np.sqrt(lemma_squared_norms(a, d) / a))
