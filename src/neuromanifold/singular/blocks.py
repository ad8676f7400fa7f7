"""Supported blocks and their per-position layout.

A **supported block** is a ``nn.Linear``, or a ``nn.Conv1d`` / ``nn.Conv2d`` with ``groups == 1``
and symmetric zero padding (`conv_padding`): a map ``s = W̄ ā`` applied at every weight-sharing
position. The K-FAC/KFC factors (`neuromanifold.singular.factors`) and the linear detector work
on these. `patches` lays a block's input out as ``(B, P, d_in)`` per position (im2col for
convolutions, ``(C_in, k_h, k_w)`` row-major; the middle axes of a Linear's input),
`gradient_positions` the output-side gradients as ``(B, P, d_out)``.
"""

from __future__ import annotations

import math
from typing import Literal

from torch import Tensor, nn
from torch.nn import functional as F

__all__ = [
    "BlockKind",
    "block_kind",
    "conv_padding",
    "gradient_positions",
    "is_supported_block",
    "patches",
]

BlockKind = Literal["linear", "conv1d", "conv2d"]


def conv_padding(module: nn.Module) -> tuple[int, ...] | None:
    """The zero padding of a convolution per spatial axis, the same on both sides; ``None`` when
    it has none of that form (``padding_mode`` other than ``"zeros"``, or ``padding="same"``
    with an odd total ``dilation·(k − 1)``, which torch pads one more on the right).

    >>> conv_padding(nn.Conv2d(1, 1, (3, 5), padding="same")), conv_padding(nn.Conv1d(1, 1, 2))
    ((1, 2), (0,))
    >>> conv_padding(nn.Conv1d(1, 1, 2, padding="same")) is None
    True
    """
    if module.padding_mode != "zeros":
        return None
    if module.padding == "valid":
        return (0,) * len(module.kernel_size)
    if module.padding == "same":
        total = [d * (k - 1) for d, k in zip(module.dilation, module.kernel_size, strict=True)]
        return None if any(t % 2 for t in total) else tuple(t // 2 for t in total)
    return tuple(module.padding)


def is_supported_block(module: nn.Module) -> bool:
    """True for Linear, and Conv1d, Conv2d with ``groups == 1`` and symmetric zero padding
    (`conv_padding`: ints, ``"valid"``, or ``"same"`` with an even total padding)."""
    if type(module) is nn.Linear:
        return True
    if type(module) in (nn.Conv1d, nn.Conv2d):
        return module.groups == 1 and conv_padding(module) is not None
    return False


def block_kind(module: nn.Module) -> BlockKind:
    if isinstance(module, nn.Conv2d):
        return "conv2d"
    if isinstance(module, nn.Conv1d):
        return "conv1d"
    return "linear"


def patches(module: nn.Module, x: Tensor) -> Tensor:
    """Per-position block inputs ``(B, P, d_in)`` (no bias column).

    Linear: ``x`` of shape ``(B, ..., d_in)`` flattened to ``(B, P, d_in)``. Conv: im2col patches
    of shape ``(B, P, C_in·k_h·k_w)`` ordered ``(C_in, k_h, k_w)`` row-major, so that
    ``W.reshape(C_out, -1) @ patch`` is the cross-correlation output at that position.

    >>> import torch
    >>> conv = nn.Conv2d(2, 3, kernel_size=2, bias=False).double()
    >>> x = torch.randn(4, 2, 5, 5, dtype=torch.float64)
    >>> y = patches(conv, x) @ conv.weight.reshape(3, -1).T
    >>> bool(torch.allclose(y, conv(x).flatten(2).transpose(1, 2)))
    True
    """
    if isinstance(module, nn.Linear):  # positions named, not -1: d_in may be 0 (nn.Linear(0, k))
        return x.reshape(x.shape[0], math.prod(x.shape[1:-1]), x.shape[-1])
    if isinstance(module, nn.Conv1d):
        x4 = x.unsqueeze(-2)
        cols = F.unfold(
            x4,
            kernel_size=(1, module.kernel_size[0]),
            dilation=(1, module.dilation[0]),
            padding=(0, conv_padding(module)[0]),
            stride=(1, module.stride[0]),
        )
    else:
        cols = F.unfold(
            x,
            kernel_size=module.kernel_size,
            dilation=module.dilation,
            padding=conv_padding(module),
            stride=module.stride,
        )
    return cols.transpose(1, 2)


def gradient_positions(module: nn.Module, g: Tensor) -> Tensor:
    """Output-side gradients as ``(B, P, d_out)`` (conv: channels last)."""
    if isinstance(module, nn.Linear):
        return g.reshape(g.shape[0], math.prod(g.shape[1:-1]), g.shape[-1])
    return g.flatten(2).transpose(1, 2)
