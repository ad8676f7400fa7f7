"""§9.1's residual-path row, all-residual case: dead weights only inside residual blocks.

The registered ``residual_path`` cell (skip=True) has a dead input and a dead output weight
around its blocks, so every moved path crosses at least two dead weights (κ = 2, k = 2). Its
constructor has no parameter that makes those two weights live, so the all-residual case is
built here from the same cell (not registered: the registry's cell count is used by the demo
and the CLI): W_in and W_out are set to random O(1) values and the probe moves only the block
weights. The shortest weighted path through a moved weight then crosses one dead edge
(x → W_in → skips → one block → skips → W_out), κ = 1: the output changes at first order,
F_u(t) tends to a positive constant, and the read must return k = 1, class live ("all-residual
⇒ decay exponent 0", spec dead_directions.md §6.6, §9.1).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch.func import functional_call

from neuromanifold.cells import CLASS_LIVE, check_reading, read_cell, residual_path
from neuromanifold.cells.residual import ResidualPath

BLOCKS = 3
# Δ(t)/t against the first-order term t·W_out (Σ_i U_i) W_in x: an O(t) truncation error,
# measured 9.7e-5 at t = 1e-4 over seeds 0-2; the tenfold ratio of the errors at t = 1e-3 and
# 1e-4 deviates from 10 by at most 6.6e-5 (relative) on the same seeds.
REL_ERR_FIRST_ORDER = 1e-2
RTOL_LINEAR_CONVERGENCE = 1e-2


def all_residual_cell(seed: int):
    """``residual_path(skip=True)`` with live W_in, W_out and a probe on the block weights only."""
    cell = residual_path(skip=True, blocks=BLOCKS, seed=seed)
    h, d_in = cell.params["inp.weight"].shape
    d_out = cell.params["out.weight"].shape[0]
    g = torch.Generator().manual_seed(1000 + seed)
    params = dict(cell.params)
    params["inp.weight"] = torch.randn(h, d_in, generator=g, dtype=torch.float64) / math.sqrt(d_in)
    params["out.weight"] = torch.randn(d_out, h, generator=g, dtype=torch.float64) / math.sqrt(h)
    model = ResidualPath(d_in, h, d_out, BLOCKS, skip=True, bypass=cell.model.bypass).double()
    model.load_state_dict({**params, "bypass": cell.model.bypass})
    blocks = {k: v for k, v in cell.direction.items() if k.startswith("blocks.")}
    assert len(blocks) == BLOCKS
    norm = math.sqrt(sum(float(v.square().sum()) for v in blocks.values()))
    u = {k: v / norm for k, v in blocks.items()}
    return dataclasses.replace(
        cell,
        name="residual_path_all_skip",
        description="dead weights only inside residual blocks (live W_in, W_out): κ = 1",
        model=model,
        params=params,
        direction=u,
        expected_k=1,
        expected_class=CLASS_LIVE,
        meta={"blocks": BLOCKS, "skip": True, "kappa": 1},
    )


def _out(cell, t: float):
    p = {k: v + t * cell.direction[k] if k in cell.direction else v for k, v in cell.params.items()}
    return functional_call(cell.model, p, (cell.data,))


@pytest.mark.parametrize("seed", range(3))
def test_all_residual_output_changes_at_first_order(seed: int) -> None:
    cell = all_residual_cell(seed)
    p, u = cell.params, cell.direction
    assert all(float(p[k].abs().max()) == 0.0 for k in u)  # the moved weights are dead at θ₀
    lead = cell.data @ (p["out.weight"] @ sum(u.values()) @ p["inp.weight"]).T
    assert float(lead.abs().max()) > 1e-3
    errs = []
    for t in (1e-3, 1e-4):
        ratio = (_out(cell, t) - _out(cell, 0.0)) / t
        errs.append(float(torch.linalg.matrix_norm(ratio - lead) / torch.linalg.matrix_norm(lead)))
    assert errs[1] < REL_ERR_FIRST_ORDER
    assert errs[1] == pytest.approx(errs[0] / 10, rel=RTOL_LINEAR_CONVERGENCE, abs=0)


@pytest.mark.parametrize("seed", range(3))
def test_all_residual_reads_k1_live(seed: int) -> None:
    cell = all_residual_cell(seed)
    result = check_reading(cell, read_cell(cell))
    assert result.passed, result.failures
    assert (result.k, result.klass) == (1, CLASS_LIVE)
    # the registered cell (dead W_in, W_out around the same blocks) reads its own κ = 2
    base = residual_path(skip=True, blocks=BLOCKS, seed=seed)
    assert base.expected_k == 2
    assert check_reading(base, read_cell(base)).passed
