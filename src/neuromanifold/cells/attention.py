"""Attention cell: the per-head QK rotation gauge (a curved orbit).

With ``Q = X W_Q``, ``K = X W_K`` (spec layout, ``W ∈ R^{d×d_head}``) the scores ``Q Kᵀ`` depend
only on ``W_Q W_Kᵀ``, which is invariant under ``(W_Q, W_K) → (W_Q R, W_K R)`` for
``R ∈ O(d_head)``. The orbit's tangent at the identity is ``(W_Q S, W_K S)`` with S skew. Along
the straight line ``W(t) = W (I + tS)`` the scores become
``X W_Q (I + tS)(I + tS)ᵀ W_Kᵀ Xᵀ = Q Kᵀ + t² X W_Q S Sᵀ W_Kᵀ Xᵀ`` (S + Sᵀ = 0): the output moves
at order t², an apparent order 2 of a curved gauge. In torch's layout (``weight`` of shape
``(d_head, d)``, ``q = x weightᵀ``) the tangent is ``δweight = Sᵀ weight = −S weight``.

Spec: ``dead_directions.md`` §6.5 (QK rotation generator), §9.1 (QK-rotation gauge).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from neuromanifold.cells._cell import (
    CLASS_CURVED_GAUGE,
    Basis,
    Cell,
    basis_change,
    cell_constructor,
    generator,
    load,
    normalise,
    randn,
)
from neuromanifold.singular.family import Gaussian

__all__ = ["SingleHeadAttention", "qk_rotation"]


class SingleHeadAttention(nn.Module):
    """One softmax attention head with output projection, outputs flattened.

    ``x: (N, T, d) → softmax(Q Kᵀ/√d_head) V W_Oᵀ → (N, T·d)`` with ``Q = x W_qᵀ`` etc.
    Parameters ``q_proj.weight``, ``k_proj.weight``, ``v_proj.weight`` of shape ``(d_head, d)``
    and ``o_proj.weight`` of shape ``(d, d_head)``; no biases, no mask. The names and
    ``num_heads = 1`` follow a layout the attention detector recognises.
    """

    def __init__(self, d: int, d_head: int) -> None:
        super().__init__()
        self.d_head = d_head
        self.num_heads = 1
        self.q_proj = nn.Linear(d, d_head, bias=False)
        self.k_proj = nn.Linear(d, d_head, bias=False)
        self.v_proj = nn.Linear(d, d_head, bias=False)
        self.o_proj = nn.Linear(d_head, d, bias=False)

    def scores(self, x: Tensor) -> Tensor:
        """Pre-softmax scores ``Q Kᵀ/√d_head``, shape ``(N, T, T)``."""
        return self.q_proj(x) @ self.k_proj(x).transpose(-1, -2) / math.sqrt(self.d_head)

    def forward(self, x: Tensor) -> Tensor:
        """Attention output flattened to ``(N, T·d)``."""
        attn = torch.softmax(self.scores(x), dim=-1)
        return self.o_proj(attn @ self.v_proj(x)).flatten(1)


@cell_constructor
def qk_rotation(
    *,
    seed: int = 0,
    n: int = 32,
    tokens: int = 5,
    d: int = 4,
    d_head: int = 3,
    basis: Basis = "canonical",
) -> Cell:
    """Single attention head probed straight along a QK rotation tangent ``(−S W_q, −S W_k)``.

    S is a random skew-symmetric ``d_head × d_head`` matrix; the normalised tangent is both the
    probe and the supplied gauge generator. Expected class: curved gauge. ``basis`` presents the
    head's hidden coordinates in a random orthogonal (or permuted) basis: ``W_q, W_k → R W_q,
    R W_k`` and ``W_v → R' W_v``, ``W_o → W_o R'ᵀ``; the function is unchanged and the tangent
    lifts to ``R·(−S W_q, −S W_k)``, the tangent of the conjugate generator ``R S Rᵀ``.
    """
    if d_head < 2:
        raise ValueError(f"d_head={d_head!r}; expected >= 2 (so(1) is trivial)")
    if not isinstance(tokens, int) or tokens < 2:
        # one key: the softmax is 1 whatever the score, every QK direction is exactly flat
        raise ValueError(f"tokens={tokens!r}; expected >= 2 (with one token the scores cancel)")
    gen = generator(seed)
    model = SingleHeadAttention(d, d_head)
    wq = randn(d_head, d, gen=gen) / math.sqrt(d)
    wk = randn(d_head, d, gen=gen) / math.sqrt(d)
    wv = randn(d_head, d, gen=gen) / math.sqrt(d)
    wo = randn(d, d_head, gen=gen) / math.sqrt(d_head)
    a = randn(d_head, d_head, gen=gen)
    skew = a - a.T
    bgen = generator(seed + 7919)
    r_qk, r_vo = basis_change(d_head, basis, gen=bgen), basis_change(d_head, basis, gen=bgen)
    params = load(
        model,
        {
            "q_proj.weight": r_qk @ wq,
            "k_proj.weight": r_qk @ wk,
            "v_proj.weight": r_vo @ wv,
            "o_proj.weight": wo @ r_vo.T,
        },
    )
    tangent = normalise({"q_proj.weight": -r_qk @ skew @ wq, "k_proj.weight": -r_qk @ skew @ wk})
    return Cell(
        name="qk_rotation" + ("" if basis == "canonical" else f"_{basis}"),
        description=(
            "One attention head, straight probe along the QK rotation tangent (W_Q S, W_K S), "
            "S skew: W_Q W_Kᵀ is invariant to first order, the scores move by "
            "t² X W_Q S Sᵀ W_Kᵀ Xᵀ, F_u ∝ t² — a curved gauge, generator supplied."
        ),
        model=model,
        params=params,
        direction=tangent,
        data=randn(n, tokens, d, gen=gen),
        family=Gaussian(sigma=1.0),
        expected_k=None,
        expected_class=CLASS_CURVED_GAUGE,
        gauge_generators=(tangent,),
        reference="dead_directions.md §6.5 (QK rotation), §9.1 (QK-rotation gauge)",
        meta={"tokens": tokens, "d": d, "d_head": d_head, "basis": basis},
    )
