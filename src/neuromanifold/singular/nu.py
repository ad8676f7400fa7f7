"""Universal singular fluctuation ν(k) of a dead direction of order k, by quadrature.

Along a dead line of KL order k the leading-order renormalised posterior in the dimensionless
coordinate η ∈ R is

    π_Z(η) = exp(Z η^k − η^{2k}) / C_k(Z),   C_k(Z) = ∫_R exp(Z η^k − η^{2k}) dη,

with Z ∼ N(0, 2). With m_k(Z) = E_{π_Z}[η^k] and V_k(Z) = Var_{π_Z}(η^k),

    ν(k) = E_{Z∼N(0,2)}[V_k(Z)] = ∫_R V_k(Z) e^{−Z²/4} / √(4π) dZ.

Inner moments: adaptive quadrature (``scipy.integrate.quad``, QUADPACK) of
``(T − c)^j · exp(f(η) − f_max)``, j = 0, 1, 2, with T = η^k and f(η) = Z η^k − η^{2k}. The
exponent is shifted by its maximum f_max over the attainable T (Z²/4, or 0 for even k and
Z < 0), and the moments are centred at the mode c of T (no cancellation). Only the window
where f − f_max ≥ −``TAIL_EXPONENT`` is integrated (|T − c| ≤ √TAIL_EXPONENT where c = Z/2
is attainable, else 0 ≤ T ≤ t_hi), so the neglected mass is below e^{−TAIL_EXPONENT} times a
polynomial factor. For |Z| < 4√TAIL_EXPONENT the window is integrated in η, folded onto
η ≥ 0 (η → −η maps T → (−1)^k T). For larger |Z| the peak in η narrows like |Z|^{1/k − 1}
(or |Z|^{−1/k} at the boundary mode T = 0) and would be missed, so the window is integrated in
u = T − c with the Jacobian |T|^{1/k − 1} (or in τ = |Z| T): valid for every finite Z, with
V_k(Z) → 1/2 as the peak becomes interior (π_Z in T tends to N(Z/2, 1/2)) and V_k(Z) ≈ 2λ/Z²
for even k as Z → −∞.

Outer integral, two methods:
(a) ``"gauss_hermite"``: E_{N(0,2)}[f] = π^{−1/2} Σ_i w_i f(2 x_i) with ``GH_NODES`` nodes;
(b) ``"adaptive"``: adaptive quadrature of V_k(Z) e^{−Z²/4}/√(4π) over |Z| ≤ 40 (mass outside
    is below 1e−170).

Exact cross-checks (λ = 1/(2k)): V_1 ≡ 1/2 so ν(1) = 1/2; V_k(0) = λ − (Γ(λ+½)/Γ(λ))² (even k)
or λ (odd k); the Stein/Riccati identity V_k(Z) = λ + m_k(Z)(Z/2 − m_k(Z)) with m_k' = V_k.

References: T. P. Shirodkar, Dead Directions: Geometric Singular Learning, arXiv:2606.05957
(definition of ν_LO(k)); S. Watanabe, Algebraic Geometry and Statistical Learning Theory (2009).

>>> round(nu(2), 6), round(nu(3), 6)
(0.172973, 0.278366)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import integrate

__all__ = [
    "GH_NODES",
    "K_MAX",
    "REFERENCE_Z_MAX",
    "TAIL_EXPONENT",
    "NuMethod",
    "PosteriorMoments",
    "lambda_dir",
    "lambda_dir_exact",
    "nu",
    "nu_quadrature",
    "posterior_moments",
    "posterior_moments_reference",
    "riccati_v",
    "v_frozen_zero",
]

NuMethod = Literal["gauss_hermite", "adaptive"]

#: Gauss–Hermite nodes of the outer integral (method (a)); the spec asks for at least 120.
GH_NODES = 160
#: Truncation of the inner range: the neglected region has exp(f − f_max) ≤ exp(−TAIL_EXPONENT).
TAIL_EXPONENT = 90.0
#: Largest order for which ν(k) is offered (the accuracy target is stated for k ≤ 10).
K_MAX = 30
#: Outer range of method (b).
Z_RANGE = 40.0
#: Largest |Z| accepted by :func:`posterior_moments_reference` (its η grid is validated there).
REFERENCE_Z_MAX = 1e5
_INNER_EPSREL = 1e-13
_OUTER_EPSREL = 1e-12


def _check_k(k: object, k_max: int | None = K_MAX) -> int:
    """``k`` as an int in ``1..k_max`` (no upper bound when ``k_max`` is None)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int (the KL order, k >= 1), got {type(k).__name__} {k!r}")
    if k_max is None and int(k) < 1:
        raise ValueError(f"k must satisfy k >= 1 (the KL order), got {k}")
    if k_max is not None and not 1 <= int(k) <= k_max:
        raise ValueError(f"k must satisfy 1 <= k <= {k_max} (the KL order), got {k}")
    return int(k)


