"""Shallow ReLU networks: invariants, NTK vs jacrev, fibers in both notions (spec §2.2, §4.8)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from neuromanifold.linear import _lsq
from neuromanifold.linear.relu import (
    ReluCNN,
    ReluMLP,
    activation_pattern,
    random_relu_params,
    relu_forward,
    relu_invariants,
    relu_jacobian,
    relu_ntk,
    relu_ntk_reference,
)
from neuromanifold.linear.relu_fiber import (
    EmptyRegionError,
    all_active_centre,
    permutation_distance,
    region_dataset,
    relu_fiber,
)

ATOL_NTK = 1e-12  # structured vs jacrev NTK (entries of order 1-10)
ATOL_EXACT = 1e-12  # closed forms and exact symmetries, entries of order 1-10
FD_STEP = 1e-6
# central differences of a piecewise-bilinear map away from kinks: exact up to rounding
# (≈ eps·|f| / FD_STEP); measured ≤ 1.4e-9 over seeds 1-10 of the cases below
ATOL_FD = 2e-7
ATOL_RATE = 1e-12  # d/dt of an invariant, relative to the gradient's size
# fiber points solve Φ(θ) = Φ(θ0) to FIBER_RTOL = 1e-10, so their NTKs (entries ≈ 10) are
# accurate to about that times the conditioning
ATOL_FIBER_NTK = 1e-8
POINT_GAP_MIN = 1e-3  # distinct fiber points: farther apart than this modulo unit permutations

NETS = [ReluMLP(3, 4, 2), ReluMLP(2, 3), ReluCNN(7, 3, 2), ReluCNN(6, 2, 1, channels=2)]


@pytest.mark.parametrize("net", NETS, ids=lambda n: n.describe())
def test_ntk_matches_jacrev(net: ReluMLP | ReluCNN) -> None:
    rng = np.random.default_rng(0)
    theta = random_relu_params(net, rng)
    X = rng.standard_normal((5, net.input_dim))
    np.testing.assert_allclose(
        relu_ntk(net, theta, X), relu_ntk_reference(net, theta, X), rtol=0, atol=ATOL_NTK
    )


@pytest.mark.parametrize("net", NETS, ids=lambda n: n.describe())
def test_jacobian_matches_finite_differences(net: ReluMLP | ReluCNN) -> None:
    rng = np.random.default_rng(1)
    W, A = random_relu_params(net, rng)
    X = rng.standard_normal((4, net.input_dim))
    J = relu_jacobian(net, (W, A), X)
    x = np.concatenate([W.ravel(), A.ravel()])
    nW = W.size
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = FD_STEP

        def f(y: np.ndarray) -> np.ndarray:
            return relu_forward(net, (y[:nW].reshape(W.shape), y[nW:].reshape(A.shape)), X)

        fd = (f(x + e) - f(x - e)).ravel() / (2 * FD_STEP)
        np.testing.assert_allclose(J[:, i], fd, rtol=0, atol=ATOL_FD)


@pytest.mark.parametrize("net", NETS, ids=lambda n: n.describe())
def test_invariants_are_orthogonal_to_the_loss_gradient(net: ReluMLP | ReluCNN) -> None:
    """d/dt (‖a_j‖² − ‖w_j‖²) = −⟨∇ inv_j, ∇L⟩ = 0 for a squared loss (positive homogeneity).

    (Checked as an identity at random points rather than by integrating the flow, whose
    right-hand side is only piecewise smooth.)
    """
    rng = np.random.default_rng(2)
    W, A = random_relu_params(net, rng)
    X = rng.standard_normal((6, net.input_dim))
    Y = rng.standard_normal((6, net.output_dim))
    r = (relu_forward(net, (W, A), X) - Y).ravel()
    g = relu_jacobian(net, (W, A), X).T @ r  # ∇L for L = ½‖f(X) − Y‖²
    gW, gA = g[: W.size].reshape(W.shape), g[W.size :].reshape(A.shape)
    a_rows = A.T if isinstance(net, ReluMLP) else A  # row u = read-out weights of unit u
    ga_rows = gA.T if isinstance(net, ReluMLP) else gA
    rate = 2 * np.sum(a_rows * ga_rows, axis=1) - 2 * np.sum(W * gW, axis=1)
    assert np.max(np.abs(rate)) < ATOL_RATE * max(1.0, float(np.max(np.abs(g))))


def test_invariant_closed_form() -> None:
    net = ReluCNN(5, 2, 2, channels=2)
    W = np.array([[1.0, 2.0], [0.0, 1.0]])
    A = np.array([[3.0, 0.0], [1.0, 1.0]])
    np.testing.assert_allclose(
        relu_invariants(net, (W, A)), [9 - 5, 2 - 1], rtol=0, atol=ATOL_EXACT
    )


def test_global_notion_single_channel_cnn_is_determined() -> None:
    net = ReluCNN(7, 3, 2)
    rng = np.random.default_rng(3)
    theta = random_relu_params(net, rng)
    X = region_dataset(net, theta, 8, rng, require_all_active=True)
    rep = relu_fiber(net, theta, X, notion="global", seed=1)
    assert rep.fiber_dimension == 0 and rep.continuum is False
    assert not any("continuum" in n for n in rep.notes)
    # θ0 is the first start, so it is always the first reported point; the content is that
    # the other starts (random and perturbed) that reached the fiber were all identified with
    # it modulo unit permutations: one point, hence one NTK
    (route,) = rep.routes
    assert route.n_converged > 1
    assert rep.n_points == 1 and rep.n_distinct_ntks == 1
    x0 = np.concatenate([np.ravel(t) for t in theta])
    (point,) = rep.point_arrays()
    # the solve started at θ0 may move it by rounding (6e-17 measured with the kink probes)
    assert permutation_distance(net, np.concatenate([np.ravel(t) for t in point]), x0) <= ATOL_EXACT


def test_dataset_notion_mlp_in_one_region_is_a_continuous_family() -> None:
    """All data in one region with every neuron active: a linear FC net ⇒ NTK moves."""
    net = ReluMLP(3, 3)
    rng = np.random.default_rng(4)
    theta = random_relu_params(net, rng)
    X = region_dataset(net, theta, 6, rng, require_all_active=True)
    assert activation_pattern(net, theta, X).all()
    rep = relu_fiber(net, theta, X, notion="dataset", seed=2)
    assert rep.fiber_dimension > 0
    assert rep.n_distinct_ntks > 1
    # the points are samples of the continuum, and the report says so as lcn_fiber's and
    # fc_fiber's do (s25 trial LIN #3: continuum was None and no note)
    assert rep.continuum is True
    assert any(n.startswith("the fiber is a continuum") for n in rep.notes), rep.notes


def test_global_notion_mlp_invariant_matching_gives_several_ntks() -> None:
    """Per-neuron invariants can be re-assigned among the kinks: same f and δ, other NTK."""
    net = ReluMLP(2, 2)
    W = np.array([[1.0, 0.2], [-0.3, 1.0]])
    A = np.array([[1.5, -0.8]])
    theta = (W, A)
    # neuron j carries a_j w_j; choose the other neuron's invariant for it and rescale
    d = relu_invariants(net, theta)
    swapped_W, swapped_A = W.copy(), A.copy()
    for j, dj in enumerate(d[::-1]):
        p = A[0, j] * W[j]  # a_j w_j fixes the neuron's contribution
        # c² a² − |w|²/c² = dj with a = |p|/|w| scaling: solve for s = c² > 0
        a2, w2 = A[0, j] ** 2, float(W[j] @ W[j])
        s = (dj + np.sqrt(dj**2 + 4 * a2 * w2)) / (2 * a2)
        swapped_A[0, j] = np.sqrt(s) * A[0, j]
        swapped_W[j] = W[j] / np.sqrt(s)
        np.testing.assert_allclose(swapped_A[0, j] * swapped_W[j], p, rtol=0, atol=ATOL_EXACT)
    # relabel the units so that the invariant vector is δ again: (p_1, δ_0), (p_0, δ_1)
    theta2 = (swapped_W[::-1].copy(), swapped_A[:, ::-1].copy())
    np.testing.assert_allclose(relu_invariants(net, theta2), d, rtol=0, atol=ATOL_EXACT)
    probe = np.random.default_rng(5).standard_normal((50, 2))
    np.testing.assert_allclose(
        relu_forward(net, theta2, probe), relu_forward(net, theta, probe), rtol=0, atol=ATOL_EXACT
    )
    assert (
        permutation_distance(
            net,
            np.concatenate([W.ravel(), A.ravel()]),
            np.concatenate([swapped_W.ravel(), swapped_A.ravel()]),
        )
        > POINT_GAP_MIN
    )
    rep = relu_fiber(net, theta, probe[:5], notion="global", seed=3)
    assert rep.fiber_dimension == 0  # locally determined ...
    assert rep.n_distinct_ntks == 2  # ... but globally two NTKs
    K2 = relu_ntk(net, theta2, probe[:5])
    assert any(np.max(np.abs(k - K2)) <= ATOL_FIBER_NTK for k in rep.ntk_arrays())


@pytest.mark.parametrize("net", NETS, ids=lambda n: n.describe())
@pytest.mark.parametrize("notion", ["dataset", "global"])
def test_fiber_jacobian_matches_finite_differences(
    net: ReluMLP | ReluCNN, notion: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hand-written dΦ that relu_fiber hands to Levenberg–Marquardt vs central differences.

    Φ(θ) = (vec f_θ(Z), invariants(θ)) is piecewise bilinear / quadratic, so central differences
    away from kinks are exact up to rounding. The pair (Φ − Φ(θ0), dΦ) is captured where
    relu_fiber passes it to the multi-start solver.
    """
    captured: dict[str, Any] = {}
    solver = _lsq.multistart

    def spy(fun: Any, jac: Any, starts: Any, **kw: Any) -> Any:
        captured["fun"], captured["jac"] = fun, jac
        return solver(fun, jac, starts, **kw)

    monkeypatch.setattr(_lsq, "multistart", spy)
    rng = np.random.default_rng(7)
    W, A = random_relu_params(net, rng)
    X = rng.standard_normal((4, net.input_dim))
    relu_fiber(net, (W, A), X, notion=notion, n_random=0, n_perturb=0, probe_size=6)
    fun, jac = captured["fun"], captured["jac"]
    x0 = np.concatenate([W.ravel(), A.ravel()])
    for x in (x0, x0 + 0.3 * rng.standard_normal(x0.size)):
        J = jac(x)
        fd = np.empty_like(J)
        for i in range(x.size):
            e = np.zeros_like(x)
            e[i] = FD_STEP
            fd[:, i] = (fun(x + e) - fun(x - e)) / (2 * FD_STEP)
        np.testing.assert_allclose(J, fd, rtol=0, atol=ATOL_FD)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="width must be an integer >= 1"):
        ReluMLP(2, 0)
    with pytest.raises(ValueError, match="filter_size must be <= length"):
        ReluCNN(3, 4)
    net = ReluMLP(2, 2)
    with pytest.raises(ValueError, match=r"theta\[W\] must have shape \(2, 2\)"):
        relu_forward(net, (np.zeros((3, 2)), np.zeros((1, 2))), np.zeros((1, 2)))
    with pytest.raises(ValueError, match=r"theta\[W\] must be finite"):
        relu_forward(
            net, (np.array([[1.0, np.nan], [0.0, 1.0]]), np.zeros((1, 2))), np.zeros((1, 2))
        )
    with pytest.raises(ValueError, match=r"theta\[A\] must be finite"):
        relu_forward(net, (np.eye(2), np.array([[np.inf, 0.0]])), np.zeros((1, 2)))
    # opposite first-layer rows: the two units are never active together
    opposite = (np.array([[1.0, 0.5], [-1.0, -0.5]]), np.ones((1, 2)))
    with pytest.raises(EmptyRegionError, match="the all-active region is empty"):
        region_dataset(
            net, opposite, 3, np.random.default_rng(0), require_all_active=True, max_tries=5
        )
    # one region's points, not all-active ones: the draws alone decide. 60 kinks through the
    # origin of the plane cut it into thin wedges that points 5·‖x0‖ away rarely stay in
    wide = ReluMLP(d_in=2, width=60)
    kinks = (np.random.default_rng(0).standard_normal((60, 2)), np.ones((1, 60)))
    with pytest.raises(RuntimeError, match="no dataset within one activation region"):
        region_dataset(wide, kinks, 40, np.random.default_rng(0), spread=5.0, max_tries=2)
    with pytest.raises(ValueError, match="theta must be a pair"):
        relu_invariants(net, np.zeros(3))
    with pytest.raises(ValueError, match=r"X must have shape \(N, 2\)"):
        relu_forward(net, (np.zeros((2, 2)), np.zeros((1, 2))), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="notion must be 'dataset' or 'global'"):
        relu_fiber(net, (np.ones((2, 2)), np.ones((1, 2))), np.ones((3, 2)), notion="local")


