"""Node-death cells of dense layers: ``a·σ(b x)``, squared ReLU, SwiGLU, a unit inside an MLP.

A unit whose input weights b and output weights a both vanish is dead. Along the diagonal
probe ``(a, b) = t·(g, v)/√2`` its output is ``(t/√2) g·σ((t/√2) vᵀx)``; with σ of leading
order p at 0 (``σ(z) ≈ c z^p``) this is ``Θ(t^{1+p})``, the KL order is ``k = 1 + p`` and the
directional Fisher decays as ``t^{2p}``. ReLU, GELU, tanh, SiLU have p = 1 (k = 2), squared
ReLU p = 2 (k = 3); a SwiGLU dead dimension carries a third factor (k = 3).

Spec: ``dead_directions.md`` §5 (node death p, k = 1 + p), §6.6, §8, §9.1.
"""

from __future__ import annotations

import math
from typing import Literal

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
    random_orthogonal,
    second_moment,
    symmetric_normal,
    top_eigenvector,
    unit_vector,
)
from neuromanifold.singular.family import Gaussian

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "SquaredReLU",
    "SwiGLU",
    "mlp_node_death",
    "node_death",
    "node_death_offset",
    "relu_chain",
    "swiglu_dead_dimension",
]

Activation = Literal["relu", "gelu", "tanh", "silu", "relu2"]


class SquaredReLU(nn.Module):
    """``σ(z) = ReLU(z)²`` (leading order p = 2 at 0)."""

    def forward(self, z: Tensor) -> Tensor:
        """Elementwise ``max(z, 0)²``."""
        return torch.relu(z) ** 2


#: Activation name → (module factory, leading order p at 0). Each has σ(0) = 0.
ACTIVATIONS: dict[str, tuple[type[nn.Module], int]] = {
    "relu": (nn.ReLU, 1),
    "gelu": (nn.GELU, 1),
    "tanh": (nn.Tanh, 1),
    "silu": (nn.SiLU, 1),
    "relu2": (SquaredReLU, 2),
}


def _activation(name: str) -> tuple[nn.Module, int]:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation={name!r}; expected one of {sorted(ACTIVATIONS)}")
    factory, p = ACTIVATIONS[name]
    return factory(), p


def _scalar_unit(act: str) -> tuple[nn.Sequential, int]:
    module, p = _activation(act)
    model = nn.Sequential(nn.Linear(1, 1, bias=False), module, nn.Linear(1, 1, bias=False))
    return model, p


_DIAGONAL = {"0.weight": torch.ones(1, 1), "2.weight": torch.ones(1, 1)}


@cell_constructor
def node_death(*, activation: Activation = "relu", seed: int = 0, n: int = 128) -> Cell:
    """One hidden unit ``y = a·σ(b x)`` at a = b = 0, probed along ``(a, b) = (1, 1)/√2``.

    Along the probe ``y(t) = (t/√2)·σ(t x/√2)``. For σ with ``σ(z) = c z^p + …`` this is
    ``c t^{1+p} x^p / 2^{(1+p)/2} + …``: KL order ``k = 1 + p``; ReLU/GELU/tanh/SiLU give k = 2,
    squared ReLU gives k = 3. The probe inputs are symmetric (x and −x both present), which is
    the spec's ReLU condition and cancels the odd-moment O(t) corrections of GELU and SiLU.
    Parameters: ``0.weight`` = b, ``2.weight`` = a.

    >>> node_death(activation="relu2").expected_k
    3
    """
    model, p = _scalar_unit(activation)
    gen = generator(seed)
    params = load(model, {k: torch.zeros(1, 1, dtype=torch.float64) for k in _DIAGONAL})
    u = {k: v.to(torch.float64) / math.sqrt(2.0) for k, v in _DIAGONAL.items()}
    k_exp = 1 + p
    name = "node_death_relu2" if activation == "relu2" else f"node_death_{activation}"
    return Cell(
        name=name,
        description=(
            f"y = a·{activation}(b x) at a = b = 0 along (1, 1)/√2: the output is "
            f"Θ(t^{k_exp}) along the probe (leading order p = {p} of the activation), "
            f"so k = 1 + p = {k_exp}."
        ),
        model=model,
        params=params,
        direction=u,
        data=symmetric_normal(n, 1, gen=gen),
        family=Gaussian(sigma=1.0),
        expected_k=k_exp,
        expected_class=CLASS_GENUINE,
        reference="dead_directions.md §8 (one hidden node), §9.1 (node death rows)",
        meta={"activation": activation, "p": p},
    )


