"""The curve tests of `_lsq` on maps whose zero sets are known in closed form.

``curve_through`` steps along each null vector of dF and corrects in the row space: it finds a
curve only where dF's null space is the curve's tangent space. ``curve_through_hyperplanes``
solves on hyperplanes crossing the null directions and also finds a curve inside a larger
first-order null space, or one leaving the point on one side only.
"""

from __future__ import annotations

import numpy as np

from neuromanifold.linear import _lsq
from neuromanifold.linear.relu import ReluMLP, relu_forward, relu_invariants
from neuromanifold.linear.relu_fiber import relu_fiber

STEP = 1e-2
TOL = 1e-10
RTOL = 1e-9
ATOL_SAME = 1e-13  # f and invariants along the closed-form curve of two parallel units


def _kw() -> dict[str, float]:
    return {"step": STEP, "tol": TOL, "rtol": RTOL}


def _diagonal_line(x: np.ndarray) -> np.ndarray:
    """``F = ((x_1 − x_2)², x_3)``: zeros on the line ``x_1 = x_2, x_3 = 0``; at 0 dF has the
    null space ``span(e_1, e_2)``, two dimensions for a one-dimensional zero set."""
    return np.array([(x[0] - x[1]) ** 2, x[2]])


def _diagonal_line_jac(x: np.ndarray) -> np.ndarray:
    d = 2 * (x[0] - x[1])
    return np.array([[d, -d, 0.0], [0.0, 0.0, 1.0]])


def _point(x: np.ndarray) -> np.ndarray:
    """``F = (x_1² + x_2², x_3)``: an isolated zero at 0 with the same null space."""
    return np.array([x[0] ** 2 + x[1] ** 2, x[2]])


def _point_jac(x: np.ndarray) -> np.ndarray:
    return np.array([[2 * x[0], 2 * x[1], 0.0], [0.0, 0.0, 1.0]])


def _half_line(x: np.ndarray) -> np.ndarray:
    """``F = (min(x_1, 0), x_2)``: zeros on the half-line ``x_1 ≥ 0, x_2 = 0`` (one-sided)
    beside ``x_1 < 0``; dF at 0 (right derivative of min: 0) has null vector ``e_1``."""
    return np.array([min(x[0], 0.0), x[1]])


def _half_line_jac(x: np.ndarray) -> np.ndarray:
    return np.array([[1.0 if x[0] < 0 else 0.0, 0.0], [0.0, 1.0]])


def test_a_curve_inside_a_larger_null_space() -> None:
    x0 = np.zeros(3)
    # along e_1 or e_2 alone F = (step², 0): no row-space correction reaches the line
    assert not _lsq.curve_through(_diagonal_line, _diagonal_line_jac, x0, **_kw())
    assert _lsq.curve_through_hyperplanes(_diagonal_line, _diagonal_line_jac, x0, **_kw())


def test_an_isolated_zero_has_no_curve() -> None:
    x0 = np.zeros(3)
    assert not _lsq.curve_through(_point, _point_jac, x0, **_kw())
    assert not _lsq.curve_through_hyperplanes(_point, _point_jac, x0, **_kw())


def test_a_one_sided_curve() -> None:
    x0 = np.zeros(2)
    assert _lsq.curve_through_hyperplanes(_half_line, _half_line_jac, x0, **_kw())
    # the same map mirrored (zeros for x_1 ≤ 0): found on the other side
    mirror = lambda x: _half_line(-x)  # noqa: E731
    mirror_jac = lambda x: -_half_line_jac(-x)  # noqa: E731
    assert _lsq.curve_through_hyperplanes(mirror, mirror_jac, x0, **_kw())


def test_no_null_vector_no_curve() -> None:
    lin = lambda x: x  # noqa: E731
    assert not _lsq.curve_through_hyperplanes(lin, lambda x: np.eye(2), np.zeros(2), **_kw())