# RK4 drift of a conserved quantity over 1600 steps of 2.5e-4 (5e-8 at steps of 1e-3, the
# diagonal's as much: integrator error, falling like h⁴)
FLOW_CONSERVED_ATOL = 1e-9


def _all_active_cell() -> tuple[ReluMLP, tuple[np.ndarray, np.ndarray], np.ndarray]:
    """ReluMLP(2, 3, 1) with positive inputs and input weights: every unit active on X."""
    rng = np.random.default_rng(0)
    X = np.abs(rng.standard_normal((4, 2))) + 0.1
    W = np.abs(rng.standard_normal((3, 2))) + 0.1
    A = rng.standard_normal((1, 3))
    return ReluMLP(2, 3, 1), (W, A), X


def test_units_sharing_an_activation_pattern_conserve_their_cross_terms() -> None:
    """s29 trial LIN2 F2: on the data, gradient flow of the squared loss conserves
    (AᵀA − WWᵀ)_{jk} for units j, k with the same activation pattern (all of them here), not
    only the diagonal; the dataset fiber keeps the whole matrix, and its dimension is
    n_params − rank of (f on X, the 6 conserved entries) = 9 − 2 − 6 = 1."""
    net, (W, A), X = _all_active_cell()
    y = np.array([[1.0], [-0.5], [0.3], [2.0]])

    def grad(x: np.ndarray) -> np.ndarray:
        th = (x[:6].reshape(3, 2), x[6:].reshape(1, 3))
        return relu_jacobian(net, th, X).T @ (relu_forward(net, th, X) - y).ravel()

    def gram(x: np.ndarray) -> np.ndarray:
        Wx, Ax = x[:6].reshape(3, 2), x[6:].reshape(1, 3)
        return Ax.T @ Ax - Wx @ Wx.T

    x = np.concatenate([W.ravel(), A.ravel()])
    start, h = gram(x), 2.5e-4
    for _ in range(1600):
        k1 = -grad(x)
        k2 = -grad(x + h / 2 * k1)
        k3 = -grad(x + h / 2 * k2)
        k4 = -grad(x + h * k3)
        x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    assert np.all(activation_pattern(net, (x[:6].reshape(3, 2), x[6:].reshape(1, 3)), X))
    assert np.linalg.norm(x - np.concatenate([W.ravel(), A.ravel()])) > 0.1  # it moved
    assert np.max(np.abs(gram(x) - start)) <= FLOW_CONSERVED_ATOL
    rep = relu_fiber(net, (W, A), X, notion="dataset")
    assert rep.fiber_dimension == 1
    for W1, A1 in rep.point_arrays():
        assert np.max(np.abs((A1.T @ A1 - W1 @ W1.T) - start)) <= 1e-9 * np.max(np.abs(start))