def lambda_dir_exact(k: int) -> Fraction:
    """Per-direction learning coefficient λ_dir = 1/(2k) as an exact fraction, for any k ≥ 1
    (only ν(k), a quadrature, is limited to ``k ≤ K_MAX``; a record's ``lambda_dir`` agrees).

    >>> lambda_dir_exact(3)
    Fraction(1, 6)
    >>> lambda_dir_exact(35)
    Fraction(1, 70)
    """
    return Fraction(1, 2 * _check_k(k, None))


def lambda_dir(k: int) -> float:
    """Per-direction learning coefficient λ_dir = 1/(2k) (float), the slice RLCT of t^{2k}.

    >>> lambda_dir(2)
    0.25
    """
    return float(lambda_dir_exact(k))


@dataclass(frozen=True)
class PosteriorMoments:
    """Moments of T = η^k under π_Z: the mean ``m`` = m_k(Z) and variance ``v`` = V_k(Z)."""

    k: int
    z: float
    m: float
    v: float

    def to_dict(self) -> dict[str, float]:
        """JSON-serialisable form."""
        return {"k": self.k, "z": self.z, "m": self.m, "v": self.v}


def _mode_of_t(k: int, z: float) -> float:
    """Mode of exp(Z T − T²) over the attainable T (T ≥ 0 for even k, T ∈ R for odd k)."""
    if k % 2 == 0:
        return max(z / 2.0, 0.0)
    return z / 2.0


@lru_cache(maxsize=65536)
def _moments(k: int, z: float) -> tuple[float, float]:
    if k == 1:
        # π_Z = N(Z/2, 1/2) exactly; posterior_moments(exact=False) integrates instead.
        return z / 2.0, 0.5
    return _moments_quadrature(k, z)


def _moments_quadrature(k: int, z: float) -> tuple[float, float]:
    """(m_k(Z), V_k(Z)) by adaptive quadrature over the window where f − f_max ≥ −TAIL_EXPONENT.

    Where the mode c = Z/2 is attainable, f − f_max = −(T − c)² exactly, so the window in T is
    |T − c| ≤ √TAIL_EXPONENT; for even k and Z < 0 the mode is T = 0 and f − f_max = Z T − T²,
    so the window is 0 ≤ T ≤ t_hi with |Z| t_hi + t_hi² = TAIL_EXPONENT. For |Z| ≥ 4√TAIL_EXPONENT
    the peak in η narrows without bound, so the window is integrated in a variable whose scale
    does not depend on Z (:func:`_moments_mode_centred`, :func:`_moments_boundary_mode`);
    otherwise in η on [0, T_hi^{1/k}], folded over the sign of η.
    """
    half_width = math.sqrt(TAIL_EXPONENT)
    peak_inside = k % 2 == 1 or z >= 0.0  # the mode c = Z/2 is an attainable T
    c = _mode_of_t(k, z)
    if abs(z) >= 4.0 * half_width:
        return _moments_mode_centred(k, c) if peak_inside else _moments_boundary_mode(k, z)
    if peak_inside:
        t_hi = abs(c) + half_width

        def log_weight(t: float) -> float:
            return -((t - c) ** 2)  # = Z T − T² − Z²/4, written without cancellation

    else:
        t_hi = _boundary_window(z)

        def log_weight(t: float) -> float:
            return z * t - t * t  # f_max = 0 here

    eta_max = t_hi ** (1.0 / k)
    signs = (1.0,) if k % 2 == 0 else (1.0, -1.0)
    eta_mode = abs(c) ** (1.0 / k)
    points = [eta_mode] if 0.0 < eta_mode < eta_max else None

    def centred_moment(j: int, epsabs: float) -> float:
        def integrand(eta: float) -> float:
            s = eta**k
            out = 0.0
            for sign in signs:
                t = sign * s
                out += math.exp(log_weight(t)) * (t - c) ** j
            return out

        val, _err = integrate.quad(
            integrand, 0.0, eta_max, points=points, epsabs=epsabs, epsrel=_INNER_EPSREL, limit=2000
        )
        return val

    return _mean_and_variance(centred_moment, c)


