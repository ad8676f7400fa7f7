"""The chain and residual cells labelled genuine are singular, not tangent to a smooth true set.

s26 audit CELLS #1: with ``d_out = 2`` the matrix chain's live units already gave the end-to-end
map full rank, and the residual cell's free bypass absorbed any change of it; in both the probe
was tangent to a smooth set of true parameters (an exact curve of equal functions left θ0 along
it), so "genuine singularity" was the read's operational class, not the geometry.

Two independent checks on the outputs over the cell's data, ``f(θ) ∈ R^{N·d_out}``:

* first order: the leading change ``C = lim (f(θ0 + t u) − f(θ0)) / t^k`` must have a component
  outside the image of the Jacobian ``∂f/∂θ`` at θ0, else a correction ``w = O(t^k)`` along the
  image cancels it (necessary for a singular direction);
* Gauss–Newton: a correction ``w ⊥ u`` that brings ``θ0 + t u`` back to ``f(θ0)`` is ``o(t)``
  where a curve of true parameters leaves θ0 with velocity u (``‖w‖/t → 0``), and stays of
  order t at a singular direction (the true set has no such curve: it must move away by O(t)).
"""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, jacrev

from neuromanifold.cells import Cell, matrix_chain, residual_path

OUTSIDE_MIN = 0.01  # ‖(I − P_J) C‖ / ‖C‖ of a genuine cell (measured 0.025 for L = 3 to 1.0)
INSIDE_MAX = 1e-6  # the same on a submersion point: rounding of the projection
RANK_RTOL = 1e-10  # singular values of ∂f/∂θ (entries of order 1) counted as zero below this
# (f(θ0 + t u) − f0)/t^k at this t: exact for the chains (their change is (t/√L)^L g a1ᵀ x), to
# O(t) for the residual cells; large enough that the change is far above rounding of f0
T_LEAD = 1e-2
GN_T = (1e-1, 1e-2)
GN_STEPS = 40
GN_REACHED = 1e-10  # ‖f(θ0 + t u + w) − f0‖ / ‖f0‖ where the correction counts as reaching f0
GN_SHRINK_MIN = 0.3  # genuine: ‖w‖/t at t = 1e-2 over its value at 1e-1 stays O(1)
GN_SHRINK_MAX = 0.2  # tangent of a smooth set: ‖w‖/t ∝ t, the ratio ≈ 0.1


def _flat(cell: Cell) -> tuple[list[str], torch.Tensor]:
    keys = sorted(cell.params)
    return keys, torch.cat([cell.params[k].reshape(-1) for k in keys])


def _f(cell: Cell, keys: list[str], theta: torch.Tensor) -> torch.Tensor:
    params, i = {}, 0
    for k in keys:
        n = cell.params[k].numel()
        params[k] = theta[i : i + n].reshape(cell.params[k].shape)
        i += n
    return functional_call(cell.model, params, (cell.data,)).reshape(-1)


def _u(cell: Cell, keys: list[str]) -> torch.Tensor:
    return torch.cat(
        [cell.direction.get(k, torch.zeros_like(cell.params[k])).reshape(-1) for k in keys]
    )


def outside_fraction(cell: Cell) -> float:
    """``‖(I − P_J) C‖ / ‖C‖`` with ``C`` the t^k coefficient of the change along the probe."""
    keys, theta = _flat(cell)
    u = _u(cell, keys)
    f0 = _f(cell, keys, theta)
    lead = (_f(cell, keys, theta + T_LEAD * u) - f0) / T_LEAD**cell.expected_k
    J = jacrev(lambda th: _f(cell, keys, th))(theta)
    U, s, _ = torch.linalg.svd(J, full_matrices=False)
    basis = U[:, s > RANK_RTOL * s[0]] if s[0] > 0 else U[:, :0]
    rest = lead - basis @ (basis.T @ lead)
    return float(rest.norm() / lead.norm())


def correction_per_t(cell: Cell, t: float) -> float:
    """``‖w‖ / t`` for the Gauss–Newton correction ``w ⊥ u`` that brings ``θ0 + t u`` back to
    ``f0`` (least-squares steps from ``w = 0``); ``inf`` when it does not get there."""
    keys, theta = _flat(cell)
    u = _u(cell, keys)
    f0 = _f(cell, keys, theta)
    start = theta + t * u
    w = torch.zeros_like(theta)
    proj = torch.eye(theta.numel(), dtype=theta.dtype) - torch.outer(u, u)  # ‖u‖ = 1
    for _ in range(GN_STEPS):
        r = _f(cell, keys, start + w) - f0
        J = jacrev(lambda v: _f(cell, keys, start + v))(w) @ proj
        w = w - proj @ torch.linalg.lstsq(J, r, rcond=None).solution
    if float((_f(cell, keys, start + w) - f0).norm()) > GN_REACHED * float(f0.norm()):
        return float("inf")
    return float(w.norm()) / t


GENUINE = [
    *[(f"matrix_chain_L{d}", lambda d=d: matrix_chain(depth=d)) for d in (2, 3, 4)],
    ("matrix_chain_L3_rotated", lambda: matrix_chain(depth=3, basis="rotated")),
    ("residual_path_skip", lambda: residual_path(skip=True)),
    ("residual_path_plain", lambda: residual_path(skip=False, blocks=1)),
]


@pytest.mark.parametrize(("name", "build"), GENUINE, ids=[g[0] for g in GENUINE])
def test_registered_genuine_cells_are_singular(name: str, build) -> None:
    cell = build()
    assert cell.expected_class == "genuine_singularity"
    assert cell.meta.get("rank_deficient", True)
    assert outside_fraction(cell) >= OUTSIDE_MIN
    big, small = (correction_per_t(cell, t) for t in GN_T)
    assert small >= GN_SHRINK_MIN * big


def test_a_full_rank_live_map_makes_the_probe_tangent_to_a_smooth_set() -> None:
    """The former default (``d_out = 2``): both checks say submersion, and the meta says so."""
    cell = matrix_chain(depth=2, d_out=2)
    assert cell.meta["rank_deficient"] is False
    assert outside_fraction(cell) <= INSIDE_MAX
    big, small = (correction_per_t(cell, t) for t in GN_T)
    assert small <= GN_SHRINK_MAX * big
