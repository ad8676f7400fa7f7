"""Realized ν (WAIC functional variance) on constructed cells versus the universal ν(k)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from neuromanifold.singular.nu import nu
from neuromanifold.singular.realized_nu import (
    functional_variance,
    realized_nu,
    realized_nu_product,
    realized_nu_reference,
)

#: Monte Carlo agreement in standard errors (over independent data sets).
N_SE = 4.0
#: functional variance against the column-by-column sum of variances (measured ≤ 2.7e-16).
RTOL_SUM = 1e-12
#: product cell at depth 1 against the uniform-grid reference on the same data (measured 7e-14).
RTOL_GRID = 1e-9


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


def test_product_cell_of_depth_one_is_the_regular_reference_cell() -> None:
    """y = w x with w ~ U[−1, 1] is both cells: the logarithmic grid of the product cell and the
    uniform grid of the reference integrate the same posterior on the same data sets."""
    prod = realized_nu_product(1, n=400, replicates=20, seed=5)
    ref = realized_nu_reference(1, n=400, replicates=20, seed=5)
    assert prod.nu_realized == pytest.approx(ref.nu_realized, rel=RTOL_GRID)
    assert prod.k == 1 and prod.nu_universal == nu(1) == 0.5


@pytest.mark.parametrize(("depth", "replicates"), [(2, 40), (3, 80)])
def test_a_crossing_realizes_more_than_the_nu_of_its_diagonal_order(
    depth: int, replicates: int
) -> None:
    """s30 trial TRIPLE F2: ν(k_diag) is an upper reference for a normal form t^{2k}, not for a
    crossing of k components of order 1 (a·b: about 0.44 against ν(2) = 0.173; a·b·c: 0.37
    against ν(3) = 0.278), which the assembly's ``nu_universal`` must not be sold as."""
    cell = realized_nu_product(depth, n=4000, replicates=replicates, seed=7)
    assert cell.nu_universal == nu(depth)
    assert cell.nu_realized > nu(depth) + N_SE * cell.stderr
    assert cell.nu_realized < 0.5  # and below a regular parameter's


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
    for depth in (0, True, 2.0):
        with pytest.raises(ValueError, match="depth must be an int >= 1"):
            realized_nu_product(depth)
