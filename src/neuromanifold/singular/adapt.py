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
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["conv1d_as_linear", "is_hf_conv1d"]


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
