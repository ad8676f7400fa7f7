"""The global notion's kink probes: the values on Z fix θ0 to first order as the function does.

Oracle (closed form, no probe set): a bias-free shallow ReLU net is ``f(x) = Σ_h a_h σ(g_h · x)``
over its hidden pre-activations ``h`` (neurons, or channel × position). Along a tangent θ̇,
``ḟ(x) = Σ_h 1[g_h · x > 0] M_h x`` with ``M_h = ȧ_h g_hᵀ + a_h ġ_hᵀ``. Where the kink
hyperplanes ``{g_h · x = 0}`` are pairwise distinct and ``d ≥ 2``, each has a facet on which
unit ``h`` alone flips, so ``ḟ ≡ 0`` on ``R^d`` iff every ``M_h = 0``. The global fiber's
first-order dimension is therefore ``n_params − rank`` of the map θ̇ ↦ (all ``M_h``, the
invariants' derivative), computed here without any input point.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

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

ReluNet = ReluMLP | ReluCNN
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


@pytest.mark.parametrize(
    ("net", "degrees", "seed"),
    [
        (ReluMLP(2, 3), 1.05, 0),  # s25b audit RERUN N4: a survey row-9 sample, 1.05° apart
        (ReluMLP(2, 3), 0.3, 1),
        (ReluMLP(3, 3), 0.5, 2),
        (ReluCNN(6, 2, 1, channels=2), 0.05, 3),
    ],
    ids=lambda v: v.describe() if hasattr(v, "describe") else str(v),
)
def test_near_parallel_kinks_keep_the_global_first_order_dimension(
    net: ReluNet, degrees: float, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    theta = _near_parallel(net, degrees, seed)
    X = np.random.default_rng(seed + 10).standard_normal((4, net.input_dim))
    assert global_null_dimension(net, theta) == 0  # generic otherwise: a finite fiber
    rep = relu_fiber(net, theta, X, notion="global", seed=seed, n_random=4, n_perturb=4)
    assert rep.fiber_dimension == 0
    assert rep.continuum is False and not any("continuum" in n for n in rep.notes)
    (route,) = rep.routes
    assert "on both sides of θ0's kinks" in route.note
    # the same seed with the Gaussian probes alone: none falls in the thin wedges, and the
    # values on Z leave a false first-order direction (what the kink probes are for)
    monkeypatch.setattr(relu_fiber_module, "kink_probes", _no_kinks)
    gauss_only = relu_fiber(net, theta, X, notion="global", seed=seed, n_random=0, n_perturb=0)
    assert gauss_only.fiber_dimension > 0


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
def test_global_fiber_dimension_matches_the_closed_form(net: ReluNet) -> None:
    """Random θ0 (kinks distinct with probability one): rank dΦ on Z equals the oracle's rank."""
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        theta = random_relu_params(net, rng)
        X = rng.standard_normal((3, net.input_dim))
        rep = relu_fiber(net, theta, X, notion="global", seed=seed, n_random=0, n_perturb=0)
        assert rep.fiber_dimension == global_null_dimension(net, theta), seed


@pytest.mark.parametrize(
    "net",
    [ReluMLP(2, 3), ReluMLP(4, 3, 2), ReluCNN(7, 3, 2), ReluCNN(6, 2, 1, channels=2)],
    ids=lambda n: n.describe(),
)
def test_each_pair_straddles_one_kink(net: ReluNet) -> None:
    """``x±`` differ in exactly the one unit whose kink they straddle: 2 (d − 1) per unit."""
    theta = _near_parallel(net, 1.0, 4)
    d = net.input_dim
    G = preactivations(net, theta, np.eye(d)).reshape(d, -1).T
    probes = kink_probes(net, theta, np.random.default_rng(0))
    assert probes.shape == (2 * (d - 1) * G.shape[0], d)
    plus, minus = probes[0::2], probes[1::2]
    flips = activation_pattern(net, theta, plus).reshape(len(plus), -1) != activation_pattern(
        net, theta, minus
    ).reshape(len(minus), -1)
    owners = np.repeat(np.arange(G.shape[0]), d - 1)
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
    assert kink_probes(net, (W, A), np.random.default_rng(0)).shape == (2 * 2 * 2, 3)


def _dead_units(net: ReluMLP, point: tuple[np.ndarray, np.ndarray]) -> list[int]:
    """Units with ``a_j = 0`` and ``w_j ≠ 0``: turning ``w_j`` at fixed norm keeps f and δ."""
    W, A = point
    return [
        j
        for j in range(net.width)
        if np.max(np.abs(A[:, j])) <= ATOL_DEAD and np.linalg.norm(W[j]) > POINT_NORM_MIN
    ]


def test_a_continuum_away_from_theta0_is_said() -> None:
    """θ0 with a zero unit is an isolated point of its global fiber (s25b audit RERUN, case D),
    but the fiber holds points where a unit with ``a_j = 0`` keeps ``‖w_j‖ > 0``: its direction
    turns freely (a circle of fiber points), and the report says those points are samples."""
    net = ReluMLP(2, 3)
    W, A = random_relu_params(net, np.random.default_rng(1))
    W[2], A[0, 2] = 0.0, 0.0
    X = np.random.default_rng(9).standard_normal((4, 2))
    rep = relu_fiber(net, (W, A), X, notion="global", seed=1)
    assert rep.continuum is False  # through θ0: none
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
    (note,) = [n for n in rep.notes if "continuum away from the first point" in n]
    counted = int(note.split("passes through ")[1].split(" of ")[0])
    assert counted >= len(dead)
    assert f"of the {rep.n_points} point(s)" in note


def test_isolated_points_everywhere_get_no_continuum_note() -> None:
    """A generic θ0's global fiber (invariant matching: two points) has no curve anywhere."""
    net = ReluMLP(2, 2)
    theta = (np.array([[1.0, 0.2], [-0.3, 1.0]]), np.array([[1.5, -0.8]]))
    probe = np.random.default_rng(5).standard_normal((5, 2))
    rep = relu_fiber(net, theta, probe, notion="global", seed=3)
    assert rep.n_points == 2
    assert not any("continuum" in n for n in rep.notes)
