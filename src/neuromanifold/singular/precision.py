"""Which steps of a float64 forward compute in a lower precision (s27 trial HF D3).

The read evaluates every model in float64 (parameters and floating inputs up-cast), but a model
can still take a step in float32 on its own: Hugging Face's eager attention in ViT and the
Llama family takes its softmax with ``dtype=torch.float32`` and casts back. What passes through
such a step carries float32 rounding (``≈ 6e-8`` relative), so a tangent ``J u`` that cancels
there leaves a residue near ``1e-16`` of ``F``'s scale instead of ``1e-32``, and the finite
orbit checks round at ``~1e-7``. `lower_precision_steps` runs one forward under a
``TorchFunctionMode`` and names every torch function that returned a floating tensor of a lower
precision; `lower_precision_note` says so in the reading.

`promote_forward` removes those steps instead (the read's default): the model's forward then runs
under `Float64Steps`, a ``TorchFunctionMode`` that turns every request for a lower floating dtype
into float64 — a ``dtype=torch.float32`` argument (``softmax(..., dtype=torch.float32)``), a
lower dtype passed to ``Tensor.to``, ``Tensor.float()``/``half()``/``bfloat16()`` — with the
default dtype set to float64 for the tensors the forward creates. The model read is then the
float64 evaluation of the same function (the one the read's derivatives are about), not the
mixed-precision program; constants the model stores already rounded (a float32 ``inv_freq``
table up-cast by ``.double()``) stay as stored.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.overrides import TorchFunctionMode, resolve_name

__all__ = [
    "LOWER_PRECISION",
    "PRECISION_SAMPLES",
    "Float64Steps",
    "LowerPrecisionRecorder",
    "lower_precision_note",
    "lower_precision_steps",
    "promote_forward",
    "promoted_model",
    "promoted_note",
]

PRECISION_SAMPLES = 16
"""Probe samples of the one forward that looks for steps below float64: the read's first
``GRAPH_SAMPLES`` (`neuromanifold.singular.read`, which is this number) and `read_direction`'s
(s28c audit RERUN: at 8 against the read's 16, a step only a later sample takes was promoted by
the read and not by `read_direction`)."""
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


def _named(steps: dict[str, str]) -> str:
    """``"f → dtype, …"`` for the first ``NOTE_STEPS`` steps, ``" and n more"`` for the rest."""
    named = ", ".join(f"{k} → {v}" for k, v in list(steps.items())[:NOTE_STEPS])
    return named + (f" and {len(steps) - NOTE_STEPS} more" if len(steps) > NOTE_STEPS else "")


def lower_precision_note(steps: dict[str, str]) -> str:
    """The reading's clause for `lower_precision_steps`'s result (``""`` when empty)."""
    if not steps:
        return ""
    return (
        f"the model computes part of its forward below float64 ({_named(steps)}), whatever the "
        "read's float64: values through those steps carry that precision's rounding (float32: "
        "~6e-8 relative), so F along a direction that cancels there sits near 1e-16 of its "
        "scale rather than 1e-32, and a flat direction through them can read unresolved"
    )


_DOWNCASTS = (Tensor.float, Tensor.half, Tensor.bfloat16)


def _float64(value: Any) -> Any:
    """``torch.float64`` for a lower floating dtype (`LOWER_PRECISION`), else ``value``."""
    return torch.float64 if isinstance(value, torch.dtype) and value in LOWER_PRECISION else value


class Float64Steps(TorchFunctionMode):
    """Runs a forward's lower-precision steps in float64 (module docstring): a lower floating
    dtype among a call's arguments or as its ``dtype=`` becomes float64, and ``Tensor.float()``,
    ``half()`` and ``bfloat16()`` become ``Tensor.double()``; the default dtype is float64 while
    the mode is active. Integer and boolean dtypes are left alone."""

    def __enter__(self) -> Float64Steps:
        self._default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            torch.set_default_dtype(self._default)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = {k: _float64(v) for k, v in (kwargs or {}).items()}
        if func in _DOWNCASTS:
            kwargs.pop("dtype", None)
            return Tensor.double(args[0], *args[1:], **kwargs)
        return func(*(_float64(a) for a in args), **kwargs)


def _promoted_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    with Float64Steps():
        return type(self).forward(self, *args, **kwargs)


def promote_forward(model: nn.Module) -> bool:
    """Make ``model``'s own forward run under `Float64Steps` (in place: an instance attribute
    ``forward``, a method bound to ``model``, so that a deep copy of the module is bound to the
    copy). Every way of calling the module — ``model(x)``, ``functional_call``, ``jvp`` and
    ``vmap`` over it — goes through it. A module that already holds a ``forward`` of its own
    (an instance attribute, not its class's) is left as it is: ``False``; else ``True``.

    >>> class Half(nn.Module):
    ...     def forward(self, x):
    ...         return torch.softmax(x, -1, dtype=torch.float32).double()
    >>> m = Half()
    >>> promote_forward(m), promote_forward(m)
    (True, False)
    >>> lower_precision_steps(m, torch.zeros(2, 3, dtype=torch.float64))
    {}
    """
    if "forward" in vars(model):
        return False
    model.forward = types.MethodType(_promoted_forward, model)
    return True


def promoted_model(model: nn.Module, state: Mapping[str, Tensor], x: Tensor) -> nn.Module:
    """``model``, or a shallow copy of it whose forward runs under `Float64Steps` when its
    forward on ``x`` with the tensors ``state`` (float64 parameters and buffers, by name) takes a
    step below float64 and the module holds no forward of its own (`promote_forward`). The copy
    shares every submodule, parameter and buffer with ``model``, which is not changed.

    >>> class Half(nn.Module):
    ...     def forward(self, x):
    ...         return torch.softmax(x, -1, dtype=torch.float32).double()
    >>> m, x = Half(), torch.zeros(2, 3, dtype=torch.float64)
    >>> p = promoted_model(m, {}, x)
    >>> p is m, "forward" in vars(p), "forward" in vars(m)
    (False, True, False)
    """
    with torch.no_grad(), (rec := LowerPrecisionRecorder()):
        functional_call(model, dict(state), (x,))
    if not rec.steps or "forward" in vars(model):
        return model
    view = copy.copy(model)  # its own attribute table (the forward set below), shared modules
    promote_forward(view)
    return view


def promoted_note(steps: dict[str, str]) -> str:
    """The reading's clause for the steps `promote_forward` ran in float64 (``""`` when none)."""
    if not steps:
        return ""
    return (
        f"the model's forward takes steps below float64 ({_named(steps)}); the read ran them in "
        "float64 (promote=False, --keep-precision, reads the mixed-precision program as it is)"
    )
