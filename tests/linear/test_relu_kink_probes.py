"""The global notion: kink probes, the closed-form first-order dimension, checked points.

Test oracle (generic θ0 only, written here apart from the package's line-grouped closed form
`global_first_order_dimension`): a bias-free shallow ReLU net is ``f(x) = Σ_h a_h σ(g_h · x)``
over its hidden pre-activations ``h`` (neurons, or channel × position). Along a tangent θ̇,
``ḟ(x) = Σ_h 1[g_h · x > 0] M_h x`` with ``M_h = ȧ_h g_hᵀ + a_h ġ_hᵀ``. Where the kink
hyperplanes ``{g_h · x = 0}`` are pairwise distinct (no parallel or antiparallel units) and
``d ≥ 2``, each has a facet on which unit ``h`` alone flips, so ``ḟ ≡ 0`` on ``R^d`` iff every
``M_h = 0``; the dimension is ``n_params − rank`` of θ̇ ↦ (all ``M_h``, the invariants'
derivative). The brute-force oracle for every θ0 (parallel, antiparallel and zero units, d = 1
included) is the probe Jacobian dΦ on Z that relu_fiber hands to its solver.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from neuromanifold.linear import _lsq
from neuromanifold.linear.relu import (
    ReluCNN,
    ReluMLP,
    activation_pattern,
    preactivations,
    random_relu_params,
    relu_forward,
    relu_invariants,
)
from neuromanifold.linear.relu_fiber import RANK_RTOL, kink_probes, relu_fiber
from neuromanifold.linear.relu_global import global_first_order_dimension

ReluNet = ReluMLP | ReluCNN
# the probe Jacobian's null dimension is right above this angle between two kinks: its
# separating singular value falls as the cube of the angle (8.6e-8 of σ_max at 1°, 2.3e-9 at
# 0.3°, 6.8e-10 at 0.2°) against the rank threshold RANK_RTOL = 1e-9
PROBE_RESOLUTION_DEG = 0.3
ATOL_DEAD = 1e-8  # a_j of a fiber point solved to FIBER_RTOL = 1e-10 (entries of order 1)
POINT_NORM_MIN = 1e-3  # a unit with a turnable direction: ‖w_j‖ above this
RTOL_NORM = 1e-12  # a normalised vector's norm
ATOL_EXACT = 1e-12  # the same function and invariants after turning a dead unit's w
# the module (``neuromanifold.linear.relu_fiber`` the attribute is the function of that name)
relu_fiber_module = importlib.import_module("neuromanifold.linear.relu_fiber")


def _unit_maps(net: ReluNet, x: np.ndarray) -> np.ndarray:
    """Every hidden unit's ``a_h ⊗ g_h`` and the invariants, flattened (degree 2 in θ)."""
    nW = int(np.prod(net.shapes[0]))
    W, A = x[:nW].reshape(net.shapes[0]), x[nW:].reshape(net.shapes[1])
    d = net.input_dim
    G = preactivations(net, (W, A), np.eye(d)).reshape(d, -1).T  # (H, d)
    a = A.T if isinstance(net, ReluMLP) else A.reshape(-1, 1)  # (H, d_out)
    return np.concatenate([np.einsum("ho,hd->hod", a, G).ravel(), relu_invariants(net, (W, A))])


def global_null_dimension(net: ReluNet, theta: tuple[np.ndarray, np.ndarray]) -> int:
    """``n_params − rank`` of θ̇ ↦ (M_h for all h, d invariants): the module docstring's oracle.

    The map is a polynomial of degree 2 in θ, so the central difference with step 1 is its
    derivative exactly (up to rounding).
    """
    x0 = np.concatenate([np.ravel(t) for t in theta])
    cols = []
    for i in range(x0.size):
        e = np.zeros_like(x0)
        e[i] = 1.0
        cols.append((_unit_maps(net, x0 + e) - _unit_maps(net, x0 - e)) / 2)
    s = np.linalg.svd(np.stack(cols, axis=1), compute_uv=False)
    return int(x0.size - np.sum(s > RANK_RTOL * s[0]))


