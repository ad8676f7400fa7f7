"""The reductions of spec §1.2: drop the last stride and the scalar (``k_l = 1``) layers.

``s_L`` never changes ``v``, and a layer whose filter has a single entry ``c`` only multiplies
``v`` by ``c`` while its stride multiplies the dilations of all later layers. Removing the scalar
layers and setting ``s_L = 1`` gives the architecture the paper assumes (``k_l ≥ 2``,
``s_L = 1``). With kept layers ``j_1 < j_2 < …`` (original dilations ``S^{(j)}``), the reduced
strides are ``S^{(j_{i+1})} / S^{(j_i)}`` and

``μ(θ) = (Π_{scalar layers} c_l) · dilate(μ_red(θ_kept), S^{(j_1)})``,

i.e. ``v`` is the reduced filter, dilated by the dilation of the first kept layer and scaled.
The reduction preserves ``μ`` (up to this fixed embedding), **not** the NTK: a scalar layer ``c``
multiplies the Jacobian blocks of all other layers by ``c`` and has its own Jacobian column
``v / c``: with one scalar layer, ``K = c²·K_red + v vᵀ / c²`` (``K_red`` the NTK of the network
without that layer, embedded like ``v``); each scalar layer also adds an invariant ``δ_l`` (the
vector ``δ`` is longer than the reduced network's).

The library therefore does **not** reduce silently: every fiber / locus computation uses the
network as given, and its report (and the ``lcn ntk`` / ``lcn fiber`` output) carries
:func:`normal_form_note` when the architecture is not in the paper's normal form — which layers
are scalar, whether ``s_L ≠ 1`` — pointing to :func:`reduce_lcn` for the normal form.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuromanifold.linear.architecture import LCN, Params, validate_params

__all__ = ["LCNReduction", "normal_form_note", "reduce_lcn", "reduce_params"]


@dataclass(frozen=True)
class LCNReduction:
    """Outcome of :func:`reduce_lcn`.

    Attributes:
        original: the architecture as given.
        reduced: the normalised architecture (``s_L = 1``; ``k_l ≥ 2`` unless all are scalar).
        kept_layers: 0-based indices of the original layers kept, in order.
        input_dilation: dilation of the first kept layer, per axis (``v`` lives on this lattice).
        last_stride: the original ``s_L`` (dropped; it only subsamples the output).
        changed: whether ``reduced`` differs from ``original``.
    """

    original: LCN
    reduced: LCN
    kept_layers: tuple[int, ...]
    input_dilation: tuple[int, ...]
    last_stride: tuple[int, ...]
    changed: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "original": self.original.to_dict(),
            "reduced": self.reduced.to_dict(),
            "kept_layers": list(self.kept_layers),
            "input_dilation": list(self.input_dilation),
            "last_stride": list(self.last_stride),
            "changed": self.changed,
        }


def reduce_lcn(arch: LCN) -> LCNReduction:
    """Normalise ``arch`` per spec §1.2 (drop scalar layers, merge their strides, ``s_L = 1``).

    >>> r = reduce_lcn(LCN((2, 1, 3), (2, 3, 5)))
    >>> r.reduced.filters, r.reduced.strides, r.kept_layers
    (((2,), (3,)), ((6,), (1,)), (0, 2))
    """
    if not isinstance(arch, LCN):
        raise TypeError(f"arch = {arch!r}: expected an LCN")
    kept = [i for i, k in enumerate(arch.layer_sizes) if k > 1] or [0]
    dil = arch.dilations
    strides = [
        tuple(b // a for a, b in zip(dil[i], dil[j], strict=True))
        for i, j in itertools.pairwise(kept)
    ]
    reduced = LCN(tuple(arch.filters[i] for i in kept), tuple(strides), dim=arch.D)
    return LCNReduction(
        original=arch,
        reduced=reduced,
        kept_layers=tuple(kept),
        input_dilation=dil[kept[0]],
        last_stride=arch.strides[-1],
        changed=reduced != arch,
    )


def reduce_params(reduction: LCNReduction, theta: Sequence[Any]) -> tuple[Params, float]:
    """Split ``θ`` into the kept layers' filters and the product ``Π c_l`` of the scalar layers.

    ``mu(original, θ) = scale · dilate(mu(reduced, kept), reduction.input_dilation)``.
    """
    th = validate_params(reduction.original, theta)
    kept = set(reduction.kept_layers)
    scale = math.prod(float(np.ravel(w)[0]) for i, w in enumerate(th) if i not in kept)
    return tuple(th[i] for i in reduction.kept_layers), scale


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def normal_form_note(arch: LCN) -> str | None:
    """A remark saying how ``arch`` departs from the paper's normal form, or None if it does not.

    The normal form has every ``k_l ≥ 2`` and ``s_L = 1`` (spec §1.2). Layers are numbered from
    1. Computations elsewhere use ``arch`` as given; the note names the scalar layers, a last
    stride ``≠ 1`` and the architecture :func:`reduce_lcn` returns.

    >>> normal_form_note(LCN((3, 2), (2,))) is None
    True
    >>> print(normal_form_note(LCN((2, 1, 2), (2, 3, 5))))  # doctest: +NORMALIZE_WHITESPACE
    not in the paper's normal form (k_l ≥ 2, s_L = 1): layer 2 is scalar (k_l = 1); s_L = 5 ≠ 1
    (it only subsamples the output). Computed on the network as given (scalar layers change the
    NTK, e.g. K = c²·K_red + v vᵀ/c² for one layer c, and δ); reduce_lcn gives the normal form:
    filters [2, 2], strides [6, 1].
    """
    red = reduce_lcn(arch)
    if not red.changed:
        return None
    parts = []
    scalar = [i + 1 for i, k in enumerate(arch.layer_sizes) if k == 1]
    if scalar:
        which = ", ".join(map(str, scalar))
        parts.append(
            f"layer {which} is scalar (k_l = 1)"
            if len(scalar) == 1
            else f"layers {which} are scalar (k_l = 1)"
        )
    if any(s != 1 for s in red.last_stride):
        parts.append(f"s_L = {_shape_text(red.last_stride)} ≠ 1 (it only subsamples the output)")
    caveat = (
        " (scalar layers change the NTK, e.g. K = c²·K_red + v vᵀ/c² for one layer c, and δ)"
        if scalar
        else ""
    )
    f = ", ".join(_shape_text(x) for x in red.reduced.filters)
    s = ", ".join(_shape_text(x) for x in red.reduced.strides)
    return (
        f"not in the paper's normal form (k_l ≥ 2, s_L = 1): {'; '.join(parts)}. Computed on "
        f"the network as given{caveat}; reduce_lcn gives the normal form: filters "
        f"[{f}], strides [{s}]."
    )
