"""The duality join matches a G-kernel as a subspace: dead paths are found in any hidden basis.

A layer followed by a narrower one has a G-kernel of dimension above one, in which ``eigh``
returns an arbitrary basis; a dead path through a rotated hidden basis is a mixture of those
vectors and was missed when each was tested alone (a user trial: ``matrix_chain(depth=3,
basis="rotated", width=4, d_out=2)`` read six flat gauges; its canonical twin k = 3). Laws
checked: the rotated and the canonical chain read the same (duality, genuine, k = L); the
principal directions equal their dense oracle; the fast detection equals the `REFERENCE` one;
the rotation is used only where the two kernels need not meet (``2 ≤ m ≤ r``).
"""

from __future__ import annotations

import pytest
import torch

import neuromanifold.singular.detectors.linear as lin
from neuromanifold import read
from neuromanifold.cells.deep_linear import matrix_chain
from neuromanifold.singular.detectors import DetectionContext, default_registry
from neuromanifold.singular.detectors.link import (
    EXACT_DEAD_ENERGY,
    NULL_FRACTION,
    BlockSpectrum,
    principal_links,
    principal_links_reference,
    rotated_energy_max,
    rotates,
)

# energies from an SVD vs a dense eigh of vᵀ(I − KKᵀ)v: rounding of O(1) quantities
ATOL_ENERGY = 1e-12
# principal directions of distinct energies (gaps ≥ 0.1 here), signed the same way
ATOL_DIRECTION = 1e-10
# candidate directions, fast vs REFERENCE detection: the same vectors up to rounding
ATOL_U = 1e-10


def _chain(basis: str, width: int = 4, d_out: int = 2):
    cell = matrix_chain(depth=3, basis=basis, width=width, d_out=d_out)
    model = cell.model.double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(cell.params[name])
    return cell, model


def _signature(reading) -> list[tuple]:
    return sorted(
        (d.detector, d.layers, d.klass, d.k)
        for d in reading.directions
        if d.klass == "genuine_singularity"
    )


@pytest.mark.parametrize(("width", "d_out"), [(4, 2), (5, 2), (4, 3)])
def test_rotated_chain_into_a_narrower_head_reads_like_the_canonical_one(
    width: int, d_out: int
) -> None:
    readings = {}
    for basis in ("canonical", "rotated"):
        cell, model = _chain(basis, width, d_out)
        readings[basis] = read(model, cell.data, cell.family, progress=False)
    expected = [("duality", ("0", "1", "2"), "genuine_singularity", cell.expected_k)]
    assert _signature(readings["canonical"]) == expected
    assert _signature(readings["rotated"]) == expected


def _spec(d: int, k: int, seed: int) -> BlockSpectrum:
    """A consumer spectrum on a random orthonormal basis whose first ``k`` vectors are null."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))[0]
    ev = torch.cat([torch.zeros(k), torch.linspace(0.5, 2.0, d - k)]).double()
    return BlockSpectrum(ev, q, ev, q, list(range(k)), list(range(k)))


@pytest.mark.parametrize(("d", "k", "m"), [(12, 3, 4), (12, 8, 2), (30, 10, 5)])
def test_principal_directions_equal_the_dense_oracle(d: int, k: int, m: int) -> None:
    spec = _spec(d, k, seed=d + k)
    gen = torch.Generator().manual_seed(m)
    vecs = torch.linalg.qr(torch.randn(d, m, generator=gen, dtype=torch.float64))[0]
    basis = torch.linalg.qr(torch.randn(7 + m, m, generator=gen, dtype=torch.float64))[0]
    c, e = principal_links(spec, vecs, basis)
    c_ref, e_ref = principal_links_reference(spec, vecs, basis)
    torch.testing.assert_close(e, e_ref, atol=ATOL_ENERGY, rtol=0)
    assert bool((e[1:] >= e[:-1]).all())  # ascending
    torch.testing.assert_close(c.T @ c, torch.eye(m, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(c, c_ref, atol=ATOL_DIRECTION, rtol=0)
    # each energy is the out-of-kernel energy of its rotated lift
    ker = spec.ker_a_basis()
    lifted = vecs @ c
    energy = 1.0 - (ker.T @ lifted).pow(2).sum(0)
    torch.testing.assert_close(energy, e, atol=ATOL_ENERGY, rtol=0)


def test_a_planted_kernel_vector_has_zero_energy_and_leads() -> None:
    spec = _spec(10, 2, seed=1)
    dead = spec.ker_a_basis()[:, 0]
    gen = torch.Generator().manual_seed(2)
    other = torch.randn(10, 2, generator=gen, dtype=torch.float64)
    vecs = torch.linalg.qr(torch.cat([dead[:, None], other], 1))[0]
    mix = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=torch.float64))[0]
    c, e = principal_links(spec, vecs @ mix, torch.eye(3, dtype=torch.float64))
    assert float(e[0]) <= EXACT_DEAD_ENERGY < float(e[1])
    assert abs(float((vecs @ mix @ c[:, 0]) @ dead)) == pytest.approx(1.0, abs=1e-12)


def test_rotation_only_where_the_kernels_need_not_meet() -> None:
    spec = _spec(6, 3, seed=3)  # r = 3
    assert not rotates(spec, 1) and rotates(spec, 2) and rotates(spec, 3)
    assert not rotates(spec, 4)  # m > r: a generic intersection of dimension m − r
    assert rotated_energy_max(spec, 3) == EXACT_DEAD_ENERGY  # (√r − √m)² = 0
    assert rotated_energy_max(spec, 2) == pytest.approx(
        NULL_FRACTION * (3**0.5 - 2**0.5) ** 2 / 6, rel=1e-12
    )


def _detect(model, cell, reference: bool, monkeypatch) -> tuple[DetectionContext, list]:
    monkeypatch.setattr(lin, "REFERENCE", reference)
    ctx = DetectionContext.from_model(model, cell.data, cell.family)
    cands = [
        c
        for name, mod in ctx.model.named_modules()
        for det in default_registry().for_module(mod)
        for c in det.propose(name, mod, ctx)
    ]
    return ctx, cands


def test_fast_detection_equals_reference_on_the_rotated_chain(monkeypatch) -> None:
    cell, model = _chain("rotated")
    ctx_f, fast = _detect(model, cell, False, monkeypatch)
    ctx_r, ref = _detect(model, cell, True, monkeypatch)
    assert any(c.detector == "duality" for c in fast)
    assert ctx_f.cache["linked_idx"] == ctx_r.cache["linked_idx"]
    assert [(c.detector, c.layers) for c in fast] == [(c.detector, c.layers) for c in ref]
    for a, b in zip(fast, ref, strict=True):
        assert set(a.u) == set(b.u)
        for key in a.u:
            torch.testing.assert_close(a.u[key], b.u[key], atol=ATOL_U, rtol=0)
