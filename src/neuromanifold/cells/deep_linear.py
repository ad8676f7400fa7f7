"""Deep linear chains: the depth singularity of order k = L.

* Scalar chain ``y = (Π_{i=1}^{L} w_i) x`` at w = 0 along ``(1, …, 1)/√L``: the output along the
  probe is ``(t/√L)^L x``, so the KL order is L and ``F_u(t) = L^{2−L} t^{2(L−1)} E[x²]/σ²``.
* Matrix chain ``y = W_L ⋯ W_1 x`` with a *dead path*: one hidden unit per hidden layer whose
  incoming and outgoing weights all vanish. The live units (``width − 1`` per hidden layer) span
  fewer than ``min(d_in, d_out)`` dimensions (defaults ``d_in = width = d_out = 3``: rank 2 of 3),
  so the end-to-end map is rank deficient and the dead path's term ``g_L a_1ᵀ`` has a component
  outside the image of the differential at θ0 (for random ``g_L`` and the data's ``a_1``): no
  curve of true parameters leaves θ0 along the probe, a genuine singularity. Where ``width − 1 ≥
  min(d_in, d_out)`` the live map already has full rank, θ0 is a submersion point, the true
  parameters form a smooth set there and the probe is tangent to it: the straight line still reads
  k = L, but the class the read gives, ``genuine_singularity``, is then operational only (nothing
  supplies a generator of that smooth set; s26 audit CELLS #1 — the registry's rows had ``d_out =
  2``). ``meta["rank_deficient"]`` says which case a cell is. The probe is the concatenation of
  the per-layer joint modes ``ΔW_ℓ = g_ℓ a_ℓᵀ``, over √L. These are the modes a K-FAC detector
  names at the base point: on a hidden side the dead unit spans the kernel of the input second
  moment A_ℓ (a_ℓ) and of the output-gradient second moment G_ℓ (g_ℓ); on the input side of layer
  1, where A_1 = E[xxᵀ] has no kernel, the one-sided mode pairs g_min with the top eigenvector of
  A_1 (a_1); on the output side of layer L the Gaussian G_L = I/σ² is isotropic and g_L is a
  random unit vector. Along it the chain adds ``(t/√L)^L g_L a_1ᵀ x`` to the live map: k = L. The
  A–G duality of the spec reads the same rate per layer: at ``θ(t)``, layer ℓ's joint mode carries
  ``t^{2(ℓ−1)}`` from its input (forward depth) and ``t^{2(L−ℓ)}`` from its output gradient
  (backward depth), ``t^{2(L−1)}`` in all; those per-layer modes are the cell's ``components``.
* Hidden bases: ``basis="rotated"`` replaces every hidden basis by a random orthogonal one
  (``W_ℓ → Q_ℓ W_ℓ Q_{ℓ−1}ᵀ``, the joint modes lifted the same way: ``g_ℓ → Q_ℓ g_ℓ``,
  ``a_ℓ → Q_{ℓ−1} a_ℓ``), ``"permuted"`` by a random permutation. The end-to-end map and the
  Fisher along the lifted probe are unchanged, so every basis reads k = L.

Spec: ``dead_directions.md`` §5 (width-one chain), §6.1 (A–G duality), §8, §9.1.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from neuromanifold.cells._cell import (
    CLASS_GENUINE,
    Basis,
    Cell,
    basis_change,
    cell_constructor,
    generator,
    load,
    randn,
    second_moment,
    top_eigenvector,
    unit_vector,
)
from neuromanifold.singular.family import Gaussian

__all__ = ["chain_product", "matrix_chain", "scalar_chain"]


def _check_depth(depth: int) -> None:
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
        raise ValueError(f"depth={depth!r}; expected an integer >= 2")


def _chain_model(widths: list[int]) -> nn.Sequential:
    return nn.Sequential(
        *[nn.Linear(widths[i], widths[i + 1], bias=False) for i in range(len(widths) - 1)]
    )


def chain_product(params: dict[str, Tensor], depth: int) -> Tensor:
    """End-to-end matrix ``W_L ⋯ W_1`` of a chain cell's parameters ``{i}.weight``."""
    out = params["0.weight"]
    for i in range(1, depth):
        out = params[f"{i}.weight"] @ out
    return out


