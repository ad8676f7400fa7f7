"""Two regular fiber points close together are two points (s31 trial LCN #2).

Layers w₁, w₂ = w₁ + ε·noise (2×2, D = 2, stride 1) at δ = 3: the fiber holds the point built
from (w₁, w₂) and the one built from (w₂, w₁), each rescaled to δ by the lemma. For ε = 3·10⁻⁴
they lie 4·10⁻⁴ apart near a fold (smallest singular value of dΦ ≈ 3·10⁻⁵ at unit scale) and
their NTKs differ by 2·10⁻⁵ relative, 20× `NTK_DISTINCT_RTOL`; the segment rule, made for
singular points, merged them, and the report showed one NTK. At a regular point two converged
copies of one point lie within about (r_x + r_y)/σ of each other, which is the rule there now.
"""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear import LCN, mu
from neuromanifold.linear.fiber import lcn_fiber
from neuromanifold.linear.fiber_numeric import FIBER_RTOL, point_distance

DELTA = 3.0
POINT_ATOL = 1e3 * FIBER_RTOL  # expected ≈ residual / σ ≈ 1e-15 / 3e-5 ≈ 3e-11


def _swapped_points(w1: np.ndarray, w2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points (w₁, w₂) and (w₂, w₁), each rescaled to ‖second‖² − ‖first‖² = δ with the
    product of the squared norms kept (the lemma's rescaling)."""
    a, b = float(np.sum(w2**2)), float(np.sum(w1**2))
    x1 = (-DELTA + np.sqrt(DELTA**2 + 4 * a * b)) / 2
    x2 = x1 + DELTA
    p1 = np.concatenate([w1.ravel() * np.sqrt(x1 / b), w2.ravel() * np.sqrt(x2 / a)])
    p2 = np.concatenate([w2.ravel() * np.sqrt(x1 / a), w1.ravel() * np.sqrt(x2 / b)])
    return p1, p2


@pytest.mark.parametrize("eps", [1e-2, 3e-4])
def test_two_nearby_regular_points_are_both_listed(eps: float) -> None:
    rng = np.random.default_rng(2)
    arch = LCN([(2, 2), (2, 2)], [(1, 1)], dim=2)
    w1 = rng.normal(size=(2, 2))
    w2 = w1 + eps * rng.normal(size=(2, 2))
    v = mu(arch, [w1, w2])
    rep = lcn_fiber(arch, v, [DELTA], n_starts=40, seed=0)
    assert rep.n_points == 2 and rep.n_distinct_ntks == 2
    got = [np.concatenate([np.ravel(w) for w in th]) for th in rep.points]
    for p in _swapped_points(w1, w2):  # each exact point is one of the two listed
        assert min(point_distance(arch, p, q) for q in got) <= POINT_ATOL
