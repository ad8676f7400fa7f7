"""Validated architecture specs (``LCN``, ``FC``) and their parameter containers.

Conventions (spec ``linear_networks.md`` §0–§1):

* an LCN has layers ``l = 1..L``; layer 1 acts on the input; layer ``l`` has a filter of shape
  ``filters[l-1]`` (a ``D``-tuple) and a stride ``strides[l-1]`` (a ``D``-tuple);
* layer ``l``'s filter is dilated by ``S_{l-1} = s_1⋯s_{l-1}`` (strides of all *earlier* layers);
* the end-to-end filter ``v`` has, per axis ``d``, ``1 + Σ_l (k_{l,d} − 1) S_{l-1,d}`` coefficients;
* an FC network with widths ``(n_0, …, n_L)`` has ``W_l`` of shape ``(n_l, n_{l-1})``.

Parameters ``θ`` are a sequence of float64 numpy arrays, one per layer, each of its layer's
parameter shape (filter shape for an LCN, ``(n_l, n_{l-1})`` for FC). The flat parameter vector
concatenates the layers in order ``(w_1, …, w_L)``, each flattened in C order.

References: Kohn, Merkh, Montúfar, Trager, *Geometry of Linear Convolutional Networks*, SIAGA 2022.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from numbers import Integral, Real
from typing import Any

import numpy as np

__all__ = [
    "FC",
    "LCN",
    "Architecture",
    "Params",
    "flatten_params",
    "param_shapes",
    "unflatten_params",
    "validate_params",
]

Params = tuple[np.ndarray, ...]


def _is_int(x: Any) -> bool:
    """An integer (Python or NumPy, ``numbers.Integral``) that is not a bool."""
    return isinstance(x, Integral) and not isinstance(x, bool)


def _is_real(x: Any) -> bool:
    """A real number (Python or NumPy, ``numbers.Real``) that is not a bool."""
    return isinstance(x, Real) and not isinstance(x, bool)


def _as_shape(value: Any, dim: int, *, name: str, allow_broadcast: bool) -> tuple[int, ...]:
    """Turn an int or a ``dim``-sequence of positive ints into a ``dim``-tuple."""
    form = (
        f"a positive int or a tuple of {dim} positive ints"
        if allow_broadcast or dim == 1
        else (f"a tuple of {dim} positive ints")
    )
    if _is_int(value):
        if dim != 1 and not allow_broadcast:
            raise ValueError(f"{name} = {value!r}: expected {form} (dim = {dim})")
        out = (int(value),) * dim
    elif isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != dim or not all(_is_int(x) for x in value):
            raise ValueError(f"{name} = {value!r}: expected {form} (dim = {dim})")
        out = tuple(int(x) for x in value)
    else:
        raise ValueError(f"{name} = {value!r}: expected {form} (dim = {dim})")
    if any(x < 1 for x in out):
        raise ValueError(f"{name} = {value!r}: entries must be positive, expected {form}")
    return out


@dataclass(frozen=True)
class LCN:
    """A single-channel linear convolutional network (cross-correlation, valid, no bias).

    Args:
        filters: per-layer filter shapes, ``L`` entries. ``dim = 1``: ints (``(3, 2, 2)``) or
            1-tuples; ``dim = D``: ``D``-tuples (``((2, 2), (3, 3))``).
        strides: per-layer strides, a sequence of length ``L`` (``s_1..s_L``) **or** ``L − 1``
            (``s_1..s_{L−1}``; then ``s_L = 1`` is stored, since the last stride never changes the
            end-to-end filter, spec §1.2). Each entry is an int (for ``D > 1`` broadcast to all
            axes) or a ``D``-tuple.
        dim: the signal dimension ``D ≥ 1``.

    After construction ``filters`` and ``strides`` are tuples of ``D``-tuples and ``strides`` has
    length ``L``.

    >>> arch = LCN((3, 2, 3), (2, 3))
    >>> arch.out_shape, arch.dim_M, arch.dilations
    ((17,), 6, ((1,), (2,), (6,)))
    """

    filters: tuple[tuple[int, ...], ...]
    strides: tuple[tuple[int, ...], ...]
    dim: int = 1

    def __post_init__(self) -> None:
        dim = self.dim
        if not _is_int(dim) or dim < 1:
            raise ValueError(f"dim = {dim!r}: expected a positive int (the signal dimension D)")
        filters = self.filters
        if not isinstance(filters, Sequence) or isinstance(filters, str) or len(filters) == 0:
            raise ValueError(
                f"filters = {filters!r}: expected a non-empty sequence of per-layer filter shapes"
            )
        shapes = tuple(
            _as_shape(f, dim, name=f"filters[{i}]", allow_broadcast=False)
            for i, f in enumerate(filters)
        )
        L = len(shapes)
        strides = self.strides
        if _is_int(strides) and L <= 2:
            strides = (strides,)
        if not isinstance(strides, Sequence) or isinstance(strides, str):
            raise ValueError(
                f"strides = {strides!r}: expected a sequence of L = {L} or L − 1 = {L - 1} strides"
            )
        if len(strides) not in (L, L - 1):
            raise ValueError(
                f"strides = {strides!r}: expected L = {L} or L − 1 = {L - 1} per-layer strides, "
                f"got {len(strides)}"
            )
        st = [
            _as_shape(s, dim, name=f"strides[{i}]", allow_broadcast=True)
            for i, s in enumerate(strides)
        ]
        if len(st) == L - 1:
            st.append((1,) * dim)
        object.__setattr__(self, "dim", int(dim))
        object.__setattr__(self, "filters", shapes)
        object.__setattr__(self, "strides", tuple(st))

    @property
    def L(self) -> int:
        """Depth (number of layers)."""
        return len(self.filters)

    @property
    def D(self) -> int:
        """Signal dimension."""
        return self.dim

    @cached_property
    def dilations(self) -> tuple[tuple[int, ...], ...]:
        """``S_{l−1}`` per layer (``S_0 = 1``): the product of the strides of the earlier layers."""
        out = []
        cur = (1,) * self.dim
        for s in self.strides:
            out.append(cur)
            cur = tuple(a * b for a, b in zip(cur, s, strict=True))
        return tuple(out)

    @cached_property
    def total_stride(self) -> tuple[int, ...]:
        """``S_L = s_1⋯s_L``: the stride of the end-to-end convolution (includes ``s_L``)."""
        return tuple(math.prod(s[d] for s in self.strides) for d in range(self.dim))

    @cached_property
    def out_shape(self) -> tuple[int, ...]:
        """Shape of ``v``: per axis ``1 + Σ_l (k_{l,d} − 1) S_{l−1,d}``."""
        dil = self.dilations
        return tuple(
            1 + sum((f[d] - 1) * S[d] for f, S in zip(self.filters, dil, strict=True))
            for d in range(self.dim)
        )

    @cached_property
    def n_v(self) -> int:
        """Number of entries of ``v``."""
        return math.prod(self.out_shape)

    @cached_property
    def layer_sizes(self) -> tuple[int, ...]:
        """``k_l``: number of entries of each filter."""
        return tuple(math.prod(f) for f in self.filters)

    @property
    def param_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Shape of each layer's parameter array (the filter shapes)."""
        return self.filters

    @cached_property
    def n_params(self) -> int:
        """``Σ_l k_l``."""
        return sum(self.layer_sizes)

    @property
    def dim_M(self) -> int:
        """``dim M = Σ_l k_l − (L − 1)`` (spec §1.1; assumes every ``k_l ≥ 2``)."""
        return self.n_params - (self.L - 1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (round-trips through :meth:`from_dict`)."""
        return {
            "kind": "LCN",
            "filters": [list(f) for f in self.filters],
            "strides": [list(s) for s in self.strides],
            "dim": self.dim,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LCN:
        """Inverse of :meth:`to_dict`."""
        return cls(
            tuple(tuple(f) for f in d["filters"]),
            tuple(tuple(s) for s in d["strides"]),
            dim=d["dim"],
        )


@dataclass(frozen=True)
class FC:
    """A linear fully connected network ``x ↦ W_L⋯W_1 x`` with widths ``(n_0, …, n_L)``.

    ``W_l`` has shape ``(n_l, n_{l−1})``; the end-to-end matrix ``W`` has shape ``(n_L, n_0)``.

    >>> FC((3, 2, 4)).param_shapes
    ((2, 3), (4, 2))
    """

    widths: tuple[int, ...]

    def __post_init__(self) -> None:
        w = self.widths
        if (
            not isinstance(w, Sequence)
            or isinstance(w, str)
            or len(w) < 2
            or not all(_is_int(x) and x >= 1 for x in w)
        ):
            raise ValueError(
                f"widths = {w!r}: expected a sequence (n_0, …, n_L) of at least 2 positive ints"
            )
        object.__setattr__(self, "widths", tuple(int(x) for x in w))

    @property
    def L(self) -> int:
        """Depth (number of weight matrices)."""
        return len(self.widths) - 1

    @property
    def param_shapes(self) -> tuple[tuple[int, int], ...]:
        """``(n_l, n_{l−1})`` per layer."""
        return tuple((self.widths[i + 1], self.widths[i]) for i in range(self.L))

    @property
    def out_shape(self) -> tuple[int, int]:
        """Shape ``(n_L, n_0)`` of the end-to-end matrix."""
        return (self.widths[-1], self.widths[0])

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        """Number of entries of each ``W_l``."""
        return tuple(a * b for a, b in self.param_shapes)

    @property
    def n_params(self) -> int:
        """Total number of parameters."""
        return sum(self.layer_sizes)

    @property
    def rank_bound(self) -> int:
        """``r = min_l n_l``: the largest rank ``W`` can have."""
        return min(self.widths)

    @property
    def dim_M(self) -> int:
        """``r (n_0 + n_L − r)``: dimension of the rank-``r`` matrices, ``r = rank_bound``."""
        r = self.rank_bound
        return r * (self.widths[0] + self.widths[-1] - r)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {"kind": "FC", "widths": list(self.widths)}


Architecture = LCN | FC


def param_shapes(arch: Architecture) -> tuple[tuple[int, ...], ...]:
    """Per-layer parameter shapes of an ``LCN`` or ``FC``."""
    if not isinstance(arch, (LCN, FC)):
        raise TypeError(f"arch = {arch!r}: expected an LCN or FC instance")
    return arch.param_shapes


def real_array(x: Any, name: str) -> np.ndarray:
    """``x`` as a float64 array; ``ValueError`` for a complex one (NumPy would drop the
    imaginary part with only a ``ComplexWarning``; s25 trial LIN #5).

    >>> real_array([1, 2.5], "v").tolist()
    [1.0, 2.5]
    """
    try:
        is_complex = np.iscomplexobj(x)
    except (TypeError, ValueError):  # ragged or not numeric: the float conversion says so
        is_complex = False
    if is_complex:
        raise ValueError(f"{name} is complex: expected a real array")
    return np.asarray(x, dtype=np.float64)


def validate_params(arch: Architecture, theta: Sequence[Any]) -> Params:
    """Check ``θ`` against ``arch`` and return it as a tuple of float64 arrays (copies).

    Raises ``ValueError`` for a wrong number of layers, a wrong shape or non-finite entries, and
    ``TypeError`` if ``θ`` is not a sequence of arrays.
    """
    shapes = param_shapes(arch)
    if isinstance(theta, np.ndarray) or not isinstance(theta, Sequence) or isinstance(theta, str):
        raise TypeError(
            f"theta of type {type(theta).__name__}: expected a sequence of {len(shapes)} "
            f"per-layer arrays (use unflatten_params for a flat vector)"
        )
    if len(theta) != len(shapes):
        raise ValueError(
            f"theta has {len(theta)} layers: expected {len(shapes)} arrays of shapes {shapes}"
        )
    out = []
    for i, (w, shape) in enumerate(zip(theta, shapes, strict=True)):
        try:
            a = np.array(real_array(w, f"theta[{i}]"), dtype=np.float64)
        except (TypeError, ValueError) as exc:
            if "is complex" in str(exc):
                raise
            raise ValueError(f"theta[{i}] = {w!r}: expected a real array of shape {shape}") from exc
        if a.shape != shape:
            raise ValueError(f"theta[{i}] has shape {a.shape}: expected shape {shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"theta[{i}] = {a.tolist()}: entries must be finite")
        out.append(a)
    return tuple(out)


def flatten_params(arch: Architecture, theta: Sequence[Any]) -> np.ndarray:
    """Concatenate ``(w_1, …, w_L)`` (each in C order) into a ``(n_params,)`` float64 vector."""
    return np.concatenate([w.ravel() for w in validate_params(arch, theta)])


def unflatten_params(arch: Architecture, x: Any) -> Params:
    """Inverse of :func:`flatten_params`: split a ``(n_params,)`` vector into per-layer arrays."""
    shapes = param_shapes(arch)
    a = real_array(x, "x")
    if a.ndim != 1 or a.size != arch.n_params:
        raise ValueError(
            f"x has shape {a.shape}: expected a flat vector of shape ({arch.n_params},)"
        )
    if not np.all(np.isfinite(a)):
        raise ValueError("x: entries must be finite")
    out, i = [], 0
    for shape in shapes:
        n = math.prod(shape)
        out.append(a[i : i + n].reshape(shape).copy())
        i += n
    return tuple(out)
