"""The parametrisation map ``μ`` as a product of dilated polynomials (1-D and D-D), and FC ``μ``.

An array ``w`` of shape ``(k_1, …, k_D)`` stands for the polynomial
``w(z) = Σ_i w_i z_1^{i_1}⋯z_D^{i_D}`` (ascending coefficients). Dilating by ``S`` substitutes
``z_d ↦ z_d^{S_d}``, i.e. inserts ``S_d − 1`` zeros between consecutive coefficients along axis
``d``. The end-to-end filter of an LCN is (spec §1.1, §1.4)

``v(z) = Π_{l=1}^{L} w_l(z_1^{S_{l−1,1}}, …, z_D^{S_{l−1,D}})``,

computed as multi-dimensional full convolutions of the dilated coefficient arrays.

References: Achour, Kohn, Rauhut, arXiv:2507.06367, eq. (8); Kohn et al., SIAGA 2022.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import signal

from neuromanifold.linear.architecture import FC, LCN, validate_params

__all__ = [
    "dilate",
    "dilated_factors",
    "fc_mu",
    "mu",
    "mul_dilated",
    "poly_mul",
]


def dilate(w: np.ndarray, dilation: Sequence[int]) -> np.ndarray:
    """Coefficients of ``w(z_1^{S_1}, …, z_D^{S_D})``: shape ``(k_d − 1) S_d + 1`` per axis.

    >>> dilate(np.array([1.0, 2.0, 3.0]), (2,)).tolist()
    [1.0, 0.0, 2.0, 0.0, 3.0]
    """
    w = np.asarray(w, dtype=np.float64)
    if len(dilation) != w.ndim:
        raise ValueError(
            f"dilation = {tuple(dilation)!r}: expected {w.ndim} positive ints (one per axis of w)"
        )
    if any(int(s) < 1 for s in dilation):
        raise ValueError(f"dilation = {tuple(dilation)!r}: entries must be positive")
    shape = tuple((k - 1) * int(s) + 1 for k, s in zip(w.shape, dilation, strict=True))
    out = np.zeros(shape, dtype=np.float64)
    out[tuple(slice(None, None, int(s)) for s in dilation)] = w
    return out


def poly_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Product of two polynomials given by coefficient arrays of equal ``ndim`` (full convolution).

    >>> poly_mul(np.array([1.0, 2.0]), np.array([1.0, -1.0])).tolist()
    [1.0, 1.0, -2.0]
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != b.ndim:
        raise ValueError(f"poly_mul: a.ndim = {a.ndim} and b.ndim = {b.ndim} must be equal")
    if a.ndim == 1:
        return np.convolve(a, b)
    return signal.convolve(a, b, mode="full", method="direct" if a.size * b.size < 4096 else "auto")


_SHIFT_ADD_MAX = 64  # multiply by shifted adds up to this many coefficients, else polyphase


def mul_dilated(a: np.ndarray, b: np.ndarray, dilation: Sequence[int]) -> np.ndarray:
    """``a(z) · b(z^S)`` without multiplying by the zeros of the dilated ``b``.

    Equals ``poly_mul(a, dilate(b, S))``. A short ``b`` is applied as shifted, scaled copies of
    ``a`` (``O(b.size · a.size)``); a long one by polyphase convolution: the coefficients of ``a``
    with indices ``≡ r (mod S)`` are convolved with ``b`` and land on the indices ``≡ r (mod S)``
    of the product (``O(a.size · b.size)`` instead of ``O(a.size · b.size · Π S)``).

    >>> mul_dilated(np.array([1.0, 2.0]), np.array([1.0, -1.0]), (3,)).tolist()
    [1.0, 2.0, 0.0, -1.0, -2.0]
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    S = tuple(int(x) for x in dilation)
    if a.ndim != b.ndim or len(S) != a.ndim or any(x < 1 for x in S):
        raise ValueError(
            f"mul_dilated: a.ndim = {a.ndim}, b.ndim = {b.ndim}, dilation = {S}: expected equal "
            "ndim and one positive dilation per axis"
        )
    shape = tuple(n + (m - 1) * d for n, m, d in zip(a.shape, b.shape, S, strict=True))
    out = np.zeros(shape)
    if b.size <= _SHIFT_ADD_MAX:
        for idx in zip(*np.nonzero(b), strict=True):
            sl = tuple(slice(i * d, i * d + n) for i, d, n in zip(idx, S, a.shape, strict=True))
            out[sl] += b[idx] * a
        return out
    for r in np.ndindex(*S):
        phase = a[tuple(slice(ri, None, d) for ri, d in zip(r, S, strict=True))]
        if phase.size == 0:
            continue
        out[tuple(slice(ri, None, d) for ri, d in zip(r, S, strict=True))] += poly_mul(phase, b)
    return out


def dilated_factors(arch: LCN, theta: Sequence[Any]) -> list[np.ndarray]:
    """``[w_l(z^{S_{l−1}})]_l``: each layer's filter dilated by its ``S_{l−1}``."""
    th = validate_params(arch, theta)
    return [dilate(w, S) for w, S in zip(th, arch.dilations, strict=True)]


def mu(arch: LCN, theta: Sequence[Any]) -> np.ndarray:
    """End-to-end filter ``v = μ(θ)`` of shape ``arch.out_shape`` (product of dilated filters).

    Spec §4.3 example: ``(1 + 2z)(1 − z) = 1 + z − 2z²``; spec §6: ``k = (2, 2)``, ``s = 2``.

    >>> mu(LCN((2, 2), (1,)), [[1, 2], [1, -1]]).tolist()
    [1.0, 1.0, -2.0]
    >>> mu(LCN((2, 2), (2,)), [[1, 2], [3, 1]]).tolist()
    [3.0, 6.0, 1.0, 2.0]
    """
    if not isinstance(arch, LCN):
        raise TypeError(f"arch = {arch!r}: expected an LCN (use fc_mu for FC networks)")
    th = validate_params(arch, theta)
    v = th[0]
    for w, S in zip(th[1:], arch.dilations[1:], strict=True):
        v = mul_dilated(v, w, S)
    return v


def fc_mu(arch: FC, Ws: Sequence[Any]) -> np.ndarray:
    """End-to-end matrix ``W = W_L⋯W_1`` of shape ``(n_L, n_0)``."""
    if not isinstance(arch, FC):
        raise TypeError(f"arch = {arch!r}: expected an FC architecture")
    mats = validate_params(arch, Ws)
    W = mats[0]
    for M in mats[1:]:
        W = M @ W
    return W
