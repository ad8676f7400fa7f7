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

These are the formulas of torch's CPU kernels, so float64 tangents (the read's precision) agree
with torch's to rounding (in bfloat16 or float16 the unfused formulas round more); the
forward values are torch's own kernels (``torch._C._nn.gelu``, ``torch._C._nn.silu``). Zoo ViT
(dim 32, depth 2, GELU MLPs), 16 directions on 16 samples, one thread, six interleaved rounds:
the batched call's median went from 0.164 s to 0.146 s (``gelu_backward`` had been about a tenth
of its profile; at 64 samples it had been 69 of 545 ms profiled).

`lane_activations` applies this to a model's ``nn.GELU`` and ``nn.SiLU`` modules by giving each
an instance ``forward`` (with torch's parameter name ``input``) for the duration of the context
(removed on exit, also on an error). That forward uses the shared tangent only when it is called
exactly as deep in functorch transforms as the caller said (``vmap`` over lanes and ``jvp``),
and torch's own forward otherwise: the Function's tangent ``f'(x) ⊙ ẋ`` is not differentiated
by a further forward-mode level, so a forward that differentiates itself (``torch.func.jvp``,
``jacfwd`` or ``hessian`` inside ``forward``) needs torch's formula there. Left as they are:
in-place SiLU, subclasses that override ``forward``, modules that already carry an instance
``forward``, activations called as functions (``F.gelu`` inside another module's ``forward``),
and every module while torch's GELU or SiLU (the classes' ``forward`` or ``F.gelu``/``F.silu``)
is patched by a shim — all keep torch's formula: slower under many lanes, never different in
value; so do calls made inside a functorch transform that the caller opened around the whole
batched call, and calls under a torch function or dispatch mode. The context changes the
caller's module objects while it is open; another thread calling the same model meanwhile,
outside functorch transforms, runs torch's own forward through it.
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


_TORCH_GELU = torch._C._nn.gelu  # torch's kernels, bound here: a later patch of F.* is not used
_TORCH_SILU = torch._C._nn.silu
_GELU = {
    mode: _shared_tangent(
        f"SharedTangentGELU_{mode}",
        lambda x, mode=mode: _TORCH_GELU(x, approximate=mode),
        lambda x, mode=mode: gelu_derivative(x, mode),
    )
    for mode in ("none", "tanh")
}
_SILU = _shared_tangent("SharedTangentSiLU", _TORCH_SILU, silu_derivative)
_ACTIVATION_MODULE = "torch.nn.modules.activation"


def _torch_owns(fn: object, module: str) -> bool:
    """Whether ``fn`` is torch's own function (defined in ``module``, not a wrapper)."""
    return getattr(fn, "__module__", None) == module and not hasattr(fn, "__wrapped__")


def _unpatched() -> bool:
    """Whether GELU and SiLU are torch's own: ``nn.GELU.forward``, ``nn.SiLU.forward``,
    ``F.gelu``, ``F.silu`` and the kernels ``torch._C._nn.gelu``/``silu`` unpatched, and no
    ``TorchFunctionMode`` or ``TorchDispatchMode`` active (a mode sees every call, the kernels
    inside the Function too).
    A shim or mode (clipping, quantisation, logging) can change the function, and the
    shared-tangent path, whose tangent is torch's GELU or SiLU derivative, must not replace it."""
    return (
        _torch_owns(nn.GELU.forward, _ACTIVATION_MODULE)
        and _torch_owns(nn.SiLU.forward, _ACTIVATION_MODULE)
        and F.gelu is _TORCH_GELU
        and _torch_owns(F.silu, "torch.nn.functional")
        and torch._C._nn.gelu is _TORCH_GELU
        and torch._C._nn.silu is _TORCH_SILU
        and torch._C._len_torch_function_stack() == 0
        and torch._C._len_torch_dispatch_stack() == 0
    )


def _level() -> int:
    """Depth of the functorch transforms around the caller (0 outside any)."""
    return torch._C._functorch.maybe_current_level() or 0


def _replacement(module: nn.Module, level: int) -> Callable[[Tensor], Tensor] | None:
    """The forward that ``module`` gets: the shared-tangent Function when called ``level``
    functorch transforms deep, torch's own forward otherwise; ``None`` where it is left alone.

    The Function's tangent ``f'(x) ⊙ ẋ`` is not differentiated by a further forward-mode level,
    so a module that the model's own forward differentiates (``torch.func.jvp``, ``jacfwd`` or
    ``hessian`` inside ``forward``) runs deeper and keeps torch's formula there.
    """
    if "forward" in vars(module):
        return None
    own = type(module).forward
    if own is nn.GELU.forward and module.approximate in _GELU:
        shared = _GELU[module.approximate]
    elif own is nn.SiLU.forward and not module.inplace:
        shared = _SILU
    else:
        return None
    plain = own.__get__(module)

    def forward(input: Tensor) -> Tensor:  # torch's parameter name: callers may pass input=
        return shared.apply(input) if _level() == level else plain(input)

    return forward


@contextlib.contextmanager
def lane_activations(model: nn.Module, *, depth: int = 2) -> Iterator[int]:
    """Route ``model``'s ``nn.GELU`` / ``nn.SiLU`` modules through shared-tangent Functions.

    ``depth``: the functorch transforms the caller opens inside the context around the model's
    forward (``vmap`` over the lanes and ``jvp``: 2); a module called at any other depth runs
    torch's own forward. Nothing is swapped when the context is entered inside a functorch
    transform (a caller's ``jacfwd`` or ``jvp`` around the whole call would differentiate the
    shared tangent again, which it does not support) or while torch's GELU or SiLU is patched
    (`_unpatched`). Yields how many modules were swapped; every swapped module gets its class's
    ``forward`` back on exit.
    """
    swapped = []
    level = _level() + depth
    try:
        for module in model.modules() if _level() == 0 and _unpatched() else ():
            new = _replacement(module, level)
            if new is not None:
                module.forward = new
                swapped.append(module)
        yield len(swapped)
    finally:
        for module in swapped:
            del module.forward
