"""Equivalent module rewrites applied to the read's working copy before anything is measured.

Hugging Face's ``Conv1D`` (GPT-2 and OpenAI GPT: ``c_attn``, ``c_proj``, ``c_fc``) is a linear
map stored transposed: ``y = x W + b`` with ``W`` of shape ``(n_in, n_out)``. The read's factors,
detectors and gauges are written for ``nn.Linear`` (``y = x Wᵀ + b``, ``W`` of shape
``(n_out, n_in)``), so `conv1d_as_linear` replaces every such module of the working copy by an
``nn.Linear`` with weight ``Wᵀ`` and the same bias, under the same module name. The model
function, the parameter names and the parameter count are unchanged, and the read reports layers
and orders, never raw direction tensors, so the rewrite is invisible in a `Reading` except for
``meta["conv1d_as_linear"]``, which lists the modules it rewrote. A ``Conv1D`` whose weight is
shared with another module (a tied parameter) is left alone, since transposing one use would
untie it; it is then reported as not covered.

Subclasses of ``nn.Linear`` (Falcon's ``FalconLinear``, and many research codebases' own) are
outside the detectors' exact-type match, yet usually compute ``x Wᵀ + b`` with another
``forward``. `linear_subclasses_as_linear` replaces such a module by an ``nn.Linear`` holding the
**same** parameter objects (names and ties kept) when its parameters are exactly ``weight`` (and
``bias``) and its output on every probe sample equals ``F.linear`` of its input to
``SAME_MAP_RTOL``; a subclass that computes anything else (extra scaling, masking, adapters)
fails that test and is left alone (then reported as not covered). Under ``torch.distributed``
the decision is reduced over the ranks (a module is rewritten when some rank called it and no
rank saw it differ), so every rank reads the same modules. The read lists the rewritten modules
in ``meta["linear_subclass_as_linear"]``.

`rewrite_as_read` applies to another copy of the model the rewrites a read recorded in its
``meta`` (Hugging Face ``Conv1D``, ``nn.MultiheadAttention`` unpacked by
`neuromanifold.singular.adapt_attention`, ``nn.Linear`` subclasses), without testing them again:
a later pass over the same model (the report's factor spectra) then sees the blocks the read saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = [
    "ADAPT_CHUNK",
    "SAME_MAP_RTOL",
    "conv1d_as_linear",
    "is_hf_conv1d",
    "linear_subclasses_as_linear",
    "rewrite_as_read",
]

SAME_MAP_RTOL = 1e-12
"""Largest ``max|y − F.linear(x, W, b)| / max|F.linear(x, W, b)|`` over a subclass's calls on the
probe samples for which it counts as an ``nn.Linear`` (float64: the same products in another
order differ by rounding only)."""
ADAPT_CHUNK = 64
"""Probe samples per forward pass of `linear_subclasses_as_linear`."""


def is_hf_conv1d(module: nn.Module) -> bool:
    """A Hugging Face ``Conv1D``: class name ``Conv1D``, integer ``nf``/``nx``, weight of shape
    ``(nx, nf)`` and bias of shape ``(nf,)`` (matched by name and shape, no import needed)."""
    if type(module).__name__ != "Conv1D":
        return False
    nf, nx = getattr(module, "nf", None), getattr(module, "nx", None)
    w, b = getattr(module, "weight", None), getattr(module, "bias", None)
    return (
        isinstance(nf, int)
        and isinstance(nx, int)
        and isinstance(w, nn.Parameter)
        and tuple(w.shape) == (nx, nf)
        and isinstance(b, nn.Parameter)
        and tuple(b.shape) == (nf,)
    )


def conv1d_as_linear(model: nn.Module) -> list[str]:
    """Replace, in place, every untied Hugging Face ``Conv1D`` of ``model`` by the equal
    ``nn.Linear`` (weight ``Wᵀ``, same bias, dtype and device); returns the rewritten module names.

    >>> class Conv1D(nn.Module):  # the layout of transformers.pytorch_utils.Conv1D
    ...     def __init__(self, nf, nx):
    ...         super().__init__()
    ...         self.nf, self.nx = nf, nx
    ...         self.weight = nn.Parameter(torch.randn(nx, nf))
    ...         self.bias = nn.Parameter(torch.randn(nf))
    ...     def forward(self, x):
    ...         return x @ self.weight + self.bias
    >>> m = nn.Sequential(Conv1D(3, 2))
    >>> x = torch.randn(4, 2)
    >>> before = m(x)
    >>> conv1d_as_linear(m), type(m[0]).__name__, torch.allclose(m(x), before)
    (['0'], 'Linear', True)
    """
    uses: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        uses[id(p)] = uses.get(id(p), 0) + 1
    done = []
    for name, mod in list(model.named_modules()):
        if not name or not is_hf_conv1d(mod):
            continue
        if uses[id(mod.weight)] > 1 or uses[id(mod.bias)] > 1:
            continue
        w = mod.weight.detach()
        lin = nn.Linear(mod.nx, mod.nf, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            lin.weight.copy_(w.T)
            lin.bias.copy_(mod.bias.detach())
        lin.train(mod.training)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, lin)
        done.append(name)
    return done


def _linear_subclass(module: nn.Module) -> bool:
    """A strict ``nn.Linear`` subclass with no children and parameters ``weight`` (+ ``bias``)."""
    if not isinstance(module, nn.Linear) or type(module) is nn.Linear:
        return False
    names = {n for n, _ in module.named_parameters()}
    return next(module.children(), None) is None and names in ({"weight"}, {"weight", "bias"})


def linear_subclasses_as_linear(model: nn.Module, x: Tensor) -> tuple[list[str], int]:
    """Replace, in place, every ``nn.Linear`` subclass of ``model`` that computes
    ``F.linear(z, W, b)`` of its input ``z`` on every sample of the probe input ``x`` by an
    ``nn.Linear`` holding the same parameter objects (module docstring). Returns the rewritten
    module names and the number of forward passes (chunks of ``ADAPT_CHUNK`` samples; none when
    the model has no such subclass). Modules never called, called with other than one tensor
    argument, or whose output differs are left alone; so are children of
    ``nn.MultiheadAttention`` (read through its own detector). Under ``torch.distributed`` every
    rank must call this (the decision is an all-reduce).

    >>> class Scaled(nn.Linear):
    ...     def forward(self, z):
    ...         return 2 * super().forward(z)
    >>> class Plain(nn.Linear):
    ...     def forward(self, z):
    ...         return z @ self.weight.T + self.bias
    >>> m = nn.Sequential(Plain(3, 4), nn.ReLU(), Scaled(4, 2)).double()
    >>> x = torch.randn(5, 3, dtype=torch.float64)
    >>> before, w = m(x), m[0].weight
    >>> linear_subclasses_as_linear(m, x), type(m[0]).__name__, type(m[2]).__name__
    ((['0'], 1), 'Linear', 'Scaled')
    >>> m[0].weight is w, torch.equal(m(x), before)
    (True, True)
    """
    inside_mha = {
        f"{name}.{child}" if name else child
        for name, mod in model.named_modules()
        if isinstance(mod, nn.MultiheadAttention)
        for child, _ in mod.named_children()
    }
    cands = {
        name: mod
        for name, mod in model.named_modules()
        if name and name not in inside_mha and _linear_subclass(mod)
    }
    if not cands:
        return [], 0
    same: dict[str, bool] = {}

    def equal_map(mod: nn.Module, args: tuple, kwargs: dict, out: object) -> bool:
        if len(args) != 1 or kwargs or not isinstance(args[0], Tensor):
            return False
        ref = nn.functional.linear(args[0], mod.weight, mod.bias)
        if not isinstance(out, Tensor) or out.shape != ref.shape:
            return False
        if ref.numel() == 0:
            return True
        return float((out - ref).abs().max()) <= SAME_MAP_RTOL * float(ref.abs().max())

    def check(name: str):
        def hook(mod: nn.Module, args: tuple, kwargs: dict, out: object) -> None:
            same[name] = same.get(name, True) and equal_map(mod, args, kwargs, out)

        return hook

    handles = [m.register_forward_hook(check(n), with_kwargs=True) for n, m in cands.items()]
    passes = 0
    try:
        with torch.no_grad():
            for start in range(0, x.shape[0], ADAPT_CHUNK):
                model(x[start : start + ADAPT_CHUNK])
                passes += 1
    finally:
        for h in handles:
            h.remove()
    # per module: (saw it differ, called) on this rank; reduced (MAX) over the ranks
    votes = torch.tensor(
        [[float(not same.get(n, True)), float(n in same)] for n in cands], dtype=torch.float64
    )
    if dist.is_available() and dist.is_initialized():
        votes = votes.to(x.device)
        dist.all_reduce(votes, op=dist.ReduceOp.MAX)
    done = []
    for name, (differs, called) in zip(cands, votes.tolist(), strict=True):
        if differs or not called:
            continue
        _as_plain_linear(model, name)
        done.append(name)
    return done, passes


def _as_plain_linear(model: nn.Module, name: str) -> None:
    """Replace the ``nn.Linear`` subclass ``name`` of ``model`` by an ``nn.Linear`` holding the
    same parameter objects (names and ties kept)."""
    mod = model.get_submodule(name)
    lin = nn.Linear(mod.in_features, mod.out_features, bias=mod.bias is not None, device="meta")
    lin.weight = mod.weight
    lin.bias = mod.bias
    lin.train(mod.training)
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name), child, lin)


REWRITE_KEYS = ("conv1d_as_linear", "multihead_as_projections", "linear_subclass_as_linear")
"""The ``meta`` keys of a `Reading` that list the modules its read rewrote, in the read's order."""


