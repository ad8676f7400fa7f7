"""JSON helpers of the linear results' ``to_dict``/``from_dict`` (metric pairs and comparisons).

Arrays become nested tuples of Python floats (hashable, so the frozen result classes compare and
hash), tuples become lists for JSON, and non-finite floats become ``None`` (JSON has no
``Infinity``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["as_lists", "as_tuples", "finite_or_none"]


def as_tuples(x: Any) -> Any:
    """Nested tuples of Python floats from an array / nested lists.

    >>> as_tuples(np.eye(2))
    ((1.0, 0.0), (0.0, 1.0))
    """
    if isinstance(x, (list, tuple, np.ndarray)):
        return tuple(as_tuples(y) for y in x)
    return float(x)


def as_lists(x: Any) -> Any:
    """Tuples to lists, recursively (also inside dicts).

    >>> as_lists({"a": ((1.0, 2.0), (3.0,))})
    {'a': [[1.0, 2.0], [3.0]]}
    """
    if isinstance(x, (tuple, list)):
        return [as_lists(y) for y in x]
    if isinstance(x, dict):
        return {k: as_lists(y) for k, y in x.items()}
    return x


def finite_or_none(x: float) -> float | None:
    """``float(x)``, or ``None`` when it is not finite.

    >>> finite_or_none(2), finite_or_none(float("inf"))
    (2.0, None)
    """
    return float(x) if np.isfinite(x) else None
