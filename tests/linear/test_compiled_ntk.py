"""The compiled diagonal-sum NTK of 1-D LCNs against its oracle ``J Jᵀ`` (``method="gemm"``),
its rounding bound ``|ΔK| ≤ n_v · eps · max|K|``, exactness on integers, the ``method``
dispatch of `ntk`, and every error path."""

from __future__ import annotations

import os
import shutil
import sysconfig

import numpy as np
import pytest

from neuromanifold.linear import LCN, _compiled, ntk
from neuromanifold.linear.ntk import (
    DIAGONAL_MIN_MEAN_TAPS,
    DIAGONAL_MIN_NV,
    _use_diagonal,
    complement_products,
    jacobian,
)

EPS = np.finfo(np.float64).eps


def _can_build() -> bool:
    """A C compiler and the Python headers: what setup.py needs to build the kernel (``$CC``
    first, as setuptools reads it)."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
    return headers and (shutil.which(cc) is not None or shutil.which("cc") is not None)


needs_kernel = pytest.mark.skipif(
    not _compiled.available(), reason="the compiled LCN kernel was not built here"
)


def test_the_kernel_is_built_where_it_can_be():
    if not _can_build():
        pytest.skip("no C compiler or Python headers: the optional kernel is skipped by design")
    assert _compiled.available(), (
        "a C compiler and Python.h are present but neuromanifold.linear._lcn_kernel was not "
        "built: install the package (`pip install -e .`, the README's commands) and read the "
        "build log; a checkout used through PYTHONPATH without installing has no kernel"
    )


ARCHS = [
    LCN((2, 2), (1,)),
    LCN((7,), ()),  # one layer: R = [1], K = I restricted to the filter's band
    LCN((1, 4), (1,)),  # a one-tap layer
    LCN((3, 5, 2), (2, 3)),  # mixed sizes and strides
    LCN((16,) * 4, (1, 1, 1)),
    LCN((16,) * 4, (2, 2, 2)),
    LCN((6,) * 5, (3, 3, 3, 3)),  # n_v = 726: strips of 64 do not divide it
    LCN((9, 2, 5, 3), (2, 1, 3)),
]


@needs_kernel
@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: f"{a.filters}-{a.strides}")
def test_diagonal_sums_equal_the_dense_product_within_the_rounding_bound(arch):
    rng = np.random.default_rng(len(arch.filters) + arch.n_v)
    th = [rng.standard_normal(f[0]) for f in arch.filters]
    K = ntk(arch, th, method="diagonal")
    J = jacobian(arch, th)
    K0 = J @ J.T
    assert K.shape == K0.shape == (arch.n_v, arch.n_v)
    np.testing.assert_array_equal(K, K.T)
    bound = arch.n_v * EPS * np.abs(K0).max()
    assert np.abs(K - K0).max() <= bound


@needs_kernel
def test_the_bound_holds_over_eight_decades_of_filter_entries():
    """Entries from 1e-4 to 1e4: the running sums subtract large products; the error stays
    within ``n_v · eps · max|K|``."""
    arch = LCN((8, 8, 8, 8), (2, 2, 2))
    rng = np.random.default_rng(3)
    th = [rng.standard_normal(8) * 10.0 ** rng.uniform(-4, 4, 8) for _ in range(4)]
    K = ntk(arch, th, method="diagonal")
    J = jacobian(arch, th)
    K0 = J @ J.T
    assert np.abs(K - K0).max() <= arch.n_v * EPS * np.abs(K0).max()


@needs_kernel
def test_integer_filters_give_the_exact_ntk():
    """Sums of integer products below 2**53 are exact in both methods, so they agree exactly."""
    arch = LCN((5, 3, 4, 6), (2, 1, 3))
    rng = np.random.default_rng(5)
    th = [rng.integers(-9, 10, f[0]).astype(float) for f in arch.filters]
    np.testing.assert_array_equal(ntk(arch, th, method="diagonal"), ntk(arch, th, method="gemm"))


@needs_kernel
def test_threads_share_the_strips_without_changing_a_bit():
    arch = LCN((8,) * 4, (2, 2, 2))
    th = [np.random.default_rng(l).standard_normal(8) for l in range(4)]
    R = complement_products(arch, th)
    d, k = [S[0] for S in arch.dilations], [f[0] for f in arch.filters]
    one = _compiled.lcn_ntk_1d(R, d, k, arch.n_v, threads=1)
    for threads in (2, 3, 8):
        np.testing.assert_array_equal(_compiled.lcn_ntk_1d(R, d, k, arch.n_v, threads=threads), one)


def test_auto_takes_the_kernel_only_for_large_1d_networks_with_many_taps(monkeypatch):
    monkeypatch.setattr(_compiled, "available", lambda: True)
    big = LCN((16,) * 8, (2,) * 7)
    assert big.n_v >= DIAGONAL_MIN_NV
    assert _use_diagonal(big, "auto")
    few_taps = LCN((DIAGONAL_MIN_MEAN_TAPS - 1,) * 8, (2,) * 7)
    assert few_taps.n_v >= DIAGONAL_MIN_NV and not _use_diagonal(few_taps, "auto")
    small = LCN((16, 16), (1,))
    assert small.n_v < DIAGONAL_MIN_NV and not _use_diagonal(small, "auto")
    assert not _use_diagonal(LCN(((16, 16),) * 3, ((2, 2),) * 2, dim=2), "auto")
    assert not _use_diagonal(big, "gemm")
    monkeypatch.setattr(_compiled, "available", lambda: False)
    assert not _use_diagonal(big, "auto")


def test_auto_without_the_kernel_is_the_dense_product(monkeypatch):
    arch = LCN((16,) * 5, (2,) * 4)
    monkeypatch.setattr(_compiled, "available", lambda: True)
    assert _use_diagonal(arch, "auto")  # a network that auto would give to the kernel ...
    monkeypatch.setattr(_compiled, "available", lambda: False)
    monkeypatch.setattr(_compiled, "_library", lambda: None)  # ... which is not there
    th = [np.random.default_rng(l).standard_normal(16) for l in range(5)]
    J = jacobian(arch, th)
    np.testing.assert_array_equal(ntk(arch, th), J @ J.T)


@needs_kernel
def test_auto_takes_the_kernel_end_to_end():
    arch = LCN((16,) * 5, (2,) * 4)
    th = [np.random.default_rng(10 + l).standard_normal(16) for l in range(5)]
    K = ntk(arch, th)
    np.testing.assert_array_equal(K, ntk(arch, th, method="diagonal"))
    K0 = ntk(arch, th, method="gemm")
    assert np.abs(K - K0).max() <= arch.n_v * EPS * np.abs(K0).max()


@needs_kernel
def test_the_diagonal_is_summed_directly_and_stays_nonnegative():
    """Large entries first, tiny ones after (s18 audit AI #2): running sums would leave the late
    diagonal entries with an absolute error of eps·(early products), negative ones included;
    the kernel's diagonal is recomputed as a sum of squares, accurate entry by entry."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal(200) * 1e-9
    w1[:3] = rng.standard_normal(3)
    w2 = rng.standard_normal(100) * 1e-9
    w2[:3] = rng.standard_normal(3)
    arch = LCN((200, 100), (1,))
    K = ntk(arch, [w1, w2], method="diagonal")
    K0 = ntk(arch, [w1, w2], method="gemm")
    assert np.all(np.diag(K) >= 0)
    # both sum Σ_l k_l nonnegative squares per entry: relative error ≤ (Σ k_l)·eps each
    np.testing.assert_allclose(np.diag(K), np.diag(K0), rtol=300 * EPS, atol=0)
    assert np.abs(K - K0).max() <= arch.n_v * EPS * np.abs(K0).max()


@needs_kernel
def test_one_tap_layers_at_any_dilation_are_summed_with_step_one():
    """A one-tap layer's G_l = R_l R_lᵀ needs no window; at dilation 10¹² its ring of d rows would
    need terabytes (s18 audit AI #1)."""
    arch = LCN((300, 1, 1), (10**6, 10**6))
    assert _use_diagonal(arch, "auto")
    th = [np.random.default_rng(1).standard_normal(300), np.array([2.0]), np.array([-0.5])]
    K = ntk(arch, th)
    K0 = ntk(arch, th, method="gemm")
    assert np.abs(K - K0).max() <= arch.n_v * EPS * np.abs(K0).max()


@needs_kernel
def test_sums_that_could_overflow_go_to_the_dense_product():
    """Near DBL_MAX the running sum G + R[b]R[b+e] overflows before the subtraction that brings
    it back (s18 audit AI #3): auto falls back to J Jᵀ, and method='diagonal' refuses."""
    B = np.sqrt(0.95 * np.finfo(np.float64).max)
    w1 = np.zeros(300)
    w1[0] = w1[-1] = B
    arch = LCN((300, 299), (1,))
    th = [w1, np.ones(299)]
    assert _use_diagonal(arch, "auto")
    K = ntk(arch, th)
    assert np.isfinite(K).all()
    np.testing.assert_array_equal(K, ntk(arch, th, method="gemm"))
    with pytest.raises(ValueError, match=r"too large for running sums .* method='gemm'"):
        ntk(arch, th, method="diagonal")


def test_an_unknown_method_is_refused():
    with pytest.raises(ValueError, match=r"method = 'fft': expected one of auto, gemm, diagonal"):
        ntk(LCN((2, 2), (1,)), [[1, 2], [1, -1]], method="fft")


def test_the_diagonal_method_needs_a_1d_network():
    arch = LCN(((2, 2), (2, 2)), ((1, 1),), dim=2)
    th = [np.ones((2, 2)), np.ones((2, 2))]
    with pytest.raises(ValueError, match=r"needs a 1-D LCN, got D = 2"):
        ntk(arch, th, method="diagonal")


def test_the_diagonal_method_without_the_kernel_says_how_to_go_on(monkeypatch):
    monkeypatch.setattr(_compiled, "_library", lambda: None)
    with pytest.raises(RuntimeError, match=r"was not built .* use ntk\(\.\.\., method='gemm'\)"):
        ntk(LCN((2, 2), (1,)), [[1, 2], [1, -1]], method="diagonal")


@needs_kernel
@pytest.mark.parametrize(
    ("R", "d", "k", "n", "match"),
    [
        ([np.ones(3)], [1, 1], [2], 4, r"one entry per layer, got 1, 2 and 1"),
        ([], [], [], 4, r"one entry per layer, got 0, 0 and 0"),
        ([np.ones(2)], [1], [2], 4, r"layer 0: R of shape \(2,\) does not fit n = 4, k = 2"),
        ([np.ones((3, 1))], [1], [2], 4, r"layer 0: R of shape \(3, 1\)"),
        ([np.ones(3)], [0], [2], 4, r"dilations must hold ints ≥ 1, got 0"),
        ([np.ones(3)], [1.0], [2], 4, r"dilations must hold ints ≥ 1, got 1\.0"),
        ([np.ones(3)], [1], [2], 4.0, r"n must hold ints ≥ 1, got 4\.0"),
        ([np.ones(3)], [1], [True], 3, r"taps must hold ints ≥ 1, got True"),
        ([np.ones(3) * 1j], [1], [2], 4, r"layer 0: R must be real, got dtype complex128"),
    ],
)
def test_inconsistent_kernel_input_is_refused(R, d, k, n, match):
    with pytest.raises(ValueError, match=match):
        _compiled.lcn_ntk_1d(R, d, k, n)


@needs_kernel
@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_threads_must_be_a_positive_int(threads):
    with pytest.raises(ValueError, match=r"threads = .*: expected an int ≥ 1"):
        _compiled.lcn_ntk_1d([np.ones(3)], [1], [2], 4, threads=threads)


@needs_kernel
def test_numpy_integers_are_ints():
    R = [np.arange(1.0, 4.0)]
    K = _compiled.lcn_ntk_1d(R, [np.int64(1)], [np.int32(2)], np.int64(4), threads=np.int64(2))
    J = jacobian(LCN((2, 3), (1,)), [np.ones(2), np.arange(1.0, 4.0)])
    np.testing.assert_array_equal(K, J[:, :2] @ J[:, :2].T)  # G of the first layer alone


def test_a_kernel_that_cannot_allocate_raises_memory_error(monkeypatch):
    class Failing:
        """Stands in for the loaded library: the kernel reports that its scratch failed."""

        @staticmethod
        def nm_lcn_strip() -> int:
            return 64

        @staticmethod
        def nm_lcn_ntk_1d(*args) -> int:
            return 1

    monkeypatch.setattr(_compiled, "_library", lambda: Failing)
    with pytest.raises(MemoryError, match=r"could not allocate its scratch \(n = 4, L = 1\)"):
        _compiled.lcn_ntk_1d([np.ones(3)], [1], [2], 4)