@cell_constructor
def node_death_offset(
    *, activation: Activation = "tanh", offset: float = 1e-3, seed: int = 0, n: int = 128
) -> Cell:
    """The node-death cell with its dead weights at ``a = b = δ`` instead of 0 (``snap=True``).

    The base point is ``θ₀ = δ_off·u`` with ``δ_off = √2·δ = uᵀθ₀`` (u = (1, 1)/√2), so the
    snapped base point ``θ₀ − (uᵀθ₀)u`` is exactly the dead point and the snapped read is the
    node-death read: k = 1 + p. Unsnapped, the sweep runs along ``θ(s) = s·u`` with
    ``s = t + δ_off``, so ``F_u(t) = F_dead(t + δ_off)``: flat (slope 0, an apparent live
    reading) for ``t ≪ δ_off`` and slope ``2(k − 1)`` only for ``t ≫ δ_off``. The default
    grid ends at ``ρ_W = δ < δ_off`` (the RMS of the dead weights themselves), so an unsnapped
    read on it sees the flat part alone; the slope shows on a grid reaching ``t ≫ δ_off``
    (s26 audit CELLS #6). The offset ``δ_off`` is stored in ``meta["offset"]``.
    """
    if not (isinstance(offset, float | int) and 0 < offset < 1):
        raise ValueError(f"offset={offset!r}; expected a float in (0, 1)")
    base = node_death(activation=activation, seed=seed, n=n)
    model, _ = _scalar_unit(activation)
    params = load(
        model, {k: torch.full((1, 1), float(offset), dtype=torch.float64) for k in _DIAGONAL}
    )
    delta_off = math.sqrt(2.0) * float(offset)
    return Cell(
        name=f"node_death_offset_{activation}",
        description=(
            f"{activation} node death with dead weights a = b = {offset:g} (δ_off = uᵀθ₀ = "
            f"{delta_off:.3g}). Snapped read: k = {base.expected_k}. Unsnapped: F_u(t) = "
            f"F_dead(t + δ_off), slope 0 below δ_off and 2(k − 1) above it (beyond the "
            f"default grid, which ends at ρ_W = {offset:g})."
        ),
        model=model,
        params=params,
        direction=base.direction,
        data=base.data,
        family=base.family,
        expected_k=base.expected_k,
        expected_class=CLASS_GENUINE,
        snap=True,
        reference="dead_directions.md §7.2 step 3 (base point, snap), §9.1 (offset robustness)",
        meta={"activation": activation, "offset": delta_off, "dead_weight": float(offset)},
    )


@cell_constructor
def relu_chain(*, depth: int, seed: int = 0, n: int = 128) -> Cell:
    """Width-one ReLU chain ``y = w_L ReLU(w_{L−1} ⋯ ReLU(w_1 x))`` at w = 0 along ``𝟙/√L``.

    ReLU is positively homogeneous (class P3), so along the probe (s = t/√L > 0) every layer
    multiplies by s exactly: ``y(t) = s^L ReLU(x)``. The order is the depth, k = L, as for the
    linear chain. Parameters ``{2i}.weight`` (i = 0..L−1); symmetric probe inputs.

    >>> relu_chain(depth=3).expected_k
    3
    """
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
        raise ValueError(f"depth={depth!r}; expected an integer >= 2")
    gen = generator(seed)
    layers: list[nn.Module] = []
    for i in range(depth):
        layers.append(nn.Linear(1, 1, bias=False))
        if i < depth - 1:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    keys = [f"{2 * i}.weight" for i in range(depth)]
    params = load(model, {k: torch.zeros(1, 1, dtype=torch.float64) for k in keys})
    u = {k: torch.full((1, 1), 1.0 / math.sqrt(depth), dtype=torch.float64) for k in keys}
    return Cell(
        name=f"relu_chain_L{depth}",
        description=(
            f"Width-one ReLU chain of depth {depth} at w = 0 along 𝟙/√L: positive homogeneity "
            f"gives y = (t/√L)^L ReLU(x) exactly, k = L = {depth}."
        ),
        model=model,
        params=params,
        direction=u,
        data=symmetric_normal(n, 1, gen=gen),
        family=Gaussian(sigma=1.0),
        expected_k=depth,
        expected_class=CLASS_GENUINE,
        reference="dead_directions.md §6.6 (ReLU chain: t^L·ReLU(x) exactly)",
        meta={"depth": depth},
    )


