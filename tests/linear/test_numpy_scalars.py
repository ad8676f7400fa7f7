"""Trial D #7: NumPy scalars are numbers. Integer arguments accept any ``numbers.Integral`` and
real ones any ``numbers.Real`` (bools refused), and give the same result as the Python value."""

from __future__ import annotations

import json

import numpy as np
import pytest

from neuromanifold.linear import LCN, delta, mu
from neuromanifold.linear.converge import convergence_experiment
from neuromanifold.linear.flow import fc_balanced_flow, gradient_descent
from neuromanifold.linear.losses import QuadraticLoss
from neuromanifold.linear.metric import jacobian_rank
from neuromanifold.linear.metric_compare import compare_metrics
from neuromanifold.linear.ntk import fc_balanced_operator
from neuromanifold.linear.solve import fiber_newton
from neuromanifold.linear.survey import run_survey

ARCH = LCN((3, 2, 2), (2, 2))
THETA = [np.array([1.0, -0.5, 0.3]), np.array([0.7, 1.2]), np.array([-0.4, 0.9])]
LOSS = QuadraticLoss(np.eye(9), np.linspace(-1.0, 1.0, 9))


def test_gradient_descent_accepts_numpy_scalars() -> None:
    # np.float32(0.01) is a float32 value; as a float64 it is the same number, so the runs match
    lr = np.float32(0.01)
    a = gradient_descent(ARCH, THETA, LOSS, lr=lr, steps=np.int64(3), record_every=np.int8(1))
    b = gradient_descent(ARCH, THETA, LOSS, lr=float(lr), steps=3, record_every=1)
    np.testing.assert_array_equal(a.params, b.params)
    np.testing.assert_array_equal(a.t, b.t)
    assert a.t.dtype == np.float64
    json.dumps(a.to_dict())  # plain Python numbers throughout
    for kw, name in (({"lr": True}, "lr"), ({"steps": True}, "steps")):
        args = {"lr": 0.01, "steps": 3, **kw}
        with pytest.raises(ValueError, match=rf"{name} = True: expected a positive"):
            gradient_descent(ARCH, THETA, LOSS, **args)
    with pytest.raises(ValueError, match=r"record_every = np\.False_: expected a positive int"):
        gradient_descent(ARCH, THETA, LOSS, lr=0.01, steps=3, record_every=np.False_)


def test_fc_depth_accepts_numpy_integers() -> None:
    rng = np.random.default_rng(0)
    W, Z = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    np.testing.assert_array_equal(
        fc_balanced_operator(W, Z, depth=np.int64(2)), fc_balanced_operator(W, Z, depth=2)
    )
    with pytest.raises(ValueError, match="depth = True: expected a positive int L"):
        fc_balanced_operator(W, Z, depth=True)
    loss = QuadraticLoss(np.eye(6), np.ones(6))
    a = fc_balanced_flow(W, loss, (0.0, 0.1), depth=np.int64(3), t_eval=[0.0, 0.1])
    b = fc_balanced_flow(W, loss, (0.0, 0.1), depth=3, t_eval=[0.0, 0.1])
    np.testing.assert_array_equal(a.v, b.v)
    with pytest.raises(ValueError, match="depth = True: expected a positive int L"):
        fc_balanced_flow(W, loss, (0.0, 0.1), depth=True)


def test_other_integer_and_real_arguments_accept_numpy_scalars() -> None:
    v, d = mu(ARCH, THETA), delta(THETA)
    start = [1.01 * w for w in THETA]  # off the fiber: Gauss–Newton iterates
    a = fiber_newton(ARCH, v, d, start, max_iter=np.int64(5)).to_dict()
    assert a["iterations"] >= 1 and a == fiber_newton(ARCH, v, d, start, max_iter=5).to_dict()
    assert jacobian_rank(ARCH, THETA, rtol=np.float64(1e-9)) == jacobian_rank(ARCH, THETA)
    arch2 = LCN((2, 2), (2,))
    th2 = [np.array([1.0, 2.0]), np.array([3.0, 1.0])]
    kw = {"theta": th2, "n_starts": np.int64(2), "seed": np.int64(0)}
    c = compare_metrics(arch2, mu(arch2, th2), [[0.0], [3.0]], agree_tol=np.float64(1e-8), **kw)
    ref = compare_metrics(arch2, mu(arch2, th2), [[0.0], [3.0]], theta=th2, n_starts=2)
    assert c.to_dict() == ref.to_dict()
    with pytest.raises(ValueError, match=r"n_starts = True: expected an int >= 1"):
        compare_metrics(arch2, mu(arch2, th2), [[0.0], [3.0]], n_starts=True)
    s = run_survey(samples=np.int64(1), seed=np.int64(0), row_indices=[np.int64(2)])
    assert s.to_dict() == run_survey(samples=1, seed=0, row_indices=[2]).to_dict()
    json.dumps(s.to_dict())
    r = convergence_experiment(arch2, n_runs=np.int64(1), seed=np.int64(0), t_max=1.0)
    assert json.dumps(r.to_dict()) == json.dumps(
        convergence_experiment(arch2, n_runs=1, seed=0, t_max=1.0).to_dict()
    )
    with pytest.raises(ValueError, match="seed must be a non-negative int, got True"):
        convergence_experiment(arch2, n_runs=1, seed=True, t_max=1.0)
