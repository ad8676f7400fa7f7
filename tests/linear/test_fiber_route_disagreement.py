"""When the algebraic and numeric fiber routes disagree, the report says how (s19 trial AL S2:
with the default 40 starts `lcn fiber` printed "routes agree: False" and nothing more)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.linear import LCN
from neuromanifold.linear.fiber import ROUTE_AGREE_RTOL, disagreement_note, lcn_fiber
from neuromanifold.linear.fiber_report import RouteSummary

# k = (3, 3), stride 1: v has four real roots, so the fiber over (v, δ) is finite (6 points modulo
# signs); from 40 starts (seed 0) the numeric route finds 5 of them, from 100 all 6
ARCH = LCN((3, 3), (1,))
V = [0.585, 0.6825, -4.225, 0.39, 1.3]
DELTA = [0.215825]
MISSED = (
    "the routes disagree: the numeric route found 5 of the 6 points of the algebraic route "
    "from 40 random starts"
)


def test_a_missed_point_is_named_and_more_starts_find_it() -> None:
    rep = lcn_fiber(ARCH, V, DELTA)
    assert rep.routes_agree is False
    assert [(r.name, r.n_points) for r in rep.routes] == [("algebraic", 6), ("numeric", 5)]
    assert rep.n_points == 6  # the union of both routes
    assert [n for n in rep.notes if n.startswith("the routes disagree")] == [
        disagreement_note(rep.routes[0], rep.routes[1], ROUTE_AGREE_RTOL)
    ]
    assert rep.notes[-1].startswith(MISSED)
    more = lcn_fiber(ARCH, V, DELTA, n_starts=100)
    assert more.routes_agree is True
    assert not any(n.startswith("the routes disagree") for n in more.notes)


def test_the_cli_prints_the_note() -> None:
    args = ["lcn", "fiber", "--filters", "3,3", "--strides", "1", "--v", ",".join(map(str, V))]
    res = CliRunner().invoke(app, [*args, "--delta", str(DELTA[0])], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert f"note: {MISSED}" in res.output
    assert "routes agree: False" in res.output


@pytest.mark.parametrize(
    ("alg", "num", "start"),
    [
        (6, 5, "the routes disagree: the numeric route found 5 of the 6 points"),
        (2, 3, "the routes disagree: the algebraic route found 2 point(s), the numeric route 3"),
        (4, 4, "the routes disagree: both found 4 point(s) but their NTKs do not match"),
    ],
)
def test_each_kind_of_disagreement_has_its_own_note(alg: int, num: int, start: str) -> None:
    a = RouteSummary(name="algebraic", applicable=True, n_points=alg, n_starts=3)
    n = RouteSummary(name="numeric", applicable=True, n_points=num, n_starts=40)
    note = disagreement_note(a, n, 1e-9)
    assert note.startswith(start), note
    assert ("40 random starts" in note) == (num < alg)
    assert ("within 1e-09" in note) == (num == alg)
