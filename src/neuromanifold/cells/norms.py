"""Normalisation cells: the LayerNorm-kernel gauge and its absence under RMSNorm.

LayerNorm ``LN(x) = γ ⊙ (x − x̄)/√(Var x + ε) + β`` has ``𝟙ᵀ(x − x̄) = 0``, hence
``⟨γ⁻¹, LN(x)⟩ = ⟨γ⁻¹, β⟩`` for every x (any ε). The consumer ``Linear`` with bias sees the
augmented input ``ā = (LN(x), 1)``, and ``a* = (γ⁻¹, −⟨γ⁻¹, β⟩)`` satisfies ``⟨a*, ā⟩ = 0`` for
all x: the increment ``ΔW = g a*ᵀ`` (weight ``g γ⁻¹ᵀ``, bias ``−g⟨γ⁻¹, β⟩``) changes no output,
for every g and every t. The directional Fisher is identically zero: a flat gauge.

RMSNorm ``γ ⊙ x/√(mean x² + ε)`` subtracts no mean, so the analogous increment
``(g γ⁻¹ᵀ, 0)``, normalised to the unit probe ``(g γ⁻¹ᵀ, 0)/‖γ⁻¹‖`` (g a unit vector), changes
the output by ``t·g·Σ_i x_i/(rms(x)·‖γ⁻¹‖)`` with ``rms(x) = √(mean x² + ε)``, which is not zero
on generic data: a live direction (k = 1), not a gauge.

Spec: ``dead_directions.md`` §6.4, §9.1 (LN-kernel row), §9.3.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from neuromanifold.cells._cell import (
    CLASS_FLAT_GAUGE,
    CLASS_LIVE,
    Cell,
    cell_constructor,
    generator,
    load,
    normalise,
    randn,
    unit_vector,
)
from neuromanifold.singular.family import Gaussian

__all__ = ["layernorm_kernel", "layernorm_kernel_vector", "rmsnorm_no_kernel"]


def layernorm_kernel_vector(gamma: Tensor, beta: Tensor) -> Tensor:
    """Augmented kernel vector ``a* = (γ⁻¹, −⟨γ⁻¹, β⟩)`` of a LayerNorm's consumer, shape (d+1,).

    >>> import torch
    >>> layernorm_kernel_vector(torch.tensor([2.0, 4.0]), torch.tensor([1.0, 1.0])).tolist()
    [0.5, 0.25, -0.75]
    """
    inv = 1.0 / gamma
    return torch.cat([inv, -(inv * beta).sum().reshape(1)])


def _norm_cell_params(d: int, d_out: int, gen: torch.Generator) -> dict[str, Tensor]:
    gamma = 1.0 + 0.5 * torch.rand(d, generator=gen, dtype=torch.float64)
    gamma = gamma * torch.where(torch.rand(d, generator=gen, dtype=torch.float64) < 0.3, -1.0, 1.0)
    return {
        "gamma": gamma,
        "beta": 0.3 * randn(d, gen=gen),
        "weight": randn(d_out, d, gen=gen) / math.sqrt(d),
        "bias": 0.1 * randn(d_out, gen=gen),
    }


@cell_constructor
def layernorm_kernel(*, seed: int = 0, n: int = 128, d: int = 6, d_out: int = 3) -> Cell:
    """``LayerNorm(d) → Linear(d, d_out)`` probed along the lifted kernel ``g a*ᵀ``: flat gauge.

    γ is random with mixed signs (|γ_i| ∈ [1, 1.5]), β random; g is a random unit vector.
    The probe is ``(weight: g γ⁻¹ᵀ, bias: −g⟨γ⁻¹, β⟩)`` normalised; the outputs are unchanged at
    every t, so ``F_u ≡ 0`` up to rounding (no gauge generator is supplied: the class must follow
    from the magnitude alone).
    """
    gen = generator(seed)
    raw = _norm_cell_params(d, d_out, gen)
    model = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d_out))
    params = load(
        model,
        {
            "0.weight": raw["gamma"],
            "0.bias": raw["beta"],
            "1.weight": raw["weight"],
            "1.bias": raw["bias"],
        },
    )
    a_star = layernorm_kernel_vector(raw["gamma"], raw["beta"])
    g = unit_vector(d_out, gen=gen)
    mode = torch.outer(g, a_star)
    u = normalise({"1.weight": mode[:, :d].clone(), "1.bias": mode[:, d].clone()})
    return Cell(
        name="layernorm_kernel",
        description=(
            "LayerNorm → Linear; probe = the consumer's increment g a*ᵀ with "
            "a* = (γ⁻¹, −⟨γ⁻¹, β⟩), orthogonal to every augmented input (LN(x), 1): no output "
            "changes at any t, F_u ≡ 0 — the LayerNorm-kernel flat gauge."
        ),
        model=model,
        params=params,
        direction=u,
        data=2.0 * randn(n, d, gen=gen) + 0.5,
        family=Gaussian(sigma=1.0),
        expected_k=None,
        expected_class=CLASS_FLAT_GAUGE,
        reference="dead_directions.md §6.4 (LayerNorm closed-form kernel), §9.1",
        meta={"d": d, "d_out": d_out},
    )


@cell_constructor
def rmsnorm_no_kernel(*, seed: int = 0, n: int = 128, d: int = 6, d_out: int = 3) -> Cell:
    """``RMSNorm(d) → Linear(d, d_out)`` along the LayerNorm-analogue ``(g γ⁻¹ᵀ, 0)``: live, k = 1.

    RMSNorm has no β and no mean subtraction; the same construction, normalised to the unit
    probe ``(g γ⁻¹ᵀ, 0)/‖γ⁻¹‖``, gives a direction whose output change
    ``t·g·Σ_i x_i/(rms(x)·‖γ⁻¹‖)`` is linear in t and non-zero: constant F_u > 0.
    """
    gen = generator(seed)
    raw = _norm_cell_params(d, d_out, gen)
    model = nn.Sequential(nn.RMSNorm(d), nn.Linear(d, d_out))
    params = load(
        model, {"0.weight": raw["gamma"], "1.weight": raw["weight"], "1.bias": raw["bias"]}
    )
    g = unit_vector(d_out, gen=gen)
    u = normalise({"1.weight": torch.outer(g, 1.0 / raw["gamma"])})
    return Cell(
        name="rmsnorm_no_kernel",
        description=(
            "RMSNorm → Linear along the LayerNorm-kernel analogue (g γ⁻¹ᵀ, 0): RMSNorm does not "
            "remove the mean, ⟨γ⁻¹, RMSNorm(x)⟩ = Σx_i/rms(x) varies, the output moves linearly "
            "in t: live, k = 1 (RMSNorm has no kernel gauge)."
        ),
        model=model,
        params=params,
        direction=u,
        data=2.0 * randn(n, d, gen=gen) + 0.5,
        family=Gaussian(sigma=1.0),
        expected_k=1,
        expected_class=CLASS_LIVE,
        reference="dead_directions.md §6.4 (RMSNorm has no such direction), §9.1",
        meta={"d": d, "d_out": d_out},
    )