def test_cnn_channels_sharing_a_pattern_keep_their_cross_term() -> None:
    """s29b audit #5: the cross term of two channels with one pattern on the data is conserved
    as for MLP units (the argument summed over positions); the dataset fiber fixes it: its
    dimension is 5, not 6, and every point keeps A Aᵀ − W Wᵀ."""
    rng = np.random.default_rng(3)
    net = ReluCNN(length=6, filter_size=2, stride=1, channels=2)
    X = np.abs(rng.standard_normal((4, 6))) + 0.1
    W = np.abs(rng.standard_normal((2, 2))) + 0.1
    A = rng.standard_normal((2, net.positions))
    assert np.all(activation_pattern(net, (W, A), X))
    start = A @ A.T - W @ W.T

    def phi(x: np.ndarray) -> np.ndarray:  # f on X and the whole 2×2 matrix, by hand
        Wx, Ax = x[:4].reshape(2, 2), x[4:].reshape(2, net.positions)
        gram = Ax @ Ax.T - Wx @ Wx.T
        return np.concatenate([relu_forward(net, (Wx, Ax), X).ravel(), gram[np.triu_indices(2)]])

    x0, eps = np.concatenate([W.ravel(), A.ravel()]), 1e-6
    jac = np.stack([(phi(x0 + eps * e) - phi(x0 - eps * e)) / (2 * eps) for e in np.eye(14)], 1)
    sv = np.linalg.svd(jac, compute_uv=False)
    expected = 14 - int(np.sum(sv > 1e-7 * sv[0]))
    rep = relu_fiber(net, (W, A), X, notion="dataset")
    assert rep.fiber_dimension == expected
    # the cross term (row −2: the (0, 1) entry) removes one dimension
    without = np.linalg.matrix_rank(np.delete(jac, -2, axis=0), tol=1e-7 * sv[0])
    assert expected == 14 - without - 1
    for W1, A1 in rep.point_arrays():
        assert np.max(np.abs((A1 @ A1.T - W1 @ W1.T) - start)) <= 1e-9 * np.max(np.abs(start))


