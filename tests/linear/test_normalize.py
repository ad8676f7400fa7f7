"""Spec §1.2 reductions: scalar layers dropped, strides merged, s_L dropped; μ preserved."""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear import LCN, dilate, mu, ntk
from neuromanifold.linear.normalize import reduce_lcn, reduce_params

ATOL_EXACT = 1e-12


@pytest.mark.parametrize(
    "arch",
    [
        LCN((2, 1, 3), (2, 3, 5)),
        LCN((1, 3, 2), (3, 2)),  # scalar first layer: v lives on the lattice 3ℤ
        LCN((3, 1, 1, 2), (2, 2, 3)),
        LCN((1, 1), (2,)),  # every layer scalar
        LCN(((2, 2), (1, 1), (3, 2)), ((2, 1), (1, 3)), dim=2),
    ],
    ids=["middle", "first", "two-middle", "all-scalar", "2d"],
)
def test_mu_preserved_up_to_embedding(arch: LCN) -> None:
    rng = np.random.default_rng(0)
    red = reduce_lcn(arch)
    assert red.changed
    assert all(k >= 2 for k in red.reduced.layer_sizes) or red.reduced.L == 1
    assert red.reduced.strides[-1] == (1,) * arch.D
    theta = [rng.standard_normal(f) for f in arch.filters]
    kept, scale = reduce_params(red, theta)
    v = mu(arch, theta)
    v_red = scale * dilate(mu(red.reduced, kept), red.input_dilation)
    assert v_red.shape == v.shape
    np.testing.assert_allclose(v_red, v, rtol=0, atol=ATOL_EXACT)
    assert red.to_dict()["kept_layers"] == list(red.kept_layers)


def test_normal_architecture_unchanged_and_ntk_differs_when_reduced() -> None:
    arch = LCN((3, 2), (2,))
    assert not reduce_lcn(arch).changed
    assert reduce_lcn(LCN((3, 2), (2, 4))).changed  # only s_L differs
    # a scalar layer c scales the other layers' Jacobian blocks by c and contributes its own
    # column v / c to J, so the NTK changes: K = c²·K_red + v vᵀ/c² (here c = 2)
    with_scalar = LCN((3, 1, 2), (2, 1))
    red = reduce_lcn(with_scalar)
    theta = [np.array([1.0, -0.5, 2.0]), np.array([2.0]), np.array([0.5, 1.0])]
    kept, scale = reduce_params(red, theta)
    v = mu(with_scalar, theta)
    assert scale == 2.0
    K = ntk(with_scalar, theta)
    np.testing.assert_allclose(
        K,
        scale**2 * ntk(red.reduced, kept) + np.outer(v, v) / scale**2,
        rtol=0,
        atol=ATOL_EXACT * np.max(np.abs(K)),
    )


def test_error_paths() -> None:
    with pytest.raises(TypeError, match="expected an LCN"):
        reduce_lcn((2, 2))
    red = reduce_lcn(LCN((2, 1), (1,)))
    with pytest.raises(ValueError, match=r"theta\[1\] has shape"):
        reduce_params(red, [np.ones(2), np.ones(2)])
