"""Which steps of a float64 forward compute in a lower precision (s27 trial HF D3).

The read evaluates every model in float64 (parameters and floating inputs up-cast), but a model
can still take a step in float32 on its own: Hugging Face's eager attention in ViT and the
Llama family takes its softmax with ``dtype=torch.float32`` and casts back. What passes through
such a step carries float32 rounding (``≈ 6e-8`` relative), so a tangent ``J u`` that cancels
there leaves a residue near ``1e-16`` of ``F``'s scale instead of ``1e-32``, and the finite
orbit checks round at ``~1e-7``. `lower_precision_steps` runs one forward under a
``TorchFunctionMode`` and names every torch function that returned a floating tensor of a lower
precision; `lower_precision_note` says so in the reading.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode, resolve_name

__all__ = [
    "LOWER_PRECISION",
    "LowerPrecisionRecorder",
    "lower_precision_note",
    "lower_precision_steps",
]

NOTE_STEPS = 10
"""Steps the note names (all are in ``meta["lower_precision_steps"]``): a tiny Llama takes
about ten, its rotary tables, RMSNorms and softmax (at three, the softmax was among "7 more",
s27b audit RERUN #5)."""
LOWER_PRECISION = (torch.float32, torch.float16, torch.bfloat16)
"""Floating dtypes below float64 that a step of a float64 forward can return."""


def _tensors(out: Any) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


class LowerPrecisionRecorder(TorchFunctionMode):
    """Records ``{function name: dtype}`` for every call returning a lower-precision tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: dict[str, str] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in _tensors(out):
            if t.is_floating_point() and t.dtype in LOWER_PRECISION:
                name = resolve_name(func) or getattr(func, "__name__", repr(func))
                self.steps.setdefault(name, str(t.dtype).removeprefix("torch."))
        return out


def lower_precision_steps(model: nn.Module, x: Tensor) -> dict[str, str]:
    """``{torch function: dtype}`` of the steps of ``model(x)`` (no gradients) that returned a
    floating tensor below float64, in call order; ``{}`` for a forward that stays in float64.

    >>> class Half(nn.Module):
    ...     def forward(self, x):
    ...         return torch.softmax(x, -1, dtype=torch.float32).double()
    >>> lower_precision_steps(Half(), torch.zeros(2, 3, dtype=torch.float64))
    {'torch.softmax': 'float32'}
    """
    rec = LowerPrecisionRecorder()
    with torch.no_grad(), rec:
        model(x)
    return rec.steps


def lower_precision_note(steps: dict[str, str]) -> str:
    """The reading's clause for `lower_precision_steps`'s result (``""`` when empty)."""
    if not steps:
        return ""
    named = ", ".join(f"{k} → {v}" for k, v in list(steps.items())[:NOTE_STEPS])
    more = f" and {len(steps) - NOTE_STEPS} more" if len(steps) > NOTE_STEPS else ""
    return (
        f"the model computes part of its forward below float64 ({named}{more}), whatever the "
        "read's float64: values through those steps carry that precision's rounding (float32: "
        "~6e-8 relative), so F along a direction that cancels there sits near 1e-16 of its "
        "scale rather than 1e-32, and a flat direction through them can read unresolved"
    )
