"""Grouped convolutions as independent per-group blocks.

A ``nn.Conv1d``/``nn.Conv2d`` with ``groups = G > 1`` (depthwise when ``G = C_in``: MobileNet,
EfficientNet, ConvNeXt, the causal convolution of Mamba) is ``G`` convolutions side by side: group
``g`` maps input channels ``[g·c_in, (g+1)·c_in)`` to output channels ``[g·c_out, (g+1)·c_out)``
(``c_in = C_in/G``, ``c_out = C_out/G``) with the weight rows ``W[g·c_out:(g+1)·c_out]`` of shape
``(c_out, c_in, k…)`` and the matching bias entries. The parameters of different groups never meet
inside the layer, so the layer's Fisher block is approximated by the block-diagonal K-FAC
``⊕_g A_g ⊗ G_g`` ([design]): each group is a block of its own, keyed ``"name[g]"``
(`group_key`), with the factors of a plain convolution on its channel slices.

`group_views` builds, for every group, a plain convolution (``groups = 1``) whose weight and bias
are views of the group's rows of the grouped module: the factor pass and the K-FAC detector run
on it unchanged; `embed_group_direction` writes a direction of a view back into the full-shape
tensors of the grouped module (zero outside the group's rows).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from neuromanifold.singular.blocks import conv_padding

__all__ = [
    "embed_group_direction",
    "group_key",
    "group_views",
    "is_grouped_conv",
]


def is_grouped_conv(module: nn.Module) -> bool:
    """True for a ``nn.Conv1d``/``nn.Conv2d`` with ``groups > 1`` and symmetric zero padding
    (`neuromanifold.singular.blocks.conv_padding`)."""
    return (
        type(module) in (nn.Conv1d, nn.Conv2d)
        and module.groups > 1
        and conv_padding(module) is not None
    )


def group_key(name: str, g: int) -> str:
    """Block key of group ``g`` of module ``name``: ``"name[g]"``.

    >>> group_key("features.3.dw", 7)
    'features.3.dw[7]'
    """
    return f"{name}[{g}]"


def group_slices(module: nn.Module, g: int) -> tuple[slice, slice]:
    """``(input channels, output channels)`` of group ``g``."""
    c_in, c_out = module.in_channels // module.groups, module.out_channels // module.groups
    return slice(g * c_in, (g + 1) * c_in), slice(g * c_out, (g + 1) * c_out)


def group_views(module: nn.Module) -> list[nn.Module]:
    """One plain convolution per group (same kernel, stride, padding, dilation; ``groups = 1``)
    whose ``weight``/``bias`` are views of the group's rows of ``module`` (no copy, no grad).

    >>> dw = nn.Conv2d(3, 6, 3, groups=3, padding=1).double()
    >>> x = torch.randn(2, 3, 5, 5, dtype=torch.float64)
    >>> views = group_views(dw)
    >>> y = torch.cat([v(x[:, g : g + 1]) for g, v in enumerate(views)], 1)
    >>> bool(torch.equal(y, dw(x)))
    True
    """
    if not is_grouped_conv(module):
        raise ValueError(f"expected a grouped Conv1d/Conv2d; got {type(module).__name__}")
    w = module.weight.detach()
    b = module.bias.detach() if module.bias is not None else None
    views = []
    for g in range(module.groups):
        _, rows = group_slices(module, g)
        view = type(module)(
            module.in_channels // module.groups,
            module.out_channels // module.groups,
            module.kernel_size,
            stride=module.stride,
            padding=conv_padding(module),
            dilation=module.dilation,
            bias=b is not None,
            device="meta",
        )
        view.weight = nn.Parameter(w[rows], requires_grad=False)
        if b is not None:
            view.bias = nn.Parameter(b[rows], requires_grad=False)
        views.append(view)
    return views


def embed_group_direction(
    name: str, module: nn.Module, g: int, u: Mapping[str, Tensor]
) -> dict[str, Tensor]:
    """A direction of group ``g``'s view (keys ``"name[g].weight"``/``".bias"``) as full-shape
    tensors of ``module`` (keys ``"name.weight"``/``".bias"``), zero outside the group's rows.

    >>> dw = nn.Conv1d(2, 2, 3, groups=2)
    >>> u = {"c[1].weight": torch.ones(1, 1, 3)}
    >>> embed_group_direction("c", dw, 1, u)["c.weight"][:, 0].tolist()
    [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    """
    prefix, key = (f"{name}." if name else ""), group_key(name, g)
    _, rows = group_slices(module, g)
    out: dict[str, Tensor] = {}
    for part in ("weight", "bias"):
        v = u.get(f"{key}.{part}")
        if v is None:
            continue
        full = torch.zeros(getattr(module, part).shape, dtype=v.dtype, device=v.device)
        full[rows] = v
        out[f"{prefix}{part}"] = full
    return out