def _rotated(w: np.ndarray, degrees: float, scale: float) -> np.ndarray:
    """``w`` turned by ``degrees`` in the plane of its first two coordinates, times ``scale``."""
    c, s = np.cos(np.deg2rad(degrees)), np.sin(np.deg2rad(degrees))
    out = w.astype(float).copy()
    out[0], out[1] = c * w[0] - s * w[1], s * w[0] + c * w[1]
    return scale * out


def _near_parallel(net: ReluNet, degrees: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Generic weights except that unit (or channel) 1's kink is ``degrees`` from unit 0's
    (one channel: generic weights)."""
    W, A = random_relu_params(net, np.random.default_rng(seed))
    if W.shape[0] > 1:
        W[1] = _rotated(W[0], degrees, 1.3)
    return W, A


def _no_kinks(net: ReluNet, theta: object, rng: np.random.Generator) -> np.ndarray:
    return np.zeros((0, net.input_dim))


def _probe_null_dimension(
    net: ReluNet, theta: object, X: np.ndarray, seed: int, monkeypatch: pytest.MonkeyPatch
) -> int:
    """``n_params − rank dΦ(θ0)`` with dΦ the probe Jacobian relu_fiber hands its solver (the
    brute-force oracle of the closed form), captured from ``_lsq.multistart``."""
    captured = {}
    solver = _lsq.multistart

    def spy(fun, jac, starts, **kw):
        starts = list(starts)
        captured["jac"], captured["x0"] = jac, starts[0]
        return solver(fun, jac, starts[:1], **kw)

    monkeypatch.setattr(_lsq, "multistart", spy)
    relu_fiber(net, theta, X, notion="global", seed=seed, n_random=0, n_perturb=0)
    monkeypatch.setattr(_lsq, "multistart", solver)
    return _lsq.null_dimension(captured["jac"](captured["x0"]), rtol=RANK_RTOL)


@pytest.mark.parametrize(
    ("net", "degrees", "seed"),
    [
        (ReluMLP(2, 3), 1.05, 0),  # s25b audit RERUN N4: a survey row-9 sample, 1.05° apart
        (ReluMLP(2, 3), 0.3, 1),
        (ReluMLP(3, 3), 0.5, 2),
        (ReluCNN(6, 2, 1, channels=2), 0.05, 3),
        (ReluMLP(2, 3), 0.1, 5),  # s26b audit RERUN N3: below the probe Jacobian's reach
    ],
    ids=lambda v: v.describe() if hasattr(v, "describe") else str(v),
)
def test_near_parallel_kinks_keep_the_global_first_order_dimension(
    net: ReluNet, degrees: float, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    theta = _near_parallel(net, degrees, seed)
    X = np.random.default_rng(seed + 10).standard_normal((4, net.input_dim))
    assert global_null_dimension(net, theta) == 0  # generic otherwise: a finite fiber
    assert global_first_order_dimension(net, theta) == 0
    rep = relu_fiber(net, theta, X, notion="global", seed=seed, n_random=4, n_perturb=4)
    assert rep.fiber_dimension == 0
    assert rep.continuum is False and not any("continuum" in n for n in rep.notes)
    (route,) = rep.routes
    assert "on both sides of θ0's kinks" in route.note
    # the probe Jacobian reads the same above the rank threshold's reach; below it (0.1°: its
    # separating singular value 8.6e-11 of σ_max) only the closed form separates the kinks
    probe_dim = _probe_null_dimension(net, theta, X, seed, monkeypatch)
    if degrees >= PROBE_RESOLUTION_DEG:
        assert probe_dim == 0
    elif isinstance(net, ReluMLP):
        assert probe_dim > 0
    # the same seed with the Gaussian probes alone: none falls in the thin wedges, and the
    # values on Z leave a false first-order direction (what the kink probes are for)
    monkeypatch.setattr(relu_fiber_module, "kink_probes", _no_kinks)
    assert _probe_null_dimension(net, theta, X, seed, monkeypatch) > 0


@pytest.mark.parametrize(
    "net",
    [
        ReluMLP(2, 2),
        ReluMLP(2, 3),
        ReluMLP(3, 4, 2),
        ReluCNN(7, 3, 2),
        ReluCNN(6, 2, 1, channels=2),
    ],
    ids=lambda n: n.describe(),
)
def test_global_fiber_dimension_matches_the_closed_form(
    net: ReluNet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random θ0 (kinks distinct with probability one): the package's closed form, the test's
    generic oracle and the probe Jacobian's null dimension agree."""
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        theta = random_relu_params(net, rng)
        X = rng.standard_normal((3, net.input_dim))
        rep = relu_fiber(net, theta, X, notion="global", seed=seed, n_random=0, n_perturb=0)
        assert rep.fiber_dimension == global_first_order_dimension(net, theta)
        assert rep.fiber_dimension == global_null_dimension(net, theta), seed
        assert rep.fiber_dimension == _probe_null_dimension(net, theta, X, seed, monkeypatch)


def _special(seed: int) -> list[tuple[ReluNet, tuple[np.ndarray, np.ndarray]]]:
    """Parallel, antiparallel, three units on one line, a zero unit, a dead read-out, d = 1, and
    a CNN whose two channels are antiparallel."""
    net = ReluMLP(2, 3)
    W, A = random_relu_params(net, np.random.default_rng(seed))
    cases = []
    for rows in ({1: 2.0}, {1: -2.0}, {1: -2.0, 2: 3.0}):
        Wc = W.copy()
        for j, c in rows.items():
            Wc[j] = c * W[0]
        cases.append((net, (Wc, A)))
    Wz = W.copy()
    Wz[2] = 0.0
    Az = A.copy()
    Az[0, 2] = 0.0
    cases += [(net, (Wz, A)), (net, (W, Az))]
    one = ReluMLP(1, 3)
    cases.append((one, random_relu_params(one, np.random.default_rng(seed))))
    cnn = ReluCNN(6, 2, 1, channels=2)
    Wc, Ac = random_relu_params(cnn, np.random.default_rng(seed))
    Wc[1] = -Wc[0]
    cases.append((cnn, (Wc, Ac)))
    return cases


@pytest.mark.parametrize("seed", range(3))
def test_closed_form_matches_the_probe_jacobian_on_special_layouts(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where kinks coincide the conditions pair the units of one hyperplane (S⁺ = S⁻, ΣS⁻ = 0);
    the probe Jacobian (brute force) reads the same dimension on every layout."""
    dims = []
    for net, theta in _special(seed):
        X = np.random.default_rng(seed + 1).standard_normal((3, net.input_dim))
        dim = global_first_order_dimension(net, theta)
        assert dim == _probe_null_dimension(net, theta, X, seed, monkeypatch)
        dims.append(dim)
    assert max(dims) > 0 and min(dims) == 0  # the layouts do differ


@pytest.mark.parametrize(
    "net",
    [ReluMLP(2, 3), ReluMLP(4, 3, 2), ReluCNN(7, 3, 2), ReluCNN(6, 2, 1, channels=2)],
    ids=lambda n: n.describe(),
)
def test_each_pair_straddles_one_kink(net: ReluNet) -> None:
    """``x±`` differ in exactly the one unit whose kink they straddle: 4 (d − 1) per unit
    (a pair at ``p`` and one at ``−p``)."""
    theta = _near_parallel(net, 1.0, 4)
    d = net.input_dim
    G = preactivations(net, theta, np.eye(d)).reshape(d, -1).T
    probes = kink_probes(net, theta, np.random.default_rng(0))
    assert probes.shape == (4 * (d - 1) * G.shape[0], d)
    plus, minus = probes[0::2], probes[1::2]
    flips = activation_pattern(net, theta, plus).reshape(len(plus), -1) != activation_pattern(
        net, theta, minus
    ).reshape(len(minus), -1)
    owners = np.repeat(np.arange(G.shape[0]), 2 * (d - 1))
    expected = np.zeros_like(flips)
    expected[np.arange(len(owners)), owners] = True
    np.testing.assert_array_equal(flips, expected)
    # p = (x+ + x−)/2 lies on the kink and has unit norm
    mid = (plus + minus) / 2
    np.testing.assert_allclose(np.abs(np.einsum("nd,nd->n", mid, G[owners])), 0, atol=ATOL_EXACT)
    np.testing.assert_allclose(np.linalg.norm(mid, axis=1), 1.0, rtol=RTOL_NORM)


def test_kink_probes_degenerate_inputs() -> None:
    """One input (every kink at 0): no pairs. A zero unit has no kink: no pairs for it."""
    net1 = ReluMLP(1, 3)
    assert kink_probes(
        net1, random_relu_params(net1, np.random.default_rng(0)), np.random.default_rng(0)
    ).shape == (0, 1)
    net = ReluMLP(3, 3)
    W, A = random_relu_params(net, np.random.default_rng(1))
    W[2] = 0.0
    assert kink_probes(net, (W, A), np.random.default_rng(0)).shape == (4 * 2 * 2, 3)


def _dead_units(net: ReluMLP, point: tuple[np.ndarray, np.ndarray]) -> list[int]:
    """Units with ``a_j = 0`` and ``w_j ≠ 0``: turning ``w_j`` at fixed norm keeps f and δ."""
    W, A = point
    return [
        j
        for j in range(net.width)
        if np.max(np.abs(A[:, j])) <= ATOL_DEAD and np.linalg.norm(W[j]) > POINT_NORM_MIN
    ]


def test_a_zero_unit_is_no_isolated_point_and_its_fibers_dead_units_turn() -> None:
    """θ0 with a zero unit (s25b audit RERUN, case D) was taken for an isolated point of its
    global fiber; it is not: the unit grows parallel to a live one along a one-sided curve
    (`zero_unit_curve`, s26c audit RERUN2 N2), now reported. The fiber also holds points where a
    unit with ``a_j = 0`` keeps ``‖w_j‖ > 0``: its direction turns freely (a circle)."""
    net = ReluMLP(2, 3)
    W, A = random_relu_params(net, np.random.default_rng(1))
    W[2], A[0, 2] = 0.0, 0.0
    X = np.random.default_rng(9).standard_normal((4, 2))
    rep = relu_fiber(net, (W, A), X, notion="global", seed=1)
    assert rep.continuum is True
    points = rep.point_arrays()
    dead = [i for i, p in enumerate(points) if _dead_units(net, p)]
    assert dead and 0 not in dead
    # the circle is genuine: turn the dead unit's w and Φ stays (outputs and invariants)
    probe = np.random.default_rng(2).standard_normal((200, 2))
    Wd, Ad = points[dead[0]]
    j = _dead_units(net, (Wd, Ad))[0]
    Wt = Wd.copy()
    Wt[j] = _rotated(Wd[j], 40.0, 1.0)
    np.testing.assert_allclose(
        relu_forward(net, (Wt, Ad), probe), relu_forward(net, (Wd, Ad), probe), atol=ATOL_EXACT
    )
    np.testing.assert_allclose(
        relu_invariants(net, (Wt, Ad)), relu_invariants(net, (Wd, Ad)), atol=ATOL_EXACT
    )


def _split_on_one_side(point: tuple[np.ndarray, np.ndarray], eps: float) -> tuple:
    """d = 1, two units with ``w > 0``: ``f(x) = (a_0 w_0 + a_1 w_1) σ(x)``. Move ``w_0`` by
    ``eps`` on its invariant (``a_0 = ±√(δ_0 + w_0²)``) and give unit 1 the rest ``P`` of the
    slope on its own (``a_1 √(a_1² − δ_1) = P``: ``a_1² = (δ_1 + √(δ_1² + 4P²))/2``, ``a_1`` of
    the sign of ``P``): the closed-form curve of equal functions and invariants through it."""
    W, A = point
    (w0, w1), (a0, a1) = W[:, 0], A[0]
    d0, d1 = a0**2 - w0**2, a1**2 - w1**2
    slope = a0 * w0 + a1 * w1
    w0n = w0 + eps
    a0n = np.sign(a0) * np.sqrt(d0 + w0n**2)
    rest = slope - a0n * w0n
    a1n = np.sign(rest) * np.sqrt((d1 + np.sqrt(d1**2 + 4 * rest**2)) / 2)
    w1n = np.sqrt(a1n**2 - d1)
    return np.array([[w0n], [w1n]]), np.array([[a0n, a1n]])


def test_a_continuum_away_from_theta0_is_said() -> None:
    """d = 1: unit 0 on x > 0, unit 1 dead (a = 0) pointing to x < 0. θ0 is isolated (the
    first-order dimension is 0: nothing on x < 0 may change, and the invariant fixes |w_1|), but
    its fiber holds the points where unit 1 turns to x > 0 and shares the slope with unit 0, a
    one-parameter family; the report says the points found there are samples of a continuum."""
    net = ReluMLP(1, 2)
    theta = (np.array([[1.0], [-0.8]]), np.array([[1.5, 0.0]]))
    rep = relu_fiber(net, theta, np.array([[0.7], [-1.3]]), notion="global", seed=0)
    assert rep.continuum is False and rep.fiber_dimension == 0
    points = rep.point_arrays()
    split = [i for i, (W, _) in enumerate(points) if np.all(W[:, 0] > 0)]
    assert split and 0 not in split
    # the family is genuine: each such point moves along it with Φ fixed, by Θ(eps)
    probe = np.linspace(-3.0, 3.0, 301)[:, None]
    for i in split:
        moved = _split_on_one_side(points[i], 1e-2)
        np.testing.assert_allclose(
            relu_forward(net, moved, probe), relu_forward(net, points[i], probe), atol=ATOL_EXACT
        )
        np.testing.assert_allclose(
            relu_invariants(net, moved), relu_invariants(net, theta), atol=ATOL_EXACT
        )
        assert np.linalg.norm(moved[0] - points[i][0]) >= 1e-2
    (note,) = [n for n in rep.notes if "continuum away from the first point" in n]
    counted = int(note.split("passes through ")[1].split(" of ")[0])
    assert counted >= len(split)
    assert f"of the {rep.n_points} point(s)" in note


def test_isolated_points_everywhere_get_no_continuum_note() -> None:
    """A generic θ0's global fiber (invariant matching: two points) has no curve anywhere."""
    net = ReluMLP(2, 2)
    theta = (np.array([[1.0, 0.2], [-0.3, 1.0]]), np.array([[1.5, -0.8]]))
    probe = np.random.default_rng(5).standard_normal((5, 2))
    rep = relu_fiber(net, theta, probe, notion="global", seed=3)
    assert rep.n_points == 2
    assert not any("continuum" in n for n in rep.notes)


CIRCLE = 20001  # unit-circle inputs for the dense check of a 2-input fiber point
ATOL_DENSE = 1e-8  # |f_θ − f_θ0| on the circle of a fiber point (outputs of order 1)


@pytest.mark.parametrize("seed", range(8))
def test_every_reported_global_point_computes_the_function_everywhere(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s26b audit RERUN N1: with a zero unit, solutions that split a unit into near-parallel
    kinks matched θ0 on Z (θ0's probes) but not between their own kinks; each found point is
    now checked on probes straddling its own kinks. Dense check: 20 001 unit-circle inputs."""
    net = ReluMLP(2, 3)
    W, A = random_relu_params(net, np.random.default_rng(seed))
    W[2] = 0.0
    X = np.random.default_rng(seed + 50).standard_normal((4, 2))
    angles = np.linspace(0.0, 2 * np.pi, CIRCLE)
    circle = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    f0 = relu_forward(net, (W, A), circle)

    def off(rep) -> int:
        return sum(
            float(np.max(np.abs(relu_forward(net, p, circle) - f0))) > ATOL_DENSE
            for p in rep.point_arrays()
        )

    rep = relu_fiber(net, (W, A), X, notion="global", seed=seed)
    assert off(rep) == 0
    (route,) = rep.routes
    dropped = int(route.note.split("; ")[1].split(" solution")[0])
    # without the check the dropped solutions are reported, each a point off the fiber (on
    # these seeds every dropped solution was a distinct point: 0 to 3 per seed, 13 in all)
    monkeypatch.setattr(relu_fiber_module, "_same_on_own_kinks", lambda *a, **k: True)
    unchecked = relu_fiber(net, (W, A), X, notion="global", seed=seed)
    assert off(unchecked) == dropped == unchecked.n_points - rep.n_points


def test_the_parallel_cut_sits_below_a_micro_radian() -> None:
    """Kinks 1e-6 rad apart are two hyperplanes (a finite fiber, dimension 0); exactly parallel
    units, whose unit normals meet to rounding, share one (s26c audit RERUN2 N1: the cut at
    1 − 1e-12 merged kinks 1e-6 rad apart and read dimension 2)."""
    net = ReluMLP(2, 3)
    for seed in range(5):
        theta = _near_parallel(net, float(np.rad2deg(1e-6)), seed)
        assert global_first_order_dimension(net, theta) == 0
        W, A = theta
        W[1] = 1.7 * W[0]
        assert global_first_order_dimension(net, (W, A)) == 2
