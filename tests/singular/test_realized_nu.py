"""Realized ν (WAIC functional variance) on constructed cells versus the universal ν(k)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from neuromanifold.singular.nu import nu
from neuromanifold.singular.realized_nu import (
    functional_variance,
    realized_nu,
    realized_nu_reference,
)

#: Monte Carlo agreement in standard errors (over independent data sets).
N_SE = 4.0
#: functional variance against the column-by-column sum of variances (measured ≤ 2.7e-16).
RTOL_SUM = 1e-12


def test_functional_variance_is_sum_of_sample_variances() -> None:
    rng = np.random.default_rng(0)
    ll = rng.standard_normal((50, 7))
    expected = sum(np.var(ll[:, i], ddof=1) for i in range(7))
    assert functional_variance(ll) == pytest.approx(expected, rel=RTOL_SUM, abs=0)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_pure_cell_realized_nu_matches_universal(k: int) -> None:
    ref = realized_nu_reference(k, n=400, replicates=300, seed=1)
    assert abs(ref.nu_realized - nu(k)) < N_SE * ref.stderr
    samp = realized_nu(k, n=400, replicates=150, draws=300, seed=2)
    se = math.hypot(samp.stderr, ref.stderr)
    assert abs(samp.nu_realized - ref.nu_realized) < N_SE * se


def test_live_overlap_suppresses_dead_fluctuation_only_at_small_effective_n() -> None:
    # Overlap ρ: the dead direction sees n_eff = n(1 − ρ²). Large n_eff: ν_dead ≈ ν(2);
    # n_eff < 1: the live parameter absorbs the fluctuation and ν_dead falls well below ν(2).
    independent = realized_nu(2, n=400, rho=0.0, replicates=150, draws=300, seed=3)
    assert abs(independent.nu_dead - nu(2)) < N_SE * independent.stderr
    absorbed = realized_nu(2, n=400, rho=0.999, replicates=150, draws=300, seed=3)
    assert absorbed.nu_dead < nu(2) - N_SE * absorbed.stderr
    assert absorbed.nu_dead < independent.nu_dead
    assert absorbed.live_dims == 1 and absorbed.to_dict()["nu_dead"] == absorbed.nu_dead


def test_errors() -> None:
    with pytest.raises(ValueError, match="loglik must have shape"):
        functional_variance(np.zeros(5))
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        realized_nu(0)
    with pytest.raises(ValueError, match=r"rho must be a float in \(-1, 1\)"):
        realized_nu(2, rho=1.0)
    with pytest.raises(ValueError, match="replicates must be an int >= 2"):
        realized_nu(2, replicates=1)
    with pytest.raises(ValueError, match="w_bound must be > 0"):
        realized_nu_reference(2, w_bound=0.0)
