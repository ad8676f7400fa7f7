"""Smooth losses on function space: ``value(v)`` and ``grad(v)`` of the end-to-end filter.

A loss acts on the end-to-end filter ``v`` (or matrix ``W``) and exposes ``value(v)`` and
``grad(v)`` (same shape as ``v``); the flows of :mod:`neuromanifold.linear.flow` pull it back to
parameters by ``∇L(θ) = Jμ(θ)ᵀ ∇ℓ(μ(θ))``. Normalisation: **sums over samples** (a mean only
rescales time by ``1/n``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from neuromanifold.linear.architecture import LCN

__all__ = ["FunctionLoss", "QuadraticLoss", "SquaredLoss"]


class FunctionLoss(Protocol):
    """A smooth loss ``ℓ`` on function space: ``value(v) -> float``, ``grad(v) -> v-shaped``."""

    def value(self, v: np.ndarray) -> float: ...

    def grad(self, v: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class QuadraticLoss:
    """``ℓ(v) = ½ ‖A vec(v) − b‖²`` with ``vec`` the C-order flattening; ``A``: ``(m, n_v)``.

    >>> QuadraticLoss(np.eye(2), np.zeros(2)).value(np.array([3.0, 4.0]))
    12.5
    """

    A: np.ndarray
    b: np.ndarray

    def __post_init__(self) -> None:
        A = np.asarray(self.A, dtype=np.float64)
        b = np.asarray(self.b, dtype=np.float64)
        if A.ndim != 2 or b.shape != (A.shape[0],):
            raise ValueError(f"A {A.shape}, b {b.shape}: expected A of shape (m, n) and b of (m,)")
        if not (np.all(np.isfinite(A)) and np.all(np.isfinite(b))):
            raise ValueError("A and b must be finite")
        object.__setattr__(self, "A", A)
        object.__setattr__(self, "b", b)

    def _r(self, v: np.ndarray) -> np.ndarray:
        x = np.ravel(np.asarray(v, dtype=np.float64))
        if x.size != self.A.shape[1]:
            raise ValueError(f"v has {x.size} entries: expected {self.A.shape[1]} (columns of A)")
        return self.A @ x - self.b

    def value(self, v: np.ndarray) -> float:
        """``½ ‖A vec(v) − b‖²``."""
        r = self._r(v)
        return 0.5 * float(r @ r)

    def grad(self, v: np.ndarray) -> np.ndarray:
        """``Aᵀ(A vec(v) − b)``, reshaped like ``v``."""
        return (self.A.T @ self._r(v)).reshape(np.shape(v))


@dataclass(frozen=True, eq=False)
class SquaredLoss:
    """``ℓ(v) = ½ Σ_i ‖α_{v,S} x_i − y_i‖²``: squared loss of the end-to-end convolution.

    ``(α_{v,S} x)_o = Σ_j v_j x_{o·S + j}`` (valid cross-correlation at stride ``S = S_L``, per
    axis). ``X``: ``(n, *signal)``, ``Y``: ``(n, *out)``; a **sum** over samples. Build it with
    :meth:`for_arch` to take ``S`` from an architecture.
    """

    X: np.ndarray
    Y: np.ndarray
    stride: tuple[int, ...] = field(default=(1,))

    def __post_init__(self) -> None:
        X = np.asarray(self.X, dtype=np.float64)
        Y = np.asarray(self.Y, dtype=np.float64)
        stride = self.stride if isinstance(self.stride, tuple) else (self.stride,)
        D = X.ndim - 1
        if D < 1 or Y.ndim != X.ndim or Y.shape[0] != X.shape[0]:
            raise ValueError(
                f"X {X.shape}, Y {Y.shape}: expected X of shape (n, *signal) and Y of shape "
                "(n, *out) with the same n and the same number of axes"
            )
        if len(stride) != D or any(int(s) < 1 for s in stride):
            raise ValueError(f"stride = {self.stride!r}: expected {D} positive ints")
        if not (np.all(np.isfinite(X)) and np.all(np.isfinite(Y))):
            raise ValueError("X and Y must be finite")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "Y", Y)
        object.__setattr__(self, "stride", tuple(int(s) for s in stride))

    @classmethod
    def for_arch(cls, arch: LCN, X: Any, Y: Any) -> SquaredLoss:
        """The loss for ``arch``'s end-to-end stride ``S_L = s_1⋯s_L``."""
        return cls(X, Y, arch.total_stride)

    def _patches(self, v: np.ndarray) -> np.ndarray:
        D = self.X.ndim - 1
        if v.ndim != D or any(k > n for k, n in zip(v.shape, self.X.shape[1:], strict=True)):
            raise ValueError(
                f"v has shape {v.shape}: expected {D} axes no longer than the signal "
                f"{self.X.shape[1:]}"
            )
        win = sliding_window_view(self.X, v.shape, axis=tuple(range(1, D + 1)))
        win = win[(slice(None), *[slice(None, None, s) for s in self.stride])]
        if win.shape[: D + 1] != self.Y.shape:
            raise ValueError(
                f"Y has shape {self.Y.shape}: the network with v of shape {v.shape} and stride "
                f"{self.stride} outputs {win.shape[: D + 1]}"
            )
        return win

    def value(self, v: np.ndarray) -> float:
        """``½ Σ_i ‖α_{v,S} x_i − y_i‖²``."""
        v = np.asarray(v, dtype=np.float64)
        r = np.tensordot(self._patches(v), v, axes=v.ndim) - self.Y
        return 0.5 * float(np.sum(r * r))

    def grad(self, v: np.ndarray) -> np.ndarray:
        """``Σ_i Σ_o r_{i,o} · x_i[o·S : o·S + k]`` with residual ``r = α_{v,S} x − y``."""
        v = np.asarray(v, dtype=np.float64)
        P = self._patches(v)
        r = np.tensordot(P, v, axes=v.ndim) - self.Y
        return np.tensordot(r, P, axes=r.ndim)
