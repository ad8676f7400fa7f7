"""Exact anchors of the rate law: the Gaussian location on ``μ = θ^k`` and linear regression.

Spec: ``dead_directions.md`` §3 (exact anchor) and §9.1 (first two rows of the table).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.cells._cell import (
    CLASS_GENUINE,
    CLASS_LIVE,
    Cell,
    cell_constructor,
    generator,
    load,
    randn,
    unit_vector,
)
from neuromanifold.singular.family import Gaussian

__all__ = ["PowerLocation", "gaussian_location", "linear_regression"]


class PowerLocation(nn.Module):
    """Constant-mean Gaussian location model: output ``μ(θ) = θ^k`` for every input row.

    Parameter ``theta`` has shape ``(1,)``; the forward maps inputs ``(N, ...)`` to ``(N, 1)``
    filled with ``θ^k`` (the inputs only fix N).
    """

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.theta = nn.Parameter(torch.zeros(1))

    def forward(self, x: Tensor) -> Tensor:
        """``θ^k`` broadcast to shape ``(N, 1)``."""
        return (self.theta**self.k).expand(x.shape[0], 1)


@cell_constructor
def gaussian_location(*, k: int, seed: int = 0, n: int = 64, sigma: float = 1.0) -> Cell:
    """Gaussian location ``N(μ, σ²)`` with ``μ(θ) = θ^k`` at θ₀ = 0, probed along ∂θ.

    Along ``θ(t) = t`` the mean is ``t^k``, so the Fisher is exactly
    ``F(t) = (dμ/dt)²/σ² = k² t^{2(k−1)}/σ²`` and ``KL(t) = t^{2k}/(2σ²)``, giving
    ``F·t² = 2k²·KL`` at every t: the rate law's exact anchor, KL order k
    (k = 1 is the regular location model and reads live).

    >>> cell = gaussian_location(k=3)
    >>> cell.expected_k, cell.expected_class
    (3, 'genuine_singularity')
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k={k!r}; expected an integer order >= 1")
    gen = generator(seed)
    model = PowerLocation(k)
    params = load(model, {"theta": torch.zeros(1, dtype=torch.float64)})
    return Cell(
        name=f"gaussian_location_k{k}",
        description=(
            f"Gaussian location N(θ^{k}, σ²) at θ₀ = 0 along ∂θ: F(t) = k² t^(2(k−1))/σ² exactly, "
            f"so the order is k = {k}."
        ),
        model=model,
        params=params,
        direction={"theta": torch.ones(1, dtype=torch.float64)},
        data=randn(n, 1, gen=gen),
        family=Gaussian(sigma=sigma),
        expected_k=k,
        expected_class=CLASS_LIVE if k == 1 else CLASS_GENUINE,
        reference="dead_directions.md §3 (exact anchor), §9.1",
        meta={"k": k, "sigma": sigma},
    )


@cell_constructor
def linear_regression(*, seed: int = 0, n: int = 128, d_in: int = 4, sigma: float = 1.0) -> Cell:
    """Regular regression ``y = wᵀx + b`` at a random w, probed along a random unit u.

    The output is linear in (w, b), so ``J u = u_wᵀx + u_b`` does not depend on t and
    ``F_u(t) = E_x[(u_wᵀx + u_b)²]/σ² > 0`` is constant: a live direction, k = 1.
    """
    gen = generator(seed)
    model = nn.Linear(d_in, 1)
    params = load(model, {"weight": randn(1, d_in, gen=gen), "bias": randn(1, gen=gen)})
    u = unit_vector(d_in + 1, gen=gen)
    return Cell(
        name="linear_regression",
        description=(
            "Linear regression y = wᵀx + b, random base point, random unit direction: "
            "J u is independent of t, F_u is a positive constant, k = 1 (live)."
        ),
        model=model,
        params=params,
        direction={"weight": u[:d_in].reshape(1, d_in).clone(), "bias": u[d_in:].clone()},
        data=randn(n, d_in, gen=gen),
        family=Gaussian(sigma=sigma),
        expected_k=1,
        expected_class=CLASS_LIVE,
        reference="dead_directions.md §9.1 (regular regression)",
        meta={"d_in": d_in},
    )
