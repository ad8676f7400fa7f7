"""Closed forms: spec §8 worked values exactly, and deep-linear λ = reduced-rank λ at L = 2."""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise

import pytest

from neuromanifold.singular.closed_forms import (
    ClosedForm,
    additive,
    deep_linear,
    normal_crossing,
    normal_form,
    one_hidden_node,
    regular,
    rrr,
    width_one_chain,
    width_one_hidden,
)

RANK_RTOL = 1e-10  # Hessian eigenvalues of a float64 polynomial at a true point: O(1) or O(1e-15)
MAX_WIDTH_DLN_VS_RRR = 8  # spec §8: the two λ (and m) agree for M, H, N ≤ 8
# width-1-hidden family checked against the restated λ for L ≤ 7 and outer widths ≤ 8
MAX_DEPTH_WIDTH_ONE_HIDDEN = 7
MAX_OUTER_WIDTH_WIDTH_ONE_HIDDEN = 8


@pytest.mark.parametrize(
    ("shape", "lam", "m", "case"),
    [
        ((5, 3, 5, 0), Fraction(13, 2), 2, "1 (odd)"),
        ((5, 4, 5, 0), Fraction(8), 1, "1 (even)"),
        ((4, 3, 8, 0), Fraction(6), 1, "2"),
    ],
)
def test_rrr_worked_values(shape: tuple[int, int, int, int], lam: Fraction, m: int, case: str):
    cf = rrr(*shape)
    assert cf.lam == lam and cf.m == m and cf.case == case


def test_rrr_cases_3_and_4_by_hand() -> None:
    # Case 3 (N + H < M + r): M=8, H=3, N=4, r=0 -> (HN)/2 = 6, the transpose of case 2.
    assert rrr(8, 3, 4, 0).lam == Fraction(6) and rrr(8, 3, 4, 0).case == "3"
    # Case 4 (M + N < H + r): M=N=2, H=6 -> MN/2 = 2 (the product BA fills all 2x2 matrices).
    assert rrr(2, 6, 2, 0).lam == Fraction(2) and rrr(2, 6, 2, 0).case == "4"
    # Full true rank with H = r = min: regular, λ = (#params of rank-r matrices)/2 = r(M+N-r)/2.
    assert rrr(3, 2, 4, 2).lam == Fraction(2 * (3 + 4 - 2), 2)


@pytest.mark.parametrize(
    ("widths", "rank", "lam"),
    [
        ([4, 4, 4, 4], 0, Fraction(11, 2)),
        ([5, 3, 4, 6], 1, Fraction(8)),
        ([3, 3], 0, Fraction(9, 2)),
        ([1, 1, 1, 1, 1], 0, Fraction(1, 2)),
    ],
)
def test_deep_linear_worked_values(widths: list[int], rank: int, lam: Fraction) -> None:
    assert deep_linear(widths, rank).lam == lam


def test_deep_linear_multiplicities_and_caveats() -> None:
    assert deep_linear([3, 3], 0).m == 1 and deep_linear([3, 3], 0).caveat == ""
    chain = deep_linear([1, 1, 1, 1, 1], 0)
    # s16 trial X #4: the rule is cited in the spec's numbering, and says so
    assert chain.m == 4 and chain.m_restated == 2 and "spec §5 rule 3" in chain.caveat
    for L in range(3, 7):
        c = deep_linear([1] * (L + 1), 0)
        assert (c.lam, c.m) == (width_one_chain(L).lam, width_one_chain(L).m)
    wide = deep_linear([4, 4, 4, 4], 0)
    assert wide.m == wide.m_restated == 2 and "not independently verified" in wide.caveat


