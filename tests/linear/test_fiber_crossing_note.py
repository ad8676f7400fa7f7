"""`lcn_fiber` names a self-crossing (s31 trial LCN #3).

Spec §4.2: filters (3, 2), stride 2, v = (9/16, 0, −5/2, 0, 1) is a self-crossing of the
neuromanifold: its two fiber points are regular (rank Jμ = dim M = 4) but their tangent spaces
differ (rank [J | J'] = 5). `lcn fiber` listed the two sheets and their NTKs with no word, while
`lcn ntk` sends crossings to it. The verdict is `classify_locus`'s, which tests every pair.
"""

from __future__ import annotations

from neuromanifold.linear import LCN
from neuromanifold.linear.fiber import lcn_fiber
from neuromanifold.linear.locus import classify_locus

CROSSING = "v is a self-crossing of the neuromanifold"


def test_the_spec_crossing_is_named_as_classify_locus_names_it() -> None:
    arch = LCN((3, 2), (2,))
    v = [0.5625, 0.0, -2.5, 0.0, 1.0]
    rep = lcn_fiber(arch, v, [5.0])
    assert rep.n_points == 2 and list(rep.jacobian_ranks) == [4, 4]
    (note,) = [n for n in rep.notes if n.startswith(CROSSING)]
    assert "rank [J|J'] = 5 > 4" in note
    assert classify_locus(arch, v=v, delta=[5.0]).classification == "crossing"


def test_a_smooth_point_with_two_fiber_points_gets_no_crossing_note() -> None:
    arch = LCN((2, 2), (1,))  # stride one: both root groupings span the whole space
    rep = lcn_fiber(arch, [1.0, 1.0, -2.0], [-3.0], n_starts=8)
    assert rep.n_points == 2 and not any(n.startswith(CROSSING) for n in rep.notes)
    assert classify_locus(arch, v=[1.0, 1.0, -2.0], delta=[-3.0]).classification == "smooth"