@cell_constructor
def scalar_chain(*, depth: int, seed: int = 0, n: int = 64, sigma: float = 1.0) -> Cell:
    """Width-one deep linear chain ``y = (Π w_i) x`` at w = 0 along ``(1, …, 1)/√L``: k = L.

    >>> cell = scalar_chain(depth=4)
    >>> cell.expected_k, sorted(cell.direction)[:2]
    (4, ['0.weight', '1.weight'])
    """
    _check_depth(depth)
    gen = generator(seed)
    model = _chain_model([1] * (depth + 1))
    params = load(
        model, {f"{i}.weight": torch.zeros(1, 1, dtype=torch.float64) for i in range(depth)}
    )
    u = {
        f"{i}.weight": torch.full((1, 1), 1.0 / math.sqrt(depth), dtype=torch.float64)
        for i in range(depth)
    }
    return Cell(
        name=f"scalar_chain_L{depth}",
        description=(
            f"Width-one linear chain (Π_(i=1..{depth}) w_i) x at w = 0 along (1, …, 1)/√L: output "
            f"(t/√L)^L x, F_u ∝ t^(2(L−1)), k = L = {depth}."
        ),
        model=model,
        params=params,
        direction=u,
        data=randn(n, 1, gen=gen),
        family=Gaussian(sigma=sigma),
        expected_k=depth,
        expected_class=CLASS_GENUINE,
        reference="dead_directions.md §5 rule 3, §8 (deep linear), §9.1 (scalar chain)",
        meta={"depth": depth},
    )


@cell_constructor
def matrix_chain(
    *,
    depth: int,
    seed: int = 0,
    n: int = 64,
    d_in: int = 3,
    width: int = 3,
    d_out: int = 3,
    basis: Basis = "canonical",
) -> Cell:
    """Matrix deep linear chain of ``depth`` layers with a dead path, probed along its joint modes.

    Hidden layers have ``width`` units; unit ``width − 1`` of every hidden layer is on the dead
    path (its row and column vanish in every weight), the others carry random live weights. See
    the module docstring for the probe, the per-layer ``components`` and ``basis``. The output
    along the probe is ``W_live x + (t/√L)^L g_L (a_1ᵀ x)`` exactly: k = L.
    """
    _check_depth(depth)
    if width < 2:
        raise ValueError(f"width={width!r}; expected at least 2 hidden units (live and dead)")
    gen = generator(seed)
    widths = [d_in] + [width] * (depth - 1) + [d_out]
    j = width - 1
    live: list[Tensor] = []
    for i in range(depth):
        w = randn(widths[i + 1], widths[i], gen=gen) / math.sqrt(widths[i])
        if i > 0:
            w[:, j] = 0.0  # nothing leaves the dead unit of the layer below
        if i < depth - 1:
            w[j, :] = 0.0  # nothing enters the dead unit of the layer above
        live.append(w)
    x = randn(n, d_in, gen=gen)
    a_first = top_eigenvector(second_moment(x))
    g_last = unit_vector(d_out, gen=gen)
    e = torch.zeros(width, dtype=torch.float64)
    e[j] = 1.0
    modes: list[tuple[Tensor, Tensor]] = []  # (g_ℓ, a_ℓ) per layer, canonical hidden basis
    for i in range(depth):
        a = a_first if i == 0 else e
        g = g_last if i == depth - 1 else e
        modes.append((g, a))
    # Hidden bases: Q_0 = I (input), Q_L = I (output), Q_1..Q_{L−1} from a separate stream.
    bgen = generator(seed + 104729)
    qs = [torch.eye(d_in, dtype=torch.float64)]
    qs += [basis_change(width, basis, gen=bgen) for _ in range(depth - 1)]
    qs += [torch.eye(d_out, dtype=torch.float64)]
    model = _chain_model(widths)
    params = load(model, {f"{i}.weight": qs[i + 1] @ live[i] @ qs[i].T for i in range(depth)})
    scale = 1.0 / math.sqrt(depth)
    components: dict[str, dict[str, Tensor]] = {}
    u: dict[str, Tensor] = {}
    for i, (g, a) in enumerate(modes):
        mode = torch.outer(qs[i + 1] @ g, qs[i] @ a)
        u[f"{i}.weight"] = scale * mode
        components[f"layer{i + 1}"] = {f"{i}.weight": mode}
    suffix = "" if basis == "canonical" else f"_{basis}"
    return Cell(
        name=f"matrix_chain_L{depth}{suffix}",
        description=(
            f"Depth-{depth} linear chain (widths {widths}) with a dead path through one unit per "
            f"hidden layer, {basis} hidden bases; probe = per-layer joint modes g_ℓ a_ℓᵀ over √L. "
            f"Output (t/√L)^L g_L a_1ᵀ x on top of the live map: k = L = {depth} "
            f"(A–G duality: t^(2(ℓ−1))·t^(2(L−ℓ)) at every layer ℓ)."
        ),
        model=model,
        params=params,
        direction=u,
        data=x,
        family=Gaussian(sigma=1.0),
        expected_k=depth,
        expected_class=CLASS_GENUINE,
        reference="dead_directions.md §6.1 (A–G duality), §8 (deep linear), §9.1 (rotated chain)",
        components=components,
        meta={
            "depth": depth,
            "widths": widths,
            "basis": basis,
            "rank_deficient": width - 1 < min(d_in, d_out),
        },
    )
