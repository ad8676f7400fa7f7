"""δ and Δ: definitions, sign convention, invariance under the symmetry groups, error paths.

(Conservation along flows is tested in test_flow.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear import FC, delta, fc_delta, fc_mu, sq_norms

ATOL_EXACT = 1e-12


def test_delta_is_later_minus_earlier() -> None:
    theta = [np.array([1.0, 2.0]), np.array([1.0, -1.0]), np.array([[3.0, 0.0], [0.0, 4.0]])]
    np.testing.assert_array_equal(sq_norms(theta), [5.0, 2.0, 25.0])
    np.testing.assert_array_equal(delta(theta), [-3.0, 23.0])
    assert delta([np.ones(3)]).shape == (0,)


def test_delta_invariant_under_signs_changed_by_scaling() -> None:
    rng = np.random.default_rng(0)
    theta = [rng.standard_normal(k) for k in (3, 2, 2)]
    flipped = [-theta[0], -theta[1], theta[2]]
    np.testing.assert_array_equal(delta(flipped), delta(theta))
    scaled = [2 * theta[0], 0.5 * theta[1], theta[2]]
    assert not np.allclose(delta(scaled), delta(theta))


def test_fc_delta_definition_and_conjugation() -> None:
    rng = np.random.default_rng(1)
    arch = FC((3, 2, 4))
    W1, W2 = (rng.standard_normal(s) for s in arch.param_shapes)
    (D,) = fc_delta([W1, W2])
    np.testing.assert_allclose(D, W2.T @ W2 - W1 @ W1.T, rtol=0, atol=ATOL_EXACT)
    # a hidden rotation O keeps W_2 W_1 and conjugates Δ: Δ ↦ O Δ Oᵀ
    O, _ = np.linalg.qr(rng.standard_normal((2, 2)))
    W1r, W2r = O @ W1, W2 @ O.T
    np.testing.assert_allclose(
        fc_mu(arch, [W1r, W2r]), fc_mu(arch, [W1, W2]), rtol=0, atol=ATOL_EXACT
    )
    (Dr,) = fc_delta([W1r, W2r])
    np.testing.assert_allclose(Dr, O @ D @ O.T, rtol=0, atol=ATOL_EXACT)


def test_fc_delta_spec_example() -> None:
    (D,) = fc_delta([np.array([[0.0, -2.0], [1.0, 0.0]]), np.array([[0.0, 1.0], [-0.5, 0.0]])])
    np.testing.assert_allclose(D, np.diag([-3.75, 0.0]), rtol=0, atol=ATOL_EXACT)


def test_error_paths() -> None:
    with pytest.raises(TypeError, match="theta: expected a non-empty sequence"):
        delta(np.ones(3))
    with pytest.raises(TypeError, match="theta: expected a non-empty sequence"):
        delta([])
    with pytest.raises(ValueError, match=r"theta\[1\]: entries must be finite"):
        delta([np.ones(2), np.array([np.nan, 1.0])])
    with pytest.raises(ValueError, match=r"Ws\[0\] has shape \(3,\): expected a matrix"):
        fc_delta([np.ones(3), np.ones((2, 2))])
    with pytest.raises(ValueError, match=r"Ws\[1\] has shape \(2, 3\): expected 2 columns"):
        fc_delta([np.ones((2, 2)), np.ones((2, 3))])
