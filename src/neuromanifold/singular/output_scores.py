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

**Keyed draws.** :func:`keyed_score` draws sample i's label from a generator seeded by a key of
that sample's content (:func:`sample_keys`: a hash of the seed and the sample's float64 or int64
bytes) and the draw's index, not from one stream in sample order. The labels, hence the Monte
Carlo factors, are then the same whatever the batch size, the order of the probe samples, or
how they are sharded over data-parallel ranks (with one stream, rank 1's first sample took the
labels that one process gave sample 0).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F

__all__ = ["hessian_root", "keyed_score", "sample_keys"]


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


def sample_keys(x: Tensor, seed: int) -> list[int]:
    """One 63-bit key per sample of ``x`` (leading axis): BLAKE2b of ``seed`` and the sample's
    bytes, floating samples as float64 (float32 data and its float64 copy key alike)."""
    rows = x.detach().to("cpu")
    rows = rows.to(torch.float64) if rows.is_floating_point() else rows.to(torch.int64)
    rows = rows.reshape(rows.shape[0], -1).contiguous().numpy()
    salt = int(seed).to_bytes(8, "little", signed=True)
    return [
        int.from_bytes(hashlib.blake2b(salt + r.tobytes(), digest_size=8).digest(), "little") >> 1
        for r in rows
    ]


def keyed_score(family: Any, out: Tensor, keys: Sequence[int], draw: int) -> Tensor:
    """``∂ log p(y|out)/∂out`` at a label drawn from the model, shape of ``out``; sample i's random
    numbers come from a generator seeded by ``(keys[i], draw)`` (module docstring, keyed draws).

    Categorical: a uniform ``u`` per position and the label ``y = min{c : Σ_{c' ≤ c} p_c' > u}``
    (inverse CDF, ``y ~ softmax``); Gaussian: ``ε ~ N(0, I)``, score ``ε/σ``.
    """
    if len(keys) != out.shape[0]:
        raise ValueError(f"{len(keys)} sample keys for an output of {out.shape[0]} samples")
    # numpy's seed sequences take the whole key (torch's CPU generator keeps only 32 bits of a
    # seed, so distinct samples shared their draws about N²/2³³ times)
    rngs = [np.random.default_rng([k, draw]) for k in keys]
    name = type(family).__name__.lower()
    if "gauss" in name:
        sigma = float(getattr(family, "sigma", 1.0))
        eps = torch.from_numpy(np.stack([r.standard_normal(out.shape[1:]) for r in rngs]))
        return eps.to(device=out.device, dtype=out.dtype) / sigma
    p = torch.softmax(out, dim=-1)
    u = torch.from_numpy(np.stack([r.random(out.shape[1:-1]) for r in rngs]))
    cdf = torch.cumsum(p.to(torch.float64), dim=-1)
    y = torch.searchsorted(cdf, u.to(cdf.device).unsqueeze(-1), right=True).squeeze(-1)
    y = y.clamp(max=p.shape[-1] - 1)  # u at the rounding edge of cdf[-1] ≈ 1
    return F.one_hot(y, p.shape[-1]).to(out.dtype) - p