# Hand derivations (trial A #5): r = 0 and every hidden width 1 give
# K ∝ ‖W_1‖² · Π_{l=2}^{L−1} w_l² · ‖W_L‖²; a group of n weights has pole n/2 (polar
# coordinates), so λ = min(H_1/2, 1/2 [L ≥ 3], H_{L+1}/2) and m = #groups at that pole.
@pytest.mark.parametrize(
    ("widths", "lam", "m"),
    [
        ([1, 1, 1, 1, 2], Fraction(1, 2), 3),  # w_1, w_2, w_3 scalars at 1/2; ‖W_4‖², n = 2: 1
        ([2, 1, 1, 1, 1], Fraction(1, 2), 3),  # the transpose
        ([1, 1, 1, 1, 3], Fraction(1, 2), 3),  # ‖W_4‖², n = 3: pole 3/2
        ([1, 1, 1, 1, 1], Fraction(1, 2), 4),  # width-1 chain, rule 3: m = L
        ([1, 1, 1, 2], Fraction(1, 2), 2),  # w_1, w_2 at 1/2; ‖W_3‖² at 1
        ([2, 1, 1, 1, 2], Fraction(1, 2), 2),  # only the two middle scalars
        ([3, 1, 1, 3], Fraction(1, 2), 1),  # only the middle scalar
        ([1, 1, 1, 1, 1, 1, 4], Fraction(1, 2), 5),  # w_1 and four middle scalars
    ],
)
def test_width_one_hidden_hand_values(widths: list[int], lam: Fraction, m: int) -> None:
    cf, dl = width_one_hidden(widths), deep_linear(widths, 0)
    assert (cf.lam, cf.m) == (lam, m)
    assert (dl.lam, dl.m) == (lam, m)  # λ from the restated formula, m derived
    if dl.m_restated != m:
        assert "rule 2" in dl.caveat and f"gives m = {dl.m_restated}" in dl.caveat
    else:
        assert dl.caveat == ""  # derived and restated m agree: nothing to flag


@pytest.mark.parametrize(
    ("widths", "lam", "m"),
    [
        ([2, 1, 3], Fraction(1), 1),  # ‖a‖² (n = 2, pole 1) · ‖b‖² (n = 3, pole 3/2)
        ([3, 1, 3], Fraction(3, 2), 2),  # two groups of 3 tie
        ([1, 1, 5], Fraction(1, 2), 1),
    ],
)
def test_width_one_hidden_two_layers_hand_values(widths: list[int], lam: Fraction, m: int) -> None:
    cf = width_one_hidden(widths)
    assert (cf.lam, cf.m) == (lam, m)
    M, _, N = widths
    assert (rrr(M, 1, N, 0).lam, rrr(M, 1, N, 0).m) == (lam, m)


def test_width_one_hidden_agrees_with_rrr_and_restated_lambda() -> None:
    """L = 2: the derivation equals reduced-rank regression with H = 1 (λ and m); L ≥ 3: its λ
    equals the restated formula's, which `deep_linear` keeps."""
    widths = range(1, MAX_OUTER_WIDTH_WIDTH_ONE_HIDDEN + 1)
    for M in widths:
        for N in widths:
            cf, ref = width_one_hidden([M, 1, N]), rrr(M, 1, N, 0)
            assert (cf.lam, cf.m) == (ref.lam, ref.m), (M, N)
            for L in range(3, MAX_DEPTH_WIDTH_ONE_HIDDEN + 1):
                ws = [M, *([1] * (L - 1)), N]
                cf, dl = width_one_hidden(ws), deep_linear(ws, 0)
                assert cf.lam == dl.lam == Fraction(1, 2), ws
                assert dl.m == cf.m == (L - 2) + (M == 1) + (N == 1), ws


def test_width_one_hidden_errors() -> None:
    with pytest.raises(ValueError, match="every hidden width must be 1"):
        width_one_hidden([1, 2, 1, 1])
    with pytest.raises(ValueError, match="at least 3 widths"):
        width_one_hidden([1, 1])
    with pytest.raises(ValueError, match=r"widths\[2\] must be an int >= 1"):
        width_one_hidden([1, 1, 0])


def _widths(max_layers: int, max_width: int):
    """Every width vector of 3 to ``max_layers`` layers with widths in 1..``max_width``."""
    from itertools import product

    for n in range(4, max_layers + 2):
        yield from (list(ws) for ws in product(range(1, max_width + 1), repeat=n))


def test_deep_linear_lambda_is_the_rank_shift_of_its_reduced_widths() -> None:
    """λ(widths, r) = r(H_1 + H_{L+1} − r)/2 + λ(widths − r, 0) for every width vector with
    widths − r ≥ 1 (L = 3..4, widths ≤ 5; s25 audit TRIPLE): the regular part of a generic true
    point plus the reduced network at truth 0, the identity the rank-shift m rests on."""
    checked = 0
    for ws in _widths(4, 5):
        for r in range(1, min(ws)):
            shift = Fraction(r * (ws[0] + ws[-1] - r), 2)
            assert deep_linear(ws, r).lam == shift + deep_linear([h - r for h in ws], 0).lam, ws
            checked += 1
    assert checked > 1000


