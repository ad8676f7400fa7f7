"""Output-space scores of the factor pass: a square root of ``H_out``, or a sampled-label score.

The true Fisher needs ``E_y[g gᵀ]`` with ``g = ∂ log p(y|x)/∂s``; back-propagating the columns of
``S`` with ``S Sᵀ = H_out = E_y[∂_out log p ∂_out log pᵀ]`` gives it exactly (one backward pass
per column), and a label drawn from the model gives an unbiased one-sample estimate:

* Gaussian (``σ``): ``H_out = I/σ²``, ``S = I/σ``; sampled score ``(y − f)/σ² = ε/σ``.
* Categorical (logits ``(N, C)``): ``H_out = diag(p) − ppᵀ``, column ``c`` of ``S`` is
  ``√p_c (e_c − p)``; sampled score ``e_y − p`` with ``y ~ softmax``. Sequence logits
  ``(N, ..., C)`` (one label per position) take the sampled score, one label drawn per position:
  a column of ``S`` back-propagated at every position at once would add the cross-position
  products, which have expectation zero under independent labels.

The family is recognised by its class name (``"gauss"`` in it means Gaussian, anything else is
categorical), as :func:`neuromanifold.singular.factors.kfac_factors` documents.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

__all__ = ["hessian_root", "sampled_score"]


def hessian_root(family: Any, out: Tensor, *, exact_limit: int) -> tuple[str, Tensor | None]:
    """Return ('exact', S) with ``S`` of shape ``(B, C, C)``, ``S Sᵀ = H_out``, or ('mc', None).

    ``C`` is the number of output coordinates per sample: a Gaussian mean of shape ``(N, ...)``
    has ``C`` = the product of its non-sample dimensions, so a scalar regression ``(N,)`` is read
    as ``(N, 1)`` (``C = 1``); categorical logits need a class axis, ``(N, ..., C)``.
    """
    gaussian = "gauss" in type(family).__name__.lower()
    if out.ndim < (1 if gaussian else 2):
        shape = "(N, ...)" if gaussian else "(N, ..., C)"
        raise ValueError(f"model output must have shape {shape}; got {tuple(out.shape)}")
    o = out.reshape(out.shape[0], -1)
    if o.shape[1] > exact_limit:
        return "mc", None
    if gaussian:
        sigma = float(getattr(family, "sigma", 1.0))
        eye = torch.eye(o.shape[1], dtype=o.dtype, device=o.device) / sigma
        return "exact", eye.expand(o.shape[0], -1, -1)
    if out.ndim != 2:
        return "mc", None
    p = torch.softmax(o, dim=-1)
    eye = torch.eye(o.shape[1], dtype=o.dtype, device=o.device)
    # column c: sqrt(p_c) (e_c - p)
    s = (eye.unsqueeze(0) - p.unsqueeze(1)) * p.sqrt().unsqueeze(-1)  # (B, c, C) rows = columns
    return "exact", s.transpose(1, 2)


def sampled_score(family: Any, out: Tensor, gen: torch.Generator) -> Tensor:
    """∂ log p(y|out)/∂out at a label drawn from the model, shape of ``out``."""
    name = type(family).__name__.lower()
    if "gauss" in name:
        sigma = float(getattr(family, "sigma", 1.0))
        eps = torch.randn(out.shape, generator=gen, dtype=out.dtype, device=out.device)
        return eps / sigma  # (y − f)/σ² with y = f + σ ε
    p = torch.softmax(out, dim=-1)
    flat = p.reshape(-1, p.shape[-1])
    y = torch.multinomial(flat, 1, generator=gen).squeeze(-1)
    onehot = F.one_hot(y, p.shape[-1]).to(out.dtype).reshape(p.shape)
    return onehot - p
