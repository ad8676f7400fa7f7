"""The optional C kernel of the 1-D LCN NTK (running sums along diagonals), loaded with ctypes.

For a 1-D LCN with complement products ``R_l`` (length ``m_l = n − (k_l − 1) d_l``), taps ``k_l``
and dilations ``d_l = S_{l−1}``, :func:`lcn_ntk_1d` returns ``K = Σ_l G_l`` (shape ``(n, n)``) with

``G_l[b, b + e] = Σ_{p<k_l} R_l[b − p d_l] R_l[b + e − p d_l]``,

summing each diagonal ``e ≥ 0`` by the recurrence in steps of ``d_l``

``G_l(e, b) = G_l(e, b − d_l) + R_l[b] R_l[b + e] − R_l[b − k_l d_l] R_l[b + e − k_l d_l]``

(``R_l = 0`` outside ``[0, m_l)``; a one-tap layer has ``G_l[b, b + e] = R_l[b] R_l[b + e]`` for
any dilation and is summed with step 1): ``2 L`` multiply-adds per entry of the upper triangle
instead of the ``Σ_l k_l`` of the dense product ``J Jᵀ``, which stays the oracle
(``ntk(..., method="gemm")``). The main diagonal ``K_ii = Σ_l Σ_p R_l[i − p d_l]²`` is then
recomputed directly (``O(n Σ_l k_l)``), so it is nonnegative and accurate entry by entry.

**Rounding.** A running sum adds and later subtracts every product on its diagonal, so an
off-diagonal entry carries an *absolute* error set by the largest products met earlier on its
diagonal, not by its own size: entries that ``J Jᵀ`` gives as exactly 0, or tiny ones after
large ones, come out as noise of that absolute size. Per layer the ``n / d_l`` updates give at most
about ``n · eps · max_i R_l[i]²`` (``≤ n · eps · max|K|``), so ``L · n · eps · max|K|`` for the
sum; only this bound is proven. Measured against the exact ``K`` of the float64 filters
(rational arithmetic, session 19): over 909 random networks with ``L ≤ 6``, ``n ≤ 300``, half
with filter entries scaled by up to ``e^{±6}``, the kernel's error reached ``0.41 · n · eps ·
max|K|``; over about 24,000 small ones with ``L ≤ 4``, 1–3 taps and one-tap layers it reached
``0.71`` at ``n = 3`` and ``0.905`` at ``n = 2``, where ``J Jᵀ``'s own error also reached
``0.905`` (correctly rounding one entry can already cost ``1/(2n)`` of that unit); for
``n > 40`` it stayed below ``0.07``. Comparisons with ``J Jᵀ`` include ``J Jᵀ``'s rounding.
The tests
check ``n · eps · max|K|`` against ``J Jᵀ``. The intermediate
``G_l(e, b − d_l) + R_l[b] R_l[b + e]`` must not overflow: :func:`fits_running_sums` checks
``(k_l + 2) · max R_l² < DBL_MAX / 2`` for every layer.

The extension ``neuromanifold.linear._lcn_kernel`` is built by ``setup.py`` at install time when
a C compiler is present and skipped otherwise; :func:`available` says whether it was built.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
from collections.abc import Sequence

import numpy as np

from neuromanifold.linear.architecture import _is_int

__all__ = ["available", "fits_running_sums", "lcn_ntk_1d"]

_MODULE = "neuromanifold.linear._lcn_kernel"


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The loaded kernel, or None when the extension was not built (or cannot be loaded)."""
    spec = importlib.util.find_spec(_MODULE)
    if spec is None or spec.origin is None:
        return None
    try:
        lib = ctypes.CDLL(spec.origin)
    except OSError:
        return None
    longs = ctypes.POINTER(ctypes.c_long)
    lib.nm_lcn_ntk_1d.argtypes = [ctypes.c_void_p] * 2 + [longs] * 3 + [ctypes.c_long] * 3
    lib.nm_lcn_ntk_1d.restype = ctypes.c_int
    lib.nm_lcn_strip.restype = ctypes.c_int
    return lib


def available() -> bool:
    """Whether the compiled kernel was built at install time and loads."""
    return _library() is not None


def _longs(values: Sequence[int]) -> ctypes.Array:
    return (ctypes.c_long * len(values))(*values)


