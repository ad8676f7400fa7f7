"""Gauge cells: a linear orbit (cross-entropy logit shift) and a curved one (ReLU rescaling).

* Softmax is invariant under adding one constant to every logit. The probe that adds the same
  amount to every class bias moves along this *linear* orbit: the logits change by ``t·c𝟙`` and
  ``Var_{c∼p}[(J u)_c] = 0``, so ``F_u ≡ 0`` — a flat gauge.
* A ReLU unit is invariant under ``(w_in, b_in, w_out) → (c·w_in, c·b_in, w_out/c)``, c > 0.
  The orbit is *curved*; its tangent at c = 1 is ``(w_in, b_in, −w_out)``. A straight probe
  along the normalised tangent scales the unit's contribution by
  ``(1 + t/ν)(1 − t/ν) = 1 − t²/ν²`` (ν the tangent's norm): the output changes at order t²
  and ``F_u = 4t²/ν⁴ · E‖w_out ReLU(w_inᵀx + b_in)‖²`` exactly — an apparent order 2 with no
  singularity present. The tangent is supplied as the cell's gauge generator so the read can
  class it as a curved gauge instead of k = 2.

Spec: ``dead_directions.md`` §1 (softmax Fisher kernel), §6.5, §9.1.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from neuromanifold.cells._cell import (
    CLASS_CURVED_GAUGE,
    CLASS_FLAT_GAUGE,
    Basis,
    Cell,
    basis_change,
    cell_constructor,
    generator,
    load,
    normalise,
    randn,
)
from neuromanifold.singular.family import Categorical, Gaussian

__all__ = ["ce_logit_shift", "relu_rescale"]


@cell_constructor
def ce_logit_shift(
    *, seed: int = 0, n: int = 128, d_in: int = 4, width: int = 5, classes: int = 4
) -> Cell:
    """``Linear → tanh → Linear`` classifier along ``Δbias = 𝟙/√C``: flat gauge (Categorical)."""
    gen = generator(seed)
    model = nn.Sequential(nn.Linear(d_in, width), nn.Tanh(), nn.Linear(width, classes))
    params = load(
        model,
        {
            "0.weight": randn(width, d_in, gen=gen) / math.sqrt(d_in),
            "0.bias": 0.3 * randn(width, gen=gen),
            "2.weight": 2.0 * randn(classes, width, gen=gen) / math.sqrt(width),
            "2.bias": 0.3 * randn(classes, gen=gen),
        },
    )
    u = {"2.bias": torch.full((classes,), 1.0 / math.sqrt(classes), dtype=torch.float64)}
    return Cell(
        name="ce_logit_shift",
        description=(
            "Softmax classifier, probe = the same shift of every class bias: softmax is "
            "unchanged at every t, Var_p of a constant tangent is 0, F_u ≡ 0 (flat gauge)."
        ),
        model=model,
        params=params,
        direction=u,
        data=randn(n, d_in, gen=gen),
        family=Categorical(),
        expected_k=None,
        expected_class=CLASS_FLAT_GAUGE,
        reference="dead_directions.md §1 (softmax), §6.1 (iii), §9.1 (CE logit shift)",
        meta={"classes": classes},
    )


@cell_constructor
def relu_rescale(
    *,
    seed: int = 0,
    n: int = 128,
    d_in: int = 3,
    width: int = 4,
    d_out: int = 2,
    unit: int = 0,
    basis: Basis = "canonical",
) -> Cell:
    """ReLU MLP probed straight along the rescaling tangent of one live unit: curved gauge.

    The unit's weights are random and non-zero, so it is live; the probe
    ``(ΔW₁[j], Δb₁[j], ΔW₂[:, j]) ∝ (W₁[j], b₁[j], −W₂[:, j])`` leaves the function unchanged to
    first order and changes it by ``−(t/ν)² W₂[:, j] ReLU(W₁[j]x + b₁[j])`` exactly for every t ≥ 0
    (``ReLU((1 + t/ν)z) = (1 + t/ν) ReLU(z)``).
    ``basis="permuted"`` permutes the hidden units (the unit's index is ``meta["unit"]``);
    rotations do not commute with ReLU and are refused.
    """
    if not 0 <= unit < width:
        raise ValueError(f"unit={unit!r}; expected an index in [0, {width})")
    if basis not in ("canonical", "permuted"):
        raise ValueError(f"basis={basis!r}; expected 'canonical' or 'permuted' for a ReLU layer")
    gen = generator(seed)
    model = nn.Sequential(nn.Linear(d_in, width), nn.ReLU(), nn.Linear(width, d_out))
    w1 = randn(width, d_in, gen=gen) / math.sqrt(d_in)
    b1 = 0.3 * randn(width, gen=gen)
    w2 = randn(d_out, width, gen=gen) / math.sqrt(width)
    b2 = 0.1 * randn(d_out, gen=gen)
    perm = basis_change(width, basis, gen=generator(seed + 7919))
    w1, b1, w2 = perm @ w1, perm @ b1, w2 @ perm.T
    unit = int(perm[:, unit].argmax())
    params = load(model, {"0.weight": w1, "0.bias": b1, "2.weight": w2, "2.bias": b2})
    dw1 = torch.zeros_like(w1)
    dw1[unit] = w1[unit]
    db1 = torch.zeros_like(b1)
    db1[unit] = b1[unit]
    dw2 = torch.zeros_like(w2)
    dw2[:, unit] = -w2[:, unit]
    tangent = normalise({"0.weight": dw1, "0.bias": db1, "2.weight": dw2})
    nu = math.sqrt(float(w1[unit].square().sum() + b1[unit].square() + w2[:, unit].square().sum()))
    return Cell(
        name="relu_rescale" + ("" if basis == "canonical" else f"_{basis}"),
        description=(
            "Live ReLU unit, straight probe along its rescaling tangent (w_in, b_in, −w_out): "
            "the contribution scales by 1 − t²/ν², F_u ∝ t² exactly — a curved-gauge mimic of "
            "k = 2; the tangent is supplied as gauge generator."
        ),
        model=model,
        params=params,
        direction=tangent,
        data=randn(n, d_in, gen=gen),
        family=Gaussian(sigma=1.0),
        expected_k=None,
        expected_class=CLASS_CURVED_GAUGE,
        gauge_generators=(tangent,),
        reference="dead_directions.md §6.5 (curved orbits), §9.1 (ReLU-rescale gauge)",
        meta={"unit": unit, "tangent_norm": nu, "basis": basis},
    )
