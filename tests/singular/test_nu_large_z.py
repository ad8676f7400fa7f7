"""posterior_moments at large |Z| (s17 user trial AE #5).

The inner quadrature in η missed the peak once its width (∝ |Z|^{1/k − 1}) fell far below the
integration range: V_k(1e4) came out as 1e-28 for k = 3, V_5(3e3) as 0.18, and k = 2 at
Z = 1e5 divided by zero. The oracle failed the same way. These tests check the values
against the asymptotic expansions of the Riccati ODE m' = λ + Z m/2 − m², V = m', which
follow from the module's Stein identity:

* peak inside (odd k, or Z → +∞): m = Z/2 + α/Z + β/Z³ + …, α = 2λ − 1, β = 2α(1 − α), so
  V = 1/2 − α/Z² − 3β/Z⁴ + O(Z⁻⁶) → 1/2 (π_Z in T tends to N(Z/2, 1/2));
* even k, Z → −∞ (mode at T = 0): m = −2λ/Z + 4λ(2λ + 1)/Z³ + …, so
  V = 2λ/Z² − 12λ(2λ + 1)/Z⁴ + O(Z⁻⁶) (T tends to Gamma(2λ, rate |Z|)).
"""

from __future__ import annotations

import math

import pytest

from neuromanifold.singular.nu import (
    REFERENCE_Z_MAX,
    posterior_moments,
    posterior_moments_reference,
)

# A missed peak raised scipy's IntegrationWarning; none is acceptable here.
pytestmark = pytest.mark.filterwarnings("error")

EPS = 2.0**-52
#: Absolute accuracy of the inner quadrature (epsrel 1e-13 on moments of scale 1; the same
#: bound as ATOL_QUAD in test_nu.py).
ATOL_QUAD = 1e-11
#: The O(Z⁻⁶) remainder of the expansions is bounded by the Z⁻⁴ term itself for |Z| ≥ 100
#: (measured: the Z⁻⁴ term explains V minus the Z⁻² expansion to 0.2 % at |Z| = 100), so the
#: allowed deviation from the expansion to Z⁻² is twice the Z⁻⁴ term.
NEXT_TERM_FACTOR = 2.0
#: Relative accuracy of V for even k, Z → −∞, where V ≈ 2λ/Z² is tiny: the moments there are
#: positive integrals found to a relative epsrel 1e-13; measured ≤ 1e-15.
RTOL_TINY_V = 1e-11
#: m is a float near Z/2: its rounding alone is ε|m|; allow a few ulps.
M_ULPS = 4.0
#: The Stein identity V = λ + m(Z/2 − m) evaluated in floats: m(Z/2 − m) has a rounding error
#: of about ε·Z²/4 (m ≈ Z/2, Z/2 − m ≈ 0); allow 4 ε·Z²/4.
STEIN_ROUNDING = 4.0 * EPS / 4.0
#: The oracle evaluates T = η^k near |Z|/2 on an η grid, so its V carries an error ∝ ε|Z|;
#: measured ≤ 5.5e-16·|Z| for |Z| ≤ 1e5, k ≤ 30.
ORACLE_V_PER_Z = 2e-15
#: Relative agreement of m with the oracle (measured ≤ 1.3e-15).
RTOL_ORACLE_M = 1e-13

KS = [2, 3, 4, 5, 10, 30]
LARGE_Z = [1e2, 1e3, 3e3, 1e4, 1e5, 1e8, 1e20, 1e300, 1.7e308]


def _peak_inside_expansion(k: int, z: float) -> tuple[float, float, float, float]:
    """(m to Z⁻¹, its next term, V to Z⁻², its next term) for the mode Z/2 attainable."""
    lam = 1.0 / (2 * k)
    alpha = 2.0 * lam - 1.0
    beta = 2.0 * alpha * (1.0 - alpha)
    return z / 2 + alpha / z, beta / z / z / z, 0.5 - alpha / z / z, 3.0 * beta / z / z / z / z


@pytest.mark.parametrize("k", KS)
def test_v_tends_to_one_half_as_z_grows(k: int) -> None:
    for z in LARGE_Z:
        mom = posterior_moments(k, z)
        m0, m_next, v0, v_next = _peak_inside_expansion(k, z)
        assert abs(mom.v - v0) <= NEXT_TERM_FACTOR * abs(v_next) + ATOL_QUAD, (k, z, mom.v)
        m_tol = NEXT_TERM_FACTOR * abs(m_next) + M_ULPS * EPS * abs(m0) + ATOL_QUAD
        assert abs(mom.m - m0) <= m_tol, (k, z, mom.m)


