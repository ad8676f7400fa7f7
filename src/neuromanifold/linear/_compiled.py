"""The optional C kernel of the 1-D LCN NTK (running sums along diagonals), loaded with ctypes.

For a 1-D LCN with complement products ``R_l`` (length ``m_l = n − (k_l − 1) d_l``), taps ``k_l``
and dilations ``d_l = S_{l−1}``, :func:`lcn_ntk_1d` returns ``K = Σ_l G_l`` (shape ``(n, n)``) with

``G_l[b, b + e] = Σ_{p<k_l} R_l[b − p d_l] R_l[b + e − p d_l]``,

summing each diagonal ``e ≥ 0`` by the recurrence in steps of ``d_l``

``G_l(e, b) = G_l(e, b − d_l) + R_l[b] R_l[b + e] − R_l[b − k_l d_l] R_l[b + e − k_l d_l]``

(``R_l = 0`` outside ``[0, m_l)``): ``2 L`` multiply-adds per entry of the upper triangle instead
of the ``Σ_l k_l`` of the dense product ``J Jᵀ``, which stays the oracle
(``ntk(..., method="gemm")``). Rounding: a running sum adds and later subtracts every product on
its diagonal, so an entry carries at most about ``n · eps · max|K|`` (``max_i R_l[i]² ≤ max|K|``).

The extension ``neuromanifold.linear._lcn_kernel`` is built by ``setup.py`` at install time when
a C compiler is present and skipped otherwise; :func:`available` says whether it was built.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
from collections.abc import Sequence

import numpy as np

__all__ = ["available", "lcn_ntk_1d"]

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


def lcn_ntk_1d(
    R: Sequence[np.ndarray],
    dilations: Sequence[int],
    taps: Sequence[int],
    n: int,
    *,
    threads: int = 1,
) -> np.ndarray:
    """``K = Σ_l G_l`` (shape ``(n, n)``) from the complement products by the compiled kernel.

    ``R[l]`` is 1-D of length ``n − (taps[l] − 1)·dilations[l]``; ``threads`` workers share the
    strips of diagonals. Raises RuntimeError when the kernel was not built, ValueError on
    inconsistent input, MemoryError when the kernel cannot allocate its scratch.
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
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads = {threads!r}: expected an int ≥ 1")
    pad = int(lib.nm_lcn_strip())
    parts, start, pos = [], [], 0
    for l, (Rl, d, k) in enumerate(zip(R, dilations, taps, strict=True)):
        Rl = np.asarray(Rl, dtype=np.float64)
        if d < 1 or k < 1 or Rl.ndim != 1 or Rl.shape[0] != n - (k - 1) * d or n < 1:
            raise ValueError(
                f"layer {l}: R of shape {Rl.shape} does not fit n = {n}, k = {k}, d = {d} "
                "(expected length n − (k − 1)·d ≥ 1, k ≥ 1, d ≥ 1)"
            )
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
        _longs([int(d) for d in dilations]),
        _longs([int(k) for k in taps]),
        L,
        n,
        threads,
    )
    if status != 0:
        raise MemoryError(f"the LCN kernel could not allocate its scratch (n = {n}, L = {L})")
    return K
