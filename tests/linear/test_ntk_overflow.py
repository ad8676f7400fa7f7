"""`ntk` refuses a K that overflows float64, and stays exact just below the edge.

s19 trial AL S1: ``ntk`` (methods "auto" and "gemm") returned ``inf`` and even ``NaN`` entries
(``inf − inf``) with only a numpy RuntimeWarning, while ``method="diagonal"`` and
``ntk_closed_form`` raised ValueError. Now it raises a ValueError that names ``ntk``, says ``K``
is not representable, and says how to rescale; no numpy warning escapes. (``mu`` still returns
``inf``: ``gradient_descent`` detects divergence by it.)
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from neuromanifold.linear import LCN, _compiled, ntk, ntk_reference
from neuromanifold.linear.ntk import _use_diagonal, complement_products

EPS = np.finfo(np.float64).eps
needs_kernel = pytest.mark.skipif(
    not _compiled.available(), reason="the compiled LCN kernel was not built here"
)

# The trial's case: L = 6, k = 8, strides 2 (n_v = 442, "auto" takes the compiled kernel's
# route, whose overflow pre-check sends it to J Jᵀ, where inf − inf made 20 NaN entries).
DEEP = LCN((8,) * 6, (2,) * 5)
DEEP_THETA = [np.array([1e40, -1e40] * 4)] * 6


def _no_warning(f, *args, **kwargs):
    """Call ``f`` with every warning turned into an error: an overflow must not warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return f(*args, **kwargs)


@pytest.mark.parametrize(
    ("arch", "theta", "method", "degree"),
    [
        (DEEP, DEEP_THETA, "auto", 10),
        (DEEP, DEEP_THETA, "gemm", 10),
        (LCN((3, 2), (2,)), [[1e200, 1, 1], [1e200, 1]], "auto", 2),  # J finite, K = inf
        (LCN((2, 2), (1,)), [[1e200, 1e200], [1e200, -1e200]], "gemm", 2),
        (LCN(((2, 2), (2, 2)), ((1, 1),), dim=2), [np.full((2, 2), 1e160)] * 2, "auto", 2),
    ],
)
def test_ntk_that_overflows_is_refused(arch: LCN, theta: list, method: str, degree: int) -> None:
    with pytest.raises(ValueError, match=r"^ntk: K = Jμ Jμᵀ is not representable in float64") as e:
        _no_warning(ntk, arch, theta, method=method)
    msg = str(e.value)
    assert f"rescale θ ↦ cθ with c < 1: K is homogeneous of degree 2(L − 1) = {degree}" in msg
    big = max(float(np.max(np.abs(np.asarray(w, dtype=np.float64)))) for w in theta)
    assert f"largest |coefficient| of θ {big:.3g}" in msg


@needs_kernel
def test_the_trial_case_goes_through_the_kernel_pre_check() -> None:
    """The refused DEEP case is the auto route's fallback: kernel chosen, pre-check fails."""
    assert _use_diagonal(DEEP, "auto")
    R = complement_products(DEEP, DEEP_THETA)
    assert all(np.isfinite(r).all() for r in R)
    assert not _compiled.fits_running_sums(R, [8] * 6)


@pytest.mark.parametrize("method", ["auto", "gemm"])
def test_ntk_just_below_the_edge_equals_the_oracle(method: str) -> None:
    """Random filters scaled so that max|K| ≈ 1e300: every method returns a finite K equal to
    jacrev's J Jᵀ (`ntk_reference`) within the documented n_v · eps · max|K|."""
    rng = np.random.default_rng(7)
    base = [rng.standard_normal(8) for _ in range(6)]
    scale = (1e300 / np.abs(ntk(DEEP, base, method="gemm")).max()) ** (1 / 10)  # K: degree 10
    theta = [w * scale for w in base]
    K = _no_warning(ntk, DEEP, theta, method=method)
    ref = ntk_reference(DEEP, theta)
    assert np.isfinite(K).all() and 1e299 < np.abs(ref).max() < 1e301
    assert np.abs(K - ref).max() <= DEEP.n_v * EPS * np.abs(ref).max()


@needs_kernel
def test_auto_falls_back_to_the_dense_product_when_it_is_finite() -> None:
    """The kernel's pre-check fails (a running sum could pass DBL_MAX) but J Jᵀ is finite: the
    auto route still returns J Jᵀ instead of raising."""
    B = np.sqrt(0.95 * np.finfo(np.float64).max)
    w1 = np.zeros(300)
    w1[0] = w1[-1] = B
    arch, theta = LCN((300, 299), (1,)), [w1, np.ones(299)]
    assert _use_diagonal(arch, "auto")
    assert not _compiled.fits_running_sums(complement_products(arch, theta), [300, 299])
    K = _no_warning(ntk, arch, theta)
    np.testing.assert_array_equal(K, ntk(arch, theta, method="gemm"))
    assert np.isfinite(K).all()


def test_ntk_that_underflows_to_zero_is_refused() -> None:
    """s25 trial LIN #4: θ = 1e-110·1 in every layer of L = 3 (entries of K about 1e-440) gave
    the zero matrix silently, where the closed form and the command line refuse."""
    arch = LCN((2, 2, 2), (2, 2))
    with pytest.raises(ValueError, match=r"^ntk: K = Jμ Jμᵀ underflows float64 to 0"):
        ntk(arch, [1e-110 * np.ones(2)] * 3)
    # K = 0 exactly where two filters are zero (every column of J is a product of the others)
    zero_two = [np.zeros(2), np.zeros(2), np.ones(2)]
    assert not np.any(ntk(arch, zero_two)) and not np.any(ntk_reference(arch, zero_two))
    one_zero = [np.zeros(2), np.ones(2), np.ones(2)]
    np.testing.assert_array_equal(ntk(arch, one_zero), ntk_reference(arch, one_zero))
    assert np.any(ntk(arch, one_zero))


def test_a_fiber_whose_ntk_underflows_says_so_in_terms_of_v() -> None:
    """s25b audit RERUN N2: the underflow was said in terms of θ, which lcn_fiber's user did
    not give; like the overflow, it is now said in terms of (v, δ)."""
    from neuromanifold.linear import lcn_fiber

    arch = LCN((2, 2, 2), (2, 2))
    v = np.zeros(arch.n_v)
    v[0] = 1e-300
    with pytest.raises(ValueError, match=r"^the NTK over this \(v, δ\) is not representable"):
        lcn_fiber(arch, v, [0.0, 0.0], n_starts=4)
