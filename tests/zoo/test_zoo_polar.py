"""Orthogonalizers: laws against the scalar map, the SVD reference, and the published table."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuromanifold.zoo.polar import (
    NEWTON_SCHULZ_BAND,
    NEWTON_SCHULZ_COEFFICIENTS,
    POLAR_EXPRESS_BAND,
    POLAR_EXPRESS_COEFFICIENTS,
    POLAR_EXPRESS_NORM_SAFETY,
    newton_schulz,
    polar_express,
    polar_express_coefficients,
    polar_svd,
    scalar_composition,
)

ATOL_EXACT = 1e-12  # float64 identities (orthogonality of the SVD polar factor)
# Measured maxima below: 6 seeds × 5 shapes, OMP_NUM_THREADS=1 and 2 (margins ≥ 170×).
ATOL_SCALAR_LAW = 1e-12  # matrix iteration vs its scalar map, float64, 5 quintic steps (5.9e-15)
ATOL_INNER_PRODUCT = 5e-12  # <PE(G), polar(G)> vs Σ σ_i(PE(G)), a sum of ~32 O(1) terms (1.4e-14)
RTOL_COEFFICIENTS = 1e-12  # derived vs published Polar Express coefficients (2.0e-15)
ATOL_PE8_VS_SVD = 5e-12  # 8 derived Polar Express steps reach 1 ± 2.4e-14 on [1e-3, 1] (2.3e-14)
BAND_ATTAINED = 1e-3  # the scalar map's extremes come this close to the band's ends (7.3e-5)
NS_MISS_MIN = 0.05  # Newton–Schulz leaves some singular value at least this far from 1 (0.316)
SHAPES = [(32, 96), (96, 32), (48, 48)]


def _well_conditioned(shape: tuple[int, int], seed: int) -> torch.Tensor:
    """Random U diag(s) Vᵀ with singular values spread over [0.05, 1]·scale."""
    g = torch.Generator().manual_seed(seed)
    m, n = shape
    r = min(m, n)
    u, _ = torch.linalg.qr(torch.randn(m, r, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, r, generator=g, dtype=torch.float64))
    s = torch.logspace(np.log10(0.05), 0, r, dtype=torch.float64) * 7.0
    return u @ torch.diag(s) @ v.T


def test_published_coefficients_are_rederived() -> None:
    derived = polar_express_coefficients(lower=1e-3, steps=5, safety=0.02, cushion=0.02)
    np.testing.assert_allclose(derived, POLAR_EXPRESS_COEFFICIENTS, rtol=RTOL_COEFFICIENTS, atol=0)


@pytest.mark.parametrize("shape", SHAPES)
def test_svd_polar_is_orthogonal_and_exact(shape: tuple[int, int]) -> None:
    g = torch.randn(*shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    q = polar_svd(g)
    r = min(shape)
    gram = q.T @ q if shape[0] >= shape[1] else q @ q.T
    torch.testing.assert_close(gram, torch.eye(r, dtype=torch.float64), atol=ATOL_EXACT, rtol=0)
    # polar factor maximises <Q, G>: equals the nuclear norm
    nuclear = torch.linalg.svdvals(g).sum()
    torch.testing.assert_close((q * g).sum(), nuclear, atol=ATOL_EXACT * nuclear, rtol=0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("method", "coefficients", "norm"),
    [
        ("pe", POLAR_EXPRESS_COEFFICIENTS, POLAR_EXPRESS_NORM_SAFETY),
        ("ns", [NEWTON_SCHULZ_COEFFICIENTS] * 5, 1.0),
    ],
)
def test_matrix_iteration_follows_scalar_map(shape, method, coefficients, norm) -> None:
    g = _well_conditioned(shape, seed=2)
    out = polar_express(g) if method == "pe" else newton_schulz(g)
    u, s, vh = torch.linalg.svd(g, full_matrices=False)
    expected = scalar_composition((s / (norm * g.norm())).numpy(), coefficients)
    predicted = u @ torch.diag(torch.from_numpy(expected)) @ vh
    torch.testing.assert_close(out, predicted, atol=ATOL_SCALAR_LAW, rtol=0)


@pytest.mark.parametrize("shape", SHAPES)
def test_polar_express_singular_values_in_published_band(shape) -> None:
    g = _well_conditioned(shape, seed=3)
    sv = torch.linalg.svdvals(polar_express(g))
    lo, hi = POLAR_EXPRESS_BAND
    assert float(sv.min()) >= lo and float(sv.max()) <= hi


@pytest.mark.parametrize("shape", SHAPES)
def test_newton_schulz_singular_values_in_known_band(shape) -> None:
    g = _well_conditioned(shape, seed=4)
    sv = torch.linalg.svdvals(newton_schulz(g))
    lo, hi = NEWTON_SCHULZ_BAND
    assert float(sv.min()) >= lo and float(sv.max()) <= hi
    # and it does NOT converge to the polar factor: some singular value is off by > 5%
    assert float((sv - 1).abs().max()) > NS_MISS_MIN


@pytest.mark.parametrize("shape", SHAPES)
def test_polar_express_with_eight_derived_steps_matches_svd(shape) -> None:
    g = _well_conditioned(shape, seed=5)
    coeffs = polar_express_coefficients(steps=8)
    out = polar_express(g, coefficients=coeffs)
    torch.testing.assert_close(out, polar_svd(g), atol=ATOL_PE8_VS_SVD, rtol=0)
    sv = torch.linalg.svdvals(out)
    torch.testing.assert_close(sv, torch.ones_like(sv), atol=ATOL_PE8_VS_SVD, rtol=0)


def test_band_constants_match_scalar_map() -> None:
    x = np.geomspace(1e-3, 1 / POLAR_EXPRESS_NORM_SAFETY, 4001)
    y = scalar_composition(x, POLAR_EXPRESS_COEFFICIENTS)
    lo, hi = POLAR_EXPRESS_BAND
    assert lo <= y.min() < lo + BAND_ATTAINED and hi - BAND_ATTAINED < y.max() <= hi
    y_ns = scalar_composition(np.linspace(0.05, 1.0, 4001), [NEWTON_SCHULZ_COEFFICIENTS] * 5)
    assert NEWTON_SCHULZ_BAND[0] <= y_ns.min() and y_ns.max() <= NEWTON_SCHULZ_BAND[1]


def test_zero_matrix_stays_finite() -> None:
    z = torch.zeros(4, 6, dtype=torch.float64)
    assert torch.equal(polar_express(z), z) and torch.equal(newton_schulz(z), z)


@pytest.mark.parametrize("fn", [polar_express, newton_schulz, polar_svd])
def test_rejects_non_matrix(fn) -> None:
    with pytest.raises(ValueError, match=r"g must be a 2-D matrix \(m, n\), got shape \(3,\)"):
        fn(torch.ones(3))
    with pytest.raises(TypeError, match=r"g must be a torch\.Tensor, got list"):
        fn([[1.0]])


def test_coefficient_argument_errors() -> None:
    with pytest.raises(ValueError, match="lower must lie in"):
        polar_express_coefficients(lower=0.0)
    with pytest.raises(ValueError, match="steps must be a positive int, got 0"):
        polar_express_coefficients(steps=0)
    with pytest.raises(ValueError, match="steps must be a positive int, got 0"):
        newton_schulz(torch.eye(2), steps=0)


@pytest.mark.parametrize("shape", [(32, 96), (96, 32)])
def test_polar_express_on_gaussian_matrices_is_near_svd_polar(shape) -> None:
    """Plain Gaussian rectangles: normalised σ_min well above 1e-3, so the band law applies."""
    g = torch.randn(*shape, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    s = torch.linalg.svdvals(g)
    assert float(s.min() / (POLAR_EXPRESS_NORM_SAFETY * g.norm())) > 1e-3
    out, exact = polar_express(g), polar_svd(g)
    lo, hi = POLAR_EXPRESS_BAND
    sv = torch.linalg.svdvals(out)
    assert float(sv.min()) >= lo and float(sv.max()) <= hi
    # same singular vectors: out = exact · diag-like positive factor, so <out, exact> = Σ p(σ_i)
    torch.testing.assert_close((out * exact).sum(), sv.sum(), atol=ATOL_INNER_PRODUCT, rtol=0)
    # and the spectral distance to the exact polar factor is the band half-width at most
    assert float(torch.linalg.matrix_norm(out - exact, ord=2)) <= max(1 - lo, hi - 1)