def test_a_thin_all_active_cone_is_found_by_its_linear_program() -> None:
    """Rows (1, ε) and (−1, ε) leave the cone x₂ > |x₁|/ε, half-angle ≈ ε: Gaussian centres
    almost never land in it; the linear program's centre does, and every point drawn within
    half its safe radius is all-active."""
    net = ReluMLP(d_in=2, width=2)
    eps = 1e-4
    thin = (np.array([[1.0, eps], [-1.0, eps]]), np.ones((1, 2)))
    x0, radius = all_active_centre(net, thin)
    assert radius > 0 and bool(activation_pattern(net, thin, x0[None, :]).all())
    X = region_dataset(net, thin, 8, np.random.default_rng(0), require_all_active=True, max_tries=3)
    assert X.shape == (8, 2) and bool(activation_pattern(net, thin, X).all())
    assert all_active_centre(net, (np.array([[1.0, 0.0], [0.0, 0.0]]), np.ones((1, 2)))) is None


def test_the_survey_mlp_rows_redraw_theta_without_an_all_active_region() -> None:
    """s34 trial RELU D1: seed 0's sample 40 of row 8 and sample 62 of row 9 drew θ with an
    empty (or too thin) all-active region and the survey ended in a traceback; 19 of seeds 0–19
    did at the default 20 samples. The rows now draw θ again, and sample."""
    from neuromanifold.linear.survey import default_rows

    rows = default_rows()
    for row, j in ((8, 40), (9, 62)):
        report = rows[row].sample(np.random.default_rng([0, row, j]))
        assert report.n_points >= 1