def test_two_parallel_relu_units_lie_on_a_curve() -> None:
    """Units 0 and 1 parallel (w_1 = 0.7 w_0): they share one kink and the slope
    ``a_0‖w_0‖ + a_1‖w_1‖``, so with the two invariants 4 norms and read-outs meet 3 equations:
    a one-dimensional fiber through θ0 whose first-order dimension is 2 (the probe Jacobian's
    basis null vectors miss it). The curve, solved here in closed form (move ‖w_0‖, keep its
    invariant, give unit 1 the rest of the slope on its own invariant), keeps f and the
    invariants; relu_fiber now reports the continuum at θ0 (it said isolated before)."""
    net = ReluMLP(2, 3)
    W = np.array([[-0.26048783, 1.16001408], [-0.18234148, 0.81200985], [-1.27217382, -0.9192086]])
    W[1] = 0.7 * W[0]
    A = np.array([[-0.48578817, -1.34990391, 1.00815662]])
    X = np.random.default_rng(197).standard_normal((5, 2))
    rep = relu_fiber(net, (W, A), X, notion="global", seed=1, n_random=5, n_perturb=5)
    assert rep.continuum is True and rep.fiber_dimension == 2
    # the closed-form curve
    n0, a0, a1 = np.linalg.norm(W[0]), A[0, 0], A[0, 1]
    n1 = np.linalg.norm(W[1])
    slope, d0, d1 = a0 * n0 + a1 * n1, a0**2 - n0**2, a1**2 - n1**2
    x = np.random.default_rng(3).standard_normal((3000, 2))
    for eps in (1e-3, 1e-2):
        m0 = n0 + eps
        b0 = np.sign(a0) * np.sqrt(d0 + m0**2)
        rest = slope - b0 * m0  # = b1 · m1 with b1² − m1² = d1
        b1 = np.sign(rest) * np.sqrt((d1 + np.sqrt(d1**2 + 4 * rest**2)) / 2)
        m1 = np.sqrt(b1**2 - d1)
        W2, A2 = W.copy(), A.copy()
        W2[0], W2[1] = W[0] / n0 * m0, W[0] / n0 * m1
        A2[0, 0], A2[0, 1] = b0, b1
        f0, f = relu_forward(net, (W, A), x), relu_forward(net, (W2, A2), x)
        assert np.abs(f - f0).max() <= ATOL_SAME
        inv = relu_invariants(net, (W2, A2)) - relu_invariants(net, (W, A))
        assert np.abs(inv).max() <= ATOL_SAME


def test_dataset_notion_counts_only_points_of_theta0s_activation_pattern() -> None:
    """A zero unit (w = a = 0), d = 1, samples on both sides of 0: any w_z ≠ 0 fires on some
    sample, so the dataset fiber (same pattern on X) holds no curve through θ0; the hyperplane
    test found one of another pattern and reported a continuum (s27b audit RERUN #1). Where
    every sample lies in one half-plane, w_z can turn into the cone none of them excites, with
    |a_z| = |w_z| (its invariant 0): a genuine curve of the dataset fiber."""
    net = ReluMLP(1, 2)
    X = np.array([[0.4], [1.3], [0.7], [-0.5], [-1.1]])
    theta = (np.array([[0.9], [0.0]]), np.array([[0.7, 0.0]]))
    rep = relu_fiber(net, theta, X, notion="dataset")
    assert rep.continuum is False
    net2 = ReluMLP(2, 2)
    X2 = np.array([[1.0, 0.2], [0.8, -0.3], [1.2, 0.5]])  # all in x_1 > 0
    theta2 = (np.array([[0.0, 0.0], [0.5, 1.0]]), np.array([[0.0, 1.3]]))
    rep2 = relu_fiber(net2, theta2, X2, notion="dataset", n_random=4, n_perturb=4)
    assert rep2.continuum is True
    # a narrow cone: the samples' directions span 175°, so the weights none of them excites
    # form a cone of 5° (185° to 190°), which the closed-form cone curve finds
    ang = np.deg2rad(np.array([-80.0, 0.0, 60.0, 95.0]))
    X3 = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    rep3 = relu_fiber(net2, theta2, X3, notion="dataset", n_random=4, n_perturb=4)
    assert rep3.continuum is True
    for t in (1e-3, 1e-1):  # the curve: w_z = t·(−1, 0), a_z = t
        W, A = theta2[0].copy(), theta2[1].copy()
        W[0], A[0, 0] = (-t, 0.0), t
        np.testing.assert_allclose(
            relu_forward(net2, (W, A), X2), relu_forward(net2, theta2, X2), atol=ATOL_SAME
        )
        np.testing.assert_allclose(
            relu_invariants(net2, (W, A)), relu_invariants(net2, theta2), atol=ATOL_SAME
        )
        pre = X2 @ W.T
        assert np.array_equal(pre > 0, X2 @ theta2[0].T > 0)
