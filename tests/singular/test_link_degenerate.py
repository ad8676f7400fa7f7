"""Duality chains do not depend on the rotation an eigensolver picks inside a degenerate cluster.

Exactly dead units lift wholly into the consumer's A-kernel: every principal energy of
`principal_links` is 0 and the SVD may return any rotation of that singular space; which one
was decided by rounding, so the same checkpoint read different chain directions (and a different
class and λ) with and without ``ATEN_CPU_CAPABILITY=default`` (user trial K #1). Laws checked: an
SVD / ``eigh`` whose output is rotated inside each degenerate cluster gives the same chains; a
rotated G-kernel basis (the same subspace) gives the same chains; a cluster spanned by
coordinate axes (dead units) is returned as those axes; fast and oracle agree.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import Tensor

from neuromanifold.singular.detectors.link import (
    DEGENERATE_ENERGY_TOL,
    EXACT_DEAD_ENERGY,
    BlockSpectrum,
    _clusters,
    live_energy_batch,
    principal_links,
    principal_links_reference,
    rotated_energy_max,
)

# chains from the same subspace through differently rotated solver outputs: rounding of O(1)
# quantities (the canonical basis is computed from the cluster's projector, conditioned ~1 here)
ATOL_CHAIN = 1e-12
# energies: rounding of O(1) quantities (unit lifts, energies in [0, 1])
ATOL_ENERGY = 1e-12
# clusters that the fake solvers rotate: singular values / eigenvalues equal to rounding
SOLVER_TIE = 1e-10
# directions of energies 1e-6 apart: an SVD determines them to about ε/gap ≈ 2e-10 (Davis–Kahan)
ATOL_SPLIT_DIRECTION = 1e-9

_svd = torch.linalg.svd
_eigh = torch.linalg.eigh


def _rotations(values: Tensor, n: int, seed: int) -> Tensor:
    """A block-diagonal orthogonal ``n × n`` matrix, random inside each run of ``values`` equal
    to `SOLVER_TIE` (indices ``≥ len(values)``: one more block, the solver's null space)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.eye(n, dtype=torch.float64)
    cuts = [0] + [i + 1 for i in range(len(values) - 1) if values[i] - values[i + 1] > SOLVER_TIE]
    cuts = [*dict.fromkeys([*cuts, len(values), n])]
    for lo, hi in itertools.pairwise(cuts):
        if hi - lo > 1:
            block = torch.linalg.qr(torch.randn(hi - lo, hi - lo, generator=gen).double())[0]
            q[lo:hi, lo:hi] = block
    return q


def _rotating_svd(seed: int):
    def svd(a: torch.Tensor, full_matrices: bool = True):
        u, s, vh = _svd(a, full_matrices=full_matrices)
        n = max(u.shape[1], vh.shape[0])
        q = _rotations(s, n, seed)  # s descending; the same rotation on both sides
        u_rot = u @ q[: u.shape[1], : u.shape[1]]
        vh_rot = q[: vh.shape[0], : vh.shape[0]].T @ vh
        rebuilt = (u_rot[:, : s.numel()] * s) @ vh_rot[: s.numel()]
        torch.testing.assert_close(rebuilt, a, atol=1e-12, rtol=0)  # still an SVD of a
        return u_rot, s, vh_rot

    return svd


def _rotating_eigh(seed: int):
    def eigh(a: torch.Tensor):
        w, v = _eigh(a)
        q = _rotations(-w, w.numel(), seed)  # ascending: negate for the descending helper
        return w, v @ q

    return eigh


def _dead_setup(d_out: int, dead: list[int], k_extra: int, seed: int):
    """A producer with dead units ``dead`` (G-kernel basis = those axes, as `factor_spectrum`
    returns them) lifted (Linear, identity) into a consumer whose A-kernel holds those axes and
    ``k_extra`` random other directions; the rest is its live part."""
    gen = torch.Generator().manual_seed(seed)
    d = d_out
    eye = torch.eye(d, dtype=torch.float64)
    basis = eye[:, dead]
    rest = [i for i in range(d) if i not in dead]
    mix = torch.linalg.qr(torch.randn(len(rest), len(rest), generator=gen).double())[0]
    other = eye[:, rest] @ mix  # orthonormal complement of the dead axes, random basis
    a_vecs = torch.cat([basis, other], 1)
    k = len(dead) + k_extra
    ev = torch.cat([torch.zeros(k), torch.linspace(0.5, 2.0, d - k)]).double()
    spec = BlockSpectrum(ev, a_vecs, ev, a_vecs, list(range(k)), list(range(k)))
    return spec, basis.clone(), basis


THETA, PHI = 0.6, 1.1  # planted angles to the A-kernel: energies sin²θ (twice), sin²φ


def _mixed_setup(d: int, k: int, seed: int):
    """A G-kernel of dimension 5 whose lift has two degenerate clusters (energies 0 and sin²θ)
    and one distinct energy, in a random orthonormal consumer basis."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.linalg.qr(torch.randn(d, d, generator=gen).double())[0]
    ker, live = q[:, :k], q[:, k:]
    cols = [
        ker[:, 0],
        ker[:, 1],
        ker[:, 2] * math.cos(THETA) + live[:, 0] * math.sin(THETA),
        ker[:, 3] * math.cos(THETA) + live[:, 1] * math.sin(THETA),
        ker[:, 4] * math.cos(PHI) + live[:, 2] * math.sin(PHI),
    ]
    vecs = torch.stack(cols, 1).double()
    ev = torch.cat([torch.zeros(k), torch.linspace(0.5, 2.0, d - k)]).double()
    spec = BlockSpectrum(ev, q, ev, q, list(range(k)), list(range(k)))
    basis = torch.linalg.qr(torch.randn(9, 5, generator=gen).double())[0]
    return spec, vecs, basis


# (d, dead, k_extra): kernel path (k ≤ d − k) and live-complement path (k > d − k)
DEAD_CASES = [(10, [1, 4, 6], 0), (10, [0, 3, 5, 8], 3)]
MIXED_CASES = [(14, 6), (14, 9)]  # k ≤ d − k and k > d − k


@pytest.mark.parametrize(("d", "dead", "k_extra"), DEAD_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dead_chains_do_not_depend_on_the_svd_rotation(monkeypatch, d, dead, k_extra, seed):
    spec, vecs, basis = _dead_setup(d, dead, k_extra, seed=7)
    c0, e0 = principal_links(spec, vecs, basis)
    monkeypatch.setattr(torch.linalg, "svd", _rotating_svd(seed))
    c1, e1 = principal_links(spec, vecs, basis)
    torch.testing.assert_close(basis @ c1, basis @ c0, atol=ATOL_CHAIN, rtol=0)
    torch.testing.assert_close(e1, e0, atol=ATOL_ENERGY, rtol=0)


@pytest.mark.parametrize(("d", "dead", "k_extra"), DEAD_CASES)
def test_dead_units_are_returned_as_their_axes(d, dead, k_extra):
    spec, vecs, basis = _dead_setup(d, dead, k_extra, seed=7)
    for fn in (principal_links, principal_links_reference):
        c, e = fn(spec, vecs, basis)
        assert float(e.abs().max()) <= ATOL_ENERGY
        # a span of coordinate axes is canonical as those axes, in coordinate order, positive
        torch.testing.assert_close(basis @ c, basis, atol=ATOL_CHAIN, rtol=0)


@pytest.mark.parametrize(("d", "k"), MIXED_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clustered_chains_do_not_depend_on_solver_or_basis_rotation(monkeypatch, d, k, seed):
    spec, vecs, basis = _mixed_setup(d, k, seed=d + k)
    c0, e0 = principal_links(spec, vecs, basis)
    c_ref, e_ref = principal_links_reference(spec, vecs, basis)
    # two clusters of two and one distinct energy, ascending; the oracle agrees
    s_t, s_p = math.sin(THETA) ** 2, math.sin(PHI) ** 2
    expected = torch.tensor([0.0, 0.0, s_t, s_t, s_p], dtype=torch.float64)
    torch.testing.assert_close(e0, expected, atol=ATOL_ENERGY, rtol=0)
    torch.testing.assert_close(e_ref, e0, atol=ATOL_ENERGY, rtol=0)
    torch.testing.assert_close(basis @ c_ref, basis @ c0, atol=ATOL_CHAIN, rtol=0)
    torch.testing.assert_close(c0.T @ c0, torch.eye(5, dtype=torch.float64), atol=1e-12, rtol=0)
    # a rotated G-kernel basis (the same subspace, lifted the same way) gives the same chains
    gen = torch.Generator().manual_seed(100 + seed)
    r = torch.linalg.qr(torch.randn(5, 5, generator=gen).double())[0]
    c_r, e_r = principal_links(spec, vecs @ r, basis @ r)
    torch.testing.assert_close((basis @ r) @ c_r, basis @ c0, atol=ATOL_CHAIN, rtol=0)
    torch.testing.assert_close(e_r, e0, atol=ATOL_ENERGY, rtol=0)
    # solvers rotated inside their degenerate clusters give the same chains
    monkeypatch.setattr(torch.linalg, "svd", _rotating_svd(seed))
    monkeypatch.setattr(torch.linalg, "eigh", _rotating_eigh(seed))
    c1, e1 = principal_links(spec, vecs, basis)
    c1_ref, _ = principal_links_reference(spec, vecs, basis)
    torch.testing.assert_close(basis @ c1, basis @ c0, atol=ATOL_CHAIN, rtol=0)
    torch.testing.assert_close(basis @ c1_ref, basis @ c0, atol=ATOL_CHAIN, rtol=0)
    torch.testing.assert_close(e1, e0, atol=ATOL_ENERGY, rtol=0)


def test_energies_apart_by_more_than_the_tolerance_stay_principal():
    """Energies apart by 100× `DEGENERATE_ENERGY_TOL` are not merged: each direction is the
    stationary one, with its own energy (its rotated lift's out-of-kernel energy)."""
    d, k = 12, 5
    gen = torch.Generator().manual_seed(3)
    q = torch.linalg.qr(torch.randn(d, d, generator=gen).double())[0]
    ker, live = q[:, :k], q[:, k:]
    e_planted = torch.tensor([0.3, 0.3 + 100 * DEGENERATE_ENERGY_TOL]).double()
    vecs = torch.stack(
        [ker[:, i] * (1 - e_planted[i]).sqrt() + live[:, i] * e_planted[i].sqrt() for i in (0, 1)],
        1,
    )
    ev = torch.cat([torch.zeros(k), torch.linspace(0.5, 2.0, d - k)]).double()
    spec = BlockSpectrum(ev, q, ev, q, list(range(k)), list(range(k)))
    c, e = principal_links(spec, vecs, torch.eye(2, dtype=torch.float64))
    torch.testing.assert_close(e, e_planted, atol=ATOL_ENERGY, rtol=0)
    # the directions are the planted ones (energy gap 1e-6: determined to ~ε/1e-6)
    torch.testing.assert_close(
        c.abs(), torch.eye(2, dtype=torch.float64), atol=ATOL_SPLIT_DIRECTION, rtol=0
    )


def _dead_and_near_dead(e_near: float) -> tuple[BlockSpectrum, Tensor]:
    """d = 4, A-kernel = axes 0, 1 (live rank r = 2 = m): an exactly dead lift (axis 0, energy 0)
    and a near-dead one with out-of-kernel energy ``e_near`` (s13 audit B #2)."""
    alpha = torch.tensor([0.0, 0.0, 1.0, 2.0], dtype=torch.float64)
    eye = torch.eye(4, dtype=torch.float64)
    spec = BlockSpectrum(alpha, eye, alpha, eye, [0, 1], [0, 1])
    near = torch.tensor([0.0, math.sqrt(1 - e_near), math.sqrt(e_near), 0.0], dtype=torch.float64)
    return spec, torch.stack([eye[:, 0], near], 1)


@pytest.mark.parametrize("e_near", [2e-10, 5e-9])
def test_an_exactly_dead_path_keeps_its_own_energy_inside_a_cluster(e_near: float) -> None:
    """With r = m the link bound is `EXACT_DEAD_ENERGY`; the cluster {0, e_near} got its mean
    energy, so the exactly dead path stopped linking. Each direction now carries its own energy,
    equal to its lift's out-of-kernel energy, in the fast path and the oracle alike."""
    spec, vecs = _dead_and_near_dead(e_near)
    basis = torch.eye(2, dtype=torch.float64)
    bound = rotated_energy_max(spec, 2)
    assert bound == EXACT_DEAD_ENERGY
    for fn in (principal_links, principal_links_reference):
        c, e = fn(spec, vecs, basis)
        torch.testing.assert_close(e, live_energy_batch(spec, vecs @ c), atol=ATOL_ENERGY, rtol=0)
        assert (e <= bound).tolist() == [True, False]  # the dead path links, the other does not


def test_a_run_of_small_gaps_does_not_chain_into_one_wide_cluster() -> None:
    """Energies 0, 0.9e-8, …, 4.5e-8 (every gap below the tolerance) were one cluster with the
    mean energy 2.25e-8; clusters now span at most `DEGENERATE_ENERGY_TOL` from their lowest
    energy, and every returned energy is its direction's own."""
    d, k, m = 16, 8, 6
    gen = torch.Generator().manual_seed(5)
    q = torch.linalg.qr(torch.randn(d, d, generator=gen).double())[0]
    ker, live = q[:, :k], q[:, k:]
    planted = torch.arange(m, dtype=torch.float64) * 0.9 * DEGENERATE_ENERGY_TOL
    vecs = torch.stack(
        [ker[:, i] * (1 - planted[i]).sqrt() + live[:, i] * planted[i].sqrt() for i in range(m)], 1
    )
    ev = torch.cat([torch.zeros(k), torch.linspace(0.5, 2.0, d - k)]).double()
    spec = BlockSpectrum(ev, q, ev, q, list(range(k)), list(range(k)))
    c, e = principal_links(spec, vecs, torch.eye(m, dtype=torch.float64))
    torch.testing.assert_close(e, live_energy_batch(spec, vecs @ c), atol=ATOL_ENERGY, rtol=0)
    assert [hi - lo for lo, hi in _clusters(planted)] == [2, 2, 2]
    assert float(e.max() - e.min()) > 4 * DEGENERATE_ENERGY_TOL  # the spread is kept
