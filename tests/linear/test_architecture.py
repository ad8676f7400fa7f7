"""LCN / FC specs: normalisation, derived sizes, parameter containers, every error path."""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear import FC, LCN, flatten_params, unflatten_params, validate_params
from neuromanifold.linear.architecture import param_shapes


def test_lcn_1d_normalisation_and_sizes() -> None:
    arch = LCN((3, 2, 3), (2, 3))
    assert arch.filters == ((3,), (2,), (3,))
    assert arch.strides == ((2,), (3,), (1,))  # L − 1 strides given: s_L = 1 stored
    assert arch.L == 3 and arch.D == 1
    assert arch.dilations == ((1,), (2,), (6,))
    # spec §6: len v = 1 + Σ (k_l − 1) S_{l−1} = 1 + 2 + 2 + 12 = 17, dim M = 8 − 2 = 6
    assert arch.out_shape == (17,)
    assert arch.n_v == 17
    assert arch.layer_sizes == (3, 2, 3)
    assert arch.n_params == 8
    assert arch.dim_M == 6
    assert arch.total_stride == (6,)


def test_lcn_full_stride_list_keeps_last_stride() -> None:
    short = LCN((3, 2, 3), (2, 3))
    full = LCN((3, 2, 3), (2, 3, 5))
    assert full.strides[-1] == (5,)
    assert full.out_shape == short.out_shape and full.dilations == short.dilations
    assert full.total_stride == (30,)


def test_lcn_scalar_stride_and_one_tuples() -> None:
    assert LCN((2, 2), 2) == LCN((2, 2), (2,)) == LCN(((2,), (2,)), ((2,),))
    assert LCN((4,), ()).strides == ((1,),)


def test_lcn_2d_sizes() -> None:
    arch = LCN(((2, 3), (3, 2)), ((2, 1),), dim=2)
    assert arch.out_shape == (1 + 1 + 2 * 2, 1 + 2 + 1)
    assert arch.layer_sizes == (6, 6)
    assert arch.dim_M == 11
    # an int stride is broadcast over the axes
    assert LCN(((2, 2), (2, 2)), (2,), dim=2).strides == ((2, 2), (1, 1))


def test_lcn_to_dict_round_trip() -> None:
    arch = LCN(((2, 3), (3, 2)), ((2, 1),), dim=2)
    assert LCN.from_dict(arch.to_dict()) == arch


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"filters": (), "strides": ()}, "filters"),
        ({"filters": "22", "strides": (1,)}, "filters"),
        ({"filters": (2, 0), "strides": (1,)}, r"filters\[1\].*positive"),
        ({"filters": (2, 2.5), "strides": (1,)}, r"filters\[1\]"),
        ({"filters": (2, None), "strides": (1,)}, r"filters\[1\] = None: expected a positive int"),
        ({"filters": (2, 2), "strides": (1, 1, 1)}, "strides.*L = 2 or L − 1 = 1"),
        ({"filters": (2, 2, 2), "strides": 2}, "strides"),
        ({"filters": (2, 2), "strides": (0,)}, r"strides\[0\].*positive"),
        ({"filters": (2, 2), "strides": (1,), "dim": 0}, "dim"),
        ({"filters": (2, 2), "strides": (1,), "dim": 2}, r"filters\[0\].*tuple of 2"),
        ({"filters": ((2, 2), (2,)), "strides": (1,), "dim": 2}, r"filters\[1\]"),
        ({"filters": ((2, 2), (2, 2)), "strides": ((1, 1, 1),), "dim": 2}, r"strides\[0\]"),
        ({"filters": (2, 2), "strides": (True,)}, r"strides\[0\]"),
    ],
)
def test_lcn_validation_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LCN(**kwargs)


def test_fc_shapes() -> None:
    arch = FC([3, 2, 4])
    assert arch.widths == (3, 2, 4)
    assert arch.L == 2
    assert arch.param_shapes == ((2, 3), (4, 2))
    assert arch.out_shape == (4, 3)
    assert arch.n_params == 14
    assert arch.rank_bound == 2
    assert arch.dim_M == 2 * (3 + 4 - 2)
    assert arch.to_dict() == {"kind": "FC", "widths": [3, 2, 4]}