def _mean_and_variance(
    centred_moment: Callable[[int, float], float], c: float
) -> tuple[float, float]:
    """``(c + μ₁/μ₀, μ₂/μ₀ − (μ₁/μ₀)²)`` from the moments ``μ_j = ∫ (T − c)^j π`` about ``c``,
    each integrated to ``_INNER_EPSREL`` of ``μ₀`` (shared by both quadrature modes)."""
    c0 = centred_moment(0, 0.0)
    c1 = centred_moment(1, _INNER_EPSREL * c0)
    c2 = centred_moment(2, _INNER_EPSREL * c0)
    mean_shift = c1 / c0
    return c + mean_shift, c2 / c0 - mean_shift * mean_shift


def _boundary_window(z: float) -> float:
    """Root t_hi > 0 of |Z| t + t² = TAIL_EXPONENT, in a form free of cancellation."""
    return 2.0 * TAIL_EXPONENT / (abs(z) + math.hypot(z, 2.0 * math.sqrt(TAIL_EXPONENT)))


def _moments_boundary_mode(k: int, z: float) -> tuple[float, float]:
    """(m_k(Z), V_k(Z)) for even k and Z ≤ −4√TAIL_EXPONENT, where the mode is T = 0.

    In τ = |Z| T = ξ^k (η = |Z|^{−1/k} ξ) the weight is exp(−ξ^k − (τ/|Z|)²) on
    0 ≤ τ ≤ |Z| t_hi ≤ TAIL_EXPONENT: its scale does not shrink with |Z|, unlike η's
    (∝ |Z|^{−1/k}). The integrands are positive, so each moment is found to a relative
    tolerance. Returns (⟨τ⟩/|Z|, Var(τ)/Z²).
    """
    scale = abs(z)
    # |Z| t_hi, the root of τ + (τ/|Z|)² = TAIL_EXPONENT, free of overflow at |Z| near float max.
    tau_max = 2.0 * TAIL_EXPONENT / (1.0 + math.hypot(1.0, 2.0 * math.sqrt(TAIL_EXPONENT) / scale))
    xi_max = tau_max ** (1.0 / k)

    def moment(j: int) -> float:
        def integrand(xi: float) -> float:
            tau = xi**k
            return tau**j * math.exp(-tau - (tau / scale) ** 2)

        val, _err = integrate.quad(
            integrand, 0.0, xi_max, epsabs=0.0, epsrel=_INNER_EPSREL, limit=2000
        )
        return val

    c0, c1, c2 = moment(0), moment(1), moment(2)
    mean_tau = c1 / c0
    var_tau = c2 / c0 - mean_tau * mean_tau
    return mean_tau / scale, var_tau / scale / scale


def _moments_mode_centred(k: int, c: float) -> tuple[float, float]:
    """(m_k(Z), V_k(Z)) for a mode c = Z/2 with |c| ≥ 2√TAIL_EXPONENT, integrated in u = T − c.

    On the branch of η with sign(η^k) = sign(c), dη ∝ |T|^{1/k − 1} dT, so π_Z in u has the
    weight exp(−u² + (1/k − 1) log(1 + u/c)), smooth on |u| ≤ √TAIL_EXPONENT (there
    1 + u/c ≥ 1/2). Its width does not shrink as |Z| grows, unlike the peak in η (width
    ∝ |c|^{1/k − 1}), which an η-grid misses at large |Z|. Neglected: |u| > √TAIL_EXPONENT
    (relative mass ≲ exp(−TAIL_EXPONENT)) and, for odd k, the other sign of T (exponent
    ≤ −c² ≤ −4 TAIL_EXPONENT). Returns (c + ⟨u⟩, ⟨u²⟩ − ⟨u⟩²).
    """
    half_width = math.sqrt(TAIL_EXPONENT)
    jacobian_power = 1.0 / k - 1.0

    def centred_moment(j: int, epsabs: float) -> float:
        def integrand(u: float) -> float:
            return u**j * math.exp(-u * u + jacobian_power * math.log1p(u / c))

        val, _err = integrate.quad(
            integrand, -half_width, half_width, epsabs=epsabs, epsrel=_INNER_EPSREL, limit=2000
        )
        return val

    return _mean_and_variance(centred_moment, c)