def test_deep_linear_m_at_rank_r_is_at_least_the_derived_m_of_the_reduced_widths() -> None:
    """m(widths, r) ≥ m(widths − r, 0) where the latter is derived (a hidden 1, no restated
    tied piece), with the caveat naming the bound where the restated m is below it; before,
    [2, 2, 2, 2] at r = 1 reported the restated m = 2 (s25 audit TRIPLE #1: m ≥ 3)."""
    raised = 0
    for ws in _widths(4, 5):
        for r in range(1, min(ws)):
            reduced = deep_linear([h - r for h in ws], 0)
            if not any(h - r == 1 for h in ws[1:-1]) or "not independently" in reduced.caveat:
                continue
            c = deep_linear(ws, r)
            assert c.m >= reduced.m, (ws, r, c, reduced)
            if reduced.m > c.m_restated:
                raised += 1
                assert c.m == reduced.m and f"m ≥ {reduced.m}" in c.caveat, (ws, r, c)
                assert "lower bound" in c.caveat and f"gives m = {c.m_restated}" in c.caveat
    assert raised > 50
    c = deep_linear([2, 2, 2, 2], 1)
    assert (c.lam, c.m, c.m_restated) == (Fraction(2), 3, 2)
    assert deep_linear([4, 4, 4, 4], 3).m == 3  # the assembly's m in docs/triple.md §5


@pytest.mark.parametrize(
    ("widths", "rank"), [([2, 2, 2, 2], 1), ([4, 4, 4, 4], 3), ([3, 2, 3, 3], 1)]
)
def test_a_generic_true_point_has_the_rank_shifts_regular_coordinates(widths, rank) -> None:
    """The rank shift's regular part, checked numerically: at a generic true point of rank r
    (each W_j of rank r on one path, T = W_L ⋯ W_1), the Hessian of K = ‖W_L ⋯ W_1 − T‖² has
    rank r(H_1 + H_{L+1} − r), the 2·shift of the λ identity above (the reduced network at truth
    0 adds nothing at second order: its product has degree ≥ 3 in its own coordinates)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    d = torch.float64
    mats = []
    for a, b in pairwise(widths):
        left = torch.randn(b, rank, dtype=d, generator=gen)
        right = torch.randn(rank, a, dtype=d, generator=gen)
        mats.append((left, right))
    # one common path: W_j = B_j C_j with C_j B_{j-1} invertible r × r (generic)
    ws0 = [left @ right for left, right in mats]
    shapes = [w.shape for w in ws0]
    flat0 = torch.cat([w.reshape(-1) for w in ws0])
    target = ws0[0]
    for w in ws0[1:]:
        target = w @ target

    def k(flat: torch.Tensor) -> torch.Tensor:
        parts = torch.split(flat, [a * b for a, b in shapes])
        prod = parts[0].reshape(shapes[0])
        for p, sh in zip(parts[1:], shapes[1:], strict=True):
            prod = p.reshape(sh) @ prod
        return ((prod - target) ** 2).sum()

    hess = torch.autograd.functional.hessian(k, flat0)
    ev = torch.linalg.eigvalsh(hess)
    rank_h = int((ev > RANK_RTOL * ev.max()).sum())
    assert rank_h == rank * (widths[0] + widths[-1] - rank), ev


def test_deep_linear_equals_rrr_for_all_three_width_shapes() -> None:
    checked = 0
    for M in range(1, MAX_WIDTH_DLN_VS_RRR + 1):
        for H in range(1, MAX_WIDTH_DLN_VS_RRR + 1):
            for N in range(1, MAX_WIDTH_DLN_VS_RRR + 1):
                for r in range(min(M, H, N) + 1):
                    a, b = rrr(M, H, N, r), deep_linear([M, H, N], r)
                    assert (a.lam, a.m) == (b.lam, b.m), (M, H, N, r)
                    checked += 1
    widths = range(1, MAX_WIDTH_DLN_VS_RRR + 1)
    assert checked == sum(min(M, H, N) + 1 for M in widths for H in widths for N in widths)


def test_normal_forms_crossings_additive_regular() -> None:
    assert (normal_form(3).lam, normal_form(3).m) == (Fraction(1, 6), 1)
    assert (regular(7).lam, regular(7).m) == (Fraction(7, 2), 1)
    assert (additive([2, 3], regular_dims=2).lam, additive([2, 3]).m) == (
        Fraction(1, 4) + Fraction(1, 6) + 1,
        1,
    )
    assert (normal_crossing([1, 1]).lam, normal_crossing([1, 1]).m) == (Fraction(1, 2), 2)
    assert (normal_crossing([1, 2]).lam, normal_crossing([1, 2]).m) == (Fraction(1, 4), 1)
    assert (normal_crossing([3, 1, 3]).lam, normal_crossing([3, 1, 3]).m) == (Fraction(1, 6), 2)
    assert (width_one_chain(5).lam, width_one_chain(5).m) == (Fraction(1, 2), 5)


@pytest.mark.parametrize(
    ("act", "lam", "m"),
    [
        ("relu", Fraction(1, 2), 2),
        ("gelu", Fraction(1, 2), 2),
        ("tanh", Fraction(1, 2), 2),
        ("silu", Fraction(1, 2), 2),
        ("relu2", Fraction(1, 4), 1),
        (3, Fraction(1, 6), 1),
    ],
)
def test_one_hidden_node(act: str | int, lam: Fraction, m: int) -> None:
    cf = one_hidden_node(act)
    assert (cf.lam, cf.m) == (lam, m)


def test_to_dict_round_trip() -> None:
    cf = deep_linear([1, 1, 1, 1], 0)
    d = cf.to_dict()
    assert d["lambda"] == "1/2" and d["lambda_float"] == 0.5 and d["m"] == 3
    assert ClosedForm.from_dict(d) == cf
    assert rrr(5, 3, 5, 0).to_dict()["lambda"] == "13/2"


@pytest.mark.parametrize(
    ("widths", "rank", "m", "status"),
    [
        ([1, 1, 1, 1, 2], 0, 3, "exact"),  # derived: the width-1 pieces' product rule
        ([2, 2, 2, 2], 1, 3, "lower_bound"),  # one true point's m (rank shift)
        ([4, 4, 4, 4], 0, 2, "restated"),  # the literature formula, unverified
        ([5, 3], 0, 1, "exact"),  # one layer: regular
        ([3, 3, 3, 1, 3], 0, 3, "restated"),  # product rule, a tied piece's m restated
    ],
)
def test_m_status_says_what_m_is(widths: list[int], rank: int, m: int, status: str) -> None:
    """s32 trial CELLS #4: a lower bound sat in ``m`` with only the caveat's prose to say so."""
    cf = deep_linear(widths, rank)
    assert (cf.m, cf.m_status) == (m, status)
    assert ClosedForm.from_dict(cf.to_dict()) == cf
    old = {k: v for k, v in cf.to_dict().items() if k != "m_status"}  # written before the field
    assert ClosedForm.from_dict(old).m_status == status


