"""compare_metrics: metrics g = K_δ(v)⁺ of several δ at one v (spec §2.4–2.6, §4.1, §4.3, §5)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.linear import (
    LCN,
    TANGENT_SIN_TOL,
    MetricComparison,
    compare_metrics,
    delta,
    metric_pair,
    metric_pair_reference,
    mu,
    ntk,
    ntk_closed_form,
    rescale_to_delta,
)
from neuromanifold.linear.metric import tangent_basis

#: the same δ twice gives the same fiber point; λ − 1 and the distance are at round-off
ATOL_SAME = 1e-12
#: K rebuilt from (v, δ) vs the NTK at the Lemma rescaling of a known θ (spec §7.6: 1e-9)
RTOL_K = 1e-9
#: fast pair numbers vs the scipy oracle (both from the same K's)
RTOL_ORACLE = 1e-10
#: the metrics of distinct δ are farther apart than this (affine-invariant distance)
MIN_DISTINCT = 1e-2
#: slack on the pencil-eigenvalue interval law and the triangle inequality
RTOL_LAW = 1e-12

STRIDED = LCN((3, 2), (2,))  # D = 1, stride 2: K_δ(v) single-valued on the smooth locus
STRIDE_ONE = LCN((2, 2), (1,))  # spec §4.3
THETA_ONE = (np.array([1.0, 2.0]), np.array([1.0, -1.0]))  # v = (1, 1, −2), δ = −3
THETA_ONE_SWAP = (np.array([1.0, -1.0]), np.array([1.0, 2.0]))  # factors swapped: same v


def _strided_theta() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(3)
    return tuple(rng.standard_normal(k) for k in STRIDED.layer_sizes)


def _brute_force_ntks(arch: LCN, theta, deltas) -> list[np.ndarray]:
    """NTK at the Lemma rescaling of θ to each δ (parameter space, no fiber search)."""
    return [ntk(arch, rescale_to_delta(theta, d)) for d in deltas]


def _fields(p) -> np.ndarray:
    return np.array(
        [
            p.k_rel_frobenius,
            p.metric_rel_frobenius,
            p.lambda_min,
            p.lambda_max,
            p.pencil_condition,
            p.affine_invariant_distance,
            p.max_abs_log,
            *p.pencil_eigenvalues,
        ]
    )


def test_same_delta_twice_gives_distance_zero() -> None:
    theta = _strided_theta()
    v = mu(STRIDED, theta)
    res = compare_metrics(STRIDED, v, [[1.5], [1.5]])
    p = res.pair(0, 1)
    assert p.defined and p.agree
    assert p.affine_invariant_distance <= ATOL_SAME
    np.testing.assert_allclose(p.pencil_eigenvalues, 1.0, rtol=0, atol=ATOL_SAME)
    assert p.k_rel_frobenius <= ATOL_SAME and p.tangent_sin <= TANGENT_SIN_TOL


@pytest.mark.parametrize("arch", [STRIDED, LCN((2, 3, 2), (2, 3))], ids=["k32_s2", "k232_s23"])
def test_strided_matches_brute_force_rescaling_and_differs_across_delta(arch: LCN) -> None:
    """Strides > 1: K from (v, δ) alone = NTK at θ rescaled by the Lemma; distinct δ, distinct g."""
    rng = np.random.default_rng(3)
    theta = tuple(rng.standard_normal(k) for k in arch.layer_sizes)
    v = mu(arch, theta)
    zero = np.zeros(arch.L - 1)
    deltas = [delta(theta), zero, zero + 4.0]
    res = compare_metrics(arch, v, deltas, seed=1)  # no theta: random starts
    Ks = _brute_force_ntks(arch, theta, deltas)
    for p, K, d in zip(res.per_delta, Ks, deltas, strict=True):
        scale = float(np.max(np.abs(K)))
        np.testing.assert_allclose(p.ntk_array(), K, rtol=0, atol=RTOL_K * scale)
        closed = ntk_closed_form(arch, theta, d)
        np.testing.assert_allclose(p.ntk_array(), closed, rtol=0, atol=RTOL_K * scale)
        assert p.smooth.smooth and p.rank_K == res.dim_M
    for p in res.pairs:
        ref = metric_pair_reference(Ks[p.i], Ks[p.j], res.dim_M)
        np.testing.assert_allclose(_fields(p), _fields(ref), rtol=RTOL_ORACLE)
        assert p.affine_invariant_distance > MIN_DISTINCT and not p.agree
    assert res.same_tangent_space


def test_pencil_eigenvalues_lie_between_layer_norm_ratios() -> None:
    """K_δ = N Σ G_l(û)/x_l ⇒ every λ of (K_i, K_j) is a weighted mean of x_l^(j) / x_l^(i)."""
    theta = _strided_theta()
    res = compare_metrics(STRIDED, mu(STRIDED, theta), [[-2.0], [0.5], [6.0]], theta=theta)
    for p in res.pairs:
        r = np.array(res.per_delta[p.j].sq_norms) / np.array(res.per_delta[p.i].sq_norms)
        assert r.min() * (1 - RTOL_LAW) <= p.lambda_min
        assert p.lambda_max <= r.max() * (1 + RTOL_LAW)


def test_stride_one_sheets_differ_except_balanced() -> None:
    """Spec §4.3: at δ = −3 the sheets carry K and K'; at δ = 0 the swap formula gives K = K'."""
    v = mu(STRIDE_ONE, THETA_ONE)
    deltas = [[-3.0], [0.0], [2.0]]
    a = compare_metrics(STRIDE_ONE, v, deltas, theta=THETA_ONE)
    b = compare_metrics(STRIDE_ONE, v, deltas, theta=THETA_ONE_SWAP)
    K = np.array([[2, 1, 0], [1, 7, 1], [0, 1, 5]], dtype=float)
    K_swap = np.array([[2.9, -1.7, 0], [-1.7, 7, -1.7], [0, -1.7, 4.1]])
    for got, want in ((a.per_delta[0].ntk_array(), K), (b.per_delta[0].ntk_array(), K_swap)):
        np.testing.assert_allclose(got, want, rtol=0, atol=RTOL_K * np.abs(want).max())
    # brute force on each sheet, and the cross-sheet pair at each δ
    for res, th in ((a, THETA_ONE), (b, THETA_ONE_SWAP)):
        Ks = _brute_force_ntks(STRIDE_ONE, th, deltas)
        for p in res.pairs:
            ref = metric_pair_reference(Ks[p.i], Ks[p.j], res.dim_M)
            np.testing.assert_allclose(_fields(p), _fields(ref), rtol=RTOL_ORACLE)
            assert p.affine_invariant_distance > MIN_DISTINCT
        assert "stride one" in res.notes[0]
    for k, d in enumerate(deltas):
        Q = np.eye(3)  # all strides 1: M is full-dimensional, T_vM = R^3
        cross = metric_pair(a.per_delta[k].ntk_array(), b.per_delta[k].ntk_array(), Q)
        if d == [0.0]:
            assert cross.affine_invariant_distance <= ATOL_SAME
        else:
            assert cross.affine_invariant_distance > MIN_DISTINCT


def test_distance_symmetric_and_triangle_inequality() -> None:
    theta = _strided_theta()
    res = compare_metrics(STRIDED, mu(STRIDED, theta), [[-1.0], [2.0], [7.0]], theta=theta)
    Q = tangent_basis(STRIDED, res.per_delta[0].theta_arrays())
    Ks = [p.ntk_array() for p in res.per_delta]
    for i, j in itertools.combinations(range(3), 2):
        fwd, bwd = metric_pair(Ks[i], Ks[j], Q), metric_pair(Ks[j], Ks[i], Q)
        d = fwd.affine_invariant_distance
        assert abs(d - bwd.affine_invariant_distance) <= RTOL_LAW * d
        np.testing.assert_allclose(
            np.sort(1 / np.array(bwd.pencil_eigenvalues)), fwd.pencil_eigenvalues, rtol=RTOL_LAW
        )
        assert d == res.pair(j, i).affine_invariant_distance
    D = res.distance_matrix()
    for i, j, k in itertools.permutations(range(3)):
        assert D[i, k] <= (D[i, j] + D[j, k]) * (1 + RTOL_LAW)


def test_fast_path_matches_scipy_oracle_two_dimensional() -> None:
    arch = LCN(((2, 2), (2, 2)), ((2, 1),), dim=2)
    rng = np.random.default_rng(5)
    theta = tuple(rng.standard_normal(f) for f in arch.filters)
    res = compare_metrics(arch, mu(arch, theta), [[0.0], [3.0], [-2.5]], theta=theta)
    worst = 0.0
    for p in res.pairs:
        Ki, Kj = res.per_delta[p.i].ntk_array(), res.per_delta[p.j].ntk_array()
        ref = metric_pair_reference(Ki, Kj, res.dim_M)
        worst = max(worst, float(np.max(np.abs(_fields(p) / _fields(ref) - 1))))
        assert p.tangent_sin <= TANGENT_SIN_TOL and ref.tangent_sin <= TANGENT_SIN_TOL
    assert worst <= RTOL_ORACLE
    assert "D = 2" in res.notes[0]


def test_critical_point_pairs_undefined() -> None:
    """Spec §4.6: w_1 = z² − 0.49, w_2 = y − 0.49 has rank Jμ = 3 < dim M = 4: no metric."""
    theta = (np.array([-0.49, 0.0, 1.0]), np.array([-0.49, 1.0]))
    res = compare_metrics(STRIDED, mu(STRIDED, theta), [[0.0], [1.0]], theta=theta)
    assert all(not p.smooth.smooth and p.smooth.rank == 3 for p in res.per_delta)
    p = res.pair(0, 1)
    assert not p.defined and not p.agree and p.affine_invariant_distance is None
    ref = metric_pair_reference(
        res.per_delta[0].ntk_array(), res.per_delta[1].ntk_array(), res.dim_M
    )
    assert not ref.defined


def test_json_round_trip() -> None:
    theta = _strided_theta()
    res = compare_metrics(STRIDED, mu(STRIDED, theta), [[0.0], [1.0], [2.0]], theta=theta)
    back = MetricComparison.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back == res
    crit = (np.array([-0.49, 0.0, 1.0]), np.array([-0.49, 1.0]))
    und = compare_metrics(STRIDED, mu(STRIDED, crit), [[0.0], [1.0]], theta=crit)
    assert MetricComparison.from_dict(json.loads(json.dumps(und.to_dict()))) == und


V_STRIDED = [0.5, 1.0, -2.0, 0.25, 1.5]  # len 5 = out_shape of STRIDED


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"deltas": [[1.0]]}, r"deltas has 1 entry: expected at least 2"),
        ({"deltas": "1,2"}, r"deltas = '1,2': expected a sequence of at least 2"),
        ({"deltas": [[1.0], [1.0, 2.0]]}, r"deltas\[1\] has shape \(2,\): expected L − 1 = 1"),
        ({"deltas": [[1.0], [np.nan]]}, r"deltas\[1\] = \[nan\]: entries must be finite"),
        ({"deltas": [[1.0], ["a"]]}, r"deltas\[1\] = \['a'\]: expected L − 1 = 1 numbers"),
        ({"v": [1.0, 2.0, 3.0]}, r"v has shape \(3,\): expected 5 coefficients"),
        ({"v": [1.0, np.inf, 0, 0, 0]}, r"v and delta must be finite"),
        ({"v": [0.0] * 5}, r"v = 0: the zero filter is a singular point"),
        ({"agree_tol": 0.0}, r"agree_tol = 0.0: expected a float in \(0, 1\)"),
        ({"tangent_tol": 2}, r"tangent_tol = 2: expected a float in \(0, 1\)"),
        ({"theta": [[1.0, 2.0]]}, r"theta has 1 layers: expected 2"),
        ({"n_starts": 0}, r"n_starts = 0: expected an int >= 1"),
        ({"n_starts": 2.5}, r"n_starts = 2.5: expected an int >= 1"),
        ({"seed": -1}, r"seed = -1: expected an int >= 0"),
        ({"seed": True}, r"seed = True: expected an int >= 0"),
    ],
)
def test_value_errors(kwargs: dict, match: str) -> None:
    args = {"v": V_STRIDED, "deltas": [[0.0], [1.0]], **kwargs}
    with pytest.raises(ValueError, match=match):
        compare_metrics(STRIDED, args.pop("v"), args.pop("deltas"), **args)


def test_type_error_and_off_manifold() -> None:
    with pytest.raises(TypeError, match=r"arch = .*: expected an LCN"):
        compare_metrics("3,2", V_STRIDED, [[0.0], [1.0]])  # type: ignore[arg-type]
    # k = (2, 2), s = 2: M = rank-one 2×2 matrices; v = vec(I) has rank 2, off M
    with pytest.raises(RuntimeError, match=r"no fiber point for deltas\[0\] = \[0.0\]"):
        compare_metrics(LCN((2, 2), (2,)), [1.0, 0.0, 0.0, 1.0], [[0.0], [1.0]], n_starts=2)
    res = compare_metrics(STRIDED, mu(STRIDED, _strided_theta()), [[0.0], [1.0]])
    with pytest.raises(ValueError, match=r"\(i, j\) = \(1, 1\): expected two distinct"):
        res.pair(1, 1)


runner = CliRunner()


def test_cli_compare_spec_example(tmp_path: Path) -> None:
    """Spec §6: k = (2, 2), s = 2, v = (3, 6, 1, 2) at δ = 5 (x = (5, 10)) and δ = 0 (x = √50)."""
    out = tmp_path / "c.json"
    args = ["lcn", "compare", "--filters", "2,2", "--strides", "2", "--v", "3,6,1,2"]
    res = runner.invoke(app, [*args, "--delta", "5", "--delta", "0", "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = MetricComparison.from_dict(json.loads(out.read_text()))
    np.testing.assert_allclose(data.per_delta[0].sq_norms, [5.0, 10.0], rtol=RTOL_K)
    np.testing.assert_allclose(data.per_delta[1].sq_norms, [50**0.5] * 2, rtol=RTOL_K)
    # K_δ(V)Z = x_2 P Z + x_1 Z P' (P, P' the rank-one projections onto V's column / row space,
    # spec §2.5): on T_VM = span{u·ᵀ, ·vᵀ} the pencil eigenvalues are x_1/x_1', x_2/x_2' and
    # (x_1 + x_2)/(x_1' + x_2') (the directions u v⊥ᵀ, u⊥ vᵀ and u vᵀ)
    p, r = data.pair(0, 1), 50**0.5
    np.testing.assert_allclose(p.pencil_eigenvalues, [5 / r, 15 / (2 * r), 10 / r], rtol=RTOL_K)
    assert f"{p.affine_invariant_distance:.6g}" in res.output and "agree" in res.output
    loc = runner.invoke(app, [*args, "--delta", "5", "--delta", "0", "--locus"])
    assert loc.exit_code == 0 and "deltas[1] smooth, 1 point(s)" in loc.output, loc.output
    bad = runner.invoke(app, [*args, "--delta", "5"])
    assert bad.exit_code != 0 and "expected at least 2" in bad.output
    off = runner.invoke(
        app,
        [*args[:-1], "1,0,0,1", "--delta", "0", "--delta", "1", "--starts", "2"],
    )
    assert off.exit_code == 1 and "NOT ON THE NEUROMANIFOLD" in off.output


def test_cli_compare_theta_must_multiply_out_to_v() -> None:
    """--theta is a factorisation of --v: μ(θ) = v within THETA_V_RTOL, else one-line error."""
    from neuromanifold.cli.lcn import THETA_V_RTOL

    args = ["lcn", "compare", "--filters", "2,2", "--strides", "2", "--v", "3,6,1,2"]
    deltas = ["--delta", "0", "--delta", "1"]
    bad = runner.invoke(app, [*args, *deltas, "--theta", "100,2;3,-7"])
    assert bad.exit_code == 2 and isinstance(bad.exception, SystemExit), bad.output
    assert "Traceback" not in bad.output
    assert "error: --theta is not a factorisation of --v: μ(θ) = [ 300." in bad.output
    assert "but v = [3. 6. 1. 2.]" in bad.output
    # μ((1, 2), (3, 1)) = (3, 6, 1, 2) for stride 2; a relative error of 10·THETA_V_RTOL fails
    good = runner.invoke(app, [*args, *deltas, "--theta", "1,2;3,1"])
    assert good.exit_code == 0, good.output
    off = f"{1 + 10 * THETA_V_RTOL!r},2;3,1"
    near = runner.invoke(app, [*args, *deltas, "--theta", off])
    assert near.exit_code == 2 and "is not a factorisation of --v" in near.output
    within = f"{1 + 0.1 * THETA_V_RTOL!r},2;3,1"
    assert runner.invoke(app, [*args, *deltas, "--theta", within]).exit_code == 0


I3 = np.eye(3)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((I3, I3, np.ones((3, 2))), {}, r"basis: expected orthonormal columns"),
        ((np.eye(2), I3, np.eye(3, 2)), {}, r"basis has shape \(3, 2\): expected \(n_v, dim M\)"),
        ((np.ones((3, 2)), I3, np.eye(3, 2)), {}, r"K_i: K has shape \(3, 2\): expected a square"),
        ((I3, np.triu(np.ones((3, 3))), np.eye(3, 2)), {}, r"K_j: K: expected a symmetric"),
        ((I3, np.eye(4), np.eye(3, 2)), {}, r"K_i has shape \(3, 3\), K_j \(4, 4\): expected one"),
        ((I3, I3, np.eye(3, 2)), {"tangent_i": I3}, r"tangent_i \(3, 3\), tangent_j \(3, 2\)"),
    ],
)
def test_metric_pair_errors(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        metric_pair(*args, **kwargs)


def test_metric_pair_reference_errors() -> None:
    with pytest.raises(ValueError, match=r"K_i: dim_M = 5: expected an int in \[1, 3\]"):
        metric_pair_reference(I3, I3, 5)
    with pytest.raises(ValueError, match=r"K_j: K: entries must be finite"):
        metric_pair_reference(I3, np.full((3, 3), np.nan), 2)


def test_stride_one_without_theta_stays_on_one_sheet() -> None:
    """Random starts pick a sheet for δ⁽¹⁾; every later K is the NTK of that point rescaled."""
    v = mu(STRIDE_ONE, THETA_ONE)
    deltas = [[-3.0], [1.0], [4.0]]
    res = compare_metrics(STRIDE_ONE, v, deltas, seed=2)
    first = res.per_delta[0].theta_arrays()
    for p, K in zip(res.per_delta, _brute_force_ntks(STRIDE_ONE, first, deltas), strict=True):
        np.testing.assert_allclose(p.ntk_array(), K, rtol=0, atol=RTOL_K * float(np.max(K)))
        np.testing.assert_allclose(mu(STRIDE_ONE, p.theta_arrays()), v, rtol=0, atol=RTOL_K)
        np.testing.assert_allclose(delta(p.theta_arrays()), p.delta, rtol=0, atol=RTOL_K)


def test_locus_sees_the_other_sheets() -> None:
    """locus=True searches the whole fiber at each δ: spec §4.3 gap K' − K ∝ δ; §4.2 crossing."""
    v = mu(STRIDE_ONE, THETA_ONE)
    res = compare_metrics(STRIDE_ONE, v, [[-3.0], [0.0]], theta=THETA_ONE, locus=True)
    at_m3, at_0 = (p.locus for p in res.per_delta)
    assert at_m3.n_fiber_points == at_0.n_fiber_points == 2
    K = np.array([[2, 1, 0], [1, 7, 1], [0, 1, 5]], dtype=float)
    K_swap = np.array([[2.9, -1.7, 0], [-1.7, 7, -1.7], [0, -1.7, 4.1]])
    assert abs(at_m3.ntk_gap - np.max(np.abs(K - K_swap))) <= RTOL_K * np.abs(K).max()
    assert at_0.ntk_gap <= ATOL_SAME * np.abs(K).max()  # balanced: the swap formula vanishes
    assert MetricComparison.from_dict(json.loads(json.dumps(res.to_dict()))) == res
    crossing = [0.5625, 0.0, -2.5, 0.0, 1.0]  # (z² − 1/4)(z² − 9/4), two factorisations
    res = compare_metrics(STRIDED, crossing, [[5.0], [0.0]], locus=True)
    at_5 = res.per_delta[0].locus
    assert at_5.classification == "crossing" and at_5.max_pair_rank == 5
    assert abs(at_5.ntk_gap - 80 / 17) <= RTOL_K * 80 / 17
    assert res.per_delta[0].smooth.smooth  # the check at θ alone passes a crossing
    assert "crossing" in res.notes[-1]


def test_notes_use_the_reduced_strides() -> None:
    """A scalar layer with stride 1 between two stride-2 dilations: the reduced stride is 2."""
    arch = LCN((2, 1, 2), (1, 2))
    theta = ([1.0, 1.0], [1.5], [1.0, 2.0])
    res = compare_metrics(arch, mu(arch, theta), [[1.0, 0.5], [0.0, 0.0]], theta=theta)
    assert res.notes[0].startswith("D = 1, all strides of the reduced network")
    assert "not in the paper's normal form" in res.notes[-1]
    assert res.pair(0, 1).affine_invariant_distance > MIN_DISTINCT