@pytest.mark.parametrize("k", [3, 5, 7, 29])
def test_odd_k_at_large_negative_z(k: int) -> None:
    """Odd k: V_k(−Z) = V_k(Z) → 1/2 and m_k(−Z) = −m_k(Z) ≈ −|Z|/2."""
    for z in LARGE_Z:
        mom = posterior_moments(k, -z)
        m0, m_next, v0, v_next = _peak_inside_expansion(k, z)
        assert abs(mom.v - v0) <= NEXT_TERM_FACTOR * abs(v_next) + ATOL_QUAD, (k, -z, mom.v)
        m_tol = NEXT_TERM_FACTOR * abs(m_next) + M_ULPS * EPS * abs(m0) + ATOL_QUAD
        assert abs(mom.m + m0) <= m_tol, (k, -z, mom.m)


@pytest.mark.parametrize("k", [2, 4, 6, 10, 30])
def test_even_k_at_large_negative_z(k: int) -> None:
    """Even k, Z → −∞: T ≈ Gamma(2λ, rate |Z|), so m ≈ 2λ/|Z| and V ≈ 2λ/Z²."""
    lam = 1.0 / (2 * k)
    for z in [1e2, 1e3, 1e4, 1e5, 1e8, 1e20, 1e150]:
        mom = posterior_moments(k, -z)
        v0, v_next = 2.0 * lam / z / z, 12.0 * lam * (2.0 * lam + 1.0) / z / z / z / z
        m0, m_next = 2.0 * lam / z, 4.0 * lam * (2.0 * lam + 1.0) / z / z / z
        assert abs(mom.v - v0) <= NEXT_TERM_FACTOR * v_next + RTOL_TINY_V * v0, (k, -z, mom.v)
        assert abs(mom.m - m0) <= NEXT_TERM_FACTOR * m_next + RTOL_TINY_V * m0, (k, -z, mom.m)
    # Below the float range V = 2λ/Z² rounds to 0; m stays representable.
    mom = posterior_moments(k, -1.7e308)
    assert 0.0 <= mom.v <= 2.0 * lam / 1.7e308
    assert mom.m == pytest.approx(2.0 * lam / 1.7e308, rel=RTOL_TINY_V)


@pytest.mark.parametrize("k", KS)
def test_stein_identity_at_large_abs_z(k: int) -> None:
    lam = 1.0 / (2 * k)
    for z in [1e2, 1e3, 1e4, 1e5, -1e2, -1e3, -1e4, -1e5]:
        mom = posterior_moments(k, z)
        stein = lam + mom.m * (z / 2 - mom.m)
        assert abs(mom.v - stein) <= ATOL_QUAD + STEIN_ROUNDING * z * z, (k, z, mom.v, stein)


@pytest.mark.parametrize("k", KS)
def test_agrees_with_the_oracle_at_large_abs_z(k: int) -> None:
    for z in [38.0, 1e2, 1e3, 1e4, REFERENCE_Z_MAX]:
        for signed_z in (z, -z):
            fast = posterior_moments(k, signed_z)
            ref = posterior_moments_reference(k, signed_z)
            assert fast.m == pytest.approx(ref.m, rel=RTOL_ORACLE_M, abs=ATOL_QUAD)
            if k % 2 == 0 and signed_z < 0:  # V ≈ 2λ/Z², tiny: compare relatively
                assert fast.v == pytest.approx(ref.v, rel=RTOL_TINY_V)
            else:
                assert abs(fast.v - ref.v) <= ATOL_QUAD + ORACLE_V_PER_Z * z, (k, signed_z)


def test_oracle_refuses_z_beyond_its_validated_range() -> None:
    with pytest.raises(ValueError, match="validated"):
        posterior_moments_reference(2, 2.0 * REFERENCE_Z_MAX)
    with pytest.raises(ValueError, match="validated"):
        posterior_moments_reference(3, -2.0 * REFERENCE_Z_MAX)
    with pytest.raises(ValueError, match="validated"):
        posterior_moments_reference(3, math.inf)