def test_m_status_is_checked_on_load() -> None:
    assert rrr(5, 3, 5, 0).m_status == "exact"
    with pytest.raises(ValueError, match="m_status must be exact, lower_bound or restated"):
        ClosedForm.from_dict({**rrr(5, 3, 5, 0).to_dict(), "m_status": "guess"})


def test_errors() -> None:
    with pytest.raises(ValueError, match=r"r must satisfy 0 <= r <= min\(M, H, N\) = 3"):
        rrr(5, 3, 5, 4)
    with pytest.raises(ValueError, match="M must be an int >= 1"):
        rrr(0, 3, 5, 0)
    with pytest.raises(TypeError, match="H must be an int"):
        rrr(5, 3.0, 5, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="widths must list at least 2"):
        deep_linear([3], 0)
    with pytest.raises(ValueError, match="rank must satisfy"):
        deep_linear([3, 2, 3], 3)
    with pytest.raises(ValueError, match="activation must be one of"):
        one_hidden_node("sigmoid")
    with pytest.raises(ValueError, match="orders must be a non-empty"):
        normal_crossing([])
    with pytest.raises(ValueError, match=r"orders\[1\] must be an int >= 1"):
        additive([2, 0])
    with pytest.raises(ValueError, match="activation must be an int >= 1"):
        one_hidden_node(0)
    with pytest.raises(ValueError, match="d must be an int >= 0"):
        regular(-1)
    with pytest.raises(ValueError, match="depth must be an int >= 1"):
        width_one_chain(0)
    with pytest.raises(TypeError, match="k must be an int >= 1"):
        normal_form(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="regular_dims must be an int >= 0"):
        additive([2], regular_dims=-2)