class SwiGLU(nn.Module):
    """SwiGLU feed-forward ``y = W₂ (SiLU(W₁ x) ⊙ W₃ x)`` without biases.

    Parameters ``w1.weight``, ``w3.weight`` of shape ``(h, d)`` and ``w2.weight`` of ``(d_out, h)``.
    """

    def __init__(self, d: int, h: int, d_out: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d, h, bias=False)
        self.w3 = nn.Linear(d, h, bias=False)
        self.w2 = nn.Linear(h, d_out, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """``W₂ (SiLU(W₁ x) ⊙ W₃ x)``, shape ``(N, d_out)``."""
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


@cell_constructor
def swiglu_dead_dimension(
    *, d: int = 3, seed: int = 0, n: int = 128, basis: Basis = "canonical"
) -> Cell:
    """SwiGLU at the canonical diagonal init ``W₁ = W₃ = W₂ = I`` with dimension j = d − 1 dead.

    The dead dimension has row j of W₁ and W₃ and column j of W₂ zero; the probe moves the three
    diagonal entries together, ``u = (e_j e_jᵀ, e_j e_jᵀ, e_j e_jᵀ)/√3``. Along it the output's
    j-th coordinate is ``s·SiLU(s x_j)·s x_j = s³ x_j² σ(s x_j) = ½ s³ x_j² + O(s⁴)`` with
    ``s = t/√3``: moment rate 6, KL order k = 3. ``basis="permuted"`` permutes the hidden units
    (a symmetry: the read is unchanged); rotations are not a symmetry of the gate and are refused.
    """
    if basis not in ("canonical", "permuted"):
        raise ValueError(f"basis={basis!r}; expected 'canonical' or 'permuted' for a SwiGLU cell")
    if d < 2:
        raise ValueError(f"d={d!r}; expected d >= 2 (one live and one dead dimension)")
    gen = generator(seed)
    j = d - 1
    live = torch.eye(d, dtype=torch.float64)
    live[j, j] = 0.0
    dead = torch.zeros(d, d, dtype=torch.float64)
    dead[j, j] = 1.0 / math.sqrt(3.0)
    # hidden units: rows of W1, W3; columns of W2 (own stream: every basis shares the data)
    perm = basis_change(d, basis, gen=generator(seed + 7919))
    model = SwiGLU(d, d, d)
    params = load(
        model, {"w1.weight": perm @ live, "w3.weight": perm @ live, "w2.weight": live @ perm.T}
    )
    u = {"w1.weight": perm @ dead, "w3.weight": perm @ dead, "w2.weight": dead @ perm.T}
    return Cell(
        name="swiglu_dead_dimension" + ("" if basis == "canonical" else f"_{basis}"),
        description=(
            "SwiGLU W₂(SiLU(W₁x) ⊙ W₃x) at the diagonal init with one dead dimension, probed "
            "along its three diagonal entries: output s³x²σ(sx) = ½s³x² + O(s⁴), k = 3."
        ),
        model=model,
        params=params,
        direction=u,
        data=symmetric_normal(n, d, gen=gen),
        family=Gaussian(sigma=1.0),
        expected_k=3,
        expected_class=CLASS_GENUINE,
        reference="dead_directions.md §6.6 (SwiGLU dead dimension), §9.1",
        meta={"d": d, "dead_dim": j, "basis": basis},
    )


@cell_constructor
def mlp_node_death(
    *,
    activation: Activation = "gelu",
    seed: int = 0,
    n: int = 128,
    d_in: int = 3,
    width: int = 6,
    d_out: int = 2,
    basis: Basis = "canonical",
) -> Cell:
    """A dead unit inside ``Linear(d_in, h) → σ → Linear(h, d_out) → Linear(d_out, d_out)``.

    The h − 1 live units have random weights and biases; the last linear layer is a random
    orthogonal *live mixing* layer. Unit j = h − 1 is dead: row j of the first weight, its bias
    and column j of the second weight are zero. The probe is the detector's joint mode lifted to
    both sides of the unit: ``ΔW₁[j] = v``, ``ΔW₂[:, j] = g``, over √2. On the first layer the
    dead unit spans the kernel of G₁ and A₁ = E[x̄x̄ᵀ] has none, so the one-sided mode pairs it
    with the top input direction v (top eigenvector of E[xxᵀ]); on the second layer the dead
    unit spans the kernel of A₂ and G₂ = MᵀM/σ² = I is isotropic, so g is a random unit vector.
    Along it the mixed output changes by ``M g·(t/√2) σ((t/√2) vᵀx) = Θ(t²)``: k = 2; the live
    units and the mixing layer change the constant, not the exponent.

    ``basis`` presents the same function in other coordinates: ``"permuted"`` permutes the hidden
    units, ``"rotated"`` rotates the input space (weights by Rᵀ, data by R) and the output space
    (mixing layer by an orthogonal Q; the Gaussian Fisher is invariant under it). Both are exact
    symmetries of the Fisher, so every basis reads the same.
    """
    if width < 2:
        raise ValueError(f"width={width!r}; expected at least 2 hidden units (live and dead)")
    act, p = _activation(activation)
    gen = generator(seed)
    j = width - 1
    w1 = randn(width, d_in, gen=gen) / math.sqrt(d_in)
    b1 = 0.5 * randn(width, gen=gen)
    w2 = randn(d_out, width, gen=gen) / math.sqrt(width)
    b2 = 0.1 * randn(d_out, gen=gen)
    w1[j] = 0.0
    b1[j] = 0.0
    w2[:, j] = 0.0
    mix = random_orthogonal(d_out, gen=gen)
    x = symmetric_normal(n, d_in, gen=gen)
    v = top_eigenvector(second_moment(x))
    g = unit_vector(d_out, gen=gen)
    dw1 = torch.zeros(width, d_in, dtype=torch.float64)
    dw1[j] = v / math.sqrt(2.0)
    dw2 = torch.zeros(d_out, width, dtype=torch.float64)
    dw2[:, j] = g / math.sqrt(2.0)
    # Presentation of the same function (separate stream so every basis shares the base cell).
    sgen = generator(seed + 7919)
    hid = (
        basis_change(width, "permuted", gen=sgen)
        if basis == "permuted"
        else torch.eye(width, dtype=torch.float64)
    )
    if basis == "rotated":
        r_in = random_orthogonal(d_in, gen=sgen)
        q_out = random_orthogonal(d_out, gen=sgen)
    elif basis in ("canonical", "permuted"):
        r_in = torch.eye(d_in, dtype=torch.float64)
        q_out = torch.eye(d_out, dtype=torch.float64)
    else:
        raise ValueError(f"basis={basis!r}; expected 'canonical', 'rotated' or 'permuted'")
    model = nn.Sequential(
        nn.Linear(d_in, width), act, nn.Linear(width, d_out), nn.Linear(d_out, d_out, bias=False)
    )
    params = load(
        model,
        {
            "0.weight": hid @ w1 @ r_in.T,
            "0.bias": hid @ b1,
            "2.weight": w2 @ hid.T,
            "2.bias": b2,
            "3.weight": q_out @ mix,
        },
    )
    u = {"0.weight": hid @ dw1 @ r_in.T, "2.weight": dw2 @ hid.T}
    suffix = "" if basis == "canonical" else f"_{basis}"
    return Cell(
        name=f"mlp_node_death_{activation}{suffix}",
        description=(
            f"Dead {activation} unit among {width - 1} live units of an MLP followed by a random "
            f"orthogonal mixing layer; probe = joint mode (v on the input side, g on the output "
            f"side)/√2. Output change Θ(t^{1 + p}): k = {1 + p}."
        ),
        model=model,
        params=params,
        direction=u,
        data=x @ r_in.T,
        family=Gaussian(sigma=1.0),
        expected_k=1 + p,
        expected_class=CLASS_GENUINE,
        reference="dead_directions.md §6.1 (live mixing), §9.1 (live mixing row)",
        meta={
            "activation": activation,
            "width": width,
            "dead_unit": int(hid[:, j].argmax()),
            "basis": basis,
        },
    )
