"""Layer pairs whose factors of ``v`` can be regrouped, so that a ``(v, δ)``-fiber has sheets.

Two non-scalar layers ``i < j`` with the same cumulative dilation ``S_{i−1} = S_{j−1}`` on every
axis that either filter extends along (an axis where both have size 1 carries no variable, so its
dilation does not matter) multiply polynomials in the same variables, so factors of ``v`` can move
between them (with the rescaling Lemma keeping ``δ``):

* ``D = 1``: always — a stride one between them (spec §4.3);
* ``D ≥ 2``: when the two filters have the same shape (the swap caveat of spec §4.4), or both
  extend along one and the same axis only (univariate filters: the 1-D mechanism on that axis).

The fiber then has several sheets with, in general, different NTKs, so ``K`` is not a function
of ``(v, δ)``. An empty list asserts nothing: crossings such as spec §4.2 still carry several
NTKs. Used by :func:`~neuromanifold.linear.flow.function_space_flow` (its ``sheet_note``) and by
the survey, whose generic D = 2 row draws architectures without such pairs.

>>> from neuromanifold.linear import LCN
>>> regrouping_pairs(LCN(((2, 2), (2, 2)), ((1, 1),), dim=2))
[(0, 1)]
>>> regrouping_pairs(LCN(((2, 2), (2, 2)), ((2, 1),), dim=2))
[]
"""

from __future__ import annotations

import itertools

from neuromanifold.linear.architecture import LCN

__all__ = ["regrouping_pairs"]


def _univariate_axis(shape: tuple[int, ...]) -> int | None:
    """The one axis along which a filter of this shape extends, or None (several or none)."""
    axes = [i for i, k in enumerate(shape) if k > 1]
    return axes[0] if len(axes) == 1 else None


def regrouping_pairs(arch: LCN) -> list[tuple[int, int]]:
    """0-based layer pairs ``(i, j)``, ``i < j``, between which factors of ``v`` can be regrouped
    (module docstring); scalar layers (one filter entry) take part in none."""
    kept = [i for i, k in enumerate(arch.layer_sizes) if k > 1]
    pairs = []
    for i, j in itertools.combinations(kept, 2):
        fi, fj = arch.filters[i], arch.filters[j]
        used = [a for a in range(arch.D) if fi[a] > 1 or fj[a] > 1]  # axes with a variable
        if any(arch.dilations[i][a] != arch.dilations[j][a] for a in used):
            continue
        axis = _univariate_axis(fi)
        if arch.D == 1 or fi == fj or (axis is not None and axis == _univariate_axis(fj)):
            pairs.append((i, j))
    return pairs
