"""``nn.MultiheadAttention`` rewritten with separate ``nn.Linear`` projections for the read.

``nn.MultiheadAttention`` packs its query, key and value projections into one
``in_proj_weight`` (rows ``[W_Q; W_K; W_V]``) used inside ``F.multi_head_attention_forward``, so
no forward hook sees the projections' inputs and outputs: they get no K-FAC factors, and a dead
direction inside them is never proposed. `multihead_as_projections` replaces, in the read's
working copy, each such module by an `UnpackedAttention` computing the same function with four
``nn.Linear`` children ``q_proj``, ``k_proj``, ``v_proj`` (the row blocks of ``in_proj_weight``
and ``in_proj_bias``, or the separate ``q/k/v_proj_weight`` of a module with ``kdim``/``vdim``)
and ``out_proj``:

    head h:  softmax(q_h k_hᵀ/√d_h + mask) v_h,   q = x_q W_Qᵀ + b_Q, …,   out = concat W_Oᵀ + b_O,

with the module's masks (boolean ``True`` = not attended, float added; ``key_padding_mask``;
``is_causal`` without a mask gives the causal mask), ``batch_first`` and unbatched inputs, and
the averaged or per-head weights when asked. The factors, detectors and gauges then read the
projections as any separate-projection attention (`attention_layout` recognises the children by
name and ``num_heads``). The readings name the projections ``<module>.q_proj`` …, which do not
exist in the caller's model: they stand for the row blocks of ``in_proj_weight``.

A module is rewritten only when it has no ``bias_k``/``bias_v``, no ``add_zero_attn``, no
parameter shared with another module, and the whole model's output on every probe sample
equals the packed one to ``SAME_MAP_RTOL`` after the rewrite (else the module is restored and
reported as not covered, as before). The replacement carries ``in_proj_bias = None`` and
``_qkv_same_embed_dim = False`` as plain attributes so that ``nn.TransformerEncoderLayer`` and
``nn.TransformerEncoder`` never take their fused fast path through it.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor, nn

from neuromanifold.singular.adapt import ADAPT_CHUNK, SAME_MAP_RTOL

__all__ = ["UnpackedAttention", "multihead_as_projections", "unpackable"]


def _copy_linear(weight: Tensor, bias: Tensor | None) -> nn.Linear:
    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    lin = lin.to(dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        lin.weight.copy_(weight)
        if bias is not None:
            lin.bias.copy_(bias)
    return lin


class UnpackedAttention(nn.Module):
    """The function of one ``nn.MultiheadAttention`` (module docstring) with ``nn.Linear``
    projections; built from the packed module by copying its parameters (evaluation only: no
    attention dropout)."""

    def __init__(self, mha: nn.MultiheadAttention) -> None:
        super().__init__()
        e = mha.embed_dim
        self.num_heads, self.head_dim, self.embed_dim = mha.num_heads, e // mha.num_heads, e
        self.batch_first = mha.batch_first
        # plain attributes read by the Transformer layers' fast-path checks: never taken
        self.in_proj_bias = None
        self._qkv_same_embed_dim = False
        b = mha.in_proj_bias
        if mha._qkv_same_embed_dim:
            w = mha.in_proj_weight
            ws = (w[:e], w[e : 2 * e], w[2 * e :])
        else:
            ws = (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)
        bs = (None, None, None) if b is None else (b[:e], b[e : 2 * e], b[2 * e :])
        self.q_proj = _copy_linear(ws[0].detach(), None if bs[0] is None else bs[0].detach())
        self.k_proj = _copy_linear(ws[1].detach(), None if bs[1] is None else bs[1].detach())
        self.v_proj = _copy_linear(ws[2].detach(), None if bs[2] is None else bs[2].detach())
        ob = mha.out_proj.bias
        self.out_proj = _copy_linear(
            mha.out_proj.weight.detach(), None if ob is None else ob.detach()
        )

    def _split(self, z: Tensor) -> Tensor:
        bsz, n, _ = z.shape
        return z.reshape(bsz, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """``(output, weights)`` as ``nn.MultiheadAttention.forward`` in evaluation mode."""
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query[:, None], key[:, None], value[:, None]
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask[None]
        if not self.batch_first or unbatched:  # (L, B, E) → (B, L, E)
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        q = self._split(self.q_proj(query))
        k = self._split(self.k_proj(key))
        v = self._split(self.v_proj(value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, H, L, S)
        n_q, n_k = scores.shape[-2:]
        if attn_mask is None and is_causal:
            attn_mask = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(1)
        if attn_mask is not None:
            mask = attn_mask
            if mask.dim() == 3:  # (B·H, L, S)
                mask = mask.reshape(q.shape[0], self.num_heads, n_q, n_k)
            scores = _masked(scores, mask)
        if key_padding_mask is not None:
            scores = _masked(scores, key_padding_mask[:, None, None, :])
        weights = scores.softmax(dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(q.shape[0], n_q, self.embed_dim)
        out = self.out_proj(out)
        if not self.batch_first or unbatched:
            out = out.transpose(0, 1)
        if unbatched:
            out = out[:, 0]
        if not need_weights:
            return out, None
        w = weights.mean(1) if average_attn_weights else weights
        return out, (w[0] if unbatched else w)


def _masked(scores: Tensor, mask: Tensor) -> Tensor:
    """Boolean ``True`` entries excluded (``−inf``), a float mask added."""
    if mask.dtype == torch.bool:
        return scores.masked_fill(mask, float("-inf"))
    return scores + mask.to(scores.dtype)


def unpackable(module: nn.Module) -> bool:
    """An ``nn.MultiheadAttention`` `UnpackedAttention` can stand for: no ``bias_k``/``bias_v``
    and no ``add_zero_attn``."""
    return (
        isinstance(module, nn.MultiheadAttention)
        and module.bias_k is None
        and module.bias_v is None
        and not module.add_zero_attn
    )


def _shared(model: nn.Module, name: str, module: nn.Module) -> bool:
    """Whether ``module`` (registered as ``name``) or one of its parameters is also registered
    under another name: the module itself used twice (``self.b = self.a``), or its ``out_proj``
    or a weight also held by another module. Duplicates are listed explicitly
    (``remove_duplicate=False``), since ``modules()`` and ``parameters()`` name each object once."""
    if sum(m is module for _, m in model.named_modules(remove_duplicate=False)) > 1:
        return True
    own = {id(p) for p in module.parameters()}
    prefix = f"{name}."
    return any(
        id(p) in own and not key.startswith(prefix)
        for key, p in model.named_parameters(remove_duplicate=False)
    )


def _outputs(model: nn.Module, x: Tensor) -> list[Tensor]:
    with torch.no_grad():
        return [model(x[i : i + ADAPT_CHUNK]) for i in range(0, x.shape[0], ADAPT_CHUNK)]


def _relative_change(before: list[Tensor], after: list[Tensor]) -> float:
    diff = max(float((a - b).abs().max()) for a, b in zip(after, before, strict=True))
    scale = max(float(b.abs().max()) for b in before)
    return diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)


def multihead_as_projections(model: nn.Module, x: Tensor) -> tuple[list[str], int]:
    """Replace, in place, each unpackable, untied ``nn.MultiheadAttention`` of ``model`` by its
    `UnpackedAttention`, kept only where the model's outputs on the probe input ``x`` stay equal
    to ``SAME_MAP_RTOL`` relative (module docstring). Returns the rewritten module names and the
    number of forward passes (chunks of ``ADAPT_CHUNK`` samples). Under ``torch.distributed``
    every rank must call this (each decision is an all-reduce of the change, maximum).

    >>> layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0)
    >>> model = nn.Sequential(layer).double().eval()
    >>> x = torch.randn(3, 4, 8, dtype=torch.float64)
    >>> before = model(x)
    >>> names, _ = multihead_as_projections(model, x)
    >>> names, type(model[0].self_attn).__name__, torch.allclose(model(x), before, atol=1e-12)
    (['0.self_attn'], 'UnpackedAttention', True)
    """
    targets = [
        name
        for name, mod in model.named_modules()
        if name and unpackable(mod) and not _shared(model, name, mod)
    ]
    if not targets:
        return [], 0
    before = _outputs(model, x)
    passes = len(before)
    done = []
    for name in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        packed = getattr(parent, attr)
        setattr(parent, attr, UnpackedAttention(packed))
        try:
            after = _outputs(model, x)
            change = _relative_change(before, after)
        except (RuntimeError, ValueError, TypeError):  # a call the replacement does not take
            change = math.inf
        passes += len(before)
        if dist.is_available() and dist.is_initialized():
            stat = torch.tensor([change], dtype=torch.float64, device=x.device)
            dist.all_reduce(stat, op=dist.ReduceOp.MAX)
            change = float(stat)
        if change <= SAME_MAP_RTOL:
            done.append(name)
        else:
            setattr(parent, attr, packed)
    return done, passes