def rewrite_as_read(model: nn.Module, meta: Mapping[str, Any]) -> list[str]:
    """Apply to ``model``, in place and in the read's order, the rewrites listed in a reading's
    ``meta`` under `REWRITE_KEYS`; returns the rewritten module names.

    The read decided each rewrite on its probe set (a ``Conv1D`` is rewritten when untied, an
    attention or ``nn.Linear`` subclass when the model's outputs stayed equal); they are applied
    here by name, with no forward pass, so ``model`` must be the model that was read, with its
    weights loaded (the rewritten model has no ``in_proj_weight`` to load a checkpoint into). A
    module that is already rewritten is left as it is and not listed, so a second call returns
    ``[]``. Raises ValueError naming a listed module that ``model`` does not have or that is
    neither of the kind the key says nor its rewrite.

    >>> class Plain(nn.Linear):
    ...     def forward(self, z):
    ...         return z @ self.weight.T + self.bias
    >>> m = nn.Sequential(Plain(3, 2))
    >>> rewrite_as_read(m, {"linear_subclass_as_linear": ["0"]}), type(m[0]).__name__
    (['0'], 'Linear')
    """
    from neuromanifold.singular.adapt_attention import UnpackedAttention

    def to_rewrite(key: str, name: str, before: str, is_before: Any, is_after: Any) -> bool:
        """Whether module ``name`` still needs its rewrite (False: already rewritten)."""
        try:
            mod = model.get_submodule(name)
        except AttributeError as err:
            raise ValueError(
                f"meta[{key!r}] names module {name!r}, which the model does not have: pass the "
                "model that was read"
            ) from err
        if is_before(mod):
            return True
        if is_after(mod):
            return False
        raise ValueError(
            f"meta[{key!r}] names module {name!r}, which the read rewrote from {before}; here it "
            f"is a {type(mod).__name__}: pass the model that was read"
        )

    def plain_linear(mod: nn.Module) -> bool:
        return type(mod) is nn.Linear

    done: list[str] = []
    conv1d = [
        n
        for n in meta.get("conv1d_as_linear") or ()
        if to_rewrite("conv1d_as_linear", n, "a Hugging Face Conv1D", is_hf_conv1d, plain_linear)
    ]
    if conv1d:
        done += [n for n in conv1d_as_linear(model) if n in conv1d]
    for name in meta.get("multihead_as_projections") or ():
        if to_rewrite(
            "multihead_as_projections",
            name,
            "an nn.MultiheadAttention",
            lambda m: isinstance(m, nn.MultiheadAttention),
            lambda m: isinstance(m, UnpackedAttention),
        ):
            packed = model.get_submodule(name)
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name), child, UnpackedAttention(packed))
            done.append(name)
    for name in meta.get("linear_subclass_as_linear") or ():
        if to_rewrite(
            "linear_subclass_as_linear",
            name,
            "an nn.Linear subclass",
            lambda m: isinstance(m, nn.Linear) and not plain_linear(m),
            plain_linear,
        ):
            _as_plain_linear(model, name)
            done.append(name)
    return done
