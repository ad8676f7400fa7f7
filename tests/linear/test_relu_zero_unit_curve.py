"""A unit with no input weights: the one-sided curve of the global fiber through θ0.

Law (positive homogeneity, ``σ(t z) = t σ(z)`` for ``t ≥ 0``): growing the zero unit z parallel
to a live unit h, ``w_z(t) = t w_h``, while h gives up the same contribution and both keep their
invariants ``‖a_j‖² − ‖w_j‖²``, keeps the function on all of input space. The test's oracle is
that law evaluated directly: the outputs on 2000 Gaussian inputs (far more than the fiber
search's probes) and the invariants, at several t. The step off θ0 is Θ(t), so θ0 is not
isolated; the probe Jacobian's null vectors miss this curve (its tangent moves h's read-out,
which dΦ sees, against z's input weights, which dΦ does not: σ'(0) = 0), so relu_fiber reported
no continuum at θ0 in 14 of 16 hand-built cases (s26c audit RERUN2 N2).
"""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear.relu import ReluCNN, ReluMLP, relu_forward, relu_invariants
from neuromanifold.linear.relu_fiber import relu_fiber
from neuromanifold.linear.relu_global import zero_unit_curve

RTOL_SAME = 1e-13  # outputs and invariants along the curve, relative to their size at θ0
LINEAR_RTOL = 0.02  # ‖θ(t) − θ0‖/t at t = 1e-3 against t = 1e-2: a Θ(t) step


def _mlp_cases() -> list[tuple[ReluMLP, tuple[np.ndarray, np.ndarray]]]:
    """Width 2 and 3, d_out 1 and 2; the zero unit with and without a read-out."""
    return [
        (ReluMLP(2, 2), (np.array([[0.0, 0.0], [1.0, 0.5]]), np.array([[0.7, 1.2]]))),
        (ReluMLP(2, 2), (np.array([[0.0, 0.0], [1.0, 0.5]]), np.array([[0.0, 1.2]]))),
        (
            ReluMLP(2, 3),
            (np.array([[0.0, 0.0], [1.0, 0.5], [-0.3, 1.0]]), np.array([[0.7, 1.2, -0.4]])),
        ),
        (
            ReluMLP(3, 3, 2),
            (
                np.array([[0.2, -1.0, 0.4], [0.0, 0.0, 0.0], [1.0, 0.3, -0.5]]),
                np.array([[0.5, -0.8, 1.1], [0.9, 0.0, -0.3]]),
            ),
        ),
    ]


def _cnn_case() -> tuple[ReluCNN, tuple[np.ndarray, np.ndarray]]:
    net = ReluCNN(length=5, filter_size=2, stride=1, channels=2)
    W = np.array([[0.0, 0.0], [0.8, -0.6]])
    A = np.array([[0.3, -0.2, 0.5, 0.1], [1.0, 0.4, -0.7, 0.9]])
    return net, (W, A)


def _cases() -> list:
    return [*_mlp_cases(), _cnn_case()]


@pytest.mark.parametrize("case", range(5))
def test_the_curve_keeps_the_function_and_the_invariants(case: int) -> None:
    net, theta = _cases()[case]
    W0 = theta[0]
    zero = int(np.flatnonzero(~np.any(W0 != 0, axis=1))[0])
    partner = int(np.flatnonzero(np.any(W0 != 0, axis=1))[0])
    x = np.random.default_rng(case).standard_normal((2000, net.input_dim))
    f0, inv0 = relu_forward(net, theta, x), relu_invariants(net, theta)
    steps = {}
    for t in (1e-3, 1e-2, 1e-1):
        point = zero_unit_curve(net, theta, zero, partner, t)
        f, inv = relu_forward(net, point, x), relu_invariants(net, point)
        assert np.abs(f - f0).max() <= RTOL_SAME * np.abs(f0).max()
        assert np.abs(inv - inv0).max() <= RTOL_SAME * max(np.abs(inv0).max(), 1.0)
        moved = np.concatenate([(p - q).ravel() for p, q in zip(point, theta, strict=True)])
        steps[t] = float(np.linalg.norm(moved)) / t
        # the zero unit now has input weights: the point is not θ0 up to a permutation
        assert np.any(point[0][zero] != 0)
    assert abs(steps[1e-3] / steps[1e-2] - 1.0) <= LINEAR_RTOL
    assert zero_unit_curve(net, theta, zero, partner, 0.0)[0][zero].tolist() == [0.0] * W0.shape[1]


@pytest.mark.parametrize("case", range(5))
def test_relu_fiber_reports_the_continuum_at_theta0(case: int) -> None:
    net, theta = _cases()[case]
    X = np.random.default_rng(10 + case).standard_normal((8, net.input_dim))
    report = relu_fiber(net, theta, X, notion="global", seed=4, n_random=4, n_perturb=4)
    assert report.continuum
    assert report.fiber_dimension > 0
    assert any("the fiber is a continuum" in n for n in report.notes)


def test_errors() -> None:
    net, theta = _mlp_cases()[0]  # unit 0 zero, unit 1 live
    with pytest.raises(ValueError, match="has input weights"):
        zero_unit_curve(net, theta, 1, 0, 0.1)
    with pytest.raises(ValueError, match="different units"):
        zero_unit_curve(net, theta, 0, 0, 0.1)
    with pytest.raises(ValueError, match="one-sided"):
        zero_unit_curve(net, theta, 0, 1, -0.1)
    dead = (np.zeros((2, 2)), np.array([[0.7, 1.2]]))
    with pytest.raises(ValueError, match="no input weights to grow"):
        zero_unit_curve(net, dead, 0, 1, 0.1)
    # a_z = 0, a_h = 1, w_h = (1, 0): a_z(t) = t, r = 1 − t² = 0 at t = 1
    empty = (np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="empties unit 1"):
        zero_unit_curve(net, empty, 0, 1, 1.0)
