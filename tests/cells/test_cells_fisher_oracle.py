"""On every cell (MLP, CNN, attention, norms; Gaussian and categorical heads) the forward-mode
directional Fisher equals the per-sample-gradient oracle, off the base point and along both the
cell's direction and a random direction."""

from __future__ import annotations

import pytest
import torch

from neuromanifold.cells import CELLS, get_cell
from neuromanifold.singular.fisher import directional_fisher, directional_fisher_reference

RTOL_ORACLE = 1e-10  # JVP vs per-sample-gradient Fisher, float64
T_OFF_BASE = 0.3  # evaluate at θ0 + T_OFF_BASE·u, a generic point of the sweep


def _random_direction(params: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    r = {k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in params.items()}
    norm = torch.sqrt(sum((v * v).sum() for v in r.values()))
    return {k: v / norm for k, v in r.items()}


@pytest.mark.parametrize("name", list(CELLS), ids=list(CELLS))
def test_jvp_fisher_matches_per_sample_gradient_oracle(name: str) -> None:
    cell = get_cell(name)
    point = {
        k: v + T_OFF_BASE * cell.direction[k] if k in cell.direction else v
        for k, v in cell.params.items()
    }
    dirs = [cell.direction, _random_direction(cell.params, seed=5)]
    fast = directional_fisher(cell.model, point, dirs, cell.data, cell.family)
    slow = directional_fisher_reference(cell.model, point, dirs, cell.data, cell.family)
    scale = float(slow.abs().max())
    assert scale > 0
    torch.testing.assert_close(fast, slow, rtol=RTOL_ORACLE, atol=RTOL_ORACLE * scale)