def fits_running_sums(R: Sequence[np.ndarray], taps: Sequence[int]) -> bool:
    """Whether no intermediate running sum can overflow: ``(k_l + 2) · max R_l² < DBL_MAX / 2``."""
    limit = np.finfo(np.float64).max / 2
    for Rl, k in zip(R, taps, strict=True):
        peak = float(np.max(np.abs(Rl))) if np.size(Rl) else 0.0
        if not peak < np.sqrt(limit / (k + 2)):
            return False
    return True


def _check_ints(n: object, dilations: Sequence[object], taps: Sequence[object]) -> None:
    for name, values in (("n", [n]), ("dilations", dilations), ("taps", taps)):
        bad = [v for v in values if not (_is_int(v) and v >= 1)]
        if bad:
            raise ValueError(f"{name} must hold ints ≥ 1, got {bad[0]!r}")


def _exact_diagonal(
    R: Sequence[np.ndarray], dilations: Sequence[int], taps: Sequence[int], n: int
) -> np.ndarray:
    """``K_ii = Σ_l Σ_{p<k_l} R_l[i − p d_l]²`` (sums of nonnegative terms), shape ``(n,)``."""
    diag = np.zeros(n)
    for Rl, d, k in zip(R, dilations, taps, strict=True):
        sq = Rl * Rl
        for p in range(k):
            diag[p * d : p * d + sq.shape[0]] += sq
    return diag


def lcn_ntk_1d(
    R: Sequence[np.ndarray],
    dilations: Sequence[int],
    taps: Sequence[int],
    n: int,
    *,
    threads: int = 1,
) -> np.ndarray:
    """``K = Σ_l G_l`` (shape ``(n, n)``) from the complement products by the compiled kernel.

    ``R[l]`` is real and 1-D of length ``n − (taps[l] − 1)·dilations[l]``; ``threads`` workers
    (at most one per strip of diagonals) share the strips. Raises RuntimeError when the kernel was
    not built, ValueError on inconsistent input or when a running sum could overflow
    (`fits_running_sums`), MemoryError when the kernel cannot allocate its scratch.
    """
    lib = _library()
    if lib is None:
        raise RuntimeError(
            "the compiled LCN kernel was not built (it needs a C compiler when the package is "
            "installed); use ntk(..., method='gemm')"
        )
    L = len(R)
    if not (L == len(dilations) == len(taps)) or L == 0:
        raise ValueError(
            f"R, dilations and taps must have one entry per layer, got {L}, {len(dilations)} "
            f"and {len(taps)}"
        )
    _check_ints(n, dilations, taps)
    if not _is_int(threads) or threads < 1:
        raise ValueError(f"threads = {threads!r}: expected an int ≥ 1")
    n, d_in, k_in = int(n), [int(d) for d in dilations], [int(k) for k in taps]
    rows = []
    for l, (Rl, d, k) in enumerate(zip(R, d_in, k_in, strict=True)):
        arr = np.asarray(Rl)
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"layer {l}: R must be real, got dtype {arr.dtype}")
        arr = arr.astype(np.float64)
        if arr.ndim != 1 or arr.shape[0] != n - (k - 1) * d:
            raise ValueError(
                f"layer {l}: R of shape {arr.shape} does not fit n = {n}, k = {k}, d = {d} "
                "(expected length n − (k − 1)·d ≥ 1)"
            )
        rows.append(arr)
    if not fits_running_sums(rows, k_in):
        raise ValueError(
            "the complement products are too large for running sums in float64 "
            "((k + 2)·max R² ≥ DBL_MAX/2); use ntk(..., method='gemm')"
        )
    d_sum = [1 if k == 1 else d for d, k in zip(d_in, k_in, strict=True)]  # one tap: any step
    pad = int(lib.nm_lcn_strip())
    parts, start, pos = [], [], 0
    for Rl, d, k in zip(rows, d_sum, k_in, strict=True):
        buf = np.zeros(k * d + n + pad)  # R_l[i] for −k d ≤ i < n + pad
        buf[k * d : k * d + Rl.shape[0]] = Rl
        parts.append(buf)
        start.append(pos + k * d)
        pos += buf.shape[0]
    Rc = np.concatenate(parts)
    K = np.empty((n, n))
    status = lib.nm_lcn_ntk_1d(
        K.ctypes.data,
        Rc.ctypes.data,
        _longs(start),
        _longs(d_sum),
        _longs(k_in),
        L,
        n,
        min(int(threads), -(-n // pad)),
    )
    if status != 0:
        raise MemoryError(f"the LCN kernel could not allocate its scratch (n = {n}, L = {L})")
    K[np.diag_indices(n)] = _exact_diagonal(rows, d_sum, k_in, n)
    return K
