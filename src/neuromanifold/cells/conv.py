"""Convolutional cells: a dead channel (node death) and a linear conv chain with a dead path.

Patch layout (spec conventions): a filter increment for output channel o is a patch vector
ordered ``(C_in, k_h, k_w)`` row-major, so the joint mode ``ΔW = g aᵀ`` reshapes to the weight's
``(C_out, C_in, k…)`` shape. Cross-correlation (torch's convention), no kernel flip.

* ``conv_node_death``: ``Conv(C_in → C_h, k) → σ → Conv(C_h → C_out, 1) → flatten`` with channel
  j = C_h − 1 dead (zero filter, bias and outgoing column). Probe: the dead channel's filter along
  the top patch direction a (top eigenvector of the input patch moment Ω: the channel spans the
  kernel of Γ₁, Ω₁ has none, so the one-sided mode pairs it with the top a) and its outgoing
  1×1 weights along a unit g (Γ₂ of the flattened Gaussian output is isotropic), over √2.
  The output changes by ``g (t/√2) σ((t/√2) a ⋆ x)`` at every position: ``Θ(t^{1+p})``,
  k = 1 + p (2 for tanh).
* ``conv_chain``: L linear conv layers (kernel 3, "same" zero padding, no bias) with a dead path
  through channel j of every hidden layer; the probe is the per-layer joint modes
  (first layer: the top patch direction a of the input, with padding; hidden layers: a random
  unit filter f_ℓ on channel j → j, any vector of the dead channel's k-dimensional patch kernel;
  last layer: g ⊗ (e_j ⊗ f_L) with a random unit g), over √L. Along it the output gains
  ``(t/√L)^L g·(f_L ⋆ ⋯ ⋆ f_2 ⋆ (a ⋆ x))``: k = L. Hidden channels may be rotated or permuted
  (``W_ℓ[o, i] → Σ Q_ℓ[o, o'] W_ℓ[o', i'] Q_{ℓ−1}[i, i']``), which the linear chain cannot see.

Spec: ``dead_directions.md`` conventions, §6.3 (KFC patch factors), §9.1 (convolution row).
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
    normalise,
    randn,
    second_moment,
    symmetric_normal,
    top_eigenvector,
    unit_vector,
)
from neuromanifold.cells.dense import Activation, _activation
from neuromanifold.singular.family import Gaussian

__all__ = ["conv_chain", "conv_node_death", "patch_top_direction"]

Dim = Literal[1, 2]


def _conv(dim: int) -> type[nn.Module]:
    if dim == 1:
        return nn.Conv1d
    if dim == 2:
        return nn.Conv2d
    raise ValueError(f"dim={dim!r}; expected 1 (Conv1d) or 2 (Conv2d)")


@cell_constructor
def conv_node_death(
    *,
    dim: Dim = 1,
    activation: Activation = "tanh",
    seed: int = 0,
    n: int = 64,
    c_in: int = 2,
    c_hidden: int = 3,
    c_out: int = 2,
    size: int = 6,
    kernel: int = 3,
) -> Cell:
    """A dead channel of a ``dim``-D conv layer probed along its patch joint mode (module doc)."""
    conv = _conv(dim)
    act, p = _activation(activation)
    gen = generator(seed)
    ks = (kernel,) * dim
    j = c_hidden - 1
    model = nn.Sequential(conv(c_in, c_hidden, kernel), act, conv(c_hidden, c_out, 1), nn.Flatten())
    w1 = randn(c_hidden, c_in, *ks, gen=gen) / math.sqrt(c_in * kernel**dim)
    b1 = 0.3 * randn(c_hidden, gen=gen)
    w2 = randn(c_out, c_hidden, *(1,) * dim, gen=gen) / math.sqrt(c_hidden)
    w1[j] = 0.0
    b1[j] = 0.0
    w2[:, j] = 0.0
    params = load(
        model, {"0.weight": w1, "0.bias": b1, "2.weight": w2, "2.bias": 0.1 * randn(c_out, gen=gen)}
    )
    x = symmetric_normal(n, c_in, *(size,) * dim, gen=gen)
    a = patch_top_direction(x, kernel)
    g = unit_vector(c_out, gen=gen)
    dw1 = torch.zeros_like(w1)
    dw1[j] = a
    dw2 = torch.zeros_like(w2)
    dw2[:, j] = g.reshape(c_out, *(1,) * dim)
    u = normalise({"0.weight": dw1, "2.weight": dw2})
    return Cell(
        name=f"conv{dim}d_node_death",
        description=(
            f"Conv{dim}d layer with a dead {activation} channel; probe = its patch joint mode "
            f"(filter a, outgoing g)/√2: output change Θ(t^{1 + p}), k = {1 + p}."
        ),
        model=model,
        params=params,
        direction=u,
        data=x,
        family=Gaussian(sigma=1.0),
        expected_k=1 + p,
        expected_class=CLASS_GENUINE,
        reference="dead_directions.md §6.3 (KFC patch joint mode), §9.1 (convolution row)",
        meta={"dim": dim, "activation": activation, "dead_channel": j},
    )


def patch_top_direction(x: Tensor, kernel: int, *, padding: int = 0) -> Tensor:
    """Top eigenvector of the patch second moment ``Ω = E_i[(1/|P|) Σ_p a_{i,p} a_{i,p}ᵀ]``.

    Patches are im2col columns of ``x`` (``(N, C, L)`` or ``(N, C, H, W)``) ordered
    ``(C, k…)`` row-major, without a bias coordinate; the result has shape ``(C, k…)``.
    """
    dim = x.ndim - 2
    x4 = x.unsqueeze(-2) if dim == 1 else x
    ks = (1, kernel) if dim == 1 else (kernel, kernel)
    pad = (0, padding) if dim == 1 else (padding, padding)
    cols = torch.nn.functional.unfold(x4, kernel_size=ks, padding=pad)  # (N, C·k…, P)
    rows = cols.transpose(1, 2).reshape(-1, cols.shape[1])
    return top_eigenvector(second_moment(rows)).reshape(x.shape[1], *(kernel,) * dim)


def _mix_channels(w: Tensor, q_out: Tensor, q_in: Tensor) -> Tensor:
    """``W[o, i, …] → Σ q_out[o, o'] W[o', i', …] q_in[i, i']``."""
    return torch.einsum("ab,bc...,dc->ad...", q_out, w, q_in)


@cell_constructor
def conv_chain(
    *,
    depth: int = 3,
    dim: Dim = 1,
    seed: int = 0,
    n: int = 32,
    c_in: int = 2,
    channels: int = 3,
    c_out: int = 2,
    size: int = 8,
    kernel: int = 3,
    basis: Basis = "canonical",
) -> Cell:
    """Linear conv chain with a dead channel path, probed along its joint modes: k = depth."""
    if not isinstance(depth, int) or depth < 2:
        raise ValueError(f"depth={depth!r}; expected an integer >= 2")
    conv = _conv(dim)
    gen = generator(seed)
    ks = (kernel,) * dim
    j = channels - 1
    chans = [c_in] + [channels] * (depth - 1) + [c_out]
    layers: list[nn.Module] = [
        conv(chans[i], chans[i + 1], kernel, padding=kernel // 2, bias=False) for i in range(depth)
    ]
    model = nn.Sequential(*layers, nn.Flatten())
    x = randn(n, c_in, *(size,) * dim, gen=gen)
    live: list[Tensor] = []
    path: list[Tensor] = []
    for i in range(depth):
        w = randn(chans[i + 1], chans[i], *ks, gen=gen) / math.sqrt(chans[i] * kernel**dim)
        if i > 0:
            w[:, j] = 0.0
        if i < depth - 1:
            w[j] = 0.0
        live.append(w)
        m = torch.zeros_like(w)
        if i == 0:
            m[j] = patch_top_direction(x, kernel, padding=kernel // 2)
        else:
            f = unit_vector(kernel**dim, gen=gen).reshape(*ks)
            g = (
                unit_vector(c_out, gen=gen)
                if i == depth - 1
                else torch.zeros(channels, dtype=torch.float64)
            )
            if i < depth - 1:
                g[j] = 1.0
            m[:, j] = torch.einsum("o,...->o...", g, f)
        path.append(m)
    bgen = generator(seed + 104729)
    qs = [torch.eye(c_in, dtype=torch.float64)]
    qs += [basis_change(channels, basis, gen=bgen) for _ in range(depth - 1)]
    qs += [torch.eye(c_out, dtype=torch.float64)]
    params = load(
        model, {f"{i}.weight": _mix_channels(live[i], qs[i + 1], qs[i]) for i in range(depth)}
    )
    scale = 1.0 / math.sqrt(depth)
    u = {f"{i}.weight": scale * _mix_channels(path[i], qs[i + 1], qs[i]) for i in range(depth)}
    components = {
        f"layer{i + 1}": {f"{i}.weight": _mix_channels(path[i], qs[i + 1], qs[i])}
        for i in range(depth)
    }
    suffix = "" if basis == "canonical" else f"_{basis}"
    return Cell(
        name=f"conv{dim}d_chain_L{depth}{suffix}",
        description=(
            f"Depth-{depth} linear Conv{dim}d chain with a dead channel path ({basis} hidden "
            f"channels); probe = per-layer patch joint modes over √L: output change "
            f"(t/√L)^L g·(composed filters ⋆ x), k = {depth}."
        ),
        model=model,
        params=params,
        direction=u,
        data=x,
        family=Gaussian(sigma=1.0),
        expected_k=depth,
        expected_class=CLASS_GENUINE,
        reference="dead_directions.md §6.3, §9.1 (convolution: rotated chain)",
        components=components,
        meta={"depth": depth, "dim": dim, "basis": basis},
    )
