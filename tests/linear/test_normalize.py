"""Spec §1.2 reductions: scalar layers dropped, strides merged, s_L dropped; μ preserved."""

from __future__ import annotations

import json

import numpy as np
import pytest

from neuromanifold.linear import FC, LCN, dilate, mu, ntk
from neuromanifold.linear.fiber import fiber_of_params, lcn_fiber
from neuromanifold.linear.locus import classify_locus
from neuromanifold.linear.normalize import normal_form_note, reduce_lcn, reduce_params

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


# --- the normal-form note (spec §1.2: computations use the network as given, reports say so) ---


def test_normal_form_note_names_scalar_layers_and_last_stride() -> None:
    note = normal_form_note(LCN((2, 1, 3, 1), (2, 3, 1)))
    assert note is not None
    assert "layers 2, 4 are scalar" in note and "≠ 1" not in note
    assert "reduce_lcn" in note and "filters [2, 3], strides [6, 1]" in note
    note = normal_form_note(LCN((3, 2), (2, 4)))
    assert note is not None
    assert "s_L = 4 ≠ 1" in note and "scalar" not in note
    note = normal_form_note(LCN(((2, 2), (3, 2)), ((1, 2), (2, 3)), dim=2))
    assert note is not None and "s_L = 2x3 ≠ 1" in note
    assert normal_form_note(LCN((3, 2), (2,))) is None
    assert normal_form_note(LCN((2, 2, 3), (1, 2, 1))) is None
    with pytest.raises(TypeError, match="expected an LCN"):
        normal_form_note((2, 2))  # type: ignore[arg-type]


def test_fiber_and_locus_reports_carry_the_note() -> None:
    # the audit's example: the scalar middle layer and s_L = 5 were silently unmentioned
    arch = LCN((2, 1, 2), (2, 3, 5))
    rep = fiber_of_params(arch, [[1, 2], [1.5], [3, 1]], n_starts=4)
    assert rep.on_manifold and rep.notes[0] == normal_form_note(arch)
    assert json.loads(json.dumps(rep.to_dict()))["notes"][0] == normal_form_note(arch)
    loc = classify_locus(arch, theta=[[1, 2], [1.5], [3, 1]], n_starts=4)
    assert loc.notes[0] == normal_form_note(arch)
    assert json.loads(json.dumps(loc.to_dict()))["notes"][0] == normal_form_note(arch)
    zero = classify_locus(arch, v=np.zeros(arch.n_v))
    assert zero.classification == "zero" and zero.notes == (normal_form_note(arch), "v = 0")
    # s_L ≠ 1 alone
    arch = LCN((2, 2), (1, 3))
    rep = lcn_fiber(arch, [1, 1, -2], [-3], n_starts=4)
    assert rep.notes[0] == normal_form_note(arch) and "s_L = 3" in rep.notes[0]
    # normal form: no such note (on or off the manifold), and the FC path is untouched
    arch = LCN((2, 2), (1,))
    assert not any("normal form" in n for n in lcn_fiber(arch, [1, 1, -2], [-3]).notes)
    assert not any("normal form" in n for n in classify_locus(arch, v=[1, 1, -2]).notes)
    fc = fiber_of_params(FC((2, 2, 2)), [np.eye(2), np.eye(2)], n_starts=2, n_perturb=2)
    assert not any("normal form" in n for n in fc.notes)
