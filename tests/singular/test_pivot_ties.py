"""Canonical bases of spans symmetric in their coordinates (s13 audit B #4).

`link._canonical_span` and `factor_spectrum._null_basis` pick pivot coordinates by pivoted QR.
Where two candidates tie exactly (every coordinate of the plane ⊥ (1, 1, 1) looks alike),
rounding of the input decided the pivots, so inputs that differ at 1e-14 — as the same factor
does between CPU kernels — gave different "canonical" bases (three of them in 60 draws).
`tie_broken_pivots` sends near-ties to the lower coordinate.
"""

from __future__ import annotations

import math

import torch

from neuromanifold.singular.detectors.link import _canonical_span
from neuromanifold.singular.factor_spectrum import _null_basis, sign_fix, tie_broken_pivots

D = torch.float64
NOISE = 1e-14  # the size of the differences between CPU kernels' inputs (with margin)
ATOL_BASIS = 1e-10  # bases of inputs that differ at NOISE agree to far better than this
DRAWS = 40


def _rotation(angle: float) -> torch.Tensor:
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[c, -s], [s, c]], dtype=D)


def _draws(basis: torch.Tensor, seed: int) -> list[torch.Tensor]:
    """``basis`` (d × 2) turned by random in-plane rotations, plus NOISE-sized perturbations."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(DRAWS):
        angle = float(torch.rand(1, generator=gen, dtype=D)) * 2 * math.pi
        noise = NOISE * torch.randn(basis.shape, generator=gen, dtype=D)
        out.append(basis @ _rotation(angle) + noise)
    return out


def test_a_symmetric_span_gets_one_canonical_basis() -> None:
    """The plane ⊥ (1, 1, 1): every diagonal entry of its projector is 2/3, a pivot tie."""
    normal = torch.ones(3, 1, dtype=D) / math.sqrt(3)
    q, _ = torch.linalg.qr(torch.cat([normal, torch.eye(3, dtype=D)[:, :2]], 1))
    bases = [sign_fix(_canonical_span(w)) for w in _draws(q[:, 1:], seed=0)]
    for b in bases[1:]:
        torch.testing.assert_close(b, bases[0], atol=ATOL_BASIS, rtol=0)
    # still an orthonormal basis of the plane
    torch.testing.assert_close(bases[0].T @ bases[0], torch.eye(2, dtype=D), atol=1e-12, rtol=0)
    assert float((normal.T @ bases[0]).abs().max()) < 1e-12


def test_the_null_basis_of_a_symmetric_range_is_one_basis() -> None:
    """Range span{(1, 1, 0, 0), (0, 0, 1, 1)}: pivots tie within each pair of coordinates."""
    rng = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]], dtype=D).T / math.sqrt(2)
    bases = [_null_basis(r) for r in _draws(rng, seed=1)]
    for b in bases[1:]:
        torch.testing.assert_close(b, bases[0], atol=ATOL_BASIS, rtol=0)
    torch.testing.assert_close(bases[0].T @ bases[0], torch.eye(2, dtype=D), atol=1e-12, rtol=0)
    assert float((rng.T @ bases[0]).abs().max()) < 1e-12


def test_near_ties_go_to_the_lower_coordinate_and_clear_winners_keep_their_place() -> None:
    """LAPACK takes the larger of two columns that differ by 1e-12 relative (rounding-sized);
    the weighted pivots take the lower coordinate. A column larger by 1e-4 still wins."""
    near = torch.tensor([[1.0, 1.0 + 1e-12, 1.0]], dtype=D)
    assert tie_broken_pivots(near)[0].item() == 0
    clear = torch.tensor([[1.0, 1.0, 1.0 + 1e-4, 1.0]], dtype=D)  # coordinate 2 is larger
    assert tie_broken_pivots(clear)[0].item() == 2
    assert sorted(tie_broken_pivots(clear).tolist()) == [0, 1, 2, 3]
