"""Residual cell: dead weights inside residual blocks, order = shortest weighted path.

Network (all maps linear, widths ``d_in → h → … → h → d_out``)::

    z_0 = W_in x                      (dead weight)
    z_i = z_{i−1} + W_i z_{i−1}       (i = 1..n; dead weight W_i, free skip)   [skip=True]
    z_i = W_i z_{i−1}                 (plain blocks)                            [skip=False]
    y   = W_out z_n + W_live x        (dead weight W_out; a fixed bypass W_live)

At the base point every dead weight is 0 and y = W_live x. The bypass is a buffer, not a
parameter: as a free matrix it would absorb every change of the end-to-end map
(``W_live → W_live − W_out B W_in``), the true parameters would form a smooth graph over the
dead weights, and every dead-weight direction would be tangent to it, no singularity (s26 audit
CELLS #1); it does not enter the Fisher along the probe either way. The probe moves all n + 2
dead weights together, ``W = (t/√(n+2))·U`` with random unit-Frobenius U's. The output change is
a sum over input→output paths through the moved weights of ``(t/√(n+2))^{#dead edges on the
path}``, so its leading order is ``t^κ`` with κ the shortest weighted path (weight edge cost 1,
skip edge free), and the moment rate is ``2κ`` (spec §6.6). Predictions:

* ``skip=True``: the path W_in → skips → W_out has κ = 2 for every n: **k = 2** (the residual
  stream carries the signal past the dead blocks; depth-invariant). The paths through the
  block weights add ``O(t³)`` and higher corrections.
* ``skip=False``: the only path crosses all n + 2 weights: **k = n + 2** (a plain chain).

Spec: ``dead_directions.md`` §6.6 (residual/DAG: decay exponent 2κ), §9.1 (residual path row).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from neuromanifold.cells._cell import CLASS_GENUINE, Cell, cell_constructor, generator, load, randn
from neuromanifold.singular.family import Gaussian

__all__ = ["ResidualPath", "residual_path"]


class ResidualPath(nn.Module):
    """``y = W_out B_n ⋯ B_1 W_in x + W_live x`` with ``B_i z = z + W_i z`` (or ``W_i z``).

    Parameters: ``inp.weight (h, d_in)``, ``blocks.{i}.weight (h, h)``, ``out.weight (d_out, h)``;
    no biases. ``W_live`` is the buffer ``bypass (d_out, d_in)`` (``bypass``: its value; zeros
    when ``None``).
    """

    def __init__(
        self,
        d_in: int,
        h: int,
        d_out: int,
        blocks: int,
        *,
        skip: bool,
        bypass: Tensor | None = None,
    ) -> None:
        super().__init__()
        self.skip = skip
        self.inp = nn.Linear(d_in, h, bias=False)
        self.blocks = nn.ModuleList([nn.Linear(h, h, bias=False) for _ in range(blocks)])
        self.out = nn.Linear(h, d_out, bias=False)
        w = torch.zeros(d_out, d_in) if bypass is None else bypass.detach().clone()
        self.register_buffer("bypass", w)

    def forward(self, x: Tensor) -> Tensor:
        """Shape ``(N, d_in) → (N, d_out)``."""
        z = self.inp(x)
        for block in self.blocks:
            z = z + block(z) if self.skip else block(z)
        return self.out(z) + x @ self.bypass.T


@cell_constructor
def residual_path(
    *,
    skip: bool = True,
    blocks: int = 3,
    seed: int = 0,
    n: int = 128,
    d_in: int = 3,
    h: int = 4,
    d_out: int = 2,
) -> Cell:
    """Dead weights in ``blocks`` residual (or plain) blocks; expected k = 2 (skip) or blocks + 2.

    See the module docstring for the construction and the shortest-weighted-path prediction.
    """
    if not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"blocks={blocks!r}; expected an integer >= 1")
    gen = generator(seed)
    bypass = randn(d_out, d_in, gen=gen) / math.sqrt(d_in)
    model = ResidualPath(d_in, h, d_out, blocks, skip=skip, bypass=bypass)
    shapes = {"inp.weight": (h, d_in), "out.weight": (d_out, h)}
    shapes.update({f"blocks.{i}.weight": (h, h) for i in range(blocks)})
    params = {k: torch.zeros(*s, dtype=torch.float64) for k, s in shapes.items()}
    params = load(model, params)
    m = blocks + 2
    u: dict[str, Tensor] = {}
    for key, shape in shapes.items():
        w = randn(*shape, gen=gen)
        u[key] = w / (w.square().sum().sqrt() * math.sqrt(m))
    kappa = 2 if skip else m
    kind = "residual" if skip else "plain"
    return Cell(
        name=f"residual_path_{'skip' if skip else 'plain'}",
        description=(
            f"{blocks} {kind} blocks with dead weights between a dead input and a dead output "
            f"weight, plus a fixed bypass; probe moves all {m} dead weights. Shortest weighted "
            f"path (weight 1, skip 0) κ = {kappa}: output change Θ(t^{kappa}), k = {kappa}."
        ),
        model=model,
        params=params,
        direction=u,
        data=randn(n, d_in, gen=gen),
        family=Gaussian(sigma=1.0),
        expected_k=kappa,
        expected_class=CLASS_GENUINE,
        reference="dead_directions.md §6.6 (residual/DAG decay exponent 2κ), §9.1 (residual path)",
        meta={"blocks": blocks, "skip": skip, "kappa": kappa},
    )