def test_a_dead_region_fiber_keeps_the_pattern_of_every_point_it_returns() -> None:
    """s34 trial RELU D2: both units dead on the data. A solve ended on the region's boundary
    (z ≈ −1e-17 at unit scale) and the point, scaled back, had z = +2.5e-18 on one sample: its
    NTK (max entry 2.49) made the verdict "dependent" (spread 1.0). The pattern is checked on the
    points as returned; on the all-dead region J = 0, one NTK."""
    X = np.abs(np.random.default_rng(8).standard_normal((6, 2)))
    net = ReluMLP(2, 2)
    theta = (np.array([[-1.0, -0.3], [-0.2, -1.0]]), np.array([[0.7, 2.0]]))
    pattern = activation_pattern(net, theta, X)
    assert not pattern.any()
    report = relu_fiber(net, theta, X, notion="dataset")
    for point in report.points:
        assert np.array_equal(activation_pattern(net, point, X), pattern)
        assert not np.any(relu_ntk(net, point, X))
    assert report.n_distinct_ntks == 1 and not report.ntk_dependent


@pytest.mark.parametrize(
    "net", [ReluMLP(2, 2), ReluMLP(3, 3, 2), ReluCNN(7, 3, 2, channels=2)], ids=str
)
def test_the_global_fiber_of_zero_holds_the_cone_of_cancelling_pairs(net) -> None:
    """s34 trial RELU D3: at θ0 = 0 every start was 0 (drawn at θ0's size) and the fiber came out
    {0}, one NTK, no continuum. Two units with equal input weights and opposite read-outs of the
    same norm compute 0 with invariants 0, and so does t times them: a cone through 0 whose NTK
    is t² times a non-zero one."""
    X = np.random.default_rng(8).standard_normal((6, net.input_dim))
    zero = (np.zeros(net.shapes[0]), np.zeros(net.shapes[1]))
    report = relu_fiber(net, zero, X, notion="global")
    assert report.continuum and report.ntk_dependent
    probes = np.random.default_rng(9).standard_normal((500, net.input_dim))
    for point in report.points:
        assert float(np.max(np.abs(relu_forward(net, point, probes)))) <= 1e-12
        assert float(np.max(np.abs(relu_invariants(net, point)))) <= 1e-12


def test_a_single_channel_at_zero_has_the_point_zero_alone() -> None:
    """One channel cannot cancel itself: f ≡ 0 forces every read-out to 0 (each patch has an
    input coordinate of its own), then ‖w‖ = ‖a‖ = 0. The fiber is {0}, no continuum."""
    net = ReluCNN(7, 3, 2)
    X = np.random.default_rng(8).standard_normal((6, 7))
    report = relu_fiber(net, (np.zeros((1, 3)), np.zeros((1, 3))), X, notion="global")
    assert report.n_points == 1 and not report.continuum and not report.ntk_dependent
