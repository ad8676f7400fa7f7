"""deep_linear at r = 0 with a hidden width 1 that is not every hidden width (s17 trial AE #1).

A hidden width H_{j+1} = 1 makes W_L ⋯ W_1 = b·aᵀ with aᵀ = W_j ⋯ W_1 and b = W_L ⋯ W_{j+1} on
disjoint weights, so K ∝ ‖a‖²·‖b‖² and ∫ K^z is the product of two deep-linear zeta functions at
truth 0: λ = min of the two sides, m = sum of the m of the sides that tie (spec §5 rule 2). The
reference below is written here, not taken from the library: it splits at the first hidden
width 1 and recurses; one layer is regular (λ = H_in·H_out/2, m = 1); two layers use the
Aoyagi–Watanabe reduced-rank formula (spec §8), typed again here. Sides of ≥ 3 layers without a
hidden width 1 have no derivation; for them the reference uses the library's restated (λ, m),
and the library must say that m is not independently verified.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from neuromanifold.singular.closed_forms import deep_linear

# Enumeration of the product rule: the trial checked L ∈ {3, 4} with widths ≤ 4 (416 vectors,
# 30 wrong m); here L up to 5 with the same widths.
MAX_DEPTH = 5
MAX_WIDTH = 4


def _rrr_reference(M: int, H: int, N: int) -> tuple[Fraction, int]:
    """Aoyagi–Watanabe (2005) at true rank 0, as spec §8 states it."""
    if N <= M + H and M <= N + H and H <= M + N:
        b = Fraction(2 * H * (M + N) - (M - N) ** 2 - H**2, 8)
        return (b, 1) if (M + H + N) % 2 == 0 else (b + Fraction(1, 8), 2)
    if M + H < N:
        return Fraction(H * M, 2), 1
    if N + H < M:
        return Fraction(H * N, 2), 1
    return Fraction(M * N, 2), 1


def _product_rule(widths: list[int]) -> tuple[Fraction, int, bool]:
    """(λ, m, m verified) of a deep linear network at truth 0 by the product rule."""
    if len(widths) == 2:  # one layer: K = ‖W‖², regular in H_in·H_out weights
        return Fraction(widths[0] * widths[1], 2), 1, True
    cut = next((j for j in range(1, len(widths) - 1) if widths[j] == 1), None)
    if cut is None:
        if len(widths) == 3:
            return (*_rrr_reference(*widths), True)
        cf = deep_linear(widths, 0)  # no derivation: the restated (λ, m)
        return cf.lam, cf.m, False
    lam_a, m_a, ok_a = _product_rule(widths[: cut + 1])
    lam_b, m_b, ok_b = _product_rule(widths[cut:])
    if lam_a == lam_b:  # two poles of the same order multiply: orders add
        return lam_a, m_a + m_b, ok_a and ok_b
    return (lam_a, m_a, ok_a) if lam_a < lam_b else (lam_b, m_b, ok_b)


# Hand derivations (polar coordinates: ∫ ‖x‖^{2z} dx over x ∈ R^n has one simple pole at −n/2).
@pytest.mark.parametrize(
    ("widths", "lam", "m"),
    [
        # ‖a‖², a ∈ R³: (3/2, 1); ‖W₃c‖², c ∈ R³: polar in c gives −3/2, and for each direction
        # u of c, W₃u is 3 independent linear forms of W₃: another −3/2; (3/2, 2). Tie: m = 3.
        ([3, 1, 3, 3], Fraction(3, 2), 3),
        ([2, 1, 2, 2], Fraction(1), 3),  # the same with 2: (1, 1) · (1, 2)
        ([4, 4, 1, 4], Fraction(2), 3),  # the mirror image with 4: (2, 2) · (2, 1)
        # w₁² · (cᵀa)² · w₄²: cᵀa is a non-degenerate quadric in 4 weights, (1/2, 1); three tie
        ([1, 1, 2, 1, 1], Fraction(1, 2), 3),
    ],
)
def test_trial_examples_by_hand(widths: list[int], lam: Fraction, m: int) -> None:
    cf = deep_linear(widths, 0)
    assert (cf.lam, cf.m) == (lam, m)
    assert cf.m_restated == 2  # the value the library reported before
    assert "rule 2" in cf.caveat and "gives m = 2, which is wrong here" in cf.caveat
    assert "not independently verified" not in cf.caveat


def test_enumeration_against_the_product_rule() -> None:
    checked = differs = 0
    for L in range(3, MAX_DEPTH + 1):
        for ws in itertools.product(range(1, MAX_WIDTH + 1), repeat=L + 1):
            widths = list(ws)
            if 1 not in widths[1:-1]:
                continue
            lam, m, verified = _product_rule(widths)
            cf = deep_linear(widths, 0)
            # λ: the restated formula (unchanged) equals the product rule's
            assert cf.lam == lam, widths
            assert cf.m == m, widths
            assert deep_linear(widths[::-1], 0).m == m, widths  # K is symmetric under transpose
            if not verified:
                assert "not independently verified" in cf.caveat, widths
            elif cf.m != cf.m_restated:
                assert f"gives m = {cf.m_restated}, which is wrong here" in cf.caveat, widths
            else:
                assert cf.caveat == "", widths
            checked += 1
            differs += cf.m != cf.m_restated
    expected = sum(  # outer widths free, at least one hidden width 1
        MAX_WIDTH**2 * (MAX_WIDTH ** (L - 1) - (MAX_WIDTH - 1) ** (L - 1))
        for L in range(3, MAX_DEPTH + 1)
    )
    assert checked == expected
    assert differs > 0  # the family where the restated m is wrong is not empty


def test_tied_piece_without_derivation_is_flagged() -> None:
    # [4, 4, 4, 1] and [1, 4, 4, 4] have no hidden width 1: their m is the restated one
    ws = [4, 4, 4, 1, 4, 4, 4]
    cf, side = deep_linear(ws, 0), deep_linear([4, 4, 4, 1], 0)
    assert cf.lam == side.lam and cf.m == 2 * side.m
    assert "not independently verified" in cf.caveat and "which is wrong here" not in cf.caveat
