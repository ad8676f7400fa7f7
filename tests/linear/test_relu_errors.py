"""Error paths of the shallow ReLU entry points (s32 trial RELU #4–#6): another architecture, a
non-finite, complex or empty X, and bad search sizes each get a ValueError or TypeError naming the
argument, not a NumPy error from inside or a NaN result."""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear.architecture import FC, LCN
from neuromanifold.linear.ntk import fc_ntk_apply
from neuromanifold.linear.relu import ReluMLP, relu_ntk
from neuromanifold.linear.relu_fiber import relu_fiber
from neuromanifold.linear.relu_global import global_first_order_dimension


def test_relu_functions_refuse_other_architectures_and_bad_inputs() -> None:
    net = ReluMLP(2, 2)
    theta = (np.ones((2, 2)), np.ones((1, 2)))
    X = np.ones((3, 2))
    for other in (FC((2, 2, 1)), LCN((2, 2), (2,)), None):
        with pytest.raises(TypeError, match="expected a ReluMLP or ReluCNN"):
            relu_ntk(other, theta, X)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="expected a ReluMLP or ReluCNN"):
            global_first_order_dimension(other, theta)  # type: ignore[arg-type]
    for bad in (np.array([[np.nan, 1.0]]), np.array([[np.inf, 1.0]])):
        with pytest.raises(ValueError, match="X must be finite"):
            relu_ntk(net, theta, bad)
        with pytest.raises(ValueError, match="X must be finite"):
            relu_fiber(net, (np.eye(2), theta[1]), bad)
    with pytest.raises(ValueError, match="X is complex"):
        relu_ntk(net, theta, np.ones((2, 2)) * (1 + 1j))
    with pytest.raises(ValueError, match=r"theta\[W\] is complex"):
        relu_ntk(net, (np.ones((2, 2)) * 1j, theta[1]), X)
    with pytest.raises(ValueError, match=r"with N >= 1, got \(0, 2\)"):
        relu_ntk(net, theta, np.zeros((0, 2)))
    for kw, name in [
        ({"n_random": -3}, "n_random"),
        ({"n_random": 2.5}, "n_random"),
        ({"n_perturb": -1}, "n_perturb"),
        ({"probe_size": -5}, "probe_size"),
    ]:
        with pytest.raises(ValueError, match=f"{name} must be an integer >= 0"):
            relu_fiber(net, theta, X, notion="global", **kw)
    with pytest.raises(ValueError, match="Z must be finite"):
        fc_ntk_apply(FC((2, 2, 1)), [np.ones((2, 2)), np.ones((1, 2))], np.array([[np.nan, 1.0]]))
