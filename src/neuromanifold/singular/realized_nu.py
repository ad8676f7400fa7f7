"""Realized singular fluctuation from posterior samples (WAIC functional variance).

Estimator. For posterior draws w_1, …, w_S and data (x_i, y_i), i = 1…n, the functional variance
is V_n = Σ_i Var_s[log p(y_i | x_i, w_s)] (sum over samples i, sample variance over draws s,
ddof = 1). At β = 1, E[V_n] = 2ν + o(1) (Watanabe; WAIC = T_n + V_n/n), so the realized
fluctuation is ν̂ = E_D[V_n]/2, averaged over ``replicates`` independent data sets D.

Cells (Gaussian noise σ = 1, x₁, x₂ ∼ N(0, 1) with correlation ρ, truth v = w = 0):

* pure normal-form cell (``rho=None``): y = w^k x₂ + ε. One dead direction of order k, nothing
  else: ν̂ → ν(k) as n → ∞.
* product cell (:func:`realized_nu_product`): y = (w₁ ⋯ w_L) x₂ + ε, every w_i a parameter. A
  crossing of L components of order 1 (a node death a·b at L = 2, a width-one chain at L ≥ 3),
  diagonal order k_diag = L, nothing live: its realized ν exceeds the diagonal line's ν(L).
* live + dead cell (``rho=ρ``): y = v x₁ + w^k x₂ + ε, v a live (regular) parameter. The live
  part contributes 1/2; the dead part is reported as ν̂_dead = ν̂ − 1/2. The live feature overlaps
  the dead one by ρ, so the data fluctuation along x₂ is partly absorbed by v: given w the
  posterior of v is exact Gaussian, and the w-direction sees the effective sample size
  n_eff = n(1 − ρ²) (Schur complement).

Posterior sampling (exact up to the grid): flat prior on v, uniform prior on |w| ≤ ``w_bound``.
The marginal posterior of w is tabulated on ``GRID_POINTS`` points covering its mass and sampled
by inverse CDF with uniform jitter inside a cell; v | w ∼ N((b₁ − s A₁₂)/A₁₁, 1/A₁₁) with
s = w^k, A = XᵀX, b = Xᵀy. :func:`realized_nu_reference` computes V_n for the pure cell from the
tabulated posterior moments of s (no sampling) as the oracle of the sampler.

References: S. Watanabe, Asymptotic equivalence of Bayes cross validation and widely applicable
information criterion, JMLR 11 (2010); T. P. Shirodkar, arXiv:2607.00603 (realized ν < ν(k)).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuromanifold.singular.nu import nu

__all__ = [
    "GRID_POINTS",
    "RealizedNu",
    "functional_variance",
    "realized_nu",
    "realized_nu_product",
    "realized_nu_reference",
]

#: Points of the tabulated marginal posterior of w.
GRID_POINTS = 4001
#: Half-width of the tabulated s-range in posterior standard deviations of the Gaussian part.
_S_WIDTH = 12.0
#: Points per sign of the product cell's logarithmic grid of |s|, and its smallest |s|.
PRODUCT_GRID_POINTS = 20001
_S_FLOOR = 1e-14


def functional_variance(loglik: np.ndarray) -> float:
    """V_n = Σ_i Var_s[loglik[s, i]] (ddof = 1) for a (draws S, samples n) matrix; ν̂ = V_n/2.

    >>> round(functional_variance(np.array([[0.0, 1.0], [2.0, 1.0]])), 12)
    2.0
    """
    ll = np.asarray(loglik, dtype=np.float64)
    if ll.ndim != 2 or ll.shape[0] < 2:
        raise ValueError(f"loglik must have shape (draws >= 2, samples), got {ll.shape}")
    return float(ll.var(axis=0, ddof=1).sum())


@dataclass(frozen=True)
class RealizedNu:
    """Realized ν̂ (mean over data sets) with its standard error, and the universal ν(k).

    ``nu_dead`` = ν̂ − ``live_dims``/2 (the part attributed to the dead direction).
    """

    k: int
    n: int
    rho: float | None
    replicates: int
    draws: int
    nu_realized: float
    stderr: float
    live_dims: int
    nu_universal: float

    @property
    def nu_dead(self) -> float:
        """ν̂ − live_dims/2."""
        return self.nu_realized - self.live_dims / 2

    def to_dict(self) -> dict[str, Any]:
        """JSON form (includes ``nu_dead``)."""
        d = dict(self.__dict__)
        d["nu_dead"] = self.nu_dead
        return d


def _check(k: int, n: int, rho: float | None, replicates: int, draws: int, w_bound: float):
    for name, v, lo in (
        ("k", k, 1),
        ("n", n, 3),
        ("replicates", replicates, 2),
        ("draws", draws, 2),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    if rho is not None and not (isinstance(rho, (int, float)) and -1 < rho < 1):
        raise ValueError(f"rho must be a float in (-1, 1) or None, got {rho!r}")
    if not w_bound > 0:
        raise ValueError(f"w_bound must be > 0, got {w_bound!r}")


def _data(rng: np.random.Generator, n: int, rho: float | None):
    x2 = rng.standard_normal(n)
    x1 = None
    if rho is not None:
        x1 = rho * x2 + math.sqrt(1 - rho * rho) * rng.standard_normal(n)
    y = rng.standard_normal(n)  # truth v = w = 0
    return x1, x2, y


def _w_posterior(k: int, x1, x2, y, w_bound: float):
    """Grid over w and normalised marginal posterior weights (v integrated out if present)."""
    a22, b2 = float(x2 @ x2), float(x2 @ y)
    if x1 is not None:
        a11, a12, b1 = float(x1 @ x1), float(x1 @ x2), float(x1 @ y)
        prec, lin = a22 - a12 * a12 / a11, b2 - b1 * a12 / a11
    else:
        prec, lin = a22, b2
    # log p(s) = lin·s − prec·s²/2 (+ const), s = w^k; cover the Gaussian-in-s mass.
    s_max = abs(lin) / prec + _S_WIDTH / math.sqrt(prec)
    w_max = min(w_bound, s_max ** (1.0 / k))
    w = np.linspace(-w_max, w_max, GRID_POINTS)
    s = w**k
    logp = lin * s - 0.5 * prec * s * s
    p = np.exp(logp - logp.max())
    return w, p / p.sum()


def _sample_w(rng: np.random.Generator, w: np.ndarray, p: np.ndarray, draws: int) -> np.ndarray:
    cdf = np.cumsum(p)
    idx = np.minimum(np.searchsorted(cdf, rng.random(draws) * cdf[-1]), len(w) - 1)
    h = w[1] - w[0]
    return np.clip(w[idx] + (rng.random(draws) - 0.5) * h, w[0], w[-1])


def realized_nu(
    k: int,
    *,
    n: int = 400,
    rho: float | None = None,
    replicates: int = 200,
    draws: int = 400,
    w_bound: float = 1.0,
    seed: int = 0,
) -> RealizedNu:
    """ν̂ = mean over data sets of V_n/2 from exact-on-grid posterior draws (module docstring)."""
    _check(k, n, rho, replicates, draws, w_bound)
    rng = np.random.default_rng(seed)
    vals = np.empty(replicates)
    for r in range(replicates):
        x1, x2, y = _data(rng, n, rho)
        wg, p = _w_posterior(k, x1, x2, y, w_bound)
        s = _sample_w(rng, wg, p, draws) ** k
        mean = np.outer(s, x2)
        if x1 is not None:
            a11, a12, b1 = float(x1 @ x1), float(x1 @ x2), float(x1 @ y)
            v = (b1 - s * a12) / a11 + rng.standard_normal(draws) / math.sqrt(a11)
            mean = mean + np.outer(v, x1)
        loglik = -0.5 * (y[None, :] - mean) ** 2 - 0.5 * math.log(2 * math.pi)
        vals[r] = functional_variance(loglik) / 2
    return RealizedNu(
        k=k,
        n=n,
        rho=rho,
        replicates=replicates,
        draws=draws,
        nu_realized=float(vals.mean()),
        stderr=float(vals.std(ddof=1) / math.sqrt(replicates)),
        live_dims=0 if rho is None else 1,
        nu_universal=nu(k),
    )


def realized_nu_reference(
    k: int, *, n: int = 400, replicates: int = 200, w_bound: float = 1.0, seed: int = 0
) -> RealizedNu:
    """Pure cell, no sampling: V_n = Σ_i Var_post[y_i x_i s − x_i² s²/2] from grid moments of s.

    Var_post(c₁ s + c₂ s²) = c₁² Var(s) + 2c₁c₂ Cov(s, s²) + c₂² Var(s²) with c₁ = y_i x_i,
    c₂ = −x_i²/2, summed over i. Same data stream as :func:`realized_nu` with ``rho=None``
    only in distribution (the sampler also consumes random numbers).
    """
    _check(k, n, None, replicates, 2, w_bound)

    def grid(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        wg, p = _w_posterior(k, None, x, y, w_bound)
        return wg**k, p

    return _exact_in_s(k, n, replicates, seed, grid)


def _exact_in_s(
    k: int,
    n: int,
    replicates: int,
    seed: int,
    grid: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> RealizedNu:
    """ν̂ of a cell y = s(θ) x + ε whose posterior is tabulated in s by ``grid(x, y) → (s, p)``:
    per data set V_n = Σ_i Var_post(c₁ s + c₂ s²) = Σ_i c₁² Var(s) + 2c₁c₂ Cov(s, s²) +
    c₂² Var(s²) with c₁ = y_i x_i, c₂ = −x_i²/2, from the grid moments of s."""
    rng = np.random.default_rng(seed)
    vals = np.empty(replicates)
    for r in range(replicates):
        _, x, y = _data(rng, n, None)
        s, p = grid(x, y)
        e1, e2, e3, e4 = (float(p @ s**j) for j in (1, 2, 3, 4))
        var_s, cov, var_s2 = e2 - e1 * e1, e3 - e1 * e2, e4 - e2 * e2
        c1, c2 = y * x, -0.5 * x * x
        vals[r] = float(np.sum(c1 * c1 * var_s + 2 * c1 * c2 * cov + c2 * c2 * var_s2)) / 2
    return RealizedNu(
        k=k,
        n=n,
        rho=None,
        replicates=replicates,
        draws=0,
        nu_realized=float(vals.mean()),
        stderr=float(vals.std(ddof=1) / math.sqrt(replicates)),
        live_dims=0,
        nu_universal=nu(k),
    )


def _product_grid(depth: int, lin: float, prec: float) -> tuple[np.ndarray, np.ndarray]:
    """Grid over s = w₁ ⋯ w_L (w_i ~ U[−1, 1]) and its normalised posterior weights.

    −log|w_i| are i.i.d. Exp(1), so −log|s| is Gamma(L, 1): |s| has the prior density
    (−log|s|)^{L−1}/(L−1)! on (0, 1], the sign is even. The grid is logarithmic in |s| from
    ``_S_FLOOR`` to the end of the Gaussian-in-s mass (capped at 1), both signs, each point
    weighted by density × cell width; the likelihood is exp(lin·s − prec·s²/2)."""
    s_max = min(1.0, abs(lin) / prec + _S_WIDTH / math.sqrt(prec))
    u = np.linspace(math.log(_S_FLOOR), math.log(s_max), PRODUCT_GRID_POINTS)
    mag = np.exp(u)
    prior = (-u) ** (depth - 1) * mag * np.gradient(u)  # density × d|s|, d|s| = |s| du
    s = np.concatenate([-mag[::-1], mag])
    w = np.concatenate([prior[::-1], prior])
    logp = lin * s - 0.5 * prec * s * s
    p = w * np.exp(logp - logp.max())
    return s, p / p.sum()


def realized_nu_product(
    depth: int, *, n: int = 4000, replicates: int = 200, seed: int = 0
) -> RealizedNu:
    """Product cell y = (w₁ ⋯ w_L) x + ε (L = ``depth``, w_i ~ U[−1, 1], truth s = 0), no
    sampling: the likelihood sees θ through s = Π w_i only, so V_n = Σ_i Var_post[y_i x_i s −
    x_i² s²/2] from the exact posterior moments of s (prior of s: `_product_grid`), as in
    :func:`realized_nu_reference`, on the same data sets for the same seed.

    ``k`` and ``nu_universal`` are the block's diagonal order L and ν(L), the value of the
    normal form t^{2L} along the block's diagonal, for comparison: L = 1 is a regular parameter
    (ν̂ → 1/2 = ν(1)); for L ≥ 2 the crossing's realized ν exceeds ν(L) (n = 4000: about 0.44
    against ν(2) = 0.173 at L = 2, 0.37 against ν(3) = 0.278 at L = 3; docs/triple.md §4), so
    ν(k_diag) is no upper reference for a crossing.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be an int >= 1, got {depth!r}")
    _check(depth, n, None, replicates, 2, 1.0)
    return _exact_in_s(
        depth, n, replicates, seed, lambda x, y: _product_grid(depth, float(x @ y), float(x @ x))
    )
