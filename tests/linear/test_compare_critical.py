"""compare_metrics / `lcn compare` at the spec §4.6 critical example and near it (trial A #1).

The fiber points of compare_metrics are rebuilt from v by Gauss–Newton; at a critical v they are
accurate only to about √(residual), so their regularity test uses the point's accuracy floor
(:func:`~neuromanifold.linear.locus.rebuilt_point_rtol`), not RTOL_RANK alone.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.linear import LCN, MetricComparison, compare_metrics, mu
from neuromanifold.linear.metric import RTOL_RANK

STRIDED = LCN((3, 2), (2,))
#: spec §4.6: w_1 = z² − 0.49, w_2 = y − 0.49 ⇒ rank Jμ = 3 < dim M = 4
CRITICAL = (np.array([-0.49, 0.0, 1.0]), np.array([-0.49, 1.0]))
#: a smooth point next to it: w_1 = z² + 1e-5 z − 0.49 (σ_dimM/σ_max ≈ 3e-6, cond K|T ≈ 1e11)
NEAR = (np.array([-0.49, 1e-5, 1.0]), np.array([-0.49, 1.0]))
DELTA_SETS = ([[0.0], [3.0]], [[-5.0], [10.0]], [[1.0], [-1.0], [2.0]])


@pytest.mark.parametrize("deltas", DELTA_SETS, ids=str)
@pytest.mark.parametrize("seed", [0, 1])
def test_critical_v_is_not_regular_at_any_delta(deltas: list, seed: int) -> None:
    """v given alone (random starts): every δ row has rank 3 < dim M, as the locus says."""
    res = compare_metrics(STRIDED, mu(STRIDED, CRITICAL), deltas, seed=seed, locus=True)
    for p in res.per_delta:
        sm = p.smooth
        assert not sm.smooth and sm.rank == STRIDED.dim_M - 1
        assert sm.rtol >= RTOL_RANK and sm.sigma_dim <= sm.rtol * sm.sigma_max
        assert p.locus is not None and p.locus.classification == "critical"
    assert all(not q.defined for q in res.pairs)
    assert not any("ill-conditioned" in n for n in res.notes)


def test_ill_conditioned_smooth_point_is_explained() -> None:
    """Rank dim M at both points but cond K|T > 1/RTOL_RANK: the pair is undefined, and a note
    says K is ill-conditioned, not singular (the eigenvalues of K = J Jᵀ are σ²)."""
    res = compare_metrics(STRIDED, mu(STRIDED, NEAR), [[0.0], [3.0]], locus=True)
    assert all(p.smooth.smooth and p.locus.classification == "smooth" for p in res.per_delta)
    assert all(p.tangent_condition > 1 / RTOL_RANK for p in res.per_delta)
    assert not res.pair(0, 1).defined
    note = [n for n in res.notes if n.startswith("pairs (0, 1): undefined")]
    assert len(note) == 1 and "ill-conditioned, not singular" in note[0]


def test_cli_compare_locus_at_the_critical_example() -> None:
    """The trial's command: rows, pair line and locus note all say the point is not regular."""
    args = ["lcn", "compare", "--filters", "3,2", "--strides", "2"]
    out = CliRunner().invoke(
        app, [*args, "--v", "0.2401,0,-0.98,0,1", "--delta", "0", "--delta", "3", "--locus"]
    )
    assert out.exit_code == 0, out.output
    rows = [ln for ln in out.output.splitlines() if ln.lstrip().startswith(("0  [", "1  ["))]
    assert len(rows) == 2
    for row in rows:
        assert "3/4" in row and " no " in row and " yes " not in row
    assert "undefined (K|T singular or ill-conditioned)" in out.output
    assert "deltas[0] critical" in out.output and "deltas[1] critical" in out.output


@pytest.mark.parametrize(
    "v",
    [mu(STRIDED, CRITICAL), [0.5625, 0.0, -2.5, 0.0, 1.0]],  # critical; crossing (spec §4.2)
    ids=["critical", "crossing"],
)
def test_json_round_trip_with_locus_notes(v: list) -> None:
    """The locus reports carry notes (text) and ranks (ints): both survive to_dict/from_dict."""
    res = compare_metrics(STRIDED, v, [[5.0], [0.0]], locus=True, n_starts=8)
    assert all(p.locus is not None and p.locus.notes for p in res.per_delta)
    back = MetricComparison.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back == res
    for p in back.per_delta:
        assert p.locus is not None
        assert all(isinstance(n, str) for n in p.locus.notes)
        assert all(isinstance(r, int) for r in (*p.locus.ranks, *p.locus.pair_ranks))
