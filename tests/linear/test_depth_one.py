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
