"""GELU and SiLU tangents that share the primal derivative across ``vmap`` lanes.

Several directions at one point run as ``vmap`` lanes over the tangents with the primal
un-batched (`neuromanifold.singular.fisher.fisher_prepared`). Torch's forward-mode formula for an
elementwise activation ``y = f(x)`` is its fused backward kernel (``gelu_backward(ẋ, x)``,
``silu_backward(ẋ, x)``), and that kernel's batching rule broadcasts ``x`` to every lane, so the
derivative ``f'(x)`` — an ``erf``, ``tanh`` or ``exp`` per element — is recomputed ``L`` times.
Here the tangent is ``ẏ = f'(x) ⊙ ẋ`` with ``f'(x)`` formed once from the primal and one multiply
per lane:

* GELU, exact: ``f'(x) = Φ(x) + x φ(x)``, ``Φ(x) = ½(1 + erf(x/√2))``, ``φ(x) = e^{−x²/2}/√(2π)``;
* GELU, tanh form: with ``c = √(2/π)``, ``a = 0.044715``, ``τ = tanh(c(x + a x³))``:
  ``f'(x) = ½(1 + τ) + ½ x (1 − τ²) c (1 + 3a x²)``;
* SiLU: ``f'(x) = σ(x)(1 + x(1 − σ(x)))``.

These are the formulas of torch's CPU kernels, so tangents agree with torch's to rounding; the
forward values are torch's own (``F.gelu``, ``F.silu``). Zoo ViT (dim 32, depth 2, GELU MLPs),
16 directions on 16 samples, one thread: the batched call took 0.121 s instead of 0.157 s (the
GELU tangents had been about a fifth of it).

`lane_activations` applies this to a model's ``nn.GELU`` and ``nn.SiLU`` modules by giving each
an instance ``forward`` for the duration of the context (removed on exit, also on an error).
Left as they are: in-place SiLU, subclasses that override ``forward``, modules that already carry
an instance ``forward``, and activations called as functions (``F.gelu`` inside another module's
``forward``), which keep torch's formula — slower under many lanes, never different in value.
The context changes the caller's module objects while it is open; another thread calling the
same model meanwhile gets the same values through this path.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["gelu_derivative", "lane_activations", "silu_derivative"]

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715


def gelu_derivative(x: Tensor, approximate: str = "none") -> Tensor:
    """``d/dx GELU(x)`` elementwise (same shape as ``x``), exact or tanh form (module docstring).

    >>> gelu_derivative(torch.tensor([0.0], dtype=torch.float64)).item()
    0.5
    """
    if approximate == "tanh":
        inner = _SQRT_2_OVER_PI * (x + _TANH_CUBIC * x * x * x)
        tau = torch.tanh(inner)
        slope = _SQRT_2_OVER_PI * (1.0 + 3.0 * _TANH_CUBIC * x * x)
        return 0.5 * (1.0 + tau) + 0.5 * x * (1.0 - tau * tau) * slope
    cdf = 0.5 * (1.0 + torch.erf(x * _SQRT_HALF))
    pdf = torch.exp(-0.5 * x * x) * _INV_SQRT_2PI
    return cdf + x * pdf


def silu_derivative(x: Tensor) -> Tensor:
    """``d/dx SiLU(x) = σ(x)(1 + x(1 − σ(x)))`` elementwise (same shape as ``x``).

    >>> silu_derivative(torch.tensor([0.0], dtype=torch.float64)).item()
    0.5
    """
    sig = torch.sigmoid(x)
    return sig * (1.0 + x * (1.0 - sig))


def _shared_tangent(
    name: str, value: Callable[[Tensor], Tensor], slope: Callable[[Tensor], Tensor]
) -> type[torch.autograd.Function]:
    """An autograd Function ``x ↦ value(x)`` whose tangent and gradient are ``slope(x) ⊙ ·``."""

    def forward(x: Tensor) -> Tensor:
        return value(x)

    def setup_context(ctx, inputs, output) -> None:
        (x,) = inputs
        ctx.save_for_forward(x)
        ctx.save_for_backward(x)

    def jvp(ctx, x_dot: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return slope(x) * x_dot

    def backward(ctx, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return slope(x) * grad

    namespace = {
        "generate_vmap_rule": True,
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "jvp": staticmethod(jvp),
        "backward": staticmethod(backward),
    }
    return type(name, (torch.autograd.Function,), namespace)


_GELU = {
    mode: _shared_tangent(
        f"SharedTangentGELU_{mode}",
        lambda x, mode=mode: F.gelu(x, approximate=mode),
        lambda x, mode=mode: gelu_derivative(x, mode),
    )
    for mode in ("none", "tanh")
}
_SILU = _shared_tangent("SharedTangentSiLU", F.silu, silu_derivative)


def _replacement(module: nn.Module) -> Callable[[Tensor], Tensor] | None:
    """The shared-tangent forward for ``module``, or ``None`` where it is left as it is."""
    if "forward" in vars(module):
        return None
    if type(module).forward is nn.GELU.forward and module.approximate in _GELU:
        return _GELU[module.approximate].apply
    if type(module).forward is nn.SiLU.forward and not module.inplace:
        return _SILU.apply
    return None


@contextlib.contextmanager
def lane_activations(model: nn.Module) -> Iterator[int]:
    """Route ``model``'s ``nn.GELU`` / ``nn.SiLU`` modules through shared-tangent Functions.

    Yields how many modules were swapped; every swapped module gets its class's ``forward`` back
    on exit.
    """
    swapped = []
    try:
        for module in model.modules():
            new = _replacement(module)
            if new is not None:
                module.forward = new
                swapped.append(module)
        yield len(swapped)
    finally:
        for module in swapped:
            del module.forward
