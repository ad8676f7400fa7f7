"""Depth L = 1 (s16 trial Z #1): μ is the identity, M = R^k and every point is regular, the zero
filter included (spec §4.6's "v = 0 is singular" is a statement about depth L ≥ 2)."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.linear import LCN, classify_locus, compare_metrics, is_smooth_point

ONE = LCN((3,), ())
runner = CliRunner()


def test_the_zero_filter_is_a_smooth_point_of_depth_one() -> None:
    rep = is_smooth_point(ONE, [np.zeros(3)])
    assert rep.rank == rep.dim_M == 3 and rep.smooth
    assert rep.min_filter_norm == 0.0


def test_the_zero_filter_of_a_deeper_network_stays_singular() -> None:
    assert not is_smooth_point(LCN((2, 2), (2,)), [np.zeros(2), np.ones(2)]).smooth
    assert classify_locus(LCN((2, 2), (2,)), v=np.zeros(4)).classification == "zero"


@pytest.mark.parametrize("how", ["v", "theta"])
def test_locus_of_v_zero_at_depth_one_is_smooth(how: str) -> None:
    kw = {"v": np.zeros(3)} if how == "v" else {"theta": [np.zeros(3)]}
    rep = classify_locus(ONE, **kw)
    assert rep.classification == "smooth"
    assert min(rep.ranks) == ONE.dim_M == 3


def test_metrics_at_v_zero_agree_at_depth_one() -> None:
    """K = I for every v (no invariant to vary): the two (empty) δ's give the same metric."""
    rep = compare_metrics(ONE, np.zeros(3), [[], []])
    assert rep.pair(0, 1).agree


def test_cli_says_smooth_for_the_zero_filter_of_depth_one() -> None:
    res = runner.invoke(app, ["lcn", "ntk", "--filters", "3", "--theta", "0,0,0"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "rank J = 3, dim M = 3" in flat
    assert "smooth point (rank Jμ = dim M at θ): yes" in flat


def test_scalar_layers_whose_normal_form_has_depth_one() -> None:
    """s16 audit AA #8: filters (3, 1) reduce to depth 1 (M = R³). θ = (0, 1): rank 3 = dim M,
    K = I, yet 'smooth: no'; v = 0 was 'zero' and compare refused it. At δ = 1 the fiber point
    is (0, ±1), regular; the metrics of δ = 1 and 2 (K = I and 2I) differ."""
    arch = LCN((3, 1), (1,))
    theta = [np.zeros(3), np.array([1.0])]
    rep = is_smooth_point(arch, theta)
    assert rep.rank == rep.dim_M == 3 and rep.smooth
    assert classify_locus(arch, v=np.zeros(3), delta=[1.0]).classification == "smooth"
    assert not compare_metrics(arch, np.zeros(3), [[1.0], [2.0]]).pair(0, 1).agree


def test_fc_with_a_zero_layer_is_regular_where_the_rank_is_full() -> None:
    """FC widths (2, 3, 2): M is all 2×2 matrices; W_1 = 0 with W_2 of rank 2 gives
    J_1 = W_2 ⊗ I of rank 4 = dim M, a regular point (spec §4.6: the rank decides)."""
    from neuromanifold.linear import FC

    rng = np.random.default_rng(0)
    rep = is_smooth_point(FC((2, 3, 2)), [np.zeros((3, 2)), rng.standard_normal((2, 3))])
    assert rep.rank == rep.dim_M == 4 and rep.smooth


def test_fiber_over_zero_at_depth_one_is_the_origin_by_both_routes() -> None:
    """s16 audit AA #10: the algebraic route said 'every point with a zero layer lies over v = 0'
    (true for L ≥ 2 only) and did not apply; at L = 1 the only point is θ = 0."""
    from neuromanifold.linear import lcn_fiber

    rep = lcn_fiber(ONE, np.zeros(3), [])
    assert rep.n_points == 1 and rep.routes_agree is True
    assert not np.any(rep.point_arrays()[0][0])