def posterior_moments(k: int, z: float, *, exact: bool = True) -> PosteriorMoments:
    """m_k(Z) = E_{π_Z}[η^k] and V_k(Z) = Var_{π_Z}(η^k) by adaptive quadrature (cached).

    ``exact=True`` uses π_Z = N(Z/2, 1/2) for k = 1; ``exact=False`` always integrates.
    Any finite z: at large |Z| the peak is integrated in a Z-independent variable (module
    docstring), so V_k(Z) → 1/2 as the mode Z/2 moves away from T = 0.

    >>> posterior_moments(3, 0.0).v  # frozen Z = 0, odd k: V = λ = 1/6
    0.16666666666666...
    """
    k = _check_k(k)
    z = float(z)
    if not math.isfinite(z):
        raise ValueError(f"z must be finite, got {z}")
    if exact:
        m, v = _moments(k, z)
    else:
        m, v = _moments_quadrature(k, z)
    return PosteriorMoments(k=k, z=z, m=m, v=v)


def posterior_moments_reference(k: int, z: float) -> PosteriorMoments:
    """Brute-force oracle: separate ``scipy.integrate.quad`` calls in η over the whole line.

    On [−η_max, η_max] (η_max from s(s − |Z|) = TAIL_EXPONENT, a looser bound than the
    window of :func:`posterior_moments`), with g = f − f_max (written as −(T − Z/2)² where the
    mode Z/2 is attainable, else Z T − T²): C = ∫ e^g, m = ∫ η^k e^g / C, then a second pass
    V = ∫ (η^k − m)² e^g / C. No folding, no change of variable, centred at the computed mean
    rather than the mode. Breakpoints bracket each peak: at ±η₀ ± j·σ_η (η₀ = |c|^{1/k},
    σ_η = 1/(√2 k η₀^{k−1}) from the curvature of g at η₀) and at ±j·|Z|^{−1/k} (where
    |Z| η^k = 1), j ∈ {0, 1, 4, 16}.

    Validated for |Z| ≤ ``REFERENCE_Z_MAX``; beyond it the rounding of η^k (relative 1e−16,
    absolute ∝ |Z|) and the narrowing peak in η (σ_η/η₀ ∝ 1/|Z|) spoil the η grid, so larger
    |Z| is refused.
    """
    k = _check_k(k)
    z = float(z)
    if not (math.isfinite(z) and abs(z) <= REFERENCE_Z_MAX):
        raise ValueError(
            f"z must satisfy |z| <= {REFERENCE_Z_MAX:g} (the range in which the oracle is "
            f"validated), got {z}"
        )
    peak_inside = k % 2 == 1 or z >= 0.0
    c = _mode_of_t(k, z)
    s_max = 0.5 * (abs(z) + math.sqrt(z * z + 4.0 * TAIL_EXPONENT))
    eta_max = s_max ** (1.0 / k)
    marks: set[float] = {0.0}
    eta0 = abs(c) ** (1.0 / k)
    if eta0 > 0.0:
        sigma_eta = 1.0 / (math.sqrt(2.0) * k * eta0 ** (k - 1))
        marks.update(eta0 + j * sigma_eta for j in (-16, -4, -1, 0, 1, 4, 16))
    if z != 0.0:
        marks.update(j * abs(z) ** (-1.0 / k) for j in (1, 4, 16))
    points = sorted({sign * x for x in marks for sign in (1.0, -1.0) if abs(x) < eta_max})

    def log_weight(t: float) -> float:
        return -((t - c) ** 2) if peak_inside else z * t - t * t

    def integral(h: Callable[[float], float], epsabs: float) -> float:
        def integrand(eta: float) -> float:
            t = eta**k
            return h(t) * math.exp(log_weight(t))

        val, _ = integrate.quad(
            integrand, -eta_max, eta_max, points=points, epsabs=epsabs, epsrel=1e-11, limit=2000
        )
        return val

    c0 = integral(lambda t: 1.0, 0.0)
    abs_first = integral(abs, 0.0)
    m = integral(lambda t: t, 1e-11 * abs_first) / c0
    v = integral(lambda t: (t - m) ** 2, 0.0) / c0
    return PosteriorMoments(k=k, z=z, m=m, v=v)


