"""The highest order a sweep can read under the floor (docs/order_read.md §3, audit S12 #2).

At a degenerate base the floor is 4.9e−26 of the sweep's own largest F, and a window must span at
least one decade with F ≥ 10·F_floor: 2(k − 1)·w ≤ 24.3. The default grid's shortest one-decade
window spans w = 1.03 decades (8 steps of 4/31), so k ≤ 12; a 201-point grid over the same four
decades has windows of exactly w = 1, so k = 13 fits and k = 14 does not.
"""

from __future__ import annotations

import pytest
import torch

from neuromanifold import read_direction
from neuromanifold.cells.deep_linear import scalar_chain

FINE_GRID = torch.logspace(-4, 0, 201, dtype=torch.float64)  # 0.02 decades per step


@pytest.mark.parametrize(
    ("depth", "grid", "expected"),
    [
        (12, None, 12),
        (13, None, None),  # 2·12·1.03 = 24.8 > 24.3: no window above the floor
        (13, FINE_GRID, 13),  # 2·12·1.00 = 24.0 ≤ 24.3
        (14, FINE_GRID, None),  # 2·13·1.00 = 26 > 24.3 on any grid
    ],
)
def test_scalar_chain_orders_up_to_the_floors_bound(depth, grid, expected) -> None:
    cell = scalar_chain(depth=depth)
    kw = {} if grid is None else {"grid": grid}
    rd = read_direction(cell.model, cell.params, cell.direction, cell.data, cell.family, **kw)
    if expected is None:
        assert rd.klass.value == "unresolved" and rd.k is None
    else:
        assert rd.klass.value == "genuine_singularity" and rd.k == expected == cell.expected_k
