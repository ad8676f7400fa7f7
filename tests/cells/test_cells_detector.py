"""The cells' directions are the joint modes a K-FAC/KFC detector names at the base point.

For every block a cell's direction touches, the block's part is a rank-one increment
``ΔW = g aᵀ``; checked against the factors of ``singular.factors.kfac_factors`` at θ₀:

* ``kernel``: the side is a dead unit/channel, the vector lies in the factor's kernel
  (``vᵀ M v ≤ KERNEL_RTOL·λ_max``); ``unique`` additionally asks for a one-dimensional kernel
  (the detector's bottom eigenvector is then exactly this vector);
* ``top``: the side has no kernel (layer inputs) and the vector is the top eigenvector
  (the spec's one-sided mode ``(top a, g_min)``);
* ``isotropic``: the factor is a multiple of the identity (Gaussian output), any vector is an
  eigenvector.
"""

from __future__ import annotations

import pytest
import torch

from neuromanifold.cells import conv_chain, conv_node_death, matrix_chain, mlp_node_death
from neuromanifold.singular.factors import kfac_factors

KERNEL_RTOL = 1e-12  # exact zeros of a second moment, relative to its largest eigenvalue
TOP_RTOL = 1e-10  # Rayleigh quotient of the top eigenvector vs λ_max
GAP_MIN = 1e-3  # second-smallest eigenvalue / λ_max when the kernel must be one-dimensional
# Rounding-level residues relative to the largest singular value / Frobenius norm (measured over
# CASES: Σ_{i≥2} s_i/s_1 ≤ 2.4e-16, ‖M − (tr M/d) I‖/‖M‖ ≤ 1.9e-15).
RANK_ONE_RTOL = 1e-12
ISOTROPIC_RTOL = 1e-12


def _rank_one_sides(delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mat = delta.reshape(delta.shape[0], -1)
    u, s, vh = torch.linalg.svd(mat)
    assert float(s[1:].sum()) <= RANK_ONE_RTOL * float(s[0]), "increment is not rank one"
    return u[:, 0], vh[0]


def _check(moment: torch.Tensor, vec: torch.Tensor, kind: str) -> None:
    eig = torch.linalg.eigvalsh(moment)
    lam_max = float(eig[-1])
    rq = float(vec @ moment @ vec)
    if kind in ("kernel", "unique"):
        assert rq <= KERNEL_RTOL * lam_max
        if kind == "unique":
            assert float(eig[1]) >= GAP_MIN * lam_max
    elif kind == "top":
        assert rq == pytest.approx(lam_max, rel=TOP_RTOL, abs=0)
    elif kind == "isotropic":
        d = moment.shape[0]
        iso = torch.eye(d, dtype=moment.dtype) * torch.trace(moment) / d
        assert float(torch.linalg.matrix_norm(moment - iso)) <= ISOTROPIC_RTOL * float(
            torch.linalg.matrix_norm(moment)
        )
    else:  # pragma: no cover - test table error
        raise AssertionError(kind)


def _chain_sides(depth: int, *, hidden_a: str, hidden_g: str) -> dict[str, tuple[str, str]]:
    sides = {}
    for i in range(depth):
        a_kind = "top" if i == 0 else hidden_a
        g_kind = "isotropic" if i == depth - 1 else hidden_g
        sides[str(i)] = (a_kind, g_kind)
    return sides


CASES = [
    *[
        (
            f"matrix_chain_L{d}_{b}",
            lambda d=d, b=b: matrix_chain(depth=d, basis=b),
            _chain_sides(d, hidden_a="unique", hidden_g="unique"),
        )
        for d in (2, 3, 5)
        for b in ("canonical", "rotated")
    ],
    *[
        (
            f"mlp_node_death_{b}",
            lambda b=b: mlp_node_death(basis=b),
            {"0": ("top", "unique"), "2": ("unique", "isotropic")},
        )
        for b in ("canonical", "rotated", "permuted")
    ],
    *[
        (
            f"conv{dim}d_node_death",
            lambda dim=dim: conv_node_death(dim=dim),
            {"0": ("top", "unique"), "2": ("unique", "isotropic")},
        )
        for dim in (1, 2)
    ],
    *[
        (
            f"conv{dim}d_chain_L{d}_{b}",
            lambda dim=dim, d=d, b=b: conv_chain(dim=dim, depth=d, basis=b),
            _chain_sides(d, hidden_a="kernel", hidden_g="unique"),
        )
        for dim, d in ((1, 3), (2, 2))
        for b in ("canonical", "rotated")
    ],
]


@pytest.mark.parametrize(("label", "make", "sides"), CASES, ids=[c[0] for c in CASES])
def test_direction_is_the_detector_joint_mode(label, make, sides) -> None:
    cell = make()
    out_dim = cell.model(cell.data[:1]).numel()  # exact G (no Monte Carlo labels) for every cell
    factors = kfac_factors(
        cell.model, cell.data, cell.family, params=cell.params, max_exact_classes=out_dim
    )
    assert sorted(sides) == sorted(k.rsplit(".", 1)[0] for k in cell.direction), label
    for block, (a_kind, g_kind) in sides.items():
        g, a = _rank_one_sides(cell.direction[f"{block}.weight"])
        bf = factors[block]
        if bf.has_bias:  # the direction leaves the bias alone: augmented a = (a, 0)
            a = torch.cat([a, torch.zeros(1, dtype=a.dtype)])
        _check(bf.A, a, a_kind)
        _check(bf.G, g, g_kind)