def v_frozen_zero(k: int) -> float:
    """Closed form V_k(0): λ − (Γ(λ+½)/Γ(λ))² for even k, λ for odd k (λ = 1/(2k)).

    At Z = 0, T² = η^{2k} ∼ Gamma(λ, 1) under π_0.

    >>> round(v_frozen_zero(2), 6)
    0.135763
    """
    k = _check_k(k)
    lam = 1.0 / (2 * k)
    if k % 2 == 1:
        return lam
    return lam - math.exp(2.0 * (math.lgamma(lam + 0.5) - math.lgamma(lam)))


def riccati_v(k: int, z: float, *, rtol: float = 1e-12) -> float:
    """V_k(Z) for Z ≥ 0 from the Riccati ODE m' = λ + Z m/2 − m², V = m' (integrated from Z = 0).

    Initial value m_k(0) = Γ(λ+½)/Γ(λ) (even k) or 0 (odd k). Independent of the quadrature;
    unstable towards Z → −∞, hence Z ≥ 0 only.
    """
    k = _check_k(k)
    z = float(z)
    if z < 0:
        raise ValueError(f"z must be >= 0 (the Riccati ODE is unstable for Z < 0), got {z}")
    lam = 1.0 / (2 * k)
    m0 = 0.0 if k % 2 == 1 else math.exp(math.lgamma(lam + 0.5) - math.lgamma(lam))
    if z == 0.0:
        return lam - m0 * m0
    sol = integrate.solve_ivp(
        lambda s, m: lam + s * m / 2.0 - m * m,
        (0.0, z),
        [m0],
        method="DOP853",
        rtol=rtol,
        atol=1e-14,
    )
    m = float(sol.y[0, -1])
    return lam + z * m / 2.0 - m * m


def _v(k: int, z: float) -> float:
    return _moments(k, float(z))[1]


@lru_cache(maxsize=256)
def nu_quadrature(k: int, *, method: NuMethod = "gauss_hermite") -> float:
    """ν(k) = E_{Z∼N(0,2)}[V_k(Z)] by quadrature (no exact short-cut, also for k = 1).

    ``method="gauss_hermite"`` (a): π^{−1/2} Σ_i w_i V_k(2 x_i), ``GH_NODES`` nodes;
    ``method="adaptive"`` (b): adaptive quadrature of V_k(Z) e^{−Z²/4}/√(4π) on |Z| ≤ 40.
    """
    k = _check_k(k)
    if method == "gauss_hermite":
        x, w = np.polynomial.hermite.hermgauss(GH_NODES)
        if k == 1:
            vals = [_moments_quadrature(1, 2.0 * xi)[1] for xi in x]
        else:
            vals = [_v(k, 2.0 * xi) for xi in x]
        return float(np.dot(w, vals) / math.sqrt(math.pi))
    if method == "adaptive":

        def vk(z: float) -> float:
            return _moments_quadrature(k, z)[1] if k == 1 else _v(k, z)

        def g(z: float) -> float:
            return vk(z) * math.exp(-z * z / 4.0) / math.sqrt(4.0 * math.pi)

        if k % 2 == 1:  # V_k(−Z) = V_k(Z) for odd k
            val, _ = integrate.quad(g, 0.0, Z_RANGE, epsabs=0.0, epsrel=_OUTER_EPSREL, limit=500)
            return 2.0 * val
        lo, _ = integrate.quad(g, -Z_RANGE, 0.0, epsabs=0.0, epsrel=_OUTER_EPSREL, limit=500)
        hi, _ = integrate.quad(g, 0.0, Z_RANGE, epsabs=0.0, epsrel=_OUTER_EPSREL, limit=500)
        return lo + hi
    raise ValueError(f"method must be 'gauss_hermite' or 'adaptive', got {method!r}")


def nu(k: int) -> float:
    """Universal singular fluctuation ν(k) (leading order); ν(1) = 1/2 exactly.

    For k ≥ 2 this is ``nu_quadrature(k, method="gauss_hermite")`` (cached).

    >>> nu(1)
    0.5
    """
    k = _check_k(k)
    if k == 1:
        return 0.5
    return nu_quadrature(k)
