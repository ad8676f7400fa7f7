"""The cell table: every constructed cell by name.

``CELLS`` maps a registry name to a zero-argument-ready constructor (keyword-only options such as
``seed`` may still be passed). The table is the spec's §9.1 list, in its order, with the
rotated variants as separate rows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from neuromanifold.cells._cell import Cell
from neuromanifold.cells.anchors import gaussian_location, linear_regression
from neuromanifold.cells.attention import qk_rotation
from neuromanifold.cells.conv import conv_chain, conv_node_death
from neuromanifold.cells.deep_linear import matrix_chain, scalar_chain
from neuromanifold.cells.dense import (
    mlp_node_death,
    node_death,
    node_death_offset,
    relu_chain,
    swiglu_dead_dimension,
)
from neuromanifold.cells.gauges import ce_logit_shift, relu_rescale
from neuromanifold.cells.norms import layernorm_kernel, rmsnorm_no_kernel
from neuromanifold.cells.residual import residual_path

__all__ = ["CELLS", "DEPTHS", "all_cells", "cell_names", "get_cell"]

#: Depths of the deep-linear chain cells.
DEPTHS = (2, 3, 4, 5, 6)


def _table() -> dict[str, Callable[..., Cell]]:
    t: dict[str, Callable[..., Cell]] = {}
    for k in (1, 2, 3, 4, 5):
        t[f"gaussian_location_k{k}"] = partial(gaussian_location, k=k)
    t["linear_regression"] = linear_regression
    for act in ("relu", "gelu", "tanh", "silu", "relu2"):
        t[f"node_death_{act}"] = partial(node_death, activation=act)
    t["swiglu_dead_dimension"] = swiglu_dead_dimension
    for depth in DEPTHS:
        t[f"scalar_chain_L{depth}"] = partial(scalar_chain, depth=depth)
    for depth in (3, 4):
        t[f"relu_chain_L{depth}"] = partial(relu_chain, depth=depth)
    for depth in DEPTHS:
        t[f"matrix_chain_L{depth}"] = partial(matrix_chain, depth=depth)
        t[f"matrix_chain_L{depth}_rotated"] = partial(matrix_chain, depth=depth, basis="rotated")
    t["mlp_node_death_gelu"] = partial(mlp_node_death, activation="gelu")
    t["mlp_node_death_gelu_rotated"] = partial(mlp_node_death, activation="gelu", basis="rotated")
    t["layernorm_kernel"] = layernorm_kernel
    t["rmsnorm_no_kernel"] = rmsnorm_no_kernel
    t["ce_logit_shift"] = ce_logit_shift
    t["relu_rescale"] = relu_rescale
    t["qk_rotation"] = qk_rotation
    t["residual_path_skip"] = partial(residual_path, skip=True)
    t["residual_path_plain"] = partial(residual_path, skip=False)
    t["conv1d_node_death"] = partial(conv_node_death, dim=1)
    t["conv2d_node_death"] = partial(conv_node_death, dim=2)
    t["conv1d_chain_L3"] = partial(conv_chain, dim=1, depth=3)
    t["conv1d_chain_L3_rotated"] = partial(conv_chain, dim=1, depth=3, basis="rotated")
    t["conv2d_chain_L2_rotated"] = partial(conv_chain, dim=2, depth=2, basis="rotated")
    t["node_death_offset_tanh"] = partial(node_death_offset, activation="tanh")
    return t


#: Registry name → constructor. ``CELLS[name](seed=...)`` builds the cell of that name.
CELLS: dict[str, Callable[..., Cell]] = _table()


def cell_names() -> list[str]:
    """The registry names, in table order."""
    return list(CELLS)


def get_cell(name: str, **kwargs: Any) -> Cell:
    """Build the cell ``name`` with keyword options (``seed``, sizes, …).

    Raises:
        ValueError: ``name`` is not in the registry (the message lists the valid names).
    """
    if name not in CELLS:
        raise ValueError(f"unknown cell {name!r}; expected one of: {', '.join(CELLS)}")
    return CELLS[name](**kwargs)


def all_cells(*, seed: int = 0) -> list[Cell]:
    """Every registered cell, built with ``seed``, in table order.

    >>> cells = all_cells()
    >>> len(cells) == len(CELLS) and all(c.name == n for c, n in zip(cells, CELLS))
    True
    """
    return [ctor(seed=seed) for ctor in CELLS.values()]