@pytest.mark.parametrize("widths", [(3,), (3, 0), (3, -1), "34", (2, 2.0)])
def test_fc_validation_errors(widths) -> None:
    with pytest.raises(ValueError, match="widths"):
        FC(widths)


def test_flatten_round_trip_lcn_and_fc() -> None:
    rng = np.random.default_rng(0)
    for arch in (LCN(((2, 3), (3, 2)), ((2, 1),), dim=2), FC((3, 2, 4))):
        theta = [rng.standard_normal(s) for s in param_shapes(arch)]
        x = flatten_params(arch, theta)
        assert x.shape == (arch.n_params,)
        back = unflatten_params(arch, x)
        for a, b in zip(theta, back, strict=True):
            np.testing.assert_array_equal(a, b)
        # C-order: the first block is w_1.ravel()
        np.testing.assert_array_equal(x[: theta[0].size], theta[0].ravel())


def test_validate_params_copies_and_casts() -> None:
    arch = LCN((2, 2), (1,))
    theta = [np.array([1, 2]), [1, -1]]
    out = validate_params(arch, theta)
    assert all(w.dtype == np.float64 for w in out)
    out[0][0] = 99.0
    assert theta[0][0] == 1


@pytest.mark.parametrize(
    ("theta", "exc", "match"),
    [
        ([[1.0, 2.0]], ValueError, "1 layers: expected 2"),
        ([[1.0, 2.0], [1.0, 2.0, 3.0]], ValueError, r"theta\[1\] has shape \(3,\)"),
        ([[1.0, np.nan], [1.0, 2.0]], ValueError, r"theta\[0\].*finite"),
        ([[1.0, np.inf], [1.0, 2.0]], ValueError, r"theta\[0\].*finite"),
        ([["a", "b"], [1.0, 2.0]], ValueError, r"theta\[0\].*real array"),
        (np.ones(4), TypeError, "sequence of 2 per-layer arrays"),
        ("1,2", TypeError, "sequence"),
    ],
)
def test_validate_params_errors(theta, exc, match: str) -> None:
    with pytest.raises(exc, match=match):
        validate_params(LCN((2, 2), (1,)), theta)


def test_unflatten_errors() -> None:
    arch = LCN((2, 2), (1,))
    with pytest.raises(ValueError, match=r"expected a flat vector of shape \(4,\)"):
        unflatten_params(arch, np.ones(5))
    with pytest.raises(ValueError, match=r"expected a flat vector"):
        unflatten_params(arch, np.ones((2, 2)))
    with pytest.raises(ValueError, match="finite"):
        unflatten_params(arch, [1.0, np.nan, 0.0, 0.0])


def test_param_shapes_rejects_non_architecture() -> None:
    with pytest.raises(TypeError, match="expected an LCN or FC"):
        param_shapes((2, 2))


def test_complex_parameters_and_targets_are_refused() -> None:
    """s25 trial LIN #5: complex filters were cut to their real part with only numpy's
    ComplexWarning; now θ, a flat x, v and δ that are complex are refused by name."""
    import warnings

    from neuromanifold.linear import delta, lcn_fiber, mu, ntk_from_function

    arch = LCN((2, 2), (2,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before numpy could warn
        with pytest.raises(ValueError, match=r"^theta\[0\] is complex: expected a real array"):
            mu(arch, [np.array([1 + 1j, 2]), np.ones(2)])
        with pytest.raises(ValueError, match=r"^x is complex"):
            unflatten_params(arch, np.ones(4, dtype=complex))
        with pytest.raises(ValueError, match=r"^v is complex"):
            lcn_fiber(arch, [1, 2, 1 + 0j, 2], [0])
        with pytest.raises(ValueError, match=r"^delta is complex"):
            lcn_fiber(arch, [1, 2, 1, 2], [1j])
        # s25b audit RERUN: these still dropped the imaginary part
        with pytest.raises(ValueError, match=r"^theta\[1\] is complex"):
            delta([np.ones(2), np.array([1.0, 1j])])
        with pytest.raises(ValueError, match=r"^v is complex"):
            ntk_from_function(arch, np.array([1, 2, 1, 2j]), [0.0])
