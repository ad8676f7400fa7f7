"""The reverse-mode routes of benchmarks/batching_routes.py compute the library's directional
Fisher: checked on a few samples so that the benchmark's timings compare like with like."""

from __future__ import annotations

from pathlib import Path

import torch

from neuromanifold.singular.fisher import directional_fisher

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "batching_routes.py"
RTOL = 1e-12
"""Relative agreement of float64 sums taken in another order (observed ≤ 3e-15)."""


def test_reverse_routes_equal_the_forward_lanes(bench) -> None:
    case = bench.vit_case(16, 5)
    model, x, fam = case.model, case.data, case.family
    params = {k: v.detach() for k, v in model.named_parameters()}
    dirs = [bench.random_direction(model, seed=s) for s in range(3)]
    lin = [bench.linear_only(model, d) for d in dirs]
    assert all(0 < len(d) < len(params) for d in lin)  # the restriction drops some parameters
    ref = directional_fisher(model, params, dirs, x, fam)
    ref_lin = directional_fisher(model, params, lin, x, fam)
    torch.testing.assert_close(
        bench.reverse_per_sample(model, params, dirs, x), ref, rtol=RTOL, atol=0
    )
    torch.testing.assert_close(
        bench.reverse_hooks(model, params, lin, x), ref_lin, rtol=RTOL, atol=0
    )
